//! Loss, reordering and duplicate accounting over a 32-bit wrapping sequence.
//!
//! The receiver keeps the highest sequence seen and a 128-bit window of the ones just below
//! it. A sequence ahead of the highest adds the gap to `expected`; one inside the window is a
//! late (reordered) arrival or a duplicate; one older than the window cannot be told apart from
//! a duplicate and is counted as `too_old` only (it stays counted as lost, so the loss rate errs
//! high by at most those, which the report shows).

use crate::metrics::Recorder;

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

    /// The newest tick mapped so far.
    pub fn newest(&self) -> Option<u32> {
        self.anchor.map(|(t, _)| t)
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

/// Consecutive snapshots whose gaps share a coarser step before that step is taken as the
/// server's new snapshot rate rather than as loss. Held until then, their loss is not counted
/// either way; one gap that breaks the pattern (a gap of the current step, or one the coarser
/// step does not divide) commits them as loss at the current step.
///
/// With independent loss `p` at the old rate, eight gaps in a row that are all even multiples
/// of the step happen with probability `(p / (1 + p))^8`: under 5e-9 at 10 % loss, 1.5e-4 at
/// 50 %. A server that sends exactly every other snapshot on purpose and one that drops exactly
/// every other one cannot be told apart from the client's side; the first is the common case.
pub const RATE_CHANGE_SNAPSHOTS: u32 = 8;

/// The server changed its snapshot rate: its snapshot ticks now advance by `to` where they
/// advanced by `from` (a larger step is a lower rate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateChange {
    /// The step (in server ticks) before.
    pub from: u32,
    /// The step now used.
    pub to: u32,
}

impl RateChange {
    /// The rate went down (snapshots further apart).
    pub fn is_down(self) -> bool {
        self.to > self.from
    }
}

/// What one snapshot tick did to the loss count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickNews {
    /// `(expected, received)` increments for the loss counter, including the ticks replayed
    /// when learning ended and snapshots held while a rate change could not yet be told from
    /// loss.
    pub loss: (u64, u64),
    /// A snapshot not seen before arrived (false for a duplicate).
    pub arrived: bool,
    /// The tick was seen before (a duplicate datagram).
    pub duplicate: bool,
    /// The sequence jumped more than [`MAX_JUMP`] ahead: counting restarted.
    pub reset: bool,
    /// Learning ended with this tick.
    pub learned: Option<Learned>,
    /// The server's snapshot step changed with this tick (see [`RATE_CHANGE_SNAPSHOTS`]).
    pub rate_change: Option<RateChange>,
    /// The window's verdict on this tick, once the step is known (`None` while learning).
    pub outcome: Option<SeqOutcome>,
}

impl TickNews {
    /// Record this news: the loss counts in `loss_down`, then [`TickNews::record_rate`].
    pub fn record(&self, rec: &mut Recorder) {
        rec.loss_down.add(self.loss.0, self.loss.1);
        self.record_rate(rec);
    }

    /// Record all but the loss counts (for a protocol that counts its loss another way):
    /// snapshots sent ([`TickNews::sent`], the snapshot rate), the step learned
    /// (`snapshot_tick_step`, with `tick_step_irregular` and `snapshot_tick_step_contradicted`
    /// when so), a restarted counter (`snapshot_tick_reset`) and a change of the server's
    /// snapshot rate (`snapshot_rate_down` or `snapshot_rate_up`, and the new step).
    pub fn record_rate(&self, rec: &mut Recorder) {
        rec.snapshots_sent += self.sent();
        if self.reset {
            rec.event("snapshot_tick_reset");
        }
        if let Some(l) = self.learned {
            rec.record_extra("snapshot_tick_step", u64::from(l.step));
            if l.irregular {
                rec.event("tick_step_irregular");
            }
            if l.contradicted.is_some() {
                rec.event("snapshot_tick_step_contradicted");
            }
        }
        if let Some(c) = self.rate_change {
            rec.event(if c.is_down() {
                "snapshot_rate_down"
            } else {
                "snapshot_rate_up"
            });
            rec.record_extra("snapshot_tick_step", u64::from(c.to));
        }
    }

    /// Snapshots the server sent this bot, as far as this tick tells: the one that arrived
    /// (counted at once) plus those counted lost now (a late arrival takes back the one it was
    /// counted lost as). Added up over a session it is what the server sent at the rate it
    /// was sending, loss or not: the snapshot rate.
    pub fn sent(&self) -> u64 {
        let (e, r) = self.loss;
        (u64::from(self.arrived) + e).saturating_sub(r)
    }
}

