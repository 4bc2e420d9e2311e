//! The target's own metrics, as scraped from its Prometheus endpoints during a run
//! (`server_metrics:`), turned into per-second series on the run's clock.
//!
//! Scrapes are scheduled on the run's clock, slot `k` at `k × interval` after the run's
//! start (slot 0 is the baseline), and each value is filed under its slot's time, so the
//! server's points line up with the bots' per-second points (`t` = 1, 2, 3 ... for a 1 s
//! interval). Per series:
//! - a **counter** is stored as a rate: its increase since the previous successful scrape
//!   divided by the scheduled time between the two slots (not the measured one, so a counter
//!   that rises by 100 a scrape reads exactly 100/s at a 1 s interval); a counter that went
//!   down (a restart) gives no rate for that slot;
//! - a **gauge** (and an untyped sample) is stored as the value scraped;
//! - a **histogram** is stored as quantiles (p50, p99) of the observations between the two
//!   scrapes, from the bucket deltas, interpolated linearly inside the bucket that holds the
//!   rank, the first bucket starting at 0, as Prometheus' `histogram_quantile` does; a rank
//!   in the `+Inf` bucket reads as the highest finite bound. No observations: no quantile.
//!
//! The text exposition format is parsed by the `prometheus-parse` crate. Summaries and a
//! histogram's `_sum`/`_count` samples are not stored.

use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::server_budget::{self, RunBudget};

/// One series' value in one scrape.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Counter(f64),
    Gauge(f64),
    /// Cumulative bucket counts by upper bound, ascending, the last one `+Inf`.
    Histogram(Vec<(f64, f64)>),
}

impl Value {
    fn kind(&self) -> Kind {
        match self {
            Value::Counter(_) => Kind::Counter,
            Value::Gauge(_) => Kind::Gauge,
            Value::Histogram(_) => Kind::Histogram,
        }
    }
}

/// What kind of series: how its points were derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Points are per-second rates.
    Counter,
    /// Points are values.
    Gauge,
    /// Points are per-interval quantiles.
    Histogram,
}

/// One scrape, as kept: series key (`name` or `name{a="b",...}`, labels sorted) to value.
pub type Scraped = BTreeMap<String, Value>;

/// Why a scrape gave nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Connect,
    Timeout,
    /// An HTTP status other than 200.
    Status,
    /// Not HTTP, not UTF-8, over the size limit, or no sample in it.
    Garbage,
    /// A body shorter than its `Content-Length`: the connection closed part way, and what
    /// came is not what the server meant (a `10` cut to `1`).
    Truncated,
}

/// One body, parsed: the series kept, and the samples dropped for their values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    pub series: Scraped,
    /// Gauge, counter and untyped samples whose value was NaN or ±Inf (JSON has no number for
    /// them, and no rate or statistic can be taken of one).
    pub non_finite: u64,
    /// Histograms whose buckets fail [`sane_buckets`].
    pub bad_histograms: u64,
}

