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

/// An action as the bot queues it (copied, no borrow), turned into [`Action`] on encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Act {
    ty: u8,
    a: i32,
    b: i32,
    c: u32,
    n: usize,
    tiles: [(i32, i32); 4],
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

pub struct ZergCityBot {
    params: BotParams,
    opts: ZergCityOptions,
    name: String,
    rng: ChaCha8Rng,
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
        let rng = ChaCha8Rng::seed_from_u64(params.seed);
        let name = format!("{}-{}", opts.name_prefix, params.index);
        let grid = InputGrid::new(params.input_period());
        let chat = Duration::from_secs_f64(60.0 / opts.chat_rate.max(1e-6));
        let weights = opts.actions.as_array();
        Self {
            silence: Silence::new(params.server_silence_timeout),
            ping_timer: Periodic::new(params.ping_interval),
            chat_timer: Periodic::new(chat),
            params,
            opts,
            name,
            rng,
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

    // ---- receiving ---------------------------------------------------------------------

    fn on_message(
        &mut self,
        now: Instant,
        m: Message<'_>,
        len: usize,
        compressed: bool,
        rec: &mut Recorder,
    ) {
        match m {
            Message::ServerHello {
                result,
                assigned_slot,
                session_token,
                tick_rate,
                current_tick,
                map_width,
                map_height,
                ..
            } => self.on_server_hello(
                now,
                HelloResult::from_u8(result),
                assigned_slot,
                session_token,
                (tick_rate, current_tick, map_width, map_height),
                rec,
            ),
            Message::FullSnapshot {
                snapshot_tick,
                data,
            } => {
                let data_len = data.len();
                rec.record_extra("full_snapshot_compressed_bytes", len as u64);
                rec.record_extra("full_snapshot_uncompressed_bytes", data_len as u64);
                rec.record_extra(
                    "compression_ratio",
                    (data_len as u64 * 100) / (len.max(1) as u64),
                );
                self.on_full(now, snapshot_tick, data, rec);
            }
            Message::DeltaSnapshot(d) => {
                let plain = codec::HEADER_LEN + codec::DELTA_PREFIX_LEN + d.payload.len();
                rec.record_extra("delta_compressed_bytes", len as u64);
                rec.record_extra("delta_uncompressed_bytes", plain as u64);
                if compressed {
                    rec.record_extra(
                        "compression_ratio",
                        (plain as u64 * 100) / (len.max(1) as u64),
                    );
                }
                self.on_delta(now, &d, rec);
            }
            Message::InputAck {
                input_sequence,
                result,
                ..
            } => self.on_input_ack(now, input_sequence, result, rec),
            Message::Pong {
                timestamp,
                server_tick,
            } => self.on_pong(now, timestamp, server_tick, rec),
            Message::Ping { .. } => rec.event("server_ping_ignored"),
            Message::Disconnect { reason, .. } => {
                let why = codec::disconnect_reason_name(reason);
                match self.phase {
                    BotPhase::Connecting => {
                        rec.connect_failures.add(why, 1);
                        self.close(BotPhase::Failed);
                    }
                    _ => {
                        rec.events.add2("server_disconnect", why, 1);
                        if self.relink_started.is_some() {
                            rec.event("reconnect_failed");
                        }
                        self.close(BotPhase::Closed);
                    }
                }
            }
            Message::ErrorMessage { error_code, .. } => {
                rec.events
                    .add2("error_message", codec::error_code_name(error_code), 1)
            }
            Message::ChatBroadcast { sender_slot, .. } => {
                rec.event("chat_received");
                if Some(sender_slot) == self.slot {
                    rec.event("chat_echoed");
                }
            }
            Message::Opaque { .. } => rec.event("opaque_message_ignored"),
            Message::ClientHello { .. }
            | Message::SnapshotAck { .. }
            | Message::InputMessage { .. }
            | Message::ChatMessage { .. } => {
                rec.decode_error(m.msg_type().name(), "wrong_direction")
            }
        }
    }

    fn on_server_hello(
        &mut self,
        now: Instant,
        result: HelloResult,
        slot: u8,
        token: [u8; TOKEN_LEN],
        (tick_rate, tick, w, h): (u32, u64, u32, u32),
        rec: &mut Recorder,
    ) {
        if self.stage != Stage::Hello {
            rec.event("duplicate_server_hello");
            return;
        }
        rec.events.add2("hello_result", result.name(), 1);
        let reconnecting = self.relink_started.is_some();
        self.handshake.end();
        if result != HelloResult::Accepted {
            if reconnecting {
                rec.event("reconnect_failed");
                self.close(BotPhase::Closed);
            } else {
                rec.connect_failures.add(result.name(), 1);
                self.close(BotPhase::Failed);
            }
            return;
        }
        if reconnecting {
            if Some(slot) == self.slot_before {
                rec.event("reconnect_slot_restored");
            } else {
                rec.event("reconnect_new_slot");
            }
        } else if let Some(s) = self.started_at {
            rec.record_handshake(now.saturating_duration_since(s).as_micros() as u64);
        }
        self.phase = BotPhase::Connected;
        self.stage = Stage::AwaitFull;
        self.slot = Some(slot);
        self.token = token;
        self.tick_rate = tick_rate.max(1);
        self.map = (w.min(4096) as i32, h.min(4096) as i32);
        self.clock = Some((tick as f64, now));
        self.silence.arm(now);
        self.ping_timer.start_at(now + self.params.phase_offset);
    }

    fn ack(&mut self, tick: u64) {
        self.newest = Some(tick);
        self.out.push_back(Out::Ack(tick));
    }

    fn note_state(&mut self, now: Instant, rec: &mut Recorder) {
        if let Some(prev) = self.last_state_at.replace(now) {
            rec.snapshot_interarrival_us
                .saturating_record(now.saturating_duration_since(prev).as_micros().max(1) as u64);
        }
        rec.snapshots_applied += 1;
    }

    fn on_full(&mut self, now: Instant, tick: u64, data: &[u8], rec: &mut Recorder) {
        if !matches!(self.stage, Stage::AwaitFull | Stage::Playing) {
            rec.event("full_snapshot_unexpected");
            return;
        }
        let i = (tick as usize) % BASELINES;
        let parsed = world::parse_full_within(
            data,
            &mut self.ring[i],
            &mut self.terrain,
            MAX_TRACKED_ENTITIES,
        );
        match parsed {
            Ok(info) => {
                self.ring[i].tick = tick;
                self.opaque[i] = false;
                if info.meta.tick != tick {
                    rec.event("full_snapshot_tick_mismatch");
                }
                if info.skipped_components > 0 {
                    rec.events
                        .add("components_skipped", u64::from(info.skipped_components));
                }
            }
            Err(world::FullError::Foreign(reason)) => {
                // §5.1 frames the sections but does not define their contents: another
                // implementation's layout is not an error. The snapshot is kept as an opaque
                // baseline by its tick, acknowledged, and deltas onto it are checked against
                // §5.2 and acknowledged without their contents being applied.
                self.ring[i].tick = tick;
                self.opaque[i] = true;
                rec.events.add2("full_snapshot", "foreign_layout", 1);
                rec.events.add2("foreign_layout_reason", reason, 1);
            }
            Err(world::FullError::Malformed(reason) | world::FullError::TooLarge(reason)) => {
                self.valid[i] = false;
                rec.decode_error("full_snapshot", reason);
                self.enforce_budget(Some(i), rec);
                return;
            }
        }
        self.valid[i] = true;
        self.enforce_budget(Some(i), rec);
        // Delta loss counts target-tick gaps between deltas; the server sends none while this
        // snapshot is unacknowledged, so counting starts again from the next delta.
        self.last_delta_target = None;
        if self.fulls_this_session > 0 {
            rec.event("full_snapshot_fallbacks");
        }
        self.fulls_this_session += 1;
        if self.newest.is_none_or(|n| tick > n) {
            self.ack(tick);
        }
        self.note_state(now, rec);
        if self.stage == Stage::AwaitFull {
            self.stage = Stage::Playing;
            if let Some(start) = self.relink_started.take() {
                rec.record_extra(
                    "resync_us",
                    now.saturating_duration_since(start).as_micros() as u64,
                );
                self.reconnects_done += 1;
            }
            self.grid.start(now + self.params.phase_offset);
            if self.opts.chat_rate > 0.0 {
                let p = self.chat_timer.period();
                self.chat_timer
                    .start_at(now + p.mul_f64(self.rng.random::<f64>()));
            }
            self.plan_reconnect(now);
        }
    }

    /// A bot chosen by its seed drops once, `reconnect_after_ms` (plus up to as much again)
    /// after its first snapshot.
    fn plan_reconnect(&mut self, now: Instant) {
        if self.reconnects_done > 0 || self.opts.reconnect_share <= 0.0 {
            return;
        }
        let coin = (splitmix(self.params.seed ^ 0x7e_c0) >> 11) as f64 / (1u64 << 53) as f64;
        if coin < self.opts.reconnect_share {
            let after = Duration::from_millis(self.opts.reconnect_after_ms);
            self.reconnect_at = Some(now + after + after.mul_f64(self.rng.random::<f64>()));
        }
    }

    fn on_delta(&mut self, now: Instant, d: &codec::DeltaSnapshot<'_>, rec: &mut Recorder) {
        if self.stage != Stage::Playing {
            rec.event("baseline_misses");
            return;
        }
        self.count_delta(d.target_tick, rec);
        if self.newest.is_some_and(|n| d.target_tick <= n) {
            rec.event("delta_stale");
            return;
        }
        if d.target_tick <= d.base_tick {
            rec.decode_error("delta_snapshot", "target_not_after_base");
            return;
        }
        if !self.has_baseline(d.base_tick) {
            rec.event("baseline_misses");
            return;
        }
        let b = (d.base_tick as usize) % BASELINES;
        if self.opaque[b] {
            if let Err(reason) = world::check_delta(d.entity_count, d.component_count, d.payload) {
                rec.decode_error("delta_snapshot", reason);
                return;
            }
            rec.event("delta_applied_opaque");
            let t = (d.target_tick as usize) % BASELINES;
            self.ring[t].entities.clear();
            self.ring[t].tick = d.target_tick;
            self.valid[t] = true;
            self.opaque[t] = true;
            self.ack(d.target_tick);
            self.note_state(now, rec);
            return;
        }
        let mut skipped = 0;
        let applied = self.applier.apply(
            &self.ring[b],
            &mut self.work,
            (d.entity_count, d.component_count, d.payload),
            MAX_TRACKED_ENTITIES,
            &mut skipped,
        );
        self.applier.shrink_over(APPLIER_KEEP_BYTES);
        if let Err(reason) = applied {
            // Not acknowledged: the server's next delta is onto an older tick, or a
            // FullSnapshot once that ages.
            rec.decode_error("delta_snapshot", reason);
            self.work.entities.clear();
            self.enforce_budget(None, rec);
            return;
        }
        if skipped > 0 {
            rec.events.add("components_skipped", u64::from(skipped));
        }
        self.work.tick = d.target_tick;
        let t = (d.target_tick as usize) % BASELINES;
        std::mem::swap(&mut self.work, &mut self.ring[t]);
        self.valid[t] = true;
        self.opaque[t] = false;
        self.enforce_budget(Some(t), rec);
        self.ack(d.target_tick);
        self.note_state(now, rec);
    }

    /// Keep what the bot holds for states within `max_state_bytes`: free the vectors of ring
    /// slots that hold no baseline, then the spare world, then the baselines with the oldest
    /// ticks (`baseline_evicted`), never the newest applied one nor `keep` (just stored).
    fn enforce_budget(&mut self, keep: Option<usize>, rec: &mut Recorder) {
        let size = std::mem::size_of::<world::Entity>();
        let held = |b: &Self| {
            let worlds: usize = b.ring.iter().map(|w| w.entities.capacity()).sum::<usize>()
                + b.work.entities.capacity();
            worlds * size + b.terrain.capacity() + b.applier.held_bytes()
        };
        let max = self.opts.max_state_bytes;
        if held(self) <= max {
            return;
        }
        for i in 0..BASELINES {
            if !self.valid[i] && Some(i) != keep {
                self.ring[i].entities = Vec::new();
            }
        }
        if held(self) > max {
            self.work.entities = Vec::new();
        }
        let newest = self.newest.map(|t| (t as usize) % BASELINES);
        while held(self) > max {
            let oldest = (0..BASELINES)
                .filter(|&i| self.valid[i] && Some(i) != keep && Some(i) != newest)
                .min_by_key(|&i| self.ring[i].tick);
            let Some(i) = oldest else { break };
            self.valid[i] = false;
            self.ring[i].entities = Vec::new();
            rec.event("baseline_evicted");
        }
    }

    /// Delta loss (§5.2: deltas at the tick rate, one per tick): the target ticks skipped
    /// between consecutive deltas since the last FullSnapshot, as `deltas_expected` /
    /// `deltas_missing`. Independent of the header sequence, so a server's pongs and acks do
    /// not dilute it. A delta older than the last one (reordered) is `delta_reordered`.
    fn count_delta(&mut self, target: u64, rec: &mut Recorder) {
        match self.last_delta_target {
            Some(p) if target <= p => rec.event("delta_reordered"),
            Some(p) => {
                let gap = target - p - 1;
                // A jump beyond the ring's reach is a server pause, not a burst of loss.
                let gap = if gap > 10 * u64::from(self.tick_rate) {
                    0
                } else {
                    gap
                };
                rec.events.add("deltas_expected", gap + 1);
                rec.events.add("deltas_missing", gap);
                self.last_delta_target = Some(target);
            }
            None => {
                rec.events.add("deltas_expected", 1);
                self.last_delta_target = Some(target);
            }
        }
    }

    fn on_input_ack(&mut self, now: Instant, seq: u32, result: u8, rec: &mut Recorder) {
        let name = InputResult::from_u8(result).map_or("other", InputResult::name);
        rec.events.add2("input_result", name, 1);
        self.pending.ack(seq, now, rec);
    }

    fn on_pong(&mut self, now: Instant, ts: u64, server_tick: u64, rec: &mut Recorder) {
        let Some(k) = self
            .pings
            .iter()
            .position(|p| p.is_some_and(|(t, _)| t == ts))
        else {
            rec.event("pong_unmatched");
            return;
        };
        let Some((_, sent)) = self.pings[k].take() else {
            return;
        };
        let rtt = now.saturating_duration_since(sent);
        if rtt > self.params.server_silence_timeout {
            rec.event("pong_late");
            return;
        }
        rec.record_rtt(rtt.as_micros() as u64);
        // The server's tick now: its tick when it answered, plus half the round trip.
        let rate = f64::from(self.tick_rate);
        let server_now = server_tick as f64 + rtt.as_secs_f64() / 2.0 * rate;
        if let Some(local) = self.estimated_tick(now) {
            let offset_us = ((local - server_now).abs() / rate * 1e6) as u64;
            rec.record_extra("clock_offset_us", offset_us.max(1));
        }
        self.clock = Some((server_now, now));
    }

    fn estimated_tick(&self, now: Instant) -> Option<f64> {
        let (t, at) = self.clock?;
        Some(t + now.saturating_duration_since(at).as_secs_f64() * f64::from(self.tick_rate))
    }

    // ---- sending -----------------------------------------------------------------------

    fn send_ping(&mut self, now: Instant, rec: &mut Recorder) {
        let ts = self.micros_now(now);
        let k = match self.pings.iter().position(Option::is_none) {
            Some(k) => k,
            None => {
                // Every slot in flight: the oldest is taken as lost.
                rec.event("ping_lost");
                let (k, _) = self
                    .pings
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, p)| p.map(|(_, s)| s))
                    .unwrap_or((0, &None));
                k
            }
        };
        self.pings[k] = Some((ts, now));
        self.out.push_back(Out::Ping(ts));
    }

    fn send_input(&mut self, now: Instant, rec: &mut Recorder) {
        let Some(due) = self.grid.take_due(now, rec) else {
            return;
        };
        rec.record_lateness(now.saturating_duration_since(due).as_micros() as u64);
        let act = self.draw_action();
        self.input_seq = self.input_seq.wrapping_add(1);
        let client_tick = self.estimated_tick(now).unwrap_or(0.0).max(0.0) as u64;
        self.out.push_back(Out::Input {
            seq: self.input_seq,
            client_tick,
            act,
        });
        rec.events.add2("action", action_name(act.ty), 1);
        self.pending.sent(self.input_seq, now);
        rec.inputs_sent += 1;
    }

    /// The bot's own parcels with nothing on them, and its structures, from the newest state.
    fn survey(&mut self) {
        self.free_parcels.clear();
        self.mine.clear();
        let Some(me) = self.slot.map(|s| s + 1) else {
            return;
        };
        let Some(t) = self.newest else { return };
        let w = &self.ring[(t as usize) % BASELINES];
        for e in &w.entities {
            if e.owner() != Some(me) {
                continue;
            }
            let Some(p) = e.position() else { continue };
            if e.archetype == world::ARCH_PARCEL {
                self.free_parcels.push(p);
            } else {
                self.mine.push(p);
            }
        }
        let mine = &self.mine;
        self.free_parcels.retain(|p| !mine.contains(p));
    }

    fn random_tile(&mut self) -> (i32, i32) {
        let (w, h) = (self.map.0.max(2), self.map.1.max(2));
        let s = i32::from(self.slot.unwrap_or(0));
        let (cx, cy) = ((s % 2) * w / 2 + w / 4, (s / 2) * h / 2 + h / 4);
        (
            (cx + self.rng.random_range(-6..=6)).clamp(0, w - 1),
            (cy + self.rng.random_range(-6..=6)).clamp(0, h - 1),
        )
    }

    fn pick_free(&mut self) -> (i32, i32) {
        if !self.free_parcels.is_empty() && self.rng.random_bool(0.85) {
            let i = self.rng.random_range(0..self.free_parcels.len());
            self.free_parcels.swap_remove(i)
        } else {
            self.random_tile()
        }
    }

    fn draw_action(&mut self) -> Act {
        self.survey();
        let total: f64 = self.weights.iter().sum();
        let mut x = self.rng.random::<f64>() * total;
        let mut k = 0;
        for (i, w) in self.weights.iter().enumerate() {
            if x < *w {
                k = i;
                break;
            }
            x -= w;
            k = i;
        }
        let mut act = Act {
            ty: codec::INPUT_NONE,
            a: 0,
            b: 0,
            c: 0,
            n: 0,
            tiles: [(0, 0); 4],
        };
        match k {
            0 => {
                let (x, y) = self.pick_free();
                act.ty = codec::INPUT_PLACE_BUILDING;
                act.c = self.rng.random_range(1..=4);
                act.tiles[0] = (x, y);
                act.a = self.rng.random_range(0..4);
            }
            1 => {
                let (x, y) = self.pick_free();
                act.ty = codec::INPUT_DESIGNATE_ZONE;
                act.c = self.rng.random_range(1..=3);
                act.a = self.rng.random_range(0..2);
                act.tiles[0] = (x, y);
                act.n = 1;
            }
            2 => {
                act.ty = codec::INPUT_DEMOLISH;
                let n = self.mine.len().min(2);
                for i in 0..n {
                    let j = self.rng.random_range(0..self.mine.len());
                    act.tiles[i] = self.mine[j];
                }
                if n == 0 {
                    act.tiles[0] = self.random_tile();
                }
                act.n = n.max(1);
            }
            3 => {
                act.ty = codec::INPUT_PURCHASE_TILE;
                act.tiles[0] = self.random_tile();
            }
            4 => {
                act.ty = codec::INPUT_SET_TRIBUTE_RATE;
                act.a = self.rng.random_range(0..=3);
                act.c = self.rng.random_range(0..=25);
            }
            _ => {
                act.ty = match k {
                    5 => codec::INPUT_PLACE_ROAD,
                    6 => codec::INPUT_PLACE_CONDUIT,
                    _ => codec::INPUT_PLACE_PIPE,
                };
                let n = self.rng.random_range(1..=2);
                for i in 0..n {
                    act.tiles[i] = self.pick_free();
                }
                act.n = n;
            }
        }
        act
    }

    fn age_inputs(&mut self, now: Instant, rec: &mut Recorder) {
        self.pending.age(now, rec);
    }

    fn encode_out(&mut self, o: &Out, buf: &mut [u8]) -> Result<usize, codec::EncodeError> {
        let seq = self.seq_out;
        match *o {
            Out::Hello { token, slot } => self.enc.encode(
                buf,
                seq,
                &Message::ClientHello {
                    client_version: self.opts.client_version,
                    player_name: &self.name,
                    session_token: token,
                    requested_slot: slot,
                },
            ),
            Out::Ack(tick) => self.enc.encode(
                buf,
                seq,
                &Message::SnapshotAck {
                    acked_tick: tick,
                    last_input_seq: self.input_seq,
                },
            ),
            Out::Ping(ts) => self.enc.encode(
                buf,
                seq,
                &Message::Ping {
                    timestamp: ts,
                    server_tick: 0,
                },
            ),
            Out::Chat(k) => {
                let text = format!("{} says hello #{k}", self.name);
                self.enc
                    .encode(buf, seq, &Message::ChatMessage { text: &text })
            }
            Out::Disconnect(reason) => self.enc.encode(
                buf,
                seq,
                &Message::Disconnect {
                    reason,
                    message: if reason == DISCONNECT_TIMEOUT {
                        "server silent"
                    } else {
                        "bye"
                    },
                },
            ),
            Out::Input {
                seq: input_sequence,
                client_tick,
                act,
            } => {
                let rects = [GridRect {
                    x: act.tiles[0].0,
                    y: act.tiles[0].1,
                    width: 1,
                    height: 1,
                }];
                let tiles = &act.tiles[..act.n.min(4)];
                let action = match act.ty {
                    codec::INPUT_PLACE_BUILDING => Action::PlaceBuilding {
                        building_type: act.c,
                        x: act.tiles[0].0,
                        y: act.tiles[0].1,
                        rotation: act.a as u8,
                    },
                    codec::INPUT_DESIGNATE_ZONE => Action::DesignateZone {
                        zone_type: act.c as u8,
                        density: act.a as u8,
                        rects: &rects,
                    },
                    codec::INPUT_PURCHASE_TILE => Action::PurchaseTile {
                        x: act.tiles[0].0,
                        y: act.tiles[0].1,
                    },
                    codec::INPUT_SET_TRIBUTE_RATE => Action::SetTributeRate {
                        zone_type: act.a as u8,
                        rate: act.c as u8,
                    },
                    codec::INPUT_NONE => Action::None,
                    kind => Action::Tiles { kind, tiles },
                };
                self.enc.encode(
                    buf,
                    seq,
                    &Message::InputMessage {
                        input_sequence,
                        client_tick,
                        action,
                    },
                )
            }
        }
    }
}

