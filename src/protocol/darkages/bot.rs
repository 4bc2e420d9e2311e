//! The DarkAges bot: a sans-IO client state machine.
//!
//! Life: CONNECT (resent every `handshake_retry` until CONNECT_ACK or `handshake_timeout`),
//! CONNECTED, then INPUT on the shared input grid, PINGs, HEARTBEATs every
//! `heartbeat_interval_ms`, SNAPSHOTs applied against baselines, EVENTs counted; a
//! ZONE_HANDOFF moves it to the next zone; DISCONNECT on stop.
//!
//! # Snapshots and baselines
//! The bot keeps the states of its last 30 snapshots (§3.3) by tick. A full snapshot is a
//! state of its own; a delta is applied to the stored state of exactly its `baseline_tick`,
//! never to another. A delta whose baseline is not stored is counted (`baseline_miss`),
//! dropped, and answered by acknowledging tick 0 in the following INPUTs, which asks the
//! server for a full snapshot; the full snapshot that ends the wait counts `full_fallback`.
//! Every state a snapshot produces (also a reordered, older one) is stored as a baseline;
//! only a snapshot newer than every other becomes the bot's world and is acknowledged
//! (`last_received_tick`). The store is emptied on a zone handoff: the next zone's ticks are
//! another sequence. A snapshot is a duplicate (`snapshot_duplicate`, not applied) when its
//! tick is already stored, whatever the loss accounting below makes of it.
//!
//! A delta is merged with its baseline in one pass ([`Applier`]); a state holds at most
//! [`MAX_TRACKED_ENTITIES`] entities (beyond, the snapshot is the decode error
//! `snapshot.too_many_entities`, neither stored nor acknowledged), and all states kept count
//! against `max_state_bytes` ([`Baselines`]: the oldest are dropped, `baseline_evicted`).
//!
//! # Downstream loss
//! Snapshot ticks are mapped to a gap-free sequence in steps of the snapshot tick step
//! ([`TickStep`]): per zone session the first 8 distinct ticks are held back, the step is the
//! gcd of their gaps (3 for a 60 Hz server sending at 20 Hz, 1 for one snapshot per tick),
//! and they are replayed into the count (`snapshot_tick_step` records the step). A
//! configured `snapshot_tick_step` is kept when it divides the learned one, otherwise the
//! learned one wins (`snapshot_tick_step_contradicted`). The held-back ticks are counted when
//! the session ends (stop, handoff, DISCONNECT, silence) if fewer than 8 arrived. Snapshots
//! lost before the first or after the last one received in a zone cannot be seen.
//!
//! # Prediction
//! The bot predicts its own entity with the server's movement model ([`super::step`]) for
//! each INPUT it sends. Snapshots carry no input acknowledgement, so each applied snapshot's
//! position of the bot's entity is compared with the nearest of the predicted positions
//! still in flight (ties to the newest): an exact match is a server that has applied the
//! inputs up to there; the distance is `prediction_error` (recorded in millimetres, so exact
//! shows as the histogram floor, 1 mm). Above `prediction_error_threshold_m` the bot snaps
//! to the server's position at that point and replays the later inputs (`corrections`).
//! Until the bot has seen its entity in a zone (after connecting, a handoff, or its own
//! DEATH) it sends no movement, so its history starts from a known position.
//!
//! # Invalid input on purpose
//! With `invalid_input_share`, that share of bots (chosen from the seed) replaces one input
//! every `invalid_input_interval_ms` by an invalid one, kinds in turn: yaw out of range,
//! conflicting direction flags, a replayed sequence number. The invalid input is left out of
//! the prediction and moves the player if applied, so the server's reaction is visible
//! within a second: a correction (`invalid_input_applied.<kind>`), nothing
//! (`invalid_input_ignored.<kind>`) or a DISCONNECT (`invalid_input_disconnected.<kind>`).
//!
//! # Zone handoff
//! On ZONE_HANDOFF (or an EVENT of type 0x06), the bot sends DISCONNECT(ZONE_HANDOFF) and asks
//! the engine for a new link to `new_server_address:new_server_port`
//! ([`Bot::poll_relink`]); once relinked it sends CONNECT with the token as `auth_token`
//! (after `handoff_connect_delay_ms`), resent like a handshake. CONNECT_ACK success ends the
//! handoff (`handoff_us`, `handoffs`); a failure result is `handoff_failed.expired_token`
//! (message starting with "expired") or `.refused`; no answer within `handshake_timeout`
//! is `.timeout`; an address that is not an IP literal is `.bad_address` (no DNS in a
//! sans-IO bot) and the bot stays where it is. An address neither on a host of the run's
//! targets nor in `handoff_allow` is refused (`handoff_refused.not_allowed`, see
//! [`super::allow`]): nothing is sent there and the bot stays where it is. A bot whose handoff failed has left its old
//! zone and ends (`Closed`). The token's own lifetime is the issuing zone's rule, checked by
//! the receiving zone.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::allow::HandoffPolicy;
use super::codec::{
    self, event, fixed_text, input, reason, result, EntityState, EventBody, Packet, Snapshot,
};
use super::{step, DarkAgesOptions, Dialect};
use crate::protocol::prelude::input_grid::InputGrid;
use crate::protocol::prelude::predict::{Motion, Predictor};
use crate::protocol::prelude::seqwindow::{TickNews, TickStep};
use crate::protocol::prelude::tail::SnapshotArrivals;
use crate::protocol::prelude::timers::{earliest, Handshake, Periodic, Silence};
use crate::protocol::prelude::Recorder;
use crate::protocol::prelude::{
    Bot, BotParams, BotPhase, Keys, PatternState, Relink, Transmit, MAX_TRACKED_ENTITIES,
};