/// Snapshots held back while their gaps may be a new, coarser snapshot step. Every held gap
/// is a multiple of the current step, so their `(expected, received)` at it is
/// `(ticks / step, count)`: nothing else need be kept.
#[derive(Debug, Clone, Copy, Default)]
struct Held {
    /// The greatest common divisor of the held gaps, in ticks (0: nothing held).
    step: u32,
    /// Snapshots held.
    count: u32,
    /// The held gaps added up, in ticks.
    ticks: u64,
}

/// Snapshot-tick loss accounting with the tick step configured or learned, that tells a change
/// of the server's snapshot rate from loss.
///
/// A configured step maps ticks from the first snapshot on. Otherwise the first
/// [`LEARN_SNAPSHOTS`] distinct ticks are held back, the step is their differences' greatest
/// common divisor, and they are replayed into the count. In *checked* mode a configured step
/// is learned too and kept only if it divides the learned one: a server whose snapshot ticks
/// differ by 1 has no step of 3, whatever the scenario says.
///
/// Once the step is known, a server may still change it (QoS degradation, bandwidth budgets,
/// interest management):
/// - a gap the step does not divide is proof of a finer step (a higher rate): the step becomes
///   the greatest common divisor of the two at once;
/// - gaps that are all multiples of a coarser step are held (neither counted as loss nor as
///   received) until [`RATE_CHANGE_SNAPSHOTS`] of them in a row agree: the coarser step is then
///   the new rate and the held snapshots count at it (gaps of it: nothing lost). One gap that
///   breaks the pattern commits them as loss at the current step.
#[derive(Debug, Clone)]
pub struct TickStep {
    configured: Option<u32>,
    /// Maps ticks to sequence numbers once the step is known (it holds the step and the
    /// newest tick).
    mapper: Option<TickSeq>,
    learn: Vec<u32>,
    window: SeqWindow,
    held: Held,
}

