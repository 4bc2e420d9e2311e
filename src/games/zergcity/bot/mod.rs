//! The ZergCity bot: a sans-IO player over ENet packet payloads (one message each).
//!
//! Life: `start` (ENet is connected) sends ClientHello with a zero token; ServerHello with
//! result 0 makes it Connected (handshake time recorded), any other result is a connect
//! failure named after it (`server_full`, `version_mismatch`, ...). The first FullSnapshot is
//! the first baseline; from there the bot plays: InputMessages on the input grid
//! (`behaviour.input_rate`) drawn from the weighted action mix, a SnapshotAck for every tick
//! it applies, Ping/Pong, chat.
//!
//! # Baselines
//! The bot keeps the states of its last [`BASELINES`] applied ticks in a ring (reused
//! vectors: applying a delta merges its baseline and its operations into a spare world
//! ([`DeltaApplier`], `O((k + c) log n)` whatever the ids) and commits it by a swap, so
//! nothing is allocated per delta once the ring is warm). A world holds at most
//! [`MAX_TRACKED_ENTITIES`]: a snapshot past it is a decode error (`too_many_entities`) and
//! is not acknowledged. Everything the bot keeps for worlds counts against
//! `max_state_bytes`; over it the oldest baselines are dropped (`baseline_evicted`). A DeltaSnapshot is
//! applied only onto the tick it names as `base_tick`; when that tick is not in the ring
//! (never received, or older than the ring) it is counted in `baseline_misses` and not
//! acknowledged, so the server, whose acknowledged tick then ages, falls back to a
//! FullSnapshot. A delta whose target is not newer than the newest applied tick is stale
//! (`delta_stale`) and dropped. A delta that fails to apply (unknown entity, bad length) is a
//! decode error of `delta_snapshot` and is not acknowledged either.
//!
//! A FullSnapshot whose §5.1 frame is sound but whose section contents are another
//! implementation's layout (the spec leaves them open) becomes an *opaque* baseline: held by
//! tick, acknowledged, counted `full_snapshot.foreign_layout`. Deltas onto an opaque baseline
//! are checked against §5.2 and acknowledged (their target becomes the next opaque
//! baseline) without their contents being applied; play goes on.
//!
//! # Reconnection
//! With `reconnect_share`, a bot chosen by its seed asks the engine ([`Bot::poll_relink`]) to
//! drop its ENet session abruptly some time after its first snapshot and open a new one; on
//! [`Bot::handle_relinked`] it sends ClientHello with its session token and its old slot.
//! Counted: `reconnect_attempts`, then `reconnect_slot_restored`, `reconnect_new_slot` or
//! `reconnect_failed`; `resync_us` runs from the drop to the first FullSnapshot applied on
//! the new session.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::codec::{
    self, Action, Decompressor, Encoder, GridRect, Header, HelloResult, InputResult, Message,
    MsgType, ANY_SLOT, DISCONNECT_NORMAL, DISCONNECT_TIMEOUT, TOKEN_LEN,
};
use super::world::{self, DeltaApplier, World};
use super::ZergCityOptions;
use crate::protocol::prelude::acks::PendingAcks;
use crate::protocol::prelude::input_grid::InputGrid;
use crate::protocol::prelude::seqwindow::SeqWindow;
use crate::protocol::prelude::tail::SnapshotArrivals;
use crate::protocol::prelude::timers::{earliest, Handshake, Periodic, Silence};
use crate::protocol::prelude::Recorder;
use crate::protocol::prelude::{
    Bot, BotParams, BotPhase, Phase, Relink, Transmit, MAX_TRACKED_ENTITIES,
};

mod actions;
mod encode;
mod ping;
mod receive;
mod snapshots;

use actions::*;

/// Applied ticks kept as baselines (at 20 Hz: 800 ms of acknowledgement delay).
pub const BASELINES: usize = 16;

thread_local! {
    /// The decompression buffer of every bot this thread drives: it grows to the largest
    /// message decompressed (at most `max_decompressed_bytes`, 16 MiB) once per worker thread,
    /// not once per bot, so a bomb sent to a thousand bots costs one buffer per worker.
    static DECOMPRESSOR: std::cell::RefCell<Decompressor> =
        std::cell::RefCell::new(Decompressor::default());
}