/// Parse one exposition-format body, keeping the series of the families in `wanted` (all
/// when empty). `None` when the text holds no sample at all: not a metrics endpoint.
/// Non-finite values and insane histograms are dropped here and counted, so nothing past
/// this point ever holds a NaN or an infinity but a histogram's `+Inf` bound.
pub fn parse(text: &str, wanted: &[String]) -> Option<Parsed> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).ok()?;
    if scrape.samples.is_empty() {
        return None;
    }
    let histograms: std::collections::HashSet<&str> = scrape
        .samples
        .iter()
        .filter(|s| matches!(s.value, prometheus_parse::Value::Histogram(_)))
        .map(|s| s.metric.as_str())
        .collect();
    let mut out = Parsed::default();
    for s in &scrape.samples {
        let family = s.metric.as_str();
        // A histogram's `_sum` and `_count` come as untyped samples of their own.
        let part_of_histogram = ["_sum", "_count"].iter().any(|suf| {
            family
                .strip_suffix(suf)
                .is_some_and(|b| histograms.contains(b))
        });
        if part_of_histogram || (!wanted.is_empty() && !wanted.iter().any(|w| w == family)) {
            continue;
        }
        let value = match &s.value {
            prometheus_parse::Value::Counter(v) if v.is_finite() => Value::Counter(*v),
            prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v)
                if v.is_finite() =>
            {
                Value::Gauge(*v)
            }
            prometheus_parse::Value::Counter(_)
            | prometheus_parse::Value::Gauge(_)
            | prometheus_parse::Value::Untyped(_) => {
                out.non_finite += 1;
                continue;
            }
            prometheus_parse::Value::Histogram(b) => {
                let mut b: Vec<(f64, f64)> = b.iter().map(|c| (c.less_than, c.count)).collect();
                b.sort_by(|x, y| x.0.total_cmp(&y.0));
                if !sane_buckets(&b) {
                    out.bad_histograms += 1;
                    continue;
                }
                Value::Histogram(b)
            }
            prometheus_parse::Value::Summary(_) => continue,
        };
        out.series.insert(key(family, &s.labels), value);
    }
    Some(out)
}

/// Whether cumulative `buckets` (sorted by bound) can be read as a histogram: bounds finite,
/// at least 0 and strictly ascending, the last one `+Inf`; counts finite, at least 0 and
/// never decreasing. Anything else is no histogram: a negative bound breaks the reading of
/// the first bucket as starting at 0 (and no time or size is negative), and a count that
/// goes down gives a negative number of observations in its bucket. Either gave a p99 of
/// -0.495 s that passed `server.tick_seconds p99 < 16.7ms`.
pub fn sane_buckets(buckets: &[(f64, f64)]) -> bool {
    let Some((&(last, _), finite)) = buckets.split_last() else {
        return false;
    };
    last == f64::INFINITY
        && finite.iter().all(|&(le, _)| le.is_finite() && le >= 0.0)
        && finite.windows(2).all(|w| w[0].0 < w[1].0)
        && buckets.iter().all(|&(_, n)| n.is_finite() && n >= 0.0)
        && buckets.windows(2).all(|w| w[0].1 <= w[1].1)
}

/// `name` or `name{a="b",c="d"}`, labels sorted by name.
fn key(name: &str, labels: &prometheus_parse::Labels) -> String {
    if labels.is_empty() {
        return name.to_string();
    }
    let sorted: BTreeMap<&String, &String> = labels.iter().collect();
    let inner: Vec<String> = sorted.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{name}{{{}}}", inner.join(","))
}

/// The quantile `q` of the observations in cumulative `buckets` (see the module doc for the
/// interpolation); `None` without observations.
pub fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, cum) in buckets {
        if cum >= rank && cum > prev.1 {
            if le.is_infinite() {
                return Some(prev.0);
            }
            let lower = if prev.0 < le { prev.0 } else { 0.0 };
            return Some(lower + (le - lower) * (rank - prev.1) / (cum - prev.1));
        }
        prev = (le, cum);
    }
    Some(prev.0)
}

/// Bucket counts of `now` minus `before` (same bounds), or `None` when the bounds differ or a
/// count went down (the histogram was reset).
fn delta(now: &[(f64, f64)], before: &[(f64, f64)]) -> Option<Vec<(f64, f64)>> {
    if now.len() != before.len() {
        return None;
    }
    now.iter()
        .zip(before)
        .map(|(a, b)| (a.0 == b.0 && a.1 >= b.1).then_some((a.0, a.1 - b.1)))
        .collect()
}

/// One slot of one series.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Point {
    /// Seconds since the run started: the scrape's scheduled time.
    pub t: f64,
    /// A gauge's value or a counter's rate per second; `null` for histograms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// A histogram's quantiles over the interval, and its observations per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
}

