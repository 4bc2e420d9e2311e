//! The zone's simulation: inputs applied, the tick (borders and handoffs, projectiles and
//! hits, loot).

use super::*;

#[derive(Debug, Clone, Copy)]
pub(super) struct Projectile {
    pub(super) id: u32,
    pub(super) pos: [f32; 3],
    pub(super) vel: [f32; 3],
    pub(super) owner: u32,
    pub(super) expires: Instant,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Loot {
    pub(super) id: u32,
    pub(super) pos: [f32; 3],
}

impl DarkAgesServer {
    pub(super) fn on_input(&mut self, now: Instant, slot: usize, inp: &codec::Input) {
        let half = self.cfg.zone_half;
        let (west, east) = (self.cfg.west.is_some(), self.cfg.east.is_some());
        let (rate, burst) = (self.cfg.input_rate, self.cfg.input_burst);
        let kick_at = self.cfg.invalid_kick_per_s;
        let Some(c) = self.sessions.get_mut(slot).map(|s| &mut s.state) else {
            return;
        };
        if !c.playing {
            c.playing = true;
            self.stats.events.add("input_before_connected", 1);
        }
        // Rate limit: a token bucket of `rate` per second holding at most `burst`.
        let dt = now.saturating_duration_since(c.refilled).as_secs_f32();
        c.tokens = (c.tokens + dt * rate).min(burst);
        c.refilled = now;
        if c.tokens < 1.0 {
            self.stats.events.add("input_rate_limited", 1);
            if c.rate_drops.add(now, 1) > rate as u32 {
                self.kick(slot, reason::RATE_LIMITED, "too many inputs");
            }
            return;
        }
        c.tokens -= 1.0;
        let why = match c.seq.check(inp.sequence) {
            Err(r) => Some(r),
            Ok(gap) => {
                if gap > 0 {
                    self.stats.events.add("input_sequence_gaps", u64::from(gap));
                }
                invalid_reason(inp.flags, inp.yaw, inp.pitch)
            }
        };
        if let Some(r) = why {
            self.stats.events.add2("input_invalid", r, 1);
            if c.invalid.add(now, 1) > kick_at {
                self.kick(slot, reason::CHEAT_DETECTED, "invalid input");
            }
            return;
        }
        c.ack = inp.last_received_tick;
        c.flags = inp.flags;
        c.yaw = inp.yaw;
        let mut p = step(c.pos, inp.flags, inp.yaw, half);
        if !west {
            p[0] = p[0].max(-half);
        }
        if !east {
            p[0] = p[0].min(half);
        }
        c.pos = p;
        if inp.flags & input::ATTACK != 0 && now >= c.next_fire {
            c.next_fire = now + FIRE_INTERVAL;
            let (s, co) = inp.yaw.sin_cos();
            let (pos, owner) = (
                grid([c.pos[0] + co * 1.1, 0.0, c.pos[2] + s * 1.1]),
                c.entity,
            );
            let id = self.alloc_id();
            self.projectiles.push(Projectile {
                id,
                pos,
                vel: [co * PROJECTILE_SPEED, 0.0, s * PROJECTILE_SPEED],
                owner,
                expires: now + PROJECTILE_LIFE,
            });
        }
    }

    pub(super) fn step_world(&mut self, now: Instant) {
        self.tick = self.tick.wrapping_add(1);
        let mut expired = std::mem::take(&mut self.expired);
        self.sessions
            .expired_into(now, self.cfg.client_timeout, &mut expired);
        for &slot in &expired {
            self.stats.timed_out += 1;
            self.sessions.remove(slot);
        }
        self.expired = expired;
        self.stats.clients = self.sessions.len();
        if self.tick % self.cfg.tick_hz.max(1) == 0 {
            let interval = self.cfg.connect_interval;
            self.recent_connects
                .retain(|_, t| now.saturating_duration_since(*t) < interval);
        }
        self.borders(now);
        self.projectiles_step(now);
        self.loot_step();
        if self.tick % self.cfg.snapshot_step.max(1) == 0 {
            self.snapshot_all();
        }
        let mut targets = std::mem::take(&mut self.targets);
        targets.clear();
        for (slot, s) in self.sessions.iter() {
            // Events wait until the address is proven (admission rule 1).
            if s.proven && !s.state.events.is_empty() {
                targets.push((s.conn, slot));
            }
        }
        for &(conn, slot) in &targets {
            self.send(conn, Msg::Events(slot));
        }
        self.targets = targets;
    }

