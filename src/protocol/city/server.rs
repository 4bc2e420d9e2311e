//! The City reference server: a sans-IO state machine keyed by peer address.
//!
//! The engine owns the ENet host: it calls [`Server::handle_connect`] when a peer connected,
//! hands every received packet payload to [`Server::handle_datagram`], sends what
//! [`Server::poll_transmit`] returns on the channel the [`Transmit`] names, and calls
//! [`Server::handle_disconnect`] when ENet ended a session.
//!
//! # The game
//! A `map_width × map_height` tile city (roads every 16 tiles, buildings and parks between;
//! the tiles are cosmetic, nothing collides). Players spawn on a 10 × 10 grid of points
//! spread over the map; `npc_count` walkers patrol the horizontal roads so there is remote
//! motion even with few players. Positions are in tiles.
//!
//! # Decisions where city.md is silent (README's protocol notes repeat them)
//! - Movement: each PlayerInput moves its player one tick: `position + move × speed ×
//!   TICK_INTERVAL` ([`super::step`]), clamped to the map. Inputs queue on arrival and are all
//!   applied at the next tick in tick order (the spec's "Tick N: process queued inputs"), so a
//!   player's position is a function of the inputs the server received, which is what makes
//!   the bot's prediction exact when nothing is lost. Velocity is the last input's move ×
//!   speed, zeroed after 6 ticks without input.
//! - Implementation dialect: players move with the variant's mover instead
//!   ([`Mover`], see [`super::predict`]): they spawn on a tile's centre; the latest input
//!   received is held (no rate limit, no tick check, no InputAck, as the variant) and drives
//!   each tick of the mover, in `f32` at 60 Hz, onto passable tiles only: the map's outer
//!   ring is wall, as the variant's map is walled, so walks meet refusals
//!   (`moves_refused`, once per refusal). A late wake catches up at most 15 ticks, as the
//!   variant's quarter-second cap. NPCs keep the continuous model (their grid fields are
//!   derived from it).
//! - Every applied input is acknowledged with an InputAck on the reliable channel (the
//!   mapping table does not list InputAck; reliable acks make upstream loss measurable), and
//!   the next DeltaState carries it as `last_acked_input`. Inputs whose tick is not above the
//!   last one queued are stale and dropped; inputs beyond `max_inputs_per_second` in a
//!   one-second window are dropped unacknowledged (city.md's rate limit).
//! - Content: after ServerHello the manifest; the client answers with a ContentRequest
//!   (possibly empty); chunks of `chunk_size` bytes stream at `chunks_per_tick` per client per
//!   tick; then ContentComplete and FullState. Checksums are FNV-1a 64. A client that has
//!   every asset may send no ContentRequest (city.md: "if missing assets"): its first game
//!   message (PlayerInput, ChatMessage), or [`CONTENT_REQUEST_WAIT`] without any
//!   request, ends the content stage with ContentComplete and FullState
//!   (`content_without_request`).
//! - FullState carries the tilemap and the client's own entity first, then the entities in
//!   view, nearest first, as many as fit one packet (1400 bytes); the rest follow as
//!   EntitySpawn on the same reliable channel.
//! - Interest (city.md's tiers): an entity within `view_distance` (30 tiles) is spawned to a
//!   client (EntitySpawn) and despawned (EntityDespawn) when it is farther than
//!   `view_distance + despawn_margin` (hysteresis, so the boundary does not flap). Within
//!   `near_distance` (10 tiles) it goes into every tick's DeltaState, between near and view
//!   distance into every third tick's (`tick % 3 == 0`). Delta only: an entity is included when
//!   it changed in the last 3 ticks, plus a refresh every 30 ticks (near) or 10th mid-tier
//!   tick so a lost delta heals. The client's own entity is in every DeltaState. Candidates
//!   go nearest first, as many as fit one packet.
//! - One DeltaState per client per tick, alone in its unreliable packet, so a tick gap is
//!   exactly one lost packet. Pongs go out at once in their own packet.
//! - Refusals: a ClientHello with another protocol version gets Disconnect(VersionMismatch,
//!   "Server requires protocol v1"); one when `max_players` are in gets
//!   Disconnect(ServerFull). The session then ignores everything until ENet closes it.
//! - Chat: Global and Team go to everyone in game (there are no teams), Local to players
//!   within view distance, Whisper to the named player and back to the sender; System from a
//!   client is dropped; more than `max_chat_per_minute` per client per minute are dropped;
//!   content over 256 bytes is dropped.
//! - A client silent for `client_timeout` (30 s) gets Disconnect(Timeout) and is removed.
//! - Ticks run on a fixed 60 Hz schedule; a late wake-up runs at most 4 ticks (15 in the
//!   implementation dialect) to catch up and skips the rest (counted), so tick numbers stay
//!   consecutive.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::codec::{
    self, AssetEntry, BufferTooSmall, Components, DisconnectReason, EntityData, EntityUpdate,
    Fnv64, GridState, Health, Message, PlayerInput, Vec2f, Vec2i, CHANNEL_RELIABLE,
    CHANNEL_UNRELIABLE, MAX_PACKET_SIZE, MAX_UNRELIABLE_PACKET, TICK_RATE,
};
use super::predict::{self, Mover, Start};
use super::{step, Dialect, MAX_PLAYERS};
use crate::protocol::prelude::session::SessionTable;
use crate::protocol::prelude::{ConnId, Server, ServerStats, Transmit};