/// Delta scratch a bot keeps between deltas (about 11,000 entity operations).
const APPLIER_KEEP_BYTES: usize = 256 * 1024;
/// Pings in flight at once.
const PINGS: usize = 8;

/// Where a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// ClientHello sent.
    Hello,
    /// Accepted; waiting for the first FullSnapshot.
    AwaitFull,
    Playing,
    /// The session was dropped on purpose; waiting for the new one.
    Relinking,
}

#[derive(Debug, Clone, Copy)]
enum Out {
    Hello {
        token: [u8; TOKEN_LEN],
        slot: u32,
    },
    Ack(u64),
    Input {
        seq: u32,
        client_tick: u64,
        act: Act,
    },
    Ping(u64),
    Chat(u32),
    Disconnect(u8),
}

/// Who a ZergCity bot is, the same in every dialect: its parameters and options, the name it
/// joins with (`<name_prefix>-<index>`) and its random stream (seeded from its seed).
pub(crate) struct Player {
    pub(crate) params: BotParams,
    pub(crate) opts: ZergCityOptions,
    pub(crate) name: String,
    pub(crate) rng: ChaCha8Rng,
}

impl Player {
    pub(crate) fn new(params: BotParams, opts: ZergCityOptions) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(params.seed),
            name: format!("{}-{}", opts.name_prefix, params.index),
            params,
            opts,
        }
    }
}

pub struct ZergCityBot {
    me: Player,
    phase: BotPhase,
    stage: Stage,
    out: VecDeque<Out>,
    enc: Encoder,
    seq_out: u32,
    down_seq: SeqWindow,
    /// Arrival times of the datagrams `down_seq` counts, for the tail a dead server leaves
    /// uncounted.
    arrivals: SnapshotArrivals,

    started_at: Option<Instant>,
    handshake: Handshake,
    silence: Silence,
    /// Microseconds since the Unix epoch at `epoch_at` (read once, at start: Ping carries
    /// "microseconds since epoch", and the bot reads no clock after that).
    epoch_us: u64,
    epoch_at: Option<Instant>,

    slot: Option<u8>,
    token: [u8; TOKEN_LEN],
    tick_rate: u32,
    map: (i32, i32),
    /// The bot's estimate of the server's tick: `tick` at `at`.
    clock: Option<(f64, Instant)>,

    ring: Vec<World>,
    valid: [bool; BASELINES],
    /// The baseline at this ring index came from a FullSnapshot whose sections are not in
    /// this build's layout (or from a delta onto such a baseline): held by tick only.
    opaque: [bool; BASELINES],
    /// Target tick of the last delta received since the last FullSnapshot (delta loss).
    last_delta_target: Option<u64>,
    work: World,
    applier: DeltaApplier,
    newest: Option<u64>,
    terrain: Vec<u8>,
    fulls_this_session: u32,
    last_state_at: Option<Instant>,

    grid: InputGrid,
    input_seq: u32,
    pending: PendingAcks,
    weights: [f64; 8],
    free_parcels: Vec<(i32, i32)>,
    mine: Vec<(i32, i32)>,

    pings: [Option<(u64, Instant)>; PINGS],
    ping_timer: Periodic,
    chat_timer: Periodic,
    chat_seq: u32,

    reconnect_at: Option<Instant>,
    relink_requested: bool,
    relink_started: Option<Instant>,
    reconnects_done: u32,
    slot_before: Option<u8>,
}