/// One series over the run, and its whole-run figures.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Series {
    pub kind: Kind,
    pub points: Vec<Point>,
    /// Over the points' values (gauges) or rates (counters); histograms: over the
    /// per-interval p99s.
    pub min: Option<f64>,
    pub mean: Option<f64>,
    pub max: Option<f64>,
    /// Histograms: the whole run's bucket counts (last successful scrape minus the first),
    /// from which any quantile is read, and p50/p99 of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "inf_as_null")]
    pub buckets: Vec<(f64, f64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
}

impl Series {
    /// A statistic of the series, as a threshold reads it: `quantile` (0..=1) from the whole
    /// run's buckets for a histogram; otherwise `min`/`mean`/`max` of the points.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        quantile(&self.buckets, q)
    }
}

/// Bucket bounds in JSON: `+Inf` is `null` (JSON has no infinity; serde_json would write
/// `null` and then refuse to read it back).
mod inf_as_null {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(b: &[(f64, f64)], s: S) -> Result<S::Ok, S::Error> {
        let v: Vec<(Option<f64>, f64)> = b
            .iter()
            .map(|&(le, n)| (le.is_finite().then_some(le), n))
            .collect();
        v.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(f64, f64)>, D::Error> {
        let v = Vec::<(Option<f64>, f64)>::deserialize(d)?;
        Ok(v.into_iter()
            .map(|(le, n)| (le.unwrap_or(f64::INFINITY), n))
            .collect())
    }
}

/// Scrapes that gave nothing, by reason.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Failures {
    pub connect: u64,
    pub timeout: u64,
    pub http_status: u64,
    pub garbage: u64,
    /// Bodies shorter than their `Content-Length`.
    #[serde(default)]
    pub truncated: u64,
    /// Scrapes still under way when the run ended, left behind (the run's end waits for a
    /// scrape at most `FINISH_GRACE`, src/cli/scrape.rs).
    #[serde(default)]
    pub abandoned: u64,
}

impl Failures {
    pub fn total(&self) -> u64 {
        self.connect
            + self.timeout
            + self.http_status
            + self.garbage
            + self.truncated
            + self.abandoned
    }
}

/// Samples of successful scrapes that were not kept, by reason (the caps are in
/// [`crate::metrics::server_budget`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Dropped {
    /// Gauge, counter and untyped samples whose value was NaN or ±Inf, and derived values
    /// (a rate) that would have been.
    pub non_finite: u64,
    /// Histogram samples whose buckets were not a histogram ([`sane_buckets`]).
    pub bad_histogram: u64,
    /// Samples of series not kept (over a series, family, key-length or run cap), once per
    /// scrape each: exact where `series_left_out` stops counting names.
    pub samples_left_out: u64,
    /// Points of kept series beyond the run's point budget.
    pub points_over_cap: u64,
}

impl Dropped {
    pub fn total(&self) -> u64 {
        self.non_finite + self.bad_histogram + self.samples_left_out + self.points_over_cap
    }
}

/// One endpoint's scrapes over the run: summary.json's `server_metrics.endpoints[]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Endpoint {
    /// As the scenario wrote it (`embedded` gets the address it had appended).
    pub url: String,
    pub interval_s: f64,
    /// Scrapes attempted, and those that gave nothing.
    pub scrapes: u64,
    pub failed: Failures,
    /// Distinct series left out (over a cap), counted up to
    /// [`crate::metrics::server_budget::MAX_LEFT_OUT_NAMES`].
    pub series_left_out: u64,
    /// Samples not kept, by reason.
    #[serde(default)]
    pub dropped: Dropped,
    pub series: BTreeMap<String, Series>,
}

/// summary.json's `server_metrics` block.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ServerMetrics {
    pub endpoints: Vec<Endpoint>,
    /// The observed values of the run's `server.NAME STAT` thresholds, by name and statistic
    /// (`tick_seconds.p99_us`): where each threshold's `metric` path leads.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub figures: BTreeMap<String, BTreeMap<String, f64>>,
}

