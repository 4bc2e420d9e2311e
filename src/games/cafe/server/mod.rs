//! The cafe reference server: a sans-IO state machine keyed by client address.
//!
//! Design decisions where cafe.md is silent (README's protocol notes repeat them):
//! - Clients are grouped in rooms of `room_size` by player slot; a client's snapshots carry the
//!   players of its room. A 33-byte record cannot fit a thousand players in a datagram, and a
//!   real server has interest management of some kind; rooms keep the cost linear.
//! - Each room's snapshot is encoded once per tick and stamped with each client's own `seq`.
//! - A full snapshot every `full_every` ticks, and to a client's first snapshot; deltas in
//!   between carry the entities that moved since the previous snapshot tick.
//! - When full, the server answers Hello with Disconnect (the refusal); the implementation
//!   dialect has no Disconnect, so there the Hello goes unanswered.
//! - A Hello from a known address is answered with the same Welcome again (retries are
//!   idempotent).
//! - Admission ([`crate::protocol::prelude::admission`]): a new session gets Welcome (12 bytes for a
//!   24-byte Hello) and nothing else until an Input carrying the Welcome's `player_id` proves
//!   its address. Player ids are drawn at random (1..=65535, unique among live clients, from
//!   a generator seeded by the OS), so a forger who cannot read the Welcome must guess 16
//!   bits; an Input with a wrong id ends the unproven session, so each forged Hello buys one
//!   guess. Until proven, the session is sent no more bytes than it sent (Welcome, Pong),
//!   is not in the snapshots, gets at most four Welcomes, expires after two seconds, and
//!   gives its slot to a new client when the server is full.
//! - The server pings each client every `heartbeat_interval` with its own millisecond clock;
//!   the bot echoes those, and the server counts the echo (`heartbeat_echo_received`)
//!   instead of answering it like a client's ping.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::codec::{self, Dialect, EntityRecord, GameStats, Message, SnapshotEncoder};
use crate::protocol::prelude::admission;
use crate::protocol::prelude::session::{is_expired, SessionTable, TickClock};
use crate::protocol::prelude::{ConnId, Keys, Server, ServerStats, Transmit, MAX_DATAGRAM};

/// World bounds and player speed of the reference game.
pub const WORLD_W: f32 = 1920.0;
pub const WORLD_H: f32 = 1080.0;
pub const PLAYER_SPEED: f32 = 240.0;

#[derive(Debug, Clone)]
pub struct CafeServerConfig {
    pub tick_rate: u16,
    /// A full snapshot every this many ticks.
    pub full_every: u32,
    pub max_clients: usize,
    pub client_timeout: Duration,
    pub room_size: usize,
    pub heartbeat_interval: Option<Duration>,
    pub dialect: Dialect,
    /// Pins the player-id generator (see [`crate::protocol::prelude::admission::proof_rng`]); `None`,
    /// the default, seeds it from the OS.
    pub id_seed: Option<u64>,
}

impl Default for CafeServerConfig {
    fn default() -> Self {
        Self {
            tick_rate: 60,
            full_every: 60,
            max_clients: 10_000,
            client_timeout: Duration::from_secs(5),
            room_size: 32,
            heartbeat_interval: Some(Duration::from_secs(2)),
            dialect: Dialect::Spec,
            id_seed: None,
        }
    }
}

/// One tick of a player's movement: `step` units along each held axis, stopped at the world's
/// edges. The server moves players with it, and the bot predicts its own player with it.
pub fn step_position((x, y): (f32, f32), keys: Keys, step: f32) -> (f32, f32) {
    let (ax, ay) = keys.axis();
    (
        (x + ax * step).clamp(0.0, WORLD_W),
        (y + ay * step).clamp(0.0, WORLD_H),
    )
}

impl CafeServerConfig {
    /// Defaults of the documented implementation (2 s timeout).
    pub fn for_dialect(dialect: Dialect) -> Self {
        let mut c = Self {
            dialect,
            ..Self::default()
        };
        if dialect == Dialect::Implementation {
            c.client_timeout = Duration::from_secs(2);
        }
        c
    }
}

