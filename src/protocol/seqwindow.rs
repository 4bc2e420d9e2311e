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
        /// Sequences skipped between the previous highest and this one.
        gap: u32,
    },
    /// Inside the window and not seen before.
    Reordered,
    /// Already seen (a duplicate delivery).
    Duplicate,
    /// Below the window: dropped without counting.
    TooOld,
    /// Jumped more than [`MAX_JUMP`] ahead: counting restarts from here.
    Reset,
}

/// Which of the recent sequence numbers arrived: gaps (loss), reordering and duplicates
/// counted exactly, in a fixed window (no allocation per datagram).
#[derive(Debug, Clone, Default)]
pub struct SeqWindow {
    started: bool,
    highest: u32,
    /// Bit i set: `highest - i` was received.
    seen: u128,
}

impl SeqWindow {
    /// An empty window (nothing seen yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// The highest sequence seen, if any.
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
    /// Ticks advancing by `step` per snapshot.
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

/// Snapshots from which [`TickStep`] learns the step.
pub const LEARN_SNAPSHOTS: usize = 8;

/// What [`TickStep`] decided when it finished learning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Learned {
    /// The step now used.
    pub step: u32,
    /// The smallest gap seen was a multiple of the step, not the step itself (every other
    /// snapshot lost, or an irregular server).
    pub irregular: bool,
    /// A configured step the learned gaps contradicted (not a divisor of them); the learned
    /// step replaced it.
    pub contradicted: Option<u32>,
}

/// What one snapshot tick did to the loss count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickNews {
    /// `(expected, received)` increments for the loss counter, including the ticks replayed
    /// when learning ended.
    pub loss: (u64, u64),
    /// The tick was seen before (a duplicate datagram).
    pub duplicate: bool,
    /// The sequence jumped more than [`MAX_JUMP`] ahead: counting restarted.
    pub reset: bool,
    /// Learning ended with this tick.
    pub learned: Option<Learned>,
    /// The window's verdict on this tick, once the step is known (`None` while learning).
    pub outcome: Option<SeqOutcome>,
}

/// Snapshot-tick loss accounting with the tick step configured or learned.
///
/// A configured step maps ticks from the first snapshot on. Otherwise the first
/// [`LEARN_SNAPSHOTS`] distinct ticks are held back, the step is their differences' greatest
/// common divisor, and they are replayed into the count. In *checked* mode a configured step
/// is learned too and kept only if it divides the learned one: a server whose snapshot ticks
/// differ by 1 has no step of 3, whatever the scenario says.
#[derive(Debug, Clone)]
pub struct TickStep {
    configured: Option<u32>,
    step: Option<u32>,
    mapper: Option<TickSeq>,
    learn: Vec<u32>,
    window: SeqWindow,
}

impl TickStep {
    /// `configured` (if any, and non-zero) is used from the first tick on.
    pub fn new(configured: Option<u32>) -> Self {
        let step = configured.filter(|&s| s > 0);
        Self {
            configured: step,
            step,
            mapper: step.map(TickSeq::new),
            learn: Vec::with_capacity(LEARN_SNAPSHOTS),
            window: SeqWindow::new(),
        }
    }

    /// Learn the step even when one is configured, and keep the configured one only if the
    /// snapshots agree with it.
    pub fn checked(configured: Option<u32>) -> Self {
        let mut t = Self::new(None);
        t.configured = configured.filter(|&s| s > 0);
        t
    }

    /// The step in use, once configured or learned.
    pub fn step(&self) -> Option<u32> {
        self.step
    }

    /// Account one arriving snapshot tick.
    pub fn on_tick(&mut self, tick: u32) -> TickNews {
        if let Some(mapper) = self.mapper.as_mut() {
            let outcome = self.window.on_seq(mapper.seq(tick));
            return TickNews {
                loss: outcome.deltas(),
                duplicate: outcome == SeqOutcome::Duplicate,
                reset: outcome == SeqOutcome::Reset,
                learned: None,
                outcome: Some(outcome),
            };
        }
        if self.learn.contains(&tick) {
            return TickNews {
                duplicate: true,
                ..TickNews::default()
            };
        }
        self.learn.push(tick);
        if self.learn.len() >= LEARN_SNAPSHOTS {
            return self.finish();
        }
        TickNews::default()
    }

