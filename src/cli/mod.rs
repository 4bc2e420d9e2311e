//! The command-line edge: argument parsing, console output, exit codes.
//!
//! Exit codes: 0 pass, 1 thresholds failed, 2 bad usage, scenario or I/O error (an output
//! folder that cannot be written), 3 target unreachable (no bot completed the handshake).

// First: its printing macros are used by every module after it.
#[macro_use]
mod term;

mod capacity;
mod compare;
mod dashboard;
mod http;
mod init;
mod merge;
mod metrics_listen;
mod progress;
mod protocols;
mod relay;
mod scrape;
mod serve;
mod signals;
mod validate;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::builder::BoolishValueParser;
use clap::{ArgAction, CommandFactory, Parser, Subcommand};

use crate::engine::{self, EngineError, StopSignal};
use crate::protocol::AnyProtocol;
use crate::report;
use crate::scenario::{self, parse_duration, Overrides, Plan, Shard, SourcePool};

pub const EXIT_PASS: u8 = 0;
pub const EXIT_FAIL: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_UNREACHABLE: u8 = 3;

#[derive(Parser, Debug)]
#[command(
    name = "tickswarm",
    version,
    about = "Load-test real-time game servers with a swarm of simulated clients",
    long_about = "Load-test real-time game servers with a swarm of simulated clients.\n\n\
        Exit codes: 0 pass, 1 thresholds failed, 2 bad usage, scenario or I/O error, \
        3 target unreachable (no bot completed the handshake)."
)]
struct Cli {
    /// Print only errors and warnings (and what --json asks for): no progress or result lines.
    #[arg(
        short,
        long,
        global = true,
        env = "TICKSWARM_QUIET",
        action = ArgAction::SetTrue,
        value_parser = BoolishValueParser::new()
    )]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

/// How much the console says (`--quiet`, `-v`, `-vv`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Console {
    pub quiet: bool,
    pub verbose: u8,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a scenario: spawn the bots, measure, write summary.json and report.html.
    Run(RunArgs),
    /// Find how many players the server holds at the scenario's thresholds: steps of growing
    /// population, each judged on its own window, narrowed to the `capacity:` resolution.
    Capacity(capacity::CapacityArgs),
    /// Run a protocol's reference server as a standalone process (a stand-in staging server).
    Serve(serve::ServeArgs),
    /// Check a scenario file and print what it would run.
    Validate(validate::ValidateArgs),
    /// Write a first scenario for a protocol (`--protocol P`), commented and ready to run, or
    /// a crate skeleton for a protocol of your own (`--protocol-crate NAME`).
    Init(init::InitArgs),
    /// List the protocols, their transports and what each can measure.
    Protocols,
    /// Merge runs from several load machines into one result (exact histogram merge).
    Merge(merge::MergeArgs),
    /// Compare a run with a base run; exit 1 when a metric got worse than its limit allows.
    Compare(compare::CompareArgs),
    /// Put the network model (`network:`) between UDP clients and a server, as a relay.
    Relay(relay::RelayArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to stdout: `tickswarm man > tickswarm.1`.
    Man,
}

/// How results are written and shown, for every command that writes a folder.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct OutputArgs {
    /// Write into an output folder that is not empty (files of the same name are replaced,
    /// others left alone). Without it, a non-empty folder is refused and nothing is written.
    #[arg(long, env = "TICKSWARM_FORCE", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    force: bool,
    /// Print the result as JSON on stdout (summary.json for run and merge).
    #[arg(long, env = "TICKSWARM_JSON", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    json: bool,
}

