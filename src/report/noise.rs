//! Is a change between two runs beyond run-to-run noise? A block bootstrap over seconds.
//!
//! Two back-to-back runs of one scenario against one server differ: RTT p99 read 169 µs and
//! 281 µs from 223 samples each (+66 %), so a gate with a 10 % limit failed identical runs.
//! A gate that fails on noise is switched off by its users. `tickswarm compare` therefore
//! claims a regression only when the change is beyond what resampling the runs explains.
//!
//! # Method
//! The unit that is resampled is one second of a run (its histogram of samples), not a
//! sample: samples within a second are correlated (a GC pause, a scheduler hiccup, a burst of
//! loss hits many at once), seconds much less so. For each of [`REPLICATES`] replicates, each
//! run's seconds are drawn with replacement (as many as it has), their histograms added, and
//! the statistic (p99, mean, max, ...) taken of each; the replicate's change is new minus
//! base. The change is *significant* when the lower end of its one-sided
//! [`CONFIDENCE`] interval (the 5th percentile of the replicates' changes, for "worse is
//! higher") is still beyond the limit's allowance. The seed is fixed, so the same two runs
//! always give the same verdict.
//!
//! # What it cannot tell
//! With fewer than [`MIN_SAMPLES`] samples in either run the comparison is *inconclusive* and
//! says so (it is not counted as a regression; the plain values are shown). A run with fewer
//! than [`MIN_SECONDS`] seconds holding samples is resampled sample by sample instead: that
//! takes its samples as independent, which they are not quite, so a short run's interval is
//! narrower than the truth (a run of a few seconds is a smoke test, not a measurement).

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Bootstrap replicates per comparison.
pub const REPLICATES: usize = 1000;
/// One-sided confidence of a claimed regression.
pub const CONFIDENCE: f64 = 0.95;
/// Seconds with samples each run needs for the bootstrap to mean anything.
pub const MIN_SECONDS: usize = 5;
/// Samples each run needs.
pub const MIN_SAMPLES: u64 = 50;
/// A run of fewer than [`MIN_SECONDS`] seconds is resampled sample by sample up to this many
/// samples.
pub const MAX_SAMPLE_BLOCKS: u64 = 200_000;

/// The statistic of a histogram a metric reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Statistic {
    Min,
    Mean,
    Max,
    /// A quantile in 0..=1.
    Quantile(f64),
}

/// One run's seconds as sparse `(value index, count)` lists over a value table shared by both
/// runs, so a replicate adds small lists into one dense array.
struct Seconds {
    seconds: Vec<Vec<(u32, u64)>>,
}

/// What resampling said about a change.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// Too few seconds or samples to resample.
    Inconclusive { seconds: usize, samples: u64 },
    /// The one-sided interval of the change (`low` is the bound the verdict uses; `high` the
    /// other end of the two-sided interval, for the report).
    Interval { low: f64, high: f64 },
}

/// One second of a run: `(value, count)` of its non-zero counters, values ascending (as a
/// histogram log holds them).
pub type Second = Vec<(u64, u64)>;

/// A histogram's non-zero counters as a [`Second`].
pub fn second_of(h: &Histogram<u64>) -> Second {
    h.iter_recorded()
        .map(|v| {
            (
                h.lowest_equivalent(v.value_iterated_to()),
                v.count_at_value(),
            )
        })
        .collect()
}

fn samples(s: &Second) -> u64 {
    s.iter().map(|c| c.1).fold(0u64, u64::saturating_add)
}

