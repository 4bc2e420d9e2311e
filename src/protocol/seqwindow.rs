//! Loss, reordering and duplicate accounting over a 32-bit wrapping sequence.
//!
//! The receiver keeps the highest sequence seen and a 128-bit window of the ones just below
//! it. A sequence ahead of the highest adds the gap to `expected`; one inside the window is a
//! late (reordered) arrival or a duplicate; one older than the window cannot be told apart from
//! a duplicate and is counted as `too_old` only (it stays counted as lost, so the loss rate errs
//! high by at most those, which the report shows).

/// Window width in sequence numbers.
pub const WINDOW: u32 = 128;
/// A forward jump larger than this is taken as a peer restart, not as loss.
pub const MAX_JUMP: u32 = 1 << 16;

/// What one arriving sequence number turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqOutcome {
    /// The first sequence, or one ahead of the highest seen; `gap` sequences were skipped.
    Advanced {
        gap: u32,
    },
    /// Inside the window and not seen before.
    Reordered,
    Duplicate,
    /// Below the window: dropped without counting.
    TooOld,
    /// Jumped more than [`MAX_JUMP`] ahead: counting restarts from here.
    Reset,
}

#[derive(Debug, Clone, Default)]
pub struct SeqWindow {
    started: bool,
    highest: u32,
    /// Bit i set: `highest - i` was received.
    seen: u128,
}

impl SeqWindow {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn highest(&self) -> Option<u32> {
        self.started.then_some(self.highest)
    }

    /// Account one arriving sequence number. `expected_delta` and `received_delta` of the
    /// outcome tell the caller how to move its loss counters: see [`SeqOutcome::deltas`].
    pub fn on_seq(&mut self, seq: u32) -> SeqOutcome {
        if !self.started {
            self.started = true;
            self.highest = seq;
            self.seen = 1;
            return SeqOutcome::Advanced { gap: 0 };
        }
        let ahead = seq.wrapping_sub(self.highest);
        if ahead == 0 {
            return SeqOutcome::Duplicate;
        }
        if ahead < (1 << 31) {
            if ahead > MAX_JUMP {
                self.highest = seq;
                self.seen = 1;
                return SeqOutcome::Reset;
            }
            self.seen = if ahead >= WINDOW {
                1
            } else {
                (self.seen << ahead) | 1
            };
            self.highest = seq;
            return SeqOutcome::Advanced { gap: ahead - 1 };
        }
        let behind = self.highest.wrapping_sub(seq);
        if behind >= WINDOW {
            return SeqOutcome::TooOld;
        }
        let bit = 1u128 << behind;
        if self.seen & bit != 0 {
            SeqOutcome::Duplicate
        } else {
            self.seen |= bit;
            SeqOutcome::Reordered
        }
    }
}

impl SeqOutcome {
    /// `(expected, received)` increments for loss accounting: a new sequence expects itself and
    /// every skipped one; a late arrival fills a hole already expected.
    pub fn deltas(self) -> (u64, u64) {
        match self {
            SeqOutcome::Advanced { gap } => (u64::from(gap) + 1, 1),
            SeqOutcome::Reordered => (0, 1),
            SeqOutcome::Reset => (1, 1),
            SeqOutcome::Duplicate | SeqOutcome::TooOld => (0, 0),
        }
    }
}

/// Turns snapshot ticks that advance by `step` into a gap-free sequence for [`SeqWindow`],
/// across the wrap of a 32-bit tick counter.
///
/// Dividing the raw tick by the step breaks at the wrap (`u32::MAX / 3` is followed by `0`),
/// and a server may well start its counter at a random value. Differences between ticks,
/// taken with wrapping arithmetic, do not break.
#[derive(Debug, Clone, Copy)]
pub struct TickSeq {
    step: u32,
    /// The newest tick seen and the sequence number it mapped to.
    anchor: Option<(u32, u32)>,
}

