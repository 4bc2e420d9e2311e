//! The ZergCity reference server: one four-player game per instance, a sans-IO state machine
//! keyed by [`ConnId`].
//!
//! # The game
//! A 64 × 64 map (land, water where a seeded pattern puts it, hills), each slot with its
//! quadrant. Players buy tiles (Parcel entities), and on their own free parcels place
//! buildings, zone lots (one entity per rectangle), roads, conduits and pipes. Every tick a
//! twentieth of the structures grow (population, development, building level, energy and
//! fluid demand and supply), and once a second each player's treasury collects tribute from
//! its population, so every delta carries real component changes.
//!
//! # Decisions where zergcity.md is silent (README's protocol notes repeat them)
//! - Inputs are validated and applied on arrival and acknowledged at once on channel 0:
//!   `applied_tick` is the next tick (the first snapshot that shows the change), 0 when
//!   rejected. Every input is acknowledged, a rejected one with its result code, so upstream
//!   loss is measurable. More than 60 inputs in a one-second window: result 6 (rate limited),
//!   not applied. Costs: parcel 200, building 500, zone lot 50 per rectangle, road 10,
//!   conduit and pipe 20 per tile; 16 parcels and 32 structures per player, beyond that
//!   result 5 (requirements not met). A tribute rate above 20 % is result 5. CancelAction
//!   and None succeed and change nothing (actions apply at once, nothing is pending).
//! - Validation order of an action: bounds (1 invalid position) · terrain (4 blocked) ·
//!   ownership (3 not owner) · occupancy (1) · caps (5) · funds (2).
//! - Snapshots: each tick, each playing client gets one of: a FullSnapshot (on join, after a
//!   reconnection, or when its newest acknowledged tick is more than `max_delta_age` ticks
//!   old or no longer in the 32-tick history: a fallback, counted), nothing (while a
//!   FullSnapshot is in flight and not yet acknowledged), or a DeltaSnapshot from its newest
//!   acknowledged tick to now. There is no FullSnapshot request message, so §13.2's
//!   "1 per 30 seconds" has nothing to limit.
//! - Slots: a fifth player gets ServerHello result 1 (server full) and the session is closed.
//!   A player whose ENet session drops (or who falls silent for `client_timeout`) keeps the
//!   slot for its token's life; a Disconnect from the client frees it at once and removes the
//!   player's entities. Tokens expire an hour after the player's last message. A ClientHello
//!   with a live token gets the same slot back (its old session, if still open, is closed); a
//!   dead or unknown token gets a new slot if one is free (§13.3), else result 1.
//! - A client whose packets fail validation 10 times gets Disconnect(4 protocol error). A
//!   ClientHello with another protocol version is answered with ServerHello result 2 and
//!   the session is closed. The game action types 0x30-0x34 and ServerCommand have no layout
//!   and are counted and ignored (`action_message_ignored`), as are unknown types.
//! - Chat: a ChatMessage goes to every playing client of the game (the sender too) as
//!   ChatBroadcast with the sender's slot.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::codec::{
    self, Action, DecodeError, Decompressor, Encoder, HelloResult, InputResult, Message, MsgType,
    DISCONNECT_PROTOCOL_ERROR, DISCONNECT_TIMEOUT, ERROR_INVALID_MESSAGE, TOKEN_LEN,
};
use super::world::{self, Entity, Metadata, PlayerInfo, World};
use super::{MAX_PLAYERS, TICK_RATE};
use crate::protocol::prelude::session::{SessionTable, TickClock};
use crate::protocol::prelude::{ConnId, Server, ServerStats, Transmit, MAX_MESSAGE};

mod actions;
mod admission;
mod encode;
mod tick;

use actions::*;

/// Ticks of world history kept for deltas.
pub const HISTORY: usize = 32;
const PARCEL_COST: i64 = 200;
const BUILDING_COST: i64 = 500;
const ZONE_COST: i64 = 50;
const MAX_TRIBUTE: u8 = 20;
const MAX_ZONE_RECTS: usize = 4;
const MAX_ZONE_AREA: u32 = 16;
const MAX_TILES_PER_ACTION: usize = 16;

