//! A capacity search's result as the reports read it: the answer in words ([`conclude`]),
//! and the fixed staircase that the shards of one search follow ([`Staircase`]), from whose
//! per-step windows `merge` computes the one answer ([`merge_staircases`]).
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

use serde::{Deserialize, Serialize};

use super::build::{evaluate_with, quantile_of};
use super::groups::{as_summary, time_histogram, GroupSummary, Groups};
use super::summary::Summary;
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

/// One shard's part of a sharded capacity search (summary.json `staircase`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Staircase {
    /// The shared start time, in milliseconds since the Unix epoch.
    pub start_at_ms: u64,
    /// The populations of the staircase, whole (every shard's bots), in order: the plan, also
    /// past the steps this shard ran.
    pub plan: Vec<u64>,
    /// The objectives every step is judged on, as the scenario wrote them.
    pub objectives: Vec<String>,
    /// Conditions on the answer (`capacity >= 400`), judged once merged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_answer: Vec<String>,
    /// Round-trip samples a window needs before an RTT objective is judged.
    pub min_samples: u64,
    /// The resolution the scenario asked for (a staircase's own is its step).
    pub resolution: f64,
    /// `capacity.max_players`: a staircase that held up to it found a lower bound; one cut
    /// short of it (by the time budget) is unfinished.
    pub max_players: u64,
    /// The steps this shard ran, in order.
    pub steps: Vec<StaircaseStep>,
    /// Why this shard ran fewer steps than planned, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// One step of one shard's staircase.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StaircaseStep {
    /// The step as this shard judged its own slice (its `players` are the whole step's).
    pub record: CapacityStep,
    /// The window's start, in milliseconds since the Unix epoch (as this shard's clock read it).
    pub window_start_ms: u64,
    /// The window's figures and histograms (named `step N`).
    pub window: GroupSummary,
    /// The server's series scraped over the window, when this shard scraped any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_metrics: Option<ServerMetrics>,
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

/// The merged staircase: the one answer, and the summary's verdict on it.
#[derive(Debug)]
pub struct MergedStaircase {
    pub capacity: Capacity,
    /// The conditions on the answer, judged.
    pub on_answer: Vec<super::summary::ThresholdResult>,
    /// The merged window of the step the answer stands on (the rest of the merged
    /// summary.json), with the server's series over it.
    pub window: Option<(GroupSummary, Option<ServerMetrics>)>,
}