impl ServerMetrics {
    /// The series a threshold's `server.NAME` reads: `NAME` itself, else the reference
    /// servers' `tickswarm_server_NAME`, in the first endpoint that has it.
    pub fn find(&self, name: &str) -> Option<&Series> {
        let prefixed = format!("tickswarm_server_{name}");
        self.endpoints
            .iter()
            .find_map(|e| e.series.get(name).or_else(|| e.series.get(&prefixed)))
    }
}

/// Builds one endpoint's series from its scrapes, slot by slot, within its caps.
pub struct Builder {
    url: String,
    interval_s: f64,
    max_series: usize,
    budget: Arc<RunBudget>,
    scrapes: u64,
    failed: Failures,
    dropped: Dropped,
    /// Hashes of the series left out, to count each once; at most
    /// [`server_budget::MAX_LEFT_OUT_NAMES`].
    left_out: HashSet<u64>,
    /// Series kept per family, for [`server_budget::MAX_SERIES_PER_FAMILY`].
    per_family: BTreeMap<String, usize>,
    /// The previous successful scrape and its slot.
    prev: Option<(u64, Scraped)>,
    first: Option<Scraped>,
    last: Option<Scraped>,
    series: BTreeMap<String, Series>,
}

impl Builder {
    /// `max_series`: how many series to keep (the first by key; more are counted as left
    /// out), within a budget of its own.
    pub fn new(url: &str, interval_s: f64, max_series: usize) -> Self {
        Self::sharing(url, interval_s, max_series, Arc::default())
    }

    /// [`Builder::new`], drawing series and points from the run's `budget`.
    pub fn sharing(url: &str, interval_s: f64, max_series: usize, budget: Arc<RunBudget>) -> Self {
        Self {
            url: url.to_string(),
            interval_s,
            max_series,
            budget,
            scrapes: 0,
            failed: Failures::default(),
            dropped: Dropped::default(),
            left_out: HashSet::new(),
            per_family: BTreeMap::new(),
            prev: None,
            first: None,
            last: None,
            series: BTreeMap::new(),
        }
    }

    /// A scrape under way when the run ended, left behind: a scrape, failed.
    pub fn abandoned(&mut self) {
        self.scrapes += 1;
        self.failed.abandoned += 1;
    }

    /// Whether a new series `k` may be kept: room in the endpoint, its family and the run,
    /// and a key of a sane length.
    fn admit(&mut self, k: &str) -> bool {
        let family = k.split_once('{').map_or(k, |(f, _)| f);
        let in_family = self.per_family.get(family).copied().unwrap_or(0);
        let ok = k.len() <= server_budget::MAX_KEY_BYTES
            && self.series.len() < self.max_series
            && in_family < server_budget::MAX_SERIES_PER_FAMILY
            && self.budget.take_series();
        if ok {
            *self.per_family.entry(family.to_string()).or_insert(0) += 1;
        }
        ok
    }

    /// Count a sample of series `k` as left out (its name once, while there is room).
    fn leave_out(&mut self, k: &str) {
        self.dropped.samples_left_out += 1;
        if self.left_out.len() < server_budget::MAX_LEFT_OUT_NAMES {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            k.hash(&mut h);
            self.left_out.insert(h.finish());
        }
    }

