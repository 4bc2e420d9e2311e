//! A capacity search's result as the reports read it: the answer in words ([`conclude`]),
//! and a step's window judged on the objectives ([`judge_window`]). The fixed staircase that
//! the shards of one search follow is summary.json's ([`Staircase`]); from its per-step
//! windows `merge` computes the one answer ([`super::merge::staircase`]).
//!
//! Below `merge` and above [`super::build`] (which judges a threshold) and
//! [`super::groups`] (a window is read as a group is).
//!
//! A search on one machine adapts: each step's population depends on the verdicts before it.
//! Shards on several machines cannot agree on a verdict while they run, so a sharded search
//! is a staircase fixed in advance (`start`, grown by `step` up to `max_players`, every step
//! at the same offsets from one shared start time). Each shard runs its slice of every step
//! and keeps each step's window: its counters and histograms, exactly as a group's are kept
//! (see [`super::groups`]), and the server series it scraped over the window. Merge adds the
//! shards' windows step by step and judges each merged window on the scenario's objectives,
//! so a step's verdict is that of every bot of the step, and its percentiles are those of all
//! its samples, not an average of the shards' percentiles.

use std::time::Duration;

use super::build::{evaluate_with, quantile_of};
use super::groups::{as_summary, time_histogram};
#[cfg(doc)]
use super::summary::Staircase;
use super::summary::{GroupSummary, Summary};
use crate::duration::format_duration;
use crate::metrics::capacity::{Capacity, CapacityLimit, CapacityStep, ObjectiveResult};
use crate::metrics::server_series::ServerMetrics;
use crate::metrics::threshold::{TimeMetric, Unmeasurable};
use crate::metrics::{Metric, Threshold};

/// How far apart (seconds) the shards' windows of one step may start and still be one step:
/// shards start each step at the same planned instant; one that ran late measured another
/// load.
pub const MAX_WINDOW_SKEW_S: f64 = 1.0;

/// A step's verdict as written in [`CapacityStep::verdict`].
pub mod verdict {
    pub const HELD: &str = "held";
    pub const BROKE: &str = "broke";
    pub const LOAD_MACHINE: &str = "load_machine";
    pub const INCONCLUSIVE: &str = "inconclusive";
}

/// The answer, in figures and in words, from how a search ended and its steps.
pub struct Conclusion<'a> {
    pub players: Option<u64>,
    pub interval: [Option<u64>; 2],
    pub limit: Option<CapacityLimit>,
    pub resolution: f64,
    /// The population of the first step planned (for "below N" when none held).
    pub start: u64,
    pub elapsed: Duration,
    /// Why the search ended early, when it did.
    pub note: Option<&'a str>,
}

/// summary.json's `capacity` block from a search's end and its steps.
pub fn conclude(c: Conclusion<'_>, steps: Vec<CapacityStep>) -> Capacity {
    let Conclusion {
        players,
        interval,
        limit,
        ..
    } = c;
    // The objectives the smallest broken step failed.
    let first_broken = steps
        .iter()
        .filter(|s| s.verdict == verdict::BROKE)
        .min_by_key(|s| s.players);
    let limiting: Vec<String> = first_broken
        .map(|s| {
            s.objectives
                .iter()
                .filter(|o| !o.ok)
                .map(|o| o.condition.clone())
                .collect()
        })
        .unwrap_or_default();
    let took = format_duration(Duration::from_secs(c.elapsed.as_secs()));
    let answer = match (limit, players) {
        (Some(CapacityLimit::Server), Some(p)) => format!(
            "capacity {p} players ({}); first to break: {} at {} players; {took}",
            match interval[1] {
                Some(h) if h > p => format!("interval {p}–{h}"),
                _ => "exact: one more broke".to_string(),
            },
            limiting.join(", "),
            first_broken.map_or(0, |s| s.players),
        ),
        (Some(CapacityLimit::LoadMachine), p) => format!(
            "capacity at least {} players (the load machine's limit); the server held every \
             objective up to there; {took}",
            p.unwrap_or(0)
        ),
        (Some(CapacityLimit::MaxPlayers), Some(p)) => format!(
            "capacity at least {p} players (capacity.max_players); the server held every \
             objective; {took}"
        ),
        (Some(CapacityLimit::BelowStart), _) | (_, None) => format!(
            "capacity below {} players: the smallest step tried broke {}; {took}",
            steps.iter().map(|s| s.players).min().unwrap_or(c.start),
            if limiting.is_empty() {
                "its objectives".to_string()
            } else {
                limiting.join(", ")
            }
        ),
        (_, Some(p)) => format!(
            "capacity between {p} and {} players, unfinished ({}); {took}",
            interval[1].map_or("?".into(), |h| h.to_string()),
            c.note.unwrap_or("the search ended early")
        ),
    };
    Capacity {
        players,
        interval,
        limit,
        limiting,
        resolution: c.resolution,
        elapsed_s: c.elapsed.as_secs_f64(),
        steps,
        answer,
    }
}

/// A metric a staircase can judge on a step's merged window: the figures a window keeps
/// (its counters and histograms, and the server's series over it). The snapshot rate is a
/// per-second series of the whole run and has no merged window figure.
pub fn judged_on_windows(m: Metric) -> bool {
    !matches!(m, Metric::SnapshotRate(_) | Metric::Capacity)
}

/// Judge `objectives` on one window: its figures, histograms and the server's series.
pub fn judge_window(
    objectives: &[Threshold],
    window: &GroupSummary,
    server_metrics: Option<&ServerMetrics>,
) -> Vec<ObjectiveResult> {
    let mut s: Summary = as_summary(window);
    s.server_metrics = server_metrics.cloned();
    let exact =
        |tm: TimeMetric, q: f64| time_histogram(window, tm).and_then(|h| quantile_of(&h, q));
    objectives
        .iter()
        .map(|th| {
            let r = evaluate_with(th, &s, &exact, None, Unmeasurable::Fail);
            ObjectiveResult {
                condition: r.condition,
                metric: r.metric,
                observed: r.observed,
                ok: r.ok,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_rate_is_not_judged_on_windows() {
        let t = Threshold::parse("snapshot_rate min >= 20Hz").unwrap();
        assert!(!judged_on_windows(t.metric));
        assert!(judged_on_windows(
            Threshold::parse("rtt p99 < 30ms").unwrap().metric
        ));
        assert!(judged_on_windows(
            Threshold::parse("server.tick_seconds p99 < 16.7ms")
                .unwrap()
                .metric
        ));
    }
}
