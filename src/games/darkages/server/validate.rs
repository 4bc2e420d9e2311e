//! Input validation by window: the sequence validator (§6.3) and the per-second rate window.

use super::*;

/// §6.3's `SequenceValidator`: the highest sequence and a 1024-bit window below it. It
/// starts with sequence 0 marked received, as §6.1 refuses `sequence <= lastSequence`.
#[derive(Debug, Clone)]
pub struct SequenceValidator {
    pub(super) highest: u32,
    /// Bit i (word i / 64): `highest - i` was received.
    pub(super) window: [u64; (SEQ_WINDOW / 64) as usize],
}

impl Default for SequenceValidator {
    fn default() -> Self {
        let mut window = [0u64; (SEQ_WINDOW / 64) as usize];
        window[0] = 1;
        Self { highest: 0, window }
    }
}

impl SequenceValidator {
    /// `Ok(gap)` for a new sequence (`gap` skipped ones when it advanced), `Err` for a
    /// replay (seen, or older than the window).
    pub fn check(&mut self, seq: u32) -> Result<u32, &'static str> {
        if seq > self.highest {
            let diff = seq - self.highest;
            let gap = if self.highest == 0 { 0 } else { diff - 1 };
            if diff >= SEQ_WINDOW {
                self.window = Default::default();
            } else {
                self.shift(diff);
            }
            self.window[0] |= 1;
            self.highest = seq;
            return Ok(gap);
        }
        let diff = self.highest - seq;
        if diff >= SEQ_WINDOW {
            return Err("too_old");
        }
        let (w, b) = ((diff / 64) as usize, diff % 64);
        if self.window[w] & (1 << b) != 0 {
            return Err("replayed_sequence");
        }
        self.window[w] |= 1 << b;
        Ok(0)
    }

    pub(super) fn shift(&mut self, by: u32) {
        let words = (by / 64) as usize;
        let bits = by % 64;
        let n = self.window.len();
        for i in (0..n).rev() {
            let src = i.checked_sub(words);
            let hi = src.map_or(0, |s| self.window[s] << bits);
            let lo = if bits == 0 {
                0
            } else {
                src.and_then(|s| s.checked_sub(1))
                    .map_or(0, |s| self.window[s] >> (64 - bits))
            };
            self.window[i] = hi | lo;
        }
    }
}

/// Counts in a one-second window.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    pub(super) start: Instant,
    pub(super) count: u32,
}

impl Window {
    pub(super) fn new(now: Instant) -> Self {
        Self {
            start: now,
            count: 0,
        }
    }

    /// Add `n` at `now`; the count in the current second.
    pub(super) fn add(&mut self, now: Instant, n: u32) -> u32 {
        if now.saturating_duration_since(self.start) >= Duration::from_secs(1) {
            self.start = now;
            self.count = 0;
        }
        self.count = self.count.saturating_add(n);
        self.count
    }
}