    /// Slot `slot`'s scrape: what it parsed to, or why it failed.
    pub fn add(&mut self, slot: u64, got: Result<Parsed, Failure>) {
        self.scrapes += 1;
        let parsed = match got {
            Ok(p) => p,
            Err(f) => {
                match f {
                    Failure::Connect => self.failed.connect += 1,
                    Failure::Timeout => self.failed.timeout += 1,
                    Failure::Status => self.failed.http_status += 1,
                    Failure::Garbage => self.failed.garbage += 1,
                    Failure::Truncated => self.failed.truncated += 1,
                }
                return;
            }
        };
        self.dropped.non_finite += parsed.non_finite;
        self.dropped.bad_histogram += parsed.bad_histograms;
        let mut now = parsed.series;
        // Keep the series already kept, then new ones while there is room.
        let keys: Vec<String> = now.keys().cloned().collect();
        for k in keys {
            if self.series.contains_key(&k) {
                continue;
            }
            if !self.admit(&k) {
                now.remove(&k);
                self.leave_out(&k);
            } else if let Some(kind) = now.get(&k).map(Value::kind) {
                self.series.insert(
                    k,
                    Series {
                        kind,
                        points: Vec::new(),
                        min: None,
                        mean: None,
                        max: None,
                        buckets: Vec::new(),
                        p50: None,
                        p99: None,
                    },
                );
            }
        }
        let t = slot as f64 * self.interval_s;
        for (k, v) in &now {
            let before = self
                .prev
                .as_ref()
                .filter(|(s, _)| *s < slot)
                .and_then(|(s, p)| p.get(k).map(|b| (*s, b)));
            let span = before.map(|(s, _)| (slot - s) as f64 * self.interval_s);
            let point = match (v, before) {
                (Value::Gauge(x), _) => Some(Point {
                    t,
                    value: Some(*x),
                    ..Point::default()
                }),
                (Value::Counter(x), Some((_, Value::Counter(b)))) => Some(Point {
                    t,
                    value: (x >= b).then(|| (x - b) / span.unwrap_or(1.0)),
                    ..Point::default()
                }),
                (Value::Histogram(x), Some((_, Value::Histogram(b)))) => {
                    let d = delta(x, b);
                    Some(Point {
                        t,
                        p50: d.as_deref().and_then(|d| quantile(d, 0.5)),
                        p99: d.as_deref().and_then(|d| quantile(d, 0.99)),
                        rate: d
                            .as_deref()
                            .and_then(|d| d.last())
                            .map(|l| l.1 / span.unwrap_or(1.0)),
                        ..Point::default()
                    })
                }
                // The baseline of a counter or histogram: nothing to difference yet.
                _ => None,
            };
            let Some(p) = point.and_then(|p| self.finite(p)) else {
                continue;
            };
            if let Some(s) = self.series.get_mut(k) {
                if self.budget.take_point() {
                    s.points.push(p);
                } else {
                    self.dropped.points_over_cap += 1;
                }
            }
        }
        if self.first.is_none() {
            self.first = Some(now.clone());
        }
        self.last = Some(now.clone());
        self.prev = Some((slot, now));
    }

    /// `p` with only finite figures (a rate of two finite counters can still overflow to
    /// infinity): a point with a non-finite figure is dropped and counted, never written as
    /// JSON's `null` where summary.json's schema wants a number.
    fn finite(&mut self, p: Point) -> Option<Point> {
        let figures = [p.value, p.p50, p.p99, p.rate];
        if figures.iter().flatten().all(|v| v.is_finite()) {
            Some(p)
        } else {
            self.dropped.non_finite += 1;
            None
        }
    }