#[derive(Debug, Clone)]
struct Client {
    player_id: u16,
    seq: u32,
    keys: Keys,
    record: EntityRecord,
    moved: bool,
    needs_full: bool,
    /// Header seq of the latest Input (the implementation dialect's `last_input`).
    last_input: u32,
    next_heartbeat: Instant,
    /// Token of the last heartbeat sent: a Ping carrying it is the client's echo.
    heartbeat_token: Option<u32>,
}

#[derive(Debug, Clone, Copy)]
enum Out {
    Welcome(usize),
    Pong(usize, u32),
    Heartbeat(usize),
    Snapshot { slot: usize, full: bool },
    Refuse(ConnId),
}

/// One room's encoded snapshots for the current tick (buffers reused across ticks).
#[derive(Debug, Default)]
struct RoomCache {
    delta: Vec<u8>,
    full: Vec<u8>,
}

pub struct CafeServer {
    cfg: CafeServerConfig,
    epoch: Instant,
    /// The latest time handed in (heartbeat timestamps are taken from it).
    now: Instant,
    sessions: SessionTable<Client>,
    tick: u32,
    clock: TickClock,
    /// Scratch for the timeout sweep, kept so a tick allocates nothing.
    expired: Vec<usize>,
    out: VecDeque<Out>,
    rooms: Vec<RoomCache>,
    stats: ServerStats,
    /// `seq` of a new client's first datagram (0; see [`CafeServer::set_first_client_seq`]).
    first_seq: u32,
    /// Draws player ids: the address proof (see the module docs).
    ids: ChaCha8Rng,
}

impl CafeServer {
    pub fn new(cfg: CafeServerConfig, now: Instant) -> Self {
        let rate = cfg.tick_rate.max(1);
        let cfg_seed = cfg.id_seed;
        Self {
            clock: TickClock::new(now, Duration::from_secs(1) / u32::from(rate)),
            cfg,
            epoch: now,
            now,
            sessions: SessionTable::new(),
            expired: Vec::new(),
            tick: 0,
            out: VecDeque::with_capacity(1024),
            rooms: Vec::new(),
            stats: ServerStats::default(),
            first_seq: 0,
            ids: admission::proof_rng(cfg_seed),
        }
    }

    pub fn config(&self) -> &CafeServerConfig {
        &self.cfg
    }

    /// The last tick simulated (0 before the first).
    pub fn tick(&self) -> u32 {
        self.tick
    }

