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
mod inspect;
mod merge;
mod metrics_listen;
mod progress;
mod protocols;
mod relay;
mod run;
mod scrape;
mod serve;
mod signals;
mod trend;
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

use run::{cmd_run, send_path};
use run::{run_info, start_server_metrics, unmeasurable_thresholds};
pub(crate) use signals::install_ctrl_c;

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
    /// A server's figures across runs: a page and JSON with a chart per figure and the runs
    /// whose figure moved beyond the noise of the runs before them.
    Trend(trend::TrendArgs),
    /// Put the network model (`network:`) between UDP clients and a server, as a relay.
    Relay(relay::RelayArgs),
    /// Read a capture (pcap, pcapng) of real clients: the protocol and dialect of each flow,
    /// its messages, and the client's rates, RTT and loss.
    Inspect(inspect::InspectArgs),
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
    #[command(flatten)]
    label: LabelArg,
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

/// `--label`, for the commands whose summary records one (`run`, `capacity`).
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct LabelArg {
    /// A name for this run, recorded in summary.json as `label` (a build id, a commit):
    /// `tickswarm trend --order label` orders runs by it and shows it. At most 128
    /// characters, no control characters.
    #[arg(long, value_name = "TEXT", env = "TICKSWARM_LABEL", value_parser = parse_label)]
    pub label: Option<String>,
}

fn parse_label(s: &str) -> Result<String, String> {
    report::summary::check_label(s)
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
        Command::Inspect(a) => inspect::cmd_inspect(&a),
        Command::Validate(a) => validate::cmd_validate(&a),
        Command::Init(a) => init::cmd_init(&a),
        Command::Merge(a) => merge::cmd_merge(&a, console),
        Command::Compare(a) => compare::cmd_compare(&a, console),
        Command::Trend(a) => trend::cmd_trend(&a, console),
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