/// The bootstrap interval of `stat(new) - stat(base)`, or why it cannot be had. Each slice
/// holds a run's seconds of one metric (empty seconds are skipped).
pub fn change_interval(
    base: &[Second],
    new: &[Second],
    stat: Statistic,
    higher_is_worse: bool,
) -> Verdict {
    let count = |hs: &[Second]| {
        (
            hs.iter().filter(|h| samples(h) > 0).count(),
            hs.iter().map(samples).fold(0u64, u64::saturating_add),
        )
    };
    let (bs, bn) = count(base);
    let (ns, nn) = count(new);
    if bn < MIN_SAMPLES {
        return Verdict::Inconclusive {
            seconds: bs,
            samples: bn,
        };
    }
    if nn < MIN_SAMPLES {
        return Verdict::Inconclusive {
            seconds: ns,
            samples: nn,
        };
    }
    // A short run has too few seconds to resample: its samples are resampled one by one
    // (which takes them as independent, so it is less cautious; see the module docs).
    let (base, new) = (as_blocks(base, bs), as_blocks(new, ns));
    let (base, new) = (base.as_ref(), new.as_ref());
    // The distinct values both runs recorded, ascending: a replicate's histogram is a dense
    // count per value.
    let mut values: Vec<u64> = base
        .iter()
        .chain(new)
        .flat_map(|h| h.iter().map(|c| c.0))
        .collect();
    values.sort_unstable();
    values.dedup();
    let sparse = |hs: &[Second]| Seconds {
        seconds: hs
            .iter()
            .filter(|h| samples(h) > 0)
            .map(|h| {
                h.iter()
                    .filter_map(|&(value, c)| {
                        let i = values.binary_search(&value).ok()?;
                        Some((i as u32, c))
                    })
                    .collect()
            })
            .collect(),
    };
    let (b, n) = (sparse(base), sparse(new));
    let mut rng = ChaCha8Rng::seed_from_u64(0x7469_636b_7377_6172); // "tickswar"
    let mut dense = vec![0u64; values.len()];
    let mut changes = Vec::with_capacity(REPLICATES);
    for _ in 0..REPLICATES {
        let sb = replicate(&b, &values, &mut dense, stat, &mut rng);
        let sn = replicate(&n, &values, &mut dense, stat, &mut rng);
        changes.push(sn - sb);
    }
    changes.sort_by(f64::total_cmp);
    let at = |q: f64| changes[((q * (REPLICATES - 1) as f64).round() as usize).min(REPLICATES - 1)];
    let alpha = 1.0 - CONFIDENCE;
    // The bound that decides is the one on the "better" side of the change: for a metric
    // where higher is worse, the low end (still worse than the allowance?).
    if higher_is_worse {
        Verdict::Interval {
            low: at(alpha),
            high: at(1.0 - alpha),
        }
    } else {
        Verdict::Interval {
            low: at(1.0 - alpha),
            high: at(alpha),
        }
    }
}

/// The run's blocks for resampling: its seconds, or, with fewer than [`MIN_SECONDS`] of them
/// (and at most [`MAX_SAMPLE_BLOCKS`] samples), one block per sample.
fn as_blocks(run: &[Second], seconds: usize) -> std::borrow::Cow<'_, [Second]> {
    let total: u64 = run.iter().map(samples).fold(0, u64::saturating_add);
    if seconds >= MIN_SECONDS || total > MAX_SAMPLE_BLOCKS {
        return std::borrow::Cow::Borrowed(run);
    }
    let mut blocks = Vec::with_capacity(total as usize);
    for s in run {
        for &(v, c) in s {
            for _ in 0..c {
                blocks.push(vec![(v, 1)]);
            }
        }
    }
    std::borrow::Cow::Owned(blocks)
}

/// One bootstrap replicate of a run: its seconds drawn with replacement, added, and `stat` of
/// the sum.
fn replicate(
    run: &Seconds,
    values: &[u64],
    dense: &mut [u64],
    stat: Statistic,
    rng: &mut ChaCha8Rng,
) -> f64 {
    dense.iter_mut().for_each(|c| *c = 0);
    let k = run.seconds.len();
    for _ in 0..k {
        for &(i, c) in &run.seconds[rng.random_range(0..k)] {
            dense[i as usize] += c;
        }
    }
    statistic(dense, values, stat)
}