/// Baselines kept (§3.3).
pub const BASELINES: usize = 30;
/// Predicted positions kept for matching snapshots against.
pub const PREDICTION_HISTORY: usize = 128;
/// Scratch an [`Applier`] keeps between snapshots (about 7,000 records); a larger delta's
/// is given back after it.
const APPLIER_KEEP_BYTES: usize = 256 * 1024;
/// Pings in flight at most.
const PINGS: usize = 8;
/// How long the bot watches for the server's reaction to an invalid input.
const VERDICT_WINDOW: Duration = Duration::from_secs(1);
const MOVE_FLAGS: u8 = input::FORWARD | input::BACKWARD | input::LEFT | input::RIGHT;

const INVALID_KINDS: [&str; 3] = ["yaw_out_of_range", "conflicting_flags", "replayed_sequence"];

#[derive(Debug, Clone, Copy)]
enum Out {
    Connect,
    Connected,
    Input(codec::Input),
    Ping(u32),
    Pong(u32),
    Heartbeat(u32),
    Disconnect(u8),
}

/// The last 30 snapshot states, by tick, held within a byte budget. Slots are reused, so
/// storing a state swaps vectors and allocates nothing once they have grown.
///
/// # Budget
/// Every vector a bot keeps for states (the slots, live or not, and the spare one a new
/// state is built in) counts by its capacity against `max_bytes`
/// (`DarkAgesOptions::max_state_bytes`). Storing a state that takes the total over it frees
/// first the vectors of slots no longer in the window, then the spare, then the oldest
/// stored baselines (`baseline_evicted`), never the world nor the state just stored: a
/// server whose deltas build ever larger states keeps its bots to the newest few of them
/// (a delta onto an evicted one is a `baseline_miss`, answered by a full snapshot), and one
/// state never holds more than [`MAX_TRACKED_ENTITIES`] entities (see [`Applier`]).
#[derive(Debug)]
pub struct Baselines {
    slots: Vec<(u32, Vec<EntityState>)>,
    len: usize,
    next: usize,
    current: Option<usize>,
    max_bytes: usize,
}

impl Baselines {
    pub fn new(n: usize) -> Self {
        Self::with_budget(n, usize::MAX)
    }

    /// `n` slots holding at most `max_bytes` of states together.
    pub fn with_budget(n: usize, max_bytes: usize) -> Self {
        Self {
            slots: (0..n.max(1)).map(|_| (0, Vec::with_capacity(64))).collect(),
            len: 0,
            next: 0,
            current: None,
            max_bytes,
        }
    }

    pub fn clear(&mut self) {
        self.len = 0;
        self.next = 0;
        self.current = None;
    }

    /// The slot holding `tick`, if stored.
    pub fn find(&self, tick: u32) -> Option<usize> {
        let n = self.slots.len();
        (0..self.len)
            .map(|k| (self.next + n - 1 - k) % n)
            .find(|&i| self.slots[i].0 == tick)
    }

    pub fn get(&self, slot: usize) -> &[EntityState] {
        self.slots.get(slot).map_or(&[], |s| s.1.as_slice())
    }

    /// Store `state` (swapped in; `state` gets the evicted slot's vector) as `tick`.
    pub fn store(&mut self, tick: u32, state: &mut Vec<EntityState>) -> usize {
        let i = self.next;
        if self.current == Some(i) {
            self.current = None;
        }
        self.slots[i].0 = tick;
        std::mem::swap(&mut self.slots[i].1, state);
        self.next = (i + 1) % self.slots.len();
        self.len = (self.len + 1).min(self.slots.len());
        i
    }

    /// Bring the bytes held (with `spare`, the vectors the caller keeps) under the budget:
    /// free the vectors of slots outside the window, then `spare`, then the oldest stored
    /// states other than the world and the newest stored. Returns how many stored states
    /// were dropped.
    pub fn enforce_budget(&mut self, spare: &mut [&mut Vec<EntityState>]) -> u64 {
        let held = |b: &Self, spare: &[&mut Vec<EntityState>]| {
            let caps: usize = b.slots.iter().map(|s| s.1.capacity()).sum::<usize>()
                + spare.iter().map(|v| v.capacity()).sum::<usize>();
            caps * std::mem::size_of::<EntityState>()
        };
        if held(self, spare) <= self.max_bytes {
            return 0;
        }
        let n = self.slots.len();
        for k in self.len..n {
            let i = (self.next + n - 1 - k) % n;
            self.slots[i].1 = Vec::new();
        }
        for k in 0..spare.len() {
            if held(self, spare) <= self.max_bytes {
                return 0;
            }
            *spare[k] = Vec::new();
        }
        let mut evicted = 0;
        while self.len > 1 && held(self, spare) > self.max_bytes {
            let oldest = (self.next + n - self.len) % n;
            if self.current == Some(oldest) {
                break;
            }
            self.slots[oldest].1 = Vec::new();
            self.len -= 1;
            evicted += 1;
        }
        evicted
    }

    /// The world: the newest applied snapshot's state.
    pub fn current(&self) -> &[EntityState] {
        self.current.map_or(&[], |i| self.get(i))
    }

    pub fn ticks(&self) -> impl Iterator<Item = u32> + '_ {
        let n = self.slots.len();
        (0..self.len).map(move |k| self.slots[(self.next + n - 1 - k) % n].0)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A snapshot whose state would hold more entities than a bot tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the state would hold more than {limit} entities")]
pub struct TooManyEntities {
    pub limit: usize,
}

/// Builds the state a snapshot describes. Its scratch vectors (the delta's records sorted by
/// id, its removed ids sorted) are reused, so applying allocates nothing once they have grown.
///
/// A delta is merged with its baseline in one pass: the records are sorted by id
/// (`k log k`), runs of baseline entities between two changed ids are copied in bulk (found
/// by binary search), so a delta costs `O(k log n)` plus one copy of the baseline, whatever
/// the ids: no insert into the middle of a vector, whose cost grows with the entities held.
#[derive(Debug, Default)]
pub struct Applier {
    /// `(wire order, record)`, sorted by `(id, wire order)`: several records for one id
    /// apply in the order they came.
    records: Vec<(u32, codec::EntityUpdate)>,
    removed: Vec<u32>,
}

impl Applier {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes the scratch vectors hold (by capacity).
    pub fn held_bytes(&self) -> usize {
        self.records.capacity() * std::mem::size_of::<(u32, codec::EntityUpdate)>()
            + self.removed.capacity() * 4
    }