    /// The endpoint's series with their whole-run figures.
    pub fn finish(mut self) -> Endpoint {
        for (k, s) in &mut self.series {
            let vals: Vec<f64> = s
                .points
                .iter()
                .filter_map(|p| {
                    if s.kind == Kind::Histogram {
                        p.p99
                    } else {
                        p.value
                    }
                })
                .collect();
            s.min = vals.iter().copied().reduce(f64::min);
            s.max = vals.iter().copied().reduce(f64::max);
            // Finite points can still sum past f64's range: then there is no mean, not `inf`.
            s.mean = (!vals.is_empty())
                .then(|| vals.iter().sum::<f64>() / vals.len() as f64)
                .filter(|m| m.is_finite());
            if let (Some(Value::Histogram(a)), Some(Value::Histogram(b))) = (
                self.last.as_ref().and_then(|l| l.get(k)),
                self.first.as_ref().and_then(|f| f.get(k)),
            ) {
                s.buckets = delta(a, b).unwrap_or_default();
                s.p50 = quantile(&s.buckets, 0.5);
                s.p99 = quantile(&s.buckets, 0.99);
            }
        }
        Endpoint {
            url: self.url,
            interval_s: self.interval_s,
            scrapes: self.scrapes,
            failed: self.failed,
            series_left_out: self.left_out.len() as u64,
            dropped: self.dropped,
            series: self.series,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: u64) -> String {
        // A counter +100 per scrape, a gauge, and a histogram whose observations each
        // scrape are 10 at ≤1 ms, 80 in (1 ms, 10 ms], 10 in (10 ms, 100 ms].
        format!(
            "# TYPE c_total counter\nc_total {}\n# TYPE g gauge\ng {}\n\
             # TYPE h_seconds histogram\nh_seconds_bucket{{le=\"0.001\"}} {}\n\
             h_seconds_bucket{{le=\"0.01\"}} {}\nh_seconds_bucket{{le=\"0.1\"}} {}\n\
             h_seconds_bucket{{le=\"+Inf\"}} {}\nh_seconds_sum 1\nh_seconds_count {}\n",
            100 * n,
            7 * n,
            10 * n,
            90 * n,
            100 * n,
            100 * n,
            100 * n
        )
    }

    #[test]
    fn counters_become_rates_gauges_values_histograms_quantiles() {
        let mut b = Builder::new("x", 1.0, 64);
        for slot in 0..4 {
            b.add(slot, Ok(parse(&text(slot), &[]).unwrap()));
        }
        let e = b.finish();
        assert_eq!(e.scrapes, 4);
        let c = &e.series["c_total"];
        assert_eq!(c.kind, Kind::Counter);
        let rates: Vec<_> = c.points.iter().map(|p| (p.t, p.value)).collect();
        assert_eq!(
            rates,
            vec![(1.0, Some(100.0)), (2.0, Some(100.0)), (3.0, Some(100.0))]
        );
        let g = &e.series["g"];
        assert_eq!(g.points.len(), 4);
        assert_eq!(g.max, Some(21.0));
        let h = &e.series["h_seconds"];
        assert_eq!(h.points.len(), 3);
        // p50: rank 50 of 100 is the 40th of 80 in (0.001, 0.01]: 0.001 + 0.009 * 40/80.
        assert_eq!(
            h.points[0].p50,
            Some(0.001 + (0.01 - 0.001) * (50.0 - 10.0) / 80.0)
        );
        // p99: rank 99 is the 9th of 10 in (0.01, 0.1]: 0.01 + 0.09 * 9/10.
        assert_eq!(
            h.points[0].p99,
            Some(0.01 + (0.1 - 0.01) * (0.99 * 100.0 - 90.0) / 10.0)
        );
        assert_eq!(h.points[0].rate, Some(100.0));
        assert_eq!(
            h.p99,
            Some(0.01 + (0.1 - 0.01) * (0.99 * 300.0 - 270.0) / 30.0)
        );
        assert!(!e.series.contains_key("h_seconds_sum"));
    }

    #[test]
    fn a_failed_scrape_is_counted_and_the_next_rate_spans_both_slots() {
        let mut b = Builder::new("x", 1.0, 64);
        b.add(0, Ok(parse(&text(0), &[]).unwrap()));
        b.add(1, Err(Failure::Timeout));
        b.add(2, Ok(parse(&text(2), &[]).unwrap()));
        let e = b.finish();
        assert_eq!(e.failed.timeout, 1);
        assert_eq!(
            e.series["c_total"].points,
            vec![Point {
                t: 2.0,
                value: Some(100.0),
                ..Point::default()
            }]
        );
    }

    #[test]
    fn garbage_is_not_a_scrape_and_named_series_are_kept_alone() {
        assert_eq!(parse("<html>nope</html>", &[]), None);
        let only = parse(&text(1), &["g".to_string()]).unwrap();
        assert_eq!(only.series.keys().collect::<Vec<_>>(), vec!["g"]);
        let mut b = Builder::new("x", 1.0, 1);
        b.add(0, Ok(parse(&text(1), &[]).unwrap()));
        assert_eq!(b.finish().series_left_out, 2);
    }

    #[test]
    fn whole_run_buckets_survive_json() {
        let mut b = Builder::new("x", 1.0, 64);
        b.add(0, Ok(parse(&text(0), &[]).unwrap()));
        b.add(1, Ok(parse(&text(1), &[]).unwrap()));
        let m = ServerMetrics {
            endpoints: vec![b.finish()],
            ..ServerMetrics::default()
        };
        let back: ServerMetrics =
            serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
        assert_eq!(
            back.find("h_seconds").and_then(|s| s.quantile(1.0)),
            Some(0.1)
        );
    }

    #[test]
    fn only_sane_buckets_are_a_histogram() {
        let inf = f64::INFINITY;
        assert!(sane_buckets(&[(0.0, 0.0), (0.1, 2.0), (inf, 2.0)]));
        for bad in [
            vec![(-1.0, 99.0), (1.0, 99.0), (inf, 100.0)],
            vec![(0.01, 100.0), (0.1, 50.0), (inf, 100.0)],
            vec![(0.01, 1.0), (0.1, 2.0)],
            vec![(0.01, 1.0), (0.01, 2.0), (inf, 2.0)],
            vec![(f64::NAN, 1.0), (inf, 2.0)],
            vec![(0.01, f64::NAN), (inf, 2.0)],
            vec![],
        ] {
            assert!(!sane_buckets(&bad), "{bad:?}");
        }
    }

    #[test]
    fn a_rate_past_f64_s_range_is_dropped_and_counted() {
        let mut b = Builder::new("x", 1.0, 64);
        b.add(
            0,
            Ok(parse("# TYPE c_total counter\nc_total -1e308\n", &[]).unwrap()),
        );
        b.add(
            1,
            Ok(parse("# TYPE c_total counter\nc_total 1e308\n", &[]).unwrap()),
        );
        let e = b.finish();
        assert_eq!(e.dropped.non_finite, 1);
        assert!(e.series["c_total"].points.is_empty());
    }

    #[test]
    fn the_run_s_budget_and_the_key_length_cap_what_is_kept() {
        let budget = Arc::new(RunBudget::new(3, 4));
        let body = "a 1\nb 1\nc 1\nd 1\n";
        let mut one = Builder::sharing("x", 1.0, 64, budget.clone());
        let mut two = Builder::sharing("y", 1.0, 64, budget);
        one.add(0, Ok(parse(body, &[]).unwrap()));
        two.add(0, Ok(parse(body, &[]).unwrap()));
        one.add(1, Ok(parse(body, &[]).unwrap()));
        let (one, two) = (one.finish(), two.finish());
        // 3 series for the run: `one` took them all; 4 points: 3 then 1.
        assert_eq!((one.series.len(), two.series.len()), (3, 0));
        assert_eq!((one.series_left_out, two.series_left_out), (1, 4));
        assert_eq!(one.dropped.points_over_cap, 2);
        let long = format!("g{{l=\"{}\"}} 1\n", "x".repeat(300));
        let mut b = Builder::new("x", 1.0, 64);
        b.add(0, Ok(parse(&long, &[]).unwrap()));
        assert_eq!(b.finish().dropped.samples_left_out, 1);
    }

    #[test]
    fn quantile_in_the_inf_bucket_is_the_highest_bound() {
        let b = [(0.01, 0.0), (0.1, 1.0), (f64::INFINITY, 10.0)];
        assert_eq!(quantile(&b, 0.99), Some(0.1));
        assert_eq!(quantile(&[(0.1, 0.0), (f64::INFINITY, 0.0)], 0.5), None);
    }
}
