//! Is a change between two runs beyond run-to-run noise? A permutation test over seconds,
//! with the runs' drift folded in.
//!
//! Two back-to-back runs of one scenario against one server differ: RTT p99 read 169 µs and
//! 281 µs from 223 samples each (+66 %), so a gate with a 10 % limit failed identical runs.
//! A gate that fails on noise is switched off by its users. `tickswarm compare` therefore
//! claims a regression only when the change is beyond what run-to-run noise explains.
//!
//! # Method
//! The unit that is shuffled is one second of a run (its histogram of samples), not a sample:
//! samples within a second are correlated (a GC pause, a scheduler hiccup, a burst of loss
//! hits many at once), seconds much less so. The null hypothesis is "the new run is exactly
//! as much worse as the limit allows": the new run's values are moved back by the allowance
//! (a statistic of a shifted distribution moves by the shift), both runs' seconds are pooled,
//! and [`REPLICATES`] times they are dealt at random into a "base" and a "new" of the runs'
//! sizes and the statistic's change taken. To each such change a draw of the runs' *drift*
//! is added: a second-by-second shuffle takes every second as alike, but a whole run can sit
//! higher than another (the load machine busier for a while). How much a run's statistic
//! moves with time is read from the run itself: each run is cut into [`DRIFT_BLOCKS`] blocks
//! of consecutive seconds, and the variance `s²` of the statistic over a run's blocks
//! (pooled over both runs) says how far conditions wander; a whole run averages its `k`
//! blocks, so two whole runs differ with a variance of about `2 s² / k`, and the draw is that
//! spread times Student's t with the pooled degrees of freedom (`2 (k - 1)`, 6 for two runs
//! of eight seconds or more). Both the shuffle and the blocks see the sampling noise, so the
//! two together are cautious on purpose.
//! The p-value is the share of replicates at least as far past the allowance as the runs
//! themselves; the seed is fixed, so the same two runs always get the same verdict.
//! Changes and drift are measured as ratios (`ln(1 + stat)`): latency noise is
//! multiplicative, a busy machine stretching every delay, so a ratio compares a 50 µs median
//! and a 5 ms tail on one scale.
//!
//! A percentile from a few hundred samples is decided by its few highest: a run that
//! happened to see no scheduler hiccup has a p99 far below its neighbour's, and resampling
//! that run alone can never show the hiccups it missed. Shuffling the pooled seconds can,
//! which is why this is a permutation test rather than a bootstrap of each run.
//!
//! # Several base runs
//! With more than one base run (`compare --base A --base B ... NEW`) the base is their seconds
//! pooled, and how far whole runs wander is also read across them: the variance `s²` of the
//! statistic over the `k` base runs, and the new run is one more run against the mean of `k`,
//! so a difference of about `s² (1 + 1/k)`, with `k - 1` degrees of freedom. Of that and the
//! blocks' estimate (now `pooled / blocks × (1 + 1/k)`), the larger is drawn: a level shift
//! between runs that no run shows inside itself (the machine busier on another day) is then
//! measured, not assumed away, so the gate adapts to the noise the runs really have.
//!
//! `compare` tests every limited histogram row this way and corrects for testing several at
//! once (Holm's step-down procedure, see `report::compare`): the chance that identical runs
//! fail any row stays at `1 - CONFIDENCE`.
//!
//! # What it cannot tell
//! With fewer than [`MIN_SAMPLES`] samples in either run the comparison is *inconclusive* and
//! says so (it is not counted as a regression; the plain values are shown). A run with fewer
//! than [`MIN_SECONDS`] seconds holding samples is shuffled sample by sample instead, and has
//! no halves to measure drift with: that takes its samples as independent, which they are
//! not quite, so a short run's test is less cautious (a run of a few seconds is a smoke test,
//! not a measurement). Two runs that each sat steady at their own level (one on an idle
//! machine, one on a busy one) look like a server change: no test on one run each can tell
//! them apart, so run base and candidate under like conditions.

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Shuffles per test: p-values down to 1/2001, below the strictest level Holm's procedure asks
/// of a handful of limits.
pub const REPLICATES: usize = 2000;
/// One-sided confidence of a claimed regression (for all limited rows of a comparison
/// together).
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
    /// In time order.
    seconds: Vec<Vec<(u32, u64)>>,
    /// The blocks are single samples (a run of fewer than [`MIN_SECONDS`] seconds).
    by_sample: bool,
}

