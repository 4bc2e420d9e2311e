//! A shard's part of a sharded capacity search (`tickswarm capacity --shard I/N --start-at T`):
//! a staircase fixed in advance, each step started at the same offset from the shared start
//! time on every shard, each step's window kept whole for `merge` (see
//! [`crate::report::capacity`]).
//!
//! A shard stops climbing as soon as a step breaks an objective on its own slice, or its load
//! machine was the limit: the server's series are scraped by every shard, so a server-side
//! break stops every shard at the same step, and a staging server is never pushed further
//! than one step past its limit.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::search::Verdict;
use super::{run_step, step_line, CapacityArgs, StepShape};
use crate::engine::{EngineError, StopSignal};
use crate::report::capacity::judged_on_windows;
use crate::report::summary::{Staircase, StaircaseStep};
use crate::report::{self, Summary};
use crate::scenario::capacity::CapacitySection;
use crate::scenario::{Plan, Threshold};

/// Between one step's end and the next step's start: every shard's bots have disconnected
/// (they leave within a second of the run's end) before the next ramp starts.
pub(super) const STEP_GAP: Duration = Duration::from_secs(3);

/// How far in the past `--start-at` may be when a shard starts: a shard that comes up later
/// than that would measure its steps after the others' (refused: merge would refuse its
/// windows anyway).
pub(super) const LATE_START: Duration = Duration::from_secs(1);

/// How far ahead `--start-at` may be: further is taken for a mistake (a date, not a time).
pub(super) const FAR_START: Duration = Duration::from_secs(24 * 3600);

/// The populations of the staircase: `start`, grown by `step` up to `max_players`.
pub(super) fn populations(cap: &CapacitySection) -> Vec<u64> {
    let mut v = vec![cap.start];
    while let Some(&n) = v.last() {
        let next = cap.grow(n);
        if next <= n {
            break;
        }
        v.push(next);
    }
    v
}

/// Each step's start as an offset from the shared start, the steps that fit in the time
/// budget (all shards compute the same).
pub(super) fn schedule(
    steps: &[u64],
    shape: impl Fn(u64) -> StepShape,
    budget: Duration,
) -> Vec<(u64, Duration)> {
    let mut at = Duration::ZERO;
    let mut out = Vec::new();
    for &n in steps {
        let end = at + shape(n).duration();
        if end > budget {
            break;
        }
        out.push((n, at));
        at = end + STEP_GAP;
    }
    out
}

/// `--start-at`: seconds since the Unix epoch (`1796000000`, `1796000000.5`) or an RFC 3339
/// time (`2026-11-28T10:00:00Z`).
pub(super) fn parse_start_at(s: &str) -> Result<SystemTime, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(UNIX_EPOCH + Duration::from_secs_f64(secs));
        }
        return Err(format!("--start-at {s}: not a time"));
    }
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| {
            format!(
                "--start-at {s}: write seconds since the Unix epoch or an RFC 3339 time such as \
                 2026-11-28T10:00:00Z ({e})"
            )
        })?;
    let ns = t.unix_timestamp_nanos();
    u64::try_from(ns)
        .map(|ns| UNIX_EPOCH + Duration::from_nanos(ns))
        .map_err(|_| format!("--start-at {s}: before 1970"))
}

/// Check the shared start against this machine's clock: not passed (by more than
/// [`LATE_START`]), not absurdly far.
pub(super) fn check_start(at: SystemTime, now: SystemTime) -> Result<(), String> {
    match at.duration_since(now) {
        Ok(ahead) if ahead > FAR_START => Err(format!(
            "--start-at is {} h ahead: give the time every shard starts at, minutes ahead",
            ahead.as_secs() / 3600
        )),
        Ok(_) => Ok(()),
        Err(e) if e.duration() > LATE_START => Err(format!(
            "--start-at passed {:.1} s ago: every shard must be running by then (give a time \
             far enough ahead for the slowest shard to start)",
            e.duration().as_secs_f64()
        )),
        Err(_) => Ok(()),
    }
}

/// The objectives a staircase cannot judge on a merged window, refused before it starts.
pub(super) fn unjudgeable(objectives: &[Threshold]) -> Option<&Threshold> {
    objectives.iter().find(|t| !judged_on_windows(t.metric))
}

/// What a shard's staircase left: its part for merge, and the summary of its last step.
pub(super) struct ShardResult {
    pub(super) staircase: Staircase,
    pub(super) summary: Option<Summary>,
}

/// Everything [`run`] needs besides the steps' plans.
pub(super) struct Setup<'a> {
    pub(super) cap: &'a CapacitySection,
    pub(super) start_at: SystemTime,
    pub(super) objectives: Vec<String>,
    pub(super) on_answer: Vec<String>,
    pub(super) stop: &'a StopSignal,
}

/// One planned step: its population, its offset from the shared start, and its plan.
pub(super) struct PlannedStep {
    pub(super) players: u64,
    pub(super) offset: Duration,
    pub(super) plan: Plan,
    pub(super) shape: StepShape,
}