/// Said when the output folder's path no longer names the folder opened at the start (moved,
/// or replaced by a symlink during the run): the files are in the folder that was checked,
/// and this says where that is now, never where the path points.
pub(crate) fn warn_if_moved(dir: &report::RunDir) {
    if !dir.still_at_path() {
        say!(
            "warning: {} was moved or replaced during the run; the files were written to the \
             folder opened at its start, now {}",
            dir.path().display(),
            dir.location().display()
        );
    }
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Scenario YAML file.
    #[arg(env = "TICKSWARM_SCENARIO")]
    scenario: PathBuf,
    #[command(flatten)]
    ov: OverrideArgs,
    #[command(flatten)]
    out: OutDirArg,
    /// More detail: -v prints the plan before the run; -vv also prints each second's figures
    /// as a JSON line on stderr.
    #[arg(short, long, action = ArgAction::Count)]
    verbose: u8,
    /// Serve live metrics for Prometheus at http://ADDR/metrics while the run goes on
    /// (updated each second; e.g. 127.0.0.1:9464, or port 0 for a free one).
    #[arg(long, value_name = "ADDR", env = "TICKSWARM_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Serve a live dashboard at http://ADDR/ while the run goes on: the report's charts
    /// updated each second, the verdict so far and each threshold's state, then the final
    /// report (ADDR defaults to 127.0.0.1:7465; port 0 picks a free one).
    #[arg(
        long,
        value_name = "ADDR",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = dashboard::DEFAULT_ADDR,
        env = "TICKSWARM_DASHBOARD"
    )]
    dashboard: Option<std::net::SocketAddr>,
    #[command(flatten)]
    output: OutputArgs,
}

/// `--out`, for the commands that write a run folder (`run`, `capacity`); `validate` writes
/// nothing and refuses it rather than ignore it.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct OutDirArg {
    /// Output folder (default: reports/SCENARIO-TIMESTAMP/, the time in UTC).
    #[arg(long, value_name = "DIR", env = "TICKSWARM_OUT")]
    pub out: Option<PathBuf>,
}

/// What changes the plan: `run`, `capacity` and `validate` (which prints the plan) take them.
#[derive(clap::Args, Debug, Clone)]
struct OverrideArgs {
    /// Server to load instead of the scenario's target: HOST:PORT, HOST:FIRST-LAST (servers on
    /// consecutive ports), a comma-separated list of those, or `embedded`.
    #[arg(long, value_name = "HOST:PORT", env = "TICKSWARM_TARGET")]
    target: Option<String>,
    /// Peak bot population (every population stage is scaled to it).
    #[arg(long, value_name = "N", env = "TICKSWARM_BOTS")]
    bots: Option<u64>,
    /// Run time, e.g. 15s, 2m.
    #[arg(long, value_name = "D", value_parser = parse_duration, env = "TICKSWARM_DURATION")]
    duration: Option<Duration>,
    /// Seed for every bot decision (same seed, same decisions).
    #[arg(long, value_name = "S", env = "TICKSWARM_SEED")]
    seed: Option<u64>,
    /// Worker threads (default: one per core).
    #[arg(long, value_name = "N", env = "TICKSWARM_WORKERS")]
    workers: Option<usize>,
    /// Run one slice of the population, I of N (0-based): the bots whose index % N == I, with
    /// the same seeds as in the whole run; `tickswarm merge` the N folders.
    #[arg(long, value_name = "I/N", env = "TICKSWARM_SHARD")]
    shard: Option<String>,
    /// The shard count N, with the index I from JOB_COMPLETION_INDEX (a Kubernetes Indexed
    /// Job sets it in each pod).
    #[arg(long, value_name = "N", env = "TICKSWARM_SHARDS")]
    shards: Option<u32>,
    /// Local addresses the bots bind to, instead of the scenario's engine.source_addresses:
    /// comma-separated addresses and CIDR ranges of the target's family (10.0.0.5,127.1.0.0/16).
    #[arg(long, value_name = "LIST", env = "TICKSWARM_SOURCE_ADDRESSES")]
    source_addresses: Option<String>,
}