/// What the test said about a change.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Too few seconds or samples to test.
    Inconclusive {
        seconds: usize,
        samples: u64,
    },
    Tested(Tested),
}

/// A change that could be tested.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tested {
    /// The chance of a change at least this far past the allowance if the new run were only
    /// as much worse as allowed (see the module docs).
    pub p: f64,
    /// `stat(new) - stat(base)` of the runs as they are.
    pub change: f64,
    /// The spread of a whole-run difference that the runs' drift explains, on the test's
    /// ratio scale (`ln(1 + stat)`; 0.1 is about 10 %); 0 for runs too short to cut in
    /// blocks.
    pub drift_sd: f64,
    /// Base runs pooled (1 for a plain `compare BASE NEW`).
    pub bases: usize,
    /// The drift was read across the base runs (their spread was the larger), not within
    /// the runs.
    pub drift_between_runs: bool,
}

/// One standard normal draw (Box-Muller).
fn normal_draw(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
    let u2: f64 = rng.random_range(0.0..1.0);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// One draw of Student's t with `df` degrees of freedom: `Z / sqrt(χ²_df / df)`.
fn t_draw(df: usize, rng: &mut ChaCha8Rng) -> f64 {
    let z = normal_draw(rng);
    let chi2: f64 = (0..df).map(|_| normal_draw(rng).powi(2)).sum();
    z / (chi2 / df as f64).sqrt()
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

/// Test whether `new` is worse than `base` by more than `allowed` (in the statistic's unit;
/// worse is higher when `higher_is_worse`). Each slice holds a run's seconds of one metric,
/// in time order (empty seconds are skipped).
pub fn test_change(
    base: &[Second],
    new: &[Second],
    stat: Statistic,
    higher_is_worse: bool,
    allowed: f64,
) -> Verdict {
    test_change_from(&[base], new, stat, higher_is_worse, allowed)
}

/// [`test_change`] against several base runs (see the module docs: their seconds pooled, and
/// their spread as one more measure of the drift between whole runs).
pub fn test_change_from(
    bases: &[&[Second]],
    new: &[Second],
    stat: Statistic,
    higher_is_worse: bool,
    allowed: f64,
) -> Verdict {
    let runs = bases.len().max(1);
    let base_owned: Vec<Second>;
    let base: &[Second] = match bases {
        [one] => one,
        many => {
            base_owned = many.iter().flat_map(|r| r.iter().cloned()).collect();
            &base_owned
        }
    };
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
    // A short run has too few seconds to shuffle: its samples are shuffled one by one
    // (which takes them as independent, so it is less cautious; see the module docs).
    let (base_by_sample, new_by_sample) = (by_sample(base, bs), by_sample(new, ns));
    let (base, new) = (as_blocks(base, bs), as_blocks(new, ns));
    let (base, new) = (base.as_ref(), new.as_ref());
    // The null: the new run worse by exactly the allowance. Its values moved back by it.
    let shift = if higher_is_worse { -allowed } else { allowed };
    // The distinct values of both runs (the new run's as they are and moved), ascending: a
    // replicate's histogram is a dense count per value.
    let mut values: Vec<f64> = base
        .iter()
        .flat_map(|h| h.iter().map(|c| c.0 as f64))
        .chain(
            new.iter()
                .flat_map(|h| h.iter().flat_map(|c| [c.0 as f64, c.0 as f64 + shift])),
        )
        .collect();
    values.sort_unstable_by(f64::total_cmp);
    values.dedup();
    let index = |v: f64| values.binary_search_by(|x| x.total_cmp(&v)).ok();
    let sparse = |hs: &[Second], by_sample: bool, by: f64| Seconds {
        by_sample,
        seconds: hs
            .iter()
            .filter(|h| samples(h) > 0)
            .map(|h| {
                h.iter()
                    .filter_map(|&(value, c)| Some((index(value as f64 + by)? as u32, c)))
                    .collect()
            })
            .collect(),
    };
    let b = sparse(base, base_by_sample, 0.0);
    let n = sparse(new, new_by_sample, 0.0);
    let moved = sparse(new, new_by_sample, shift);
    let mut dense = vec![0u64; values.len()];
    let mut whole = |run: &[Vec<(u32, u64)>]| {
        add_up(run.iter(), &mut dense);
        statistic(&dense, &values, stat)
    };
    let change = whole(&n.seconds) - whole(&b.seconds);
    let worse = |d: f64| if higher_is_worse { d } else { -d };
    // How far past the allowance the runs are: moved back by it, the new run's excess, as a
    // ratio (see `scale`).
    let observed = worse(scale(whole(&moved.seconds)) - scale(whole(&b.seconds)));
    // Each run's blocks of consecutive seconds: the spread of their statistic, pooled.
    // (Several base runs: each cut on its own, so no block spans two runs.)
    let spreads: Vec<(f64, usize)> = if runs == 1 {
        vec![block_spread(&b, &values, stat)]
    } else {
        bases
            .iter()
            .map(|r| {
                let one = sparse(r, by_sample(r, count(r).0), 0.0);
                block_spread(&one, &values, stat)
            })
            .collect()
    };
    let (sn_, kn) = block_spread(&n, &values, stat);
    let df_within: usize = spreads
        .iter()
        .chain([(sn_, kn)].iter())
        .map(|(_, k)| k.saturating_sub(1))
        .sum();
    // The new run is one run against the mean of `runs`: (1 + 1/runs) of a run's variance
    // (twice it for one base run, as before).
    let against = 1.0 + 1.0 / runs as f64;
    let within = (df_within > 0).then(|| {
        let pooled = spreads
            .iter()
            .chain([(sn_, kn)].iter())
            .map(|(v, k)| v * k.saturating_sub(1) as f64)
            .sum::<f64>()
            / df_within as f64;
        // A whole run averages its k blocks (variance s²/k).
        let blocks = spreads.iter().map(|s| s.1).sum::<usize>() + kn;
        let k = (blocks as f64 / (spreads.len() + 1) as f64).max(1.0);
        (pooled / k * against, df_within)
    });
    // Several base runs: the spread of their whole-run statistics, measured.
    let between = (runs >= 2).then(|| {
        let stats: Vec<f64> = bases
            .iter()
            .map(|r| {
                let one = sparse(r, false, 0.0);
                add_up(one.seconds.iter(), &mut dense);
                scale(statistic(&dense, &values, stat))
            })
            .filter(|v| v.is_finite())
            .collect();
        let mean = stats.iter().sum::<f64>() / stats.len().max(1) as f64;
        let var = stats.iter().map(|v| (v - mean).powi(2)).sum::<f64>()
            / stats.len().saturating_sub(1).max(1) as f64;
        (var * against, stats.len().saturating_sub(1).max(1))
    });
    let (drift_var, df, drift_between_runs) = match (within, between) {
        (Some(w), Some(b)) if b.0 > w.0 => (b.0, b.1, true),
        (None, Some(b)) => (b.0, b.1, true),
        (Some(w), _) => (w.0, w.1, false),
        (None, None) => (0.0, 1, false),
    };
    let drift_sd = drift_var.sqrt();
    // Shuffle the pooled seconds into a "base" and a "new" of the runs' sizes.
    let pooled: Vec<&Vec<(u32, u64)>> = b.seconds.iter().chain(&moved.seconds).collect();
    let k = b.seconds.len();
    let mut order: Vec<usize> = (0..pooled.len()).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(0x7469_636b_7377_6172); // "tickswar"
    let mut as_far = 0usize;
    for _ in 0..REPLICATES {
        // A partial Fisher-Yates: the first k of `order` are the "base".
        for i in 0..k.min(pooled.len().saturating_sub(1)) {
            let j = rng.random_range(i..pooled.len());
            order.swap(i, j);
        }
        add_up(order[..k].iter().map(|&i| pooled[i]), &mut dense);
        let sb = statistic(&dense, &values, stat);
        add_up(order[k..].iter().map(|&i| pooled[i]), &mut dense);
        let sn = statistic(&dense, &values, stat);
        let replicate = worse(scale(sn) - scale(sb)) + drift_sd * t_draw(df, &mut rng);
        if replicate >= observed {
            as_far += 1;
        }
    }
    Verdict::Tested(Tested {
        p: (as_far + 1) as f64 / (REPLICATES + 1) as f64,
        change,
        drift_sd,
        bases: runs,
        drift_between_runs,
    })
}

/// Where the test measures changes: `ln(1 + x)`, so a change is a ratio. Latency noise is
/// multiplicative (a busy machine stretches every delay, a 3 ms p99 moves by milliseconds
/// where a 50 µs p50 moves by microseconds), and one run's drift and the change between runs
/// compare on one scale whatever the metric's level. A statistic below 0 (a value moved back
/// by an allowance larger than itself) counts as 0.
fn scale(x: f64) -> f64 {
    x.max(0.0).ln_1p()
}

/// Blocks of consecutive seconds a run is cut into to see its drift: up to this many, of at
/// least two seconds each.
pub const DRIFT_BLOCKS: usize = 4;

/// A run cut into `k` blocks of consecutive seconds ([`DRIFT_BLOCKS`] at most, two seconds
/// each at least): the sample variance of `scale(stat)` over its blocks, and `k`. `(0, 0)`
/// for a run shuffled by sample or with fewer than four seconds.
fn block_spread(run: &Seconds, values: &[f64], stat: Statistic) -> (f64, usize) {
    let n = run.seconds.len();
    let k = (n / 2).min(DRIFT_BLOCKS);
    if run.by_sample || k < 2 {
        return (0.0, 0);
    }
    let mut dense = vec![0u64; values.len()];
    let stats: Vec<f64> = (0..k)
        .map(|j| {
            add_up(run.seconds[j * n / k..(j + 1) * n / k].iter(), &mut dense);
            scale(statistic(&dense, values, stat))
        })
        .filter(|v| v.is_finite())
        .collect();
    if stats.len() < 2 {
        return (0.0, 0);
    }
    let mean = stats.iter().sum::<f64>() / stats.len() as f64;
    let var = stats.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (stats.len() - 1) as f64;
    (var, stats.len())
}

/// `dense` := the sum of `seconds`.
fn add_up<'a>(seconds: impl Iterator<Item = &'a Vec<(u32, u64)>>, dense: &mut [u64]) {
    dense.iter_mut().for_each(|c| *c = 0);
    for s in seconds {
        for &(i, c) in s {
            dense[i as usize] += c;
        }
    }
}

/// The run's blocks for resampling: its seconds, or, with fewer than [`MIN_SECONDS`] of them
/// (and at most [`MAX_SAMPLE_BLOCKS`] samples), one block per sample.
fn as_blocks(run: &[Second], seconds: usize) -> std::borrow::Cow<'_, [Second]> {
    if !by_sample(run, seconds) {
        return std::borrow::Cow::Borrowed(run);
    }
    let total: u64 = run.iter().map(samples).fold(0, u64::saturating_add);
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

/// Whether [`as_blocks`] resamples this run sample by sample.
fn by_sample(run: &[Second], seconds: usize) -> bool {
    let total: u64 = run.iter().map(samples).fold(0, u64::saturating_add);
    seconds < MIN_SECONDS && total <= MAX_SAMPLE_BLOCKS
}

/// `stat` of the distribution with `counts[i]` samples at `values[i]`.
fn statistic(counts: &[u64], values: &[f64], stat: Statistic) -> f64 {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return f64::NAN;
    }
    let nonzero = || counts.iter().zip(values).filter(|(c, _)| **c > 0);
    match stat {
        Statistic::Min => nonzero().next().map_or(f64::NAN, |(_, v)| *v),
        Statistic::Max => nonzero().next_back().map_or(f64::NAN, |(_, v)| *v),
        Statistic::Mean => nonzero().map(|(c, v)| *c as f64 * *v).sum::<f64>() / total as f64,
        Statistic::Quantile(q) => {
            // The smallest value with at least q of the samples at or below it, as
            // HdrHistogram's value_at_quantile reads it.
            let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
            let mut seen = 0;
            for (c, v) in nonzero() {
                seen += c;
                if seen >= rank {
                    return *v;
                }
            }
            values.last().copied().unwrap_or(f64::NAN)
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

    fn p_of(v: Verdict) -> f64 {
        match v {
            Verdict::Tested(t) => t.p,
            other => panic!("enough samples to test: {other:?}"),
        }
    }

    #[test]
    fn identical_scenarios_are_within_noise_and_a_real_shift_is_not() {
        // Ten "identical" runs (other seeds), compared pairwise at p99 with a 10 % limit: at
        // 95 % about one pair in twenty may be significant by chance, no more, although their
        // plain p99 differ by more than 10 % in many pairs.
        let runs: Vec<_> = (0..10).map(|s| run(s, 20, 15, 200, 0)).collect();
        let totals: Vec<_> = (0..10).map(|s| hists(s, 20, 15, 200, 0)).collect();
        let p99 = Statistic::Quantile(0.99);
        let (mut plain_over, mut significant) = (0, 0);
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
                if p_of(test_change(a, b, p99, true, ta * 0.10)) <= 1.0 - CONFIDENCE {
                    significant += 1;
                }
            }
        }
        assert!(
            plain_over >= 10,
            "the plain values must differ by >10 % often for this test to mean anything: {plain_over}"
        );
        assert!(
            significant <= 2,
            "{significant} of 45 identical pairs significant"
        );
        // 2 ms added to every sample of ~0.2 ms: caught every time, far beyond 95 % (the
        // runs' worse seconds, a tenth of them, are drift the test allows for).
        for s in 0..10 {
            let base = run(100 + s, 20, 15, 200, 0);
            let new = run(200 + s, 20, 15, 200, 2_000);
            let p = p_of(test_change(&base, &new, p99, true, 20.0));
            assert!(p < 0.01, "a 2 ms shift: p {p}");
        }
    }

    /// Runs that each sit at a level of their own (the machine busier on one day than
    /// another): within a run the level does not drift, so against one base run another
    /// run's level reads as a change; several base runs show how far levels wander, and the
    /// test widens by it. A change far beyond that spread is still caught.
    #[test]
    fn several_base_runs_measure_how_far_whole_runs_wander() {
        let p50 = Statistic::Quantile(0.5);
        // Run r's body around its own level: 200 to 300 µs.
        let level = |r: u64| 200 + (r * 37 % 11) * 10;
        let bases: Vec<Vec<Second>> = (0..8).map(|r| run(r, 20, 30, level(r), 0)).collect();
        let base_refs: Vec<&[Second]> = bases.iter().map(Vec::as_slice).collect();
        let allowed = level(0) as f64 * 0.05;
        let (mut alone, mut pooled) = (0, 0);
        for r in 8..28 {
            let new = run(r, 20, 30, level(r), 0);
            if p_of(test_change(&bases[0], &new, p50, true, allowed)) <= 1.0 - CONFIDENCE {
                alone += 1;
            }
            if p_of(test_change_from(&base_refs, &new, p50, true, allowed)) <= 1.0 - CONFIDENCE {
                pooled += 1;
            }
        }
        // Deterministic (fixed seeds): 6 of 20 against one base run, 1 against eight.
        assert!(
            alone >= 5,
            "one base run alone must be fooled here: {alone} of 20"
        );
        assert!(
            pooled <= 1,
            "{pooled} of 20 like runs significant against 8 bases"
        );
        // The body twice as slow: caught, and the drift is read from the bases' spread.
        let slow = run(30, 20, 30, level(30), level(30));
        match test_change_from(&base_refs, &slow, p50, true, allowed) {
            Verdict::Tested(t) => {
                assert!(t.p < 0.01, "a doubling: p {}", t.p);
                assert_eq!(t.bases, 8);
                assert!(t.drift_between_runs, "{t:?}");
            }
            other => panic!("testable: {other:?}"),
        }
    }

    #[test]
    fn one_base_run_given_as_a_list_is_the_plain_test() {
        let p99 = Statistic::Quantile(0.99);
        let (a, b) = (run(1, 20, 15, 200, 0), run(2, 20, 15, 200, 150));
        assert_eq!(
            test_change(&a, &b, p99, true, 20.0),
            test_change_from(&[&a], &b, p99, true, 20.0)
        );
    }

    /// A run that happened to miss the rare slow seconds its neighbour had: its own seconds
    /// can never show them, the pooled seconds can. Not significant.
    #[test]
    fn a_run_that_missed_the_rare_hiccups_is_not_a_regression_of_the_other() {
        let quiet: Vec<Second> = (0..8).map(|_| vec![(200, 45)]).collect();
        let mut bumpy = quiet.clone();
        bumpy[3] = vec![(200, 43), (4_000, 2)];
        bumpy[6] = vec![(200, 43), (5_000, 2)];
        let p99 = Statistic::Quantile(0.99);
        // p99 of 360 samples: 200 µs in the quiet run, 4 ms in the bumpy one.
        let p = p_of(test_change(&quiet, &bumpy, p99, true, 20.0));
        assert!(p > 1.0 - CONFIDENCE, "p {p}");
        // The same four slow samples in every second: that is a change.
        let slow: Vec<Second> = (0..8).map(|_| vec![(200, 41), (4_000, 4)]).collect();
        let p = p_of(test_change(&quiet, &slow, p99, true, 20.0));
        assert!(p < 0.01, "p {p}");
    }

    /// A run whose second half sits higher than its first (the machine got busier) widens
    /// the test by that drift.
    #[test]
    fn drift_within_a_run_widens_the_test() {
        let steady: Vec<Second> = (0..10).map(|_| vec![(100, 50)]).collect();
        let drifting: Vec<Second> = (0..10)
            .map(|i| vec![(if i < 5 { 100 } else { 160 }, 50)])
            .collect();
        let Verdict::Tested(t) = test_change(&steady, &drifting, Statistic::Mean, true, 10.0)
        else {
            panic!("enough samples");
        };
        // Blocks of 100, 100, 160, 160 in one run, all 100 in the other: s² pooled over 6
        // degrees of freedom, a whole-run difference's spread sqrt(2 s² / 4).
        let d = (161.0f64 / 101.0).ln();
        let s2 = 4.0 * (d / 2.0).powi(2) / 3.0 / 2.0;
        assert!(
            (t.drift_sd - (2.0 * s2 / 4.0).sqrt()).abs() < 1e-12,
            "{t:?}"
        );
        assert_eq!(t.change, 30.0);
        assert!(t.p > 1.0 - CONFIDENCE, "{t:?}");
    }

    #[test]
    fn too_few_samples_is_inconclusive_and_a_short_run_is_shuffled_by_sample() {
        let a = run(1, 3, 100, 200, 0);
        let b = run(2, 30, 100, 200, 0);
        // Three seconds of 100 samples: shuffled one by one; a 2 ms shift stands out.
        let shifted = run(3, 3, 100, 200, 2_000);
        let p = p_of(test_change(
            &a,
            &shifted,
            Statistic::Quantile(0.99),
            true,
            20.0,
        ));
        assert!(p < 0.001, "{p}");
        assert!(matches!(
            test_change(&a, &b, Statistic::Max, true, 0.0),
            Verdict::Tested(_)
        ));
        let few = run(3, 10, 2, 200, 0);
        assert!(matches!(
            test_change(&b, &few, Statistic::Mean, true, 0.0),
            Verdict::Inconclusive { samples: 20, .. }
        ));
    }

    #[test]
    fn statistics_of_a_dense_table() {
        let values = [10.0, 20.0, 30.0, 40.0];
        let counts = [1, 0, 2, 1];
        assert_eq!(statistic(&counts, &values, Statistic::Min), 10.0);
        assert_eq!(statistic(&counts, &values, Statistic::Max), 40.0);
        assert_eq!(statistic(&counts, &values, Statistic::Mean), 27.5);
        assert_eq!(statistic(&counts, &values, Statistic::Quantile(0.5)), 30.0);
        assert_eq!(statistic(&counts, &values, Statistic::Quantile(0.25)), 10.0);
        assert_eq!(statistic(&counts, &values, Statistic::Quantile(1.0)), 40.0);
    }
}
