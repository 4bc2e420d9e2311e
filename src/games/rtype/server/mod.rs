//! The R-Type reference server: a sans-IO state machine keyed by client address.
//!
//! A small shoot-'em-up: player ships move by INPUT (`dx`, `dy` × [`PLAYER_SPEED`]) and fire
//! projectiles to the right while `shooting`; enemies spawn at the right edge and fly left,
//! bouncing off the top and bottom; a projectile damages the first enemy it touches; an enemy
//! that touches a ship damages it and is destroyed; a ship whose hit points reach 0 is
//! destroyed and its player gets GAMEOVER. The simulation is deterministic: each room has a
//! generator seeded from [`RtypeServerConfig::seed`] and its index, and time only enters
//! through the `now` values handed in.
//!
//! Spec gaps and the reading taken here (README's protocol notes repeat them):
//! - **Who is who.** ACCEPT carries no entity id, INPUT names one. The server finds the player
//!   by source address (docs/protocols/rtype.md) and draws each ship's entity id at random
//!   from [`SHIP_ID_BASE`] up (CONNECT's `clientId` is not used: a client-chosen id would be
//!   known to a forger, and the ship id is the address proof, below). The client's own ship is
//!   the first ENTITY_CREATE it gets after ACCEPT; enemies and projectiles get ids from a
//!   counter in `SERVER_ID_BASE..SHIP_ID_BASE`. Once proven, an INPUT naming another entity is
//!   counted (`input_entity_mismatch`) and applied to the sender's ship.
//! - **CONNECT from a known address** is answered with ACCEPT again (handshake retries are
//!   idempotent); if that player's ship was destroyed, it is also how the player rejoins: a new
//!   ship spawns. After GAMEOVER the client stays in the session as a spectator (snapshots,
//!   PONGs) until it rejoins, disconnects or times out.
//! - **Joining.** After ACCEPT the newcomer gets one ENTITY_CREATE per entity already in its
//!   room, then the room gets the ENTITY_CREATE of the new ship. The snapshot would repair the
//!   table anyway; the creates make the table complete before it.
//! - **Rooms.** Clients are grouped by slot in rooms of `room_size` players, each its own game
//!   world; a client sees (creates, destroys, damage, snapshots) its room only. One world with
//!   a thousand ships cannot fit a datagram, and per-room work keeps the server's cost linear in
//!   the number of clients. An empty room is cleared.
//! - **Snapshot size.** A snapshot is "full world state" (§9), and a datagram larger than
//!   [`MAX_SNAPSHOT_BYTES`] (1400, under a 1500-byte Ethernet MTU with IP/UDP headers and some
//!   tunnel overhead) would be fragmented. So a snapshot carries at most
//!   [`MAX_SNAPSHOT_ENTITIES`] = (1400 − 10) / 22 = 63 entities, and a room never holds more:
//!   `room_size` ship slots are reserved, and enemies and projectiles share the rest (a shot
//!   or a spawn that would exceed it does not happen; counted as `shot_suppressed` and
//!   `spawn_suppressed`). Every snapshot is therefore the room's whole world.
//! - **Tick numbers.** The simulation runs at `sim_hz` (60, §9: "simulation runs at 60 Hz")
//!   and a snapshot goes out every `sim_hz / snapshot_hz` ticks (3 at 20 Hz); `snapshot_hz`
//!   must divide `sim_hz` so the tick step is constant and bots can measure loss from it.
//!   `tick` counts simulation ticks from 1; a tick that falls more than a whole interval behind
//!   is skipped (counted as `ticks_skipped`), and the tick counter does not advance for it.
//! - **PONG's timestamp.** PING has no payload, so there is nothing to echo: PONG carries the
//!   server's millisecond clock since start (wrapping). Bots ignore it.
//! - **Input values.** Axes are clamped to [-1, 1]; NaN counts as 0 (`input_nan`).
//! - **REJECT** answers a CONNECT from a new address when `max_clients` are connected.
//!   Datagrams other than CONNECT from unknown addresses are dropped (`<type>.unknown_client`);
//!   packets that only a server sends are dropped as `<type>.wrong_direction`.
//! - **Admission** ([`crate::protocol::prelude::admission`]). A new session gets ACCEPT (4 bytes for an
//!   8-byte CONNECT) and, once its next datagrams have paid for it (the byte budget: an
//!   unproven session is sent no more bytes than it sent), a preview: the ENTITY_CREATE of the
//!   ship it will get (18 bytes, sent when the budget also leaves room for an 8-byte PONG),
//!   at most four times, 50 ms apart. Only an INPUT whose `entity`
//!   echoes that id proves the address; then the client gets the room's ENTITY_CREATEs and its
//!   ship joins the room. A PING before the proof is answered within the budget; any other
//!   datagram only pays for the preview. A forger who sends CONNECT and blind INPUTs never
//!   learns the id, so it never gets a stream. Unproven sessions get at most four ACCEPTs,
//!   expire after two seconds, and give their slot to a new client when the server is full.
//! - **Idle timeout.** A client silent for `client_timeout` is removed like a DISCONNECT: its
//!   ship is destroyed (ENTITY_DESTROY to the rest of its room); no packet is sent to it.
//! - **Sprites**: 1 ship, 2 enemy, 3 projectile. Velocities in snapshots are pixels per
//!   second; the world is 1920 × 1080 pixels, y grows downwards.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::codec::{self, FloatOrder, Packet, SnapshotEncoder, SnapshotEntity};
use crate::protocol::prelude::admission;
use crate::protocol::prelude::session::{SessionTable, TickClock};
use crate::protocol::prelude::{ConnId, Server, ServerStats, Transmit};

