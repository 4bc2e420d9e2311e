//! The cafe bot: a sans-IO client state machine.
//!
//! Life: Hello (resent every `handshake_retry` until Welcome or `handshake_timeout`), then
//! input on a fixed grid, pings for RTT, heartbeat echoes, snapshots applied to an entity
//! table (a snapshot older than one already applied is counted and skipped), Disconnect on
//! stop.
//!
//! Downstream loss ([`DownLoss`]): `loss_source: sequence` (the spec dialect's default) reads
//! the header `seq`, which a per-connection counter makes exact for every server datagram; the
//! implementation dialect's default reads snapshot ticks, because its server numbers every
//! client's datagrams with ONE counter. With `seq` as the source a gap is only *suspected*:
//! the bot follows the snapshot ticks beside it, and every half second of at least 16
//! snapshots (at a snapshot, once the tick step is known) and when the session ends it
//! commits the `seq` counts only if the gaps are explained by missing ticks plus the pongs,
//! heartbeats and extra Welcomes that may have been lost (a chunk explained only by those is
//! held until the next one settles it); otherwise the counter is shared (it advances N times
//! per tick with N clients, and N changes as bots join), and the bot commits the tick counts
//! instead and counts by tick from then on (`shared_sequence_detected`). So the per-second
//! figures never show another client's datagrams as loss, however late the sharing becomes
//! visible. The tick step is the option's, or the gcd of the tick differences of the first
//! [`LEARN_SNAPSHOTS`](crate::protocol::prelude::seqwindow::LEARN_SNAPSHOTS) snapshots.
//!
//! A Ping is matched to the bot's own pings by its token before any sequence bookkeeping:
//! the implementation echoes the whole datagram, the bot's own header `seq` included, which
//! a server-sequence window would drop as old.

use std::collections::VecDeque;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::codec::{self, Dialect, EntityRecord, Message, Snapshot};
pub mod loss;

use self::loss::{DownLoss, Settled};
use super::dialects::implementation::predict::Prediction;
use super::{CafeOptions, LossSource};
use crate::protocol::prelude::idmap::{id_map_with_capacity, IdMap};
use crate::protocol::prelude::input_grid::KeyInputs;
use crate::protocol::prelude::seqwindow::SeqOutcome;
use crate::protocol::prelude::tail::SnapshotArrivals;
use crate::protocol::prelude::timers::{wake_in_phase, Handshake, Periodic, Silence};
use crate::protocol::prelude::Recorder;
use crate::protocol::prelude::{Bot, BotParams, BotPhase, Transmit};

/// Pings in flight at once; a new ping evicts the oldest (counted as `ping_lost`).
const PINGS_IN_FLIGHT: usize = 8;
/// Inputs remembered by header seq, for `input_to_snapshot_us` (4 s at 60 Hz).
const INPUT_HISTORY: usize = 256;
/// Inputs by header seq with when they were queued (`None`: no input in that slot yet).
type InputHistory = [Option<(u32, Instant)>; INPUT_HISTORY];

#[derive(Debug, Clone, Copy)]
enum Out {
    Hello,
    Input {
        mask: u16,
        time_ms: u32,
        at: Instant,
    },
    Ping {
        token: u32,
    },
    Disconnect,
}

/// One ping in flight: its token and when it was queued.
#[derive(Debug, Clone, Copy)]
struct PingSlot {
    token: u32,
    sent: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Tracked {
    record: EntityRecord,
    /// Full-snapshot generation that last carried this entity.
    generation: u32,
}

/// Fields in declaration order (`repr(C)`), the ones every input tick reads and writes first:
/// with thousands of bots a worker touches each bot's state once per tick, and each cache
/// line of it is a miss. The compiler's own order spread them over the whole 1.5 KB (measured:
/// `handle_timeout` 9 % of a 4,500-bot swarm's samples, most of it three loads); here they
/// are the first 260 bytes.
#[repr(C)]
pub struct CafeBot {
    // Every tick (handle_timeout, poll_transmit, poll_timeout):
    phase: BotPhase,
    player_id: u16,
    seq_out: u32,
    out: VecDeque<Out>,
    keys: KeyInputs,
    ping_timer: Periodic,
    silence: Silence,
    connected_at: Option<Instant>,
    started_at: Option<Instant>,
    /// Inputs by header seq (`seq % INPUT_HISTORY`) with when they were queued, for
    /// `input_to_snapshot_us`: implementation dialect only (the spec's snapshots name no
    /// Input), so a spec bot does not carry the 6 KiB table.
    inputs: Option<Box<InputHistory>>,
    /// The own player's predicted position, reconciled against `last_input` (implementation
    /// dialect only: the spec's snapshots name no Input). Boxed: every Input reads whether
    /// there is one, and inline its 80 bytes pushed the rest of a tick's fields a line on.
    prediction: Option<Box<Prediction>>,
    params: BotParams,