impl ZergCityBot {
    pub fn new(params: BotParams, opts: ZergCityOptions) -> Self {
        let ack_wait = Duration::from_millis(opts.input_ack_timeout_ms);
        let grid = InputGrid::new(params.input_period());
        let chat = Duration::from_secs_f64(60.0 / opts.chat_rate.max(1e-6));
        let weights = opts.actions.as_array();
        Self {
            silence: Silence::new(params.server_silence_timeout),
            ping_timer: Periodic::new(params.ping_interval),
            chat_timer: Periodic::new(chat),
            me: Player::new(params, opts),
            phase: BotPhase::Idle,
            stage: Stage::Hello,
            out: VecDeque::with_capacity(16),
            enc: Encoder::new(),
            seq_out: 0,
            down_seq: SeqWindow::new(),
            arrivals: SnapshotArrivals::new(),
            started_at: None,
            handshake: Handshake::new(),
            epoch_us: 0,
            epoch_at: None,
            slot: None,
            token: [0; TOKEN_LEN],
            tick_rate: super::TICK_RATE,
            map: (0, 0),
            clock: None,
            ring: vec![World::default(); BASELINES],
            valid: [false; BASELINES],
            opaque: [false; BASELINES],
            last_delta_target: None,
            work: World::default(),
            applier: DeltaApplier::new(),
            newest: None,
            terrain: Vec::new(),
            fulls_this_session: 0,
            last_state_at: None,
            grid,
            input_seq: 0,
            pending: PendingAcks::new(ack_wait),
            weights,
            free_parcels: Vec::new(),
            mine: Vec::new(),
            pings: [None; PINGS],
            chat_seq: 0,
            reconnect_at: None,
            relink_requested: false,
            relink_started: None,
            reconnects_done: 0,
            slot_before: None,
        }
    }

    pub fn stage(&self) -> Stage {
        self.stage
    }

    pub fn slot(&self) -> Option<u8> {
        self.slot
    }

    pub fn token(&self) -> [u8; TOKEN_LEN] {
        self.token
    }

    /// The newest tick applied (and acknowledged).
    pub fn newest_tick(&self) -> Option<u64> {
        self.newest
    }

    /// The state at the newest applied tick.
    pub fn world(&self) -> Option<&World> {
        let t = self.newest?;
        let w = &self.ring[(t as usize) % BASELINES];
        (w.tick == t).then_some(w)
    }

    /// Whether the baseline of `tick` is held by tick only (its FullSnapshot's sections were
    /// in another implementation's layout).
    pub fn is_opaque(&self, tick: u64) -> bool {
        self.has_baseline(tick) && self.opaque[(tick as usize) % BASELINES]
    }

    /// Whether the ring holds the state of `tick`.
    pub fn has_baseline(&self, tick: u64) -> bool {
        let i = (tick as usize) % BASELINES;
        self.valid[i] && self.ring[i].tick == tick
    }

    /// Ask for a reconnection now (tests; scenarios use `reconnect_share`).
    pub fn reconnect_now(&mut self, now: Instant, rec: &mut Recorder) {
        if self.stage == Stage::Playing {
            self.begin_relink(now, rec);
        }
    }

    fn micros_now(&self, now: Instant) -> u64 {
        let at = self.epoch_at.unwrap_or(now);
        self.epoch_us + now.saturating_duration_since(at).as_micros() as u64
    }

    fn close(&mut self, phase: BotPhase) {
        self.phase = phase;
        self.out.clear();
        self.reconnect_at = None;
    }

    fn reset_session(&mut self) {
        self.seq_out = 0;
        self.down_seq = SeqWindow::new();
        self.arrivals.reset();
        self.valid = [false; BASELINES];
        self.opaque = [false; BASELINES];
        self.last_delta_target = None;
        self.newest = None;
        self.fulls_this_session = 0;
        self.pings = [None; PINGS];
        self.last_state_at = None;
    }

    fn begin_relink(&mut self, now: Instant, rec: &mut Recorder) {
        rec.event("reconnect_attempts");
        self.relink_requested = true;
        self.relink_started = Some(now);
        self.stage = Stage::Relinking;
        self.out.clear();
        self.reconnect_at = None;
        self.slot_before = self.slot;
        self.arrivals.reset();
        // Inputs in flight on the dropped session cannot be acknowledged: not loss.
        let abandoned = self.pending.abandon(rec);
        rec.events.add("inputs_abandoned", abandoned);
    }
}

