//! An interrupted run's verdict (`interrupted: fail | pass` in a scenario).
//!
//! A run cut short by Ctrl-C or SIGTERM measured part of the load it was asked for: the
//! ramp may not have reached its top, and the later stages never ran. Its thresholds may all
//! hold on what did run, so without this a CI job cancelled five seconds in read `PASS`,
//! exit 0. The check below is one more row among the thresholds (so the terminal, junit.xml
//! and the report show it where they show every gate): failed by default, passed with
//! `interrupted: pass`, and absent from a run that lasted its duration.

use std::time::Duration;

use super::format::fmt_duration;
use super::summary::{Summary, ThresholdResult};
use crate::metrics::threshold::Interrupted;

/// The check's `metric`: the summary's own `duration_s`, the seconds that did run.
pub const METRIC: &str = "duration_s";

/// The check for an interrupted run that was planned to last `planned`, or `None` when it
/// was not interrupted.
pub fn check(s: &Summary, planned: Duration, policy: Interrupted) -> Option<ThresholdResult> {
    if !s.interrupted {
        return None;
    }
    let name = match policy {
        Interrupted::Fail => "fail",
        Interrupted::Pass => "pass",
    };
    Some(ThresholdResult {
        metric: METRIC.into(),
        condition: format!(
            "not interrupted: ran its whole {} (interrupted: {name})",
            fmt_duration(planned.as_secs_f64())
        ),
        observed: Some(s.duration_s),
        ok: policy == Interrupted::Pass,
        default: true,
        unmeasurable: None,
        skipped: false,
    })
}

/// Whether `t` is this check (not a threshold to parse again, in `merge`): no threshold a
/// scenario can write reads `duration_s`.
pub fn is_check(t: &ThresholdResult) -> bool {
    t.metric == METRIC
}

/// Add the check to an interrupted run's thresholds and judge the verdict again.
pub fn apply(s: &mut Summary, planned: Duration, policy: Interrupted) {
    if let Some(c) = check(s, planned, policy) {
        s.thresholds.push(c);
        s.verdict = super::summary::verdict_of(&s.thresholds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interrupted_at(secs: f64) -> Summary {
        Summary {
            interrupted: true,
            duration_s: secs,
            verdict: "pass".into(),
            ..Summary::default()
        }
    }

    #[test]
    fn an_interrupted_run_fails_by_default_and_says_how_far_it_got() {
        let mut s = interrupted_at(5.0);
        apply(&mut s, Duration::from_secs(30), Interrupted::default());
        assert_eq!(s.verdict, "fail");
        let c = &s.thresholds[0];
        assert_eq!(
            c.condition,
            "not interrupted: ran its whole 30.0 s (interrupted: fail)"
        );
        assert_eq!(c.observed, Some(5.0));
        assert!(!c.ok && c.default && is_check(c));
    }

    #[test]
    fn interrupted_pass_leaves_the_verdict_to_the_thresholds() {
        let mut s = interrupted_at(5.0);
        apply(&mut s, Duration::from_secs(30), Interrupted::Pass);
        assert_eq!(s.verdict, "pass");
        assert!(s.thresholds[0].ok);
        assert!(s.thresholds[0].condition.ends_with("(interrupted: pass)"));
    }

    #[test]
    fn a_run_that_lasted_its_duration_gets_no_check() {
        let mut s = interrupted_at(30.0);
        s.interrupted = false;
        apply(&mut s, Duration::from_secs(30), Interrupted::Fail);
        assert!(s.thresholds.is_empty());
        assert_eq!(s.verdict, "pass");
    }
}