    // The rest: snapshots, pings, the handshake.
    opts: CafeOptions,
    name: [u8; codec::NAME_LEN],
    rng: ChaCha8Rng,

    handshake: Handshake,

    tick_rate: u16,

    /// Downstream loss: header seq checked against snapshot ticks, or ticks alone.
    loss: DownLoss,
    /// Own pings given up (evicted unanswered) since the loss was last settled: their pongs
    /// may be among the `seq` gaps.
    pings_given_up: u64,
    /// The newest `last_input` already measured.
    last_input_seen: Option<u32>,

    /// Tokens `first_token..next_token` (wrapping) are the bot's own.
    first_token: u32,
    next_token: u32,
    pings: [Option<PingSlot>; PINGS_IN_FLIGHT],
    /// The last heartbeat token echoed, to recognise a server answering the echo.
    echoed_heartbeat: Option<u32>,

    entities: IdMap<u16, Tracked>,
    full_generation: u32,
    /// Snapshot arrival times: inter-arrival, and the tail a dead server leaves uncounted.
    arrivals: SnapshotArrivals,
    /// Tick of the newest snapshot applied.
    last_tick: Option<u32>,
    /// Since when the entity table may be stale (a datagram was lost after the last full).
    stale_since: Option<Instant>,
    /// Since when a gap in `seq` may have been a lost snapshot, until the next snapshot's tick
    /// says whether it was.
    suspect_since: Option<Instant>,
}

impl CafeBot {
    pub fn new(params: BotParams, opts: CafeOptions) -> Self {
        let by_sequence = opts.loss_source.resolve(opts.dialect) == LossSource::Sequence;
        let loss = DownLoss::new(by_sequence, opts.snapshot_tick_step);
        let keys = KeyInputs::new(&params);
        let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
        let next_token = rng.random();
        let name = codec::make_name(&format!("bot-{}", params.index));
        let silence = Silence::new(params.server_silence_timeout);
        let ping_timer = Periodic::new(params.ping_interval);
        let inputs =
            (opts.dialect == Dialect::Implementation).then(|| Box::new([None; INPUT_HISTORY]));
        Self {
            params,
            opts,
            name,
            rng,
            phase: BotPhase::Idle,
            out: VecDeque::with_capacity(16),
            seq_out: 0,
            started_at: None,
            handshake: Handshake::new(),
            player_id: 0,
            tick_rate: 0,
            prediction: None,
            connected_at: None,
            silence,
            loss,
            pings_given_up: 0,
            keys,
            last_input_seen: None,
            inputs,
            ping_timer,
            first_token: next_token,
            next_token,
            pings: [None; PINGS_IN_FLIGHT],
            echoed_heartbeat: None,
            // Grown to the room's players on the first snapshots (32 by default), not
            // reserved for twice that in every bot.
            entities: id_map_with_capacity(0),
            full_generation: 0,
            arrivals: SnapshotArrivals::new(),
            last_tick: None,
            stale_since: None,
            suspect_since: None,
        }
    }

    /// The player id the server assigned (0 before Welcome).
    pub fn player_id(&self) -> u16 {
        self.player_id
    }

    /// The tick rate the server announced in Welcome.
    pub fn tick_rate(&self) -> u16 {
        self.tick_rate
    }

    /// Entities currently in the bot's table.
    pub fn entity_count(&self) -> usize {
        self.entities.len()
    }

    pub fn entity(&self, id: u16) -> Option<&EntityRecord> {
        self.entities.get(&id).map(|t| &t.record)
    }

    fn dialect(&self) -> Dialect {
        self.opts.dialect
    }

    fn since_start_ms(&self, now: Instant) -> u32 {
        self.started_at
            .map(|s| now.saturating_duration_since(s).as_millis() as u32)
            .unwrap_or(0)
    }

    fn on_welcome(&mut self, now: Instant, player_id: u16, tick_rate: u16, rec: &mut Recorder) {
        if self.phase != BotPhase::Connecting {
            rec.event("duplicate_welcome");
            return;
        }
        self.phase = BotPhase::Connected;
        self.player_id = player_id;
        self.tick_rate = tick_rate;
        if self.dialect() == Dialect::Implementation {
            self.prediction = Some(Box::new(Prediction::new(self.opts.player_speed, tick_rate)));
        }
        self.connected_at = Some(now);
        self.silence.arm(now);
        self.handshake.end();
        if let Some(s) = self.started_at {
            rec.record_handshake(now.saturating_duration_since(s).as_micros() as u64);
        }
        self.keys.begin(now, &self.params);
        // Spread pings the same way inputs are spread.
        self.ping_timer.start_at(now + self.params.phase_offset);
    }

