//! Serializable digests of histograms and loss counters (the shapes summary.json promises).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::LossCounts;

/// `{count,min,mean,p50,p90,p99,p999,max}` in microseconds. All zero when `count` is 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct HistSummary {
    pub count: u64,
    pub min: u64,
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl HistSummary {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            count: h.len(),
            min: h.min(),
            mean: (h.mean() * 10.0).round() / 10.0,
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// `{expected,received,rate}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LossSummary {
    pub expected: u64,
    pub received: u64,
    pub rate: f64,
}

impl From<LossCounts> for LossSummary {
    fn from(l: LossCounts) -> Self {
        Self {
            expected: l.expected,
            received: l.received,
            rate: l.rate(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::new_histogram;

    #[test]
    fn digest_of_known_values() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            h.record(v).unwrap();
        }
        let s = HistSummary::of(&h);
        assert_eq!(s.count, 1000);
        assert_eq!(s.min, 1);
        assert_eq!(s.p50, 500);
        assert_eq!(s.p99, 990);
        assert_eq!(s.max, 1000);
        assert!((s.mean - 500.5).abs() < 0.1);
    }

    #[test]
    fn empty_is_zero() {
        assert_eq!(HistSummary::of(&new_histogram()), HistSummary::default());
    }
}
