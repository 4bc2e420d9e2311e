//! The host's clock: milliseconds that the caller's `now` sets and ENet reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// ENet reads 0 as "unset" in a few timestamps, so the host clock starts here rather than at 0.
const CLOCK_START_MS: u64 = 1_000;

/// The host's clock: milliseconds that the caller's `now` sets and ENet reads.
#[derive(Debug)]
pub(super) struct Clock {
    pub(super) epoch: Instant,
    /// The reading at `epoch`: [`CLOCK_START_MS`] plus a random phase, so the 16-bit sent
    /// times in ENet's headers (which the handshake's proof echoes) are not predictable
    /// from the host's age (see "Admission").
    pub(super) start: u64,
    pub(super) ms: Arc<AtomicU64>,
}

impl Clock {
    /// A clock reading `CLOCK_START_MS + phase` at `now`.
    pub(super) fn new(now: Instant, phase: u16) -> Self {
        let start = CLOCK_START_MS + u64::from(phase);
        Self {
            epoch: now,
            start,
            ms: Arc::new(AtomicU64::new(start)),
        }
    }

    /// Never goes backwards, whatever order the caller's instants come in.
    pub(super) fn set(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.epoch).as_millis() as u64 + self.start;
        self.ms.fetch_max(ms, Ordering::Relaxed);
    }

    pub(super) fn reader(&self) -> Box<dyn Fn() -> Duration> {
        let ms = Arc::clone(&self.ms);
        Box::new(move || Duration::from_millis(ms.load(Ordering::Relaxed)))
    }
}