    /// The slot of the bot's own ping `token`, if still in flight.
    fn ping_slot(&self, token: u32) -> Option<usize> {
        self.pings
            .iter()
            .position(|p| p.is_some_and(|p| p.token == token))
    }

    fn on_ping(&mut self, now: Instant, token: u32, rec: &mut Recorder) {
        let issued = self.issued(token);
        let own = self.ping_slot(token).and_then(|i| self.pings.get_mut(i));
        match own {
            Some(slot) => {
                if let Some(PingSlot { sent, .. }) = slot.take() {
                    let rtt = now.saturating_duration_since(sent);
                    if rtt > self.params.server_silence_timeout {
                        rec.event("pong_late");
                    } else {
                        rec.record_rtt(rtt.as_micros() as u64);
                    }
                }
            }
            // One of ours whose slot is gone (answered already, or evicted): not a
            // heartbeat, so never echoed.
            None if issued => rec.event("pong_unmatched"),
            // The server answered our echo of its heartbeat: echoing again would ping-pong
            // forever.
            None if self.echoed_heartbeat == Some(token) => rec.event("heartbeat_echo_answered"),
            None => {
                // A server heartbeat: echo it unchanged.
                rec.event("heartbeat_echoed");
                self.loss.on_heartbeat(now);
                self.echoed_heartbeat = Some(token);
                self.out.push_back(Out::Ping { token });
            }
        }
    }

    /// Whether this bot issued `token` as a ping.
    fn issued(&self, token: u32) -> bool {
        token.wrapping_sub(self.first_token) < self.next_token.wrapping_sub(self.first_token)
    }

    fn on_snapshot(&mut self, now: Instant, s: &Snapshot<'_>, bytes: usize, rec: &mut Recorder) {
        if self.phase != BotPhase::Connected {
            rec.event("snapshot_outside_session");
            return;
        }
        let counting = !self.loss.by_sequence();
        // Ticks are followed in either loss mode: they also tell whether a gap in the
        // sequence held a snapshot (see `note_seq_gap`), and whether `seq` is shared.
        let st = self.loss.on_tick(s.tick, rec);
        if let Some(l) = st.learned {
            rec.record_extra("snapshot_tick_step", u64::from(l.step));
            if l.irregular {
                rec.event("tick_step_irregular");
            }
        }
        if counting {
            if let Some(outcome) = st.outcome {
                self.note_gap(now, outcome);
                if outcome == SeqOutcome::Reset {
                    rec.event("snapshot_tick_reset");
                }
            }
            // Seen before while learning, or a duplicate or too old to tell after.
            let old = st.duplicate
                || matches!(st.outcome, Some(SeqOutcome::Duplicate | SeqOutcome::TooOld));
            if old {
                rec.event("snapshot_duplicate_or_old");
                return;
            }
        } else {
            // Both counts have now seen the same datagrams: a chunk may be settled.
            let pongs = self.pongs_possibly_lost();
            let settled = self.loss.settle_if_due(now, pongs, rec);
            self.on_settled(settled, rec);
        }
        if let Some(li) = s.last_input {
            self.on_last_input(now, li, rec);
            self.reconcile(li, s, rec);
        }
        self.settle_suspect_gap(s.tick, rec);
        // Older than a snapshot already applied (reordered): applying it would roll the table
        // back. The gap that made it late has marked the table stale already.
        if self
            .last_tick
            .is_some_and(|last| (s.tick.wrapping_sub(last) as i32) < 0)
        {
            rec.event("snapshot_out_of_order");
            return;
        }
        self.last_tick = Some(s.tick);
        self.arrivals.on_arrival(now, rec);
        if s.is_full() {
            self.full_generation = self.full_generation.wrapping_add(1);
            let generation = self.full_generation;
            for record in s.records() {
                self.entities
                    .insert(record.entity_id, Tracked { record, generation });
            }
            self.entities.retain(|_, t| t.generation == generation);
            if let Some(since) = self.stale_since.take() {
                rec.record_extra(
                    "stale_us",
                    now.saturating_duration_since(since).as_micros() as u64,
                );
            }
        } else {
            let generation = self.full_generation;
            for record in s.records() {
                self.entities
                    .entry(record.entity_id)
                    .and_modify(|t| t.record = record)
                    .or_insert(Tracked { record, generation });
            }
        }
        rec.snapshots_applied += 1;
        rec.record_extra("entities", self.entities.len() as u64);
        rec.record_extra("snapshot_bytes", bytes as u64);
    }