    /// Free the scratch vectors if they hold more than `bytes`.
    pub fn shrink_over(&mut self, bytes: usize) {
        if self.held_bytes() > bytes {
            self.records = Vec::new();
            self.removed = Vec::new();
        }
    }

    /// Build into `out` (cleared first) a full snapshot's records, or `base` with a delta's
    /// changes and removals; records stay sorted by entity id. At most `limit` entities:
    /// beyond that the snapshot is refused (`out` is then half-built; discard it). Returns how
    /// many removed ids were not in the baseline (a server bug worth counting).
    pub fn apply(
        &mut self,
        base: &[EntityState],
        s: &Snapshot<'_>,
        out: &mut Vec<EntityState>,
        limit: usize,
    ) -> Result<u64, TooManyEntities> {
        out.clear();
        let too_many = TooManyEntities { limit };
        if s.is_full() {
            if s.record_count() > limit {
                return Err(too_many);
            }
            reserve_within(out, s.record_count(), limit);
            out.extend(s.records().map(|u| u.state));
            out.sort_unstable_by_key(|e| e.id);
            return Ok(0);
        }
        self.records.clear();
        self.records
            .extend(s.records().enumerate().map(|(i, u)| (i as u32, u)));
        self.records.sort_unstable_by_key(|(i, u)| (u.state.id, *i));
        self.removed.clear();
        self.removed.extend(s.removed());
        self.removed.sort_unstable();
        if base.len().saturating_sub(self.removed.len()) > limit {
            return Err(too_many);
        }
        reserve_within(out, base.len().saturating_add(self.records.len()), limit);
        let (recs, removed) = (&self.records, &self.removed);
        let (mut b, mut u, mut r) = (0usize, 0usize, 0usize);
        let mut hits = 0u64;
        loop {
            // The next id a record or a removal names; the baseline's entities below it are
            // copied as they are.
            let next = match (recs.get(u), removed.get(r)) {
                (Some(x), Some(&y)) => x.1.state.id.min(y),
                (Some(x), None) => x.1.state.id,
                (None, Some(&y)) => y,
                (None, None) => {
                    let rest = &base[b..];
                    if out.len() + rest.len() > limit {
                        return Err(too_many);
                    }
                    out.extend_from_slice(rest);
                    break;
                }
            };
            let run = base[b..].partition_point(|e| e.id < next);
            if out.len() + run > limit {
                return Err(too_many);
            }
            out.extend_from_slice(&base[b..b + run]);
            b += run;
            let mut e = match base.get(b) {
                Some(e) if e.id == next => {
                    b += 1;
                    Some(*e)
                }
                _ => None,
            };
            while let Some((_, x)) = recs.get(u).filter(|x| x.1.state.id == next) {
                x.apply_to(e.get_or_insert_with(EntityState::default));
                u += 1;
            }
            if removed.get(r) == Some(&next) {
                // A removal wins over a change of the same id; a repeated removal finds
                // nothing the second time.
                if e.is_some() {
                    hits += 1;
                }
                e = None;
                r += 1;
            }
            if let Some(e) = e {
                if out.len() >= limit {
                    return Err(too_many);
                }
                out.push(e);
            }
        }
        Ok(self.removed.len() as u64 - hits)
    }
}

/// Room in `out` (empty) for `n` entities: a quarter more than needed, so a world that
/// grows slowly reallocates rarely, but never room for more than `limit`: a vector's
/// capacity, which the budget counts, stays within one state's limit.
fn reserve_within(out: &mut Vec<EntityState>, n: usize, limit: usize) {
    let n = n.min(limit);
    if out.capacity() < n {
        out.reserve_exact(n.saturating_add(n / 4).min(limit));
    }
}

/// [`Applier::apply`] with fresh scratch and no entity limit (benches, tests).
pub fn apply_snapshot(base: &[EntityState], s: &Snapshot<'_>, out: &mut Vec<EntityState>) -> u64 {
    Applier::new()
        .apply(base, s, out, usize::MAX)
        .unwrap_or_default()
}

/// DarkAges' movement: one INPUT's flags and yaw through the server's [`step`], in a zone
/// `half` metres from centre to edge.
#[derive(Debug, Clone, Copy)]
struct DarkAgesMotion {
    half: f32,
}

impl Motion for DarkAgesMotion {
    type Input = (u8, f32);
    type State = [f32; 3];

    fn step(&self, at: [f32; 3], &(flags, yaw): &(u8, f32)) -> [f32; 3] {
        step(at, flags, yaw, self.half)
    }

    fn error(&self, a: &[f32; 3], b: &[f32; 3]) -> f32 {
        dist(*a, *b)
    }
}

/// Own-entity prediction: a known position, then the position after each input in flight,
/// matched by nearest ([`Predictor::reconcile_nearest`]: snapshots name no input).
#[derive(Debug, Clone)]
struct Prediction {
    predictor: Predictor<DarkAgesMotion>,
    /// The number the next predicted input is kept under (invalid inputs are left out, so
    /// not the wire's sequence).
    next: u32,
}

impl Prediction {
    fn new() -> Self {
        let mut predictor = Predictor::new(PREDICTION_HISTORY);
        predictor.reset([0.0; 3]);
        Self { predictor, next: 0 }
    }

    fn current(&self) -> [f32; 3] {
        self.predictor.present().unwrap_or_default()
    }

    fn reset(&mut self, p: [f32; 3]) {
        self.predictor.reset(p);
    }

    fn push(&mut self, flags: u8, yaw: f32, half: f32) {
        self.predictor
            .input(&DarkAgesMotion { half }, self.next, (flags, yaw));
        self.next = self.next.wrapping_add(1);
    }

