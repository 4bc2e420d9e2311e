//! `tickswarm capacity SCENARIO`: how many players one server holds at the scenario's
//! objectives (its thresholds), found by a search over populations ([`search`]).
//!
//! Each step is a run of its own: the bots ramp to the step's population at the scenario's
//! spawn rate, the server settles, and the step is judged on its window alone (the seconds
//! after settling, and the server's own series scraped over exactly those seconds). The run
//! then ends and every bot disconnects, so a step that broke an objective holds its load no
//! longer than its window, and the next step starts from an empty server. A step in which the
//! load machine was saturated says nothing of the server: the search stops there and the
//! answer is a lower bound, the load machine's limit.

pub mod search;
mod staircase;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::{
    install_ctrl_c, run_info, sanitize, start_server_metrics, LabelArg, OutDirArg, OutputArgs,
    OverrideArgs, EXIT_FAIL, EXIT_PASS, EXIT_USAGE,
};
use crate::engine::{self, EngineError, StopSignal};
use crate::metrics::capacity::{Capacity, CapacityLimit, CapacityStep, ObjectiveResult};
use crate::metrics::{IntervalPoint, Recorder};
use crate::report::{self, Summary};
use crate::scenario::capacity::{parse_resolution, CapacitySection};
use crate::scenario::{self, Dur, Metric, Plan, ScenarioFile, Stage, Threshold};
use search::{Search, Verdict};

/// Ramp speed when the scenario sets no spawn rate and its first stage has no ramp time.
const DEFAULT_SPAWN_RATE: f64 = 100.0;

#[derive(clap::Args, Debug)]
pub(crate) struct CapacityArgs {
    /// Scenario YAML file; its `capacity:` block holds the search's settings, its thresholds
    /// are the objectives.
    #[arg(env = "TICKSWARM_SCENARIO")]
    scenario: PathBuf,
    #[command(flatten)]
    ov: OverrideArgs,
    #[command(flatten)]
    out: OutDirArg,
    #[command(flatten)]
    label: LabelArg,
    /// Players of the first step (capacity.start).
    #[arg(long, value_name = "N")]
    start: Option<u64>,
    /// Never more players than this (capacity.max_players).
    #[arg(long, value_name = "N")]
    max_players: Option<u64>,
    /// The answer's precision, e.g. 5% (capacity.resolution).
    #[arg(long, value_name = "SHARE")]
    resolution: Option<String>,
    /// The whole search's time, e.g. 8m (capacity.time_budget).
    #[arg(long, value_name = "D", value_parser = scenario::parse_duration)]
    time_budget: Option<Duration>,
    /// With --shard: the time every shard starts the staircase at, the same on all (seconds
    /// since the Unix epoch, or RFC 3339 such as 2026-11-28T10:00:00Z). A sharded search
    /// follows a staircase fixed in advance; `tickswarm merge` on the shards' folders gives
    /// the answer.
    #[arg(long, value_name = "TIME", env = "TICKSWARM_START_AT")]
    start_at: Option<String>,
    #[command(flatten)]
    output: OutputArgs,
}

/// The settings: the scenario's block with the command line's overrides, checked.
fn settings(file: &ScenarioFile, a: &CapacityArgs) -> Result<CapacitySection, String> {
    let mut c = file.capacity.clone().unwrap_or_default();
    if let Some(n) = a.start {
        c.start = n;
    }
    if let Some(n) = a.max_players {
        c.max_players = n;
    }
    if let Some(r) = &a.resolution {
        c.resolution = parse_resolution(r)?;
    }
    if let Some(d) = a.time_budget {
        c.time_budget = Dur(d);
    }
    c.check()?;
    Ok(c)
}

/// Players per second the steps ramp at: the scenario's spawn rate, else its first ramp's
/// pace, else [`DEFAULT_SPAWN_RATE`].
fn spawn_rate(file: &ScenarioFile) -> f64 {
    file.population
        .spawn_rate
        .or_else(|| {
            file.population.stages.iter().find_map(|s| match s {
                Stage::Ramp { ramp_to, over } if !over.0.is_zero() && *ramp_to > 0 => {
                    Some(*ramp_to as f64 / over.0.as_secs_f64())
                }
                _ => None,
            })
        })
        .filter(|r| r.is_finite() && *r > 0.0)
        .unwrap_or(DEFAULT_SPAWN_RATE)
}

/// One step's shape: ramp to `players` at `rate`, then hold through settle and window.
struct StepShape {
    /// The whole step's players (every shard's).
    players: u64,
    ramp: Duration,
    /// From the run's start to the window's start: the ramp and the settle, in whole seconds
    /// (the window starts on a second of the run's clock, as its points do).
    window_start_s: u64,
    window_s: u64,
}