#[derive(Debug, Clone)]
pub struct ZergCityServerConfig {
    /// Players per game (slots 0..max_players, at most 4).
    pub max_players: usize,
    pub tick_rate: u32,
    pub map_width: u32,
    pub map_height: u32,
    /// A session token lives this long after the player's last message (§13.3: an hour).
    pub token_ttl: Duration,
    pub max_inputs_per_second: u32,
    /// Invalid messages after which a client is disconnected (§13.2: 10).
    pub max_invalid_messages: u32,
    pub client_timeout: Duration,
    /// Deltas only from an acknowledged tick at most this many ticks old; else a full
    /// snapshot.
    pub max_delta_age: u64,
    pub starting_funds: i64,
    pub max_parcels: usize,
    pub max_structures: usize,
    pub server_version: u32,
    pub seed: u64,
}

impl Default for ZergCityServerConfig {
    fn default() -> Self {
        Self {
            max_players: MAX_PLAYERS,
            tick_rate: TICK_RATE,
            map_width: 64,
            map_height: 64,
            token_ttl: Duration::from_secs(3600),
            max_inputs_per_second: 60,
            max_invalid_messages: 10,
            client_timeout: Duration::from_secs(10),
            max_delta_age: 24,
            starting_funds: 20_000,
            max_parcels: 16,
            max_structures: 32,
            server_version: 1,
            seed: 0x2e2c_17e0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Hello,
    Playing,
    /// Refused or kicked: everything is ignored until the transport closes it.
    Done,
}

#[derive(Debug, Clone)]
struct Client {
    stage: Stage,
    slot: Option<usize>,
    seq_out: u32,
    acked: Option<u64>,
    full_pending: Option<u64>,
    window_start: Instant,
    inputs_in_window: u32,
    invalid: u32,
}

#[derive(Debug, Clone)]
struct Player {
    name: String,
    token: [u8; TOKEN_LEN],
    token_expires: Instant,
    conn: Option<ConnId>,
    entity: u32,
    funds: i64,
    tribute: u8,
    parcels: usize,
    structures: usize,
}

#[derive(Debug, Clone)]
enum Out {
    Hello {
        result: HelloResult,
        slot: u8,
        token: [u8; TOKEN_LEN],
        players: u32,
    },
    Disconnect {
        reason: u8,
        text: &'static str,
    },
    Error {
        code: u32,
        text: &'static str,
    },
    Pong {
        timestamp: u64,
    },
    Full {
        tick: u64,
    },
    Delta {
        base: u64,
        target: u64,
    },
    InputAck {
        seq: u32,
        result: InputResult,
        applied: u64,
    },
    Chat {
        sender: u8,
        text: Arc<str>,
    },
}

pub struct ZergCityServer {
    cfg: ZergCityServerConfig,
    sessions: SessionTable<Client>,
    players: [Option<Player>; MAX_PLAYERS],
    world: World,
    history: Vec<World>,
    tick: u64,
    clock: TickClock,
    terrain: Vec<u8>,
    land_value: Vec<u8>,
    /// Parcel owner per tile (0 none, else slot + 1).
    owner: Vec<u8>,
    /// Structure entity per tile (0 none).
    occupant: Vec<u32>,
    next_entity: u32,
    rng: ChaCha8Rng,
    out: VecDeque<(ConnId, u32, Out)>,
    dec: Decompressor,
    enc: Encoder,
    scratch: Vec<u8>,
    expired: Vec<usize>,
    /// Snapshot decisions of one tick (reused: nothing allocated per tick).
    sends: Vec<(ConnId, Out)>,
    stats: ServerStats,
}

impl ZergCityServer {
    pub fn new(cfg: ZergCityServerConfig, now: Instant) -> Self {
        let (w, h) = (cfg.map_width as usize, cfg.map_height as usize);
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let terrain: Vec<u8> = (0..w * h)
            .map(|i| {
                let (x, y) = ((i % w) as i32, (i / w) as i32);
                // A river along a diagonal band and scattered hills.
                if (x - y).abs() <= 1 && x % 16 > 3 {
                    1
                } else if (x * 7 + y * 13) % 29 == 0 {
                    2
                } else {
                    0
                }
            })
            .collect();
        let land_value = (0..w * h)
            .map(|i| ((i % w) as u32 * 3 + (i / w) as u32 * 5 + rng.random_range(0..8)) as u8)
            .collect();
        let interval = Duration::from_secs(1) / cfg.tick_rate.max(1);
        Self {
            history: vec![World::with_capacity(256); HISTORY],
            clock: TickClock::new(now, interval),
            terrain,
            land_value,
            owner: vec![0; w * h],
            occupant: vec![0; w * h],
            next_entity: 1,
            rng,
            sessions: SessionTable::new(),
            players: Default::default(),
            world: World::with_capacity(256),
            tick: 0,
            out: VecDeque::with_capacity(64),
            dec: Decompressor::new(64 * 1024),
            enc: Encoder::new(),
            scratch: vec![0; 1024 * 1024],
            expired: Vec::new(),
            sends: Vec::with_capacity(MAX_PLAYERS + 1),
            stats: ServerStats::default(),
            cfg,
        }
    }

    pub fn config(&self) -> &ZergCityServerConfig {
        &self.cfg
    }

    pub fn tick(&self) -> u64 {
        self.tick
    }

    pub fn world(&self) -> &World {
        &self.world
    }

    /// The player slot of a connection.
    pub fn slot_of(&self, conn: ConnId) -> Option<usize> {
        self.sessions.by_conn(conn)?.state.slot
    }

    /// The newest tick `conn` acknowledged (the baseline its next delta starts from).
    pub fn acked_tick(&self, conn: ConnId) -> Option<u64> {
        self.sessions.by_conn(conn)?.state.acked
    }

    /// Players holding a slot (connected or away with a live token).
    pub fn players(&self) -> usize {
        self.players.iter().flatten().count()
    }

    fn idx(&self, x: i32, y: i32) -> Option<usize> {
        let (w, h) = (self.cfg.map_width as i32, self.cfg.map_height as i32);
        ((0..w).contains(&x) && (0..h).contains(&y)).then(|| (y * w + x) as usize)
    }

    fn queue(&mut self, conn: ConnId, o: Out) {
        let seq = match self.sessions.slot_of(conn) {
            Some(s) => match self.sessions.state_mut(s) {
                Some(c) => {
                    let q = c.seq_out;
                    c.seq_out = c.seq_out.wrapping_add(1);
                    q
                }
                None => 0,
            },
            None => 0,
        };
        self.out.push_back((conn, seq, o));
    }

    fn session_for(&mut self, now: Instant, conn: ConnId) -> usize {
        let slot = self.sessions.insert(
            conn,
            now,
            Client {
                stage: Stage::Hello,
                slot: None,
                seq_out: 0,
                acked: None,
                full_pending: None,
                window_start: now,
                inputs_in_window: 0,
                invalid: 0,
            },
        );
        // ENet's handshake proved the address before the server heard of the peer
        // (crate::protocol::prelude::admission).
        self.sessions.prove(slot);
        slot
    }

    /// Turn a session away: its last message is queued, then the transport closes it.
    fn end_session(&mut self, s: usize) {
        if let Some(c) = self.sessions.state_mut(s) {
            c.stage = Stage::Done;
        }
        if let Some(sess) = self.sessions.remove(s) {
            if let Some(p) = sess.state.slot.and_then(|p| self.players[p].as_mut()) {
                if p.conn == Some(sess.conn) {
                    p.conn = None;
                }
            }
        }
    }

    fn invalid(&mut self, s: usize, e: DecodeError) {
        self.stats.dropped.add2(e.message, e.reason, 1);
        let Some(c) = self.sessions.state_mut(s) else {
            return;
        };
        c.invalid += 1;
        if c.invalid >= self.cfg.max_invalid_messages {
            let conn = self.sessions.get(s).map(|x| x.conn);
            if let Some(conn) = conn {
                self.stats.events.add("kicked_invalid_messages", 1);
                self.queue(
                    conn,
                    Out::Error {
                        code: ERROR_INVALID_MESSAGE,
                        text: "too many invalid messages",
                    },
                );
                self.queue(
                    conn,
                    Out::Disconnect {
                        reason: DISCONNECT_PROTOCOL_ERROR,
                        text: "too many invalid messages",
                    },
                );
            }
            self.end_session(s);
        }
    }

    fn on_message(&mut self, now: Instant, s: usize, conn: ConnId, msg: Message<'_>) {
        if let Some(p) = self.sessions.state(s).and_then(|c| c.slot) {
            if let Some(pl) = self.players[p].as_mut() {
                pl.token_expires = now + self.cfg.token_ttl;
            }
        }
        match msg {
            Message::ClientHello {
                player_name,
                session_token,
                requested_slot,
                ..
            } => self.on_hello(now, s, conn, player_name, session_token, requested_slot),
            Message::Ping { timestamp, .. } => self.queue(conn, Out::Pong { timestamp }),
            Message::SnapshotAck { acked_tick, .. } => {
                let tick = self.tick;
                if let Some(c) = self.sessions.state_mut(s) {
                    if acked_tick > tick {
                        self.stats.events.add("ack_from_the_future", 1);
                    } else if c.acked.is_none_or(|a| acked_tick > a) {
                        c.acked = Some(acked_tick);
                        if c.full_pending.is_some_and(|f| acked_tick >= f) {
                            c.full_pending = None;
                        }
                    }
                }
            }
            Message::InputMessage {
                input_sequence,
                action,
                ..
            } => self.on_input(now, s, conn, input_sequence, &action),
            Message::ChatMessage { text } => {
                let Some(sender) = self.sessions.state(s).and_then(|c| c.slot) else {
                    return;
                };
                let text: Arc<str> = Arc::from(text);
                let to: Vec<ConnId> = self
                    .sessions
                    .iter()
                    .filter(|(_, x)| x.state.stage == Stage::Playing)
                    .map(|(_, x)| x.conn)
                    .collect();
                for c in to {
                    self.queue(
                        c,
                        Out::Chat {
                            sender: sender as u8,
                            text: text.clone(),
                        },
                    );
                }
            }
            Message::Disconnect { .. } => {
                self.stats.disconnected += 1;
                if let Some(p) = self.sessions.state(s).and_then(|c| c.slot) {
                    self.leave(p);
                }
                self.end_session(s);
            }
            Message::Opaque { .. } => self.stats.events.add("action_message_ignored", 1),
            Message::ServerHello { .. }
            | Message::Pong { .. }
            | Message::FullSnapshot { .. }
            | Message::DeltaSnapshot(_)
            | Message::InputAck { .. }
            | Message::ChatBroadcast { .. }
            | Message::ErrorMessage { .. } => self.invalid(
                s,
                DecodeError::new(msg.msg_type().name(), "wrong_direction"),
            ),
        }
    }
}

impl Server for ZergCityServer {
    fn handle_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) {
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += data.len() as u64;
        let s = self.session_for(now, from);
        if self.sessions.state(s).map(|c| c.stage) == Some(Stage::Done) {
            return;
        }
        self.sessions.touch(s, now);
        let mut dec = std::mem::take(&mut self.dec);
        match codec::decode(data, &mut dec) {
            Ok(d) => match d.message {
                Some(m) => self.on_message(now, s, from, m),
                None => self.stats.events.add("unknown_message_type", 1),
            },
            Err(e) => {
                let hello = data.get(5) == Some(&(MsgType::ClientHello as u8));
                let in_hello = self.sessions.state(s).map(|c| c.stage) == Some(Stage::Hello);
                if e.reason == "bad_version" && hello && in_hello {
                    self.stats.dropped.add2(e.message, e.reason, 1);
                    self.refuse(s, from, HelloResult::VersionMismatch);
                } else {
                    self.invalid(s, e);
                }
            }
        }
        self.dec = dec;
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.clock.due(now) > 0 {
            self.step(now);
        }
        self.stats.clients = self
            .sessions
            .iter()
            .filter(|(_, s)| s.state.stage == Stage::Playing)
            .count();
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
        let cap = buf.len().min(MAX_MESSAGE);
        while let Some((conn, seq, o)) = self.out.pop_front() {
            match self.encode(&mut buf[..cap], seq, &o) {
                Ok(len) => {
                    let ty = match o {
                        Out::Full { .. } => MsgType::FullSnapshot,
                        Out::Delta { .. } => MsgType::DeltaSnapshot,
                        Out::Pong { .. } => MsgType::Pong,
                        _ => MsgType::ServerHello,
                    };
                    let (channel, reliable) = ty.channel();
                    self.stats.datagrams_out += 1;
                    self.stats.bytes_out += len as u64;
                    return Some((
                        conn,
                        Transmit {
                            len,
                            channel,
                            reliable,
                        },
                    ));
                }
                Err(_) => self.stats.events.add("encode_failed", 1),
            }
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.clock.next_deadline())
    }

    fn stats(&self) -> &ServerStats {
        &self.stats
    }

    fn handle_connect(&mut self, now: Instant, from: ConnId) {
        self.session_for(now, from);
    }

    fn handle_disconnect(&mut self, _now: Instant, from: ConnId) {
        // The slot stays with the player while its token lives (reconnection).
        if let Some(s) = self.sessions.slot_of(from) {
            self.end_session(s);
        }
    }

    fn poll_close(&mut self) -> Option<ConnId> {
        self.sessions.poll_close()
    }
}

impl std::fmt::Debug for ZergCityServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZergCityServer")
            .field("tick", &self.tick)
            .field("players", &self.players())
            .field("entities", &self.world.len())
            .finish()
    }
}
