//! The tick: the city's growth, the sweep of silent sessions, and each client's snapshot
//! (full, or a delta against its acknowledged tick).

use super::*;

impl ZergCityServer {
    pub(super) fn step(&mut self, now: Instant) {
        self.tick += 1;
        let tick = self.tick;
        self.grow(tick);
        self.world.tick = tick;
        let h = (tick as usize) % HISTORY;
        self.history[h].copy_from(&self.world);
        self.sweep(now);
        self.send_snapshots(tick);
    }

    /// A twentieth of the structures change each tick; treasuries once a second.
    pub(super) fn grow(&mut self, tick: u64) {
        let phase = (tick % 20) as u32;
        let mut has_conduit = [false; MAX_PLAYERS];
        for e in &self.world.entities {
            let o = usize::from(e.owner().unwrap_or(0));
            if (1..=MAX_PLAYERS).contains(&o) {
                has_conduit[o - 1] |= e.archetype == world::ARCH_CONDUIT;
            }
        }
        for e in self.world.entities.iter_mut() {
            if e.id % 20 != phase {
                continue;
            }
            let o = usize::from(e.owner().unwrap_or(0))
                .saturating_sub(1)
                .min(MAX_PLAYERS - 1);
            let roll: u32 = self.rng.random_range(0..4);
            match e.archetype {
                world::ARCH_BUILDING => {
                    let Some(b) = e.get(world::COMP_BUILDING) else {
                        continue;
                    };
                    let mut b: [u8; 16] = b.try_into().unwrap_or([0; 16]);
                    let level = b[5].clamp(1, 3);
                    let cap = u32::from(level) * 40;
                    let pop = (read_u32(&b, 12) + roll).min(cap);
                    b[4] = 2; // operating
                    if pop == cap && level < 3 {
                        b[5] = level + 1;
                    }
                    b[12..16].copy_from_slice(&pop.to_le_bytes());
                    e.set(world::COMP_BUILDING, &b);
                    e.set(world::COMP_POPULATION, &u32_pair(pop, pop / 2));
                    let demand = pop / 2 + 1;
                    let supplied = if has_conduit[o] { demand } else { demand / 2 };
                    e.set(world::COMP_ENERGY, &u32_pair(demand, supplied));
                }
                world::ARCH_ZONE => {
                    let Some(z) = e.get(world::COMP_ZONE) else {
                        continue;
                    };
                    let mut z: [u8; 8] = z.try_into().unwrap_or([0; 8]);
                    let dev = (u16::from_le_bytes([z[4], z[5]]) + roll as u16).min(100);
                    z[4..6].copy_from_slice(&dev.to_le_bytes());
                    e.set(world::COMP_ZONE, &z);
                    let area = u32::from(z[2]) * u32::from(z[3]);
                    let pop = u32::from(dev) * area / 4;
                    e.set(world::COMP_POPULATION, &u32_pair(pop, pop / 3));
                }
                world::ARCH_CONDUIT | world::ARCH_PIPE => {
                    let c = if e.archetype == world::ARCH_CONDUIT {
                        world::COMP_ENERGY
                    } else {
                        world::COMP_FLUID
                    };
                    let load = self.rng.random_range(0..100);
                    e.set(c, &u32_pair(load, 100));
                }
                world::ARCH_ROAD => {
                    let traffic: u16 = self.rng.random_range(0..500);
                    let mut t = [codec::INPUT_PLACE_ROAD, 0, 0, 0];
                    t[2..4].copy_from_slice(&traffic.to_le_bytes());
                    e.set(world::COMP_TRANSPORT, &t);
                }
                _ => {}
            }
        }
        if tick % u64::from(self.cfg.tick_rate.max(1)) == 0 {
            for p in 0..MAX_PLAYERS {
                let owner = p as u8 + 1;
                let pop: u32 = self
                    .world
                    .entities
                    .iter()
                    .filter(|e| e.owner() == Some(owner) && e.archetype != world::ARCH_PLAYER)
                    .filter_map(|e| e.get(world::COMP_POPULATION).map(|b| read_u32(b, 0)))
                    .sum();
                if let Some(pl) = self.players[p].as_mut() {
                    pl.funds += i64::from(pop) * i64::from(pl.tribute) / 10 + 50;
                }
                self.write_treasury(p);
            }
        }
    }

    pub(super) fn sweep(&mut self, now: Instant) {
        let mut expired = std::mem::take(&mut self.expired);
        self.sessions
            .expired_into(now, self.cfg.client_timeout, &mut expired);
        for &s in &expired {
            let Some(conn) = self.sessions.get(s).map(|x| x.conn) else {
                continue;
            };
            self.stats.timed_out += 1;
            self.queue(
                conn,
                Out::Disconnect {
                    reason: DISCONNECT_TIMEOUT,
                    text: "timed out",
                },
            );
            self.end_session(s);
        }
        self.expired = expired;
        for p in 0..MAX_PLAYERS {
            let gone = self.players[p]
                .as_ref()
                .is_some_and(|pl| pl.conn.is_none() && pl.token_expires <= now);
            if gone {
                self.stats.events.add("token_expired", 1);
                self.leave(p);
            }
        }
    }

    pub(super) fn send_snapshots(&mut self, tick: u64) {
        let mut sends = std::mem::take(&mut self.sends);
        for (_, s) in self.sessions.iter_mut() {
            let c = &mut s.state;
            if c.stage != Stage::Playing || c.full_pending.is_some() {
                continue;
            }
            let base = c
                .acked
                .filter(|&a| tick - a <= self.cfg.max_delta_age)
                .filter(|&a| self.history[(a as usize) % HISTORY].tick == a);
            match (base, c.acked) {
                (Some(a), _) => sends.push((
                    s.conn,
                    Out::Delta {
                        base: a,
                        target: tick,
                    },
                )),
                (None, acked) => {
                    if acked.is_some() {
                        self.stats.events.add("full_snapshot_fallbacks", 1);
                    }
                    c.full_pending = Some(tick);
                    sends.push((s.conn, Out::Full { tick }));
                }
            }
        }
        for (conn, o) in sends.drain(..) {
            self.queue(conn, o);
        }
        self.sends = sends;
    }
}
