//! The command-line edge: argument parsing, console output, exit codes.
//!
//! Exit codes: 0 pass, 1 thresholds failed, 2 bad usage or scenario, 3 target unreachable
//! (no bot completed the handshake).

mod metrics_listen;
mod progress;
mod serve;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::engine::{self, EngineError, StopSignal};
use crate::protocol::ProtocolName;
use crate::report;
use crate::scenario::{self, parse_duration, Overrides, Plan};

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
        Exit codes: 0 pass, 1 thresholds failed, 2 bad usage or scenario, \
        3 target unreachable (no bot completed the handshake)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a scenario: spawn the bots, measure, write summary.json and report.html.
    Run(RunArgs),
    /// Run a protocol's reference server as a standalone process (a stand-in staging server).
    Serve(serve::ServeArgs),
    /// Check a scenario file and print what it would run.
    Validate(ValidateArgs),
    /// List the protocols, their transports and what each can measure.
    Protocols,
    /// Merge runs from several load machines into one result (exact histogram merge).
    Merge(MergeArgs),
}

#[derive(clap::Args, Debug)]
struct MergeArgs {
    /// Run folders, each with summary.json and histograms.hlog.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// Where to write the merged summary.json, report.html, junit.xml and histograms.hlog.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Scenario YAML file.
    scenario: PathBuf,
    #[command(flatten)]
    ov: OverrideArgs,
    /// Serve live metrics for Prometheus at http://ADDR/metrics while the run goes on
    /// (updated each second; e.g. 127.0.0.1:9464, or port 0 for a free one).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
}

#[derive(clap::Args, Debug)]
struct ValidateArgs {
    /// Scenario YAML file.
    scenario: PathBuf,
    #[command(flatten)]
    ov: OverrideArgs,
}

#[derive(clap::Args, Debug, Clone)]
struct OverrideArgs {
    /// Server to load instead of the scenario's target: HOST:PORT, HOST:FIRST-LAST (servers on
    /// consecutive ports), a comma-separated list of those, or `embedded`.
    #[arg(long, value_name = "HOST:PORT")]
    target: Option<String>,
    /// Peak bot population (every population stage is scaled to it).
    #[arg(long, value_name = "N")]
    bots: Option<u64>,
    /// Run time, e.g. 15s, 2m.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Output folder (default: reports/<scenario>-<UTC timestamp>/).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Seed for every bot decision (same seed, same decisions).
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// Worker threads (default: one per core).
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
}

impl OverrideArgs {
    fn to_overrides(&self) -> Overrides {
        Overrides {
            target: self.target.clone(),
            bots: self.bots,
            duration: self.duration,
            out: self.out.clone(),
            seed: self.seed,
            workers: self.workers,
        }
    }
}

pub fn main() -> ExitCode {
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
    let result = match cli.command {
        Command::Run(a) => cmd_run(&a),
        Command::Serve(a) => serve::cmd_serve(&a),
        Command::Validate(a) => cmd_validate(&a),
        Command::Merge(a) => cmd_merge(&a),
        Command::Protocols => {
            cmd_protocols();
            Ok(EXIT_PASS)
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_FAIL)
        }
    }
}

/// Load and plan a scenario, printing a scenario error the way an editor can jump to.
fn load_plan(path: &Path, ov: &OverrideArgs) -> Result<Plan, u8> {
    let file = scenario::load(path).map_err(|e| {
        eprintln!("error: {e}");
        EXIT_USAGE
    })?;
    Plan::build(file, path, &ov.to_overrides()).map_err(|e| {
        eprintln!("error: {e}");
        EXIT_USAGE
    })
}

fn cmd_validate(a: &ValidateArgs) -> anyhow::Result<u8> {
    let plan = match load_plan(&a.scenario, &a.ov) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    print!("{}", plan.describe());
    println!("ok: {} is valid", a.scenario.display());
    Ok(EXIT_PASS)
}

fn cmd_protocols() {
    for p in ProtocolName::ALL {
        let i = p.info();
        println!("{} ({})", i.name, i.spec);
        println!(
            "  transport        {} (default port {})",
            i.transport, i.default_port
        );
        println!("  rtt              {}", i.rtt);
        println!("  downstream loss  {}", i.downstream_loss);
        println!("  upstream loss    {}", i.upstream_loss);
        for (d, what) in i.dialects {
            println!("  dialect {d:<8} {what}");
        }
        println!();
    }
}

/// Ctrl-C once: stop the swarm and still write the report. Twice: leave at once.
pub(crate) fn install_ctrl_c(stop: StopSignal) {
    let _ = std::thread::Builder::new()
        .name("tickswarm-signals".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    eprintln!("\nstopping: writing the report (Ctrl-C again to abort)");
                    stop.stop();
                }
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            });
        });
}