    /// Match the server's position against the predictions; drop what it has caught up
    /// with; snap and replay beyond `threshold`. `(error in metres, corrected)`.
    fn reconcile(&mut self, server: [f32; 3], threshold: f32, half: f32) -> (f32, bool) {
        let r = self
            .predictor
            .reconcile_nearest(&DarkAgesMotion { half }, server, threshold);
        (r.error.unwrap_or_default(), r.corrected)
    }
}

fn dist(a: [f32; 3], b: [f32; 3]) -> f32 {
    let (x, y, z) = (a[0] - b[0], a[1] - b[1], a[2] - b[2]);
    (x * x + y * y + z * z).sqrt()
}

#[derive(Debug, Clone, Copy)]
struct Handoff {
    started: Instant,
    token: [u8; 32],
    /// CONNECT to the new zone due at (set once relinked).
    connect_at: Option<Instant>,
    connecting: bool,
}

pub struct DarkAgesBot {
    params: BotParams,
    opts: DarkAgesOptions,
    rng: ChaCha8Rng,
    pattern: PatternState,
    phase: BotPhase,
    out: VecDeque<Out>,
    epoch: Option<Instant>,
    client_id: [u8; 32],
    auth_token: [u8; 64],

    handshake: Handshake,
    attempt_started: Option<Instant>,
    silence: Silence,
    connected_at: Option<Instant>,
    entity: Option<u32>,
    zone: Option<u32>,

    grid: InputGrid,
    seq: u32,
    last_keys: Option<u8>,

    ping_timer: Periodic,
    pings: [Option<(u32, Instant)>; PINGS],
    next_ping: u32,
    heartbeat_timer: Periodic,
    heartbeat_sent: Option<u32>,

    baselines: Baselines,
    scratch: Vec<EntityState>,
    applier: Applier,
    newest: Option<(u32, Instant)>,
    /// Snapshot arrival times in this zone, for the tail a dead server leaves uncounted.
    arrivals: SnapshotArrivals,
    ack: u32,
    awaiting_full: bool,
    /// Downstream loss over snapshot ticks, the step learned per zone session.
    ticks: TickStep,

    pred: Prediction,
    anchored: bool,
    heading: Option<f32>,
    turn_timer: Periodic,

    misbehaves: bool,
    invalid_timer: Periodic,
    invalid_next: usize,
    verdict: Option<(&'static str, Instant)>,

    handoff: Option<Handoff>,
    handoff_policy: HandoffPolicy,
    relink: Option<SocketAddr>,
    failed_token: Option<[u8; 32]>,
}

impl DarkAgesBot {
    pub fn new(params: BotParams, opts: DarkAgesOptions) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
        let misbehaves =
            opts.invalid_input_share > 0.0 && rng.random::<f64>() < opts.invalid_input_share;
        let client_id = fixed_text(&format!("{}-{}", opts.client_id_prefix, params.index));
        Self {
            grid: InputGrid::new(params.input_period()),
            silence: Silence::new(params.server_silence_timeout),
            ping_timer: Periodic::new(params.ping_interval),
            heartbeat_timer: Periodic::new(Duration::from_millis(opts.heartbeat_interval_ms)),
            turn_timer: Periodic::new(Duration::from_millis(opts.turn_every_ms.max(1))),
            invalid_timer: Periodic::new(Duration::from_millis(opts.invalid_input_interval_ms)),
            ticks: TickStep::checked(opts.snapshot_tick_step),
            rng,
            pattern: PatternState::new(),
            phase: BotPhase::Idle,
            out: VecDeque::with_capacity(16),
            epoch: None,
            client_id,
            auth_token: [0; 64],
            handshake: Handshake::new(),
            attempt_started: None,
            connected_at: None,
            entity: None,
            zone: None,
            seq: 0,
            last_keys: None,
            pings: [None; PINGS],
            next_ping: 1,
            heartbeat_sent: None,
            baselines: Baselines::with_budget(BASELINES, opts.max_state_bytes),
            scratch: Vec::with_capacity(64),
            applier: Applier::new(),
            newest: None,
            arrivals: SnapshotArrivals::new(),
            ack: 0,
            awaiting_full: false,
            pred: Prediction::new(),
            anchored: false,
            heading: None,
            misbehaves,
            invalid_next: 0,
            verdict: None,
            handoff: None,
            handoff_policy: HandoffPolicy::new(params.targets.clone(), &opts.handoff_allow),
            relink: None,
            failed_token: None,
            params,
            opts,
        }
    }

    /// The bot's entity in its current zone.
    pub fn entity_id(&self) -> Option<u32> {
        self.entity
    }

    /// The zone it plays in (CONNECT_ACK's `zone_id`).
    pub fn zone(&self) -> Option<u32> {
        self.zone
    }

    /// Server ticks between snapshots in this zone session, once learned (or configured and
    /// confirmed by the first snapshots).
    pub fn tick_step(&self) -> Option<u32> {
        self.ticks.step()
    }

    /// The newest applied snapshot's tick.
    pub fn current_tick(&self) -> Option<u32> {
        self.newest.map(|n| n.0)
    }

    /// The world as of the newest applied snapshot, sorted by entity id.
    pub fn entities(&self) -> &[EntityState] {
        self.baselines.current()
    }

    /// Ticks of the stored baselines, newest stored first.
    pub fn baseline_ticks(&self) -> Vec<u32> {
        self.baselines.ticks().collect()
    }

    /// The stored state of `tick`, if any.
    pub fn baseline(&self, tick: u32) -> Option<&[EntityState]> {
        self.baselines.find(tick).map(|i| self.baselines.get(i))
    }

    /// A handoff is in progress.
    pub fn is_handing_off(&self) -> bool {
        self.handoff.is_some()
    }

    /// Predicted position of the bot's entity.
    pub fn predicted_position(&self) -> [f32; 3] {
        self.pred.current()
    }

    /// Whether this bot breaks inputs on purpose.
    pub fn misbehaves(&self) -> bool {
        self.misbehaves
    }

