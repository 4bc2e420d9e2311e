//! Snapshots that never came because the stream stopped: the loss a sequence window cannot see.
//!
//! Every bot counts downstream loss from the gaps between snapshots that did arrive (a
//! sequence or tick window). A server that dies or goes silent leaves no gap after its last
//! snapshot, so a run against a server killed at 3 s of 10 would report 0 % loss. The bot
//! therefore also keeps the times of its snapshot arrivals and, when its session ends (the run
//! stops, or the server's silence ends the session), counts the snapshots its stream would
//! have carried since the last arrival as expected and not received.
//!
//! How many: the stream's interval is the mean over the bot's own session,
//! `(last - first) / (arrivals - 1)`. Under loss that mean is longer than the server's real
//! interval, so the estimate errs low, never high. The first [`TAIL_SLACK`] plus one interval
//! after the last arrival are not counted, so a snapshot in flight when the run stops, or a
//! worker stalled a moment before it read its socket (seen at 60-70 ms on a loaded machine),
//! is never called lost; a dead server's tail is undercounted by about that much. A bot that received fewer than [`MIN_ARRIVALS`] snapshots
//! has no rate to go by and counts no tail (its silence is still reported as
//! `bots_silent_at_end` / `bots_lost`).

use std::time::{Duration, Instant};

use crate::metrics::Recorder;

/// Arrivals needed before the stream's interval is trusted.
pub const MIN_ARRIVALS: u64 = 8;

/// Time after the last arrival (beyond one interval) never counted as a lost tail.
pub const TAIL_SLACK: Duration = Duration::from_millis(250);

/// The times of one bot's snapshot arrivals, for inter-arrival times and the end-of-stream
/// tail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotArrivals {
    first: Option<Instant>,
    last: Option<Instant>,
    count: u64,
}

impl SnapshotArrivals {
    /// No snapshot seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A snapshot arrived (one that counts for loss): records the time since the previous one
    /// into `snapshot_interarrival_us`.
    pub fn on_arrival(&mut self, now: Instant, rec: &mut Recorder) {
        if let Some(prev) = self.last {
            rec.record_snapshot_interarrival(
                now.saturating_duration_since(prev).as_micros() as u64,
            );
        }
        self.mark(now);
    }

    /// A snapshot arrived, for a bot that records inter-arrival times its own way.
    pub fn mark(&mut self, now: Instant) {
        self.first.get_or_insert(now);
        self.last = Some(now);
        self.count += 1;
    }

    /// When the last snapshot arrived.
    pub fn last(&self) -> Option<Instant> {
        self.last
    }

    /// The stream's mean interval so far, once [`MIN_ARRIVALS`] snapshots arrived.
    pub fn interval(&self) -> Option<Duration> {
        let (first, last) = (self.first?, self.last?);
        if self.count < MIN_ARRIVALS {
            return None;
        }
        let span = last.saturating_duration_since(first);
        let n = u32::try_from(self.count - 1).unwrap_or(u32::MAX);
        let interval = span / n;
        (!interval.is_zero()).then_some(interval)
    }

    /// Snapshots the stream would have carried between the last arrival and `end`.
    pub fn tail_expected(&self, end: Instant) -> u64 {
        let (Some(last), Some(interval)) = (self.last, self.interval()) else {
            return 0;
        };
        let gap = end.saturating_duration_since(last);
        let Some(counted) = gap.checked_sub(interval + TAIL_SLACK) else {
            return 0;
        };
        (counted.as_nanos() / interval.as_nanos()) as u64
    }

    /// The session ended at `end`: count its missing tail as expected and not received
    /// (and as `snapshots_missed_at_end`), then forget the stream, so a later session
    /// (a reconnection, a zone handoff) starts its own.
    pub fn finish(&mut self, end: Instant, rec: &mut Recorder) {
        let missed = self.tail_expected(end);
        if missed > 0 {
            rec.loss_down.add(missed, 0);
            rec.events.add("snapshots_missed_at_end", missed);
        }
        self.reset();
    }

    /// Forget the stream without counting a tail: the bot dropped the session on purpose (a
    /// reconnection, a zone handoff), so what the old stream would have carried is not lost.
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_micros(16_667);

    fn stream(n: u64) -> (SnapshotArrivals, Instant, Recorder) {
        let mut rec = Recorder::new();
        let t0 = Instant::now();
        let mut a = SnapshotArrivals::new();
        for i in 0..n {
            a.on_arrival(t0 + TICK * i as u32, &mut rec);
        }
        (a, t0 + TICK * (n - 1) as u32, rec)
    }

    #[test]
    fn a_stream_that_stops_is_counted_from_its_own_rate() {
        // 60 Hz for 3 s, then nothing for 7 s: 419 snapshots were due (16.667 ms × 419 =
        // 6,983 ms); the first interval plus 250 ms of slack are not counted: (7,000 - 16.667 -
        // 250) / 16.667 = 404.00, so 403 or 404 as the microseconds round.
        let (mut a, last, mut rec) = stream(180);
        assert_eq!(a.tail_expected(last + Duration::from_secs(7)), 403);
        a.finish(last + Duration::from_secs(7), &mut rec);
        assert_eq!(rec.loss_down.expected, 403);
        assert_eq!(rec.loss_down.received, 0);
        assert_eq!(rec.events.get("snapshots_missed_at_end"), 403);
        // The stream is forgotten: a second finish adds nothing.
        a.finish(last + Duration::from_secs(8), &mut rec);
        assert_eq!(rec.loss_down.expected, 403);
    }

    #[test]
    fn a_snapshot_in_flight_at_the_stop_is_not_lost() {
        let (a, last, _) = stream(600);
        assert_eq!(a.tail_expected(last + TICK + Duration::from_millis(249)), 0);
        assert_eq!(a.tail_expected(last), 0);
    }

    #[test]
    fn too_few_arrivals_give_no_rate() {
        let (a, last, _) = stream(MIN_ARRIVALS - 1);
        assert_eq!(a.interval(), None);
        assert_eq!(a.tail_expected(last + Duration::from_secs(10)), 0);
        let (a, _, _) = stream(MIN_ARRIVALS);
        assert!(a.interval().is_some());
    }

    #[test]
    fn interarrival_times_are_recorded() {
        let (_, _, rec) = stream(10);
        assert_eq!(rec.snapshot_interarrival_us.len(), 9);
        assert_eq!(
            rec.snapshot_interarrival_us.value_at_quantile(0.5),
            rec.snapshot_interarrival_us.highest_equivalent(16_667)
        );
    }

    #[test]
    fn loss_inside_the_stream_makes_the_tail_err_low() {
        // Every other snapshot lost: the mean interval doubles and the tail halves, never more:
        // (7,000 - 33.3 - 250) / 33.3 = 201.
        let mut rec = Recorder::new();
        let t0 = Instant::now();
        let mut a = SnapshotArrivals::new();
        for i in (0..200u32).step_by(2) {
            a.on_arrival(t0 + TICK * i, &mut rec);
        }
        let last = t0 + TICK * 198;
        let truth = 420;
        let counted = a.tail_expected(last + Duration::from_secs(7));
        assert!(counted < truth, "{counted}");
        assert_eq!(counted, 201);
    }
}
