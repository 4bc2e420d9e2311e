//! The DarkAges reference zone server: a sans-IO state machine keyed by connection.
//!
//! A zone is a square of `2 × zone_half` metres (x east, z north, y up, always 0 here) with
//! players (one per client), projectiles (fired while INPUT_ATTACK is held, one per
//! [`FIRE_INTERVAL`]) and loot (picked up by walking over it). The simulation ticks at
//! `tick_hz` (60); every `snapshot_step` ticks (20 Hz) each playing client gets a SNAPSHOT.
//!
//! Readings where the spec is silent (README's protocol notes repeat them):
//! - **Inputs** are validated and applied at receipt, one [`step`] each, in §6's order: rate
//!   limit (token bucket of 60/s, burst 10: over it the input is dropped, and 60 drops within
//!   a second disconnect with RATE_LIMITED), sequence (§6.3's 1024-wide window: a duplicate
//!   or a sequence older than the window is a replay; a late one inside the window is
//!   accepted, UDP reorders), then §6.1's values. An invalid input is dropped and counted by
//!   reason; more than [`DarkAgesServerConfig::invalid_kick_per_s`] in a second disconnect
//!   with CHEAT_DETECTED. Upstream bytes above 2 KB/s (§6.2) are dropped. A CONNECT creating
//!   a session is allowed once a minute per connection; a CONNECT repeated on a live session
//!   is a handshake retry and gets the same CONNECT_ACK.
//! - **Area of interest** (§5.1): entities within 50 m ride every snapshot, 50-100 m every
//!   second one, 100-200 m every fourth (staggered by entity id), beyond 200 m none. An
//!   entity not due keeps, in the client's view, the state it had in the previous snapshot.
//!   A view holds at most [`DarkAgesServerConfig::max_view`] entities (the nearest), so a
//!   full snapshot fits §1.1's 1200-byte MTU.
//! - **Snapshots**: the server keeps each client's last `baselines` (30) views by tick. With
//!   the client's `last_received_tick` among them, it sends a delta against that view;
//!   otherwise (no ack yet, ack 0 — the bot's request for a full snapshot —, an ack older
//!   than the window, or the 22-byte INPUT of `struct_as_printed`) a full snapshot, as it
//!   does when a delta would exceed the MTU. Records are sorted by entity id. Full snapshots
//!   carry every field of every entity.
//! - **Events** (§2.6) queued for a client during a tick go out after it: one as EVENT, two
//!   or more as COALESCED_EVENTS (§5.3). DAMAGE and DEATH go to victim and attacker; a loot
//!   pickup is a DESPAWN to the picker; a SYSTEM greeting follows CONNECT_ACK.
//! - **Admission** ([`crate::protocol::prelude::admission`]): a CONNECT (105 bytes with its type) is
//!   answered with CONNECT_ACK (90) and a HEARTBEAT (5) whose timestamp is a challenge drawn
//!   at random (32 bits, from a generator seeded by the OS). §4.3 has the other side answer a
//!   HEARTBEAT with its timestamp, so a client that received it echoes the challenge, and that
//!   echo, and nothing else, proves the address: CONNECT_ACK carries nothing the client must
//!   echo, and CONNECTED carries nothing at all. A forger who cannot read the reply must guess
//!   32 bits; more than four wrong HEARTBEATs end the unproven session. Until proven, the
//!   session is sent no more bytes than it sent (CONNECT_ACK + challenge + ZONE_ENTER = 104
//!   for 105), no snapshot and no event, is not in anyone's view, gets at most four
//!   CONNECT_ACKs, expires after two seconds and gives its slot to a new client when the zone
//!   is full. The echo of the challenge is not answered (it would loop).
//! - **Heartbeats**: every client HEARTBEAT is answered with its timestamp; the server starts
//!   one only as the admission challenge (its snapshots keep NAT mappings alive), and does not
//!   answer the client's echo of it, so echoes cannot loop. A client
//!   silent for `client_timeout` is dropped.
//! - **Handoff**: see [`crate::protocol::darkages`] and [`super::token`]. A player past a
//!   border with a neighbour gets ZONE_HANDOFF (resent every 250 ms, as plain UDP may lose
//!   it) and plays on until its DISCONNECT(ZONE_HANDOFF); if it has not left when the token
//!   expires, the handoff is cancelled and the player is put back inside. The receiving zone
//!   verifies the token (MAC, zone, expiry), keeps the entity id, places the player at its
//!   border at the token's z, answers CONNECT_ACK and ZONE_ENTER; a refusal is CONNECT_ACK
//!   with `result` AUTH_FAILED and the token error as message.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::codec::{
    self, entity, event, field, fixed_text, input, reason, result, CoalescedWriter, ConnectAck,
    Damage, Death, EntityState, EventBody, Packet, SnapshotWriter, ZoneHandoff,
};
use super::token::{HandoffToken, TOKEN_LEN};
use super::{invalid_reason, step, velocity};
use crate::protocol::prelude::admission;
use crate::protocol::prelude::session::{SessionTable, TickClock};
use crate::protocol::prelude::{ConnId, Server, ServerStats, Transmit};