    fn ms(&self, now: Instant) -> u32 {
        self.epoch
            .map_or(0, |e| now.saturating_duration_since(e).as_millis() as u32)
    }

    fn fail(&mut self, reason: &'static str, rec: &mut Recorder) {
        self.phase = BotPhase::Failed;
        rec.connect_failures.add(reason, 1);
        self.out.clear();
        self.handshake.end();
    }

    fn fail_handoff(&mut self, reason: &'static str, rec: &mut Recorder) {
        rec.events.add2("handoff_failed", reason, 1);
        self.handoff = None;
        self.handshake.end();
        self.out.clear();
        self.phase = BotPhase::Closed;
    }

    /// Forget the zone: ticks, baselines, pings and the prediction belong to one server.
    fn reset_zone_session(&mut self) {
        self.baselines.clear();
        self.newest = None;
        self.arrivals.reset();
        self.ack = 0;
        self.awaiting_full = false;
        self.ticks = TickStep::checked(self.opts.snapshot_tick_step);
        self.pings = [None; PINGS];
        self.heartbeat_sent = None;
        self.anchored = false;
        self.entity = None;
        self.verdict = None;
    }

    fn on_connect_ack(&mut self, now: Instant, a: &codec::ConnectAck, rec: &mut Recorder) {
        if let Some(h) = self.handoff.filter(|h| h.connecting) {
            if a.result == result::SUCCESS {
                rec.record_extra(
                    "handoff_us",
                    now.saturating_duration_since(h.started).as_micros() as u64,
                );
                rec.event("handoffs");
                self.handoff = None;
                self.handshake.end();
                self.auth_token = [0; 64];
                self.entity = Some(a.entity_id);
                self.zone = Some(a.zone_id);
                self.out.push_back(Out::Connected);
            } else if a.result == result::AUTH_FAILED
                && codec::text_of(&a.message).starts_with("expired")
            {
                self.fail_handoff("expired_token", rec);
            } else {
                self.fail_handoff("refused", rec);
            }
            return;
        }
        match self.phase {
            BotPhase::Connecting => {
                if a.result != result::SUCCESS {
                    let why = match a.result {
                        result::VERSION_MISMATCH => "version_mismatch",
                        result::AUTH_FAILED => "auth_failed",
                        _ => "refused",
                    };
                    self.fail(why, rec);
                    return;
                }
                self.phase = BotPhase::Connected;
                self.connected_at = Some(now);
                self.handshake.end();
                self.silence.arm(now);
                if let Some(s) = self.attempt_started {
                    rec.record_handshake(now.saturating_duration_since(s).as_micros() as u64);
                }
                self.entity = Some(a.entity_id);
                self.zone = Some(a.zone_id);
                self.out.push_back(Out::Connected);
                let phase = self.params.phase_offset;
                self.grid.start(now + phase);
                self.ping_timer.start_at(now + phase);
                self.heartbeat_timer
                    .start_at(now + Duration::from_millis(self.opts.heartbeat_interval_ms));
                self.invalid_timer
                    .start_at(now + Duration::from_millis(self.opts.invalid_input_interval_ms));
            }
            _ => rec.event("connect_ack_duplicate"),
        }
    }

    fn on_zone_handoff(&mut self, now: Instant, z: &codec::ZoneHandoff, rec: &mut Recorder) {
        if self.handoff.is_some() {
            rec.event("handoff_duplicate");
            return;
        }
        if self.failed_token == Some(z.handoff_token) {
            return;
        }
        let ip = z
            .address_text()
            .and_then(|t| t.trim().parse::<IpAddr>().ok());
        let Some(ip) = ip.filter(|_| z.new_server_port != 0) else {
            rec.events.add2("handoff_failed", "bad_address", 1);
            self.failed_token = Some(z.handoff_token);
            return;
        };
        let to = SocketAddr::new(ip, z.new_server_port);
        if !self.handoff_policy.allows(to) {
            // Counted once per token (the server resends it); nothing goes to `to`.
            rec.events.add2("handoff_refused", "not_allowed", 1);
            self.failed_token = Some(z.handoff_token);
            return;
        }
        if let Some((kind, _)) = self.verdict.take() {
            rec.events.add2("invalid_input_unjudged", kind, 1);
        }
        // This zone's snapshots end here (later ones are ignored while handing off), on
        // purpose: no tail is lost.
        self.finish_ticks(rec);
        self.arrivals.reset();
        self.out.push_back(Out::Disconnect(reason::ZONE_HANDOFF));
        self.handoff = Some(Handoff {
            started: now,
            token: z.handoff_token,
            connect_at: None,
            connecting: false,
        });
        self.relink = Some(to);
        rec.event("handoff_started");
    }

    fn send_handoff_connect(&mut self, now: Instant) {
        let Some(h) = self.handoff.as_mut() else {
            return;
        };
        h.connect_at = None;
        h.connecting = true;
        self.auth_token = [0; 64];
        self.auth_token[..32].copy_from_slice(&h.token);
        self.out.push_back(Out::Connect);
        self.handshake.begin(
            now,
            Some(self.params.handshake_retry),
            self.params.handshake_timeout,
        );
    }

    fn on_event(&mut self, now: Instant, body: &EventBody<'_>, rec: &mut Recorder) {
        let t = body.event_type();
        rec.event(event::name(t));
        match body {
            EventBody::Damage(d) if Some(d.target_id) == self.entity => {
                rec.events.add("damage_taken", d.damage.max(0) as u64);
            }
            EventBody::Death(d) if Some(d.victim_id) == self.entity => {
                // The server respawns the player elsewhere: re-anchor, not a correction.
                self.anchored = false;
            }
            EventBody::ZoneHandoff(z) => self.on_zone_handoff(now, z, rec),
            _ => {}
        }
    }

    /// Loss counts (and what learning the step decided) into the recorder.
    fn record_ticks(&self, news: &TickNews, rec: &mut Recorder) {
        rec.loss_down.add(news.loss.0, news.loss.1);
        if news.reset {
            rec.event("snapshot_tick_reset");
        }
        if let Some(l) = news.learned {
            rec.record_extra("snapshot_tick_step", u64::from(l.step));
            if l.irregular {
                rec.event("tick_step_irregular");
            }
            if l.contradicted.is_some() {
                rec.event("snapshot_tick_step_contradicted");
            }
        }
    }