impl TickStep {
    /// `configured` (if any, and non-zero) is used from the first tick on.
    pub fn new(configured: Option<u32>) -> Self {
        let step = configured.filter(|&s| s > 0);
        Self {
            configured: step,
            mapper: step.map(TickSeq::new),
            // Only a session that learns its step holds ticks back.
            learn: if step.is_some() {
                Vec::new()
            } else {
                Vec::with_capacity(LEARN_SNAPSHOTS)
            },
            window: SeqWindow::new(),
            held: Held::default(),
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
        self.mapper.map(|m| m.step)
    }

    /// Snapshots held back while a rate change cannot yet be told from loss.
    pub fn held(&self) -> u32 {
        self.held.count
    }

    /// Account one arriving snapshot tick.
    pub fn on_tick(&mut self, tick: u32) -> TickNews {
        if self.mapper.is_some() {
            return self.on_known_tick(tick);
        }
        if self.learn.contains(&tick) {
            return TickNews {
                duplicate: true,
                ..TickNews::default()
            };
        }
        self.learn.push(tick);
        if self.learn.len() >= LEARN_SNAPSHOTS {
            let mut news = self.learn_step();
            news.arrived = true;
            return news;
        }
        TickNews {
            arrived: true,
            ..TickNews::default()
        }
    }
    /// One tick once the step is known: the window's verdict, holding gaps that may be a new
    /// step (see the type's docs).
    fn on_known_tick(&mut self, tick: u32) -> TickNews {
        let Some(mapper) = self.mapper.as_mut() else {
            return TickNews::default();
        };
        let step = mapper.step;
        let Some(newest) = mapper.newest() else {
            let outcome = self.window.on_seq(mapper.seq(tick));
            return Self::news_of(outcome);
        };
        let ahead = tick.wrapping_sub(newest) as i32;
        if ahead <= 0 {
            // Late or duplicate: the window tells which. A late snapshot fills a hole, so
            // the held gaps were not all a new step: they are loss after all.
            let outcome = self.window.on_seq(mapper.seq(tick));
            let mut news = Self::news_of(outcome);
            if outcome == SeqOutcome::Reordered {
                news.loss = add(news.loss, self.commit_held());
            }
            return news;
        }
        let gap = ahead as u32;
        if gap > MAX_JUMP.saturating_mul(step) {
            // A restarted counter, not a rate: the window starts over.
            let outcome = self.window.on_seq(mapper.seq(tick));
            let mut news = Self::news_of(outcome);
            news.loss = add(self.commit_held(), news.loss);
            return news;
        }
        if gap % step != 0 {
            // Proof of a finer step: the rate went up (or the server is irregular).
            let held = self.commit_held();
            let to = gcd(step, gap);
            self.restart_at(tick, to);
            let mut news = Self::news_of(SeqOutcome::Advanced { gap: 0 });
            news.loss = add(news.loss, held);
            news.rate_change = Some(RateChange { from: step, to });
            return news;
        }
        let outcome = self.window.on_seq(mapper.seq(tick));
        let mut news = Self::news_of(outcome);
        let multiple = matches!(outcome, SeqOutcome::Advanced { gap } if gap > 0);
        if !multiple {
            news.loss = add(self.commit_held(), news.loss);
            return news;
        }
        // Held: this snapshot's own counts wait with the others'.
        let common = gcd(self.held.step, gap);
        if self.held.count > 0 && common == step {
            // This gap and the held ones share no coarser step: those were loss.
            news.loss = self.commit_held();
            self.held = Held {
                step: gap,
                count: 1,
                ticks: u64::from(gap),
            };
        } else {
            news.loss = (0, 0);
            self.held.step = common;
            self.held.ticks += u64::from(gap);
            self.held.count += 1;
        }
        if self.held.count >= RATE_CHANGE_SNAPSHOTS {
            let to = self.held.step;
            let counted = (self.held.ticks / u64::from(to), u64::from(self.held.count));
            self.held = Held::default();
            self.restart_at(tick, to);
            news.loss = add(news.loss, counted);
            news.rate_change = Some(RateChange { from: step, to });
        }
        news
    }

    /// The session ended: set the step from the ticks held back so far (at least two) and
    /// replay them into the count, then commit the snapshots held for a possible rate change
    /// as loss at the current step (nothing follows to tell). Call it when the session ends,
    /// so a short one is counted too, and so the count is whole.
    pub fn finish(&mut self) -> TickNews {
        let mut news = if self.mapper.is_some() {
            TickNews::default()
        } else {
            self.learn_step()
        };
        news.loss = add(news.loss, self.commit_held());
        news
    }

    /// Set the step from the ticks held back (at least two) and replay them into the count.
    /// Gaps of a coarser step among them stay held, as later ones would be.
    fn learn_step(&mut self) -> TickNews {
        let mut news = TickNews::default();
        if self.learn.len() < 2 {
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
        // Replayed as if they had come with the step known, so gaps that are already a
        // coarser step (the server lowered its rate before or while the bot learned) are held
        // as any later ones would be, not counted lost.
        self.mapper = Some(TickSeq::new(learned.step));
        for t in std::mem::take(&mut self.learn) {
            let n = self.on_known_tick(t);
            news.loss = add(news.loss, n.loss);
            news.rate_change = news.rate_change.or(n.rate_change);
        }
        news.learned = Some(learned);
        news
    }
}

impl TickStep {
    /// The verdict of the window on one tick, as news.
    fn news_of(outcome: SeqOutcome) -> TickNews {
        TickNews {
            loss: outcome.deltas(),
            arrived: !matches!(outcome, SeqOutcome::Duplicate | SeqOutcome::TooOld),
            duplicate: outcome == SeqOutcome::Duplicate,
            reset: outcome == SeqOutcome::Reset,
            learned: None,
            rate_change: None,
            outcome: Some(outcome),
        }
    }

    /// The held snapshots' counts at the current step, released (the pattern broke).
    fn commit_held(&mut self) -> (u64, u64) {
        let held = std::mem::take(&mut self.held);
        let step = u64::from(self.step().unwrap_or(1).max(1));
        (held.ticks / step, u64::from(held.count))
    }

    /// Count from `tick` on with `step`: a fresh window whose first sequence is `tick`,
    /// already counted by the caller.
    fn restart_at(&mut self, tick: u32, step: u32) {
        let mut mapper = TickSeq::new(step);
        self.window = SeqWindow::new();
        self.window.on_seq(mapper.seq(tick));
        self.mapper = Some(mapper);
    }
}

fn add(a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
    (a.0 + b.0, a.1 + b.1)
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

    /// Ticks of a server that sends every `step` ticks from `from`, `n` snapshots.
    fn sent(from: u32, step: u32, n: u32) -> impl Iterator<Item = u32> {
        (0..n).map(move |i| from.wrapping_add(i * step))
    }

    /// Feeds ticks and adds up the news: (expected, received), sent, rate changes.
    fn run(t: &mut TickStep, ticks: &[u32]) -> ((u64, u64), u64, Vec<RateChange>) {
        let (mut loss, mut sent_sum, mut changes) = ((0, 0), 0, Vec::new());
        for &k in ticks {
            let n = t.on_tick(k);
            loss = add(loss, n.loss);
            sent_sum += n.sent();
            changes.extend(n.rate_change);
        }
        let n = t.finish();
        (add(loss, n.loss), sent_sum + n.sent(), changes)
    }

    #[test]
    fn a_halved_snapshot_rate_is_a_rate_change_not_loss() {
        // Every 3 ticks for 40 snapshots (ticks 0..=117), then every 6 for 40, then every 3.
        let mut ticks: Vec<u32> = sent(0, 3, 40).collect();
        ticks.extend(sent(123, 6, 40)); // 123 .. 357
        ticks.extend(sent(360, 3, 40));
        let mut t = TickStep::checked(None);
        let (loss, sent_sum, changes) = run(&mut t, &ticks);
        assert_eq!(loss, (120, 120), "no snapshot was lost");
        assert_eq!(sent_sum, 120);
        assert_eq!(
            changes,
            vec![RateChange { from: 3, to: 6 }, RateChange { from: 6, to: 3 }]
        );
        assert_eq!(t.step(), Some(3));
    }

    #[test]
    fn real_loss_across_a_rate_change_is_counted_exactly() {
        // Step 3, then 6; the i-th snapshot lost when i % 10 == 9, but none next to the change
        // (a gap that spans it is counted at the old step) or in the new rate's first eight
        // gaps (those must agree to be told from loss), nor the last (nothing follows it).
        let all: Vec<u32> = sent(0, 3, 50).chain(sent(153, 6, 50)).collect();
        let kept: Vec<u32> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 10 != 9 || (45..60).contains(i) || *i >= 95)
            .map(|(_, &k)| k)
            .collect();
        let lost = (all.len() - kept.len()) as u64;
        let mut t = TickStep::checked(None);
        let (loss, sent_sum, changes) = run(&mut t, &kept);
        assert_eq!(loss, (100, 100 - lost));
        assert_eq!(sent_sum, 100);
        assert_eq!(changes, vec![RateChange { from: 3, to: 6 }]);
    }

    #[test]
    fn scattered_double_gaps_stay_loss() {
        // Step 1, every 4th snapshot lost: gaps of 2 between gaps of 1 never hold 8 in a row.
        let kept: Vec<u32> = (0..200).filter(|k| k % 4 != 3).collect();
        let mut t = TickStep::new(None);
        let (loss, sent_sum, changes) = run(&mut t, &kept);
        // 199, the last sent, was lost: nothing after it tells.
        assert_eq!(loss, (199, 150));
        assert_eq!(sent_sum, 199);
        assert!(changes.is_empty());
        assert_eq!(t.held(), 0);
    }

    #[test]
    fn a_late_snapshot_inside_held_gaps_makes_them_loss() {
        let mut t = TickStep::new(Some(1));
        let (loss, _, _) = run(&mut t, &[0, 1, 2, 4, 6, 8, 3, 9]);
        // 0..=9: 5 and 7 lost; 3 arrived late and broke the pattern.
        assert_eq!(loss, (10, 8));
        assert_eq!(t.step(), Some(1));
    }

    #[test]
    fn a_session_that_ends_while_holding_counts_the_held_gaps_as_loss() {
        let mut t = TickStep::new(Some(2));
        let (loss, sent_sum, changes) = run(&mut t, &[0, 2, 4, 8, 12, 16]);
        assert_eq!(loss, (9, 6));
        assert_eq!(sent_sum, 9);
        assert!(changes.is_empty());
    }

    #[test]
    fn a_finer_step_is_taken_at_once() {
        let mut t = TickStep::new(Some(6));
        let (loss, sent_sum, changes) = run(&mut t, &[0, 6, 12, 15, 18, 21]);
        assert_eq!(loss, (6, 6));
        assert_eq!(sent_sum, 6);
        assert_eq!(changes, vec![RateChange { from: 6, to: 3 }]);
    }

    #[test]
    fn a_restarted_tick_counter_is_no_rate_change() {
        let mut t = TickStep::new(Some(3));
        let far = 3 * (MAX_JUMP + 10) + 1;
        let (loss, _, changes) = run(&mut t, &[0, 3, 6, far, far + 3]);
        assert_eq!(loss, (5, 5));
        assert!(changes.is_empty());
    }

    #[test]
    fn a_rate_change_while_learning_is_no_loss() {
        // The learning window straddles the change: gaps 3, 3, 3, then 6 from tick 9 on.
        let ticks: Vec<u32> = sent(0, 3, 4).chain(sent(15, 6, 30)).collect();
        let mut t = TickStep::new(None);
        let (loss, sent_sum, changes) = run(&mut t, &ticks);
        assert_eq!(loss, (34, 34));
        assert_eq!(sent_sum, 34);
        assert_eq!(changes, vec![RateChange { from: 3, to: 6 }]);
        // A configured step the server is already below when the bot joins (every gap 6):
        // kept while learning (it divides the gaps), then the coarser step is taken.
        let mut t = TickStep::checked(Some(3));
        let (loss, _, changes) = run(&mut t, &sent(300, 6, 30).collect::<Vec<_>>());
        assert_eq!(loss, (30, 30));
        assert_eq!(changes, vec![RateChange { from: 3, to: 6 }]);
    }
}
