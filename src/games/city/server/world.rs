//! The world and its tick: entities, spawn points and NPCs, inputs queued and applied (the
//! spec's step, or the variant's mover), and each client's DeltaState by interest tier.

use super::*;

#[derive(Debug, Clone)]
pub(super) struct Entity {
    pub(super) id: u32,
    pub(super) pos: Vec2f,
    pub(super) vel: Vec2f,
    pub(super) speed: f32,
    pub(super) name: Option<String>,
    pub(super) sprite: u16,
    pub(super) health: Option<Health>,
    pub(super) changed_tick: u32,
    /// NPC patrol direction (+1 / -1); players have 0.
    pub(super) patrol: i8,
    /// Implementation dialect players: the variant's grid mover (its `input` is the latest
    /// input received, held until the next one arrives, as the variant holds it).
    pub(super) mover: Option<Mover>,
    /// The refusal the mover showed last tick, so a refusal held over ticks counts once.
    pub(super) refusing: Option<(Vec2i, Vec2i)>,
}

impl Entity {
    pub(super) fn data(&self) -> EntityData<'_> {
        EntityData {
            net_entity_id: self.id,
            components: Components {
                position: Some(self.pos),
                velocity: Some(self.vel),
                speed: Some(self.speed),
                name: self.name.as_deref(),
                sprite: Some(self.sprite),
                health: self.health,
                is_player: Some(self.name.is_some()),
            },
        }
    }

    pub(super) fn update(&self) -> EntityUpdate {
        EntityUpdate {
            net_entity_id: self.id,
            position: self.pos,
            velocity: self.vel,
            has_player: Some(self.name.is_some()),
            grid: Some(self.grid()),
        }
    }

    /// The implementation dialect's grid fields: a player's grid mover, or for an NPC,
    /// derived from the continuous model: the tile the entity is on, the next one along its
    /// velocity, and that direction.
    pub(super) fn grid(&self) -> GridState {
        if let Some(m) = self.mover {
            return GridState {
                is_moving: m.moving,
                grid_pos: m.grid,
                move_target: m.target,
                input_direction: m.input,
            };
        }
        let sign = |v: f32| {
            if v > 0.0 {
                1
            } else if v < 0.0 {
                -1
            } else {
                0
            }
        };
        let dir = Vec2i {
            x: sign(self.vel.x),
            y: sign(self.vel.y),
        };
        let at = Vec2i {
            x: self.pos.x.floor() as i32,
            y: self.pos.y.floor() as i32,
        };
        GridState {
            is_moving: dir != Vec2i::default(),
            grid_pos: at,
            move_target: Vec2i {
                x: at.x.saturating_add(dir.x),
                y: at.y.saturating_add(dir.y),
            },
            input_direction: dir,
        }
    }
}

impl CityServer {
    pub(super) fn spawn_npcs(&mut self) {
        let (w, h) = self.bounds();
        let lanes = (self.cfg.map_height / 16).max(1);
        for i in 0..self.cfg.npc_count {
            let id = self.alloc_entity();
            let lane = (i as u16 % lanes) * 16;
            let y = (f32::from(lane) + 1.0).min(h);
            let x = ((i as f32 * 37.0) % w.max(1.0)).min(w);
            let patrol = if i % 2 == 0 { 1 } else { -1 };
            let speed = self.cfg.player_speed * 0.5;
            self.entities.insert(
                id,
                Entity {
                    id,
                    pos: Vec2f::new(x, y),
                    vel: Vec2f::new(f32::from(patrol) * speed, 0.0),
                    speed,
                    name: None,
                    sprite: 100 + (i % 4) as u16,
                    health: None,
                    changed_tick: 0,
                    patrol,
                    mover: None,
                    refusing: None,
                },
            );
        }
    }

    pub(super) fn alloc_entity(&mut self) -> u32 {
        let id = self.next_entity;
        self.next_entity = self.next_entity.wrapping_add(1).max(1);
        id
    }

    /// The implementation dialect's spawn tile: the tile under `pos`, moved inside the walls.
    pub(super) fn spawn_tile(&self, pos: Vec2f) -> Vec2i {
        let inside = |v: f32, n: u16| (v.floor() as i32).clamp(1, (i32::from(n) - 2).max(1));
        Vec2i {
            x: inside(pos.x, self.cfg.map_width),
            y: inside(pos.y, self.cfg.map_height),
        }
    }

    pub(super) fn spawn_point(&self, slot: usize) -> Vec2f {
        let (w, h) = self.bounds();
        let (cx, cy) = ((slot % 10) as f32, ((slot / 10) % 10) as f32);
        Vec2f::new((cx + 0.5) * w / 10.0, (cy + 0.5) * h / 10.0)
    }

