//! `tickswarm compare BASE_DIR NEW_DIR`: the console edge of [`report::compare`].
//!
//! Exit codes: 0 no limited metric got worse than its limit (with no limits given, the
//! defaults in [`crate::report::compare::DEFAULT_LIMITS`]), 1 one did (or has no data),
//! 2 bad usage (a limit that does not parse, a folder that is not a run).

use std::path::{Path, PathBuf};

use super::{print_json, Console, OutputArgs, EXIT_FAIL, EXIT_PASS, EXIT_USAGE};
use crate::report;
use crate::report::compare::{self, Limit, RunData};
use crate::scenario;
use std::io::Write as _;

#[derive(clap::Args, Debug)]
pub(crate) struct CompareArgs {
    /// BASE_DIR NEW_DIR: the base run's folder and the new run's (summary.json and
    /// histograms.hlog; a merged run works too). With --base, only NEW_DIR.
    #[arg(value_name = "RUN_DIR", num_args = 1..=2, required = true)]
    runs: Vec<PathBuf>,
    /// A base run's folder; repeat it (or separate folders with commas) to hold the new run
    /// against several base runs: each figure's base is their median, and the noise test
    /// measures how much whole runs differ from their spread. Then give only NEW_DIR.
    #[arg(long = "base", value_name = "RUN_DIR", value_delimiter = ',')]
    base: Vec<PathBuf>,
    /// How much worse METRIC may get: `rtt.p99=10%` (share of the base value), `rtt.p99=+2ms`,
    /// `loss.downstream=+0.5pp` (percentage points), `bots_lost=+0`. Repeat it, or separate
    /// limits with commas. Wins over the scenario's `compare:` block for the same metric.
    #[arg(
        long = "max-regress",
        value_name = "METRIC=LIMIT",
        env = "TICKSWARM_MAX_REGRESS",
        value_delimiter = ','
    )]
    max_regress: Vec<String>,
    /// Scenario whose `compare.max_regress` block to apply (default: the new run's
    /// scenario_file, when that file is there).
    #[arg(long, value_name = "FILE", env = "TICKSWARM_COMPARE_SCENARIO")]
    scenario: Option<PathBuf>,
    /// Write compare.html (both runs side by side) and compare.json into this folder.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    #[command(flatten)]
    output: OutputArgs,
}

/// The scenario's `compare:` limits, from `--scenario` or the new run's own scenario file.
fn scenario_limits(a: &CompareArgs, new: &RunData, console: Console) -> Result<Vec<Limit>, String> {
    let (path, explicit) = match &a.scenario {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(&new.summary.scenario_file), false),
    };
    if !explicit && !path.is_file() {
        return Ok(Vec::new());
    }
    let file = scenario::load(&path).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (metric, limit) in &file.compare.max_regress {
        out.push(Limit::parse(metric, limit).map_err(|e| {
            format!(
                "{}: compare.max_regress: {}",
                path.display(),
                e.to_string().trim_start_matches("--max-regress ")
            )
        })?);
    }
    if !out.is_empty() && !console.quiet {
        say!(
            "limits   {} from {} (compare.max_regress)",
            out.len(),
            path.display()
        );
    }
    Ok(out)
}

fn load(dir: &Path) -> Result<RunData, String> {
    RunData::load(dir).map_err(|e| e.to_string())
}

/// The base runs' folders and the new run's, from `BASE NEW` or `--base ... NEW`.
fn base_and_new(a: &CompareArgs) -> Result<(Vec<PathBuf>, PathBuf), String> {
    match (a.base.as_slice(), a.runs.as_slice()) {
        ([], [base, new]) => Ok((vec![base.clone()], new.clone())),
        ([], [_]) => Err(
            "compare needs a base: BASE_DIR NEW_DIR, or NEW_DIR with --base BASE_DIR (repeat              --base for several base runs)"
                .into(),
        ),
        (_, [new]) => Ok((a.base.clone(), new.clone())),
        (_, _) => Err(
            "with --base give only the new run's folder (the base runs are the --base folders)"
                .into(),
        ),
    }
}

