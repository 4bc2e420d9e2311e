//! Serializable digests of histograms and loss counters (the shapes summary.json promises).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::LossCounts;

/// `{count,min,mean,p50,p90,p99,p999,max}` in microseconds.
///
/// With no samples (`count` 0) every statistic is written as `null`, never 0: a gate such as
/// `jq '.rtt_us.p99 < 50000'` must not pass a server that answered nothing. In memory the
/// fields are 0 then; check `count`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(into = "HistSummaryJson", from = "HistSummaryJson")]
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

/// [`HistSummary`] as written: statistics are `null` without samples.
#[derive(Serialize, Deserialize)]
struct HistSummaryJson {
    count: u64,
    min: Option<u64>,
    mean: Option<f64>,
    p50: Option<u64>,
    p90: Option<u64>,
    p99: Option<u64>,
    p999: Option<u64>,
    max: Option<u64>,
}

impl From<HistSummary> for HistSummaryJson {
    fn from(h: HistSummary) -> Self {
        let some = h.count > 0;
        Self {
            count: h.count,
            min: some.then_some(h.min),
            mean: some.then_some(h.mean),
            p50: some.then_some(h.p50),
            p90: some.then_some(h.p90),
            p99: some.then_some(h.p99),
            p999: some.then_some(h.p999),
            max: some.then_some(h.max),
        }
    }
}

impl From<HistSummaryJson> for HistSummary {
    fn from(j: HistSummaryJson) -> Self {
        Self {
            count: j.count,
            min: j.min.unwrap_or(0),
            mean: j.mean.unwrap_or(0.0),
            p50: j.p50.unwrap_or(0),
            p90: j.p90.unwrap_or(0),
            p99: j.p99.unwrap_or(0),
            p999: j.p999.unwrap_or(0),
            max: j.max.unwrap_or(0),
        }
    }
}

/// `{expected,received,rate}`; `rate` is `null` when nothing was expected (loss over no
/// traffic is not 0 %, it is not measured).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(into = "LossSummaryJson", from = "LossSummaryJson")]
pub struct LossSummary {
    pub expected: u64,
    pub received: u64,
    pub rate: f64,
}

#[derive(Serialize, Deserialize)]
struct LossSummaryJson {
    expected: u64,
    received: u64,
    rate: Option<f64>,
}

impl From<LossSummary> for LossSummaryJson {
    fn from(l: LossSummary) -> Self {
        Self {
            expected: l.expected,
            received: l.received,
            rate: (l.expected > 0).then_some(l.rate),
        }
    }
}

impl From<LossSummaryJson> for LossSummary {
    fn from(j: LossSummaryJson) -> Self {
        Self {
            expected: j.expected,
            received: j.received,
            rate: j.rate.unwrap_or(0.0),
        }
    }
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
    fn no_samples_are_written_as_null_not_zero() {
        let empty = HistSummary::of(&new_histogram());
        let json = serde_json::to_value(empty).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"count": 0, "min": null, "mean": null, "p50": null,
                "p90": null, "p99": null, "p999": null, "max": null})
        );
        // A gate like `.p99 < 50000` cannot pass on it.
        assert!(json["p99"].as_u64().is_none());
        // And it reads back (merge reads summaries) as an empty digest.
        let back: HistSummary = serde_json::from_value(json).unwrap();
        assert_eq!(back.count, 0);
    }

    #[test]
    fn loss_over_nothing_has_no_rate() {
        let none = LossSummary::from(LossCounts::default());
        let json = serde_json::to_value(none).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"expected": 0, "received": 0, "rate": null})
        );
        let some = LossSummary::from(LossCounts {
            expected: 4,
            received: 3,
        });
        assert_eq!(serde_json::to_value(some).unwrap()["rate"], 0.25);
    }
}