/// `stat` of the distribution with `counts[i]` samples at `values[i]`.
fn statistic(counts: &[u64], values: &[u64], stat: Statistic) -> f64 {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return f64::NAN;
    }
    let nonzero = || counts.iter().zip(values).filter(|(c, _)| **c > 0);
    match stat {
        Statistic::Min => nonzero().next().map_or(f64::NAN, |(_, v)| *v as f64),
        Statistic::Max => nonzero().next_back().map_or(f64::NAN, |(_, v)| *v as f64),
        Statistic::Mean => {
            nonzero().map(|(c, v)| *c as f64 * *v as f64).sum::<f64>() / total as f64
        }
        Statistic::Quantile(q) => {
            // The smallest value with at least q of the samples at or below it, as
            // HdrHistogram's value_at_quantile reads it.
            let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
            let mut seen = 0;
            for (c, v) in nonzero() {
                seen += c;
                if seen >= rank {
                    return *v as f64;
                }
            }
            values.last().map_or(f64::NAN, |v| *v as f64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::new_histogram;

    /// `secs` seconds of `per_sec` samples around `center` µs, spread by a deterministic
    /// generator (a run's RTT as a busy loopback gives it: a body and a tail).
    fn run(seed: u64, secs: usize, per_sec: usize, center: u64, shift: u64) -> Vec<Second> {
        hists(seed, secs, per_sec, center, shift)
            .iter()
            .map(second_of)
            .collect()
    }

    fn hists(
        seed: u64,
        secs: usize,
        per_sec: usize,
        center: u64,
        shift: u64,
    ) -> Vec<Histogram<u64>> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..secs)
            .map(|_| {
                let mut h = new_histogram();
                // Some seconds are worse than others (the block effect).
                let second_extra = if rng.random_range(0..10) == 0 {
                    center
                } else {
                    0
                };
                for _ in 0..per_sec {
                    let tail = if rng.random_range(0..50) == 0 {
                        rng.random_range(0..center * 4)
                    } else {
                        0
                    };
                    let v = center / 2 + rng.random_range(0..center) + tail + second_extra + shift;
                    h.record(v.max(1)).unwrap();
                }
                h
            })
            .collect()
    }

    #[test]
    fn identical_scenarios_are_within_noise_and_a_real_shift_is_not() {
        // Ten "identical" runs (other seeds), compared pairwise at p99 with a 10 % limit:
        // none is significant, although their plain p99 differ by more than 10 %.
        let runs: Vec<_> = (0..10).map(|s| run(s, 20, 15, 200, 0)).collect();
        let totals: Vec<_> = (0..10).map(|s| hists(s, 20, 15, 200, 0)).collect();
        let p99 = Statistic::Quantile(0.99);
        let mut plain_over = 0;
        for (i, a) in runs.iter().enumerate() {
            for (j, b) in runs.iter().enumerate().skip(i + 1) {
                let total = |hs: &[Histogram<u64>]| {
                    let mut t = new_histogram();
                    hs.iter().for_each(|h| t.add(h).unwrap());
                    t.value_at_quantile(0.99) as f64
                };
                let (ta, tb) = (total(&totals[i]), total(&totals[j]));
                if tb - ta > ta * 0.10 {
                    plain_over += 1;
                }
                let Verdict::Interval { low, .. } = change_interval(a, b, p99, true) else {
                    panic!("20 seconds of 15 samples are enough");
                };
                assert!(
                    low <= ta * 0.10,
                    "identical runs significant: low {low} vs {ta}"
                );
            }
        }
        assert!(
            plain_over > 0,
            "the plain values must differ by >10 % somewhere for this test to mean anything"
        );
        // 2 ms added to every sample of ~0.2 ms: caught every time.
        for s in 0..10 {
            let base = run(100 + s, 20, 15, 200, 0);
            let new = run(200 + s, 20, 15, 200, 2_000);
            let Verdict::Interval { low, .. } = change_interval(&base, &new, p99, true) else {
                panic!("enough samples");
            };
            assert!(low > 1_000.0, "a 2 ms shift's lower bound {low}");
        }
    }

    #[test]
    fn too_few_samples_is_inconclusive_and_a_short_run_is_resampled_by_sample() {
        let a = run(1, 3, 100, 200, 0);
        let b = run(2, 30, 100, 200, 0);
        // Three seconds of 100 samples: resampled one by one; a 2 ms shift stands out.
        let shifted = run(3, 3, 100, 200, 2_000);
        let Verdict::Interval { low, .. } =
            change_interval(&a, &shifted, Statistic::Quantile(0.99), true)
        else {
            panic!("300 samples are enough");
        };
        assert!(low > 1_000.0, "{low}");
        assert!(matches!(
            change_interval(&a, &b, Statistic::Max, true),
            Verdict::Interval { .. }
        ));
        let few = run(3, 10, 2, 200, 0);
        assert!(matches!(
            change_interval(&b, &few, Statistic::Mean, true),
            Verdict::Inconclusive { samples: 20, .. }
        ));
    }

    #[test]
    fn statistics_of_a_dense_table() {
        let values = [10, 20, 30, 40];
        let counts = [1, 0, 2, 1];
        assert_eq!(statistic(&counts, &values, Statistic::Min), 10.0);
        assert_eq!(statistic(&counts, &values, Statistic::Max), 40.0);
        assert_eq!(statistic(&counts, &values, Statistic::Mean), 27.5);
        assert_eq!(statistic(&counts, &values, Statistic::Quantile(0.5)), 30.0);
        assert_eq!(statistic(&counts, &values, Statistic::Quantile(0.25)), 10.0);
        assert_eq!(statistic(&counts, &values, Statistic::Quantile(1.0)), 40.0);
    }
}