/// Time between two projectiles of one player holding INPUT_ATTACK.
pub const FIRE_INTERVAL: Duration = Duration::from_millis(500);
pub const PROJECTILE_SPEED: f32 = 20.0;
pub const PROJECTILE_LIFE: Duration = Duration::from_millis(1500);
pub const PROJECTILE_DAMAGE: u8 = 10;
/// A projectile within this distance of a player hits it.
pub const HIT_RADIUS: f32 = 1.0;
/// A player within this distance of loot picks it up.
pub const PICKUP_RADIUS: f32 = 1.5;
/// §5.1's tiers.
pub const AOI_CRITICAL: f32 = 50.0;
pub const AOI_HIGH: f32 = 100.0;
pub const AOI_MEDIUM: f32 = 200.0;
/// §6.3's replay window.
pub const SEQ_WINDOW: u32 = 1024;
/// Players enter a zone this far inside its border.
pub const ENTRY_MARGIN: f32 = 0.5;

#[derive(Debug, Clone)]
pub struct DarkAgesServerConfig {
    /// This zone's id (its instance index).
    pub zone: u32,
    /// Neighbour zones' addresses (`None`: the world ends there).
    pub west: Option<SocketAddr>,
    pub east: Option<SocketAddr>,
    /// Host text in ZONE_HANDOFF; `None`: the neighbour's IP.
    pub advertise_host: Option<String>,
    pub tick_hz: u32,
    /// Simulation ticks between snapshots.
    pub snapshot_step: u32,
    pub max_clients: usize,
    pub client_timeout: Duration,
    pub zone_half: f32,
    pub spawn_band: f32,
    pub handoff_timeout: Duration,
    pub handoff_resend: Duration,
    pub secret: u64,
    /// Wall clock (ms since the UNIX epoch) at the server's creation; `None`: read then.
    /// Token expiry compares wall clocks across zones; simulations pin it.
    pub wall_epoch_ms: Option<u64>,
    pub loot: usize,
    pub seed: u64,
    /// Views kept per client (§3.3: 30).
    pub baselines: usize,
    /// Entities a snapshot carries at most: 45 full records fit 1200 bytes.
    pub max_view: usize,
    pub invalid_kick_per_s: u32,
    pub input_rate: f32,
    pub input_burst: f32,
    pub upstream_bytes_per_s: u32,
    pub connect_interval: Duration,
    /// Pins the generator of address-proof challenges (see
    /// [`crate::protocol::prelude::admission::proof_rng`]); `None`, the default, seeds it from the OS.
    pub challenge_seed: Option<u64>,
}

impl Default for DarkAgesServerConfig {
    fn default() -> Self {
        Self {
            zone: 0,
            west: None,
            east: None,
            advertise_host: None,
            tick_hz: 60,
            snapshot_step: 3,
            max_clients: 10_000,
            client_timeout: Duration::from_secs(5),
            zone_half: 100.0,
            spawn_band: 10.0,
            handoff_timeout: Duration::from_secs(3),
            handoff_resend: Duration::from_millis(250),
            secret: super::token::secret_from_seed(0),
            wall_epoch_ms: None,
            loot: 20,
            seed: 0x4441,
            baselines: 30,
            max_view: (codec::MTU - codec::len::FULL_HEADER) / codec::len::RECORD_FULL,
            invalid_kick_per_s: 10,
            input_rate: 60.0,
            challenge_seed: None,
            input_burst: 10.0,
            upstream_bytes_per_s: 2048,
            connect_interval: Duration::from_secs(60),
        }
    }
}

/// §6.3's `SequenceValidator`: the highest sequence and a 1024-bit window below it. It
/// starts with sequence 0 marked received, as §6.1 refuses `sequence <= lastSequence`.
#[derive(Debug, Clone)]
pub struct SequenceValidator {
    highest: u32,
    /// Bit i (word i / 64): `highest - i` was received.
    window: [u64; (SEQ_WINDOW / 64) as usize],
}

impl Default for SequenceValidator {
    fn default() -> Self {
        let mut window = [0u64; (SEQ_WINDOW / 64) as usize];
        window[0] = 1;
        Self { highest: 0, window }
    }
}

