//! A client's way in: CONNECT (tokens, allow list, room, rate), its spawn, refusals and kicks.

use super::*;

impl DarkAgesServer {
    /// Where a new player starts: near the border towards a neighbour, if there is one.
    pub(super) fn spawn_pos(&mut self) -> [f32; 3] {
        let h = self.cfg.zone_half;
        let band = self.cfg.spawn_band.clamp(ENTRY_MARGIN * 2.0, h);
        let x = if self.cfg.east.is_some() {
            self.rng.random_range(h - band..=h - ENTRY_MARGIN)
        } else if self.cfg.west.is_some() {
            self.rng.random_range(-h + ENTRY_MARGIN..=-h + band)
        } else {
            self.rng.random_range(-h * 0.5..=h * 0.5)
        };
        let z = self.rng.random_range(-h * 0.8..=h * 0.8);
        grid([x, 0.0, z])
    }

    pub(super) fn new_client(
        &mut self,
        now: Instant,
        entity: u32,
        pos: [f32; 3],
        health: u8,
    ) -> Client {
        let n = self.cfg.baselines.max(1);
        Client {
            entity,
            playing: false,
            challenge: 0,
            wrong_proofs: 0,
            pos,
            yaw: 0.0,
            flags: 0,
            health,
            seq: SequenceValidator::default(),
            tokens: self.cfg.input_burst,
            refilled: now,
            invalid: Window::new(now),
            rate_drops: Window::new(now),
            bytes: Window::new(now),
            ack: None,
            history: (0..n).map(|_| (0, Vec::new())).collect(),
            hist_len: 0,
            hist_head: 0,
            snap: vec![0; codec::MTU],
            snap_len: 0,
            events: Vec::with_capacity(8),
            handoff: None,
            next_fire: now,
            handed_in: false,
        }
    }

    pub(super) fn on_connect(
        &mut self,
        now: Instant,
        from: ConnId,
        c: &codec::Connect,
        len: usize,
    ) {
        if let Some(slot) = self.sessions.slot_of(from) {
            self.stats.events.add("connect_repeated", 1);
            self.sessions.credit(slot, len);
            let proven = self.sessions.is_proven(from);
            if self.sessions.may_reply(slot) {
                self.send(from, Msg::Ack(slot));
                if !proven {
                    self.send(from, Msg::Challenge(slot));
                }
            } else {
                self.stats.events.add("handshake_rate_limited", 1);
            }
            return;
        }
        if c.protocol_version != codec::PROTOCOL_VERSION {
            self.refuse(from, result::VERSION_MISMATCH, "protocol version mismatch");
            return;
        }
        if let Some(&t) = self.recent_connects.get(&from) {
            if now.saturating_duration_since(t) < self.cfg.connect_interval {
                self.stats.dropped.add2("connect", "rate_limited", 1);
                return;
            }
        }
        if self.sessions.len() >= self.cfg.max_clients {
            // Forged CONNECTs must not keep real players out: the oldest unproven session
            // gives its slot up.
            if let Some(slot) = self.sessions.oldest_unproven(now) {
                self.stats.events.add("unproven_evicted", 1);
                self.sessions.remove(slot);
                self.stats.clients = self.sessions.len();
            }
        }
        if self.sessions.len() >= self.cfg.max_clients {
            self.refuse(from, result::SERVER_FULL, "server full");
            return;
        }
        let has_token = c.auth_token.iter().any(|&b| b != 0);
        let (entity, pos, health, handed_in) = if has_token {
            let mut t = [0u8; TOKEN_LEN];
            t.copy_from_slice(&c.auth_token[..TOKEN_LEN]);
            let tail_clean = c.auth_token[TOKEN_LEN..].iter().all(|&b| b == 0);
            let opened = if tail_clean {
                HandoffToken::open(&t, self.cfg.secret, self.cfg.zone, self.wall_ms(now))
            } else {
                Err(super::super::codec::token::TokenError::BadMac)
            };
            match opened {
                Ok(tok) => {
                    // A stale session of the same entity (its DISCONNECT lost) gives way.
                    let stale = self
                        .sessions
                        .iter()
                        .find(|(_, s)| s.state.entity == tok.entity_id)
                        .map(|(slot, _)| slot);
                    if let Some(slot) = stale {
                        self.stats.events.add("handoff_replaced_stale", 1);
                        self.sessions.remove(slot);
                    }
                    let h = self.cfg.zone_half;
                    let x = if tok.from_west {
                        -h + ENTRY_MARGIN
                    } else {
                        h - ENTRY_MARGIN
                    };
                    let z = codec::dequantize_pos(tok.entry_z).clamp(-h, h);
                    self.stats.events.add("handoff_in", 1);
                    (tok.entity_id, grid([x, 0.0, z]), tok.health.max(1), true)
                }
                Err(e) => {
                    self.stats.events.add2("handoff_refused", e.name(), 1);
                    self.refuse(from, result::AUTH_FAILED, e.message());
                    return;
                }
            }
        } else {
            let id = self.alloc_id();
            let pos = self.spawn_pos();
            (id, pos, 100, false)
        };
        let mut client = self.new_client(now, entity, pos, health);
        client.handed_in = handed_in;
        client.challenge = self.challenges.random();
        let slot = self.sessions.insert(from, now, client);
        self.sessions.credit(slot, len);
        self.sessions.may_reply(slot);
        self.recent_connects.insert(from, now);
        self.stats.accepted += 1;
        self.stats.clients = self.sessions.len();
        self.send(from, Msg::Ack(slot));
        self.send(from, Msg::Challenge(slot));
        if handed_in {
            self.send(from, Msg::ZoneEnter(slot));
        }
        if let Some(s) = self.sessions.get_mut(slot) {
            s.state
                .events
                .push(ServerEvent::System("welcome to DarkAges"));
        }
    }

    pub(super) fn refuse(&mut self, to: ConnId, result: u8, message: &'static str) {
        self.stats.refused += 1;
        self.send(to, Msg::Refuse { result, message });
        self.sessions.close(to);
    }

    pub(super) fn kick(&mut self, slot: usize, reason: u8, message: &'static str) {
        let Some(conn) = self.sessions.get(slot).map(|s| s.conn) else {
            return;
        };
        self.stats.events.add2("kicked", reason::name(reason), 1);
        self.send(conn, Msg::Disconnect { reason, message });
        self.sessions.remove(slot);
        self.stats.clients = self.sessions.len();
    }
}