/// Run this shard's slice of every step at its planned time.
pub(super) fn run(
    setup: Setup<'_>,
    a: &CapacityArgs,
    steps: &[PlannedStep],
) -> Result<ShardResult, EngineError> {
    let Setup {
        cap,
        start_at,
        objectives,
        on_answer,
        stop,
    } = setup;
    let start_at_ms = unix_ms(start_at);
    let mut stair = Staircase {
        start_at_ms,
        plan: steps.iter().map(|s| s.players).collect(),
        objectives,
        on_answer,
        min_samples: cap.min_samples,
        resolution: cap.resolution,
        max_players: cap.max_players,
        steps: Vec::new(),
        stopped: None,
    };
    let mut last = None;
    let t0 = instant_of(start_at);
    for (k, step) in steps.iter().enumerate() {
        let (players, plan, shape) = (step.players, &step.plan, &step.shape);
        let due = t0 + step.offset;
        if !wait_until(due, stop) {
            stair.stopped = Some("interrupted".into());
            break;
        }
        let late = Instant::now().saturating_duration_since(due);
        say!(
            "step {}: {players} players, {} on this shard{}",
            k + 1,
            plan.planned,
            if late > Duration::from_millis(500) {
                format!(" (started {:.1} s late)", late.as_secs_f64())
            } else {
                String::new()
            }
        );
        let step = run_step(plan, a, shape, stop, t0, cap.min_samples)?;
        say!("  {}", step_line(&step.record));
        let mut window = report::groups::project(
            &format!("step {}", k + 1),
            &format!("{} of {players} players", plan.planned),
            None,
            step.summary.clone(),
        );
        window.histograms = step.histograms;
        let verdict = step.verdict;
        stair.steps.push(StaircaseStep {
            record: step.record.clone(),
            window_start_ms: unix_ms(system_time_of(step.window_at)),
            window,
            server_metrics: step.summary.server_metrics.clone(),
        });
        last = Some(step.summary);
        if stop.is_stopped() {
            stair.stopped = Some("interrupted".into());
            break;
        }
        let why = match verdict {
            Some(Verdict::Held) => continue,
            Some(Verdict::Broke) => format!(
                "step {} broke on this shard ({}): the load is off, the staircase ends here",
                k + 1,
                step.record.why
            ),
            Some(Verdict::LoadMachine) => format!(
                "the load machine was the limit at step {}: the staircase ends here",
                k + 1
            ),
            None => step.record.why.clone(),
        };
        stair.stopped = Some(why);
        break;
    }
    Ok(ShardResult {
        staircase: stair,
        summary: last,
    })
}

/// Sleep until `due` (or the stop); false when stopped.
fn wait_until(due: Instant, stop: &StopSignal) -> bool {
    loop {
        if stop.is_stopped() {
            return false;
        }
        let now = Instant::now();
        if now >= due {
            return true;
        }
        std::thread::sleep((due - now).min(Duration::from_millis(100)));
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The monotonic instant of a wall-clock time (read once; the steps are timed monotonically).
fn instant_of(t: SystemTime) -> Instant {
    let (now_i, now_s) = (Instant::now(), SystemTime::now());
    match t.duration_since(now_s) {
        Ok(ahead) => now_i + ahead,
        Err(e) => now_i.checked_sub(e.duration()).unwrap_or(now_i),
    }
}

fn system_time_of(i: Instant) -> SystemTime {
    let (now_i, now_s) = (Instant::now(), SystemTime::now());
    match i.checked_duration_since(now_i) {
        Some(ahead) => now_s + ahead,
        None => now_s - now_i.duration_since(i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::capacity::Growth;

    fn cap(start: u64, step: Growth, max: u64) -> CapacitySection {
        CapacitySection {
            start,
            step,
            max_players: max,
            ..CapacitySection::default()
        }
    }

    #[test]
    fn the_staircase_grows_to_max_players_and_ends_there() {
        assert_eq!(
            populations(&cap(50, Growth::Double, 500)),
            [50, 100, 200, 400, 500]
        );
        assert_eq!(
            populations(&cap(100, Growth::By(100), 300)),
            [100, 200, 300]
        );
        assert_eq!(populations(&cap(10, Growth::Double, 10)), [10]);
    }

    #[test]
    fn the_schedule_is_the_same_offsets_for_every_shard_and_fits_the_budget() {
        let c = cap(100, Growth::By(100), 400);
        let shape = |n: u64| StepShape::new(n, 100.0, &c);
        // Each step: ramp n/100 s, settle 3 s, window 10 s (whole seconds to the window),
        // and the second after the window.
        let s = schedule(&populations(&c), shape, Duration::from_secs(60));
        let gap = STEP_GAP.as_secs();
        assert_eq!(
            s,
            [
                (100, Duration::ZERO),
                (200, Duration::from_secs(15 + gap)),
                (300, Duration::from_secs(15 + gap + 16 + gap)),
            ],
            "the fourth step (ends at {} s) does not fit 60 s",
            15 + 16 + 17 + 18 + 3 * gap
        );
    }

    #[test]
    fn start_times_parse_as_epoch_seconds_or_rfc3339() {
        assert_eq!(
            parse_start_at("1796000000").unwrap(),
            UNIX_EPOCH + Duration::from_secs(1_796_000_000)
        );
        assert_eq!(
            parse_start_at("1970-01-01T00:01:40Z").unwrap(),
            UNIX_EPOCH + Duration::from_secs(100)
        );
        assert_eq!(
            parse_start_at("1970-01-01T01:01:40+01:00").unwrap(),
            UNIX_EPOCH + Duration::from_secs(100)
        );
        for bad in ["soon", "-5", "NaN", "2026-13-01T00:00:00Z"] {
            assert!(parse_start_at(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_start_already_passed_or_a_day_away_is_refused() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(check_start(now + Duration::from_secs(30), now).is_ok());
        assert!(check_start(now - Duration::from_millis(500), now).is_ok());
        let late = check_start(now - Duration::from_secs(5), now).unwrap_err();
        assert!(late.contains("passed 5.0 s ago"), "{late}");
        assert!(check_start(now + Duration::from_secs(2 * 86_400), now).is_err());
    }
}
