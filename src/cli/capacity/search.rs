//! The search itself, apart from running steps: which population to try next given the
//! verdicts so far, and when the answer is precise enough. No clock and no engine, so every
//! path (growth, narrowing, the re-measure near the edge, the load machine's limit, the cap)
//! is tested on made-up verdicts.
//!
//! 1. **Grow** from `start` (doubling, or by a fixed step) until a step breaks an objective
//!    or `max_players` holds.
//! 2. **Narrow**: halve the bracket between the last step that held and the first that broke
//!    until they are at most `resolution` apart.
//! 3. **Measure both ends again**: first the first step that broke, then the last that held.
//!    A second break confirms the upper end; a hold there (a spike broke it the first time)
//!    makes it held, and the search goes on above it. A second hold makes the lower end the
//!    answer; a break (the edge is noisy there) makes it the new upper end and narrowing goes
//!    on below it. At most [`MAX_REMEASURES`] contradictions in all.
//!
//! Why both ends: a step is judged on one window, and on a real machine a window now and then
//! breaks on a spike that has nothing to do with the population (a tick held up by the
//! scheduler). Measuring only the held end again corrects a lucky hold but never an unlucky
//! break, so every spike pulled the answer down: answers 5 to 7 % under the truth at a 5 %
//! resolution, against a server with a known capacity.
//!
//! A step at which the load machine was the limit is a ceiling, never a server's break: the
//! search narrows below it as below a broken step. When a step below the ceiling breaks, the
//! answer is the server's; when none does, it is the largest population that held under the
//! ceiling, as a lower bound (the load machine's limit), never a server capacity.

use crate::metrics::capacity::CapacityLimit;
use crate::scenario::capacity::CapacitySection;

/// How often a held step near the edge may be contradicted by its re-measure before the
/// search settles for the bracket it has.
pub const MAX_REMEASURES: u32 = 2;

/// A step's verdict, as the search reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Held,
    Broke,
    /// The generator was saturated in the window: nothing is known of the server there.
    LoadMachine,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Growing,
    Narrowing,
    /// Re-measuring the first broken step.
    ConfirmingBreak,
    /// Re-measuring the last held step.
    Confirming,
    Done(CapacityLimit),
}

/// Where the search stands.
#[derive(Debug, Clone)]
pub struct Search {
    cfg: CapacitySection,
    stage: Stage,
    /// Largest population that held (0: none yet).
    lo: u64,
    /// Smallest population that broke, if any.
    hi: Option<u64>,
    /// Smallest population at which the load machine was the limit, if any.
    ceiling: Option<u64>,
    /// Populations that held, in order (for stepping back below a contradicted one).
    held: Vec<u64>,
    /// Populations that broke (for stepping up past one that held when measured again).
    broken: Vec<u64>,
    /// The upper end once a second measure broke it too.
    confirmed_break: Option<u64>,
    /// The population asked for and not yet recorded.
    pending: Option<u64>,
    remeasures: u32,
}

impl Search {
    pub fn new(cfg: &CapacitySection) -> Self {
        Self {
            cfg: cfg.clone(),
            stage: Stage::Growing,
            lo: 0,
            hi: None,
            ceiling: None,
            held: Vec::new(),
            broken: Vec::new(),
            confirmed_break: None,
            pending: None,
            remeasures: 0,
        }
    }

    /// The next population to run, or `None` when the search is over.
    pub fn next(&mut self) -> Option<u64> {
        if let Some(p) = self.pending {
            return Some(p);
        }
        let n = match self.stage {
            Stage::Done(_) => return None,
            Stage::Growing if self.held.is_empty() => self.cfg.start,
            Stage::Growing => self.cfg.grow(self.lo),
            Stage::Narrowing => {
                let upper = self.upper();
                if self.narrow_enough(upper) {
                    // The server broke below the load machine's limit: its capacity, measured
                    // once more. Otherwise the load machine bounds what could be learned.
                    if self.hi.is_none_or(|h| self.ceiling.is_some_and(|c| c < h)) {
                        self.stage = Stage::Done(CapacityLimit::LoadMachine);
                        return None;
                    }
                    if self.lo == 0 {
                        self.stage = Stage::Done(CapacityLimit::BelowStart);
                        return None;
                    }
                    match self.hi {
                        Some(h)
                            if self.confirmed_break != Some(h)
                                && self.remeasures <= MAX_REMEASURES =>
                        {
                            self.stage = Stage::ConfirmingBreak;
                            h
                        }
                        _ => {
                            self.stage = Stage::Confirming;
                            self.lo
                        }
                    }
                } else {
                    self.lo + (upper - self.lo) / 2
                }
            }
            Stage::Confirming => self.lo,
            Stage::ConfirmingBreak => self.hi.unwrap_or(self.lo),
        };
        self.pending = Some(n);
        Some(n)
    }

