//! The timers every bot keeps, once: a repeating schedule on a fixed grid ([`Periodic`]), the
//! handshake's resend-until-deadline ([`Handshake`]), the server-silence watchdog
//! ([`Silence`]), and [`earliest`] for `poll_timeout`.
//!
//! What the bots do when a timer fires (which message, which counter) stays in each bot: the
//! protocols differ there (cafe keeps eight pings in flight, R-Type one with a pong timeout,
//! City one that a new ping replaces). What they shared was the arithmetic, and small
//! differences in it (a schedule drifting after a late wake, a deadline forgotten in
//! `poll_timeout`) would skew what a bot measures.

use std::time::{Duration, Instant};

use crate::protocol::BotPhase;

/// The earliest of some deadlines (`None` when none is set): a bot's `poll_timeout`.
pub fn earliest<const N: usize>(deadlines: [Option<Instant>; N]) -> Option<Instant> {
    deadlines.into_iter().flatten().min()
}

/// A bot's `poll_timeout` by its phase: while connecting, the handshake's next deadline;
/// while connected, the earliest of the play deadlines (input grid, pings, watchdog, and
/// whatever else the protocol keeps); before start and after the end, none. One rule for
/// every bot, so none forgets a deadline in one phase or keeps waking in another.
pub fn wake_in_phase<const N: usize>(
    phase: BotPhase,
    handshake: Option<Instant>,
    playing: [Option<Instant>; N],
) -> Option<Instant> {
    match phase {
        BotPhase::Connecting => handshake,
        BotPhase::Connected => earliest(playing),
        BotPhase::Idle | BotPhase::Failed | BotPhase::Closed => None,
    }
}

/// Something due every `period`, on a grid: after a late wake the next time is still one
/// period after the *scheduled* time, so the rate holds; only when a whole period was missed
/// does it restart a period after `now` (no burst of catch-up sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Periodic {
    next: Option<Instant>,
    period: Duration,
}

impl Periodic {
    /// Not scheduled until [`Periodic::start_at`].
    pub fn new(period: Duration) -> Self {
        Self { next: None, period }
    }

    /// First due at `at`, then every period.
    pub fn start_at(&mut self, at: Instant) {
        self.next = Some(at);
    }

    /// Disarm: [`Periodic::next`] is `None` until started again.
    pub fn stop(&mut self) {
        self.next = None;
    }

    /// When the timer next fires, if armed.
    pub fn next(&self) -> Option<Instant> {
        self.next
    }

    /// Its period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Not due before `at` (a quiet time); a later scheduled time is kept.
    pub fn not_before(&mut self, at: Instant) {
        self.next = Some(self.next.map_or(at, |n| n.max(at)));
    }

    /// Whether it is due at `now`; if so, the next time is scheduled.
    pub fn fire(&mut self, now: Instant) -> bool {
        let Some(at) = self.next.filter(|&at| at <= now) else {
            return false;
        };
        let mut next = at + self.period;
        if next <= now {
            next = now + self.period;
        }
        self.next = Some(next);
        true
    }
}

/// A handshake in progress: resend the hello every `retry` until answered, give up at the
/// deadline. Inactive (no deadlines) before [`Handshake::begin`] and after
/// [`Handshake::end`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handshake {
    retry: Periodic,
    deadline: Option<Instant>,
}

impl Default for Handshake {
    fn default() -> Self {
        Self::new()
    }
}

impl Handshake {
    /// Not started.
    pub fn new() -> Self {
        Self {
            retry: Periodic::new(Duration::ZERO),
            deadline: None,
        }
    }

    /// An attempt starts at `now` (the caller sends the first hello): resends every `retry`,
    /// or none with `None` (a reliable transport delivers the hello or drops the session),
    /// and failure `timeout` from now.
    pub fn begin(&mut self, now: Instant, retry: Option<Duration>, timeout: Duration) {
        self.retry = Periodic::new(retry.unwrap_or_default());
        if let Some(r) = retry {
            self.retry.start_at(now + r);
        }
        self.deadline = Some(now + timeout);
    }

