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
//! - **Handoff**: see [`crate::games::darkages`] and [`super::codec::token`]. A player past a
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

use super::codec::token::{HandoffToken, TOKEN_LEN};
use super::codec::{
    self, entity, event, field, fixed_text, input, reason, result, CoalescedWriter, ConnectAck,
    Damage, Death, EntityState, EventBody, Packet, SnapshotWriter, ZoneHandoff,
};
use super::{invalid_reason, step, velocity};
use crate::protocol::prelude::admission;
use crate::protocol::prelude::session::{SessionTable, TickClock};
use crate::protocol::prelude::{ConnId, Server, ServerStats, Transmit};

mod connect;
mod outgoing;
#[cfg(test)]
mod tests;
mod validate;
mod world;

pub use validate::SequenceValidator;
use validate::*;
use world::*;

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
            secret: super::codec::token::secret_from_seed(0),
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

    fn send(&mut self, to: ConnId, msg: Msg) {
        self.out.push_back((to, msg));
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