    /// The server's position of the own player after Input `li`, against the prediction.
    fn reconcile(&mut self, li: u32, s: &Snapshot<'_>, rec: &mut Recorder) {
        let Some(p) = self.prediction.as_mut() else {
            return;
        };
        let Some(own) = s.records().find(|r| r.entity_id == self.player_id) else {
            return;
        };
        if let Some(e) = p.reconcile(li, (own.x, own.y), self.seq_out) {
            rec.record_extra("prediction_error", (f64::from(e) * 1000.0).round() as u64);
        }
    }

    /// `last_input` names the newest Input the server had: the first snapshot naming an
    /// Input measures input-to-snapshot latency (once per Input).
    fn on_last_input(&mut self, now: Instant, li: u32, rec: &mut Recorder) {
        if self
            .last_input_seen
            .is_some_and(|last| (li.wrapping_sub(last) as i32) <= 0)
        {
            return;
        }
        let Some(Some((seq, at))) = self
            .inputs
            .as_ref()
            .and_then(|h| h.get(li as usize % INPUT_HISTORY).copied())
        else {
            return;
        };
        if seq != li {
            return;
        }
        self.last_input_seen = Some(li);
        rec.record_extra(
            "input_to_snapshot_us",
            now.saturating_duration_since(at).as_micros() as u64,
        );
    }

    /// One server `seq` through the window (held until settled). Returns false when the
    /// datagram is a duplicate or too old to use.
    fn account_seq(&mut self, now: Instant, seq: u32, rec: &mut Recorder) -> bool {
        let outcome = self.loss.on_seq(now, seq);
        self.note_seq_gap(now, outcome);
        match outcome {
            SeqOutcome::Duplicate => {
                rec.event("duplicate_datagram");
                false
            }
            SeqOutcome::TooOld => {
                rec.event("too_old_datagram");
                false
            }
            SeqOutcome::Reordered => {
                rec.event("reordered_datagram");
                true
            }
            SeqOutcome::Reset => {
                rec.event("seq_reset");
                true
            }
            SeqOutcome::Advanced { .. } => true,
        }
    }

    /// Pongs that may be among the open chunk's `seq` gaps: in the spec dialect the server
    /// numbers its pongs, so the pings still unanswered that were sent recently enough for
    /// their pong to fall in the chunk, and those given up since the last settle; in the
    /// implementation dialect an echo carries the bot's own seq and stays out of the window.
    fn pongs_possibly_lost(&self) -> u64 {
        if self.dialect() == Dialect::Implementation {
            return 0;
        }
        let since = self.loss.pongs_since();
        let in_flight = self
            .pings
            .iter()
            .flatten()
            .filter(|p| since.is_none_or(|s| p.sent >= s))
            .count() as u64;
        in_flight + self.pings_given_up
    }

    fn on_settled(&mut self, settled: Option<Settled>, rec: &mut Recorder) {
        match settled {
            None => return,
            Some(Settled::Sequence) => {}
            Some(Settled::SharedDetected) => {
                rec.event("shared_sequence_detected");
                // The gaps were other clients' datagrams, not lost deltas.
                self.stale_since = None;
                self.suspect_since = None;
            }
        }
        self.pings_given_up = 0;
    }

    /// The session ends: settle what loss is still held.
    fn finish_loss(&mut self, now: Instant, rec: &mut Recorder) {
        let pongs = self.pongs_possibly_lost();
        let settled = self.loss.finish(now, pongs, rec);
        self.on_settled(settled, rec);
    }

    /// A gap in the snapshot ticks was a lost snapshot, maybe a delta: the table is stale
    /// until the next full snapshot.
    fn note_gap(&mut self, now: Instant, outcome: SeqOutcome) {
        if matches!(outcome, SeqOutcome::Advanced { gap } if gap > 0) && self.stale_since.is_none()
        {
            self.stale_since = Some(now);
        }
    }

    /// A gap in the per-connection `seq` covers every server datagram: the one lost may have
    /// been a Pong or a heartbeat, which leaves the table as right as it was. It is only a
    /// suspicion until the next snapshot tells ([`Self::settle_suspect_gap`]).
    fn note_seq_gap(&mut self, now: Instant, outcome: SeqOutcome) {
        if matches!(outcome, SeqOutcome::Advanced { gap } if gap > 0)
            && self.stale_since.is_none()
            && self.suspect_since.is_none()
        {
            self.suspect_since = Some(now);
        }
    }