impl SequenceValidator {
    /// `Ok(gap)` for a new sequence (`gap` skipped ones when it advanced), `Err` for a
    /// replay (seen, or older than the window).
    pub fn check(&mut self, seq: u32) -> Result<u32, &'static str> {
        if seq > self.highest {
            let diff = seq - self.highest;
            let gap = if self.highest == 0 { 0 } else { diff - 1 };
            if diff >= SEQ_WINDOW {
                self.window = Default::default();
            } else {
                self.shift(diff);
            }
            self.window[0] |= 1;
            self.highest = seq;
            return Ok(gap);
        }
        let diff = self.highest - seq;
        if diff >= SEQ_WINDOW {
            return Err("too_old");
        }
        let (w, b) = ((diff / 64) as usize, diff % 64);
        if self.window[w] & (1 << b) != 0 {
            return Err("replayed_sequence");
        }
        self.window[w] |= 1 << b;
        Ok(0)
    }

    fn shift(&mut self, by: u32) {
        let words = (by / 64) as usize;
        let bits = by % 64;
        let n = self.window.len();
        for i in (0..n).rev() {
            let src = i.checked_sub(words);
            let hi = src.map_or(0, |s| self.window[s] << bits);
            let lo = if bits == 0 {
                0
            } else {
                src.and_then(|s| s.checked_sub(1))
                    .map_or(0, |s| self.window[s] >> (64 - bits))
            };
            self.window[i] = hi | lo;
        }
    }
}

/// Counts in a one-second window.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    count: u32,
}

impl Window {
    fn new(now: Instant) -> Self {
        Self {
            start: now,
            count: 0,
        }
    }

    /// Add `n` at `now`; the count in the current second.
    fn add(&mut self, now: Instant, n: u32) -> u32 {
        if now.saturating_duration_since(self.start) >= Duration::from_secs(1) {
            self.start = now;
            self.count = 0;
        }
        self.count = self.count.saturating_add(n);
        self.count
    }
}

