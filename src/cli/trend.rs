//! `tickswarm trend RUN_DIR...`: the console edge of [`report::trend`]: a page and a JSON file
//! of a server's figures across runs, and the changes beyond the noise said on the console.
//!
//! Exit codes: 0 the trend was written (a change is news, not a failure: `--fail-on-regress`
//! makes a regression of the newest run exit 1, for a gate), 2 bad usage (no runs, a folder
//! that is not a run, an output folder refused).

use std::io::Write as _;
use std::path::PathBuf;

use super::{print_json, Console, OutputArgs, EXIT_FAIL, EXIT_PASS, EXIT_USAGE};
use crate::report;
use crate::report::trend::{self, Order};

#[derive(clap::Args, Debug)]
pub(crate) struct TrendArgs {
    /// Run folders (each with its summary.json), or folders of them (searched one level down:
    /// a CI job's kept runs).
    #[arg(value_name = "RUN_DIR", num_args = 1.., required = true)]
    runs: Vec<PathBuf>,
    /// Write trend.html and trend.json into this folder (default: reports/trend-TIME, in UTC).
    #[arg(long, value_name = "DIR", env = "TICKSWARM_TREND_OUT")]
    out: Option<PathBuf>,
    /// Order the runs by their start time, or by their label (`run --label`: numbers as
    /// numbers, so build 10 follows build 9).
    #[arg(long, value_enum, default_value = "start")]
    order: OrderArg,
    /// Exit 1 when the newest run regressed beyond the noise of the runs before it.
    #[arg(long)]
    fail_on_regress: bool,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum OrderArg {
    Start,
    Label,
}

pub(crate) fn cmd_trend(a: &TrendArgs, console: Console) -> anyhow::Result<u8> {
    let usage = |e: String| {
        say!("error: {e}");
        Ok(EXIT_USAGE)
    };
    let (dirs, skipped) = match trend::find_runs(&a.runs) {
        Ok(x) => x,
        Err(e) => return usage(e.to_string()),
    };
    let out_path = a.out.clone().unwrap_or_else(|| {
        let now = time::OffsetDateTime::now_utc();
        let stamp = now
            .format(time::macros::format_description!(
                "[year][month][day]-[hour][minute][second]"
            ))
            .unwrap_or_else(|_| "now".into());
        PathBuf::from("reports").join(format!("trend-{stamp}"))
    });
    let order = match a.order {
        OrderArg::Start => Order::Start,
        OrderArg::Label => Order::Label,
    };
    let (t, unreadable) = match trend::build(&dirs, &a.runs, order, &out_path) {
        Ok(t) => t,
        Err(e) => return usage(e.to_string()),
    };
    let out = match report::RunDir::open(&out_path, a.output.force) {
        Ok(d) => d,
        Err(e) => return usage(e.to_string()),
    };
    let stage = |name: &str, bytes: &[u8]| -> Result<report::Staged<'_>, report::RunDirError> {
        let mut f = out.stage(name)?;
        f.write_all(bytes).map_err(|e| f.error(e))?;
        Ok(f)
    };
    let html = stage("trend.html", report::html::trend::render(&t)?.as_bytes())?;
    let json = stage(
        "trend.json",
        (serde_json::to_string_pretty(&t)? + "\n").as_bytes(),
    )?;
    let html = html.commit()?;
    json.commit()?;
    super::warn_if_moved(&out);
    let changes = t.changes();
    if !console.quiet {
        for s in &skipped {
            say!("skipped  {} (no summary.json)", s.display());
        }
        for (s, why) in &unreadable {
            say!(
                "skipped  {} (its summary.json cannot be read: {why})",
                s.display()
            );
        }
        say!("runs     {} (ordered by {})", t.runs.len(), t.order);
        for w in &t.warnings {
            say!("note     run #{}: {}", w.run + 1, w.text);
        }
        say!("trend    {}", html.display());
    }
    let newest = t.runs.len().saturating_sub(1);
    for c in &changes {
        let name = t.runs[c.run].name(c.run);
        // Said even with --quiet when it decides the exit code.
        if !console.quiet || (a.fail_on_regress && c.run == newest) {
            say!(
                "{:<9} run {name}: {} {} (expected {} ± {}, from runs {})",
                c.judged.state.to_uppercase(),
                c.figure.title,
                c.figure.format(c.value),
                c.figure.format(c.judged.expected),
                c.figure.format(c.judged.band),
                c.judged
                    .against
                    .iter()
                    .map(|i| format!("#{}", i + 1))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    if a.output.json {
        print_json(&t)?;
    }
    let regressed_now = changes
        .iter()
        .any(|c| c.run == newest && c.judged.state == "regressed");
    Ok(if a.fail_on_regress && regressed_now {
        EXIT_FAIL
    } else {
        EXIT_PASS
    })
}