    /// The first snapshot after a `seq` gap: if its tick follows the last applied one by
    /// exactly the tick step, no snapshot was in the gap (`seq_gap_not_a_snapshot`) and the
    /// table is not stale; otherwise (or with the step not known yet) it is, from the gap on.
    fn settle_suspect_gap(&mut self, tick: u32, rec: &mut Recorder) {
        let Some(since) = self.suspect_since.take() else {
            return;
        };
        let follows = match (self.last_tick, self.loss.tick_step()) {
            (Some(last), Some(step)) => tick.wrapping_sub(last) == step,
            _ => false,
        };
        if follows {
            rec.event("seq_gap_not_a_snapshot");
        } else if self.stale_since.is_none() {
            self.stale_since = Some(since);
        }
    }

    fn send_inputs_due(&mut self, now: Instant, rec: &mut Recorder) {
        let played = now.saturating_duration_since(self.connected_at.unwrap_or(now));
        let Some(keys) = self
            .keys
            .take(now, played, &self.params, &mut self.rng, rec)
        else {
            return;
        };
        let time_ms = self.since_start_ms(now);
        self.out.push_back(Out::Input {
            mask: u16::from(keys.0),
            time_ms,
            at: now,
        });
        rec.inputs_sent += 1;
    }

    fn send_ping_if_due(&mut self, now: Instant, rec: &mut Recorder) {
        if !self.ping_timer.fire(now) {
            return;
        }
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1);
        // Free slot, or evict the oldest (its answer is lost).
        let idx = match self.pings.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                rec.event("ping_lost");
                self.pings_given_up += 1;
                self.pings
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, p)| p.map(|p| p.sent))
                    .map(|(i, _)| i)
                    .unwrap_or(0)
            }
        };
        self.pings[idx] = Some(PingSlot { token, sent: now });
        rec.event("pings_sent");
        self.out.push_back(Out::Ping { token });
    }
}

impl Bot for CafeBot {
    fn start(&mut self, now: Instant, _rec: &mut Recorder) {
        self.phase = BotPhase::Connecting;
        self.started_at = Some(now);
        self.out.push_back(Out::Hello);
        self.handshake.begin(
            now,
            Some(self.params.handshake_retry),
            self.params.handshake_timeout,
        );
    }

    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        if !self.phase.takes_datagram(rec) {
            return;
        }
        let (seq, msg) = match codec::decode(data, self.dialect()) {
            Ok(m) => m,
            // Unknown message types are counted and ignored (a newer server), not
            // malformed.
            Err(e) if (e.message, e.reason) == ("header", "unknown_type") => {
                self.silence.heard(now);
                rec.event("unknown_message_type");
                return;
            }
            Err(e) => {
                // The wrong dialect is named, not hidden (the decode error says it too).
                match e.dialect_hint() {
                    Some(Dialect::Implementation) => rec.event("dialect_hint.implementation"),
                    Some(Dialect::Spec) => rec.event("dialect_hint.spec"),
                    None => {}
                }
                rec.decode_error(e.message, e.reason);
                return;
            }
        };
        self.silence.heard(now);
        // The bot's own ping first, by its token: never dropped by the sequence window. In
        // the implementation dialect the echo is the bot's whole datagram, its header seq the
        // bot's own, so it stays out of the window (`Some(true)`); a spec server numbers its
        // pong like any other datagram (`Some(false)`: counted, never dropped).
        let own_ping = match msg {
            Message::Ping { timestamp_ms } if self.issued(timestamp_ms) => {
                Some(self.dialect() == Dialect::Implementation)
            }
            _ => None,
        };
        let counts_for_loss =
            self.phase == BotPhase::Connected || matches!(msg, Message::Welcome { .. });
        if self.loss.by_sequence()
            && counts_for_loss
            && own_ping != Some(true)
            && !self.account_seq(now, seq, rec)
            && own_ping.is_none()
        {
            return;
        }
        match msg {
            Message::Welcome {
                player_id,
                tick_rate,
            } => self.on_welcome(now, player_id, tick_rate, rec),
            Message::Snapshot(s) => self.on_snapshot(now, &s, data.len(), rec),
            Message::Ping { timestamp_ms } => self.on_ping(now, timestamp_ms, rec),
            Message::Disconnect => {
                if self.phase == BotPhase::Connecting {
                    self.phase = BotPhase::Failed;
                    rec.connect_failures.add("refused", 1);
                } else {
                    self.finish_loss(now, rec);
                    self.phase = BotPhase::Closed;
                    rec.event("server_disconnect");
                }
                self.out.clear();
            }
            Message::Hello { .. } => rec.decode_error("hello", "wrong_direction"),
            Message::Input { .. } => rec.decode_error("input", "wrong_direction"),
        }
    }

    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting => {
                if self.handshake.timed_out(now) {
                    self.phase = BotPhase::Failed;
                    rec.connect_failures.add("timeout", 1);
                    self.out.clear();
                    return;
                }
                if self.handshake.retry_due(now) {
                    rec.event("hello_retry");
                    self.loss.on_hello_retry();
                    self.out.push_back(Out::Hello);
                }
            }
            BotPhase::Connected => {
                if self.silence.expired(now) {
                    self.phase = BotPhase::Closed;
                    rec.event("server_silence_timeout");
                    self.finish_loss(now, rec);
                    self.arrivals.finish(now, rec);
                    self.out.clear();
                    return;
                }
                self.send_inputs_due(now, rec);
                self.send_ping_if_due(now, rec);
            }
            BotPhase::Idle | BotPhase::Failed | BotPhase::Closed => {}
        }
    }

    fn stop(&mut self, now: Instant, rec: &mut Recorder) {
        if self.phase == BotPhase::Connected {
            self.finish_loss(now, rec);
            self.arrivals.finish(now, rec);
            if self.dialect().has_disconnect() {
                self.out.push_back(Out::Disconnect);
            }
        }
        self.phase = self.phase.after_stop();
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let out = self.out.pop_front()?;
        let msg = match out {
            Out::Hello => Message::Hello {
                player_name: self.name,
            },
            Out::Input { mask, time_ms, at } => {
                let at_seq = self.seq_out as usize % INPUT_HISTORY;
                if let Some(slot) = self.inputs.as_mut().and_then(|h| h.get_mut(at_seq)) {
                    *slot = Some((self.seq_out, at));
                }
                if let Some(p) = self.prediction.as_mut() {
                    p.on_input(self.seq_out, mask);
                }
                Message::Input {
                    player_id: self.player_id,
                    input_mask: mask,
                    client_time_ms: time_ms,
                }
            }
            Out::Ping { token } => Message::Ping {
                timestamp_ms: token,
            },
            Out::Disconnect => Message::Disconnect,
        };
        let seq = self.seq_out;
        self.seq_out = self.seq_out.wrapping_add(1);
        // Every fixed message fits in 24 bytes; callers pass MAX_DATAGRAM.
        codec::encode(buf, seq, &msg).ok().map(Transmit::datagram)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        wake_in_phase(
            self.phase,
            self.handshake.next_deadline(),
            [
                self.keys.next_due(),
                self.ping_timer.next(),
                self.silence.deadline(),
            ],
        )
    }

    fn phase(&self) -> BotPhase {
        self.phase
    }
}