#[derive(Debug, Clone, Copy)]
enum ServerEvent {
    Damage(Damage),
    Death(Death),
    Despawn { id: u32, kind: u8 },
    System(&'static str),
}

impl ServerEvent {
    fn body(&self) -> EventBody<'static> {
        match *self {
            ServerEvent::Damage(d) => EventBody::Damage(d),
            ServerEvent::Death(d) => EventBody::Death(d),
            ServerEvent::Despawn { id, kind } => EventBody::Spawn {
                despawn: true,
                entity_id: id,
                entity_type: kind,
            },
            ServerEvent::System(t) => EventBody::Other {
                event_type: event::SYSTEM,
                payload: t.as_bytes(),
            },
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct PendingHandoff {
    east: bool,
    token: [u8; TOKEN_LEN],
    deadline: Instant,
    resend_at: Instant,
}

#[derive(Debug)]
struct Client {
    /// The HEARTBEAT timestamp whose echo proves the address (admission).
    challenge: u32,
    /// HEARTBEATs with another timestamp received while unproven.
    wrong_proofs: u32,
    entity: u32,
    playing: bool,
    pos: [f32; 3],
    yaw: f32,
    flags: u8,
    health: u8,
    seq: SequenceValidator,
    tokens: f32,
    refilled: Instant,
    invalid: Window,
    rate_drops: Window,
    bytes: Window,
    /// `last_received_tick` of the newest valid input (`None`: none, or the 22-byte layout).
    ack: Option<u32>,
    /// Views sent, by tick: a ring of `baselines` slots.
    history: Vec<(u32, Vec<EntityState>)>,
    hist_len: usize,
    hist_head: usize,
    snap: Vec<u8>,
    snap_len: usize,
    events: Vec<ServerEvent>,
    handoff: Option<PendingHandoff>,
    next_fire: Instant,
    /// Came in by handoff: ZONE_ENTER follows the CONNECT_ACK.
    handed_in: bool,
}

/// The view of `tick` in a client's history ring, if kept.
fn view_in(
    history: &[(u32, Vec<EntityState>)],
    len: usize,
    head: usize,
    tick: u32,
) -> Option<&[EntityState]> {
    let n = history.len();
    (0..len).find_map(|k| {
        let (t, v) = &history[(head + n - 1 - k) % n];
        (*t == tick).then_some(v.as_slice())
    })
}

impl Client {
    fn view(&self, tick: u32) -> Option<&[EntityState]> {
        view_in(&self.history, self.hist_len, self.hist_head, tick)
    }

    fn newest_view(&self) -> Option<&(u32, Vec<EntityState>)> {
        let n = self.history.len();
        (self.hist_len > 0).then(|| &self.history[(self.hist_head + n - 1) % n])
    }

    fn state(&self) -> EntityState {
        let moving = self.flags & (input::FORWARD | input::BACKWARD | input::LEFT | input::RIGHT);
        let anim = if self.flags & input::ATTACK != 0 {
            2
        } else if self.flags & input::BLOCK != 0 {
            3
        } else if self.flags & input::JUMP != 0 {
            4
        } else {
            u8::from(moving != 0)
        };
        EntityState {
            id: self.entity,
            kind: entity::PLAYER,
            pos: codec::quantize_vec3(self.pos),
            rot: codec::yaw_quat(self.yaw),
            vel: codec::quantize_vec3(velocity(self.flags, self.yaw)),
            health: self.health,
            anim,
            team: (self.entity % 2) as u8 + 1,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Projectile {
    id: u32,
    pos: [f32; 3],
    vel: [f32; 3],
    owner: u32,
    expires: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Loot {
    id: u32,
    pos: [f32; 3],
}

#[derive(Debug, Clone, Copy)]
enum Msg {
    Ack(usize),
    Refuse {
        result: u8,
        message: &'static str,
    },
    ZoneEnter(usize),
    Snapshot(usize),
    Events(usize),
    Handoff(usize),
    Pong(u32),
    Heartbeat(u32),
    /// The address-proof challenge of the session in the slot (a HEARTBEAT).
    Challenge(usize),
    Disconnect {
        reason: u8,
        message: &'static str,
    },
}

pub struct DarkAgesServer {
    cfg: DarkAgesServerConfig,
    /// Draws each session's address-proof challenge (see "Admission" in the module docs).
    challenges: ChaCha8Rng,
    epoch: Instant,
    wall_epoch_ms: u64,
    now: Instant,
    sessions: SessionTable<Client>,
    expired: Vec<usize>,
    recent_connects: HashMap<ConnId, Instant>,
    projectiles: Vec<Projectile>,
    loot: Vec<Loot>,
    rng: ChaCha8Rng,
    next_id: u32,
    next_event_id: u32,
    nonce: u32,
    tick: u32,
    snapshots: u32,
    clock: TickClock,
    out: VecDeque<(ConnId, Msg)>,
    /// Every entity of the zone this snapshot tick, with its float position.
    world: Vec<(EntityState, [f32; 3])>,
    /// Scratch: candidates of one client's view (squared distance, world index).
    near: Vec<(f32, usize)>,
    removed: Vec<u32>,
    /// Scratch: clients to queue something for, so a tick allocates nothing.
    targets: Vec<(ConnId, usize)>,
    hits: Vec<(u32, u32)>,
    stats: ServerStats,
}

impl DarkAgesServer {
    pub fn new(cfg: DarkAgesServerConfig, now: Instant) -> Self {
        let wall_epoch_ms = cfg.wall_epoch_ms.unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64)
        });
        let interval = Duration::from_secs(1) / cfg.tick_hz.max(1);
        let mut s = Self {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            challenges: admission::proof_rng(cfg.challenge_seed),
            next_id: ((cfg.zone & 0xFF) + 1) << 24,
            clock: TickClock::new(now, interval),
            cfg,
            epoch: now,
            wall_epoch_ms,
            now,
            sessions: SessionTable::new(),
            expired: Vec::new(),
            recent_connects: HashMap::new(),
            projectiles: Vec::new(),
            loot: Vec::new(),
            next_event_id: 1,
            nonce: 0,
            tick: 0,
            snapshots: 0,
            out: VecDeque::with_capacity(1024),
            world: Vec::with_capacity(256),
            near: Vec::with_capacity(256),
            removed: Vec::with_capacity(64),
            targets: Vec::with_capacity(256),
            hits: Vec::new(),
            stats: ServerStats::default(),
        };
        for _ in 0..s.cfg.loot {
            let id = s.alloc_id();
            let pos = s.random_pos(s.cfg.zone_half * 0.9);
            s.loot.push(Loot { id, pos });
        }
        s
    }

    pub fn config(&self) -> &DarkAgesServerConfig {
        &self.cfg
    }

    /// The last simulation tick run.
    pub fn tick(&self) -> u32 {
        self.tick
    }

    /// The view a client was sent at `tick`, if still kept (ground truth for tests).
    pub fn view_at(&self, conn: ConnId, tick: u32) -> Option<&[EntityState]> {
        self.sessions.by_conn(conn)?.state.view(tick)
    }

    /// A client's entity id.
    pub fn entity_of(&self, conn: ConnId) -> Option<u32> {
        self.sessions.by_conn(conn).map(|s| s.state.entity)
    }

    /// A client's position (metres).
    pub fn position_of(&self, conn: ConnId) -> Option<[f32; 3]> {
        self.sessions.by_conn(conn).map(|s| s.state.pos)
    }

    /// Move a client (tests: put a player at a border).
    pub fn teleport(&mut self, conn: ConnId, pos: [f32; 3]) {
        if let Some(slot) = self.sessions.slot_of(conn) {
            if let Some(s) = self.sessions.get_mut(slot) {
                s.state.pos = pos;
            }
        }
    }

    pub fn clients(&self) -> usize {
        self.sessions.len()
    }

    fn wall_ms(&self, now: Instant) -> u64 {
        self.wall_epoch_ms + now.saturating_duration_since(self.epoch).as_millis() as u64
    }

    fn now_ms(&self) -> u32 {
        self.now.saturating_duration_since(self.epoch).as_millis() as u32
    }

    fn alloc_id(&mut self) -> u32 {
        let base = self.next_id & 0xFF00_0000;
        let id = self.next_id;
        self.next_id = base | ((self.next_id.wrapping_add(1)) & 0x00FF_FFFF).max(1);
        id
    }

    fn random_pos(&mut self, extent: f32) -> [f32; 3] {
        let x = self.rng.random_range(-extent..=extent);
        let z = self.rng.random_range(-extent..=extent);
        grid([x, 0.0, z])
    }

    /// Where a new player starts: near the border towards a neighbour, if there is one.
    fn spawn_pos(&mut self) -> [f32; 3] {
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

    fn send(&mut self, to: ConnId, msg: Msg) {
        self.out.push_back((to, msg));
    }

    fn new_client(&mut self, now: Instant, entity: u32, pos: [f32; 3], health: u8) -> Client {
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

    fn on_connect(&mut self, now: Instant, from: ConnId, c: &codec::Connect, len: usize) {
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
                Err(super::token::TokenError::BadMac)
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

    fn refuse(&mut self, to: ConnId, result: u8, message: &'static str) {
        self.stats.refused += 1;
        self.send(to, Msg::Refuse { result, message });
        self.sessions.close(to);
    }

    fn kick(&mut self, slot: usize, reason: u8, message: &'static str) {
        let Some(conn) = self.sessions.get(slot).map(|s| s.conn) else {
            return;
        };
        self.stats.events.add2("kicked", reason::name(reason), 1);
        self.send(conn, Msg::Disconnect { reason, message });
        self.sessions.remove(slot);
        self.stats.clients = self.sessions.len();
    }

    fn on_input(&mut self, now: Instant, slot: usize, inp: &codec::Input) {
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

    fn step_world(&mut self, now: Instant) {
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

    fn borders(&mut self, now: Instant) {
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

    fn projectiles_step(&mut self, now: Instant) {
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

    fn hit(&mut self, victim: u32, attacker: u32) {
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

    fn loot_step(&mut self) {
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

    /// Build every playing client's snapshot of this tick.
    fn snapshot_all(&mut self) {
        self.snapshots = self.snapshots.wrapping_add(1);
        self.world.clear();
        for (_, s) in self.sessions.iter() {
            if s.proven && s.state.playing {
                self.world.push((s.state.state(), s.state.pos));
            }
        }
        for p in &self.projectiles {
            let yaw = p.vel[2].atan2(p.vel[0]);
            self.world.push((
                EntityState {
                    id: p.id,
                    kind: entity::PROJECTILE,
                    pos: codec::quantize_vec3(p.pos),
                    rot: codec::yaw_quat(yaw),
                    vel: codec::quantize_vec3(p.vel),
                    ..EntityState::default()
                },
                p.pos,
            ));
        }
        for l in &self.loot {
            self.world.push((
                EntityState {
                    id: l.id,
                    kind: entity::LOOT,
                    pos: codec::quantize_vec3(l.pos),
                    rot: [0, 0, 0, 127],
                    ..EntityState::default()
                },
                l.pos,
            ));
        }
        let mut targets = std::mem::take(&mut self.targets);
        targets.clear();
        targets.extend(
            self.sessions
                .iter()
                .filter(|(_, s)| s.proven && s.state.playing)
                .map(|(i, s)| (s.conn, i)),
        );
        for &(conn, slot) in &targets {
            self.snapshot_for(slot);
            self.send(conn, Msg::Snapshot(slot));
        }
        self.targets = targets;
    }

    fn snapshot_for(&mut self, slot: usize) {
        let tick = self.tick;
        let snap_no = self.snapshots;
        let max_view = self.cfg.max_view.max(1);
        let Some(session) = self.sessions.get_mut(slot) else {
            return;
        };
        let c = &mut session.state;
        // Candidates within the outer tier, nearest first when they do not all fit.
        self.near.clear();
        for (i, (_, p)) in self.world.iter().enumerate() {
            let d2 = dist2(c.pos, *p);
            if d2 <= AOI_MEDIUM * AOI_MEDIUM {
                self.near.push((d2, i));
            }
        }
        if self.near.len() > max_view {
            self.near
                .select_nth_unstable_by(max_view - 1, |a, b| a.0.total_cmp(&b.0));
            self.near.truncate(max_view);
            self.stats.events.add("aoi_truncated", 1);
        }
        // The new view: due entities as they are now, the others as last sent.
        let n = c.history.len();
        let head = c.hist_head;
        let mut view = std::mem::take(&mut c.history[head].1);
        view.clear();
        {
            let prev = c.newest_view().map(|(_, v)| v.as_slice()).unwrap_or(&[]);
            for &(d2, i) in &self.near {
                let (cur, _) = self.world[i];
                let due = d2 <= AOI_CRITICAL * AOI_CRITICAL
                    || (d2 <= AOI_HIGH * AOI_HIGH && (snap_no ^ cur.id) % 2 == 0)
                    || (snap_no ^ cur.id) % 4 == 0;
                let rec = if due {
                    cur
                } else {
                    match prev.binary_search_by_key(&cur.id, |e| e.id) {
                        Ok(k) => prev[k],
                        Err(_) => cur,
                    }
                };
                view.push(rec);
            }
        }
        view.sort_unstable_by_key(|e| e.id);
        // Baseline: the client's acked view, if kept (and not this very tick).
        let base = c
            .ack
            .filter(|&t| t != 0 && t != tick)
            .and_then(|t| view_in(&c.history, c.hist_len, c.hist_head, t).map(|v| (t, v)));
        let mut len = None;
        if let Some((btick, bview)) = base {
            self.removed.clear();
            if let Ok(mut w) = SnapshotWriter::delta(&mut c.snap, tick, btick) {
                let ok = write_delta(&mut w, &view, bview, &mut self.removed).is_ok()
                    && self.removed.iter().all(|&id| w.removed(id).is_ok());
                if ok {
                    len = w.finish().ok();
                }
            }
            if len.is_some() {
                self.stats.events.add("snapshots_delta", 1);
            } else {
                self.stats
                    .events
                    .add2("snapshots_full", "delta_overflow", 1);
            }
        } else {
            let why = match c.ack {
                None => "no_ack",
                Some(0) => "requested",
                Some(_) => "ack_too_old",
            };
            self.stats.events.add2("snapshots_full", why, 1);
        }
        if len.is_none() {
            len = SnapshotWriter::full(&mut c.snap, tick)
                .ok()
                .and_then(|mut w| {
                    for e in &view {
                        w.record(e, field::ALL).ok()?;
                    }
                    w.finish().ok()
                });
        }
        c.snap_len = len.unwrap_or(0);
        c.history[head] = (tick, view);
        c.hist_head = (head + 1) % n;
        c.hist_len = (c.hist_len + 1).min(n);
    }

    fn on_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) {
        let packet = match codec::decode(data) {
            Ok(p) => p,
            Err(e) if e.is_unknown_type() => {
                self.stats.events.add("unknown_packet_type", 1);
                return;
            }
            Err(e) => {
                self.stats.dropped.add2(e.message, e.reason, 1);
                return;
            }
        };
        if let Packet::Connect(c) = &packet {
            let c = *c;
            self.on_connect(now, from, &c, data.len());
            return;
        }
        let Some(slot) = self.sessions.slot_of(from) else {
            self.stats.dropped.add2(packet.name(), "unknown_client", 1);
            return;
        };
        let limit = self.cfg.upstream_bytes_per_s;
        let Some(s) = self.sessions.get_mut(slot) else {
            return;
        };
        s.last_seen = now;
        if !s.proven {
            // Only the echo of the challenge HEARTBEAT proves the address (admission); the
            // rest is handled, and pays for what the unproven session may be sent.
            s.unproven_in = s.unproven_in.saturating_add(data.len() as u64);
            if let Packet::Heartbeat { timestamp } = packet {
                if timestamp == s.state.challenge {
                    s.proven = true;
                    self.stats.events.add("address_proven", 1);
                    return;
                }
                s.state.wrong_proofs += 1;
                if s.state.wrong_proofs > admission::MAX_UNPROVEN_REPLIES {
                    // A real client echoes what it got; a stream of other values is a guesser.
                    self.stats.events.add("unproven_wrong_proof", 1);
                    self.sessions.remove(slot);
                    self.stats.clients = self.sessions.len();
                    return;
                }
            }
        } else if matches!(packet, Packet::Heartbeat { timestamp } if timestamp == s.state.challenge)
        {
            // A duplicate of the proof: answering it would start a heartbeat ping-pong.
            self.stats.events.add("challenge_echo_repeated", 1);
            return;
        }
        if s.state.bytes.add(now, data.len() as u32) > limit {
            self.stats.events.add("upstream_bandwidth_exceeded", 1);
            return;
        }
        match packet {
            Packet::Connected => s.state.playing = true,
            Packet::Input(i) => self.on_input(now, slot, &i),
            Packet::Heartbeat { timestamp } => {
                self.stats.events.add("heartbeat_answered", 1);
                self.send(from, Msg::Heartbeat(timestamp));
            }
            Packet::Ping { timestamp } => self.send(from, Msg::Pong(timestamp)),
            Packet::Disconnect { reason: r, .. } => {
                let handing = s.state.handoff.is_some();
                if r == reason::ZONE_HANDOFF && handing {
                    self.stats.events.add("handoff_out", 1);
                } else {
                    self.stats.disconnected += 1;
                }
                self.sessions.remove(slot);
                self.stats.clients = self.sessions.len();
            }
            other => self.stats.dropped.add2(other.name(), "wrong_direction", 1),
        }
    }

    fn zone_handoff(&self, slot: usize) -> Option<ZoneHandoff> {
        let c = &self.sessions.get(slot)?.state;
        let p = c.handoff?;
        let target = if p.east { self.cfg.east } else { self.cfg.west }?;
        let host = match &self.cfg.advertise_host {
            Some(h) => fixed_text::<32>(h),
            None => fixed_text::<32>(&target.ip().to_string()),
        };
        Some(ZoneHandoff {
            new_zone_id: if p.east {
                self.cfg.zone + 1
            } else {
                self.cfg.zone.wrapping_sub(1)
            },
            new_server_address: host,
            new_server_port: target.port(),
            handoff_token: p.token,
            handoff_timeout_ms: self.cfg.handoff_timeout.as_millis() as u32,
        })
    }

    /// Encode one queued message; `None` when it no longer applies (its session is gone).
    fn encode_msg(&mut self, to: ConnId, msg: Msg, buf: &mut [u8]) -> Option<usize> {
        let live = |s: &Self, slot: usize| s.sessions.get(slot).is_some_and(|x| x.conn == to);
        match msg {
            Msg::Snapshot(slot) => {
                if !live(self, slot) {
                    return None;
                }
                let c = &self.sessions.get(slot)?.state;
                let src = c.snap.get(..c.snap_len).filter(|s| !s.is_empty())?;
                let dst = buf.get_mut(..src.len())?;
                dst.copy_from_slice(src);
                Some(src.len())
            }
            Msg::Events(slot) => {
                if !live(self, slot) {
                    return None;
                }
                let event_id = self.next_event_id;
                let timestamp = self.now_ms();
                let c = &mut self.sessions.get_mut(slot)?.state;
                let (n, len) = encode_events(&c.events, event_id, timestamp, buf)?;
                c.events.drain(..n);
                self.next_event_id = self.next_event_id.wrapping_add(n as u32);
                if !c.events.is_empty() {
                    self.out.push_front((to, Msg::Events(slot)));
                }
                Some(len)
            }
            Msg::Ack(slot) => {
                if !live(self, slot) {
                    return None;
                }
                let c = &self.sessions.get(slot)?.state;
                let ack = ConnectAck {
                    server_protocol_version: codec::PROTOCOL_VERSION,
                    entity_id: c.entity,
                    zone_id: self.cfg.zone,
                    server_tick: self.tick,
                    server_time_ms: self.wall_ms(self.now),
                    result: result::SUCCESS,
                    message: [0; 64],
                };
                codec::encode(buf, &Packet::ConnectAck(ack)).ok()
            }
            Msg::Refuse { result, message } => {
                let ack = ConnectAck {
                    server_protocol_version: codec::PROTOCOL_VERSION,
                    entity_id: 0,
                    zone_id: self.cfg.zone,
                    server_tick: self.tick,
                    server_time_ms: self.wall_ms(self.now),
                    result,
                    message: fixed_text(message),
                };
                codec::encode(buf, &Packet::ConnectAck(ack)).ok()
            }
            Msg::ZoneEnter(slot) => {
                if !live(self, slot) {
                    return None;
                }
                let entity_id = self.sessions.get(slot)?.state.entity;
                let p = Packet::ZoneEnter {
                    zone_id: self.cfg.zone,
                    entity_id,
                };
                codec::encode(buf, &p).ok()
            }
            Msg::Handoff(slot) => {
                if !live(self, slot) {
                    return None;
                }
                let z = self.zone_handoff(slot)?;
                codec::encode(buf, &Packet::ZoneHandoff(z)).ok()
            }
            Msg::Pong(t) => codec::encode(buf, &Packet::Pong { timestamp: t }).ok(),
            Msg::Heartbeat(t) => codec::encode(buf, &Packet::Heartbeat { timestamp: t }).ok(),
            Msg::Challenge(slot) => {
                if !live(self, slot) {
                    return None;
                }
                let timestamp = self.sessions.get(slot)?.state.challenge;
                codec::encode(buf, &Packet::Heartbeat { timestamp }).ok()
            }
            Msg::Disconnect { reason, message } => {
                codec::encode(buf, &Packet::Disconnect { reason, message }).ok()
            }
        }
    }
}

/// Changed and new records of `view` against `base` (both sorted by id); ids only in `base`
/// into `removed`.
fn write_delta(
    w: &mut SnapshotWriter<'_>,
    view: &[EntityState],
    base: &[EntityState],
    removed: &mut Vec<u32>,
) -> crate::protocol::prelude::wire::WireResult {
    let (mut i, mut j) = (0, 0);
    while i < view.len() || j < base.len() {
        match (view.get(i), base.get(j)) {
            (Some(v), Some(b)) if v.id == b.id => {
                let m = v.diff_mask(b);
                if m != 0 {
                    w.record(v, m)?;
                }
                i += 1;
                j += 1;
            }
            (Some(v), Some(b)) if v.id < b.id => {
                w.record(v, field::ALL)?;
                i += 1;
            }
            (Some(v), None) => {
                w.record(v, field::ALL)?;
                i += 1;
            }
            (_, Some(b)) => {
                removed.push(b.id);
                j += 1;
            }
            (None, None) => break,
        }
    }
    Ok(())
}

/// One EVENT, or as many events as fit one COALESCED_EVENTS; `(events written, length)`.
fn encode_events(
    events: &[ServerEvent],
    event_id: u32,
    timestamp: u32,
    buf: &mut [u8],
) -> Option<(usize, usize)> {
    let first = events.first()?;
    let limit = buf.len().min(codec::MTU);
    let buf = &mut buf[..limit];
    if events.len() == 1 {
        let p = Packet::Event(codec::Event {
            event_id,
            timestamp,
            body: first.body(),
        });
        return codec::encode(buf, &p).ok().map(|n| (1, n));
    }
    let mut w = CoalescedWriter::new(buf).ok()?;
    let mut n = 0;
    for e in events {
        if w.push(&e.body()).is_err() {
            break;
        }
        n += 1;
    }
    if n == 0 {
        return None;
    }
    w.finish().ok().map(|len| (n, len))
}

fn dist2(a: [f32; 3], b: [f32; 3]) -> f32 {
    let (dx, dz) = (a[0] - b[0], a[2] - b[2]);
    dx * dx + dz * dz
}

/// Snap a position to the wire's 1/64 m grid (authoritative positions live there).
fn grid(p: [f32; 3]) -> [f32; 3] {
    let s = |v: f32| codec::dequantize_pos(codec::quantize_pos(v));
    [s(p[0]), s(p[1]), s(p[2])]
}

impl Server for DarkAgesServer {
    fn handle_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) {
        self.now = now;
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += data.len() as u64;
        self.on_datagram(now, from, data);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        let due = self.clock.due(now);
        if due > 0 {
            self.step_world(now);
        }
        if due > 1 {
            self.stats.events.add("ticks_skipped", due - 1);
        }
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
        loop {
            let (to, msg) = self.out.pop_front()?;
            let Some(len) = self.encode_msg(to, msg, buf) else {
                continue;
            };
            // Until proven, no more bytes than the address sent (admission rule 2).
            if let Some(slot) = self.sessions.slot_of(to) {
                if !self.sessions.spend(slot, len) {
                    self.stats.events.add("unproven_budget_withheld", 1);
                    continue;
                }
            }
            self.stats.datagrams_out += 1;
            self.stats.bytes_out += len as u64;
            return Some((to, super::transmit(buf, len)));
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.clock.next_deadline())
    }

    fn stats(&self) -> &ServerStats {
        &self.stats
    }

    /// The transport ended the connection (over GNS: the client closed it, or GNS gave up
    /// on it). The zone drops the session at once, as a DISCONNECT would, rather than keep
    /// its entity in everyone's view until `client_timeout`. Raw UDP has no such event; a
    /// session a DISCONNECT (or a handoff) already ended is not counted again.
    fn handle_disconnect(&mut self, _now: Instant, from: ConnId) {
        if let Some(slot) = self.sessions.slot_of(from) {
            self.stats.events.add("transport_closed", 1);
            self.sessions.remove(slot);
            self.stats.clients = self.sessions.len();
        }
    }

    fn poll_close(&mut self) -> Option<ConnId> {
        self.sessions.poll_close()
    }
}

impl std::fmt::Debug for DarkAgesServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DarkAgesServer")
            .field("zone", &self.cfg.zone)
            .field("tick", &self.tick)
            .field("clients", &self.sessions.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_window_follows_6_3() {
        let mut v = SequenceValidator::default();
        assert_eq!(v.check(1), Ok(0));
        assert_eq!(v.check(5), Ok(3));
        assert_eq!(v.check(3), Ok(0), "late but unseen");
        assert_eq!(v.check(3), Err("replayed_sequence"));
        assert_eq!(v.check(5), Err("replayed_sequence"));
        assert_eq!(
            v.check(0),
            Err("replayed_sequence"),
            "0 is never above the start"
        );
        assert_eq!(v.check(5 + 200), Ok(199));
        assert_eq!(
            v.check(3),
            Err("replayed_sequence"),
            "kept across the shift"
        );
        assert_eq!(v.check(4), Ok(0));
        assert_eq!(v.check(205 + 2000), Ok(1999));
        assert_eq!(v.check(205), Err("too_old"));
    }
}
