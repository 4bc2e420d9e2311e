//! A bot's fixed input schedule, shared by every protocol's bot.
//!
//! Slot k is due at `origin + k × period`. Sending against intended times rather than "a
//! period after the last send" is the coordinated-omission guard: when the generator falls
//! behind, the lateness is measured (and whole missed periods are counted as skipped) instead
//! of silently stretching the schedule.
//!
//! A bot whose parameters carry an `input_epoch` counts its grid from there instead of from
//! where its play starts: its slots are `input_epoch + phase_offset + k × period` for every
//! `k`, so all bots of one phase share their send instants whenever each joined, and the
//! worker's timer steps (whose multiples the plan draws the phases from) serve them at their
//! own slots.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::metrics::Recorder;
use crate::protocol::{BotParams, Keys, PatternState};

/// The fixed grid a bot's inputs are due on (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct InputGrid {
    period: Option<Duration>,
    origin: Option<Instant>,
    slot: u64,
}

impl InputGrid {
    /// A grid with this period (`None`: no inputs on a schedule).
    pub fn new(period: Option<Duration>) -> Self {
        Self {
            period,
            origin: None,
            slot: 0,
        }
    }

    /// Begin the schedule: slot 0 is due at `origin`.
    pub fn start(&mut self, origin: Instant) {
        self.origin = Some(origin);
        self.slot = 0;
    }

    /// Begin the schedule of a bot with these parameters whose play starts at `now`: slot 0
    /// at `now + params.phase_offset`, or, when the parameters carry an input epoch, at the
    /// first of `input_epoch + phase_offset + k × period` at or after `now` (see the module
    /// docs).
    pub fn begin(&mut self, now: Instant, params: &BotParams) {
        let aligned = params
            .input_epoch
            .and_then(|e| e.checked_add(params.phase_offset))
            .zip(self.period)
            .and_then(|(anchor, period)| first_slot_from(anchor, period, now));
        self.start(aligned.unwrap_or(now + params.phase_offset));
    }

    /// When the next slot is due, if the grid runs.
    ///
    /// In whole nanoseconds: every bot asks this at least twice per input, and
    /// `Duration::mul_f64` (a float multiply and a `from_secs_f64`) was about a tenth of a
    /// worker's user time per datagram. Exact where the float product rounded; `None` past
    /// the range of `Instant` (a grid running for centuries).
    pub fn next_due(&self) -> Option<Instant> {
        let (origin, period) = self.origin.zip(self.period)?;
        let period_ns = u64::try_from(period.as_nanos()).ok()?;
        origin.checked_add(Duration::from_nanos(period_ns.checked_mul(self.slot)?))
    }

    /// If a slot is due at `now`, take it: whole periods missed before it are skipped (and
    /// counted in `rec.inputs_skipped`), and the intended time of the slot taken is returned,
    /// for the caller to record `now - intended` as its lateness.
    pub fn take_due(&mut self, now: Instant, rec: &mut Recorder) -> Option<Instant> {
        let period = self.period?;
        let mut due = self.next_due()?;
        if due > now {
            return None;
        }
        let late = now.saturating_duration_since(due);
        if late >= period {
            let skipped = (late.as_nanos() / period.as_nanos().max(1)) as u64;
            self.slot += skipped;
            rec.inputs_skipped += skipped;
            due = self.next_due()?;
        }
        self.slot += 1;
        Some(due)
    }

    /// Move past `now` without taking or counting anything (a bot with nothing to steer).
    pub fn skip_past(&mut self, now: Instant) {
        let (Some(due), Some(period)) = (self.next_due(), self.period) else {
            return;
        };
        if due <= now {
            let late = now.saturating_duration_since(due);
            self.slot += (late.as_nanos() / period.as_nanos().max(1)) as u64 + 1;
        }
    }
}

/// The first of `anchor + k × period` (k ≥ 0) at or after `now`; `None` past the range of
/// `Instant`.
fn first_slot_from(anchor: Instant, period: Duration, now: Instant) -> Option<Instant> {
    if now <= anchor {
        return Some(anchor);
    }
    let since = u64::try_from((now - anchor).as_nanos()).ok()?;
    let period_ns = u64::try_from(period.as_nanos()).ok()?.max(1);
    let k = since.div_ceil(period_ns);
    anchor.checked_add(Duration::from_nanos(k.checked_mul(period_ns)?))
}

/// A bot's key input, whole: the grid its slots are due on, the scenario's key pattern, and
/// `input_mode: on_change`. Every bot that sends held keys takes its slots here, so each
/// honours the scenario's input settings the same way and records its lateness alike; a bot
/// keeps only what its protocol makes of the keys.
#[derive(Debug, Clone)]
pub struct KeyInputs {
    grid: InputGrid,
    state: PatternState,
    last: Option<u8>,
}