fn cmd_run(a: &RunArgs) -> anyhow::Result<u8> {
    let plan = match load_plan(&a.scenario, &a.ov) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let stop = StopSignal::new();
    install_ctrl_c(stop.clone());
    eprintln!(
        "tickswarm: {} bots, {} over {}, target {}, {} for {}",
        plan.planned,
        plan.protocol.name(),
        plan.protocol.name().info().transport,
        plan.target_text,
        plan.name,
        scenario::format_duration(plan.duration)
    );
    let mut printer = progress::Progress::new(plan.planned);
    let dir = plan.out_dir.clone().unwrap_or_else(|| {
        PathBuf::from("reports").join(format!(
            "{}-{}",
            sanitize(&plan.name),
            report::build::folder_stamp(std::time::SystemTime::now())
        ))
    });
    // A run refused before it starts leaves no folder behind.
    let dir_is_new = !dir.exists();
    let discard = |dir: &Path| {
        if dir_is_new {
            let _ = std::fs::remove_dir_all(dir);
        }
    };
    let hlog_path = dir.join("histograms.hlog");
    let mut hlog = report::hlog::HlogWriter::create(
        &hlog_path,
        std::time::SystemTime::now(),
        &format!("{} ({})", plan.name, plan.protocol.name()),
    )
    .with_context(|| format!("creating {}", hlog_path.display()))?;
    let mut hlog_error = None;
    let metrics = match a.metrics_listen {
        Some(addr) => match metrics_listen::MetricsServer::start(addr) {
            Ok(m) => {
                eprintln!("metrics  http://{}/metrics", m.addr());
                Some(m)
            }
            Err(e) => {
                drop(hlog);
                discard(&dir);
                eprintln!("error: {e:#}");
                return Ok(EXIT_USAGE);
            }
        },
        None => None,
    };
    let mut exposition = report::prometheus::Exposition::new(
        &plan.name,
        plan.protocol.name().as_str(),
        plan.planned,
    );
    let outcome = match engine::run(&plan, &stop, |p, c, rec| {
        printer.line(p, c);
        if hlog_error.is_none() {
            hlog_error = hlog.interval(p.t as u64 - 1, rec).err();
        }
        if let Some(m) = &metrics {
            exposition.update(p, c, rec);
            m.publish(exposition.render());
        }
    }) {
        Ok(o) => o,
        Err(e @ EngineError::FdLimit(_)) => {
            drop(hlog);
            discard(&dir);
            eprintln!("error: {e}");
            return Ok(EXIT_USAGE);
        }
        Err(e) => {
            drop(hlog);
            discard(&dir);
            return Err(e.into());
        }
    };
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
    if let Some(e) = hlog_error {
        eprintln!("warning: histograms.hlog is incomplete: {e}");
    }
    drop(hlog);
    if let Some(m) = &metrics {
        exposition.finish(&outcome.tail, outcome.elapsed.as_secs_f64());
        m.publish(exposition.render());
    }
    let summary = report::summarize(&run_info(&plan), &outcome);
    let written = report::write_all(&dir, &summary, plan.junit)
        .with_context(|| format!("writing the report to {}", dir.display()))?;
    progress::print_result(&summary);
    eprintln!("summary  {}", written.summary_json.display());
    eprintln!("report   {}", written.report_html.display());
    if let Some(j) = &written.junit_xml {
        eprintln!("junit    {}", j.display());
    }
    eprintln!("hlog     {}", hlog_path.display());
    // A run stopped before any handshake could finish says so through its verdict, not as
    // an unreachable target.
    if outcome.ever_connected == 0 && !outcome.interrupted {
        eprintln!(
            "error: target unreachable: no bot completed the handshake with {} ({})",
            outcome.target,
            summary
                .errors
                .connect
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", ")
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
fn run_info(plan: &Plan) -> report::RunInfo {
    let info = plan.protocol.info();
    report::RunInfo {
        scenario: plan.name.clone(),
        scenario_file: plan.file.display().to_string(),
        protocol: info.name.into(),
        transport: info.transport.into(),
        dialect: plan.protocol.dialect_name(),
        seed: plan.seed,
        loss_method: report::summary::LossMethod {
            downstream: info.downstream_loss.into(),
            upstream: info.upstream_loss.into(),
        },
        metrics: engine::transports::transport_metrics(plan.protocol.transport())
            .iter()
            .chain(info.metrics)
            .copied()
            .collect(),
        thresholds: plan.thresholds.clone(),
        input_rate_hz: plan.bot_template.input_rate_hz,
    }
}

fn cmd_merge(a: &MergeArgs) -> anyhow::Result<u8> {
    let merged = match report::merge::merge_runs(&a.runs) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    let s = &merged.summary;
    let written = report::write_all(&a.out, s, true)
        .with_context(|| format!("writing the merged report to {}", a.out.display()))?;
    let mut hlog = report::hlog::HlogWriter::create(
        &a.out.join("histograms.hlog"),
        std::time::SystemTime::now(),
        &format!("merge of {} runs of {}", a.runs.len(), s.scenario),
    )?;
    for (sec, tags) in &merged.by_second {
        hlog.interval_tags(*sec, tags)?;
    }
    progress::print_result(s);
    eprintln!("merged   {} runs", a.runs.len());
    eprintln!("summary  {}", written.summary_json.display());
    eprintln!("report   {}", written.report_html.display());
    Ok(if s.verdict == "pass" {
        EXIT_PASS
    } else {
        EXIT_FAIL
    })
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