impl StepShape {
    fn new(players: u64, rate: f64, c: &CapacitySection) -> Self {
        let ramp = Duration::from_secs_f64(players as f64 / rate);
        let window_start_s = (ramp + c.settle.0).as_secs_f64().ceil() as u64;
        Self {
            players,
            ramp,
            window_start_s,
            window_s: c.window.0.as_secs_f64().ceil() as u64,
        }
    }

    /// The run's whole length: the ramp and settle, the window, and one second more, so the
    /// window's last second is a whole one however late the run's end is noticed. (Ending at
    /// the window's end let a loaded engine report that second as the partial tail: "the step
    /// ended after 5 of its 6 window seconds", and the search gave up on a step of 800
    /// players against a server that holds 573.)
    fn duration(&self) -> Duration {
        Duration::from_secs(self.window_start_s + self.window_s + 1)
    }
}

/// What one step measured.
struct StepOutcome {
    verdict: Option<Verdict>,
    record: CapacityStep,
    summary: Summary,
    /// The window's histograms, encoded by tag (a shard's staircase keeps them for merge).
    histograms: std::collections::BTreeMap<String, String>,
    /// When the window started.
    window_at: Instant,
}

pub(crate) fn cmd_capacity(a: &CapacityArgs) -> anyhow::Result<u8> {
    let usage = |e: &dyn std::fmt::Display| {
        say!("error: {e}");
        Ok(EXIT_USAGE)
    };
    let file = match scenario::load(&a.scenario) {
        Ok(f) => f,
        Err(e) => return usage(&e),
    };
    let cap = match settings(&file, a) {
        Ok(c) => c,
        Err(e) => return usage(&format!("{}: {e}", a.scenario.display())),
    };
    let mut overrides = match a.ov.to_overrides(&a.out) {
        Ok(o) => o,
        Err(e) => return usage(&e),
    };
    // Each step sets its own population and length.
    overrides.bots = None;
    overrides.duration = None;
    let rate = spawn_rate(&file);
    let plan_for = |players: u64| -> Result<(Plan, StepShape), String> {
        let shape = StepShape::new(players, rate, &cap);
        let mut f = file.clone();
        f.population.stages = vec![
            Stage::Ramp {
                ramp_to: players,
                over: Dur(shape.ramp),
            },
            Stage::Hold {
                hold: Dur(shape.duration().saturating_sub(shape.ramp)),
            },
        ];
        f.duration = Some(Dur(shape.duration()));
        let mut plan = Plan::build(f, &a.scenario, &overrides).map_err(|e| e.to_string())?;
        // A threshold on the answer is judged on the answer, never on a step.
        plan.thresholds.retain(|t| t.metric != Metric::Capacity);
        Ok((plan, shape))
    };
    // Thresholds on the answer (`capacity >= 400`), judged once the search ends.
    let on_answer: Vec<Threshold> = file
        .thresholds
        .iter()
        .filter(|t| t.metric == Metric::Capacity)
        .cloned()
        .collect();
    // Objectives the protocol cannot measure would break every step: refused now.
    let first = match plan_for(cap.start) {
        Ok((p, _)) => p,
        Err(e) => return usage(&e),
    };
    let unmeasurable = super::unmeasurable_thresholds(&first);
    if let Some((t, why)) = unmeasurable.first() {
        return usage(&format!(
            "{}: objective `{}` cannot be measured with {} (dialect {}): {why}; remove it \
             for a capacity search",
            a.scenario.display(),
            t.text,
            first.protocol.name(),
            first.protocol.dialect_name()
        ));
    }
    let dir = first.out_dir.clone().unwrap_or_else(|| {
        PathBuf::from("reports").join(format!(
            "{}-capacity-{}",
            sanitize(&first.name),
            report::build::folder_stamp(std::time::SystemTime::now())
        ))
    });
    let run_dir = match report::RunDir::open(&dir, a.output.force) {
        Ok(d) => d,
        Err(e) => return usage(&e.to_string()),
    };
    let stop = StopSignal::new();
    install_ctrl_c(stop.clone());
    say!(
        "tickswarm capacity: {} over {}, target {}, from {} players ({}) up to {}, resolution \
         {:.1}%, budget {}",
        first.protocol.name(),
        first.protocol.transport().describe(),
        first.target_text,
        cap.start,
        match cap.step {
            scenario::capacity::Growth::Double => "doubling".to_string(),
            scenario::capacity::Growth::By(k) => format!("+{k} a step"),
        },
        cap.max_players,
        cap.resolution * 100.0,
        scenario::format_duration(cap.time_budget.0)
    );
    say!(
        "objectives: {}",
        first
            .thresholds
            .iter()
            .map(|t| t.text.as_str())
            .collect::<Vec<_>>()
            .join(" · ")
    );

    if first.shard.is_some() {
        return run_shard(a, &cap, &on_answer, &plan_for, rate, &run_dir, &stop);
    }

    let t0 = Instant::now();
    let mut search = Search::new(&cap);
    let mut steps: Vec<CapacityStep> = Vec::new();
    let mut summaries: Vec<Summary> = Vec::new();
    let mut note: Option<String> = None;
    while let Some(players) = search.next() {
        let (plan, shape) = match plan_for(players) {
            Ok(p) => p,
            Err(e) => return usage(&e),
        };
        let left = cap.time_budget.0.saturating_sub(t0.elapsed());
        if shape.duration() + Duration::from_secs(1) > left {
            note = Some(format!(
                "the time budget ({}) ended the search before a step of {players} players",
                scenario::format_duration(cap.time_budget.0)
            ));
            search.give_up();
            break;
        }
        say!(
            "step {}: {players} players (ramp {}, settle {}, window {} s)",
            steps.len() + 1,
            scenario::format_duration(shape.ramp),
            scenario::format_duration(cap.settle.0),
            shape.window_s
        );
        let step = match run_step(&plan, a, &shape, &stop, t0, cap.min_samples) {
            Ok(s) => s,
            Err(e @ (EngineError::FdLimit(_) | EngineError::SourceAddress(_))) => {
                return usage(&e);
            }
            Err(e) => return Err(e.into()),
        };
        say!("  {}", step_line(&step.record));
        let verdict = step.verdict;
        steps.push(step.record);
        summaries.push(step.summary);
        if stop.is_stopped() {
            note = Some("interrupted: the search ended early".into());
            search.give_up();
            break;
        }
        match verdict {
            Some(v) => search.record(v),
            None => {
                note = steps.last().map(|s| s.why.clone());
                search.give_up();
                break;
            }
        }
    }

    let capacity = conclude(&search, &cap, steps, t0.elapsed(), note);
    say!("{}", capacity.answer);
    // The summary beside the answer is the window of the step the answer stands on (the last
    // held one at that population), else the last step's.
    let at = capacity.players;
    let pick = capacity
        .steps
        .iter()
        .rposition(|s| Some(s.players) == at && s.verdict == "held")
        .or_else(|| capacity.steps.len().checked_sub(1));
    let Some(mut summary) = pick.and_then(|i| summaries.get(i).cloned()) else {
        say!("error: no step ran; nothing to report");
        return Ok(EXIT_FAIL);
    };
    let found = matches!(
        capacity.limit,
        Some(CapacityLimit::Server | CapacityLimit::MaxPlayers | CapacityLimit::LoadMachine)
    );
    summary.capacity = Some(capacity);
    for th in &on_answer {
        let r = report::build::evaluate_with(
            th,
            &summary,
            &|_, _| None,
            None,
            scenario::threshold::Unmeasurable::Fail,
        );
        say!(
            "{}  {:<28} {}",
            if r.ok { "PASS" } else { "FAIL" },
            th.text,
            report::build::describe_outcome(&r)
        );
        summary.thresholds.push(r);
    }
    if !on_answer.is_empty() {
        summary.verdict = report::build::verdict_of(&summary.thresholds);
    }
    // No histograms.hlog: a search's steps are separate runs (the summary draws the report).
    let written = report::write_all(&run_dir, &summary, first.junit, None)
        .context("the report was not written")?;
    super::warn_if_moved(&run_dir);
    say!("summary  {}", written.summary_json.display());
    say!("report   {}", written.report_html.display());
    // With a threshold on the answer, its verdict decides; without, whether there is one.
    let pass = if on_answer.is_empty() {
        found
    } else {
        summary.verdict == "pass"
    };
    Ok(if pass { EXIT_PASS } else { EXIT_FAIL })
}

