//! `abort_on_fail:`: a run that stops itself when a threshold fails for a sustained span
//! (k6's `abortOnFail` with `delayAbortEval`), so a broken staging server is not loaded to
//! the end of the run.
//!
//! Each whole second is judged on its own figures (its histograms, its loss counts, its
//! snapshot rate); a threshold that fails in `after` consecutive seconds stops the run. Only
//! figures a second holds are judged that way: time percentiles, loss and the snapshot rate.
//! Counts over the run (`bots_failed`), the server's scraped series and a group's figures
//! wait for the run's end, as always.

use serde::{Deserialize, Serialize};

use super::format::{fmt_unit, metric_unit};
use crate::metrics::threshold::{Metric, Threshold};
use crate::metrics::{IntervalPoint, Recorder};

/// Why a run stopped early (summary.json `aborted`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Aborted {
    /// The threshold, as written.
    pub condition: String,
    /// Seconds in a row it failed.
    pub seconds: u64,
    /// Seconds since the start: the end of the last of them, when the run was stopped.
    pub at_s: f64,
    /// Its figure in that last second.
    pub observed: f64,
}

impl Aborted {
    /// As the console says it.
    pub fn describe(&self) -> String {
        format!(
            "`{}` failed {} s in a row (last {}); the run was stopped at {} s",
            self.condition,
            self.seconds,
            fmt_unit(
                metric_unit(
                    &Threshold::parse(&self.condition)
                        .map(|t| t.path())
                        .unwrap_or_default()
                ),
                self.observed
            ),
            self.at_s
        )
    }
}

/// Judges each second and says when to stop.
pub struct AbortJudge {
    after: u64,
    /// The thresholds a second can judge, and how many seconds in a row each failed.
    watched: Vec<(Threshold, u64)>,
    fired: Option<Aborted>,
}

/// A threshold's figure in one second, when a second holds it.
fn observe_second(metric: Metric, rec: &Recorder, p: &IntervalPoint) -> Option<f64> {
    match metric {
        Metric::Time(m, st) => st.of(rec.time_histogram(m)),
        Metric::DownstreamLoss => (rec.loss_down.expected > 0).then(|| rec.loss_down.rate()),
        Metric::UpstreamLoss => (rec.loss_up.expected > 0).then(|| rec.loss_up.rate()),
        // The second's own rate; min, mean, median and max of one second are that rate.
        Metric::SnapshotRate(_) => p.snapshot_rate.hz(),
        _ => None,
    }
}

/// Whether a second can judge `metric` at all.
fn judged_by_the_second(metric: Metric) -> bool {
    matches!(
        metric,
        Metric::Time(..) | Metric::DownstreamLoss | Metric::UpstreamLoss | Metric::SnapshotRate(_)
    )
}

impl AbortJudge {
    /// `after`: seconds in a row (at least 1); `thresholds`: the run's, of which those a
    /// second can judge (and not a group's) are watched.
    pub fn new(thresholds: &[Threshold], after: std::time::Duration) -> Self {
        Self {
            after: after.as_secs().max(1),
            watched: thresholds
                .iter()
                .filter(|t| t.group.is_none() && judged_by_the_second(t.metric))
                .map(|t| (t.clone(), 0))
                .collect(),
            fired: None,
        }
    }

    /// One whole second; `Some` (once) when a threshold has now failed `after` seconds in a
    /// row. A second without the figure (no sample) neither fails nor clears it.
    pub fn second(&mut self, p: &IntervalPoint, rec: &Recorder) -> Option<&Aborted> {
        if self.fired.is_some() || p.partial {
            return None;
        }
        for (t, run) in &mut self.watched {
            let Some(v) = observe_second(t.metric, rec, p) else {
                continue;
            };
            if t.op.holds(v, t.limit) {
                *run = 0;
                continue;
            }
            *run += 1;
            if *run >= self.after && self.fired.is_none() {
                self.fired = Some(Aborted {
                    condition: t.text.clone(),
                    seconds: *run,
                    at_s: p.t,
                    observed: v,
                });
            }
        }
        self.fired.as_ref()
    }

    /// What stopped the run, if anything did.
    pub fn fired(self) -> Option<Aborted> {
        self.fired
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn second(t: u64, rtt_us: u64, lost: u64) -> (IntervalPoint, Recorder) {
        let mut rec = Recorder::new();
        for _ in 0..100 {
            rec.record_rtt(rtt_us);
        }
        rec.loss_down.add(100, 100 - lost);
        let p = IntervalPoint {
            t: t as f64,
            ..IntervalPoint::default()
        };
        (p, rec)
    }

    fn judge(after: u64) -> AbortJudge {
        let ths: Vec<Threshold> = ["rtt p99 < 50ms", "downstream_loss < 5%", "bots_failed <= 0"]
            .iter()
            .map(|t| Threshold::parse(t).unwrap())
            .collect();
        AbortJudge::new(&ths, Duration::from_secs(after))
    }

    #[test]
    fn a_sustained_breach_stops_the_run_and_a_short_one_does_not() {
        let mut j = judge(3);
        let seconds = [
            second(1, 1_000, 0),
            second(2, 90_000, 0), // one bad second
            second(3, 1_000, 0),
            second(4, 1_000, 10), // loss from here on
            second(5, 1_000, 10),
        ];
        for (p, r) in &seconds {
            assert!(j.second(p, r).is_none(), "stopped at {}", p.t);
        }
        let (p, r) = second(6, 1_000, 10);
        let a = j.second(&p, &r).cloned().expect("stopped");
        assert_eq!(a.condition, "downstream_loss < 5%");
        assert_eq!((a.seconds, a.at_s), (3, 6.0));
        assert!((a.observed - 0.10).abs() < 1e-12);
        // Once only.
        let (p, r) = second(7, 1_000, 10);
        assert!(j.second(&p, &r).is_none());
        assert!(j.fired().is_some());
    }

    #[test]
    fn a_second_without_samples_neither_fails_nor_clears() {
        let mut j = judge(2);
        let (p, r) = second(1, 90_000, 0);
        assert!(j.second(&p, &r).is_none());
        let empty = Recorder::new();
        let q = IntervalPoint {
            t: 2.0,
            ..IntervalPoint::default()
        };
        assert!(j.second(&q, &empty).is_none());
        let (p, r) = second(3, 90_000, 0);
        assert_eq!(
            j.second(&p, &r).map(|a| a.condition.as_str()),
            Some("rtt p99 < 50ms")
        );
    }
}
