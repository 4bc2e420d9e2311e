//! The run's histograms themselves, read back from `histograms.hlog` next to the report.
//!
//! summary.json keeps seven statistics per histogram; a percentile plot and p50/p90/p99/max
//! per second need the distributions. The log holds every per-second histogram of every
//! metric (written before the report, by the run or by `merge`), so the report reads it
//! when it is there and falls back to the summary's statistics when it is not.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;

use crate::metrics::new_histogram;

/// One metric's histograms: the whole run, and each second (by start second).
pub struct TagHists {
    pub total: Histogram<u64>,
    pub by_second: BTreeMap<u64, Histogram<u64>>,
}

/// Every metric in a log, by tag.
#[derive(Default)]
pub struct HistLog {
    pub tags: BTreeMap<String, TagHists>,
}

fn add(into: &mut Histogram<u64>, h: &Histogram<u64>) {
    // Same bounds on both sides for our own logs; a foreign log with wider values saturates.
    if into.add(h).is_err() {
        for v in h.iter_recorded() {
            into.saturating_record_n(v.value_iterated_to(), v.count_at_value());
        }
    }
}

impl HistLog {
    /// Read `path`; an unreadable entry is an error (a report drawn from half a log would
    /// mislead), the caller then falls back to the summary.
    pub fn read(path: &Path) -> Result<HistLog, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut de = Deserializer::new();
        let mut out = HistLog::default();
        for (i, entry) in IntervalLogIterator::new(&bytes).enumerate() {
            let entry = entry.map_err(|e| format!("entry {i}: {e:?}"))?;
            let LogEntry::Interval(iv) = entry else {
                continue;
            };
            let tag = iv.tag().map(|t| t.as_str().to_string()).unwrap_or_default();
            let raw = base64::engine::general_purpose::STANDARD
                .decode(iv.encoded_histogram())
                .map_err(|e| format!("entry {i}: {e}"))?;
            let h: Histogram<u64> = de
                .deserialize(&mut raw.as_slice())
                .map_err(|e| format!("entry {i}: {e:?}"))?;
            let t = out.tags.entry(tag).or_insert_with(|| TagHists {
                total: new_histogram(),
                by_second: BTreeMap::new(),
            });
            add(&mut t.total, &h);
            let sec = iv.start_timestamp().as_secs();
            add(t.by_second.entry(sec).or_insert_with(new_histogram), &h);
        }
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
}