    /// One simulation tick.
    pub(super) fn step(&mut self, now: Instant) {
        self.tick = self.tick.wrapping_add(1);
        let tick = self.tick;
        // Timeouts.
        let timeout = self.cfg.client_timeout;
        let mut expired = std::mem::take(&mut self.expired);
        self.sessions.expired_into(now, timeout, &mut expired);
        for &slot in &expired {
            self.stats.timed_out += 1;
            let ob = &mut self.outbox;
            if let Some(s) = self.sessions.state_mut(slot) {
                if s.stage != Stage::Refused {
                    push_msg(
                        s,
                        ob,
                        &Message::Disconnect {
                            reason: DisconnectReason::Timeout as u8,
                            message: "No message for 30 s",
                        },
                    );
                }
            }
            self.remove(slot);
        }
        self.expired = expired;
        if !self.cfg.sink {
            self.apply_inputs(tick);
            self.move_npcs(tick);
        }
        self.content_request_wait(now);
        self.stream_content();
        if !self.cfg.sink {
            self.send_world(tick);
        }
        let ob = &mut self.outbox;
        for s in self.sessions.states_mut() {
            ob.flush_session(s);
        }
    }

    pub(super) fn on_input(&mut self, now: Instant, slot: usize, input: PlayerInput) {
        let max = self.cfg.max_inputs_per_second;
        let Some(s) = self.sessions.state_mut(slot) else {
            return;
        };
        if s.stage != Stage::InGame {
            self.stats.events.add("input_before_game", 1);
            return;
        }
        if s.dialect == Dialect::Implementation {
            // The variant keeps the latest input per player, whatever its tick, unlimited:
            // the next tick applies it.
            s.inputs.clear();
            s.inputs.push_back(input);
            return;
        }
        if now.saturating_duration_since(s.rate_window) >= Duration::from_secs(1) {
            s.rate_window = now;
            s.inputs_in_window = 0;
        }
        s.inputs_in_window += 1;
        if s.inputs_in_window > max {
            self.stats.events.add("inputs_rate_limited", 1);
            return;
        }
        if let Some(last) = s.last_queued {
            if input.tick <= last {
                self.stats.events.add("inputs_stale", 1);
                return;
            }
            let gap = input.tick - last - 1;
            if gap > 0 && gap < 1 << 16 {
                self.stats.events.add("inputs_missing", u64::from(gap));
            }
        }
        if s.inputs.len() >= MAX_QUEUED_INPUTS {
            self.stats.events.add("inputs_queue_full", 1);
            return;
        }
        s.last_queued = Some(input.tick);
        s.inputs.push_back(input);
    }

    pub(super) fn apply_inputs(&mut self, tick: u32) {
        let bounds = Some(self.bounds());
        let (map_w, map_h) = (self.cfg.map_width, self.cfg.map_height);
        let ob = &mut self.outbox;
        for s in self.sessions.states_mut() {
            let Some(id) = s.entity else { continue };
            let Some(e) = self.entities.get_mut(&id) else {
                continue;
            };
            let (old_pos, old_vel) = (e.pos, e.vel);
            let applied = !s.inputs.is_empty();
            while let Some(i) = s.inputs.pop_front() {
                if let Some(m) = &mut e.mover {
                    // Grid movement: only the tick's latest input counts (below).
                    m.input = Vec2i {
                        x: i32::from(i.move_x),
                        y: i32::from(i.move_y),
                    };
                } else {
                    e.pos = step(e.pos, i.move_x, i.move_y, e.speed, bounds);
                    e.vel =
                        Vec2f::new(f32::from(i.move_x) * e.speed, f32::from(i.move_y) * e.speed);
                }
                s.last_applied = i.tick;
                if i.buttons & codec::BUTTON_INTERACT != 0 {
                    let (tx, ty) = (e.pos.x.floor() as i64, e.pos.y.floor() as i64);
                    let adjacent = (i64::from(i.target_tile.x) - tx).abs() <= 1
                        && (i64::from(i.target_tile.y) - ty).abs() <= 1;
                    self.stats.events.add(
                        if adjacent {
                            "interact_ok"
                        } else {
                            "interact_rejected"
                        },
                        1,
                    );
                }
                if e.mover.is_none() {
                    // The variant sends no InputAck.
                    push_msg(s, ob, &Message::InputAck { tick: i.tick });
                }
            }
            if let Some(m) = &mut e.mover {
                let (w, h) = (i32::from(map_w), i32::from(map_h));
                let passable = |t: Vec2i| variant_passable(t, w, h);
                if let Start::Refused(_) = m.tick(predict::TICK_DT, passable) {
                    let r = m.refusal();
                    if r != e.refusing {
                        self.stats.events.add("moves_refused", 1);
                    }
                    e.refusing = r;
                } else {
                    e.refusing = None;
                }
                e.pos = m.pos;
                e.vel = m.vel;
            } else if applied {
                s.idle_ticks = 0;
            } else {
                s.idle_ticks += 1;
                if s.idle_ticks == IDLE_TICKS {
                    e.vel = Vec2f::ZERO;
                }
            }
            if e.pos != old_pos || e.vel != old_vel {
                e.changed_tick = tick;
            }
        }
    }

