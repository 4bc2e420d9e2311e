//! A bot's fixed input schedule, shared by every protocol's bot.
//!
//! Slot k is due at `origin + k × period`. Sending against intended times rather than "a
//! period after the last send" is the coordinated-omission guard: when the generator falls
//! behind, the lateness is measured (and whole missed periods are counted as skipped) instead
//! of silently stretching the schedule.

use std::time::{Duration, Instant};

use crate::metrics::Recorder;

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
}