impl Bot for ZergCityBot {
    fn start(&mut self, now: Instant, _rec: &mut Recorder) {
        if self.phase != BotPhase::Idle {
            return;
        }
        self.epoch_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        self.epoch_at = Some(now);
        self.phase = BotPhase::Connecting;
        self.stage = Stage::Hello;
        self.started_at = Some(now);
        // ENet delivers the hello reliably or drops the session: a deadline, no resends.
        self.handshake
            .begin(now, None, self.me.params.handshake_timeout);
        self.out.push_back(Out::Hello {
            token: [0; TOKEN_LEN],
            slot: ANY_SLOT,
        });
    }

    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        if !self.phase.in_session() || self.stage == Stage::Relinking {
            rec.event("datagram_outside_session");
            return;
        }
        self.silence.heard(now);
        // Loss: the server's per-connection sequence, whenever the header is sound.
        if let Ok(h) = Header::parse(data) {
            let (e, r) = self.down_seq.on_seq(h.sequence).deltas();
            rec.loss_down.add(e, r);
            if r > 0 {
                self.arrivals.mark(now);
            }
        }
        DECOMPRESSOR.with(|cell| {
            let Ok(mut dec) = cell.try_borrow_mut() else {
                // Only a bot decoding inside another bot's decode could get here.
                rec.event("decompressor_busy");
                return;
            };
            dec.set_limit(self.me.opts.max_decompressed_bytes);
            match codec::decode(data, &mut dec) {
                Ok(d) => match d.message {
                    Some(m) => self.on_message(now, m, data.len(), d.header.compressed(), rec),
                    None => rec.event("unknown_message_type"),
                },
                Err(e) => {
                    rec.decode_error(e.message, e.reason);
                    // The real game server's envelope: name the wrong dialect.
                    if super::dialects::implementation::codec::fits(data) {
                        rec.event("dialect_hint.implementation");
                    }
                }
            }
        });
    }

    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting => {
                if self.handshake.timed_out(now) {
                    rec.connect_failures.add("timeout", 1);
                    self.close(BotPhase::Failed);
                }
            }
            BotPhase::Connected => {
                if self.stage == Stage::Relinking {
                    return;
                }
                if self.stage == Stage::Hello && self.handshake.timed_out(now) {
                    rec.event("reconnect_failed");
                    self.close(BotPhase::Closed);
                    return;
                }
                if self.silence.expired(now) {
                    rec.event("server_silence_timeout");
                    self.arrivals.finish(now, rec);
                    self.close(BotPhase::Closed);
                    self.out.push_back(Out::Disconnect(DISCONNECT_TIMEOUT));
                    return;
                }
                if self.stage == Stage::Playing {
                    if self.reconnect_at.is_some_and(|t| now >= t) {
                        self.begin_relink(now, rec);
                        return;
                    }
                    self.send_input(now, rec);
                    self.age_inputs(now, rec);
                    if self.chat_timer.fire(now) {
                        self.chat_seq = self.chat_seq.wrapping_add(1);
                        self.out.push_back(Out::Chat(self.chat_seq));
                        rec.event("chat_sent");
                    }
                }
                if self.ping_timer.fire(now) {
                    self.send_ping(now, rec);
                }
            }
            BotPhase::Idle | BotPhase::Failed | BotPhase::Closed => {}
        }
    }

    fn stop(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting | BotPhase::Connected => {
                self.arrivals.finish(now, rec);
                if self.stage == Stage::Relinking || self.relink_started.is_some() {
                    rec.event("reconnect_unfinished");
                }
                let relinking = self.stage == Stage::Relinking;
                self.close(BotPhase::Closed);
                if !relinking {
                    self.out.push_back(Out::Disconnect(DISCONNECT_NORMAL));
                }
            }
            BotPhase::Idle => self.phase = BotPhase::Closed,
            BotPhase::Failed | BotPhase::Closed => {}
        }
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(o) = self.out.pop_front() {
            let ty = match o {
                Out::Hello { .. } => MsgType::ClientHello,
                Out::Ack(_) => MsgType::SnapshotAck,
                Out::Input { .. } => MsgType::InputMessage,
                Out::Ping(_) => MsgType::Ping,
                Out::Chat(_) => MsgType::ChatMessage,
                Out::Disconnect(_) => MsgType::Disconnect,
            };
            if let Ok(len) = self.encode_out(&o, buf) {
                if self.me.opts.protocol_version != codec::PROTOCOL_VERSION && len > 4 {
                    buf[4] = self.me.opts.protocol_version;
                }
                self.seq_out = self.seq_out.wrapping_add(1);
                let (channel, reliable) = ty.channel();
                return Some(Transmit {
                    len,
                    channel,
                    reliable,
                });
            }
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            BotPhase::Connecting => self.handshake.next_deadline(),
            BotPhase::Connected => {
                if self.stage == Stage::Relinking {
                    return None;
                }
                let playing = self.stage == Stage::Playing;
                let input = playing.then(|| self.grid.next_due()).flatten();
                let chat = playing.then(|| self.chat_timer.next()).flatten();
                let reconnect = playing.then_some(self.reconnect_at).flatten();
                let hs = (self.stage == Stage::Hello)
                    .then(|| self.handshake.next_deadline())
                    .flatten();
                earliest([
                    self.silence.deadline(),
                    self.ping_timer.next(),
                    input,
                    chat,
                    reconnect,
                    hs,
                ])
            }
            BotPhase::Idle | BotPhase::Failed | BotPhase::Closed => None,
        }
    }

    fn phase(&self) -> BotPhase {
        self.phase
    }

    /// Accepted but before the first FullSnapshot is the `content` phase; a dropped session
    /// being replaced (and its new hello) is `reconnecting`.
    fn life_phase(&self) -> Phase {
        match (self.phase, self.stage) {
            (BotPhase::Connected, Stage::AwaitFull) => Phase::Content,
            (BotPhase::Connected, Stage::Relinking | Stage::Hello) => Phase::Reconnecting,
            (BotPhase::Connected, Stage::Playing) => Phase::InGame,
            (BotPhase::Idle, _) => Phase::Connecting,
            (BotPhase::Connecting, _) => Phase::ProtocolHandshake,
            (BotPhase::Failed, _) => Phase::Failed,
            (BotPhase::Closed, _) => Phase::Closed,
        }
    }

    fn waiting_for(&self) -> Option<&'static str> {
        match (self.phase, self.stage) {
            (BotPhase::Connecting, _) | (BotPhase::Connected, Stage::Hello) => Some("ServerHello"),
            (BotPhase::Connected, Stage::AwaitFull) => Some("FullSnapshot"),
            _ => None,
        }
    }

    fn handle_transport_closed(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting => {
                rec.connect_failures.add("transport_closed", 1);
                self.close(BotPhase::Failed);
            }
            BotPhase::Connected => {
                rec.event("transport_closed");
                self.arrivals.finish(now, rec);
                if self.relink_started.is_some() {
                    rec.event("reconnect_failed");
                }
                self.close(BotPhase::Closed);
            }
            BotPhase::Idle => self.close(BotPhase::Failed),
            BotPhase::Failed | BotPhase::Closed => {}
        }
    }

    fn poll_relink(&mut self) -> Option<Relink> {
        std::mem::take(&mut self.relink_requested).then_some(Relink { to: None })
    }

    fn handle_relinked(&mut self, now: Instant, _rec: &mut Recorder) {
        if self.stage != Stage::Relinking || self.phase != BotPhase::Connected {
            return;
        }
        self.reset_session();
        self.stage = Stage::Hello;
        self.handshake
            .begin(now, None, self.me.params.handshake_timeout);
        self.silence.arm(now);
        self.silence.heard(now);
        let slot = self.slot.map_or(ANY_SLOT, u32::from);
        self.out.push_back(Out::Hello {
            token: self.token,
            slot,
        });
    }
}

impl std::fmt::Debug for ZergCityBot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZergCityBot")
            .field("index", &self.me.params.index)
            .field("phase", &self.phase)
            .field("stage", &self.stage)
            .field("slot", &self.slot)
            .field("newest", &self.newest)
            .finish()
    }
}