/// A shard's part of a sharded search: the fixed staircase at the shared start time, each
/// step's window kept for `merge` (see [`staircase`]). Exits 0 when the staircase ran (to its
/// end, or to a step that broke on this shard): the answer is merge's.
fn run_shard(
    a: &CapacityArgs,
    cap: &CapacitySection,
    on_answer: &[Threshold],
    plan_for: &dyn Fn(u64) -> Result<(Plan, StepShape), String>,
    rate: f64,
    dir: &report::RunDir,
    stop: &StopSignal,
) -> anyhow::Result<u8> {
    let usage = |e: &dyn std::fmt::Display| {
        say!("error: {e}");
        Ok(EXIT_USAGE)
    };
    let first = match plan_for(cap.start) {
        Ok((p, _)) => p,
        Err(e) => return usage(&e),
    };
    let Some(text) = &a.start_at else {
        return usage(
            &"a sharded capacity search needs --start-at TIME (or TICKSWARM_START_AT), \
             the same on every shard, e.g. $(date -u -d '+2 min' +%FT%TZ): its steps are fixed \
             in advance and start together",
        );
    };
    let start_at = match staircase::parse_start_at(text)
        .and_then(|t| staircase::check_start(t, std::time::SystemTime::now()).map(|()| t))
    {
        Ok(t) => t,
        Err(e) => return usage(&e),
    };
    if let Some(t) = staircase::unjudgeable(&first.thresholds) {
        return usage(&format!(
            "{}: objective `{}` has no figure per step window that shards can add up; a \
             sharded capacity search judges latency, loss, counters and the server's series",
            a.scenario.display(),
            t.text
        ));
    }
    let populations = staircase::populations(cap);
    let mut steps = Vec::new();
    for (players, offset) in staircase::schedule(
        &populations,
        |n| StepShape::new(n, rate, cap),
        cap.time_budget.0,
    ) {
        let (plan, shape) = match plan_for(players) {
            Ok(p) => p,
            Err(e) => return usage(&e),
        };
        steps.push(staircase::PlannedStep {
            players,
            offset,
            plan,
            shape,
        });
    }
    if steps.is_empty() {
        return usage(&format!(
            "{}: capacity.time_budget ({}) is shorter than the staircase's first step",
            a.scenario.display(),
            scenario::format_duration(cap.time_budget.0)
        ));
    }
    let planned: Vec<String> = steps.iter().map(|s| s.players.to_string()).collect();
    say!(
        "staircase (shard {}): {} players, starting {}{}",
        first.shard.map(|s| s.to_string()).unwrap_or_default(),
        planned.join(" → "),
        text,
        if steps.len() < populations.len() {
            format!(
                " (the time budget cuts it short of {} players)",
                cap.max_players
            )
        } else {
            String::new()
        }
    );
    let setup = staircase::Setup {
        cap,
        start_at,
        objectives: first.thresholds.iter().map(|t| t.text.clone()).collect(),
        on_answer: on_answer.iter().map(|t| t.text.clone()).collect(),
        stop,
    };
    let result = match staircase::run(setup, a, &steps) {
        Ok(r) => r,
        Err(e @ (EngineError::FdLimit(_) | EngineError::SourceAddress(_))) => return usage(&e),
        Err(e) => return Err(e.into()),
    };
    let Some(mut summary) = result.summary else {
        say!("error: no step ran; nothing to report");
        return Ok(EXIT_FAIL);
    };
    if let Some(why) = &result.staircase.stopped {
        say!("stopped: {why}");
    }
    say!(
        "ran {} of {} steps; the answer is `tickswarm merge` of every shard's folder",
        result.staircase.steps.len(),
        steps.len()
    );
    // This folder is a part, not a result: the objectives are judged per step on every
    // shard's window by merge.
    summary.thresholds.clear();
    summary.verdict = "pass".into();
    summary.staircase = Some(result.staircase);
    let written = report::write_all(dir, &summary, first.junit, None)
        .context("the report was not written")?;
    super::warn_if_moved(dir);
    say!("summary  {}", written.summary_json.display());
    Ok(if stop.is_stopped() {
        EXIT_FAIL
    } else {
        EXIT_PASS
    })
}