impl KeyInputs {
    /// The inputs of a bot with these parameters (its input period; the pattern and the
    /// input mode are read from the parameters at each slot, which the bot keeps anyway).
    pub fn new(params: &BotParams) -> Self {
        Self {
            grid: InputGrid::new(params.input_period()),
            state: PatternState::new(),
            last: None,
        }
    }

    /// Begin the schedule: the first slot is due at `origin` (play's start plus the bot's
    /// phase offset).
    pub fn start(&mut self, origin: Instant) {
        self.grid.start(origin);
    }

    /// Begin the schedule of a bot whose play starts at `now` ([`InputGrid::begin`]: on the
    /// input epoch's grid when the parameters have one).
    pub fn begin(&mut self, now: Instant, params: &BotParams) {
        self.grid.begin(now, params);
    }

    /// When the next slot is due, if the grid runs (for `Bot::poll_timeout`).
    pub fn next_due(&self) -> Option<Instant> {
        self.grid.next_due()
    }

    /// Move past `now` without taking or counting anything (a bot with nothing to steer).
    pub fn skip_past(&mut self, now: Instant) {
        self.grid.skip_past(now);
    }

    /// Take the slot due at `now` without sending it (a bot that cannot send just now, such
    /// as one between zones): whole periods missed are counted as skipped, as ever; `true`
    /// when a slot was due.
    pub fn pass(&mut self, now: Instant, rec: &mut Recorder) -> bool {
        self.grid.take_due(now, rec).is_some()
    }