    /// End of a zone session's snapshots: count the ticks still held back for learning.
    fn finish_ticks(&mut self, rec: &mut Recorder) {
        let news = self.ticks.finish();
        self.record_ticks(&news, rec);
    }

    fn on_snapshot(&mut self, now: Instant, data_len: usize, s: &Snapshot<'_>, rec: &mut Recorder) {
        let news = self.ticks.on_tick(s.server_tick);
        self.record_ticks(&news, rec);
        // Whether to apply is decided by the tick itself, never by the loss mapping: a step
        // that does not fit the server must not freeze the world (and the ack) on one tick.
        if self.baselines.find(s.server_tick).is_some() {
            rec.event("snapshot_duplicate");
            return;
        }
        if news.duplicate {
            rec.event("snapshot_tick_off_step");
        }
        let base = if s.is_full() {
            rec.record_extra("snapshot_full_bytes", data_len as u64);
            None
        } else {
            rec.record_extra("snapshot_delta_bytes", data_len as u64);
            match self.baselines.find(s.baseline_tick) {
                Some(i) => Some(i),
                None => {
                    rec.event("baseline_miss");
                    self.awaiting_full = true;
                    self.ack = 0;
                    return;
                }
            }
        };
        let mut state = std::mem::take(&mut self.scratch);
        let applied = self.applier.apply(
            base.map_or(&[][..], |i| self.baselines.get(i)),
            s,
            &mut state,
            MAX_TRACKED_ENTITIES,
        );
        self.applier.shrink_over(APPLIER_KEEP_BYTES);
        let unknown = match applied {
            Ok(n) => n,
            Err(_) => {
                // Not stored, not acknowledged: the server's next delta is onto the tick
                // acknowledged before (a full snapshot always fits: at most 65,535 records).
                rec.decode_error("snapshot", "too_many_entities");
                state.clear();
                self.scratch = state;
                self.enforce_budget(rec);
                return;
            }
        };
        if unknown > 0 {
            rec.events.add("removed_unknown_entity", unknown);
        }
        if s.is_full() {
            if self.awaiting_full {
                self.awaiting_full = false;
                rec.event("full_fallback");
            }
        } else {
            let full_equiv = codec::len::FULL_HEADER + codec::len::RECORD_FULL * state.len();
            let saved = 1.0 - data_len as f64 / full_equiv as f64;
            rec.record_extra(
                "delta_savings_pct",
                (saved * 100.0).round().clamp(0.0, 100.0) as u64,
            );
            rec.events.add("delta_bytes", data_len as u64);
            rec.events
                .add("delta_full_equivalent_bytes", full_equiv as u64);
        }
        let newer = self
            .newest
            .is_none_or(|(t, _)| (s.server_tick.wrapping_sub(t) as i32) > 0);
        let slot = self.baselines.store(s.server_tick, &mut state);
        self.scratch = state;
        self.enforce_budget(rec);
        if !newer {
            rec.event("snapshot_reordered");
            return;
        }
        if let Some((_, at)) = self.newest {
            rec.snapshot_interarrival_us
                .saturating_record(now.saturating_duration_since(at).as_micros().max(1) as u64);
        }
        self.arrivals.mark(now);
        self.newest = Some((s.server_tick, now));
        self.baselines.current = Some(slot);
        if !self.awaiting_full {
            self.ack = s.server_tick;
        }
        rec.snapshots_applied += 1;
        rec.record_extra("entities", self.baselines.get(slot).len() as u64);
        self.reconcile(now, rec);
    }

    /// Keep the states held within `max_state_bytes` ([`Baselines`]).
    fn enforce_budget(&mut self, rec: &mut Recorder) {
        let evicted = self.baselines.enforce_budget(&mut [&mut self.scratch]);
        if evicted > 0 {
            rec.events.add("baseline_evicted", evicted);
        }
    }

    fn reconcile(&mut self, now: Instant, rec: &mut Recorder) {
        let Some(id) = self.entity else {
            return;
        };
        let world = self.baselines.current();
        let Ok(i) = world.binary_search_by_key(&id, |e| e.id) else {
            return;
        };
        let q = world[i].pos;
        let p = [
            codec::dequantize_pos(q[0]),
            codec::dequantize_pos(q[1]),
            codec::dequantize_pos(q[2]),
        ];
        if !self.anchored {
            self.pred.reset(p);
            self.anchored = true;
            if self.heading.is_none() {
                // Face the nearer border along x, where the neighbouring zones lie.
                self.heading = Some(if p[0] >= 0.0 {
                    0.0
                } else {
                    std::f32::consts::PI
                });
                if self.opts.turn_every_ms > 0 {
                    self.turn_timer
                        .start_at(now + Duration::from_millis(self.opts.turn_every_ms));
                }
            }
            return;
        }
        let (err, corrected) = self.pred.reconcile(
            p,
            self.opts.prediction_error_threshold_m,
            self.opts.zone_half(),
        );
        rec.record_extra("prediction_error", (err * 1000.0).round() as u64);
        if corrected {
            rec.event("corrections");
            if let Some((kind, _)) = self.verdict.take() {
                rec.events.add2("invalid_input_applied", kind, 1);
                rec.event("invalid_input_applied");
            }
        }
    }