/// Run one step and judge its window.
fn run_step(
    plan: &Plan,
    a: &CapacityArgs,
    shape: &StepShape,
    stop: &StopSignal,
    t0: Instant,
    min_samples: u64,
) -> Result<StepOutcome, EngineError> {
    let mut embedded = None;
    let mut scrapers = None;
    let window = shape.window_start_s..shape.window_start_s + shape.window_s;
    let mut started = t0;
    // A shard of a staircase judges its own steps on the server's series too, so every shard
    // scrapes every endpoint (not only those the scenario gives its index).
    let scrape_plan = if plan.shard.is_some() {
        let mut p = plan.clone();
        p.shard = None;
        std::borrow::Cow::Owned(p)
    } else {
        std::borrow::Cow::Borrowed(plan)
    };
    let on_start = |start: &engine::RunStart| {
        started = start.at;
        (embedded, scrapers) = start_server_metrics(
            &scrape_plan,
            start,
            Duration::from_secs(window.start),
            Duration::from_secs(shape.window_s),
        );
    };
    let mut points: Vec<IntervalPoint> = Vec::new();
    let mut rec = Recorder::new();
    let outcome = engine::run_observed(plan, stop, on_start, |p, _, second| {
        let s = p.t.round() as u64;
        if !p.partial && s > window.start && s <= window.end {
            points.push(p.clone());
            rec.merge(&second.rec);
        }
    })?;
    let server_metrics = scrapers.and_then(|s| s.finish());
    drop(embedded);
    let in_game = points.iter().map(|p| p.phases.in_game).min().unwrap_or(0);
    let whole = points.len() as u64 == shape.window_s;
    let histograms = report::groups::encode_all(&rec);
    let mut w = outcome;
    w.total = rec;
    w.tail = Recorder::new();
    w.elapsed = Duration::from_secs(points.len() as u64);
    w.intervals = points;
    w.server_metrics = server_metrics;
    let mut summary = report::summarize(&run_info(plan, &a.ov, &a.label), &w);
    report::build::record_server_figures(&mut summary);
    let from = started.saturating_duration_since(t0).as_secs_f64() + window.start as f64;
    let objectives: Vec<ObjectiveResult> = summary
        .thresholds
        .iter()
        .filter(|t| !t.skipped)
        .map(|t| ObjectiveResult {
            condition: t.condition.clone(),
            metric: t.metric.clone(),
            observed: t.observed,
            ok: t.ok,
        })
        .collect();
    let failed: Vec<&str> = objectives
        .iter()
        .filter(|o| !o.ok)
        .map(|o| o.condition.as_str())
        .collect();
    let judges_rtt = summary
        .thresholds
        .iter()
        .any(|t| t.metric.starts_with("rtt_us"));
    let load_machine = summary.generator.saturated || summary.generator.cpu_bound_seconds > 0;
    let (verdict, name, why) = if !whole {
        (
            None,
            "inconclusive",
            format!(
                "the step ended after {} of its {} window seconds",
                w.intervals.len(),
                shape.window_s
            ),
        )
    } else if load_machine {
        (
            Some(Verdict::LoadMachine),
            "load_machine",
            format!(
                "the load machine was the limit in the window ({} CPU-bound seconds, {} grid \
                 slots skipped, send lateness p99 {} of the input period): nothing is known of \
                 the server here",
                summary.generator.cpu_bound_seconds,
                summary.generator.inputs_skipped,
                summary
                    .generator
                    .lateness_p99_of_period
                    .map_or("–".into(), |x| format!("{:.0}%", x * 100.0))
            ),
        )
    } else if judges_rtt && summary.rtt_us.count < min_samples {
        (
            None,
            "inconclusive",
            format!(
                "the window held {} round-trip samples, fewer than capacity.min_samples ({}): \
                 lengthen capacity.window",
                summary.rtt_us.count, min_samples
            ),
        )
    } else if failed.is_empty() {
        (Some(Verdict::Held), "held", "every objective held".into())
    } else {
        (
            Some(Verdict::Broke),
            "broke",
            format!("broke {}", failed.join(", ")),
        )
    };
    let record = CapacityStep {
        players: plan.shard.map_or(plan.planned, |_| shape.players),
        in_game,
        window_s: [from, from + shape.window_s as f64],
        verdict: name.into(),
        objectives,
        why,
    };
    Ok(StepOutcome {
        verdict,
        record,
        summary,
        histograms,
        window_at: started + Duration::from_secs(window.start),
    })
}

/// A step's result in one line: verdict, then each objective's figure.
fn step_line(s: &CapacityStep) -> String {
    let figures: Vec<String> = s
        .objectives
        .iter()
        .filter(|o| !o.condition.starts_with("bots_") && !o.condition.starts_with("decode_"))
        .map(|o| {
            format!(
                "{} {}{}",
                o.condition,
                report::build::format_observed(&o.metric, o.observed),
                if o.ok { "" } else { " ✗" }
            )
        })
        .collect();
    format!(
        "{} ({} in game): {}{}",
        s.verdict,
        s.in_game,
        s.why,
        if figures.is_empty() {
            String::new()
        } else {
            format!(" · {}", figures.join(" · "))
        }
    )
}

/// The answer, from how the search ended and its steps.
fn conclude(
    search: &Search,
    cap: &CapacitySection,
    steps: Vec<CapacityStep>,
    elapsed: Duration,
    note: Option<String>,
) -> Capacity {
    report::capacity::conclude(
        report::capacity::Conclusion {
            players: search.players(),
            interval: search.interval(),
            limit: search.limit(),
            resolution: cap.resolution,
            start: cap.start,
            elapsed,
            note: note.as_deref(),
        },
        steps,
    )
}