    pub(super) fn borders(&mut self, now: Instant) {
        let h = self.cfg.zone_half;
        let timeout = self.cfg.handoff_timeout;
        let resend = self.cfg.handoff_resend;
        let wall = self.wall_ms(now);
        let mut sends = std::mem::take(&mut self.targets);
        sends.clear();
        for (slot, s) in self.sessions.iter_mut() {
            let c = &mut s.state;
            if !c.playing {
                continue;
            }
            match c.handoff {
                Some(mut p) => {
                    if now >= p.deadline {
                        c.handoff = None;
                        c.pos[0] = if p.east {
                            h - ENTRY_MARGIN
                        } else {
                            -h + ENTRY_MARGIN
                        };
                        self.stats.events.add("handoff_cancelled", 1);
                    } else if now >= p.resend_at {
                        p.resend_at = now + resend;
                        c.handoff = Some(p);
                        self.stats.events.add("handoff_resent", 1);
                        sends.push((s.conn, slot));
                    }
                }
                None => {
                    let east = c.pos[0] > h && self.cfg.east.is_some();
                    let west = c.pos[0] < -h && self.cfg.west.is_some();
                    if !(east || west) {
                        continue;
                    }
                    self.nonce = self.nonce.wrapping_add(1);
                    let to_zone = if east {
                        self.cfg.zone + 1
                    } else {
                        self.cfg.zone.wrapping_sub(1)
                    };
                    let token = HandoffToken {
                        entity_id: c.entity,
                        to_zone,
                        expires_at_ms: wall + timeout.as_millis() as u64,
                        entry_z: codec::quantize_pos(c.pos[2]),
                        from_west: east,
                        health: c.health,
                        nonce: self.nonce,
                    }
                    .seal(self.cfg.secret);
                    c.handoff = Some(PendingHandoff {
                        east,
                        token,
                        deadline: now + timeout,
                        resend_at: now + resend,
                    });
                    self.stats.events.add("handoff_started", 1);
                    sends.push((s.conn, slot));
                }
            }
        }
        for &(conn, slot) in &sends {
            self.send(conn, Msg::Handoff(slot));
        }
        self.targets = sends;
    }

    pub(super) fn projectiles_step(&mut self, now: Instant) {
        let dt = 1.0 / self.cfg.tick_hz.max(1) as f32;
        let mut hits = std::mem::take(&mut self.hits);
        hits.clear();
        let sessions = &self.sessions;
        self.projectiles.retain_mut(|p| {
            p.pos = grid([p.pos[0] + p.vel[0] * dt, 0.0, p.pos[2] + p.vel[2] * dt]);
            if now >= p.expires {
                return false;
            }
            let hit = sessions.iter().find(|(_, s)| {
                s.state.entity != p.owner
                    && s.state.playing
                    && dist2(s.state.pos, p.pos) < HIT_RADIUS * HIT_RADIUS
            });
            match hit {
                Some((_, s)) => {
                    hits.push((s.state.entity, p.owner));
                    false
                }
                None => true,
            }
        });
        for &(victim, attacker) in &hits {
            self.hit(victim, attacker);
        }
        self.hits = hits;
    }

    pub(super) fn hit(&mut self, victim: u32, attacker: u32) {
        let Some(vslot) = self
            .sessions
            .iter()
            .find(|(_, s)| s.state.entity == victim)
            .map(|(i, _)| i)
        else {
            return;
        };
        let aslot = self
            .sessions
            .iter()
            .find(|(_, s)| s.state.entity == attacker)
            .map(|(i, _)| i);
        let respawn = self.spawn_pos();
        let Some(v) = self.sessions.get_mut(vslot).map(|s| &mut s.state) else {
            return;
        };
        v.health = v.health.saturating_sub(PROJECTILE_DAMAGE);
        let dmg = ServerEvent::Damage(Damage {
            target_id: victim,
            attacker_id: attacker,
            damage: i32::from(PROJECTILE_DAMAGE),
            hit_type: 0,
            remaining_health: v.health,
            ability_name: fixed_text("bolt"),
        });
        v.events.push(dmg);
        let death = (v.health == 0).then(|| {
            v.health = 100;
            v.pos = respawn;
            v.handoff = None;
            ServerEvent::Death(Death {
                victim_id: victim,
                killer_id: attacker,
                respawn_time_ms: 0,
                kill_type: 0,
            })
        });
        if let Some(d) = death {
            v.events.push(d);
            self.stats.events.add("deaths", 1);
        }
        if let Some(a) = aslot.and_then(|i| self.sessions.get_mut(i)) {
            a.state.events.push(dmg);
            if let Some(d) = death {
                a.state.events.push(d);
            }
        }
        self.stats.events.add("hits", 1);
    }

    pub(super) fn loot_step(&mut self) {
        for i in 0..self.loot.len() {
            let l = self.loot[i];
            let picker = self.sessions.iter().find(|(_, s)| {
                s.state.playing && dist2(s.state.pos, l.pos) < PICKUP_RADIUS * PICKUP_RADIUS
            });
            let Some((slot, _)) = picker else {
                continue;
            };
            if let Some(s) = self.sessions.get_mut(slot) {
                s.state.events.push(ServerEvent::Despawn {
                    id: l.id,
                    kind: entity::LOOT,
                });
            }
            let id = self.alloc_id();
            let pos = self.random_pos(self.cfg.zone_half * 0.9);
            self.loot[i] = Loot { id, pos };
            self.stats.events.add("loot_picked", 1);
        }
    }
}

pub(super) fn dist2(a: [f32; 3], b: [f32; 3]) -> f32 {
    let (dx, dz) = (a[0] - b[0], a[2] - b[2]);
    dx * dx + dz * dz
}

/// Snap a position to the wire's 1/64 m grid (authoritative positions live there).
pub(super) fn grid(p: [f32; 3]) -> [f32; 3] {
    let s = |v: f32| codec::dequantize_pos(codec::quantize_pos(v));
    [s(p[0]), s(p[1]), s(p[2])]
}