    /// The keys to send for the slot due at `now`: `params.pattern` sampled at `played` (time
    /// since play began). `None` when no slot is due, or with `params.input_on_change` when
    /// the keys are the ones last sent. The slot's lateness (`now` against its intended time) is recorded
    /// when keys are returned, so it describes the inputs that go out; counting them in
    /// `inputs_sent` is left to the bot, which may still decide not to send.
    pub fn take(
        &mut self,
        now: Instant,
        played: Duration,
        params: &BotParams,
        rng: &mut (impl Rng + ?Sized),
        rec: &mut Recorder,
    ) -> Option<Keys> {
        let due = self.grid.take_due(now, rec)?;
        let keys = self.state.sample(&params.pattern, played, rng);
        if params.input_on_change && self.last == Some(keys.0) {
            return None;
        }
        self.last = Some(keys.0);
        rec.record_lateness(now.saturating_duration_since(due).as_micros() as u64);
        Some(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn slots_follow_the_grid_not_the_sends() {
        let t0 = Instant::now();
        let mut g = InputGrid::new(Some(ms(10)));
        let mut rec = Recorder::new();
        g.start(t0);
        assert_eq!(g.take_due(t0, &mut rec), Some(t0));
        assert_eq!(g.take_due(t0 + ms(5), &mut rec), None);
        // Sent 3 ms late: intended time is still t0 + 10 ms, and the next slot t0 + 20 ms.
        assert_eq!(g.take_due(t0 + ms(13), &mut rec), Some(t0 + ms(10)));
        assert_eq!(g.next_due(), Some(t0 + ms(20)));
        assert_eq!(rec.inputs_skipped, 0);
    }

    #[test]
    fn whole_missed_periods_are_skipped_and_counted() {
        let t0 = Instant::now();
        let mut g = InputGrid::new(Some(ms(10)));
        let mut rec = Recorder::new();
        g.start(t0);
        // 35 ms late for slot 0: slots 0, 1, 2 missed, slot 3 (t0 + 30) taken 5 ms late.
        assert_eq!(g.take_due(t0 + ms(35), &mut rec), Some(t0 + ms(30)));
        assert_eq!(rec.inputs_skipped, 3);
        assert_eq!(g.next_due(), Some(t0 + ms(40)));
    }

    /// A 60 Hz period is not a whole number of microseconds: slot k is due exactly k
    /// periods after the origin, to the nanosecond, however long the grid runs.
    #[test]
    fn slots_are_exact_multiples_of_the_period() {
        let t0 = Instant::now();
        let period = Duration::from_nanos(16_666_667);
        let mut g = InputGrid::new(Some(period));
        let mut rec = Recorder::new();
        g.start(t0);
        // One hour of slots: 216,000 of them, taken each on time.
        for k in 0..216_000u64 {
            let due = t0 + Duration::from_nanos(16_666_667 * k);
            assert_eq!(g.next_due(), Some(due), "slot {k}");
            assert_eq!(g.take_due(due, &mut rec), Some(due), "slot {k}");
        }
        assert_eq!(
            g.next_due(),
            Some(t0 + Duration::from_nanos(3_600_000_072_000))
        );
        assert_eq!(rec.inputs_skipped, 0);
    }

    #[test]
    fn skip_past_counts_nothing() {
        let t0 = Instant::now();
        let mut g = InputGrid::new(Some(ms(10)));
        g.start(t0);
        g.skip_past(t0 + ms(25));
        assert_eq!(g.next_due(), Some(t0 + ms(30)));
        assert_eq!(InputGrid::new(None).next_due(), None);
    }

    /// Bots counted from one epoch share their slots whenever each starts: their next slot
    /// is the epoch's plus a whole number of periods, never before the bot's now, and a bot
    /// without an epoch starts where it is told.
    #[test]
    fn a_grid_counted_from_an_epoch_puts_every_bot_of_a_phase_on_the_same_instants() {
        let epoch = Instant::now();
        let period = ms(10);
        let mut p = BotParams::with_index(0, 1);
        p.phase_offset = ms(3);
        p.input_epoch = Some(epoch);
        let mut rec = Recorder::new();
        // Play starts at epoch + 0, + 4 ms, + 57 ms, + 63 ms.
        for (start, first) in [(0, 3), (4, 13), (57, 63), (63, 63)] {
            let mut g = InputGrid::new(Some(period));
            g.begin(epoch + ms(start), &p);
            assert_eq!(g.next_due(), Some(epoch + ms(first)), "start {start}");
            assert_eq!(
                g.take_due(epoch + ms(first), &mut rec),
                Some(epoch + ms(first))
            );
            assert_eq!(g.next_due(), Some(epoch + ms(first + 10)));
        }
        // Started before the epoch: its first slot is the anchor.
        let mut late = BotParams::with_index(1, 1);
        late.input_epoch = Some(epoch + ms(100));
        let mut g = InputGrid::new(Some(period));
        g.begin(epoch, &late);
        assert_eq!(g.next_due(), Some(epoch + ms(100)));
        // No epoch: play's start plus the phase.
        let mut free = BotParams::with_index(2, 1);
        free.phase_offset = ms(3);
        let mut g = InputGrid::new(Some(period));
        g.begin(epoch + ms(7), &free);
        assert_eq!(g.next_due(), Some(epoch + ms(10)));
        assert_eq!(rec.inputs_skipped, 0);
    }

    fn params(on_change: bool, pattern: crate::protocol::InputPattern) -> BotParams {
        let mut p = BotParams::with_index(0, 1);
        p.input_rate_hz = 100.0;
        p.input_on_change = on_change;
        p.pattern = pattern;
        p
    }

    /// Keys held for 30 ms, then others: on change, only the first slot of each is sent;
    /// at the rate, every slot.
    #[test]
    fn key_inputs_send_every_slot_or_only_changes() {
        let script = crate::protocol::InputPattern::Scripted {
            steps: vec![(Keys(Keys::UP), ms(30)), (Keys(Keys::DOWN), ms(30))],
        };
        let t0 = Instant::now();
        let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(1);
        for (on_change, want) in [(true, 2), (false, 6)] {
            let p = params(on_change, script.clone());
            let mut k = KeyInputs::new(&p);
            let mut rec = Recorder::new();
            k.start(t0);
            let mut sent = Vec::new();
            for slot in 0..6u64 {
                let now = t0 + ms(10 * slot);
                if let Some(keys) = k.take(now, now - t0, &p, &mut rng, &mut rec) {
                    sent.push(keys.0);
                }
            }
            assert_eq!(sent.len(), want, "on_change {on_change}: {sent:?}");
            assert_eq!(sent[0], Keys::UP);
            assert_eq!(
                rec.send_lateness_us.len(),
                want as u64,
                "lateness only for what is sent"
            );
        }
    }

    /// A slot passed (not sent) still moves the grid and counts whole missed periods.
    #[test]
    fn a_passed_slot_is_taken_but_not_sent() {
        let t0 = Instant::now();
        let mut k = KeyInputs::new(&params(false, crate::protocol::InputPattern::Idle));
        let mut rec = Recorder::new();
        k.start(t0);
        assert!(k.pass(t0 + ms(25), &mut rec));
        assert_eq!(rec.inputs_skipped, 2);
        assert_eq!(k.next_due(), Some(t0 + ms(30)));
        assert!(!k.pass(t0 + ms(29), &mut rec));
        assert_eq!(rec.send_lateness_us.len(), 0);
    }
}