/// The answer of a sharded search from every shard's staircase (`shards[i]` is shard `i`'s,
/// all of one run: merge checked their count, seed and scenario). Each step is merged only
/// when every shard ran it with its window starting within [`MAX_WINDOW_SKEW_S`] of the
/// others'; the first step that is not (a shard stopped before it, or ran late) ends the
/// staircase there.
pub fn merge_staircases(shards: &[&Staircase]) -> Result<MergedStaircase, String> {
    let Some(first) = shards.first() else {
        return Err("no staircase to merge".into());
    };
    for s in shards {
        if s.plan != first.plan || s.objectives != first.objectives {
            return Err(
                "the shards' staircases differ (populations or objectives): not one search".into(),
            );
        }
    }
    let parse = |texts: &[String]| -> Result<Vec<Threshold>, String> {
        texts.iter().map(|t| Threshold::parse(t)).collect()
    };
    let objectives = parse(&first.objectives)?;
    let on_answer = parse(&first.on_answer)?;
    let judges_rtt = objectives
        .iter()
        .any(|t| matches!(t.metric, Metric::Time(TimeMetric::Rtt, _)));

    let mut steps: Vec<CapacityStep> = Vec::new();
    let mut windows: Vec<(GroupSummary, Option<ServerMetrics>)> = Vec::new();
    let (mut lo, mut hi) = (0u64, None::<u64>);
    let mut limit = None;
    let mut note: Option<String> = None;
    for (k, &players) in first.plan.iter().enumerate() {
        let parts: Vec<&StaircaseStep> = shards.iter().filter_map(|s| s.steps.get(k)).collect();
        if parts.len() < shards.len() {
            let why = shards
                .iter()
                .find(|s| s.steps.len() <= k)
                .and_then(|s| s.stopped.clone())
                .unwrap_or_else(|| "a shard did not run it".into());
            note = Some(format!(
                "step {} ({players} players) not run by every shard: {why}",
                k + 1
            ));
            limit = Some(CapacityLimit::Unfinished);
            break;
        }
        if parts.iter().any(|p| p.record.players != players) {
            return Err(format!(
                "step {}: the shards ran other populations than the plan's {players}",
                k + 1
            ));
        }
        let starts = parts.iter().map(|p| p.window_start_ms);
        let skew_ms = starts.clone().max().unwrap_or(0) - starts.min().unwrap_or(0);
        let (mut record, window) = merge_step(&parts, &objectives, judges_rtt, first.min_samples)?;
        windows.push(window);
        if skew_ms as f64 > MAX_WINDOW_SKEW_S * 1000.0 {
            record.verdict = verdict::INCONCLUSIVE.into();
            record.why = format!(
                "the shards' windows started {:.1} s apart (more than {MAX_WINDOW_SKEW_S} s): \
                 their loads did not overlap; check the shards' clocks",
                skew_ms as f64 / 1000.0
            );
        }
        let v = record.verdict.clone();
        steps.push(record);
        match v.as_str() {
            verdict::HELD => lo = lo.max(players),
            verdict::BROKE => {
                hi = Some(players);
                limit = Some(if lo == 0 {
                    CapacityLimit::BelowStart
                } else {
                    CapacityLimit::Server
                });
                break;
            }
            verdict::LOAD_MACHINE => {
                limit = Some(CapacityLimit::LoadMachine);
                break;
            }
            _ => {
                note = steps.last().map(|s| s.why.clone());
                limit = Some(CapacityLimit::Unfinished);
                break;
            }
        }
    }
    let limit = limit.unwrap_or_else(|| {
        if lo >= first.max_players {
            CapacityLimit::MaxPlayers
        } else {
            note = Some(format!(
                "every step held; the staircase ended at {lo} players, short of \
                 capacity.max_players ({}): the time budget allowed no more steps",
                first.max_players
            ));
            CapacityLimit::Unfinished
        }
    });
    let players = (lo > 0).then_some(lo);
    let interval = [players, hi.map(|h| h.saturating_sub(1))];
    let elapsed_ms = steps
        .last()
        .map(|s| (s.window_s[1] * 1000.0) as u64)
        .unwrap_or(0);
    let capacity = conclude(
        Conclusion {
            players,
            interval,
            limit: Some(limit),
            resolution: first.resolution,
            start: first.plan.first().copied().unwrap_or(0),
            elapsed: Duration::from_millis(elapsed_ms),
            note: note.as_deref(),
        },
        steps,
    );
    let s = Summary {
        capacity: Some(capacity.clone()),
        ..Summary::default()
    };
    let on_answer = on_answer
        .iter()
        .map(|th| evaluate_with(th, &s, &|_, _| None, None, Unmeasurable::Fail))
        .collect();
    // The window the answer stands on (the held step at the answer), else the last step's.
    let pick = capacity
        .steps
        .iter()
        .rposition(|st| Some(st.players) == capacity.players && st.verdict == verdict::HELD)
        .or_else(|| capacity.steps.len().checked_sub(1));
    let window = pick.and_then(|i| windows.into_iter().nth(i));
    Ok(MergedStaircase {
        capacity,
        on_answer,
        window,
    })
}