    fn send_input_if_due(&mut self, now: Instant, rec: &mut Recorder) {
        let Some(due) = self.grid.take_due(now, rec) else {
            return;
        };
        if self.handoff.is_some() {
            return;
        }
        let elapsed = now.saturating_duration_since(self.connected_at.unwrap_or(now));
        let keys = self
            .pattern
            .sample(&self.params.pattern, elapsed, &mut self.rng);
        if self.params.input_on_change && self.last_keys == Some(keys.0) {
            return;
        }
        self.last_keys = Some(keys.0);
        let mut flags = keys_to_flags(keys);
        if !self.anchored {
            flags &= !MOVE_FLAGS;
        }
        if self.opts.turn_every_ms > 0 && self.turn_timer.fire(now) {
            self.heading = self.heading.map(|h| {
                let t = h + std::f32::consts::PI;
                if t > std::f32::consts::PI {
                    t - 2.0 * std::f32::consts::PI
                } else {
                    t
                }
            });
        }
        let yaw = self.heading.unwrap_or(0.0);
        let ack = match self.opts.dialect {
            Dialect::Spec => Some(self.ack),
            Dialect::StructAsPrinted | Dialect::Implementation => None,
        };
        let timestamp = self.ms(now);
        let mut inp = codec::Input {
            sequence: 0,
            timestamp,
            flags,
            yaw,
            pitch: 0.0,
            target_entity: 0,
            last_received_tick: ack,
        };
        let break_one = self.misbehaves
            && self.anchored
            && self.verdict.is_none()
            && self.invalid_timer.fire(now);
        if break_one {
            let kind = INVALID_KINDS[self.invalid_next % INVALID_KINDS.len()];
            self.invalid_next += 1;
            match kind {
                "yaw_out_of_range" => {
                    self.seq += 1;
                    inp.sequence = self.seq;
                    inp.flags = input::FORWARD;
                    inp.yaw = 4.0;
                }
                "conflicting_flags" => {
                    self.seq += 1;
                    inp.sequence = self.seq;
                    inp.flags = input::FORWARD | input::BACKWARD | input::RIGHT;
                }
                _ => {
                    inp.sequence = self.seq.saturating_sub(2).max(1);
                    inp.flags = input::RIGHT | input::SPRINT;
                }
            }
            rec.events.add2("invalid_input_sent", kind, 1);
            rec.event("invalid_input_sent");
            self.verdict = Some((kind, now + VERDICT_WINDOW));
        } else {
            self.seq += 1;
            inp.sequence = self.seq;
            self.pred.push(flags, yaw, self.opts.zone_half());
        }
        rec.record_lateness(now.saturating_duration_since(due).as_micros() as u64);
        rec.inputs_sent += 1;
        self.out.push_back(Out::Input(inp));
    }

    fn send_ping_if_due(&mut self, now: Instant, rec: &mut Recorder) {
        if !self.ping_timer.fire(now) || self.handoff.is_some() {
            return;
        }
        let token = self.next_ping;
        self.next_ping = self.next_ping.wrapping_add(1).max(1);
        let slot = (token as usize) % PINGS;
        if self.pings[slot].is_some() {
            rec.event("ping_lost");
        }
        self.pings[slot] = Some((token, now));
        self.out.push_back(Out::Ping(token));
    }

