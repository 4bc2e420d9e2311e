//! A client's way in and out: ClientHello (refusals, a reconnection's token and slot), the
//! join of a player, its leave.

use super::*;

impl ZergCityServer {
    pub(super) fn players_connected(&self) -> u32 {
        self.players
            .iter()
            .flatten()
            .filter(|p| p.conn.is_some())
            .count() as u32
    }

    pub(super) fn refuse(&mut self, s: usize, conn: ConnId, result: HelloResult) {
        self.stats.refused += 1;
        self.stats.events.add2("refused", result.name(), 1);
        let players = self.players_connected();
        self.queue(
            conn,
            Out::Hello {
                result,
                slot: 0,
                token: [0; TOKEN_LEN],
                players,
            },
        );
        self.end_session(s);
    }

    pub(super) fn on_hello(
        &mut self,
        now: Instant,
        s: usize,
        conn: ConnId,
        name: &str,
        token: [u8; 16],
        req: u32,
    ) {
        let stage = self.sessions.state(s).map(|c| c.stage);
        if stage != Some(Stage::Hello) {
            self.stats.events.add("duplicate_hello", 1);
            return;
        }
        // A live token takes its slot back.
        let by_token = (token != [0; TOKEN_LEN])
            .then(|| {
                self.players.iter().position(|p| {
                    p.as_ref()
                        .is_some_and(|p| p.token == token && p.token_expires > now)
                })
            })
            .flatten();
        if token != [0; TOKEN_LEN] && by_token.is_none() {
            self.stats.events.add("invalid_token", 1);
        }
        let slot = match by_token {
            Some(p) => {
                let old = self.players[p].as_ref().and_then(|pl| pl.conn);
                if let Some(old) = old.filter(|&o| o != conn) {
                    if let Some(os) = self.sessions.slot_of(old) {
                        self.end_session(os);
                    }
                }
                self.stats.events.add("reconnect_restored", 1);
                p
            }
            None => {
                let free = |p: usize| p < self.cfg.max_players && self.players[p].is_none();
                let want = usize::try_from(req).ok().filter(|&r| free(r));
                match want.or_else(|| (0..self.cfg.max_players).find(|&p| free(p))) {
                    Some(p) => {
                        self.join(now, p, name);
                        p
                    }
                    None => return self.refuse(s, conn, HelloResult::ServerFull),
                }
            }
        };
        let Some(p) = self.players[slot].as_mut() else {
            return;
        };
        p.conn = Some(conn);
        p.token_expires = now + self.cfg.token_ttl;
        let token = p.token;
        if let Some(c) = self.sessions.state_mut(s) {
            c.stage = Stage::Playing;
            c.slot = Some(slot);
            c.acked = None;
            c.full_pending = None;
        }
        self.stats.accepted += 1;
        let players = self.players_connected();
        self.queue(
            conn,
            Out::Hello {
                result: HelloResult::Accepted,
                slot: slot as u8,
                token,
                players,
            },
        );
    }

    /// A new player in slot `p`: a token and the player's entity.
    pub(super) fn join(&mut self, now: Instant, p: usize, name: &str) {
        let mut token = [0u8; TOKEN_LEN];
        self.rng.fill_bytes(&mut token);
        let id = self.alloc_entity();
        let mut e = Entity::new(id, world::ARCH_PLAYER);
        e.set(
            world::COMP_OWNERSHIP,
            &ownership_bytes(p as u8 + 1, self.tick),
        );
        self.world.insert(e);
        self.players[p] = Some(Player {
            name: name.chars().take(32).collect(),
            token,
            token_expires: now + self.cfg.token_ttl,
            conn: None,
            entity: id,
            funds: self.cfg.starting_funds,
            tribute: 10,
            parcels: 0,
            structures: 0,
        });
        self.write_treasury(p);
    }

    /// Free slot `p` for good: the player's entities go with it.
    pub(super) fn leave(&mut self, p: usize) {
        let Some(pl) = self.players[p].take() else {
            return;
        };
        let owner = p as u8 + 1;
        let ids: Vec<u32> = self
            .world
            .entities
            .iter()
            .filter(|e| e.owner() == Some(owner))
            .map(|e| e.id)
            .collect();
        for id in ids {
            self.destroy(id);
        }
        self.world.remove(pl.entity);
        for o in self.owner.iter_mut().filter(|o| **o == owner) {
            *o = 0;
        }
    }
}
