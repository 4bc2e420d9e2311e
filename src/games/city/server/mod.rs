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
//!   ([`Mover`], see [`super::dialects::implementation::predict`]): they spawn on a tile's centre; the latest input
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
use super::dialects::implementation::predict::{self, Mover, Start};
use super::{step, Dialect, MAX_PLAYERS};
use crate::protocol::prelude::session::SessionTable;
use crate::protocol::prelude::{ConnId, Server, ServerStats, Transmit};

mod admission;
mod chat;
mod outbox;
#[cfg(test)]
mod tests;
mod world;

use admission::*;
use outbox::*;
pub use world::variant_passable;
use world::*;

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
    /// A generator's target, not a game (`tickswarm serve city --sink`): sessions are
    /// admitted as usual (ServerHello, manifest, content, FullState with the own entity only),
    /// Pings are answered, inputs are counted and dropped; no world runs, so no DeltaState,
    /// InputAck, EntitySpawn or NPC is ever sent. What costs a server per player per tick is
    /// gone, so one instance takes thousands of bots: the swarm, not the server, is measured.
    pub sink: bool,
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
            sink: false,
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

    /// The sink ([`CityServerConfig::sink`]): no NPCs, and one asset of 256 bytes, so the
    /// content stage is one chunk rather than 96 KiB per player.
    pub fn into_sink(self) -> Self {
        Self {
            sink: true,
            npc_count: 0,
            content_assets: 1,
            content_asset_size: 256,
            ..self
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
            Message::PlayerInput(_) if self.cfg.sink => self.stats.events.add("sink_inputs", 1),
            Message::PlayerInput(i) => self.on_input(now, slot, i),
            Message::ChatMessage { .. } if self.cfg.sink => self.stats.events.add("sink_chats", 1),
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
        if self.cfg.sink {
            // Only this session can have anything queued (a sink relays no chat): a sweep of
            // every session per datagram would cost the sink O(players) per input.
            if let Some(s) = self.sessions.state_mut(slot) {
                ob.flush_session(s);
            }
        } else {
            for s in self.sessions.states_mut() {
                ob.flush_session(s);
            }
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