pub const WORLD_W: f32 = 1920.0;
pub const WORLD_H: f32 = 1080.0;
/// Ship speed at full axis, pixels per second.
pub const PLAYER_SPEED: f32 = 300.0;
pub const PROJECTILE_SPEED: f32 = 900.0;
/// Half the side of a ship's or an enemy's hit box.
pub const SHIP_HALF: f32 = 16.0;
pub const PROJECTILE_HALF: f32 = 4.0;
/// Time between two shots of one ship while `shooting` is held.
pub const FIRE_INTERVAL: Duration = Duration::from_millis(200);

pub const SPRITE_PLAYER: u16 = 1;
pub const SPRITE_ENEMY: u16 = 2;
pub const SPRITE_PROJECTILE: u16 = 3;

/// Largest snapshot datagram the server sends (see the module docs).
pub const MAX_SNAPSHOT_BYTES: usize = 1400;
/// Entities in a snapshot of [`MAX_SNAPSHOT_BYTES`]: 63.
pub const MAX_SNAPSHOT_ENTITIES: usize = codec::max_snapshot_entities(MAX_SNAPSHOT_BYTES);
/// Enemies and projectiles get ids counted from here up to [`SHIP_ID_BASE`] (wrapping).
pub const SERVER_ID_BASE: u32 = 0x0100_0000;
/// Ships get ids drawn at random from here to `u32::MAX` (2^31 values): the id is the proof
/// of the client's address, so it must not be guessable.
pub const SHIP_ID_BASE: u32 = 0x8000_0000;
/// Gap between two previews of a ship to a client that has not proven its address yet.
const PREVIEW_RESEND: Duration = Duration::from_millis(50);

#[derive(Debug, Clone)]
pub struct RtypeServerConfig {
    /// Simulation ticks per second.
    pub sim_hz: u32,
    /// Snapshots per second (20–30 per §9); must divide `sim_hz`.
    pub snapshot_hz: u32,
    pub max_clients: usize,
    /// Remove a client silent this long.
    pub client_timeout: Duration,
    /// Players per room (each room is its own world).
    pub room_size: usize,
    pub float_order: FloatOrder,
    /// Seed of the rooms' generators.
    pub seed: u64,
    /// One enemy per room this often (while under `max_enemies_per_room`).
    pub enemy_spawn_interval: Duration,
    pub max_enemies_per_room: usize,
    pub player_hp: u16,
    pub enemy_hp: u16,
    /// Damage an enemy deals to the ship it touches (0: ships are invulnerable).
    pub contact_damage: u16,
    /// Damage a projectile deals to the enemy it hits.
    pub shot_damage: u16,
    /// Pins the generator of ship ids, which are the address proof (see
    /// [`crate::protocol::admission::proof_rng`]); `None`, the default, seeds it from the OS.
    pub id_seed: Option<u64>,
}

impl Default for RtypeServerConfig {
    fn default() -> Self {
        Self {
            sim_hz: 60,
            snapshot_hz: 20,
            max_clients: 10_000,
            client_timeout: Duration::from_secs(5),
            room_size: 8,
            float_order: FloatOrder::Big,
            seed: 0x5254_5950,
            enemy_spawn_interval: Duration::from_secs(1),
            max_enemies_per_room: 12,
            player_hp: 100,
            enemy_hp: 20,
            contact_damage: 25,
            shot_damage: 10,
            id_seed: None,
        }
    }
}

