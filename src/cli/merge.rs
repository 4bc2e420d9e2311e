//! `tickswarm merge RUN_DIR... --out DIR`: one result from runs on several load machines,
//! the console edge of [`crate::report::merge`].
//!
//! Exit codes: 0 the merged verdict passes, 1 it fails, 2 a run folder cannot be merged.

use std::path::PathBuf;

use anyhow::Context;

use super::{print_json, progress, warn_if_moved, Console, OutputArgs};
use super::{EXIT_FAIL, EXIT_PASS, EXIT_USAGE};
use crate::report;

#[derive(clap::Args, Debug)]
pub(crate) struct MergeArgs {
    /// Run folders, each with summary.json and histograms.hlog.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// Where to write the merged summary.json, report.html, junit.xml and histograms.hlog.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Merge the shards that are there when some of a sharded run's are missing (a lost pod):
    /// the merged verdict then fails, naming them. Without it a missing shard is an error.
    #[arg(long)]
    allow_missing: bool,
    #[command(flatten)]
    output: OutputArgs,
}

pub(crate) fn cmd_merge(a: &MergeArgs, console: Console) -> anyhow::Result<u8> {
    let run_dir = match report::RunDir::open(&a.out, a.output.force) {
        Ok(d) => d,
        Err(e) => {
            say!("error: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    let merged = match report::merge::merge_runs(&a.runs, a.allow_missing) {
        Ok(m) => m,
        Err(e) => {
            say!("error: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    let s = &merged.summary;
    // The merged log first: the report is drawn from it, and only from it (staged, so an
    // older run's histograms.hlog in a --force folder is never read in its place).
    let hlog_path = run_dir.file_path("histograms.hlog");
    let mut hlog = report::hlog::HlogWriter::new(
        run_dir.stage("histograms.hlog")?,
        std::time::SystemTime::now(),
        &format!("merge of {} runs of {}", a.runs.len(), s.scenario),
    )
    .with_context(|| format!("creating {}", hlog_path.display()))?;
    for second in merged.seconds() {
        let (sec, tags) = match second {
            Ok(x) => x,
            Err(e) => {
                say!("error: {e}");
                return Ok(EXIT_USAGE);
            }
        };
        hlog.interval_tags(sec, &tags)
            .with_context(|| format!("writing {}", hlog_path.display()))?;
    }
    let hlog = hlog
        .finish()
        .with_context(|| format!("writing {}", hlog_path.display()))?;
    let written = report::write_all(&run_dir, s, true, Some(hlog))
        .context("the merged report was not written")?;
    warn_if_moved(&run_dir);
    if !console.quiet {
        progress::print_result(s);
        match &s.merged_shards {
            Some(sh) if sh.missing.is_empty() => {
                say!("merged   all {} shards of one run", sh.count)
            }
            Some(sh) => say!(
                "merged   {} of {} shards; missing {} (the verdict fails)",
                sh.merged.len(),
                sh.count,
                sh.missing
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => say!("merged   {} whole runs of one scenario", a.runs.len()),
        }
        say!("summary  {}", written.summary_json.display());
        say!("report   {}", written.report_html.display());
    }
    if a.output.json {
        print_json(s)?;
    }
    Ok(if s.verdict == "pass" {
        EXIT_PASS
    } else {
        EXIT_FAIL
    })
}