impl std::fmt::Debug for CafeBot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CafeBot")
            .field("index", &self.params.index)
            .field("phase", &self.phase)
            .field("player_id", &self.player_id)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    //! The bot against a simulated server on a simulated clock: a snapshot every tick (60 Hz
    //! unless a test says otherwise), pongs answered at once (numbered by the server in the
    //! spec dialect, the bot's datagram echoed whole in the implementation dialect) unless a
    //! test says otherwise, Inputs ignored.

    use std::time::Duration;

    use super::*;
    use crate::games::cafe::codec::{GameStats, SnapshotEncoder};
    use crate::protocol::prelude::LossCounts;
    use crate::protocol::prelude::MAX_MESSAGE;

    const TICK: Duration = Duration::from_micros(16_667);
    const STEP: Duration = Duration::from_millis(1);

    /// What the simulated server did and what the bot counted.
    struct Outcome {
        /// The bot's downstream loss counts, one per simulated second (the last one partial,
        /// through `stop`).
        seconds: Vec<LossCounts>,
        total: LossCounts,
        /// Numbered datagrams the server dropped below the highest seq the bot received.
        dropped_in_window: u64,
        /// The server's numbers from the Welcome to the highest the bot received.
        numbered_in_window: u64,
        shared_detected: u64,
        snapshots_applied: u64,
    }

    /// The simulated server: one header counter; before each of the bot's datagrams it hands
    /// `others(t)` numbers to other clients (0: a per-connection counter). `drop(k)` drops the
    /// k-th numbered datagram to the bot (Welcome = 0).
    struct Server {
        seq: u32,
        numbered: u64,
        sent: Vec<(u32, bool)>,
    }

    impl Server {
        fn number(&mut self, others: u32, drop: &mut impl FnMut(u64) -> bool) -> (u32, bool) {
            self.seq = self.seq.wrapping_add(others);
            let seq = self.seq;
            self.seq = self.seq.wrapping_add(1);
            let dropped = self.numbered > 0 && drop(self.numbered);
            self.numbered += 1;
            self.sent.push((seq, dropped));
            (seq, dropped)
        }
    }

    /// The simulated server's manner.
    #[derive(Clone, Copy)]
    struct Setup {
        dialect: Dialect,
        run_for: Duration,
        /// Between two snapshots (one tick each).
        period: Duration,
        answer_pings: bool,
    }

    impl Setup {
        fn at_60_hz(dialect: Dialect, run_for: Duration) -> Self {
            Self {
                dialect,
                run_for,
                period: TICK,
                answer_pings: true,
            }
        }
    }

    fn drive(
        setup: Setup,
        others: impl Fn(Duration) -> u32,
        mut drop: impl FnMut(u64) -> bool,
    ) -> Outcome {
        let Setup {
            dialect,
            run_for,
            period,
            answer_pings,
        } = setup;
        let opts = CafeOptions {
            dialect,
            loss_source: LossSource::Sequence,
            ..CafeOptions::default()
        };
        let mut bot = CafeBot::new(BotParams::with_index(0, 7), opts);
        let t0 = Instant::now();
        let mut rec = Recorder::new();
        let mut total = Recorder::new();
        let mut seconds = Vec::new();
        let mut srv = Server {
            seq: 40_000,
            numbered: 0,
            sent: Vec::new(),
        };
        let mut buf = vec![0u8; MAX_MESSAGE];
        let mut out = vec![0u8; MAX_MESSAGE];
        let mut highest: Option<u32> = None;
        let mut deliver =
            |bot: &mut CafeBot, rec: &mut Recorder, now: Instant, data: &[u8], seq: Option<u32>| {
                if let Some(s) = seq {
                    highest = Some(highest.map_or(s, |h: u32| h.max(s)));
                }
                bot.handle_datagram(now, data, rec);
            };
        bot.start(t0, &mut rec);
        let mut now = t0;
        let mut tick = 0u32;
        let mut next_tick = t0 + STEP;
        let mut next_second = t0 + Duration::from_secs(1);
        while now < t0 + run_for {
            now += STEP;
            let t = now - t0;
            if bot.poll_timeout().is_some_and(|d| d <= now) {
                bot.handle_timeout(now, &mut rec);
            }
            while let Some(tx) = bot.poll_transmit(&mut out) {
                let sent = &out[..tx.len];
                match codec::decode(sent, dialect) {
                    Ok((_, Message::Hello { .. })) if bot.phase() == BotPhase::Connecting => {
                        let (seq, _) = srv.number(others(t), &mut drop);
                        let welcome = Message::Welcome {
                            player_id: 1,
                            tick_rate: 60,
                        };
                        let n = codec::encode(&mut buf, seq, &welcome).expect("fits");
                        let w = buf[..n].to_vec();
                        deliver(&mut bot, &mut rec, now, &w, Some(seq));
                    }
                    Ok((_, Message::Ping { .. })) if !answer_pings => {}
                    Ok((_, Message::Ping { timestamp_ms })) => match dialect {
                        Dialect::Implementation => {
                            let echo = sent.to_vec();
                            deliver(&mut bot, &mut rec, now, &echo, None);
                        }
                        Dialect::Spec => {
                            let (seq, dropped) = srv.number(others(t), &mut drop);
                            let n = codec::encode(&mut buf, seq, &Message::Ping { timestamp_ms })
                                .expect("fits");
                            let pong = buf[..n].to_vec();
                            if !dropped {
                                deliver(&mut bot, &mut rec, now, &pong, Some(seq));
                            }
                        }
                    },
                    _ => {}
                }
            }
            if now >= next_tick && bot.phase() == BotPhase::Connected {
                next_tick += period;
                tick += 1;
                let (seq, dropped) = srv.number(others(t), &mut drop);
                let li = (dialect == Dialect::Implementation).then_some(0);
                let e = SnapshotEncoder::begin(&mut buf, seq, tick, tick % 3 == 0, false, li)
                    .expect("fits");
                let n = e.finish(&GameStats::default()).expect("fits");
                let snap = buf[..n].to_vec();
                if !dropped {
                    deliver(&mut bot, &mut rec, now, &snap, Some(seq));
                }
            }
            if now >= next_second {
                next_second += Duration::from_secs(1);
                let second = rec.take_interval();
                seconds.push(second.loss_down);
                total.merge(&second);
            }
        }
        bot.stop(now, &mut rec);
        seconds.push(rec.loss_down);
        total.merge(&rec);
        let highest = highest.expect("the bot received datagrams");
        let welcome = srv.sent[0].0;
        let in_window = |s: u32| s.wrapping_sub(welcome) <= highest.wrapping_sub(welcome);
        Outcome {
            seconds,
            total: total.loss_down,
            dropped_in_window: srv.sent.iter().filter(|(s, d)| *d && in_window(*s)).count() as u64,
            numbered_in_window: srv.sent.iter().filter(|(s, _)| in_window(*s)).count() as u64,
            shared_detected: total.events.get("shared_sequence_detected"),
            snapshots_applied: total.snapshots_applied,
        }
    }

    /// A shared counter with clients joining one by one: alone for the first second (the seq
    /// advances once a tick, like a per-connection one), then a second client (twice a tick),
    /// then one more every 200 ms up to 20. Whenever within a chunk the second client comes,
    /// no second and no total ever shows a datagram missing, and the bot names the sharing.
    #[test]
    fn shared_counter_with_clients_joining_one_by_one_shows_no_loss() {
        for dialect in [Dialect::Implementation, Dialect::Spec] {
            // The second client at 1000, 1003, ... 1033 ms: every phase of two ticks.
            for j in 0..12u64 {
                let first = Duration::from_millis(1000 + 3 * j);
                let others = move |t: Duration| match t.checked_sub(first) {
                    None => 0,
                    Some(d) => (1 + d.as_millis() / 200).min(19) as u32,
                };
                let setup = Setup::at_60_hz(dialect, Duration::from_millis(6000));
                let o = drive(setup, others, |_| false);
                let what = format!("{dialect:?}, second client at {first:?}");
                for (s, l) in o.seconds.iter().enumerate() {
                    assert_eq!(l.expected, l.received, "{what}: second {s}: {l:?}");
                }
                assert_eq!(o.total.expected, o.total.received, "{what}");
                assert!(o.total.expected >= o.snapshots_applied, "{what}");
                assert!(o.snapshots_applied > 350, "{what}");
                assert_eq!(o.shared_detected, 1, "{what}");
            }
        }
    }

    /// A slow server (10 snapshots a second) that never answers pings, in the spec dialect, so
    /// every ping may be a lost pong: a second client from 9 s on (when all eight pings in
    /// flight are long unanswered) still shows, and no second counts its datagrams as lost.
    #[test]
    fn shared_counter_at_a_low_rate_without_pongs_shows_no_loss() {
        let setup = Setup {
            dialect: Dialect::Spec,
            run_for: Duration::from_secs(14),
            period: Duration::from_millis(100),
            answer_pings: false,
        };
        let others = |t: Duration| u32::from(t >= Duration::from_secs(9));
        let o = drive(setup, others, |_| false);
        for (s, l) in o.seconds.iter().enumerate() {
            assert_eq!(l.expected, l.received, "second {s}: {l:?}");
        }
        assert_eq!(o.shared_detected, 1);
        assert!(o.snapshots_applied > 130, "{}", o.snapshots_applied);
    }

    /// A per-connection counter with every 10th numbered datagram dropped (snapshots, and in
    /// the spec dialect pongs too): the loss is exactly the datagrams dropped up to the last
    /// one received, over every number from the Welcome on, and never taken for sharing.
    #[test]
    fn per_connection_counter_counts_exactly_what_was_dropped() {
        for dialect in [Dialect::Implementation, Dialect::Spec] {
            let setup = Setup::at_60_hz(dialect, Duration::from_millis(5000));
            let o = drive(setup, |_| 0, |k| k % 10 == 0);
            let what = format!("{dialect:?}");
            assert!(o.dropped_in_window > 25, "{what}: {}", o.dropped_in_window);
            assert_eq!(o.total.expected, o.numbered_in_window, "{what}");
            assert_eq!(
                o.total.expected - o.total.received,
                o.dropped_in_window,
                "{what}"
            );
            assert_eq!(o.shared_detected, 0, "{what}");
            // Each second's figure is the datagrams of about that second: none is empty.
            for (s, l) in o.seconds.iter().enumerate().take(4) {
                assert!(l.expected >= 30, "{what}: second {s}: {l:?}");
            }
        }
    }

    /// What every input tick reads (the grid, the queue, the timers, the pattern and the
    /// parameters' pattern) sits in the first five cache lines of the bot, not spread over
    /// its 1.5 KB: one miss per line per bot per tick is the swarm's cost at scale.
    #[test]
    fn the_fields_a_tick_reads_come_first() {
        use std::mem::offset_of;
        let tick_end = offset_of!(CafeBot, params)
            + offset_of!(BotParams, pattern)
            + std::mem::size_of::<crate::protocol::prelude::InputPattern>();
        assert!(tick_end <= 5 * 64, "{tick_end} bytes");
    }
}
