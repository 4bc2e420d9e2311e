//! Run outputs: summary.json (the contract), report.html, JUnit XML.

pub mod abort;
pub mod build;
pub mod capacity;
pub mod compare;
pub mod format;
pub mod groups;
pub mod hlog;
pub mod hlog_read;
pub mod html;
pub mod junit;
pub mod merge;
pub mod noise;
pub mod prometheus;
pub mod reasons;
pub mod summary;

use std::path::{Path, PathBuf};

pub use build::{summarize, RunInfo};
pub use summary::Summary;

/// Paths of the files a run wrote.
#[derive(Debug, Clone)]
pub struct Written {
    pub summary_json: PathBuf,
    pub report_html: PathBuf,
    pub junit_xml: Option<PathBuf>,
}

/// Write summary.json, report.html and (optionally) junit.xml into `dir`.
pub fn write_all(dir: &Path, s: &Summary, junit: bool) -> std::io::Result<Written> {
    std::fs::create_dir_all(dir)?;
    let summary_json = dir.join("summary.json");
    let json = serde_json::to_string_pretty(s).map_err(std::io::Error::other)?;
    std::fs::write(&summary_json, json + "\n")?;
    let report_html = dir.join("report.html");
    // The histograms the run (or `merge`) logged next to the summary draw the report's
    // percentile plots exactly; without them (or unreadable) it falls back to the summary.
    let log = html::HistLog::read(&dir.join("histograms.hlog")).ok();
    std::fs::write(&report_html, html::render_with(s, log.as_ref()))?;
    let junit_xml = if junit {
        let p = dir.join("junit.xml");
        std::fs::write(&p, junit::render(s))?;
        Some(p)
    } else {
        None
    };
    Ok(Written {
        summary_json,
        report_html,
        junit_xml,
    })
}