impl TickSeq {
    pub fn new(step: u32) -> Self {
        Self {
            step: step.max(1),
            anchor: None,
        }
    }

    /// The sequence number of `tick`: the newest tick moves the anchor, an older (reordered)
    /// one maps below it.
    pub fn seq(&mut self, tick: u32) -> u32 {
        let Some((t0, s0)) = self.anchor else {
            self.anchor = Some((tick, 0));
            return 0;
        };
        let d = i64::from(tick.wrapping_sub(t0) as i32);
        let ds = d.div_euclid(i64::from(self.step));
        let s = s0.wrapping_add(ds as i32 as u32);
        if d > 0 {
            self.anchor = Some((tick, s));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(w: &mut SeqWindow, seqs: &[u32]) -> (u64, u64) {
        seqs.iter().fold((0, 0), |(e, r), &s| {
            let (de, dr) = w.on_seq(s).deltas();
            (e + de, r + dr)
        })
    }

    #[test]
    fn in_order_without_loss() {
        let mut w = SeqWindow::new();
        assert_eq!(feed(&mut w, &[5, 6, 7, 8]), (4, 4));
    }

    #[test]
    fn gap_counts_as_expected_but_not_received() {
        let mut w = SeqWindow::new();
        assert_eq!(feed(&mut w, &[1, 2, 5, 6]), (6, 4));
    }

    #[test]
    fn late_arrival_fills_the_hole() {
        let mut w = SeqWindow::new();
        assert_eq!(feed(&mut w, &[1, 3, 2, 4]), (4, 4));
        assert_eq!(w.on_seq(2), SeqOutcome::Duplicate);
    }

    #[test]
    fn duplicates_are_not_received_twice() {
        let mut w = SeqWindow::new();
        assert_eq!(feed(&mut w, &[1, 1, 2, 2, 3]), (3, 3));
    }

    #[test]
    fn wraps_around_u32() {
        let mut w = SeqWindow::new();
        assert_eq!(feed(&mut w, &[u32::MAX - 1, u32::MAX, 0, 2, 1]), (5, 5));
        assert_eq!(w.highest(), Some(2));
    }

    #[test]
    fn older_than_window_is_too_old() {
        let mut w = SeqWindow::new();
        feed(&mut w, &[1000]);
        assert_eq!(w.on_seq(1000 - WINDOW), SeqOutcome::TooOld);
        assert_eq!(w.on_seq(1000 - WINDOW + 1), SeqOutcome::Reordered);
    }

    #[test]
    fn ticks_map_across_the_u32_wrap() {
        let mut t = TickSeq::new(3);
        let start = u32::MAX - 4; // ..., MAX-4, MAX-1, 1 (wrapped), 4, ...
        let ticks = [
            start,
            start.wrapping_add(3),
            start.wrapping_add(6),
            start.wrapping_add(9),
        ];
        let seqs: Vec<u32> = ticks.iter().map(|&k| t.seq(k)).collect();
        assert_eq!(seqs, vec![0, 1, 2, 3]);
        // A lost snapshot leaves a gap of one; a late one maps back into place.
        assert_eq!(t.seq(start.wrapping_add(15)), 5);
        assert_eq!(t.seq(start.wrapping_add(12)), 4);
        let mut w = SeqWindow::new();
        let (e, r) = [0u32, 1, 2, 3, 5, 4].iter().fold((0, 0), |(e, r), &s| {
            let (de, dr) = w.on_seq(s).deltas();
            (e + de, r + dr)
        });
        assert_eq!((e, r), (6, 6));
    }

    #[test]
    fn huge_jump_resets_instead_of_counting_loss() {
        let mut w = SeqWindow::new();
        feed(&mut w, &[1]);
        assert_eq!(w.on_seq(1 + MAX_JUMP + 1), SeqOutcome::Reset);
        assert_eq!(w.on_seq(2 + MAX_JUMP + 1).deltas(), (1, 1));
    }
}