    /// Answered, refused or abandoned: no more resends, no deadline.
    pub fn end(&mut self) {
        self.retry.stop();
        self.deadline = None;
    }

    /// Whether the handshake is still being retried.
    pub fn is_active(&self) -> bool {
        self.deadline.is_some()
    }

    /// The deadline has passed.
    pub fn timed_out(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }

    /// A resend is due now (and the next one is scheduled).
    pub fn retry_due(&mut self, now: Instant) -> bool {
        self.retry.fire(now)
    }

    /// The next resend or the deadline, whichever comes first.
    pub fn next_deadline(&self) -> Option<Instant> {
        earliest([self.retry.next(), self.deadline])
    }
}

/// The server-silence watchdog: the session is lost `timeout` after the last datagram heard,
/// or after the time it was armed (the handshake's end) when nothing was heard since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Silence {
    heard: Option<Instant>,
    armed: Option<Instant>,
    timeout: Duration,
}

impl Silence {
    /// Silence longer than `timeout` means the peer is gone.
    pub fn new(timeout: Duration) -> Self {
        Self {
            heard: None,
            armed: None,
            timeout,
        }
    }

    /// Start watching from `now` if nothing was heard yet.
    pub fn arm(&mut self, now: Instant) {
        self.armed = Some(now);
    }

    /// A datagram arrived.
    pub fn heard(&mut self, now: Instant) {
        self.heard = Some(now);
    }

    /// When the peer was last heard from.
    pub fn last_heard(&self) -> Option<Instant> {
        self.heard
    }

    /// When the session counts as lost, if nothing more is heard.
    pub fn deadline(&self) -> Option<Instant> {
        self.heard.or(self.armed).map(|t| t + self.timeout)
    }

    /// Whether the peer has been silent longer than the timeout at `now`.
    pub fn expired(&self, now: Instant) -> bool {
        self.deadline().is_some_and(|d| now >= d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn periodic_keeps_its_grid_and_restarts_after_a_missed_period() {
        let t = Instant::now();
        let mut p = Periodic::new(ms(100));
        assert!(!p.fire(t), "not started");
        p.start_at(t + ms(10));
        assert!(!p.fire(t + ms(9)));
        assert!(p.fire(t + ms(30)), "late by 20 ms");
        assert_eq!(p.next(), Some(t + ms(110)), "still on the grid");
        assert!(p.fire(t + ms(250)), "a whole period missed");
        assert_eq!(p.next(), Some(t + ms(350)), "restarts from now");
        p.not_before(t + ms(300));
        assert_eq!(p.next(), Some(t + ms(350)));
        p.not_before(t + ms(400));
        assert_eq!(p.next(), Some(t + ms(400)));
    }

    #[test]
    fn handshake_resends_until_its_deadline() {
        let t = Instant::now();
        let mut h = Handshake::new();
        assert_eq!(h.next_deadline(), None);
        h.begin(t, Some(ms(500)), ms(1200));
        assert_eq!(h.next_deadline(), Some(t + ms(500)));
        assert!(h.retry_due(t + ms(500)));
        assert!(h.retry_due(t + ms(1000)));
        assert_eq!(h.next_deadline(), Some(t + ms(1200)));
        assert!(!h.timed_out(t + ms(1199)));
        assert!(h.timed_out(t + ms(1200)));
        h.end();
        assert!(!h.is_active());
        assert!(!h.timed_out(t + ms(5000)));
        h.begin(t, None, ms(100));
        assert!(!h.retry_due(t + ms(99)));
        assert_eq!(h.next_deadline(), Some(t + ms(100)));
    }

    #[test]
    fn silence_counts_from_the_last_datagram_or_the_arming() {
        let t = Instant::now();
        let mut s = Silence::new(ms(5000));
        assert_eq!(s.deadline(), None);
        s.arm(t);
        assert_eq!(s.deadline(), Some(t + ms(5000)));
        s.heard(t + ms(100));
        assert!(!s.expired(t + ms(5099)));
        assert!(s.expired(t + ms(5100)));
        assert_eq!(
            earliest([None, s.deadline(), Some(t + ms(1))]),
            Some(t + ms(1))
        );
    }
}
