//! Run outputs: summary.json (the contract), report.html, JUnit XML.
//!
//! Inside, arrows point one way: [`summary`] (the file's types) at the bottom; the
//! interrupted run's check ([`interruption`]) and a group's figures ([`groups`]) on it;
//! [`build`] (a run's summary, thresholds judged) above them; [`capacity`] (a search's
//! answer, a window judged) above that; and [`merge`] on top.

pub mod abort;
pub mod build;
pub mod capacity;
pub mod compare;
pub mod format;
pub mod groups;
pub mod hlog;
pub mod hlog_read;
pub mod html;
pub mod interruption;
pub mod junit;
pub mod merge;
pub mod noise;
pub mod prometheus;
pub mod reasons;
pub mod run_dir;
pub mod summary;
pub mod trend;

use std::io::Write as _;
use std::path::PathBuf;

pub use build::{summarize, RunInfo};
pub use run_dir::{RunDir, RunDirError, Staged};
pub use summary::Summary;

/// Paths of the files a run wrote.
#[derive(Debug, Clone)]
pub struct Written {
    pub summary_json: PathBuf,
    pub report_html: PathBuf,
    pub junit_xml: Option<PathBuf>,
    pub hlog: Option<PathBuf>,
}

/// Write summary.json, report.html and (optionally) junit.xml into `dir`, with `hlog` (the
/// run's histograms.hlog, staged) beside them.
///
/// Every file is staged before any is renamed into place ([`run_dir`]): a write that fails
/// (a full disk) leaves the folder's previous files as they were and names the file. The
/// report draws its percentile plots from `hlog` exactly; without one (a run whose log could
/// not be written, `capacity`) it draws from the summary, never from an older run's log.
pub fn write_all(
    dir: &RunDir,
    s: &Summary,
    junit: bool,
    hlog: Option<Staged<'_>>,
) -> Result<Written, RunDirError> {
    let json = serde_json::to_string_pretty(s).map_err(|e| RunDirError::Write {
        path: dir.file_path("summary.json"),
        source: std::io::Error::other(e),
    })? + "\n";
    let log = hlog.as_ref().and_then(|h| {
        let file = h.reopen().ok()?;
        html::HistLog::read_file(file, &dir.file_path(h.name())).ok()
    });
    let stage = |name: &str, bytes: &[u8]| -> Result<Staged<'_>, RunDirError> {
        let mut f = dir.stage(name)?;
        f.write_all(bytes).map_err(|e| f.error(e))?;
        Ok(f)
    };
    let summary_json = stage("summary.json", json.as_bytes())?;
    let report_html = stage("report.html", html::render_with(s, log.as_ref()).as_bytes())?;
    let junit_xml = if junit {
        Some(stage("junit.xml", junit::render(s).as_bytes())?)
    } else {
        None
    };
    Ok(Written {
        hlog: hlog.map(Staged::commit).transpose()?,
        summary_json: summary_json.commit()?,
        report_html: report_html.commit()?,
        junit_xml: junit_xml.map(Staged::commit).transpose()?,
    })
}
