//! The cafe bot: a sans-IO client state machine.
//!
//! Life: Hello (resent every `handshake_retry` until Welcome or `handshake_timeout`), then
//! input on a fixed grid, pings for RTT, heartbeat echoes, snapshots applied to an entity
//! table (a snapshot older than one already applied is counted and skipped), Disconnect on
//! stop. Every server datagram runs through a [`SeqWindow`] for downstream loss.

use std::collections::VecDeque;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::codec::{self, Dialect, EntityRecord, Message, Snapshot};
use super::{CafeOptions, LossSource};
use crate::metrics::Recorder;
use crate::protocol::idmap::{id_map_with_capacity, IdMap};
use crate::protocol::input_grid::InputGrid;
use crate::protocol::seqwindow::{SeqOutcome, SeqWindow, TickSeq};
use crate::protocol::timers::{earliest, Handshake, Periodic, Silence};
use crate::protocol::{Bot, BotParams, BotPhase, PatternState, Transmit};

/// Pings in flight at once; a new ping evicts the oldest (counted as `ping_lost`).
const PINGS_IN_FLIGHT: usize = 8;

#[derive(Debug, Clone, Copy)]
enum Out {
    Hello,
    Input { mask: u16, time_ms: u32 },
    Ping { token: u32 },
    Disconnect,
}

#[derive(Debug, Clone, Copy)]
struct Tracked {
    record: EntityRecord,
    /// Full-snapshot generation that last carried this entity.
    generation: u32,
}

pub struct CafeBot {
    params: BotParams,
    opts: CafeOptions,
    name: [u8; codec::NAME_LEN],
    rng: ChaCha8Rng,
    pattern: PatternState,
    phase: BotPhase,
    out: VecDeque<Out>,
    seq_out: u32,

    started_at: Option<Instant>,
    handshake: Handshake,

    player_id: u16,
    tick_rate: u16,
    connected_at: Option<Instant>,
    silence: Silence,

    down: SeqWindow,
    ticks: SeqWindow,
    /// Snapshot ticks to a gap-free sequence (wrap-safe), for `loss_source: tick`.
    tick_seq: TickSeq,

    grid: InputGrid,
    last_keys: Option<u16>,

    ping_timer: Periodic,
    /// Tokens `first_token..next_token` (wrapping) are the bot's own.
    first_token: u32,
    next_token: u32,
    pings: [Option<(u32, Instant)>; PINGS_IN_FLIGHT],
    /// The last heartbeat token echoed, to recognise a server answering the echo.
    echoed_heartbeat: Option<u32>,

    entities: IdMap<u16, Tracked>,
    full_generation: u32,
    last_snapshot_at: Option<Instant>,
    /// Tick of the newest snapshot applied.
    last_tick: Option<u32>,
    /// Since when the entity table may be stale (a datagram was lost after the last full).
    stale_since: Option<Instant>,
}