impl RtypeServerConfig {
    /// Check the values a user may get wrong; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.sim_hz == 0 || self.sim_hz > 1000 {
            return Err(format!("sim_hz must be 1..=1000, got {}", self.sim_hz));
        }
        if !(20..=30).contains(&self.snapshot_hz) {
            return Err(format!(
                "snapshot_hz must be 20..=30 (rtype.md §9), got {}",
                self.snapshot_hz
            ));
        }
        if self.sim_hz % self.snapshot_hz != 0 {
            return Err(format!(
                "snapshot_hz ({}) must divide sim_hz ({}) so snapshot ticks are evenly spaced",
                self.snapshot_hz, self.sim_hz
            ));
        }
        if self.room_size == 0 || self.room_size > MAX_SNAPSHOT_ENTITIES / 2 {
            return Err(format!(
                "room_size must be 1..={}, got {}",
                MAX_SNAPSHOT_ENTITIES / 2,
                self.room_size
            ));
        }
        if self.player_hp == 0 || self.enemy_hp == 0 {
            return Err("player_hp and enemy_hp must be above 0".into());
        }
        Ok(())
    }

    /// Simulation ticks between two snapshots.
    pub fn snapshot_step(&self) -> u32 {
        (self.sim_hz / self.snapshot_hz.max(1)).max(1)
    }

    fn tick_interval(&self) -> Duration {
        Duration::from_secs(1) / self.sim_hz.max(1)
    }

    /// Duration in whole ticks, at least 1.
    fn ticks(&self, d: Duration) -> u64 {
        let t = self.tick_interval().as_nanos().max(1);
        ((d.as_nanos() / t) as u64).max(1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Player,
    Enemy,
    Projectile,
}

#[derive(Debug, Clone, Copy)]
struct Entity {
    id: u32,
    kind: Kind,
    x: f32,
    y: f32,
    vx: f32,
    vy: f32,
    hp: i32,
    /// Client slot of a ship.
    owner: Option<usize>,
    dead: bool,
}

impl Entity {
    fn sprite(&self) -> u16 {
        match self.kind {
            Kind::Player => SPRITE_PLAYER,
            Kind::Enemy => SPRITE_ENEMY,
            Kind::Projectile => SPRITE_PROJECTILE,
        }
    }

    fn half(&self) -> f32 {
        match self.kind {
            Kind::Projectile => PROJECTILE_HALF,
            _ => SHIP_HALF,
        }
    }

    fn touches(&self, o: &Entity) -> bool {
        let r = self.half() + o.half();
        (self.x - o.x).abs() < r && (self.y - o.y).abs() < r
    }

    fn view(&self) -> SnapshotEntity {
        SnapshotEntity {
            id: self.id,
            x: self.x,
            y: self.y,
            vx: self.vx,
            vy: self.vy,
            sprite: self.sprite(),
        }
    }
}

#[derive(Debug)]
struct Room {
    entities: Vec<Entity>,
    rng: ChaCha8Rng,
    next_spawn_tick: u64,
    members: usize,
    /// This snapshot tick's encoded snapshot (buffer reused).
    snapshot: Vec<u8>,
}

#[derive(Debug, Clone)]
struct Client {
    /// The id this client's next ship gets, drawn at CONNECT (and again at a rejoin); until
    /// the address is proven, INPUT's `entity` must echo it.
    ship_id: u32,
    /// Entity id of the live ship; `None` before the proof and after GAMEOVER.
    ship: Option<u32>,
    /// When the unproven client was last sent its ship's ENTITY_CREATE, and how often.
    preview_at: Option<Instant>,
    previews: u32,
    dx: f32,
    dy: f32,
    shooting: bool,
    next_fire_tick: u64,
}

#[derive(Debug, Clone, Copy)]
enum Msg {
    Accept,
    Reject,
    Pong,
    GameOver,
    Create(SnapshotEntity),
    Destroy(u32),
    Damage(u32, u16),
    /// The room's current snapshot.
    Snapshot(usize),
}

/// What a room's tick produced, dispatched once the room is no longer borrowed.
#[derive(Debug, Clone, Copy)]
enum RoomEvent {
    Broadcast(Msg),
    GameOver(usize),
}

pub struct RtypeServer {
    cfg: RtypeServerConfig,
    epoch: Instant,
    now: Instant,
    sessions: SessionTable<Client>,
    /// Scratch for the timeout sweep, kept so a tick allocates nothing.
    expired: Vec<usize>,
    rooms: Vec<Room>,
    /// Ids of live ships (all rooms), so a clientId is never given twice.
    ship_ids: HashSet<u32>,
    next_id: u32,
    /// Draws ship ids (the address proof).
    ids: ChaCha8Rng,
    tick: u32,
    /// Ticks run since start (never wraps in practice), for timers.
    ticks_run: u64,
    clock: TickClock,
    out: VecDeque<(ConnId, Msg)>,
    events: Vec<RoomEvent>,
    stats: ServerStats,
}

impl RtypeServer {
    /// A server starting at `now`. The config should have passed
    /// [`RtypeServerConfig::validate`]; out-of-range values are clamped, never a panic.
    pub fn new(cfg: RtypeServerConfig, now: Instant) -> Self {
        let id_seed = cfg.id_seed;
        Self {
            clock: TickClock::new(now, cfg.tick_interval()),
            cfg,
            epoch: now,
            now,
            sessions: SessionTable::new(),
            expired: Vec::new(),
            rooms: Vec::new(),
            ship_ids: HashSet::new(),
            next_id: SERVER_ID_BASE,
            ids: admission::proof_rng(id_seed),
            tick: 0,
            ticks_run: 0,
            out: VecDeque::with_capacity(1024),
            events: Vec::with_capacity(64),
            stats: ServerStats::default(),
        }
    }

    pub fn config(&self) -> &RtypeServerConfig {
        &self.cfg
    }

    /// The last simulation tick run (0 before the first).
    pub fn tick(&self) -> u32 {
        self.tick
    }

    /// Simulation ticks between two snapshots.
    pub fn snapshot_step(&self) -> u32 {
        self.cfg.snapshot_step()
    }

    /// The room a client plays in.
    pub fn room_of(&self, addr: ConnId) -> Option<usize> {
        self.sessions.slot_of(addr).map(|s| self.room_index(s))
    }

    /// The entity id of a client's live ship.
    pub fn ship_of(&self, addr: ConnId) -> Option<u32> {
        self.sessions.by_conn(addr)?.state.ship
    }

    /// A room's entities as a snapshot shows them.
    pub fn room_entities(&self, room: usize) -> impl Iterator<Item = SnapshotEntity> + '_ {
        self.rooms
            .get(room)
            .into_iter()
            .flat_map(|r| r.entities.iter().map(Entity::view))
    }

    fn room_size(&self) -> usize {
        self.cfg.room_size.clamp(1, MAX_SNAPSHOT_ENTITIES)
    }

    fn room_index(&self, slot: usize) -> usize {
        slot / self.room_size()
    }

    /// Enemies and projectiles a room may hold: the snapshot cap minus the ship slots.
    fn non_player_cap(&self) -> usize {
        MAX_SNAPSHOT_ENTITIES.saturating_sub(self.room_size())
    }

    fn now_ms(&self) -> u32 {
        self.now.saturating_duration_since(self.epoch).as_millis() as u32
    }

    /// A ship id nobody holds, drawn at random from [`SHIP_ID_BASE`] up, and reserved.
    fn draw_ship_id(&mut self) -> u32 {
        loop {
            let id = self.ids.random_range(SHIP_ID_BASE..=u32::MAX);
            if self.ship_ids.insert(id) {
                return id;
            }
        }
    }

    /// Send `msg` of `len` bytes to the client in `slot` if its byte budget allows (always
    /// once its address is proven); counts what the budget held back.
    fn send_budgeted(&mut self, slot: usize, msg: Msg, len: usize) -> bool {
        let Some(conn) = self.sessions.get(slot).map(|s| s.conn) else {
            return false;
        };
        if !self.sessions.spend(slot, len) {
            self.stats.events.add("unproven_budget_held", 1);
            return false;
        }
        self.send(conn, msg);
        true
    }

    /// Show a client that has not proven its address the ship it will get: its id is what
    /// the client's INPUT must echo. Within the byte budget, at most
    /// [`admission::MAX_UNPROVEN_REPLIES`] times, [`PREVIEW_RESEND`] apart.
    fn preview_ship(&mut self, now: Instant, slot: usize) {
        let Some(c) = self
            .sessions
            .get(slot)
            .filter(|s| !s.proven)
            .map(|s| &s.state)
        else {
            return;
        };
        if c.previews >= admission::MAX_UNPROVEN_REPLIES
            || c.preview_at
                .is_some_and(|t| now.saturating_duration_since(t) < PREVIEW_RESEND)
        {
            return;
        }
        // Leave room in the budget for a PONG: a client's first PING may come before its
        // proof, and an unanswered PING costs it its RTT samples until the ping times out.
        let reserve = (codec::ENTITY_CREATE_LEN + codec::PONG_LEN) as u64;
        if self.sessions.budget(slot) < reserve {
            self.stats.events.add("unproven_budget_held", 1);
            return;
        }
        let view = self.ship_entity(slot, c.ship_id).view();
        if self.send_budgeted(slot, Msg::Create(view), codec::ENTITY_CREATE_LEN) {
            if let Some(c) = self.sessions.state_mut(slot) {
                c.preview_at = Some(now);
                c.previews += 1;
            }
            self.stats.events.add("ship_previewed", 1);
        }
    }

    fn send(&mut self, to: ConnId, msg: Msg) {
        self.out.push_back((to, msg));
    }

    /// `msg` to every proven client of `room` (unproven ones get nothing but ACCEPT).
    fn broadcast(&mut self, room: usize, msg: Msg) {
        let size = self.room_size();
        for (_, s) in self.sessions.range(room * size..(room + 1) * size) {
            if s.proven {
                self.out.push_back((s.conn, msg));
            }
        }
    }

    /// A CONNECT of `len` bytes. Its `clientId` does not name the ship: the server draws
    /// ship ids itself (they prove the client's address), see the module docs.
    fn on_connect(&mut self, now: Instant, from: ConnId, len: usize) {
        if let Some(slot) = self.sessions.slot_of(from) {
            let alive = self
                .sessions
                .get(slot)
                .is_some_and(|s| s.state.ship.is_some());
            if !self.sessions.is_proven(from) {
                // A retry before the address is proven: one more ACCEPT at most, and the
                // ship's preview again if it is due (the ship joins the game with the proof).
                self.stats.events.add("connect_repeated", 1);
                self.sessions.credit(slot, len);
                if self.sessions.may_reply(slot) {
                    self.send_budgeted(slot, Msg::Accept, codec::ACCEPT_LEN);
                } else {
                    self.stats.events.add("handshake_rate_limited", 1);
                }
                self.preview_ship(now, slot);
                return;
            }
            self.send(from, Msg::Accept);
            if alive {
                self.stats.events.add("connect_repeated", 1);
            } else {
                self.stats.events.add("rejoin", 1);
                // A new ship, a new id (the old one stayed reserved since GAMEOVER).
                let old = self.sessions.get(slot).map(|s| s.state.ship_id);
                let id = self.draw_ship_id();
                if let Some(old) = old {
                    self.ship_ids.remove(&old);
                }
                if let Some(c) = self.sessions.state_mut(slot) {
                    c.ship_id = id;
                }
                self.spawn_ship(slot, true);
            }
            return;
        }
        if self.sessions.len() >= self.cfg.max_clients {
            // Forged CONNECTs must not keep real players out: the oldest unproven session
            // gives its slot up.
            if let Some(slot) = self.sessions.oldest_unproven(now) {
                self.stats.events.add("unproven_evicted", 1);
                self.remove(slot);
            }
        }
        if self.sessions.len() >= self.cfg.max_clients {
            self.stats.refused += 1;
            self.send(from, Msg::Reject);
            // The transport forgets the connection after sending the REJECT.
            self.sessions.close(from);
            return;
        }
        let slot = self.sessions.next_slot();
        let room = self.room_index(slot);
        while self.rooms.len() <= room {
            let idx = self.rooms.len() as u64;
            self.rooms.push(Room {
                entities: Vec::with_capacity(MAX_SNAPSHOT_ENTITIES),
                rng: ChaCha8Rng::seed_from_u64(
                    self.cfg.seed ^ idx.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                ),
                next_spawn_tick: 0,
                members: 0,
                snapshot: Vec::new(),
            });
        }
        let ship_id = self.draw_ship_id();
        self.sessions.insert(
            from,
            now,
            Client {
                ship_id,
                ship: None,
                preview_at: None,
                previews: 0,
                dx: 0.0,
                dy: 0.0,
                shooting: false,
                next_fire_tick: 0,
            },
        );
        self.stats.accepted += 1;
        self.stats.clients = self.sessions.len();
        self.sessions.credit(slot, len);
        self.sessions.may_reply(slot);
        self.send_budgeted(slot, Msg::Accept, codec::ACCEPT_LEN);
        // CONNECT (8 bytes) pays for ACCEPT (4); the preview (18) goes out once the client's
        // next datagrams (its first inputs) have paid for it.
        self.preview_ship(now, slot);
        let r = &mut self.rooms[room];
        if r.members == 0 {
            r.next_spawn_tick = self.ticks_run + 1;
        }
        r.members += 1;
    }

    /// The client in `slot` echoed its ship's id: its address is proven (admission rule 2),
    /// so it joins the game: the room's ENTITY_CREATEs, then its ship for the others (it
    /// has seen its own in the preview).
    fn on_proven(&mut self, slot: usize) {
        let Some(conn) = self.sessions.get(slot).map(|s| s.conn) else {
            return;
        };
        let room = self.room_index(slot);
        let Some(r) = self.rooms.get(room) else {
            return;
        };
        for i in 0..r.entities.len() {
            let view = self.rooms[room].entities[i].view();
            self.send(conn, Msg::Create(view));
        }
        self.spawn_ship(slot, false);
    }

    /// The ship of the client in `slot` with entity id `id`, where it spawns.
    fn ship_entity(&self, slot: usize, id: u32) -> Entity {
        let size = self.room_size();
        let lane = (slot % size) as f32 + 1.0;
        Entity {
            id,
            kind: Kind::Player,
            x: 100.0,
            y: lane * WORLD_H / (size as f32 + 1.0),
            vx: 0.0,
            vy: 0.0,
            hp: i32::from(self.cfg.player_hp),
            owner: Some(slot),
            dead: false,
        }
    }

    /// A new ship for the client in `slot`, with the id reserved for it, announced to its
    /// room (to the client itself too when `to_self`; a first join's client has its preview).
    fn spawn_ship(&mut self, slot: usize, to_self: bool) {
        let Some(id) = self.sessions.get(slot).map(|s| s.state.ship_id) else {
            return;
        };
        let room = self.room_index(slot);
        let ship = self.ship_entity(slot, id);
        if let Some(c) = self.sessions.get_mut(slot).map(|s| &mut s.state) {
            c.ship = Some(id);
            c.next_fire_tick = self.ticks_run;
        }
        self.rooms[room].entities.push(ship);
        let size = self.room_size();
        let own = self.sessions.get(slot).map(|s| s.conn);
        for (_, s) in self.sessions.range(room * size..(room + 1) * size) {
            if s.proven && (to_self || Some(s.conn) != own) {
                self.out.push_back((s.conn, Msg::Create(ship.view())));
            }
        }
    }

    /// Remove a client (DISCONNECT or idle timeout): its ship leaves the room.
    fn remove(&mut self, slot: usize) {
        let Some(c) = self.sessions.remove(slot).map(|s| s.state) else {
            return;
        };
        self.stats.clients = self.sessions.len();
        let room = self.room_index(slot);
        let Some(r) = self.rooms.get_mut(room) else {
            return;
        };
        r.members = r.members.saturating_sub(1);
        // The reserved id is the live ship's, if there is one.
        self.ship_ids.remove(&c.ship_id);
        if let Some(id) = c.ship {
            r.entities.retain(|e| e.id != id);
            self.broadcast(room, Msg::Destroy(id));
        }
        let r = &mut self.rooms[room];
        if r.members == 0 {
            r.entities.clear();
        }
    }

    fn step(&mut self, now: Instant) {
        self.tick = self.tick.wrapping_add(1);
        self.ticks_run += 1;
        let timeout = self.cfg.client_timeout;
        let mut expired = std::mem::take(&mut self.expired);
        self.sessions.expired_into(now, timeout, &mut expired);
        for &slot in &expired {
            self.stats.timed_out += 1;
            self.remove(slot);
        }
        self.expired = expired;
        for room in 0..self.rooms.len() {
            if self.rooms[room].members > 0 {
                self.step_room(room);
            }
        }
        if self.tick % self.cfg.snapshot_step() == 0 {
            for room in 0..self.rooms.len() {
                if self.rooms[room].members > 0 {
                    self.encode_snapshot(room);
                    self.broadcast(room, Msg::Snapshot(room));
                }
            }
        }
    }

    fn step_room(&mut self, room: usize) {
        let dt = self.cfg.tick_interval().as_secs_f32();
        let tick = self.ticks_run;
        let non_player_cap = self.non_player_cap();
        let fire_ticks = self.cfg.ticks(FIRE_INTERVAL);
        let spawn_ticks = self.cfg.ticks(self.cfg.enemy_spawn_interval);
        let shot_damage = i32::from(self.cfg.shot_damage);
        let contact_damage = i32::from(self.cfg.contact_damage);
        let mut events = std::mem::take(&mut self.events);
        events.clear();
        let slots = &mut self.sessions;
        let r = &mut self.rooms[room];

        // Move: ships by their input, the rest by their velocity.
        for e in &mut r.entities {
            if e.kind == Kind::Player {
                if let Some(c) = e.owner.and_then(|s| slots.get(s)).map(|s| &s.state) {
                    e.vx = c.dx * PLAYER_SPEED;
                    e.vy = c.dy * PLAYER_SPEED;
                }
                e.x = (e.x + e.vx * dt).clamp(0.0, WORLD_W);
                e.y = (e.y + e.vy * dt).clamp(0.0, WORLD_H);
            } else {
                e.x += e.vx * dt;
                e.y += e.vy * dt;
                if e.kind == Kind::Enemy && !(SHIP_HALF..=WORLD_H - SHIP_HALF).contains(&e.y) {
                    e.y = e.y.clamp(SHIP_HALF, WORLD_H - SHIP_HALF);
                    e.vy = -e.vy;
                }
            }
        }

        // Projectiles against enemies.
        let n = r.entities.len();
        for p in 0..n {
            if r.entities[p].kind != Kind::Projectile || r.entities[p].dead {
                continue;
            }
            for q in 0..n {
                let (proj, enemy) = (r.entities[p], r.entities[q]);
                if enemy.kind != Kind::Enemy || enemy.dead || !proj.touches(&enemy) {
                    continue;
                }
                r.entities[p].dead = true;
                let e = &mut r.entities[q];
                e.hp -= shot_damage;
                events.push(RoomEvent::Broadcast(Msg::Damage(
                    e.id,
                    clamp_u16(shot_damage),
                )));
                if e.hp <= 0 {
                    e.dead = true;
                }
                break;
            }
        }

        // Enemies against ships.
        for q in 0..n {
            if r.entities[q].kind != Kind::Enemy || r.entities[q].dead {
                continue;
            }
            for s in 0..n {
                let (enemy, ship) = (r.entities[q], r.entities[s]);
                if ship.kind != Kind::Player || ship.dead || !enemy.touches(&ship) {
                    continue;
                }
                r.entities[q].dead = true;
                if contact_damage > 0 {
                    let sh = &mut r.entities[s];
                    sh.hp -= contact_damage;
                    events.push(RoomEvent::Broadcast(Msg::Damage(
                        sh.id,
                        clamp_u16(contact_damage),
                    )));
                    if sh.hp <= 0 {
                        sh.dead = true;
                        if let Some(slot) = sh.owner {
                            events.push(RoomEvent::GameOver(slot));
                        }
                    }
                }
                break;
            }
        }

        // Leaving the screen.
        for e in &mut r.entities {
            let gone = match e.kind {
                Kind::Projectile => e.x > WORLD_W + PROJECTILE_HALF,
                Kind::Enemy => e.x < -SHIP_HALF,
                Kind::Player => false,
            };
            if gone {
                e.dead = true;
            }
        }
        for e in r.entities.iter().filter(|e| e.dead) {
            events.push(RoomEvent::Broadcast(Msg::Destroy(e.id)));
        }
        r.entities.retain(|e| !e.dead);

        // Spawns, after moving, so a create carries the position the snapshot will show.
        let mut non_players = r.entities.iter().filter(|e| e.kind != Kind::Player).count();
        let mut shots = Vec::new();
        for e in r.entities.iter().filter(|e| e.kind == Kind::Player) {
            let Some(c) = e.owner.and_then(|s| slots.get_mut(s)).map(|s| &mut s.state) else {
                continue;
            };
            if !c.shooting || tick < c.next_fire_tick {
                continue;
            }
            c.next_fire_tick = tick + fire_ticks;
            if non_players >= non_player_cap {
                self.stats.events.add("shot_suppressed", 1);
                continue;
            }
            non_players += 1;
            shots.push((e.x + SHIP_HALF + PROJECTILE_HALF, e.y));
        }
        let mut spawned = Vec::new();
        for (x, y) in shots {
            spawned.push((Kind::Projectile, x, y, PROJECTILE_SPEED, 0.0, 1));
        }
        if tick >= r.next_spawn_tick {
            r.next_spawn_tick = tick + spawn_ticks;
            let enemies = r.entities.iter().filter(|e| e.kind == Kind::Enemy).count();
            if enemies >= self.cfg.max_enemies_per_room || non_players >= non_player_cap {
                self.stats.events.add("spawn_suppressed", 1);
            } else {
                let y = r.rng.random_range(SHIP_HALF..WORLD_H - SHIP_HALF);
                let vx = -r.rng.random_range(100.0f32..220.0);
                let vy = r.rng.random_range(-60.0f32..60.0);
                let hp = i32::from(self.cfg.enemy_hp);
                spawned.push((Kind::Enemy, WORLD_W, y, vx, vy, hp));
            }
        }
        for (kind, x, y, vx, vy, hp) in spawned {
            let id = alloc_id(&mut self.next_id, &self.ship_ids);
            let e = Entity {
                id,
                kind,
                x,
                y,
                vx,
                vy,
                hp,
                owner: None,
                dead: false,
            };
            r.entities.push(e);
            events.push(RoomEvent::Broadcast(Msg::Create(e.view())));
        }

        for ev in events.drain(..) {
            match ev {
                RoomEvent::Broadcast(msg) => self.broadcast(room, msg),
                RoomEvent::GameOver(slot) => {
                    let Some(s) = self.sessions.get_mut(slot) else {
                        continue;
                    };
                    // The id stays reserved until a rejoin draws a new one or the client goes.
                    s.state.ship.take();
                    let addr = s.conn;
                    self.stats.events.add("gameover", 1);
                    self.send(addr, Msg::GameOver);
                }
            }
        }
        self.events = events;
    }

    fn encode_snapshot(&mut self, room: usize) {
        let tick = self.tick;
        let order = self.cfg.float_order;
        let r = &mut self.rooms[room];
        let mut buf = std::mem::take(&mut r.snapshot);
        buf.resize(MAX_SNAPSHOT_BYTES, 0);
        let len = match SnapshotEncoder::begin(&mut buf, tick, order) {
            Ok(mut enc) => {
                for e in &r.entities {
                    if enc.entity(&e.view()).is_err() {
                        // Cannot happen: a room never holds more than a snapshot carries.
                        self.stats.events.add("snapshot_truncated", 1);
                        break;
                    }
                }
                enc.finish().unwrap_or(0)
            }
            Err(_) => 0,
        };
        buf.truncate(len);
        r.snapshot = buf;
    }
}