    pub(super) fn move_npcs(&mut self, tick: u32) {
        let (w, _) = self.bounds();
        for e in self.entities.values_mut().filter(|e| e.patrol != 0) {
            let mut p = step(e.pos, e.patrol, 0, e.speed, None);
            if p.x <= 0.0 || p.x >= w {
                p.x = p.x.clamp(0.0, w);
                e.patrol = -e.patrol;
            }
            e.pos = p;
            e.vel = Vec2f::new(f32::from(e.patrol) * e.speed, 0.0);
            e.changed_tick = tick;
        }
    }

    /// Spawns, despawns and each in-game client's DeltaState for this tick.
    pub(super) fn send_world(&mut self, tick: u32) {
        let near = self.cfg.near_distance;
        let view = self.cfg.view_distance;
        let gone = view + self.cfg.despawn_margin;
        let dialect = self.cfg.dialect;
        let mid_tick = tick % 3 == 0;
        let ob = &mut self.outbox;
        for s in self.sessions.states_mut() {
            if s.stage != Stage::InGame {
                continue;
            }
            let Some(own) = s.entity.and_then(|id| self.entities.get(&id)) else {
                continue;
            };
            let p = own.pos;
            self.candidates.clear();
            for o in self.entities.values() {
                if o.id == own.id {
                    continue;
                }
                let d = p.distance(o.pos);
                if !s.visible.contains(&o.id) {
                    if d <= view {
                        push_msg(s, ob, &Message::EntitySpawn(o.data()));
                        s.visible.insert(o.id);
                    }
                    continue;
                }
                if d > gone {
                    push_msg(
                        s,
                        ob,
                        &Message::EntityDespawn {
                            net_entity_id: o.id,
                        },
                    );
                    s.visible.remove(&o.id);
                    continue;
                }
                let recent = tick.wrapping_sub(o.changed_tick) < 3;
                let include = if d <= near {
                    recent || (tick.wrapping_add(o.id)) % NEAR_REFRESH == 0
                } else {
                    mid_tick && (recent || (tick / 3).wrapping_add(o.id) % MID_REFRESH == 0)
                };
                if include {
                    self.candidates.push((d, o.update()));
                }
            }
            self.candidates.sort_by(|a, b| a.0.total_cmp(&b.0));
            self.updates.clear();
            self.updates.push(own.update());
            self.updates.extend(self.candidates.iter().map(|c| c.1));
            let acked = s.last_applied;
            let updates = &self.updates;
            // Spawns and InputAcks of this tick leave first (ENet does not order across
            // channels, but over a steady link they then arrive first); the DeltaState goes
            // alone in its packet: one tick, one packet.
            ob.flush_session(s);
            push(s, ob, false, |b, seq| {
                let b = &mut b[..MAX_UNRELIABLE_PACKET];
                codec::encode_delta_state(b, seq, tick, acked, updates, dialect).map(|(n, _)| n)
            });
            ob.flush(s.addr, false, &mut s.unrel);
        }
    }
}

/// The implementation dialect's passable tiles: the map inside its outer ring, which is wall
/// (as the variant's map is walled); off the map nothing is passable.
pub fn variant_passable(t: Vec2i, w: i32, h: i32) -> bool {
    t.x >= 1 && t.y >= 1 && t.x < w - 1 && t.y < h - 1
}

/// The reference city: roads every 16 tiles (2 wide), buildings and parks between.
pub(super) fn make_map(w: u16, h: u16) -> Vec<u8> {
    let mut t = Vec::with_capacity(usize::from(w) * usize::from(h));
    for y in 0..h {
        for x in 0..w {
            t.push(if x % 16 < 2 || y % 16 < 2 {
                TILE_ROAD
            } else if (x / 16 + y / 16) % 3 == 0 {
                TILE_PARK
            } else {
                TILE_BUILDING
            });
        }
    }
    t
}
