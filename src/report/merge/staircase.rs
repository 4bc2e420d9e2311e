//! Merging the shards of a sharded capacity search: their staircases' windows added step
//! by step (exactly, as groups are added), each merged window judged on the objectives
//! ([`judge_window`]), and the one answer concluded from the merged steps ([`conclude`]).
//! Above `add.rs` and [`crate::report::capacity`]; [`super`] calls it for runs that
//! carry a `staircase`.

use std::time::Duration;

use super::add::{add_groups, finish_groups};
use crate::metrics::capacity::{Capacity, CapacityLimit, CapacityStep};
use crate::metrics::server_series::ServerMetrics;
use crate::metrics::threshold::{TimeMetric, Unmeasurable};
use crate::metrics::{Metric, Threshold};
use crate::report::build::evaluate_with;
use crate::report::capacity::{conclude, judge_window, verdict, Conclusion, MAX_WINDOW_SKEW_S};
use crate::report::summary::{
    GroupSummary, Groups, Staircase, StaircaseStep, Summary, ThresholdResult,
};

/// The merged staircase: the one answer, and the summary's verdict on it.
#[derive(Debug)]
pub struct MergedStaircase {
    pub capacity: Capacity,
    /// The conditions on the answer, judged.
    pub on_answer: Vec<ThresholdResult>,
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
        add_groups(&mut merged, &Groups(vec![p.window.clone()]))?;
        // Every shard of a staircase scrapes the server (each judges its own steps on it, so
        // all stop at a server-side break): the same series, taken once, from the first shard
        // that has them.
        if server.is_none() {
            server = p.server_metrics.clone();
        }
    }
    finish_groups(&mut merged)?;
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
            .insert("rtt_us".into(), crate::report::groups::encode(&h).unwrap());
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
}