impl OverrideArgs {
    /// The overrides, with the output folder of the commands that write one.
    fn to_overrides(&self, out: &OutDirArg) -> Result<Overrides, String> {
        Ok(Overrides {
            target: self.target.clone(),
            bots: self.bots,
            duration: self.duration,
            out: out.out.clone(),
            seed: self.seed,
            workers: self.workers,
            shard: self.resolve_shard(std::env::var("JOB_COMPLETION_INDEX").ok())?,
            source_addresses: self
                .source_addresses
                .as_deref()
                .map(|s| SourcePool::parse_list(s).map_err(|e| format!("--source-addresses: {e}")))
                .transpose()?,
        })
    }

    /// `--shard I/N`, or `--shards N` with I from `JOB_COMPLETION_INDEX`.
    fn resolve_shard(&self, job_index: Option<String>) -> Result<Option<Shard>, String> {
        match (&self.shard, self.shards) {
            (None, None) => Ok(None),
            (Some(s), n) => {
                let shard = Shard::parse(s)?;
                match n {
                    Some(n) if n != shard.count => Err(format!(
                        "--shard {shard} and --shards {n} disagree on the shard count"
                    )),
                    _ => Ok(Some(shard)),
                }
            }
            (None, Some(n)) => {
                let i = job_index.ok_or_else(|| {
                    format!(
                        "--shards {n} needs the shard index: --shard I/{n}, or \
                         JOB_COMPLETION_INDEX (set by a Kubernetes Indexed Job)"
                    )
                })?;
                Shard::parse(&format!("{}/{n}", i.trim()))
                    .map(Some)
                    .map_err(|e| format!("JOB_COMPLETION_INDEX={i} with --shards {n}: {e}"))
            }
        }
    }
}

/// An empty `TICKSWARM_*` variable counts as unset: CI systems pass a blank for a variable
/// nobody filled in (`${{ vars.X }}`), which must not be a parse error or a zero.
fn drop_empty_env() {
    let empty: Vec<std::ffi::OsString> = std::env::vars_os()
        .filter(|(k, v)| k.to_string_lossy().starts_with("TICKSWARM_") && v.is_empty())
        .map(|(k, _)| k)
        .collect();
    for k in empty {
        // Before any thread is started: nothing else reads the environment concurrently.
        std::env::remove_var(k);
    }
}

pub fn main() -> ExitCode {
    main_with(&[])
}