    /// The clients' player entities as the server holds them now, in slot order (a room is
    /// `room_size` consecutive slots; player ids are drawn at random, see the module docs).
    pub fn players(&self) -> impl Iterator<Item = (ConnId, &EntityRecord)> + '_ {
        self.sessions.iter().map(|(_, s)| (s.conn, &s.state.record))
    }

    /// The room of the player whose id is `player_id`.
    pub fn room_of(&self, player_id: u16) -> Option<usize> {
        let size = self.cfg.room_size.max(1);
        self.sessions
            .iter()
            .find(|(_, s)| s.state.player_id == player_id)
            .map(|(slot, _)| slot / size)
    }

    /// The player entities of room `room`, in slot order.
    pub fn room_players(&self, room: usize) -> impl Iterator<Item = &EntityRecord> + '_ {
        let size = self.cfg.room_size.max(1);
        self.sessions
            .range(room * size..(room + 1) * size)
            .map(|(_, s)| &s.state.record)
    }

    /// A player id no live client has: 1..=65535 at random (0 is "server-owned" in
    /// `owner_id`). Unpredictable so that only a receiver of the Welcome can echo it.
    fn draw_player_id(&mut self) -> u16 {
        loop {
            let id: u16 = self.ids.random_range(1..=u16::MAX);
            if !self.sessions.iter().any(|(_, s)| s.state.player_id == id) {
                return id;
            }
        }
    }

    /// Test hook: the `seq` that clients admitted from now on start at (their Welcome carries
    /// it), so a test reaches the u32 wrap-around of the per-client sequence without sending
    /// four billion datagrams. Real servers start at 0.
    #[doc(hidden)]
    pub fn set_first_client_seq(&mut self, seq: u32) {
        self.first_seq = seq;
    }

    fn tick_interval(&self) -> Duration {
        Duration::from_secs(1) / u32::from(self.cfg.tick_rate.max(1))
    }

    fn now_ms(&self, now: Instant) -> u32 {
        now.saturating_duration_since(self.epoch).as_millis() as u32
    }

    fn admit(&mut self, now: Instant, from: ConnId, hello_len: usize) {
        if let Some(slot) = self.sessions.slot_of(from) {
            self.sessions.credit(slot, hello_len);
            // Any packet refreshes last_seen (cafe.md), a retried Hello too.
            self.sessions.touch(slot, now);
            self.stats.events.add("hello_repeated", 1);
            if self.sessions.may_reply(slot) {
                self.out.push_back(Out::Welcome(slot));
            } else {
                self.stats.events.add("handshake_rate_limited", 1);
            }
            return;
        }
        if self.sessions.len() >= self.cfg.max_clients {
            // Forged Hellos must not keep real players out: the oldest unproven session
            // gives its slot up.
            if let Some(slot) = self.sessions.oldest_unproven(now) {
                self.stats.events.add("unproven_evicted", 1);
                self.remove(slot);
            }
        }
        if self.sessions.len() >= self.cfg.max_clients {
            self.stats.refused += 1;
            if self.cfg.dialect.has_disconnect() {
                self.out.push_back(Out::Refuse(from));
            }
            // The transport forgets the connection after sending what is queued for it.
            self.sessions.close(from);
            return;
        }
        let slot = self.sessions.next_slot();
        let player_id = self.draw_player_id();
        let spawn_x = (slot % 40) as f32 * (WORLD_W / 40.0) + 20.0;
        let spawn_y = ((slot / 40) % 20) as f32 * (WORLD_H / 20.0) + 20.0;
        let client = Client {
            player_id,
            seq: self.first_seq,
            keys: Keys::default(),
            record: EntityRecord {
                entity_id: player_id,
                x: spawn_x,
                y: spawn_y,
                hp_cur: 100,
                hp_max: 100,
                sprite_id: 1,
                owner_id: player_id,
                lives_cur: 3,
                lives_max: 3,
                ..EntityRecord::default()
            },
            moved: true,
            needs_full: true,
            last_input: 0,
            next_heartbeat: now + self.cfg.heartbeat_interval.unwrap_or_default(),
            heartbeat_token: None,
        };
        let slot = self.sessions.insert(from, now, client);
        self.sessions.credit(slot, hello_len);
        self.sessions.may_reply(slot);
        self.stats.accepted += 1;
        self.stats.clients = self.sessions.len();
        self.out.push_back(Out::Welcome(slot));
    }

    fn remove(&mut self, slot: usize) {
        self.sessions.remove(slot);
        self.stats.clients = self.sessions.len();
    }

    fn step(&mut self, now: Instant) {
        self.tick = self.tick.wrapping_add(1);
        let dt = self.tick_interval().as_secs_f32();
        let timeout = self.cfg.client_timeout;
        let mut expired = std::mem::take(&mut self.expired);
        expired.clear();
        for (slot, s) in self.sessions.iter_mut() {
            if is_expired(s, now, timeout) {
                expired.push(slot);
                continue;
            }
            let c = &mut s.state;
            let (ax, ay) = c.keys.axis();
            let (vx, vy) = (ax * PLAYER_SPEED, ay * PLAYER_SPEED);
            let r = &mut c.record;
            let (nx, ny) = step_position((r.x, r.y), c.keys, PLAYER_SPEED * dt);
            if nx != r.x || ny != r.y || vx != r.vx || vy != r.vy {
                c.moved = true;
            }
            (r.x, r.y, r.vx, r.vy) = (nx, ny, vx, vy);
        }
        for &slot in &expired {
            self.stats.timed_out += 1;
            self.remove(slot);
        }
        self.expired = expired;
        let full_tick = self.tick % self.cfg.full_every.max(1) == 0;
        self.encode_rooms(full_tick);
        for (slot, s) in self.sessions.iter_mut() {
            // No stream to an address that has not shown it receives (admission rule 1).
            if !s.proven {
                continue;
            }
            let c = &mut s.state;
            let full = full_tick || c.needs_full;
            c.needs_full = false;
            self.out.push_back(Out::Snapshot { slot, full });
            if let Some(hb) = self.cfg.heartbeat_interval {
                if now >= c.next_heartbeat {
                    c.next_heartbeat = now + hb;
                    self.out.push_back(Out::Heartbeat(slot));
                }
            }
        }
    }

    /// Encode every room's snapshots for this tick: the delta always, the full one when it
    /// is a full tick or a member needs its first snapshot. Then clear the moved flags.
    fn encode_rooms(&mut self, full_tick: bool) {
        let size = self.cfg.room_size.max(1);
        let room_count = self.sessions.slot_count().div_ceil(size);
        if self.rooms.len() < room_count {
            self.rooms.resize_with(room_count, RoomCache::default);
        }
        let stats = GameStats {
            score: 0,
            wave: 1,
            current_level: 1,
            kills_this_level: 0,
            kills_to_next: 10,
            total_kills: 0,
        };
        for (room, cache) in self.rooms.iter_mut().enumerate().take(room_count) {
            let members = room * size..(room + 1) * size;
            let need_full = full_tick
                || self
                    .sessions
                    .range(members.clone())
                    .any(|(_, s)| s.proven && s.state.needs_full);
            for full in [false, true] {
                if full && !need_full {
                    continue;
                }
                let buf = if full {
                    &mut cache.full
                } else {
                    &mut cache.delta
                };
                buf.resize(MAX_DATAGRAM, 0);
                // The implementation dialect's last_input is per client; it is patched in
                // at send time, so 0 here.
                let last_input = (self.cfg.dialect == Dialect::Implementation).then_some(0);
                let Ok(mut enc) =
                    SnapshotEncoder::begin(buf, 0, self.tick, full, false, last_input)
                else {
                    continue;
                };
                // An unproven session is not in the game yet: others do not see it.
                for (_, s) in self
                    .sessions
                    .range(members.clone())
                    .filter(|(_, s)| s.proven)
                {
                    let c = &s.state;
                    if (full || c.moved) && enc.record(&c.record).is_err() {
                        break;
                    }
                }
                match enc.finish(&stats) {
                    Ok(len) => buf.truncate(len),
                    Err(_) => buf.clear(),
                }
            }
        }
        for (_, s) in self.sessions.iter_mut() {
            s.state.moved = false;
        }
    }
}