    /// Set the step from the ticks held back so far (at least two) and replay them into the
    /// count; nothing once the step is known. Call it when the session ends, so a short one is
    /// counted too.
    pub fn finish(&mut self) -> TickNews {
        let mut news = TickNews::default();
        if self.mapper.is_some() || self.learn.len() < 2 {
            return news;
        }
        let mut g = 0u32;
        let mut min_diff = u32::MAX;
        for w in self.learn.windows(2) {
            let d = w[1].wrapping_sub(w[0]);
            let d = d.min(d.wrapping_neg());
            if d != 0 {
                g = gcd(g, d);
                min_diff = min_diff.min(d);
            }
        }
        if g == 0 {
            // Only duplicates so far: keep learning from scratch.
            self.learn.clear();
            return news;
        }
        let mut learned = Learned {
            step: g,
            irregular: min_diff != g,
            contradicted: None,
        };
        if let Some(c) = self.configured {
            if g % c == 0 {
                learned = Learned {
                    step: c,
                    irregular: min_diff != c,
                    contradicted: None,
                };
            } else {
                learned.contradicted = Some(c);
            }
        }
        self.step = Some(learned.step);
        let mut mapper = TickSeq::new(learned.step);
        for t in std::mem::take(&mut self.learn) {
            let (e, r) = self.window.on_seq(mapper.seq(t)).deltas();
            news.loss.0 += e;
            news.loss.1 += r;
        }
        self.mapper = Some(mapper);
        news.learned = Some(learned);
        news
    }
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
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

    fn feed_ticks(t: &mut TickStep, ticks: &[u32]) -> (u64, u64) {
        let mut sum = (0, 0);
        for &k in ticks {
            let n = t.on_tick(k);
            sum.0 += n.loss.0;
            sum.1 += n.loss.1;
        }
        let n = t.finish();
        (sum.0 + n.loss.0, sum.1 + n.loss.1)
    }

    #[test]
    fn step_one_is_learned_and_loss_is_exact() {
        let mut t = TickStep::new(None);
        // 20 Hz, one snapshot per tick, every 10th lost.
        let ticks: Vec<u32> = (2..=101).filter(|k| (k - 1) % 10 != 0).collect();
        assert_eq!(feed_ticks(&mut t, &ticks), (99, 90));
        assert_eq!(t.step(), Some(1));
    }

    #[test]
    fn step_three_is_learned_and_loss_is_exact() {
        let mut t = TickStep::new(None);
        let ticks: Vec<u32> = (1..=60).filter(|k| k % 7 != 0).map(|k| 3 * k).collect();
        assert_eq!(feed_ticks(&mut t, &ticks), (60, 52));
        assert_eq!(t.step(), Some(3));
    }

    #[test]
    fn a_contradicted_configured_step_is_replaced_in_checked_mode() {
        let mut t = TickStep::checked(Some(3));
        let ticks: Vec<u32> = (10..40).collect();
        let mut learned = None;
        for &k in &ticks {
            learned = learned.or(t.on_tick(k).learned);
        }
        assert_eq!(
            learned,
            Some(Learned {
                step: 1,
                irregular: false,
                contradicted: Some(3)
            })
        );
        // A configured step the gaps agree with stays, even if a lost snapshot doubles one.
        let mut t = TickStep::checked(Some(3));
        let n: Vec<_> = [3u32, 6, 12, 15, 18, 21, 24, 27]
            .iter()
            .map(|&k| t.on_tick(k))
            .collect();
        assert_eq!(t.step(), Some(3));
        assert_eq!(n[7].loss, (9, 8));
        assert_eq!(n[7].learned.map(|l| l.contradicted), Some(None));
    }

    #[test]
    fn duplicates_while_learning_are_not_counted() {
        let mut t = TickStep::new(None);
        assert!(!t.on_tick(5).duplicate);
        assert!(t.on_tick(5).duplicate);
        assert_eq!(feed_ticks(&mut t, &[6, 7]), (3, 3));
    }
}