pub(crate) fn cmd_compare(a: &CompareArgs, console: Console) -> anyhow::Result<u8> {
    let usage = |e: String| {
        say!("error: {e}");
        Ok(EXIT_USAGE)
    };
    let run_dir = match a
        .out
        .as_deref()
        .map(|o| report::RunDir::open(o, a.output.force))
    {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(e)) => return usage(e.to_string()),
    };
    let mut limits = Vec::new();
    for text in &a.max_regress {
        match Limit::parse_assignment(text) {
            Ok(l) => limits.push(l),
            Err(e) => return usage(e.to_string()),
        }
    }
    let (base_dirs, new_dir) = match base_and_new(a) {
        Ok(d) => d,
        Err(e) => return usage(e),
    };
    let mut bases = Vec::with_capacity(base_dirs.len());
    for dir in &base_dirs {
        match load(dir) {
            Ok(r) => bases.push(r),
            Err(e) => return usage(e),
        }
    }
    let new = match load(&new_dir) {
        Ok(r) => r,
        Err(e) => return usage(e),
    };
    let several = bases.len() > 1;
    for base in &bases {
        if base.summary.protocol != new.summary.protocol && !console.quiet {
            say!(
                "warning: comparing runs of different protocols ({} and {}){}",
                base.summary.protocol,
                new.summary.protocol,
                if several {
                    format!(" (base {})", base.dir.display())
                } else {
                    String::new()
                }
            );
        }
        // Two runs of different scenario contents (or `--bots`/`--duration` overrides) differ
        // by design, not by a build: said, not refused (a scenario edited between builds is
        // common).
        if let (Some(b), Some(n)) = (&base.summary.scenario_hash, &new.summary.scenario_hash) {
            if b != n && !console.quiet {
                let which = if several {
                    format!(" (base {})", base.dir.display())
                } else {
                    String::new()
                };
                say!(
                    "warning: the runs came from different scenarios (scenario_hash {b} and \
                     {n}: the file's bytes or the --bots/--duration overrides changed), so a \
                     change below may be the scenario's, not the server's{which}"
                );
            }
        }
    }
    // The scenario's limits first: a command-line limit on the same metric comes later and wins.
    let mut all = match scenario_limits(a, &new, console) {
        Ok(l) => l,
        Err(e) => return usage(e),
    };
    all.extend(limits);
    if all.is_empty() {
        all = bases
            .iter()
            .fold(None::<Vec<Limit>>, |kept, base| {
                let here = compare::default_limits(base, &new);
                Some(match kept {
                    None => here,
                    Some(k) => k
                        .into_iter()
                        .filter(|l| here.iter().any(|h| h.metric.name == l.metric.name))
                        .collect(),
                })
            })
            .unwrap_or_default();
        if !console.quiet {
            let texts: Vec<String> = all
                .iter()
                .map(|l| format!("{}={}", l.metric.name, l.text))
                .collect();
            say!(
                "limits   {} (the defaults: no --max-regress or compare: block given)",
                if texts.is_empty() {
                    "none: neither default metric was measured in both runs".to_string()
                } else {
                    texts.join(", ")
                }
            );
        }
    }
    // The per-second histograms of the limited metrics, for the noise test.
    let tags = compare::limited_tags(&all);
    let mut new = new;
    for run in bases.iter_mut().chain([&mut new]) {
        if let Err(e) = run.load_seconds(&tags) {
            return usage(format!("{}: {e}", run.dir.display()));
        }
    }
    let c = compare::compare_with_bases(&bases, &new, &all);
    if !console.quiet {
        match base_dirs.as_slice() {
            [one] => say!("base     {}", one.display()),
            many => {
                say!("base     the median of {} runs:", many.len());
                for d in many {
                    say!("           {}", d.display());
                }
            }
        }
        say!("new      {}", new_dir.display());
        say_inline!("{c}");
    }
    if let Some(out) = &run_dir {
        // Both staged before either is renamed: a failure leaves the previous pair whole.
        let stage = |name: &str, bytes: &[u8]| -> Result<report::Staged<'_>, report::RunDirError> {
            let mut f = out.stage(name)?;
            f.write_all(bytes).map_err(|e| f.error(e))?;
            Ok(f)
        };
        let html = stage(
            "compare.html",
            compare::render_html(&c, &bases, &new).as_bytes(),
        )?;
        let json = stage(
            "compare.json",
            (serde_json::to_string_pretty(&c)? + "\n").as_bytes(),
        )?;
        let html = html.commit()?;
        json.commit()?;
        super::warn_if_moved(out);
        if !console.quiet {
            say!("report   {}", html.display());
        }
    }
    for r in c.rows.iter().filter_map(|r| r.reason.as_ref()) {
        // Always said, even with --quiet: it is why the exit code is 1.
        say!("REGRESSED {r}");
    }
    for r in c.rows.iter().filter_map(|r| r.noise.as_ref()) {
        // Why a value past its limit did not fail the gate: said even with --quiet.
        say!("not a regression: {r}");
    }
    if !console.quiet {
        say!(
            "verdict  {}",
            if c.regressed {
                "REGRESSED"
            } else {
                "no regression"
            }
        );
    }
    if a.output.json {
        print_json(&c)?;
    }
    Ok(if c.regressed { EXIT_FAIL } else { EXIT_PASS })
}