impl Server for CafeServer {
    fn handle_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) {
        self.now = now;
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += data.len() as u64;
        let (seq, msg) = match codec::decode(data, self.cfg.dialect) {
            Ok(m) => m,
            Err(e) => {
                self.stats.dropped.add2(e.message, e.reason, 1);
                return;
            }
        };
        if let Message::Hello { .. } = msg {
            self.admit(now, from, data.len());
            return;
        }
        let Some(slot) = self.sessions.slot_of(from) else {
            self.stats
                .dropped
                .add2(msg.msg_type().name(), "unknown_client", 1);
            return;
        };
        let Some(session) = self.sessions.get_mut(slot) else {
            return;
        };
        session.last_seen = now;
        if !session.proven {
            // Only an Input carrying the player id of our Welcome proves the address
            // (admission rule 2); a wrong one ends the session, so each forged Hello buys
            // one guess.
            match msg {
                Message::Input { player_id, .. } if player_id == session.state.player_id => {
                    session.proven = true;
                }
                Message::Input { .. } => {
                    self.stats.dropped.add2("input", "wrong_player_id", 1);
                    self.stats.events.add("unproven_wrong_proof", 1);
                    self.remove(slot);
                    return;
                }
                _ => self.sessions.credit(slot, data.len()),
            }
        }
        let Some(session) = self.sessions.get_mut(slot) else {
            return;
        };
        let client = &mut session.state;
        match msg {
            Message::Input {
                player_id,
                input_mask,
                ..
            } => {
                if player_id != client.player_id {
                    self.stats.dropped.add2("input", "wrong_player_id", 1);
                    return;
                }
                client.keys = Keys((input_mask & 0x1f) as u8);
                // docs/protocols/cafe.md: the implementation's `last_input` is the header
                // seq of the client's latest Input.
                client.last_input = seq;
            }
            // The echo of our own heartbeat is not answered: the bot would take the answer
            // for a new heartbeat and the two would ping-pong forever.
            Message::Ping { timestamp_ms } if client.heartbeat_token == Some(timestamp_ms) => {
                self.stats.events.add("heartbeat_echo_received", 1);
            }
            Message::Ping { timestamp_ms } => self.out.push_back(Out::Pong(slot, timestamp_ms)),
            Message::Disconnect => {
                self.stats.disconnected += 1;
                self.remove(slot);
            }
            Message::Hello { .. } => {}
            Message::Welcome { .. } | Message::Snapshot(_) => {
                self.stats
                    .dropped
                    .add2(msg.msg_type().name(), "wrong_direction", 1);
            }
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
            let out = self.out.pop_front()?;
            let now_ms = self.now_ms(self.now);
            let (addr, len) = match out {
                Out::Refuse(addr) => (addr, codec::encode(buf, 0, &Message::Disconnect).ok()?),
                Out::Snapshot { slot, full } => {
                    let room = slot / self.cfg.room_size.max(1);
                    let Some(cache) = self.rooms.get(room) else {
                        continue;
                    };
                    let bytes = if full { &cache.full } else { &cache.delta };
                    let len = bytes.len();
                    if len == 0 {
                        continue;
                    }
                    let Some(dst) = buf.get_mut(..len) else {
                        continue;
                    };
                    dst.copy_from_slice(bytes);
                    let Some(s) = self.sessions.get_mut(slot) else {
                        continue;
                    };
                    let c = &mut s.state;
                    codec::patch_seq(dst, c.seq);
                    if self.cfg.dialect == Dialect::Implementation {
                        codec::patch_last_input(dst, c.last_input);
                    }
                    c.seq = c.seq.wrapping_add(1);
                    (s.conn, len)
                }
                Out::Welcome(slot) | Out::Pong(slot, _) | Out::Heartbeat(slot) => {
                    let tick_rate = self.cfg.tick_rate;
                    let Some(s) = self.sessions.get_mut(slot) else {
                        continue;
                    };
                    let c = &mut s.state;
                    let msg = match out {
                        Out::Welcome(_) => Message::Welcome {
                            player_id: c.player_id,
                            tick_rate,
                        },
                        Out::Pong(_, ts) => Message::Ping { timestamp_ms: ts },
                        _ => {
                            let token = now_ms | 0x8000_0000;
                            c.heartbeat_token = Some(token);
                            Message::Ping {
                                timestamp_ms: token,
                            }
                        }
                    };
                    let len = codec::encode(buf, c.seq, &msg).ok()?;
                    c.seq = c.seq.wrapping_add(1);
                    let conn = s.conn;
                    // Until proven, no more bytes than the address sent (admission rule 2).
                    if !self.sessions.spend(slot, len) {
                        self.stats.events.add("unproven_budget_withheld", 1);
                        continue;
                    }
                    (conn, len)
                }
            };
            self.stats.datagrams_out += 1;
            self.stats.bytes_out += len as u64;
            return Some((addr, Transmit::datagram(len)));
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
