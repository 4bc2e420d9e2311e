//! RTT from pings that carry nothing to match them by (City's and R-Type's are empty).
//!
//! With nothing in the Pong to say which Ping it answers, a sample is only right when one
//! Ping is in flight: the next Pong answers it. A Ping still unanswered after the timeout is
//! given up (`ping_timeout`), and no new Ping goes out for one more interval, so a Pong that
//! arrives meanwhile is recognised as late (`pong_late`) and never paired with a newer Ping
//! (which would record too small an RTT). A Ping due while one is in flight is skipped
//! (`ping_skipped_in_flight`).

use std::time::{Duration, Instant};

use super::timers::Periodic;
use crate::metrics::Recorder;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    InFlight(Instant),
    /// The ping in flight timed out; a Pong now is late.
    TimedOut,
}

/// One Ping in flight at a time, on a periodic schedule.
#[derive(Debug, Clone)]
pub struct OneInFlight {
    timer: Periodic,
    state: State,
}

impl OneInFlight {
    /// One probe every `interval`, none in flight yet.
    pub fn new(interval: Duration) -> Self {
        Self {
            timer: Periodic::new(interval),
            state: State::Idle,
        }
    }

    /// How long a Ping may stay unanswered: twice the interval, at least a second.
    pub fn timeout(&self) -> Duration {
        (self.timer.period() * 2).max(Duration::from_secs(1))
    }

    /// Start the schedule (the first Ping is due at `at`).
    pub fn start_at(&mut self, at: Instant) {
        self.timer.start_at(at);
    }

    /// No more probes (the session ended).
    pub fn stop(&mut self) {
        self.timer.stop();
        self.state = State::Idle;
    }

    /// When [`OneInFlight::poll`] next has something to do.
    pub fn next(&self) -> Option<Instant> {
        match self.state {
            State::InFlight(sent) => {
                let t = sent + self.timeout();
                Some(self.timer.next().map_or(t, |n| n.min(t)))
            }
            _ => self.timer.next(),
        }
    }

    /// Called on every wake-up: true when a Ping should be sent now.
    pub fn poll(&mut self, now: Instant, rec: &mut Recorder) -> bool {
        if let State::InFlight(sent) = self.state {
            if now >= sent + self.timeout() {
                rec.event("ping_timeout");
                self.state = State::TimedOut;
                // Leave one interval for the late Pong to be recognised as late.
                self.timer.not_before(now + self.timer.period());
            }
        }
        if !self.timer.fire(now) {
            return false;
        }
        match self.state {
            State::Idle | State::TimedOut => {
                self.state = State::InFlight(now);
                true
            }
            State::InFlight(_) => {
                rec.event("ping_skipped_in_flight");
                false
            }
        }
    }

    /// A Pong arrived: an RTT sample when it answers the Ping in flight.
    pub fn on_pong(&mut self, now: Instant, rec: &mut Recorder) {
        match self.state {
            State::InFlight(sent) => {
                rec.record_rtt(now.saturating_duration_since(sent).as_micros() as u64);
                self.state = State::Idle;
            }
            State::TimedOut => {
                rec.event("pong_late");
                self.state = State::Idle;
            }
            State::Idle => rec.event("pong_unsolicited"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Drive `p` at every millisecond from `from` to `to`, counting pings sent.
    fn run(p: &mut OneInFlight, rec: &mut Recorder, from: Instant, to: Instant) -> Vec<Instant> {
        let mut sent = Vec::new();
        let mut t = from;
        while t <= to {
            if p.poll(t, rec) {
                sent.push(t);
            }
            t += MS;
        }
        sent
    }

    #[test]
    fn a_late_pong_is_never_paired_with_a_newer_ping() {
        let t0 = Instant::now();
        let mut rec = Recorder::new();
        let mut p = OneInFlight::new(200 * MS); // timeout 1 s
        p.start_at(t0);
        // The first ping goes out at t0 and its pong takes 1.1 s: past the timeout.
        let sent = run(&mut p, &mut rec, t0, t0 + 1100 * MS);
        assert_eq!(
            sent,
            vec![t0],
            "no second ping while the first is in flight"
        );
        assert_eq!(rec.events.get("ping_timeout"), 1);
        assert_eq!(rec.events.get("ping_skipped_in_flight"), 4);
        p.on_pong(t0 + 1100 * MS, &mut rec);
        assert_eq!(rec.events.get("pong_late"), 1);
        assert_eq!(rec.rtt_us.len(), 0, "the late pong is not an RTT sample");
        // The next ping waits one interval after the timeout, then samples normally.
        let sent = run(&mut p, &mut rec, t0 + 1101 * MS, t0 + 1300 * MS);
        assert_eq!(sent, vec![t0 + 1200 * MS]);
        p.on_pong(t0 + 1230 * MS, &mut rec);
        assert_eq!(rec.rtt_us.len(), 1);
        assert!(rec.rtt_us.equivalent(rec.rtt_us.max(), 30_000));
    }

    #[test]
    fn an_answered_ping_samples_its_rtt_and_a_stray_pong_is_counted() {
        let t0 = Instant::now();
        let mut rec = Recorder::new();
        let mut p = OneInFlight::new(100 * MS);
        p.start_at(t0);
        assert!(p.poll(t0, &mut rec));
        p.on_pong(t0 + 7 * MS, &mut rec);
        p.on_pong(t0 + 8 * MS, &mut rec);
        assert_eq!(rec.rtt_us.len(), 1);
        assert!(rec.rtt_us.equivalent(rec.rtt_us.max(), 7_000));
        assert_eq!(rec.events.get("pong_unsolicited"), 1);
        assert_eq!(p.next(), Some(t0 + 100 * MS));
    }
}