    /// The bracket's upper end: the smallest broken or load-limited population.
    fn upper(&self) -> u64 {
        match (self.hi, self.ceiling) {
            (Some(h), Some(c)) => h.min(c),
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => self.lo,
        }
    }

    /// Whether `lo` and `hi` are close enough: at most `resolution` of `lo` apart (and never
    /// closer than one player).
    fn narrow_enough(&self, hi: u64) -> bool {
        let gap = hi.saturating_sub(self.lo);
        gap <= 1 || (gap as f64) <= self.cfg.resolution * self.lo as f64
    }

    /// The verdict of the step [`Search::next`] asked for.
    pub fn record(&mut self, v: Verdict) {
        let Some(n) = self.pending.take() else {
            return;
        };
        match (self.stage, v) {
            (Stage::Done(_), _) => {}
            (Stage::Confirming, Verdict::LoadMachine) => {
                self.stage = Stage::Done(CapacityLimit::LoadMachine)
            }
            (Stage::ConfirmingBreak, Verdict::LoadMachine) => {
                // Nothing more can be learned there: a ceiling, and the break stands.
                self.ceiling = Some(self.ceiling.map_or(n, |c| c.min(n)));
                self.confirmed_break = Some(n);
                self.stage = Stage::Narrowing;
            }
            (Stage::ConfirmingBreak, Verdict::Broke) => {
                self.confirmed_break = Some(n);
                self.stage = Stage::Narrowing;
            }
            (Stage::ConfirmingBreak, Verdict::Held) => {
                self.remeasures += 1;
                // A spike broke it the first time: held, and the edge is above it.
                self.broken.retain(|&b| b != n);
                self.hold(n);
                self.hi = self.broken.iter().copied().filter(|&b| b > n).min();
                self.stage = if self.hi.is_none() && self.ceiling.is_none() {
                    Stage::Growing
                } else {
                    Stage::Narrowing
                };
            }
            (_, Verdict::LoadMachine) => {
                self.ceiling = Some(self.ceiling.map_or(n, |c| c.min(n)));
                self.stage = Stage::Narrowing;
            }
            (Stage::Growing, Verdict::Held) => {
                self.hold(n);
                if n >= self.cfg.max_players {
                    self.stage = Stage::Done(CapacityLimit::MaxPlayers);
                }
            }
            (Stage::Growing | Stage::Narrowing, Verdict::Broke) => {
                self.broken.push(n);
                self.hi = Some(self.hi.map_or(n, |h| h.min(n)));
                self.stage = Stage::Narrowing;
            }
            (Stage::Narrowing, Verdict::Held) => self.hold(n),
            (Stage::Confirming, Verdict::Held) => {
                self.stage = Stage::Done(CapacityLimit::Server);
            }
            (Stage::Confirming, Verdict::Broke) => {
                self.remeasures += 1;
                // The edge is below this step after all: it is the new upper end, and the
                // largest step that held below it the new lower one.
                self.broken.push(n);
                self.hi = Some(n);
                self.held.retain(|&h| h < n);
                self.lo = self.held.iter().copied().max().unwrap_or(0);
                self.stage = if self.remeasures > MAX_REMEASURES {
                    Stage::Done(CapacityLimit::Server)
                } else {
                    Stage::Narrowing
                };
            }
        }
    }

    fn hold(&mut self, n: u64) {
        self.held.push(n);
        self.lo = self.lo.max(n);
    }