    fn on_pong(&mut self, now: Instant, token: u32, rec: &mut Recorder) {
        let slot = (token as usize) % PINGS;
        match self.pings[slot] {
            Some((t, sent)) if t == token => {
                rec.record_rtt(now.saturating_duration_since(sent).as_micros() as u64);
                self.pings[slot] = None;
            }
            _ => rec.event("pong_unknown"),
        }
    }
}

fn keys_to_flags(k: Keys) -> u8 {
    let mut f = 0;
    let up = k.0 & Keys::UP != 0;
    let down = k.0 & Keys::DOWN != 0;
    let left = k.0 & Keys::LEFT != 0;
    let right = k.0 & Keys::RIGHT != 0;
    // Opposite keys together cancel: never send conflicting flags by accident.
    if up != down {
        f |= if up { input::FORWARD } else { input::BACKWARD };
    }
    if left != right {
        f |= if left { input::LEFT } else { input::RIGHT };
    }
    if k.shoot() {
        f |= input::ATTACK;
    }
    f
}

impl Bot for DarkAgesBot {
    fn start(&mut self, now: Instant, _rec: &mut Recorder) {
        self.phase = BotPhase::Connecting;
        self.epoch = Some(now);
        self.attempt_started = Some(now);
        self.out.push_back(Out::Connect);
        self.handshake.begin(
            now,
            Some(self.params.handshake_retry),
            self.params.handshake_timeout,
        );
    }

    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        if !matches!(self.phase, BotPhase::Connecting | BotPhase::Connected) {
            rec.event("datagram_outside_session");
            return;
        }
        let packet = match codec::decode(data) {
            Ok(p) => p,
            Err(e) if e.is_unknown_type() => {
                rec.event("unknown_packet_type");
                if super::implementation::codec::fits(data) {
                    rec.event("dialect_hint.implementation");
                }
                return;
            }
            Err(e) => {
                rec.decode_error(e.message, e.reason);
                return;
            }
        };
        self.silence.heard(now);
        if let Packet::ConnectAck(a) = &packet {
            let a = *a;
            self.on_connect_ack(now, &a, rec);
            return;
        }
        if self.phase != BotPhase::Connected {
            rec.event("packet_before_connect_ack");
            return;
        }
        match packet {
            Packet::Snapshot(s) if self.handoff.is_none() => {
                self.on_snapshot(now, data.len(), &s, rec)
            }
            Packet::Snapshot(_) => rec.event("snapshot_during_handoff"),
            Packet::Event(e) => self.on_event(now, &e.body, rec),
            Packet::Coalesced(c) => {
                rec.event("coalesced_events");
                for b in c.events() {
                    self.on_event(now, &b, rec);
                }
            }
            Packet::ZoneHandoff(z) => self.on_zone_handoff(now, &z, rec),
            Packet::ZoneEnter { .. } => rec.event("zone_enter"),
            Packet::ZoneLeave { .. } => rec.event("zone_leave"),
            Packet::DebugText(_) => rec.event("debug_text"),
            Packet::Pong { timestamp } => self.on_pong(now, timestamp, rec),
            Packet::Ping { timestamp } => self.out.push_back(Out::Pong(timestamp)),
            Packet::Heartbeat { timestamp } => {
                if self.heartbeat_sent == Some(timestamp) {
                    self.heartbeat_sent = None;
                    rec.event("heartbeat_echoed");
                } else {
                    rec.event("heartbeat_answered");
                    self.out.push_back(Out::Heartbeat(timestamp));
                }
            }
            Packet::Disconnect { reason: r, .. } => {
                rec.events.add2("server_disconnect", reason::name(r), 1);
                self.finish_ticks(rec);
                self.arrivals.reset();
                if let Some((kind, _)) = self.verdict.take() {
                    rec.events.add2("invalid_input_disconnected", kind, 1);
                    rec.event("invalid_input_disconnected");
                }
                self.phase = BotPhase::Closed;
                self.out.clear();
            }
            Packet::Connect(_) | Packet::Connected | Packet::Input(_) | Packet::ConnectAck(_) => {
                rec.decode_error(packet.name(), "wrong_direction")
            }
        }
    }

    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting => {
                if self.handshake.timed_out(now) {
                    self.fail("timeout", rec);
                } else if self.handshake.retry_due(now) {
                    rec.event("connect_retry");
                    self.out.push_back(Out::Connect);
                }
            }
            BotPhase::Connected => {
                if let Some(h) = self.handoff {
                    if h.connect_at.is_some_and(|t| now >= t) {
                        self.send_handoff_connect(now);
                    } else if h.connecting {
                        if self.handshake.timed_out(now) {
                            self.fail_handoff("timeout", rec);
                            return;
                        }
                        if self.handshake.retry_due(now) {
                            rec.event("handoff_connect_retry");
                            self.out.push_back(Out::Connect);
                        }
                    }
                }
                if self.silence.expired(now) {
                    rec.event("server_silence_timeout");
                    self.finish_ticks(rec);
                    self.arrivals.finish(now, rec);
                    self.phase = BotPhase::Closed;
                    self.out.clear();
                    return;
                }
                if let Some((kind, at)) = self.verdict {
                    if now >= at {
                        self.verdict = None;
                        rec.events.add2("invalid_input_ignored", kind, 1);
                        rec.event("invalid_input_ignored");
                    }
                }
                self.send_input_if_due(now, rec);
                self.send_ping_if_due(now, rec);
                if self.heartbeat_timer.fire(now) && self.handoff.is_none() {
                    let ts = self.ms(now).max(1);
                    self.heartbeat_sent = Some(ts);
                    self.out.push_back(Out::Heartbeat(ts));
                }
            }
            BotPhase::Idle | BotPhase::Failed | BotPhase::Closed => {}
        }
    }

    fn stop(&mut self, now: Instant, rec: &mut Recorder) {
        if self.phase == BotPhase::Connected && self.handoff.is_none() {
            self.out.push_back(Out::Disconnect(reason::NORMAL));
            self.finish_ticks(rec);
            self.arrivals.finish(now, rec);
        }
        if matches!(
            self.phase,
            BotPhase::Connected | BotPhase::Connecting | BotPhase::Idle
        ) {
            self.phase = BotPhase::Closed;
        }
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let out = self.out.pop_front()?;
        let p = match out {
            Out::Connect => Packet::Connect(codec::Connect {
                protocol_version: self.opts.protocol_version,
                client_version: self.opts.client_version,
                client_id: self.client_id,
                auth_token: self.auth_token,
            }),
            Out::Connected => Packet::Connected,
            Out::Input(i) => Packet::Input(i),
            Out::Ping(t) => Packet::Ping { timestamp: t },
            Out::Pong(t) => Packet::Pong { timestamp: t },
            Out::Heartbeat(t) => Packet::Heartbeat { timestamp: t },
            Out::Disconnect(r) => Packet::Disconnect {
                reason: r,
                message: if r == reason::ZONE_HANDOFF {
                    "zone handoff"
                } else {
                    "bye"
                },
            },
        };
        // Every client packet fits in 105 bytes; callers pass MAX_DATAGRAM.
        let len = codec::encode(buf, &p).ok()?;
        Some(super::transmit(buf, len))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            BotPhase::Connecting => self.handshake.next_deadline(),
            BotPhase::Connected => {
                let handoff = self.handoff.and_then(|h| {
                    h.connect_at
                        .or_else(|| h.connecting.then(|| self.handshake.next_deadline())?)
                });
                earliest([
                    self.grid.next_due(),
                    self.ping_timer.next(),
                    self.heartbeat_timer.next(),
                    self.silence.deadline(),
                    self.verdict.map(|v| v.1),
                    handoff,
                ])
            }
            BotPhase::Idle | BotPhase::Failed | BotPhase::Closed => None,
        }
    }

    fn phase(&self) -> BotPhase {
        self.phase
    }

    fn poll_relink(&mut self) -> Option<Relink> {
        self.relink.take().map(|a| Relink { to: Some(a) })
    }

    fn handle_relinked(&mut self, now: Instant, _rec: &mut Recorder) {
        if self.handoff.is_none() {
            return;
        }
        self.reset_zone_session();
        self.silence.arm(now);
        self.silence.heard(now);
        let delay = Duration::from_millis(self.opts.handoff_connect_delay_ms);
        if delay.is_zero() {
            self.send_handoff_connect(now);
        } else if let Some(h) = self.handoff.as_mut() {
            h.connect_at = Some(now + delay);
        }
    }

    fn handle_transport_closed(&mut self, now: Instant, rec: &mut Recorder) {
        if self.handoff.is_some() {
            self.fail_handoff("bad_address", rec);
        } else if self.phase == BotPhase::Connected {
            self.phase = BotPhase::Closed;
            rec.event("transport_closed");
            self.finish_ticks(rec);
            self.arrivals.finish(now, rec);
        }
    }
}

impl std::fmt::Debug for DarkAgesBot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DarkAgesBot")
            .field("index", &self.params.index)
            .field("phase", &self.phase)
            .field("entity", &self.entity)
            .field("zone", &self.zone)
            .finish()
    }
}