/// One step from every shard's part: the windows added exactly, then judged.
fn merge_step(
    parts: &[&StaircaseStep],
    objectives: &[Threshold],
    judges_rtt: bool,
    min_samples: u64,
) -> Result<(CapacityStep, (GroupSummary, Option<ServerMetrics>)), String> {
    let mut merged = Groups::default();
    let mut server: Option<ServerMetrics> = None;
    for p in parts {
        super::merge::add_groups(&mut merged, &Groups(vec![p.window.clone()]))?;
        // Every shard of a staircase scrapes the server (each judges its own steps on it, so
        // all stop at a server-side break): the same series, taken once, from the first shard
        // that has them.
        if server.is_none() {
            server = p.server_metrics.clone();
        }
    }
    super::merge::finish_groups(&mut merged)?;
    let Some(window) = merged.0.into_iter().next() else {
        return Err("a step with no window".into());
    };
    let objectives = judge_window(objectives, &window, server.as_ref());
    let Some(first) = parts.first() else {
        return Err("a step with no window".into());
    };
    let in_game = parts.iter().map(|p| p.record.in_game).sum();
    let load_machine = parts
        .iter()
        .filter(|p| p.record.verdict == verdict::LOAD_MACHINE)
        .count();
    let short = parts.iter().find(|p| {
        p.record.verdict == verdict::INCONCLUSIVE && p.record.why.contains("ended after")
    });
    let failed: Vec<&str> = objectives
        .iter()
        .filter(|o| !o.ok)
        .map(|o| o.condition.as_str())
        .collect();
    let (name, why) = if let Some(p) = short {
        (verdict::INCONCLUSIVE, format!("a shard's {}", p.record.why))
    } else if load_machine > 0 {
        (
            verdict::LOAD_MACHINE,
            format!(
                "the load machine was the limit in the window on {load_machine} of {} shards: \
                 nothing is known of the server here",
                parts.len()
            ),
        )
    } else if judges_rtt && window.rtt_us.count < min_samples {
        (
            verdict::INCONCLUSIVE,
            format!(
                "the window held {} round-trip samples over every shard, fewer than \
                 capacity.min_samples ({min_samples}): lengthen capacity.window",
                window.rtt_us.count
            ),
        )
    } else if failed.is_empty() {
        (verdict::HELD, "every objective held".into())
    } else {
        (verdict::BROKE, format!("broke {}", failed.join(", ")))
    };
    let record = CapacityStep {
        players: first.record.players,
        in_game,
        window_s: first.record.window_s,
        verdict: name.into(),
        objectives,
        why,
    };
    Ok((record, (window, server)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::new_histogram;

    const MS: u64 = 1000;

    /// A shard's window whose round trips are `(value_us, count)` pairs.
    fn window(rtts: &[(u64, u64)]) -> GroupSummary {
        let mut h = new_histogram();
        for &(v, n) in rtts {
            h.record_n(v, n).unwrap();
        }
        let mut w = GroupSummary {
            name: "step".into(),
            ..GroupSummary::default()
        };
        w.histograms
            .insert("rtt_us".into(), super::super::groups::encode(&h).unwrap());
        w.rtt_us = crate::metrics::HistSummary::of(&h);
        w.bots.planned = 50;
        w.bots.connected = 50;
        w
    }

    fn step(players: u64, at_ms: u64, rtts: &[(u64, u64)], verdict: &str) -> StaircaseStep {
        StaircaseStep {
            record: CapacityStep {
                players,
                in_game: players / 2,
                window_s: [0.0, 5.0],
                verdict: verdict.into(),
                ..CapacityStep::default()
            },
            window_start_ms: at_ms,
            window: window(rtts),
            server_metrics: None,
        }
    }

    fn stair(steps: Vec<StaircaseStep>) -> Staircase {
        Staircase {
            start_at_ms: 1_000_000,
            plan: vec![100, 200, 300],
            objectives: vec!["rtt p99 < 30ms".into()],
            on_answer: vec!["capacity >= 150".into()],
            min_samples: 100,
            resolution: 0.05,
            max_players: 300,
            steps,
            stopped: None,
        }
    }

    /// Step 2 is where exactness matters: shard B alone reads p99 80 ms (15 of its 1,000
    /// samples), shard A 10 ms; all 2,000 samples together hold 15 at 80 ms (0.75 %), so the
    /// step's p99 is 10 ms and it held. An average of the shards' p99s (45 ms) would break it.
    fn shards() -> (Staircase, Staircase) {
        let a = stair(vec![
            step(100, 1_000_000, &[(10 * MS, 1000)], "held"),
            step(200, 1_020_000, &[(10 * MS, 1000)], "held"),
            step(300, 1_040_000, &[(80 * MS, 1000)], "broke"),
        ]);
        let b = stair(vec![
            step(100, 1_000_100, &[(10 * MS, 1000)], "held"),
            step(200, 1_020_100, &[(10 * MS, 985), (80 * MS, 15)], "broke"),
            step(300, 1_040_100, &[(80 * MS, 1000)], "broke"),
        ]);
        (a, b)
    }

    #[test]
    fn steps_are_judged_on_every_shards_samples_together() {
        let (a, b) = shards();
        let m = merge_staircases(&[&a, &b]).unwrap();
        let c = &m.capacity;
        let verdicts: Vec<&str> = c.steps.iter().map(|s| s.verdict.as_str()).collect();
        assert_eq!(verdicts, ["held", "held", "broke"]);
        let p99 = |i: usize| c.steps[i].objectives[0].observed.unwrap();
        assert!(
            (9_000.0..=11_000.0).contains(&p99(1)),
            "step 2 p99 {}",
            p99(1)
        );
        assert!(p99(2) >= 79_000.0, "step 3 p99 {}", p99(2));
        assert_eq!(c.steps[1].in_game, 200, "both shards' bots in game");
        assert_eq!(
            (c.players, c.interval, c.limit),
            (
                Some(200),
                [Some(200), Some(299)],
                Some(CapacityLimit::Server)
            )
        );
        assert_eq!(c.limiting, ["rtt p99 < 30ms"]);
        assert!(c.answer.starts_with("capacity 200 players"), "{}", c.answer);
        // The answer's condition, judged on the merged answer.
        assert_eq!(m.on_answer.len(), 1);
        assert!(m.on_answer[0].ok && m.on_answer[0].observed == Some(200.0));
        // The rest of the merged file is the window the answer stands on: step 2, both shards.
        let (w, _) = m.window.expect("the answer's window");
        assert_eq!(w.rtt_us.count, 2000);
    }

    #[test]
    fn a_shard_that_stopped_early_ends_the_staircase_where_it_stopped() {
        let (a, mut b) = shards();
        b.steps.truncate(2);
        b.stopped = Some("interrupted".into());
        let m = merge_staircases(&[&a, &b]).unwrap();
        let c = &m.capacity;
        assert_eq!(c.steps.len(), 2);
        assert_eq!(
            (c.players, c.limit),
            (Some(200), Some(CapacityLimit::Unfinished))
        );
        assert!(c.answer.contains("interrupted"), "{}", c.answer);
    }

    #[test]
    fn a_saturated_load_machine_on_one_shard_is_a_ceiling() {
        let (mut a, b) = shards();
        a.steps[1].record.verdict = "load_machine".into();
        let c = merge_staircases(&[&a, &b]).unwrap().capacity;
        assert_eq!(c.steps[1].verdict, "load_machine");
        assert_eq!(
            (c.players, c.limit),
            (Some(100), Some(CapacityLimit::LoadMachine))
        );
        assert!(c.answer.contains("at least 100"), "{}", c.answer);
    }

    #[test]
    fn windows_that_did_not_overlap_are_not_one_step() {
        let (a, mut b) = shards();
        b.steps[1].window_start_ms += 2_500; // 2.6 s after shard A's (B was 0.1 s behind)
        let c = merge_staircases(&[&a, &b]).unwrap().capacity;
        assert_eq!(c.steps[1].verdict, "inconclusive");
        assert!(c.steps[1].why.contains("2.6 s apart"), "{}", c.steps[1].why);
        assert_eq!(c.limit, Some(CapacityLimit::Unfinished));
    }

    #[test]
    fn too_few_samples_over_every_shard_is_inconclusive() {
        let (mut a, mut b) = shards();
        a.steps[0].window = window(&[(10 * MS, 40)]);
        b.steps[0].window = window(&[(10 * MS, 40)]);
        let c = merge_staircases(&[&a, &b]).unwrap().capacity;
        assert_eq!(c.steps[0].verdict, "inconclusive");
        assert!(
            c.steps[0].why.contains("80 round-trip samples"),
            "{}",
            c.steps[0].why
        );
        assert_eq!(
            (c.players, c.limit),
            (None, Some(CapacityLimit::Unfinished))
        );
    }

    #[test]
    fn staircases_of_other_searches_are_refused() {
        let (a, mut b) = shards();
        b.plan = vec![100, 200, 400];
        assert!(merge_staircases(&[&a, &b]).unwrap_err().contains("differ"));
        let (a, mut b) = shards();
        b.objectives = vec!["rtt p99 < 20ms".into()];
        assert!(merge_staircases(&[&a, &b]).is_err());
    }

    #[test]
    fn a_staircase_that_held_to_max_players_is_a_lower_bound_and_one_cut_short_unfinished() {
        let (mut a, mut b) = shards();
        for s in [&mut a, &mut b] {
            s.steps[2] = step(300, s.steps[2].window_start_ms, &[(10 * MS, 1000)], "held");
        }
        let c = merge_staircases(&[&a, &b]).unwrap().capacity;
        assert_eq!(
            (c.players, c.limit),
            (Some(300), Some(CapacityLimit::MaxPlayers))
        );
        for s in [&mut a, &mut b] {
            s.max_players = 500;
        }
        let c = merge_staircases(&[&a, &b]).unwrap().capacity;
        assert_eq!(
            (c.players, c.limit),
            (Some(300), Some(CapacityLimit::Unfinished))
        );
        assert!(c.answer.contains("time budget"), "{}", c.answer);
    }

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