impl CafeBot {
    pub fn new(params: BotParams, opts: CafeOptions) -> Self {
        let tick_seq = TickSeq::new(opts.snapshot_tick_step);
        let grid = InputGrid::new(params.input_period());
        let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
        let next_token = rng.random();
        let name = codec::make_name(&format!("bot-{}", params.index));
        let silence = Silence::new(params.server_silence_timeout);
        let ping_timer = Periodic::new(params.ping_interval);
        Self {
            params,
            opts,
            name,
            rng,
            pattern: PatternState::new(),
            phase: BotPhase::Idle,
            out: VecDeque::with_capacity(16),
            seq_out: 0,
            started_at: None,
            handshake: Handshake::new(),
            player_id: 0,
            tick_rate: 0,
            connected_at: None,
            silence,
            down: SeqWindow::new(),
            ticks: SeqWindow::new(),
            tick_seq,
            grid,
            last_keys: None,
            ping_timer,
            first_token: next_token,
            next_token,
            pings: [None; PINGS_IN_FLIGHT],
            echoed_heartbeat: None,
            entities: id_map_with_capacity(64),
            full_generation: 0,
            last_snapshot_at: None,
            last_tick: None,
            stale_since: None,
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
        self.connected_at = Some(now);
        self.silence.arm(now);
        self.handshake.end();
        if let Some(s) = self.started_at {
            rec.record_handshake(now.saturating_duration_since(s).as_micros() as u64);
        }
        let phase = self.params.phase_offset;
        self.grid.start(now + phase);
        // Spread pings the same way inputs are spread.
        self.ping_timer.start_at(now + phase);
    }

    fn on_ping(&mut self, now: Instant, token: u32, rec: &mut Recorder) {
        let issued = self.issued(token);
        let own = self
            .pings
            .iter_mut()
            .find(|p| matches!(p, Some((t, _)) if *t == token));
        match own {
            Some(slot) => {
                if let Some((_, sent)) = slot.take() {
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
                self.echoed_heartbeat = Some(token);
                self.out.push_back(Out::Ping { token });
            }
        }
    }

    /// Whether this bot issued `token` as a ping.
    fn issued(&self, token: u32) -> bool {
        token.wrapping_sub(self.first_token) < self.next_token.wrapping_sub(self.first_token)
    }

    fn on_snapshot(&mut self, now: Instant, s: &Snapshot<'_>, rec: &mut Recorder) {
        if self.phase != BotPhase::Connected {
            rec.event("snapshot_outside_session");
            return;
        }
        if self.opts.loss_source == LossSource::Tick {
            let outcome = self.ticks.on_seq(self.tick_seq.seq(s.tick));
            let (e, r) = outcome.deltas();
            rec.loss_down.add(e, r);
            self.note_gap(now, outcome);
            if matches!(outcome, SeqOutcome::Duplicate | SeqOutcome::TooOld) {
                rec.event("snapshot_duplicate_or_old");
                return;
            }
        }
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
        if let Some(prev) = self.last_snapshot_at {
            rec.snapshot_interarrival_us
                .saturating_record(now.saturating_duration_since(prev).as_micros().max(1) as u64);
        }
        self.last_snapshot_at = Some(now);
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
    }

    /// A gap in what the server sent may have been a delta: the table is stale until the next
    /// full snapshot.
    fn note_gap(&mut self, now: Instant, outcome: SeqOutcome) {
        if matches!(outcome, SeqOutcome::Advanced { gap } if gap > 0) && self.stale_since.is_none()
        {
            self.stale_since = Some(now);
        }
    }

    fn send_inputs_due(&mut self, now: Instant, rec: &mut Recorder) {
        let Some(due) = self.grid.take_due(now, rec) else {
            return;
        };
        let elapsed = now.saturating_duration_since(self.connected_at.unwrap_or(now));
        let keys = self
            .pattern
            .sample(&self.params.pattern, elapsed, &mut self.rng);
        let mask = u16::from(keys.0);
        let changed = self.last_keys != Some(mask);
        if !self.params.input_on_change || changed {
            rec.record_lateness(now.saturating_duration_since(due).as_micros() as u64);
            let time_ms = self.since_start_ms(now);
            self.out.push_back(Out::Input { mask, time_ms });
            rec.inputs_sent += 1;
            self.last_keys = Some(mask);
        }
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
                self.pings
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, p)| p.map(|(_, t)| t))
                    .map(|(i, _)| i)
                    .unwrap_or(0)
            }
        };
        self.pings[idx] = Some((token, now));
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
        rec.datagram_down(data.len());
        if matches!(
            self.phase,
            BotPhase::Idle | BotPhase::Failed | BotPhase::Closed
        ) {
            rec.event("datagram_outside_session");
            return;
        }
        let (seq, msg) = match codec::decode(data, self.dialect()) {
            Ok(m) => m,
            // NOTES.md: unknown message types are counted and ignored (a newer server), not
            // malformed.
            Err(e) if (e.message, e.reason) == ("header", "unknown_type") => {
                self.silence.heard(now);
                rec.event("unknown_message_type");
                return;
            }
            Err(e) => {
                rec.decode_error(e.message, e.reason);
                return;
            }
        };
        self.silence.heard(now);
        let counts_for_loss =
            self.phase == BotPhase::Connected || matches!(msg, Message::Welcome { .. });
        if self.opts.loss_source == LossSource::Sequence && counts_for_loss {
            let outcome = self.down.on_seq(seq);
            let (e, r) = outcome.deltas();
            rec.loss_down.add(e, r);
            self.note_gap(now, outcome);
            match outcome {
                SeqOutcome::Duplicate => {
                    rec.event("duplicate_datagram");
                    return;
                }
                SeqOutcome::TooOld => {
                    rec.event("too_old_datagram");
                    return;
                }
                SeqOutcome::Reordered => rec.event("reordered_datagram"),
                SeqOutcome::Reset => rec.event("seq_reset"),
                SeqOutcome::Advanced { .. } => {}
            }
        }
        match msg {
            Message::Welcome {
                player_id,
                tick_rate,
            } => self.on_welcome(now, player_id, tick_rate, rec),
            Message::Snapshot(s) => self.on_snapshot(now, &s, rec),
            Message::Ping { timestamp_ms } => self.on_ping(now, timestamp_ms, rec),
            Message::Disconnect => {
                if self.phase == BotPhase::Connecting {
                    self.phase = BotPhase::Failed;
                    rec.connect_failures.add("refused", 1);
                } else {
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
                    self.out.push_back(Out::Hello);
                }
            }
            BotPhase::Connected => {
                if self.silence.expired(now) {
                    self.phase = BotPhase::Closed;
                    rec.event("server_silence_timeout");
                    self.out.clear();
                    return;
                }
                self.send_inputs_due(now, rec);
                self.send_ping_if_due(now, rec);
            }
            BotPhase::Idle | BotPhase::Failed | BotPhase::Closed => {}
        }
    }

    fn stop(&mut self, _now: Instant, _rec: &mut Recorder) {
        if self.phase == BotPhase::Connected && self.dialect().has_disconnect() {
            self.out.push_back(Out::Disconnect);
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
        let msg = match out {
            Out::Hello => Message::Hello {
                player_name: self.name,
            },
            Out::Input { mask, time_ms } => Message::Input {
                player_id: self.player_id,
                input_mask: mask,
                client_time_ms: time_ms,
            },
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
        match self.phase {
            BotPhase::Connecting => self.handshake.next_deadline(),
            BotPhase::Connected => earliest([
                self.grid.next_due(),
                self.ping_timer.next(),
                self.silence.deadline(),
            ]),
            BotPhase::Idle | BotPhase::Failed | BotPhase::Closed => None,
        }
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