/// Tile ids of the reference map.
pub const TILE_GRASS: u8 = 0;
pub const TILE_ROAD: u8 = 1;
pub const TILE_BUILDING: u8 = 2;
pub const TILE_PARK: u8 = 3;

const MAX_CATCHUP_TICKS: u32 = 4;
/// The variant catches up at most a quarter of a second (15 ticks) per frame.
const VARIANT_CATCHUP_TICKS: u32 = 15;
/// How long after the ContentManifest a client without a ContentRequest is taken to have
/// every asset. A request comes one round trip after the manifest; a second is far above
/// any round trip a game is played over, and short enough not to be noticed as a delay.
pub const CONTENT_REQUEST_WAIT: Duration = Duration::from_secs(1);
const MAX_QUEUED_INPUTS: usize = 64;
const MAX_CHAT_LEN: usize = 256;
const IDLE_TICKS: u32 = 6;
const NEAR_REFRESH: u32 = 30;
const MID_REFRESH: u32 = 10;

#[derive(Debug, Clone)]
pub struct CityServerConfig {
    /// Players per instance (city.md's MAX_PLAYERS); the next one gets Disconnect(ServerFull).
    pub max_players: usize,
    pub protocol_version: u32,
    pub server_id: String,
    pub server_name: String,
    pub dialect: Dialect,
    pub map_width: u16,
    pub map_height: u16,
    /// Player speed, tiles per second (the Movement component).
    pub player_speed: f32,
    pub npc_count: usize,
    /// Interest tiers, in tiles.
    pub near_distance: f32,
    pub view_distance: f32,
    pub despawn_margin: f32,
    /// Content: `content_assets` generated assets of about `content_asset_size` bytes each
    /// (sizes vary ±50 % so chunk counts differ), at most 24 so the manifest fits a packet.
    pub content_assets: usize,
    pub content_asset_size: usize,
    pub content_version: u32,
    /// ContentChunk data bytes (at most 1300, so a chunk fits a packet).
    pub chunk_size: usize,
    /// Chunks sent per downloading client per tick.
    pub chunks_per_tick: usize,
    pub client_timeout: Duration,
    pub max_inputs_per_second: u32,
    pub max_chat_per_minute: u32,
    /// Seeds session ids and asset contents.
    pub seed: u64,
}

impl Default for CityServerConfig {
    fn default() -> Self {
        Self {
            max_players: MAX_PLAYERS,
            protocol_version: codec::PROTOCOL_VERSION,
            server_id: "tickswarm-city".to_string(),
            server_name: "tickswarm reference city".to_string(),
            dialect: Dialect::Spec,
            map_width: 128,
            map_height: 128,
            player_speed: 5.0,
            npc_count: 8,
            near_distance: 10.0,
            view_distance: 30.0,
            despawn_margin: 2.0,
            content_assets: 12,
            content_asset_size: 16 * 1024,
            content_version: 1,
            chunk_size: 1024,
            chunks_per_tick: 4,
            client_timeout: Duration::from_secs(30),
            max_inputs_per_second: 100,
            max_chat_per_minute: 30,
            seed: 0x00c1_7e00,
        }
    }
}

impl CityServerConfig {
    pub fn for_dialect(dialect: Dialect) -> Self {
        Self {
            dialect,
            ..Self::default()
        }
    }
}

/// One asset the server serves.
#[derive(Debug, Clone)]
pub struct Asset {
    pub resource_id: u64,
    pub asset_type: u8,
    pub path: String,
    pub data: Vec<u8>,
    pub checksum: u64,
}

#[derive(Debug, Clone)]
struct Entity {
    id: u32,
    pos: Vec2f,
    vel: Vec2f,
    speed: f32,
    name: Option<String>,
    sprite: u16,
    health: Option<Health>,
    changed_tick: u32,
    /// NPC patrol direction (+1 / -1); players have 0.
    patrol: i8,
    /// Implementation dialect players: the variant's grid mover (its `input` is the latest
    /// input received, held until the next one arrives, as the variant holds it).
    mover: Option<Mover>,
    /// The refusal the mover showed last tick, so a refusal held over ticks counts once.
    refusing: Option<(Vec2i, Vec2i)>,
}

impl Entity {
    fn data(&self) -> EntityData<'_> {
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