    /// The search ran out of time (or was interrupted): what it has is the answer.
    pub fn give_up(&mut self) {
        self.pending = None;
        if !matches!(self.stage, Stage::Done(_)) {
            self.stage = Stage::Done(CapacityLimit::Unfinished);
        }
    }

    /// How the search ended; `None` while it goes on.
    pub fn limit(&self) -> Option<CapacityLimit> {
        match self.stage {
            Stage::Done(l) => Some(l),
            _ => None,
        }
    }

    /// The answer so far: the largest population that held (`None`: none did).
    pub fn players(&self) -> Option<u64> {
        (self.lo > 0).then_some(self.lo)
    }

    /// The bracket: `[last held, first broken - 1]`.
    pub fn interval(&self) -> [Option<u64>; 2] {
        [self.players(), self.hi.map(|h| h.saturating_sub(1))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::capacity::Growth;

    fn cfg(start: u64, max: u64, resolution: f64) -> CapacitySection {
        CapacitySection {
            start,
            max_players: max,
            resolution,
            ..CapacitySection::default()
        }
    }

    /// Runs the search against a server that holds exactly `truth` players (`judge` may
    /// override a verdict), returning the steps tried and the search.
    fn against(
        c: &CapacitySection,
        truth: u64,
        mut judge: impl FnMut(u64, usize) -> Option<Verdict>,
    ) -> (Vec<u64>, Search) {
        let mut s = Search::new(c);
        let mut steps = Vec::new();
        while let Some(n) = s.next() {
            assert!(steps.len() < 100, "the search does not end: {steps:?}");
            let v = judge(n, steps.len()).unwrap_or(if n <= truth {
                Verdict::Held
            } else {
                Verdict::Broke
            });
            steps.push(n);
            s.record(v);
        }
        (steps, s)
    }

    #[test]
    fn doubling_then_narrowing_lands_within_the_resolution_and_measures_the_edge_twice() {
        for truth in [37, 150, 412, 600, 999] {
            let c = cfg(10, 5000, 0.05);
            let (steps, s) = against(&c, truth, |_, _| None);
            let p = s.players().expect("an answer");
            assert_eq!(s.limit(), Some(CapacityLimit::Server));
            assert!(
                p <= truth && p as f64 >= truth as f64 * 0.95,
                "{truth}: {p}"
            );
            let [lo, hi] = s.interval();
            assert_eq!(lo, Some(p));
            assert!(hi.is_some_and(|h| h >= truth), "{truth}: {hi:?}");
            // The answer was measured twice: as a narrowing step and again at the end.
            assert_eq!(steps.iter().filter(|&&n| n == p).count(), 2, "{steps:?}");
            assert_eq!(steps.last(), Some(&p));
        }
    }

    #[test]
    fn the_growth_never_passes_max_players_and_a_held_max_is_a_lower_bound() {
        let c = CapacitySection {
            step: Growth::By(300),
            ..cfg(100, 800, 0.05)
        };
        let (steps, s) = against(&c, 10_000, |_, _| None);
        assert_eq!(steps, vec![100, 400, 700, 800]);
        assert_eq!(s.limit(), Some(CapacityLimit::MaxPlayers));
        assert_eq!(s.interval(), [Some(800), None]);
    }

    #[test]
    fn a_saturated_load_machine_is_a_ceiling_and_the_answer_a_lower_bound_under_it() {
        let c = cfg(50, 5000, 0.05);
        let (steps, s) = against(&c, 10_000, |n, _| {
            (n >= 380).then_some(Verdict::LoadMachine)
        });
        assert_eq!(&steps[..4], &[50, 100, 200, 400]);
        assert_eq!(s.limit(), Some(CapacityLimit::LoadMachine));
        let p = s.players().expect("a lower bound");
        assert!(p < 380 && p as f64 >= 380.0 * 0.95, "{p}: {steps:?}");
        // Never a step past the first saturated one.
        assert!(steps.iter().skip(4).all(|&n| n < 400), "{steps:?}");
    }

    #[test]
    fn a_server_that_breaks_below_the_load_machines_limit_gets_its_capacity() {
        let c = cfg(50, 5000, 0.05);
        // The generator saturates at 800; the server breaks past 511.
        let (_, s) = against(&c, 511, |n, _| (n >= 800).then_some(Verdict::LoadMachine));
        assert_eq!(s.limit(), Some(CapacityLimit::Server));
        let p = s.players().expect("an answer");
        assert!(p <= 511 && p as f64 >= 511.0 * 0.95, "{p}");
    }

    #[test]
    fn a_first_step_that_breaks_narrows_below_it() {
        let c = cfg(100, 1000, 0.05);
        let (_, s) = against(&c, 30, |_, _| None);
        let p = s.players().expect("an answer");
        assert!((29..=30).contains(&p), "{p}");
        let (_, s) = against(&cfg(1, 10, 0.05), 0, |_, _| None);
        assert_eq!(
            (s.limit(), s.players()),
            (Some(CapacityLimit::BelowStart), None)
        );
    }

    #[test]
    fn a_held_edge_that_breaks_when_measured_again_moves_the_answer_down() {
        let c = cfg(10, 5000, 0.05);
        // The first re-measure of the edge breaks (noise); the search narrows below it.
        let mut confirms = 0;
        let (steps, s) = against(&c, 412, |n, i| {
            let again = i > 0 && n <= 412 && n > 380;
            (again && confirms == 0 && i > 8).then(|| {
                confirms += 1;
                Verdict::Broke
            })
        });
        let p = s.players().expect("an answer");
        assert!(p < 412 && p as f64 >= 412.0 * 0.9, "{p}: {steps:?}");
        assert_eq!(s.limit(), Some(CapacityLimit::Server));
    }

    #[test]
    fn both_ends_of_the_bracket_are_measured_twice_before_the_answer() {
        let c = cfg(10, 5000, 0.05);
        let (steps, s) = against(&c, 412, |_, _| None);
        let p = s.players().expect("an answer");
        let [_, hi] = s.interval();
        let first_broken = hi.expect("an upper end") + 1;
        assert_eq!(
            steps.iter().filter(|&&n| n == first_broken).count(),
            2,
            "{steps:?}"
        );
        // The break first, then the answer.
        let n = steps.len();
        assert_eq!(&steps[n - 2..], &[first_broken, p], "{steps:?}");
    }

    #[test]
    fn a_break_that_holds_when_measured_again_moves_the_answer_up() {
        let c = cfg(10, 5000, 0.05);
        // A spike breaks the doubling's step at 320, far below the edge at 600: measured again
        // it holds, and the search goes on above it.
        let mut spiked = false;
        let (steps, s) = against(&c, 600, |n, _| {
            (n == 320 && !spiked).then(|| {
                spiked = true;
                Verdict::Broke
            })
        });
        let p = s.players().expect("an answer");
        assert_eq!(s.limit(), Some(CapacityLimit::Server));
        assert!(p <= 600 && p as f64 >= 600.0 * 0.95, "{p}: {steps:?}");
        assert!(steps.iter().any(|&n| n > 320), "{steps:?}");
    }

    #[test]
    fn spikes_without_end_still_end_the_search() {
        let c = cfg(10, 5000, 0.05);
        // Every first measure of a step at or above 300 breaks, every second one holds: the
        // contradictions are bounded, and the answer stays below the truth.
        let mut seen = std::collections::HashMap::new();
        let (steps, s) = against(&c, 600, |n, _| {
            let k = seen.entry(n).or_insert(0);
            *k += 1;
            (n >= 300 && *k == 1).then_some(Verdict::Broke)
        });
        assert!(steps.len() < 40, "{steps:?}");
        assert!(s.limit().is_some());
        assert!(s.players().is_some_and(|p| p <= 600), "{steps:?}");
    }

    #[test]
    fn giving_up_keeps_the_bracket() {
        let c = cfg(10, 5000, 0.01);
        let mut s = Search::new(&c);
        for v in [Verdict::Held, Verdict::Held, Verdict::Broke] {
            s.next();
            s.record(v);
        }
        s.give_up();
        assert_eq!(s.next(), None);
        assert_eq!(s.limit(), Some(CapacityLimit::Unfinished));
        assert_eq!(s.interval(), [Some(20), Some(39)]);
    }
}