/// The whole command line (`run`, `validate`, `serve`, `protocols`, `merge`, `compare`, ...)
/// with `protocols` known beside the built-in ones: a user's binary crate calls this from its
/// `main` and its scenarios may say `protocol: { <its name>: {...} }`. A protocol that cannot
/// be registered (a name taken, or not a valid scenario key) ends the process with exit code
/// 2 before anything runs.
pub fn main_with(protocols: &[&'static dyn AnyProtocol]) -> ExitCode {
    for p in protocols {
        if let Err(e) = crate::games::register(*p) {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    }
    drop_empty_env();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                EXIT_USAGE
            } else {
                EXIT_PASS
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // `-v` is an option of `run` alone, the one command it changes.
    let console = Console {
        quiet: cli.quiet,
        verbose: 0,
    };
    let result = match cli.command {
        Command::Run(a) => cmd_run(
            &a,
            Console {
                verbose: a.verbose,
                ..console
            },
        ),
        Command::Capacity(a) => capacity::cmd_capacity(&a),
        Command::Serve(a) => serve::cmd_serve(&a, console),
        Command::Relay(a) => relay::cmd_relay(&a),
        Command::Validate(a) => validate::cmd_validate(&a),
        Command::Init(a) => init::cmd_init(&a),
        Command::Merge(a) => merge::cmd_merge(&a, console),
        Command::Compare(a) => compare::cmd_compare(&a, console),
        Command::Protocols => {
            protocols::cmd_protocols();
            Ok(EXIT_PASS)
        }
        Command::Completions { shell } => {
            // Into memory first: the generator panics on a failed write (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "tickswarm", &mut script);
            write_stdout(&script)
                .map(|()| EXIT_PASS)
                .context("writing the completion script")
        }
        Command::Man => {
            let mut page = Vec::new();
            clap_mangen::Man::new(Cli::command())
                .render(&mut page)
                .context("rendering the man page")
                .and_then(|()| write_stdout(&page).context("writing the man page"))
                .map(|()| EXIT_PASS)
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        // What reaches here is an I/O failure (an output folder that cannot be written, a run
        // folder that cannot be read): not a verdict, so never 1, which CI reads as "the
        // thresholds failed".
        Err(e) => {
            say!("error: {e:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Load and plan a scenario, printing a scenario error the way an editor can jump to.
fn load_plan(path: &Path, ov: &OverrideArgs, out: &OutDirArg) -> Result<Plan, u8> {
    let usage = |e: &dyn std::fmt::Display| {
        say!("error: {e}");
        EXIT_USAGE
    };
    let file = scenario::load(path).map_err(|e| usage(&e))?;
    let overrides = ov.to_overrides(out).map_err(|e| usage(&e))?;
    let plan = Plan::build(file, path, &overrides).map_err(|e| usage(&e))?;
    // The compare block is parsed where comparisons are made; a bad one fails here, early.
    for (metric, limit) in &plan.compare_limits {
        report::compare::Limit::parse(metric, limit).map_err(|e| {
            usage(&format!(
                "{}: compare.max_regress: {}",
                path.display(),
                e.to_string().trim_start_matches("--max-regress ")
            ))
        })?;
    }
    Ok(plan)
}

/// What this machine gives a raw-UDP swarm's sends (an io_uring ring is built and dropped
/// to know), for the plan's description; `None` for transports that send on their own.
fn send_path(plan: &scenario::Plan) -> Option<String> {
    use engine::io::send_batch::{IoMode, SendPath};
    // Raw-UDP and ENet bots send through the worker's batch; GNS and the TCP-login
    // transport do their own I/O.
    matches!(
        plan.protocol.transport(),
        crate::protocol::TransportNeeds::Udp | crate::protocol::TransportNeeds::Enet(_)
    )
    .then(|| SendPath::probe(IoMode::from_env()).describe())
}

/// Ctrl-C or SIGTERM once: stop the swarm and still write the report. A second one: leave at
/// once (130 after Ctrl-C, 143 after SIGTERM, as a shell reports a death by that signal).
///
/// SIGTERM is what `docker stop`, Kubernetes and CI runners send before SIGKILL, so it must
/// stop as gracefully as Ctrl-C: without a handler it killed the run before the report was
/// written, and a process that is PID 1 in a container (this image's entrypoint) ignores it
/// altogether (the kernel gives PID 1 no default action), so it was killed 10 s later.
/// Ctrl-C or SIGTERM stops the run (its report is still written); a second one exits.
pub(crate) fn install_ctrl_c(stop: StopSignal) {
    signals::on_stop(
        move |name| {
            say!("\nstopping ({name}): writing the report (again to abort)");
            stop.stop();
        },
        true,
    );
}

fn cmd_run(a: &RunArgs, console: Console) -> anyhow::Result<u8> {
    let plan = match load_plan(&a.scenario, &a.ov, &a.out) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let dir = plan.out_dir.clone().unwrap_or_else(|| {
        PathBuf::from("reports").join(format!(
            "{}-{}",
            sanitize(&plan.name),
            report::build::folder_stamp(std::time::SystemTime::now())
        ))
    });
    // Opened once, now: the files go into this folder however its path changes during the run.
    let run_dir = match report::RunDir::open(&dir, a.output.force) {
        Ok(d) => d,
        Err(e) => {
            say!("error: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    let stop = StopSignal::new();
    install_ctrl_c(stop.clone());
    // Said now, not after a long run: a threshold nothing can measure against this server.
    for (t, why) in unmeasurable_thresholds(&plan) {
        say!(
            "warning: threshold `{}` is not measurable with {} (dialect {}): {why}",
            t.text,
            plan.protocol.name(),
            plan.protocol.dialect_name()
        );
    }
    if !console.quiet {
        say!(
            "tickswarm: {} bots{}, {} over {}, target {}, {} for {}",
            plan.planned,
            plan.shard
                .map(|s| format!(" (shard {s})"))
                .unwrap_or_default(),
            plan.protocol.name(),
            plan.protocol.transport().describe(),
            plan.target_text,
            plan.name,
            scenario::format_duration(plan.duration)
        );
    }
    if console.verbose >= 1 {
        say_inline!("{}", plan.describe_with(send_path(&plan).as_deref()));
    }
    let mut printer = progress::Progress::new(plan.planned, plan.duration, plan.stages.clone());
    // A run refused before it starts leaves no folder behind: the staged log is removed when
    // dropped, and the folder (if this run created it) when `run_dir` is.
    let mut hlog = report::hlog::HlogWriter::new(
        run_dir.stage("histograms.hlog")?,
        std::time::SystemTime::now(),
        &format!("{} ({})", plan.name, plan.protocol.name()),
    )
    .with_context(|| {
        format!(
            "creating {}",
            run_dir.file_path("histograms.hlog").display()
        )
    })?;
    let mut hlog_error = None;
    let metrics = match a.metrics_listen {
        Some(addr) => match metrics_listen::MetricsServer::start(addr) {
            Ok(m) => {
                say!("metrics  http://{}/metrics", m.addr());
                Some(m)
            }
            Err(e) => {
                say!("error: {e:#}");
                return Ok(EXIT_USAGE);
            }
        },
        None => None,
    };
    // What the report says of the run (the scenario's hash read once): for the live page
    // and for the summary at the end.
    let info = run_info(&plan, &a.ov);
    let dashboard = match a.dashboard {
        Some(addr) => {
            let live = dashboard::LiveReport::new(
                &info,
                plan.planned,
                plan.workers.max(1),
                plan.target_text.clone(),
                plan.duration,
            );
            match dashboard::Dashboard::start(addr, live) {
                Ok(d) => {
                    say!("dashboard http://{}/", d.addr());
                    Some(d)
                }
                Err(e) => {
                    say!("error: {e:#}");
                    return Ok(EXIT_USAGE);
                }
            }
        }
        None => None,
    };
    let mut exposition = report::prometheus::Exposition::new(
        &plan.name,
        plan.protocol.name().as_str(),
        plan.planned,
    );
    // `server_metrics:`: the embedded server's own endpoint (when one names it) and the
    // scrapers, started once the engine knows its servers and its clock.
    let mut embedded_metrics: Option<metrics_listen::MetricsServer> = None;
    let mut scrapers: Option<scrape::Scrapers> = None;
    let on_start = |start: &engine::RunStart| {
        (embedded_metrics, scrapers) =
            start_server_metrics(&plan, start, Duration::ZERO, plan.duration);
    };
    // Each group's per-second RTT goes into the log beside the whole run's (`merge` reads
    // the groups' per-second percentiles again from it).
    let group_tags: Vec<String> = plan
        .groups
        .iter()
        .map(|g| crate::metrics::groups::rtt_tag(&g.name))
        .collect();
    // `abort_on_fail:`: each second judged on its own; a sustained failure stops the run.
    let mut abort = plan
        .abort_on_fail
        .map(|after| report::abort::AbortJudge::new(&plan.thresholds, after));
    let outcome = match engine::run_observed(&plan, &stop, on_start, |p, c, second| {
        let rec = &second.rec;
        if !console.quiet {
            printer.line(p, c);
        }
        if let Some(a) = abort.as_mut().and_then(|j| j.second(p, rec)) {
            if !stop.is_stopped() {
                say!("stopping: {}", a.describe());
                stop.stop();
            }
        }
        if console.verbose >= 2 {
            if let Ok(line) = serde_json::to_string(p) {
                say!("{line}");
            }
        }
        if hlog_error.is_none() {
            hlog_error = hlog.interval(p.t as u64 - 1, rec).err();
        }
        for (tag, rtt) in group_tags.iter().zip(&second.group_rtt) {
            if hlog_error.is_none() {
                hlog_error = hlog.histogram(p.t as u64 - 1, tag, rtt).err();
            }
        }
        if let Some(d) = &dashboard {
            d.second(p, c, rec);
        }
        if let Some(m) = &metrics {
            exposition.update(p, c, rec);
            m.publish(exposition.render());
        }
    }) {
        Ok(o) => o,
        Err(e @ (EngineError::FdLimit(_) | EngineError::SourceAddress(_))) => {
            say!("error: {e}");
            return Ok(EXIT_USAGE);
        }
        Err(e) => return Err(e.into()),
    };
    for w in &outcome.unfinished_workers {
        say!(
            "worker {w} did not end within {} s of the stop: the report holds what it handed \
             in until then",
            engine::END_GRACE.as_secs()
        );
    }
    let last = outcome
        .intervals
        .iter()
        .rev()
        .find(|p| !p.partial)
        .map(|p| p.t as u64)
        .unwrap_or(0);
    if hlog_error.is_none() {
        hlog_error = hlog.interval(last, &outcome.tail).err();
    }
    for g in &outcome.groups {
        if hlog_error.is_none() {
            hlog_error = hlog
                .histogram(last, &crate::metrics::groups::rtt_tag(&g.name), &g.tail_rtt)
                .err();
        }
    }
    // A log that could not be written whole is not kept (nor read by the report): a
    // truncated one would pass for the run's.
    let hlog = match hlog_error {
        None => match hlog.finish() {
            Ok(staged) => Some(staged),
            Err(e) => {
                hlog_error = Some(e);
                None
            }
        },
        Some(_) => None,
    };
    if let Some(e) = hlog_error {
        say!(
            "warning: {} not written: {e}",
            run_dir.file_path("histograms.hlog").display()
        );
    }
    if let Some(m) = &metrics {
        exposition.finish(&outcome.tail, outcome.elapsed.as_secs_f64());
        m.publish(exposition.render());
    }
    let mut outcome = outcome;
    outcome.server_metrics = scrapers.and_then(scrape::Scrapers::finish);
    drop(embedded_metrics);
    if let Some(sm) = &outcome.server_metrics {
        for e in &sm.endpoints {
            if e.failed.total() > 0 {
                say!(
                    "warning: server_metrics {}: {} of {} scrapes gave nothing ({} connect, {} timeout, {} HTTP status, {} not metrics, {} cut short, {} left behind at the run's end)",
                    e.url, e.failed.total(), e.scrapes, e.failed.connect, e.failed.timeout, e.failed.http_status, e.failed.garbage, e.failed.truncated, e.failed.abandoned
                );
            }
            if e.dropped.total() > 0 {
                say!(
                    "warning: server_metrics {}: samples not kept: {} not finite, {} bad histograms, {} over a series cap ({} series), {} points over the run's cap",
                    e.url, e.dropped.non_finite, e.dropped.bad_histogram, e.dropped.samples_left_out, e.series_left_out, e.dropped.points_over_cap
                );
            }
        }
    }
    let mut summary = report::summarize(&info, &outcome);
    if let Some(fired) = abort.and_then(report::abort::AbortJudge::fired) {
        summary.aborted = Some(fired);
        summary.verdict = "fail".into();
    }
    report::interruption::apply(&mut summary, plan.duration, plan.interrupted);
    let written = report::write_all(&run_dir, &summary, plan.junit, hlog)
        .context("the report was not written")?;
    warn_if_moved(&run_dir);
    if let Some(d) = dashboard {
        let path = written.report_html.display().to_string();
        let html = std::fs::read_to_string(&written.report_html)
            .unwrap_or_else(|e| format!("{path} could not be read back: {e}"));
        let (stats, viewers) = d.finish(html, path);
        if console.verbose >= 1 {
            say!(
                "dashboard: {} pages rendered, slowest {:.1} ms, {:.1} ms on average; at most {viewers} viewer(s) at once",
                stats.frames,
                stats.slowest.as_secs_f64() * 1e3,
                stats.total.as_secs_f64() * 1e3 / stats.frames.max(1) as f64
            );
        }
    }
    if !console.quiet {
        progress::print_result(&summary);
        say!("summary  {}", written.summary_json.display());
        say!("report   {}", written.report_html.display());
        if let Some(j) = &written.junit_xml {
            say!("junit    {}", j.display());
        }
        if let Some(h) = &written.hlog {
            say!("hlog     {}", h.display());
        }
    }
    if a.output.json {
        print_json(&summary)?;
    }
    // A run stopped before any handshake could finish says so through its verdict, not as
    // an unreachable target; so does a server that answered in another dialect (reachable,
    // and the verdict names the dialect to set).
    if outcome.ever_connected == 0
        && !outcome.interrupted
        && report::reasons::other_dialect(&summary).is_none()
    {
        // Name what was seen: handshake refusals, else what the sockets reported (an ICMP
        // port unreachable shows as connection_refused), else silence. "()" told nothing.
        let reasons = if !summary.errors.connect.is_empty() {
            report::format::fmt_counts(&summary.errors.connect)
        } else if !summary.generator.send_errors.is_empty() {
            format!(
                "no reply; socket errors {}",
                report::format::fmt_counts(&summary.generator.send_errors)
            )
        } else {
            "no reply from the server".to_string()
        };
        say!(
            "error: target unreachable: no bot completed the handshake with {} ({reasons})",
            outcome.target,
        );
        return Ok(EXIT_UNREACHABLE);
    }
    Ok(if summary.verdict == "pass" {
        EXIT_PASS
    } else {
        EXIT_FAIL
    })
}

/// The scenario and protocol facts the report prints beside the measurements.
/// `server_metrics:`: the embedded server's own endpoint (when one names it) and the scrapers
/// of this shard's endpoints, scraping from `offset` after the run's start for `duration`
/// (a capacity step scrapes its judged window only). Both `None` when nothing is scraped.
pub(crate) fn start_server_metrics(
    plan: &Plan,
    start: &engine::RunStart,
    offset: Duration,
    duration: Duration,
) -> (
    Option<metrics_listen::MetricsServer>,
    Option<scrape::Scrapers>,
) {
    let shard = plan.shard.map_or(0, |s| s.index);
    let mine: Vec<_> = plan
        .server_metrics
        .iter()
        .filter(|e| e.shard == shard)
        .cloned()
        .collect();
    if mine.is_empty() {
        return (None, None);
    }
    let mut embedded = None;
    if mine.iter().any(|e| e.is_embedded()) && !start.servers.is_empty() {
        match serve::live_endpoint(
            (std::net::Ipv4Addr::LOCALHOST, 0).into(),
            plan.protocol.name().as_str(),
            start.servers.clone(),
        ) {
            Ok(m) => embedded = Some(m),
            Err(e) => say!("warning: the embedded server's /metrics: {e:#}"),
        }
    }
    let url = embedded
        .as_ref()
        .map(|m: &metrics_listen::MetricsServer| format!("http://{}/metrics", m.addr()));
    let scrapers = scrape::Scrapers::start(&mine, url.as_deref(), start.at + offset, duration);
    (embedded, Some(scrapers))
}

fn run_info(plan: &Plan, ov: &OverrideArgs) -> report::RunInfo {
    let info = plan.protocol.info();
    report::RunInfo {
        scenario: plan.name.clone(),
        scenario_file: plan.file.display().to_string(),
        protocol: info.name.into(),
        transport: plan.protocol.transport().describe(),
        dialect: plan.protocol.dialect_name(),
        rtt_source: engine::io::rtt_source(plan.protocol.transport(), plan.protocol.measures_rtt())
            .map(Into::into),
        seed: plan.seed,
        shard: plan.shard.map(|s| report::summary::ShardId {
            index: s.index,
            count: s.count,
        }),
        scenario_hash: scenario_hash(plan, ov),
        loss_method: report::summary::LossMethod {
            downstream: info.downstream_loss.into(),
            upstream: info.upstream_loss.into(),
        },
        metrics: engine::io::transport_metrics(plan.protocol.transport())
            .iter()
            .chain(info.metrics)
            .copied()
            .collect(),
        thresholds: plan.thresholds.clone(),
        input_rate_hz: plan.bot_template.input_rate_hz,
        snapshot_rate_hz: plan.server.snapshot_rate.map(f64::from),
        cannot_measure: cannot_measure(plan),
        unmeasurable: plan.unmeasurable,
        network: plan
            .network
            .as_ref()
            .and_then(|n| serde_json::to_value(n).ok()),
    }
}

/// The plan's thresholds (its own and the default checks) on a figure its protocol
/// configuration cannot take, with why.
fn unmeasurable_thresholds(plan: &Plan) -> Vec<(&scenario::Threshold, String)> {
    let cannot = cannot_measure(plan);
    plan.thresholds
        .iter()
        .filter_map(|t| {
            cannot
                .iter()
                .find(|(m, _)| m.same_figure(t.metric))
                .map(|(_, why)| (t, why.clone()))
        })
        .collect()
}

/// What was run, as a hash shards of one run share: the scenario file's bytes and the
/// overrides that shape the population (not the target, the output folder, the shard or the
/// seed, which summary.json records apart: whole runs of one scenario on several machines may
/// use their own seeds; shards of one run must share it, and merge checks that).
/// `None` when the file cannot be read again.
fn scenario_hash(plan: &Plan, ov: &OverrideArgs) -> Option<String> {
    let text = scenario::read_bounded(&plan.file).ok()?;
    let shape = format!(
        "bots={:?};duration_ms={}",
        ov.bots,
        plan.duration.as_millis()
    );
    Some(report::summary::fnv1a64(&[
        text.as_bytes(),
        shape.as_bytes(),
    ]))
}

/// The figures this plan's protocol configuration cannot take, with why: those its thresholds
/// name, and both losses (their method lines in the report say so).
fn cannot_measure(plan: &Plan) -> Vec<(scenario::Metric, String)> {
    let mut out: Vec<(scenario::Metric, String)> = Vec::new();
    let rtt = scenario::Metric::Time(
        scenario::threshold::TimeMetric::Rtt,
        scenario::threshold::Stat::P50,
    );
    if engine::io::rtt_source(plan.protocol.transport(), plan.protocol.measures_rtt()).is_none() {
        out.push((
            rtt,
            "the protocol's dialect has no RTT probe and its transport takes no RTT samples".into(),
        ));
    }
    let metrics = plan.thresholds.iter().map(|t| t.metric);
    for m in metrics.chain([
        scenario::Metric::UpstreamLoss,
        scenario::Metric::DownstreamLoss,
    ]) {
        if let Some(why) = plan.protocol.cannot_measure(m) {
            if !out.iter().any(|(o, _)| *o == m) {
                out.push((m, why.to_string()));
            }
        }
    }
    out
}

/// `value` as pretty JSON on stdout (what `--json` asks for).
pub(crate) fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    write_stdout(text.as_bytes()).context("writing JSON to stdout")
}

/// Bytes to stdout. A reader that went away (`tickswarm … --json | head -1`) is not an error:
/// what it did not read is dropped; any other failure is.
fn write_stdout(bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// A scenario name made safe for a folder name.
fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if s.is_empty() {
        "run".into()
    } else {
        s
    }
}