    fn update(&self) -> EntityUpdate {
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
    fn grid(&self) -> GridState {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    AwaitHello,
    Content,
    InGame,
    Refused,
}

#[derive(Debug)]
struct Session {
    addr: ConnId,
    stage: Stage,
    seq: u16,
    /// Encodes EntitySpawn and ChatMessage (the server's dialect).
    dialect: Dialect,
    session_id: u32,
    entity: Option<u32>,
    name: String,
    inputs: VecDeque<PlayerInput>,
    last_queued: Option<u32>,
    last_applied: u32,
    idle_ticks: u32,
    rate_window: Instant,
    inputs_in_window: u32,
    chat_window: Instant,
    chats_in_window: u32,
    requested: bool,
    /// When the ContentManifest was queued (spec dialect), for a client that sends no
    /// ContentRequest because it has every asset.
    manifest_at: Option<Instant>,
    downloads: VecDeque<(usize, u32)>,
    visible: HashSet<u32>,
    /// Open packets, filled message by message.
    rel: Vec<u8>,
    unrel: Vec<u8>,
}

/// Most spare packet buffers the outbox keeps (each up to 1400 bytes): above a storm's usual
/// burst (about 400 packets queued at once), so only a burst deeper than that (a server
/// falling behind) allocates, and it no longer pins a buffer per packet of the deepest
/// burst for the rest of the process (README's "Server memory under reconnect storms").
const OUTBOX_POOL_KEEP: usize = 512;

/// Packets ready to leave, with recycled buffers.
#[derive(Debug, Default)]
struct Outbox {
    queue: VecDeque<(ConnId, bool, Vec<u8>)>,
    pool: Vec<Vec<u8>>,
}

impl Outbox {
    fn flush(&mut self, addr: ConnId, reliable: bool, open: &mut Vec<u8>) {
        if open.is_empty() {
            return;
        }
        let mut fresh = self.pool.pop().unwrap_or_default();
        fresh.clear();
        std::mem::swap(&mut fresh, open);
        self.queue.push_back((addr, reliable, fresh));
    }

    /// Take back a sent packet's buffer, up to [`OUTBOX_POOL_KEEP`] of them.
    fn recycle(&mut self, bytes: Vec<u8>) {
        if self.pool.len() < OUTBOX_POOL_KEEP {
            self.pool.push(bytes);
        }
    }

    fn flush_session(&mut self, s: &mut Session) {
        self.flush(s.addr, true, &mut s.rel);
        self.flush(s.addr, false, &mut s.unrel);
    }
}

/// Append one message to a session's open packet on its channel, starting a new packet when
/// it does not fit (1400 bytes reliable, 1200 unreliable). `false` when the message is larger
/// than a packet.
fn push(
    s: &mut Session,
    ob: &mut Outbox,
    reliable: bool,
    f: impl FnOnce(&mut [u8], u16) -> Result<usize, BufferTooSmall>,
) -> bool {
    let mut tmp = [0u8; MAX_PACKET_SIZE];
    let Ok(n) = f(&mut tmp, s.seq) else {
        return false;
    };
    s.seq = s.seq.wrapping_add(1);
    let limit = if reliable {
        MAX_PACKET_SIZE
    } else {
        MAX_UNRELIABLE_PACKET
    };
    if !reliable && n > limit {
        return false;
    }
    let open = if reliable { &mut s.rel } else { &mut s.unrel };
    if open.len() + n > limit {
        ob.flush(s.addr, reliable, open);
    }
    let open = if reliable { &mut s.rel } else { &mut s.unrel };
    open.extend_from_slice(&tmp[..n]);
    true
}

fn push_msg(s: &mut Session, ob: &mut Outbox, msg: &Message<'_>) -> bool {
    let (_, reliable) = msg.msg_type().channel();
    let dialect = s.dialect;
    push(s, ob, reliable, |b, seq| {
        codec::encode_in(b, seq, msg, dialect)
    })
}

pub struct CityServer {
    cfg: CityServerConfig,
    epoch: Instant,
    tick: u32,
    /// Tick slot k is due at `epoch + k / TICK_RATE` s.
    next_slot: u64,
    sessions: SessionTable<Session>,
    /// Scratch for the timeout sweep.
    expired: Vec<usize>,
    entities: BTreeMap<u32, Entity>,
    next_entity: u32,
    next_session: u32,
    players: usize,
    tiles: Vec<u8>,
    assets: Vec<Asset>,
    outbox: Outbox,
    stats: ServerStats,
    // Scratch, reused every tick.
    candidates: Vec<(f32, EntityUpdate)>,
    updates: Vec<EntityUpdate>,
}

impl CityServer {
    pub fn new(cfg: CityServerConfig, now: Instant) -> Self {
        let mut cfg = cfg;
        cfg.content_assets = cfg.content_assets.min(24);
        cfg.chunk_size = cfg.chunk_size.clamp(1, 1300);
        cfg.chunks_per_tick = cfg.chunks_per_tick.max(1);
        let tiles = make_map(cfg.map_width, cfg.map_height);
        let assets = make_assets(&cfg);
        let mut s = Self {
            epoch: now,
            tick: 0,
            next_slot: 1,
            sessions: SessionTable::new(),
            expired: Vec::new(),
            entities: BTreeMap::new(),
            next_entity: 1,
            next_session: (cfg.seed as u32) | 1,
            players: 0,
            tiles,
            assets,
            outbox: Outbox::default(),
            stats: ServerStats::default(),
            candidates: Vec::new(),
            updates: Vec::new(),
            cfg,
        };
        s.spawn_npcs();
        s
    }

    pub fn config(&self) -> &CityServerConfig {
        &self.cfg
    }

    /// The last simulated tick.
    pub fn tick(&self) -> u32 {
        self.tick
    }

    /// Players accepted and present.
    pub fn players(&self) -> usize {
        self.players
    }

    pub fn assets(&self) -> &[Asset] {
        &self.assets
    }

    /// The map, row-major, `map_width × map_height` tile ids.
    pub fn tiles(&self) -> &[u8] {
        &self.tiles
    }

    fn session(&self, peer: ConnId) -> Option<&Session> {
        self.sessions.by_conn(peer).map(|s| &s.state)
    }

    /// The entity of the player connected from `peer`.
    pub fn player_entity(&self, peer: ConnId) -> Option<u32> {
        self.session(peer)?.entity
    }

    /// Where the server has the player connected from `peer`.
    pub fn player_position(&self, peer: ConnId) -> Option<Vec2f> {
        let id = self.player_entity(peer)?;
        self.entities.get(&id).map(|e| e.pos)
    }

    /// Entities the client at `peer` has been sent (spawned and not despawned).
    pub fn visible_to(&self, peer: ConnId) -> Option<usize> {
        self.session(peer).map(|s| s.visible.len())
    }

    /// Move a player by `(dx, dy)` tiles on the server's side (an admin push, a collision
    /// the client did not foresee): the client's prediction is now wrong and must correct.
    pub fn nudge_player(&mut self, peer: ConnId, dx: f32, dy: f32) -> bool {
        let Some(id) = self.player_entity(peer) else {
            return false;
        };
        let (w, h) = self.bounds();
        let tick = self.tick;
        match self.entities.get_mut(&id) {
            Some(e) => {
                if let Some(m) = &mut e.mover {
                    // A grid mover moves by whole tiles: its tile, its target and its
                    // position shift.
                    let (sx, sy) = (dx.round() as i32, dy.round() as i32);
                    for v in [&mut m.grid, &mut m.target] {
                        v.x = v.x.saturating_add(sx);
                        v.y = v.y.saturating_add(sy);
                    }
                    m.pos = Vec2f::new(m.pos.x + sx as f32, m.pos.y + sy as f32);
                    e.pos = m.pos;
                } else {
                    e.pos = Vec2f::new((e.pos.x + dx).clamp(0.0, w), (e.pos.y + dy).clamp(0.0, h));
                }
                e.changed_tick = tick;
                true
            }
            None => false,
        }
    }

    /// Put a player at `pos` (tests and admin).
    pub fn teleport_player(&mut self, peer: ConnId, pos: Vec2f) -> bool {
        let Some(p) = self.player_position(peer) else {
            return false;
        };
        self.nudge_player(peer, pos.x - p.x, pos.y - p.y)
    }

    fn bounds(&self) -> (f32, f32) {
        (
            f32::from(self.cfg.map_width),
            f32::from(self.cfg.map_height),
        )
    }

    fn tick_time(&self, n: u64) -> Instant {
        self.epoch + Duration::from_nanos(n * 1_000_000_000 / u64::from(TICK_RATE))
    }

    fn spawn_npcs(&mut self) {
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

    fn alloc_entity(&mut self) -> u32 {
        let id = self.next_entity;
        self.next_entity = self.next_entity.wrapping_add(1).max(1);
        id
    }

    /// The implementation dialect's spawn tile: the tile under `pos`, moved inside the walls.
    fn spawn_tile(&self, pos: Vec2f) -> Vec2i {
        let inside = |v: f32, n: u16| (v.floor() as i32).clamp(1, (i32::from(n) - 2).max(1));
        Vec2i {
            x: inside(pos.x, self.cfg.map_width),
            y: inside(pos.y, self.cfg.map_height),
        }
    }

    fn spawn_point(&self, slot: usize) -> Vec2f {
        let (w, h) = self.bounds();
        let (cx, cy) = ((slot % 10) as f32, ((slot / 10) % 10) as f32);
        Vec2f::new((cx + 0.5) * w / 10.0, (cy + 0.5) * h / 10.0)
    }

    fn session_slot(&mut self, now: Instant, addr: ConnId) -> usize {
        if let Some(i) = self.sessions.slot_of(addr) {
            return i;
        }
        let slot = self.sessions.insert(
            addr,
            now,
            Session {
                addr,
                stage: Stage::AwaitHello,
                seq: 0,
                dialect: self.cfg.dialect,
                session_id: 0,
                entity: None,
                name: String::new(),
                inputs: VecDeque::new(),
                last_queued: None,
                last_applied: 0,
                idle_ticks: 0,
                rate_window: now,
                inputs_in_window: 0,
                chat_window: now,
                chats_in_window: 0,
                requested: false,
                manifest_at: None,
                downloads: VecDeque::new(),
                visible: HashSet::new(),
                rel: Vec::with_capacity(MAX_PACKET_SIZE),
                unrel: Vec::with_capacity(MAX_PACKET_SIZE),
            },
        );
        // ENet's handshake proved the address before the server heard of the peer
        // (crate::protocol::prelude::admission).
        self.sessions.prove(slot);
        self.stats.clients = self.sessions.len();
        slot
    }

    /// Forget a session and its player; despawn the player for everyone who saw it.
    fn remove(&mut self, slot: usize) {
        let Some(mut s) = self.sessions.remove(slot).map(|s| s.state) else {
            return;
        };
        self.outbox.flush_session(&mut s);
        self.stats.clients = self.sessions.len();
        if let Some(id) = s.entity {
            self.players -= 1;
            self.entities.remove(&id);
            let ob = &mut self.outbox;
            for o in self.sessions.states_mut() {
                if o.visible.remove(&id) {
                    push_msg(o, ob, &Message::EntityDespawn { net_entity_id: id });
                }
            }
        }
    }

    fn refuse(&mut self, slot: usize, reason: DisconnectReason, message: &str) {
        self.stats.refused += 1;
        self.stats.events.add2("refused", reason.name(), 1);
        let ob = &mut self.outbox;
        if let Some(s) = self.sessions.state_mut(slot) {
            s.stage = Stage::Refused;
            push_msg(
                s,
                ob,
                &Message::Disconnect {
                    reason: reason as u8,
                    message,
                },
            );
        }
        // The transport closes the session once the Disconnect is out (ENet sends what is
        // queued first); the session stays here, ignoring everything, until it has.
        if let Some(conn) = self.sessions.get(slot).map(|s| s.conn) {
            self.sessions.close(conn);
        }
    }

    fn on_hello(&mut self, now: Instant, slot: usize, protocol_version: u32, name: &str) {
        let Some(s) = self.sessions.state(slot) else {
            return;
        };
        if s.stage != Stage::AwaitHello {
            self.stats.events.add("duplicate_hello", 1);
            return;
        }
        if protocol_version != self.cfg.protocol_version {
            let msg = format!("Server requires protocol v{}", self.cfg.protocol_version);
            self.refuse(slot, DisconnectReason::VersionMismatch, &msg);
            return;
        }
        if self.players >= self.cfg.max_players {
            let msg = format!("Server is full ({} players)", self.cfg.max_players);
            self.refuse(slot, DisconnectReason::ServerFull, &msg);
            return;
        }
        let id = self.alloc_entity();
        let pos = self.spawn_point(self.players);
        // The implementation dialect moves players on the variant's grid: they spawn on a
        // tile's centre, inside the walls.
        let mover = (self.cfg.dialect == Dialect::Implementation)
            .then(|| Mover::standing(self.spawn_tile(pos)));
        let pos = mover.map_or(pos, |m| m.pos);
        let session_id = self.next_session;
        self.next_session = self.next_session.wrapping_mul(0x9E37_79B1).wrapping_add(1);
        let name: String = name.chars().take(32).collect();
        self.entities.insert(
            id,
            Entity {
                id,
                pos,
                vel: Vec2f::ZERO,
                speed: self.cfg.player_speed,
                name: Some(name.clone()),
                sprite: 1,
                health: Some(Health {
                    hp: 100,
                    hp_max: 100,
                }),
                changed_tick: self.tick,
                patrol: 0,
                mover,
                refusing: None,
            },
        );
        self.players += 1;
        self.stats.accepted += 1;
        let ob = &mut self.outbox;
        let Some(s) = self.sessions.state_mut(slot) else {
            return;
        };
        s.entity = Some(id);
        s.session_id = session_id;
        s.name = name;
        push_msg(
            s,
            ob,
            &Message::ServerHello {
                protocol_version: self.cfg.protocol_version,
                server_id: &self.cfg.server_id,
                server_name: &self.cfg.server_name,
                session_id,
                player_entity: id,
            },
        );
        match self.cfg.dialect {
            Dialect::Spec => {
                s.stage = Stage::Content;
                s.manifest_at = Some(now);
                let entries: Vec<AssetEntry<'_>> = self
                    .assets
                    .iter()
                    .map(|a| AssetEntry {
                        resource_id: a.resource_id,
                        asset_type: a.asset_type,
                        path: &a.path,
                        size: a.data.len() as u64,
                        checksum: a.checksum,
                    })
                    .collect();
                let total: u64 = entries.iter().map(|a| a.size).sum();
                let cfg = &self.cfg;
                push(s, ob, true, |b, seq| {
                    codec::encode_content_manifest(
                        b,
                        seq,
                        &cfg.server_id,
                        &cfg.server_name,
                        cfg.content_version,
                        total,
                        &entries,
                    )
                });
            }
            Dialect::Implementation => {
                // ServerHello then EntitySpawn: the own entity now, the rest by interest.
                s.stage = Stage::InGame;
                if let Some(e) = self.entities.get(&id) {
                    push_msg(s, ob, &Message::EntitySpawn(e.data()));
                    s.visible.insert(id);
                }
            }
        }
    }

    fn on_content_request(&mut self, slot: usize, ids: impl Iterator<Item = u64>) {
        let Some(s) = self.sessions.state_mut(slot) else {
            return;
        };
        if s.stage != Stage::Content {
            self.stats.events.add("content_request_out_of_stage", 1);
            return;
        }
        s.requested = true;
        for id in ids {
            match self.assets.iter().position(|a| a.resource_id == id) {
                Some(i) if !s.downloads.iter().any(|&(j, _)| j == i) => {
                    s.downloads.push_back((i, 0));
                    self.stats.events.add("content_assets_sent", 1);
                }
                Some(_) => self.stats.events.add("content_duplicate_request", 1),
                None => self.stats.events.add("content_unknown_resource", 1),
            }
        }
        if s.downloads.is_empty() {
            self.finish_content(slot);
        }
    }

    /// ContentComplete, FullState (own entity first, then the nearest in view), EntitySpawn
    /// for what did not fit.
    fn finish_content(&mut self, slot: usize) {
        let tick = self.tick;
        let view = self.cfg.view_distance;
        let (w, h) = (self.cfg.map_width, self.cfg.map_height);
        let ob = &mut self.outbox;
        let Some(s) = self.sessions.state_mut(slot) else {
            return;
        };
        let Some(own_id) = s.entity else { return };
        let Some(own) = self.entities.get(&own_id) else {
            return;
        };
        push_msg(s, ob, &Message::ContentComplete);
        let mut inview: Vec<(f32, &Entity)> = self
            .entities
            .values()
            .filter(|e| e.id != own_id)
            .map(|e| (e.pos.distance(own.pos), e))
            .filter(|(d, _)| *d <= view)
            .collect();
        inview.sort_by(|a, b| a.0.total_cmp(&b.0));
        let list: Vec<EntityData<'_>> = std::iter::once(own.data())
            .chain(inview.iter().map(|(_, e)| e.data()))
            .collect();
        let tiles = &self.tiles;
        let mut written = 0;
        push(s, ob, true, |b, seq| {
            let (n, k) = codec::encode_full_state(b, seq, tick, w, h, tiles, &list)?;
            written = k;
            Ok(n)
        });
        for e in &list {
            s.visible.insert(e.net_entity_id);
        }
        for e in list.iter().skip(written.max(1)) {
            push_msg(s, ob, &Message::EntitySpawn(*e));
        }
        s.stage = Stage::InGame;
        self.stats.events.add("full_states_sent", 1);
    }

    fn on_input(&mut self, now: Instant, slot: usize, input: PlayerInput) {
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

    fn on_chat(&mut self, now: Instant, slot: usize, channel: u8, target: &str, content: &str) {
        let max = self.cfg.max_chat_per_minute;
        let view = self.cfg.view_distance;
        let Some(s) = self.sessions.state_mut(slot) else {
            return;
        };
        let Some(sender_entity) = s.entity.filter(|_| s.stage == Stage::InGame) else {
            self.stats.events.add("chat_before_game", 1);
            return;
        };
        if now.saturating_duration_since(s.chat_window) >= Duration::from_secs(60) {
            s.chat_window = now;
            s.chats_in_window = 0;
        }
        s.chats_in_window += 1;
        if s.chats_in_window > max {
            self.stats.events.add("chat_rate_limited", 1);
            return;
        }
        if content.len() > MAX_CHAT_LEN {
            self.stats.events.add("chat_too_long", 1);
            return;
        }
        if channel == codec::CHAT_SYSTEM || channel > codec::CHAT_WHISPER {
            self.stats.events.add("chat_bad_channel", 1);
            return;
        }
        let sender = s.name.clone();
        let origin = self.entities.get(&sender_entity).map(|e| e.pos);
        let msg = Message::ChatBroadcast {
            channel,
            sender: &sender,
            target,
            content,
        };
        let ob = &mut self.outbox;
        let mut delivered = 0u64;
        for (i, o) in self.sessions.iter_mut() {
            let o = &mut o.state;
            if o.stage != Stage::InGame {
                continue;
            }
            let to = match channel {
                codec::CHAT_LOCAL => {
                    let p = o
                        .entity
                        .and_then(|id| self.entities.get(&id))
                        .map(|e| e.pos);
                    matches!((origin, p), (Some(a), Some(b)) if a.distance(b) <= view)
                }
                codec::CHAT_WHISPER => i == slot || o.name == target,
                _ => true,
            };
            if to && push_msg(o, ob, &msg) {
                delivered += 1;
            }
        }
        self.stats.events.add("chat_relayed", 1);
        self.stats.events.add("chat_deliveries", delivered);
    }

    fn on_message(&mut self, now: Instant, slot: usize, msg: Message<'_>) {
        let refused = self
            .sessions
            .state(slot)
            .is_none_or(|s| s.stage == Stage::Refused);
        if refused {
            self.stats.events.add("after_refusal", 1);
            return;
        }
        // A client that has every asset may send no ContentRequest (city.md: "if missing
        // assets"): a game message instead of one ends the content stage.
        // (Not a Ping: a client may ping while its request is still on the way.)
        let skipped_request = matches!(msg, Message::PlayerInput(_) | Message::ChatMessage { .. })
            && self
                .sessions
                .state(slot)
                .is_some_and(|s| s.stage == Stage::Content && !s.requested);
        if skipped_request {
            self.stats.events.add("content_without_request", 1);
            self.finish_content(slot);
        }
        match msg {
            Message::ClientHello {
                protocol_version,
                player_name,
                ..
            } => self.on_hello(now, slot, protocol_version, player_name),
            Message::Ping => {
                let ob = &mut self.outbox;
                if let Some(s) = self.sessions.state_mut(slot) {
                    // Answer at once, in a packet of its own.
                    ob.flush(s.addr, false, &mut s.unrel);
                    push_msg(s, ob, &Message::Pong);
                    ob.flush(s.addr, false, &mut s.unrel);
                }
            }
            Message::Pong => self.stats.events.add("pong_ignored", 1),
            Message::Disconnect { .. } => {
                self.stats.disconnected += 1;
                self.remove(slot);
            }
            Message::ContentRequest(r) => self.on_content_request(slot, r.ids()),
            Message::PlayerInput(i) => self.on_input(now, slot, i),
            Message::ChatMessage {
                channel,
                target,
                content,
                ..
            } => self.on_chat(now, slot, channel, target, content),
            other => self
                .stats
                .dropped
                .add2(other.msg_type().name(), "wrong_direction", 1),
        }
    }

    /// One simulation tick.
    fn step(&mut self, now: Instant) {
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
        self.apply_inputs(tick);
        self.move_npcs(tick);
        self.content_request_wait(now);
        self.stream_content();
        self.send_world(tick);
        let ob = &mut self.outbox;
        for s in self.sessions.states_mut() {
            ob.flush_session(s);
        }
    }

    fn apply_inputs(&mut self, tick: u32) {
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

    fn move_npcs(&mut self, tick: u32) {
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

    /// Sessions that got the manifest [`CONTENT_REQUEST_WAIT`] ago and sent no
    /// ContentRequest (nor anything else) have every asset: ContentComplete and FullState.
    fn content_request_wait(&mut self, now: Instant) {
        let due: Vec<usize> = self
            .sessions
            .iter()
            .filter(|(_, s)| {
                let s = &s.state;
                s.stage == Stage::Content
                    && !s.requested
                    && s.manifest_at
                        .is_some_and(|t| now.saturating_duration_since(t) >= CONTENT_REQUEST_WAIT)
            })
            .map(|(slot, _)| slot)
            .collect();
        for slot in due {
            self.stats.events.add("content_without_request", 1);
            self.finish_content(slot);
        }
    }

    fn stream_content(&mut self) {
        let per_tick = self.cfg.chunks_per_tick;
        let cs = self.cfg.chunk_size;
        let mut finished = Vec::new();
        for (slot, s) in self.sessions.iter_mut() {
            let s = &mut s.state;
            if s.stage != Stage::Content || !s.requested || s.downloads.is_empty() {
                continue;
            }
            for _ in 0..per_tick {
                let Some((i, next)) = s.downloads.front_mut() else {
                    break;
                };
                let Some(a) = self.assets.get(*i) else {
                    s.downloads.pop_front();
                    continue;
                };
                let total = a.data.len().div_ceil(cs).max(1) as u32;
                let from = (*next as usize * cs).min(a.data.len());
                let to = (from + cs).min(a.data.len());
                let msg = Message::ContentChunk {
                    resource_id: a.resource_id,
                    chunk_index: *next,
                    total_chunks: total,
                    data: &a.data[from..to],
                };
                *next += 1;
                if *next >= total {
                    s.downloads.pop_front();
                }
                push_msg(s, &mut self.outbox, &msg);
                self.stats.events.add("content_chunks_sent", 1);
            }
            if s.downloads.is_empty() {
                finished.push(slot);
            }
        }
        for slot in finished {
            self.finish_content(slot);
        }
    }

    /// Spawns, despawns and each in-game client's DeltaState for this tick.
    fn send_world(&mut self, tick: u32) {
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
fn make_map(w: u16, h: u16) -> Vec<u8> {
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

fn make_assets(cfg: &CityServerConfig) -> Vec<Asset> {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let base = cfg.content_asset_size.max(1);
    (0..cfg.content_assets)
        .map(|i| {
            // 50 % .. 150 % of the base size, spread deterministically.
            let size = base / 2 + (i * 7919 + 13) % (base + 1);
            let mut data = vec![0u8; size];
            rng.fill_bytes(&mut data);
            let asset_type = (i % 3) as u8;
            let kind = ["textures", "audio", "data"][usize::from(asset_type)];
            Asset {
                resource_id: 0x1000_0000_0000_0000 | (rng.next_u64() >> 8),
                asset_type,
                path: format!("{kind}/asset_{i:02}.bin"),
                checksum: Fnv64::hash(&data),
                data,
            }
        })
        .collect()
}

impl Server for CityServer {
    fn handle_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) {
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += data.len() as u64;
        if !self.sessions.contains(from) {
            // The engine announces ENet peers with handle_connect; accept a peer it did not.
            self.stats.events.add("implicit_connect", 1);
        }
        let slot = self.session_slot(now, from);
        self.sessions.touch(slot, now);
        let dialect = self.cfg.dialect;
        for raw in codec::messages(data) {
            let raw = match raw {
                Ok(r) => r,
                Err(e) => {
                    self.stats.dropped.add2(e.message, e.reason, 1);
                    break;
                }
            };
            match raw.decode(dialect) {
                Ok(Some(msg)) => self.on_message(now, slot, msg),
                Ok(None) => self.stats.events.add("unknown_message_type", 1),
                Err(e) => self.stats.dropped.add2(e.message, e.reason, 1),
            }
            if self.sessions.get(slot).is_none() {
                break;
            }
        }
        let ob = &mut self.outbox;
        for s in self.sessions.states_mut() {
            ob.flush_session(s);
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        let mut ran = 0;
        while self.tick_time(self.next_slot) <= now {
            let catchup = match self.cfg.dialect {
                Dialect::Spec => MAX_CATCHUP_TICKS,
                Dialect::Implementation => VARIANT_CATCHUP_TICKS,
            };
            if ran < catchup {
                self.step(now);
                ran += 1;
                self.next_slot += 1;
            } else {
                // Too far behind: skip to the first slot after `now`. Tick numbers stay
                // consecutive, so clients see no false loss.
                let n = now.saturating_duration_since(self.epoch).as_nanos() as u64;
                let target = n * u64::from(TICK_RATE) / 1_000_000_000 + 1;
                let skipped = target.saturating_sub(self.next_slot);
                self.stats.events.add("ticks_skipped", skipped);
                self.next_slot = target.max(self.next_slot + 1);
            }
        }
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
        loop {
            let (addr, reliable, bytes) = self.outbox.queue.pop_front()?;
            let len = bytes.len();
            let fits = buf.len() >= len;
            if fits {
                buf[..len].copy_from_slice(&bytes);
            }
            self.outbox.recycle(bytes);
            if !fits {
                self.stats.events.add("packet_too_large_for_buffer", 1);
                continue;
            }
            self.stats.datagrams_out += 1;
            self.stats.bytes_out += len as u64;
            return Some((
                addr,
                Transmit {
                    len,
                    channel: if reliable {
                        CHANNEL_RELIABLE
                    } else {
                        CHANNEL_UNRELIABLE
                    },
                    reliable,
                },
            ));
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.tick_time(self.next_slot))
    }

    fn stats(&self) -> &ServerStats {
        &self.stats
    }

    fn poll_close(&mut self) -> Option<ConnId> {
        self.sessions.poll_close()
    }

    fn handle_connect(&mut self, now: Instant, from: ConnId) {
        if let Some(slot) = self.sessions.slot_of(from) {
            // A new ENet session from the same address: the old one is over, and the
            // transport must not be told to close the new one.
            self.remove(slot);
            self.sessions.retract_close(from);
        }
        self.session_slot(now, from);
        self.stats.events.add("enet_connects", 1);
    }

    fn handle_disconnect(&mut self, _now: Instant, from: ConnId) {
        if let Some(slot) = self.sessions.slot_of(from) {
            self.stats.events.add("enet_disconnects", 1);
            if self
                .sessions
                .state(slot)
                .is_some_and(|s| s.entity.is_some())
            {
                self.stats.disconnected += 1;
            }
            self.remove(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst of 2,000 packets queued at once, all sent: the outbox keeps
    /// `OUTBOX_POOL_KEEP` buffers for the next burst, not one per packet of this one.
    #[test]
    fn outbox_keeps_a_bounded_pool_after_a_deep_burst() {
        let mut ob = Outbox::default();
        for i in 0..2_000u64 {
            let mut open = vec![0u8; 1_200];
            ob.flush(ConnId(i), i % 2 == 0, &mut open);
            assert!(open.is_empty(), "the open packet moved to the queue");
        }
        assert_eq!(ob.queue.len(), 2_000);
        while let Some((_, _, bytes)) = ob.queue.pop_front() {
            ob.recycle(bytes);
        }
        assert_eq!(ob.pool.len(), OUTBOX_POOL_KEEP);
    }
}