fn action_name(ty: u8) -> &'static str {
    Action::Tiles {
        kind: ty,
        tiles: &[],
    }
    .name()
}

/// SplitMix64 finaliser: a well-mixed 64-bit hash of `x`.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
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
            .begin(now, None, self.params.handshake_timeout);
        self.out.push_back(Out::Hello {
            token: [0; TOKEN_LEN],
            slot: ANY_SLOT,
        });
    }

    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        if !matches!(self.phase, BotPhase::Connecting | BotPhase::Connected)
            || self.stage == Stage::Relinking
        {
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
            dec.set_limit(self.opts.max_decompressed_bytes);
            match codec::decode(data, &mut dec) {
                Ok(d) => match d.message {
                    Some(m) => self.on_message(now, m, data.len(), d.header.compressed(), rec),
                    None => rec.event("unknown_message_type"),
                },
                Err(e) => {
                    rec.decode_error(e.message, e.reason);
                    // The real game server's envelope: name the wrong dialect.
                    if super::implementation::codec::fits(data) {
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
                if self.opts.protocol_version != codec::PROTOCOL_VERSION && len > 4 {
                    buf[4] = self.opts.protocol_version;
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
            .begin(now, None, self.params.handshake_timeout);
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
            .field("index", &self.params.index)
            .field("phase", &self.phase)
            .field("stage", &self.stage)
            .field("slot", &self.slot)
            .field("newest", &self.newest)
            .finish()
    }
}
