//! The run's histograms themselves, read back from `histograms.hlog` next to the report.
//!
//! summary.json keeps seven statistics per histogram; a percentile plot and p50/p90/p99/max
//! per second need the distributions. The log holds every per-second histogram of every
//! metric (written before the report, by the run or by `merge`), so the report reads it
//! when it is there and falls back to the summary's statistics when it is not.

use std::collections::BTreeMap;
use std::path::Path;

use hdrhistogram::Histogram;

#[cfg(test)]
use crate::metrics::new_histogram;
use crate::report::hlog_read::{self, Project, Sparse};

/// One second of one metric: what the per-second charts draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecondStats {
    /// The start second.
    pub second: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

impl SecondStats {
    /// What `value_at_quantile` and `max` of the same samples in a histogram give.
    fn of(second: u64, h: &Sparse, p: &Project) -> Self {
        SecondStats {
            second,
            p50: h.quantile(p, 0.5),
            p90: h.quantile(p, 0.9),
            p99: h.quantile(p, 0.99),
            max: h.max(p),
        }
    }
}

/// One metric's histograms: the whole run's, and each second's statistics (by start second,
/// seconds with samples only). Not a histogram per second: a long run holds tens of thousands.
pub struct TagHists {
    pub total: Histogram<u64>,
    pub by_second: Vec<SecondStats>,
}

/// Every metric in a log, by tag.
#[derive(Default)]
pub struct HistLog {
    pub tags: BTreeMap<String, TagHists>,
}

/// The second being read: each tag's samples so far, held sparse (a second costs what was
/// recorded in it; the buffers are reused from second to second).
#[derive(Default)]
struct OpenSecond {
    second: Option<u64>,
    tags: BTreeMap<String, Sparse>,
}

impl OpenSecond {
    /// Turn the open second into statistics, and empty it.
    fn close(&mut self, log: &mut HistLog, p: &Project) {
        let Some(second) = self.second else { return };
        for (tag, h) in &mut self.tags {
            if h.is_empty() {
                continue;
            }
            if let Some(t) = log.tags.get_mut(tag) {
                t.by_second.push(SecondStats::of(second, h, p));
            }
            h.clear();
        }
    }
}

impl HistLog {
    /// Read `path` through the bounded reader; an unreadable or refused entry is an error (a
    /// report drawn from half a log would mislead), the caller then falls back to the summary.
    /// The entries of one second are consecutive in the log (as the run and `merge` write
    /// them); an entry for a second already closed is an error too.
    pub fn read(path: &Path) -> Result<HistLog, String> {
        let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::read_file(file, path)
    }

    /// [`HistLog::read`] from a file already open; `path` names it in messages.
    pub fn read_file(file: std::fs::File, path: &Path) -> Result<HistLog, String> {
        let p = Project::default();
        let mut out = HistLog::default();
        let mut open = OpenSecond::default();
        hlog_read::read_file(file, path, |e| {
            match open.second {
                Some(s) if e.second < s => {
                    return Err(format!(
                        "second {} comes after second {s}: the log is not in time order",
                        e.second
                    ))
                }
                Some(s) if e.second == s => {}
                _ => {
                    open.close(&mut out, &p);
                    open.second = Some(e.second);
                }
            }
            let t = out
                .tags
                .entry(e.tag.to_string())
                .or_insert_with(|| TagHists {
                    total: p.histogram(),
                    by_second: Vec::new(),
                });
            e.add_to(&mut t.total)?;
            open.tags
                .entry(e.tag.to_string())
                .or_default()
                .add(&p, e.counts, e.samples)
        })
        .map_err(|e| e.to_string())?;
        open.close(&mut out, &p);
        Ok(out)
    }
}

/// `(percentile 0..=1, value)` along a histogram, as HdrHistogram's percentile output lists
/// them (five steps per halving of the distance to 100 %), ending at the max.
pub fn percentile_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<(f64, f64)> = vec![(0.0, h.min() as f64)];
    for v in h.iter_quantiles(5) {
        out.push((v.quantile_iterated_to(), v.value_iterated_to() as f64));
    }
    out.push((1.0, h.max() as f64));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_points_climb_to_the_max() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            h.record(v).unwrap();
        }
        let pts = percentile_points(&h);
        assert_eq!(pts.first(), Some(&(0.0, 1.0)));
        assert_eq!(pts.last().map(|p| p.0), Some(1.0));
        // Monotone in both percentile and value.
        for w in pts.windows(2) {
            assert!(w[1].0 >= w[0].0 && w[1].1 >= w[0].1, "{w:?}");
        }
        // Near the median, the value is the median.
        let mid = pts.iter().find(|p| p.0 >= 0.5).unwrap();
        assert!((495.0..=505.0).contains(&mid.1), "{mid:?}");
    }

    /// Each second's statistics are those of a histogram of that second's samples, and the
    /// total is every sample.
    #[test]
    fn seconds_read_back_as_their_statistics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("histograms.hlog");
        let mut w =
            crate::report::hlog::HlogWriter::create(&path, std::time::SystemTime::UNIX_EPOCH, "t")
                .unwrap();
        let mut rec = crate::metrics::Recorder::new();
        let mut seconds = Vec::new();
        for sec in 0..3u64 {
            rec.reset();
            let mut h = new_histogram();
            for v in 1..=(200 * (sec + 1)) {
                rec.record_rtt(v * (sec + 3));
                h.record(v * (sec + 3)).unwrap();
            }
            seconds.push(SecondStats {
                second: sec,
                p50: h.value_at_quantile(0.5),
                p90: h.value_at_quantile(0.9),
                p99: h.value_at_quantile(0.99),
                max: h.max(),
            });
            w.interval(sec, &rec).unwrap();
        }
        drop(w);
        let log = HistLog::read(&path).unwrap();
        let rtt = &log.tags["rtt_us"];
        assert_eq!(rtt.by_second, seconds);
        assert_eq!(rtt.total.len(), 200 + 400 + 600);
    }

    /// An entry for a second already closed (a log out of time order) is an error: the report
    /// then falls back to the summary.
    #[test]
    fn a_log_out_of_time_order_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("histograms.hlog");
        let mut w =
            crate::report::hlog::HlogWriter::create(&path, std::time::SystemTime::UNIX_EPOCH, "t")
                .unwrap();
        let mut rec = crate::metrics::Recorder::new();
        rec.record_rtt(100);
        for sec in [0, 1, 0] {
            w.interval(sec, &rec).unwrap();
        }
        drop(w);
        let e = HistLog::read(&path).err().unwrap();
        assert!(e.contains("second 0 comes after second 1"), "{e}");
        assert!(e.contains("histogram entry 3"), "{e}");
    }
}