/// Next id for an enemy or a projectile: counted in `SERVER_ID_BASE..SHIP_ID_BASE` (ships
/// draw theirs above), skipping reserved ones.
fn alloc_id(next: &mut u32, ship_ids: &HashSet<u32>) -> u32 {
    loop {
        let id = *next;
        *next = if *next >= SHIP_ID_BASE - 1 {
            SERVER_ID_BASE
        } else {
            *next + 1
        };
        if !ship_ids.contains(&id) {
            return id;
        }
    }
}

fn clamp_u16(v: i32) -> u16 {
    v.clamp(0, i32::from(u16::MAX)) as u16
}

fn axis(v: f32) -> f32 {
    if v.is_nan() {
        0.0
    } else {
        v.clamp(-1.0, 1.0)
    }
}

impl Server for RtypeServer {
    fn handle_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) {
        self.now = now;
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += data.len() as u64;
        let packet = match codec::decode(data, self.cfg.float_order) {
            Ok(p) => p,
            Err(e) => {
                self.stats.dropped.add2(e.message, e.reason, 1);
                return;
            }
        };
        let ty = packet.packet_type();
        if !ty.is_client_to_server() {
            self.stats.dropped.add2(ty.name(), "wrong_direction", 1);
            return;
        }
        if let Packet::Connect { .. } = packet {
            self.on_connect(now, from, data.len());
            return;
        }
        let Some(slot) = self.sessions.slot_of(from) else {
            self.stats.dropped.add2(ty.name(), "unknown_client", 1);
            return;
        };
        let Some(session) = self.sessions.get_mut(slot) else {
            return;
        };
        session.last_seen = now;
        if !session.proven {
            // Only an INPUT echoing the previewed ship id proves the address: a forger who
            // never read the preview cannot know it (2^31 values).
            let proof = session.state.ship_id;
            match packet {
                Packet::Input { entity, .. } if entity == proof => {
                    self.sessions.prove(slot);
                    self.on_proven(slot);
                }
                Packet::Disconnect => {
                    self.stats.disconnected += 1;
                    self.remove(slot);
                    return;
                }
                _ => {
                    // An input sent before the preview arrived, a ping, or a blind guess:
                    // it pays for the preview (again), nothing more.
                    self.stats.events.add("unproven_datagram", 1);
                    self.sessions.credit(slot, data.len());
                    if matches!(packet, Packet::Ping) {
                        self.send_budgeted(slot, Msg::Pong, codec::PONG_LEN);
                    }
                    self.preview_ship(now, slot);
                    return;
                }
            }
        }
        let Some(client) = self.sessions.state_mut(slot) else {
            return;
        };
        match packet {
            Packet::Input {
                entity,
                dx,
                dy,
                shooting,
            } => {
                if dx.is_nan() || dy.is_nan() {
                    self.stats.events.add("input_nan", 1);
                }
                client.dx = axis(dx);
                client.dy = axis(dy);
                client.shooting = shooting;
                match client.ship {
                    None => self.stats.events.add("input_while_dead", 1),
                    Some(id) if entity != 0 && entity != id => {
                        self.stats.events.add("input_entity_mismatch", 1)
                    }
                    Some(_) => {}
                }
            }
            Packet::Ping => self.send(from, Msg::Pong),
            Packet::Disconnect => {
                self.stats.disconnected += 1;
                self.remove(slot);
            }
            _ => {}
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        let due = self.clock.due(now);
        if due > 0 {
            self.step(now);
        }
        if due > 1 {
            self.stats.events.add("ticks_skipped", due - 1);
        }
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
        loop {
            let (to, msg) = self.out.pop_front()?;
            let packet = match msg {
                Msg::Snapshot(room) => {
                    let Some(bytes) = self.rooms.get(room).map(|r| &r.snapshot) else {
                        continue;
                    };
                    let len = bytes.len();
                    let Some(dst) = buf.get_mut(..len).filter(|_| len > 0) else {
                        continue;
                    };
                    dst.copy_from_slice(bytes);
                    self.stats.datagrams_out += 1;
                    self.stats.bytes_out += len as u64;
                    return Some((to, Transmit::datagram(len)));
                }
                Msg::Accept => Packet::Accept,
                Msg::Reject => Packet::Reject,
                Msg::Pong => Packet::Pong {
                    timestamp: self.now_ms(),
                },
                Msg::GameOver => Packet::GameOver,
                Msg::Create(e) => Packet::EntityCreate {
                    id: e.id,
                    x: e.x,
                    y: e.y,
                    sprite: e.sprite,
                },
                Msg::Destroy(id) => Packet::EntityDestroy { id },
                Msg::Damage(id, amount) => Packet::Damage { id, amount },
            };
            let Ok(len) = codec::encode(buf, &packet, self.cfg.float_order) else {
                continue;
            };
            self.stats.datagrams_out += 1;
            self.stats.bytes_out += len as u64;
            return Some((to, Transmit::datagram(len)));
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.clock.next_deadline())
    }

    fn stats(&self) -> &ServerStats {
        &self.stats
    }

    fn poll_close(&mut self) -> Option<ConnId> {
        self.sessions.poll_close()
    }
}

impl std::fmt::Debug for RtypeServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RtypeServer")
            .field("tick", &self.tick)
            .field("clients", &self.sessions.len())
            .field("rooms", &self.rooms.len())
            .finish()
    }
}
