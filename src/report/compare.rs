//! `tickswarm compare BASE NEW`: gate on change between two runs, not only on fixed numbers.
//!
//! A limit says how much worse a metric may get: `rtt.p99=10%` (relative to the base run),
//! `rtt.p99=+2ms` (absolute, in the metric's unit), `loss.downstream=+0.5pp` (percentage
//! points, for rates). Percentiles are read from both runs' `histograms.hlog` (every interval
//! added up), so they are exact for merged runs too and any quantile can be asked for
//! (`rtt.p95`, `rtt.p99.9`; the grammar is a scenario threshold's, [`Stat::parse`]). Rates and
//! counters come from `summary.json`.
//!
//! # Noise
//! A histogram metric past its limit on the plain values is a regression only when the
//! change is beyond run-to-run noise: a permutation test over the runs' seconds against the
//! allowance, with the drift each run shows between its own blocks of seconds folded in, on a
//! ratio scale (the method, and what it cannot tell, in [`noise`]). Every limited histogram
//! row that could be tested belongs to one family, and Holm's step-down procedure keeps the
//! chance that identical runs fail *any* of them at 5 %: ranked by p-value, the i-th
//! smallest (from 0) of `m` is tested at `5 % / (m - i)`, stopping at the first that is not
//! significant. Rates and counts are compared as they are.
//!
//! # Measured
//! `scripts/compare_noise.sh` (release build, 50 bots, 8 s runs of scenarios/quickstart.yaml,
//! on the 2 cores of the development machine shared with other builds): 10 identical runs
//! against `tickswarm serve cafe` compared pairwise (45 pairs: every failure is a false
//! alarm), and 10 runs against an independent cafe server without and with every pong
//! delayed 2 ms (every pass is a miss). Two sets of runs, each judged by both methods
//! (`--keep`, then `--reuse`): set 1 at a load average of 8 to 10, set 2 at 12.
//!
//! | method | limits | set 1 false alarms | set 1 caught | set 2 false alarms | set 2 caught |
//! | --- | --- | --- | --- | --- | --- |
//! | bootstrap of each run's seconds (before) | `rtt.p99=10%`, `loss.downstream=+0.5pp` | 8 / 45 | 7 / 10 | 10 / 45 | 3 / 10 |
//! | this test | `rtt.p99=10%`, `loss.downstream=+0.5pp` | 3 / 45 | 3 / 10 | 2 / 45 | 2 / 10 |
//! | bootstrap (before) | `rtt.p50=+1ms`, `loss.downstream=+0.5pp` | 0 / 45 | 10 / 10 | 0 / 45 | 8 / 10 |
//! | this test | `rtt.p50=+1ms`, `loss.downstream=+0.5pp` (shipped) | 0 / 45 | 10 / 10 | 0 / 45 | 9 / 10 |
//! | this test | shipped and `rtt.p99=+5ms` | 0 / 45 | 9 / 10 | 0 / 45 | 8 / 10 |
//!
//! Set 3, fresh runs through the script end to end with this build and the shipped limits, at
//! a load average of 5 to 7: 0 / 45 false alarms, 10 / 10 caught (the same runs judged the
//! way compare did before, bootstrap and `rtt.p99=10%`: 4 / 45 and 8 / 10).
//!
//! The one miss with the shipped limits in set 2 is a base run that was itself disturbed:
//! its median 757 µs (its neighbours' 76 to 181 µs), its p99 117 ms, so the 2 ms delay showed
//! as +1.59 ms and the run's own drift (±97 %) covered the 0.59 ms past the limit.
//!
//! Why the p50: on a busy 2-core machine a loopback RTT's p99 comes from its few highest
//! samples (373 per run here), and a run that fell in a quiet moment has a tenth of its
//! neighbours' p99 in all of its seconds: no test of one run against one run can tell that
//! from a server change, so a relative limit on a loopback p99 keeps failing identical runs,
//! and a 2 ms delay drowns in milliseconds of scheduling noise. The median moves by tens of
//! microseconds between such runs and by the delay when the server is slower, so docs/ci's
//! limits gate on `rtt.p50=+1ms` and loss. A tail limit with an absolute allowance
//! (`rtt.p99=+5ms`) can be added where runs are long enough for the tail to settle; it makes
//! the family two tests, each held to 2.5 %.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use serde::Serialize;
use thiserror::Error;

use super::format::{fmt_bytes, fmt_pct, fmt_plain, fmt_us};
use super::merge::{hlog_totals, read_summary, MergeError};
use super::noise;
use super::summary::Summary;
use crate::metrics::threshold::{Stat, STAT_FORMS};

#[derive(Debug, Error)]
pub enum CompareError {
    #[error(transparent)]
    Input(#[from] MergeError),
    #[error("--max-regress `{text}`: {message}")]
    Limit { text: String, message: String },
}

/// What a metric measures, which sets the units its values and limits are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Microseconds.
    Time,
    /// A fraction (0.01 = 1 %).
    Rate,
    Count,
    Bytes,
}

/// Where a metric's value comes from.
#[derive(Debug, Clone, PartialEq)]
enum Source {
    /// A statistic of the histogram with this hlog tag.
    Hist {
        tag: String,
        stat: HStat,
    },
    LossDownstream,
    LossUpstream,
    ConnectSuccess,
    DecodeErrors,
    BotsFailed,
    BotsLost,
    BotsSilentAtEnd,
    InputsSkipped,
    /// A capacity search's answer (`capacity.players`, `tickswarm capacity`).
    Capacity,
    /// A series scraped from the target's own metrics (`server_metrics:`): `server.NAME.STAT`,
    /// read from summary.json; `_seconds` series in µs.
    Server {
        name: String,
        stat: HStat,
    },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum HStat {
    Min,
    Mean,
    Max,
    /// A quantile in 0..=1.
    Q(f64),
}

impl HStat {
    fn statistic(self) -> noise::Statistic {
        match self {
            HStat::Min => noise::Statistic::Min,
            HStat::Mean => noise::Statistic::Mean,
            HStat::Max => noise::Statistic::Max,
            HStat::Q(q) => noise::Statistic::Quantile(q),
        }
    }
}

/// The hlog tags of the limited histogram metrics: what [`RunData::load_seconds`] reads for
/// the noise test.
pub fn limited_tags(limits: &[Limit]) -> Vec<String> {
    let mut tags: Vec<String> = limits
        .iter()
        .filter_map(|l| match &l.metric.source {
            Source::Hist { tag, .. } => Some(tag.clone()),
            _ => None,
        })
        .collect();
    tags.sort();
    tags.dedup();
    tags
}

/// A metric as `--max-regress` and the table name it.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricRef {
    /// As the user wrote it (canonical for the defaults), e.g. `rtt.p99`.
    pub name: String,
    source: Source,
    pub kind: Kind,
    /// True where a larger value is better (connect success).
    pub higher_is_better: bool,
}

/// The histograms the summary names, under the short names people write, with their units.
const HISTOGRAMS: &[(&[&str], &str, Kind)] = &[
    (&["rtt", "rtt_us"], "rtt_us", Kind::Time),
    (&["handshake", "handshake_us"], "handshake_us", Kind::Time),
    (
        &[
            "send_lateness",
            "lateness",
            "send_lateness_us",
            "generator.send_lateness_us",
        ],
        "send_lateness_us",
        Kind::Time,
    ),
    (
        &["snapshot_interarrival", "snapshot_interarrival_us"],
        "snapshot_interarrival_us",
        Kind::Time,
    ),
    (
        &[
            "bot_up_bytes_per_s",
            "bandwidth.per_bot_up_bytes_per_s",
            "per_bot_up_bytes_per_s",
        ],
        "bot_up_bytes_per_s",
        Kind::Bytes,
    ),
    (
        &[
            "bot_down_bytes_per_s",
            "bandwidth.per_bot_down_bytes_per_s",
            "per_bot_down_bytes_per_s",
        ],
        "bot_down_bytes_per_s",
        Kind::Bytes,
    ),
    (
        &[
            "packet_size_up_bytes",
            "bandwidth.packet_size_up_bytes",
            "packet_size_up",
        ],
        "packet_size_up_bytes",
        Kind::Bytes,
    ),
    (
        &[
            "packet_size_down_bytes",
            "bandwidth.packet_size_down_bytes",
            "packet_size_down",
        ],
        "packet_size_down_bytes",
        Kind::Bytes,
    ),
];

/// One grammar for statistics: a scenario's thresholds and compare's limits take the same
/// forms ([`Stat::parse`]).
fn parse_stat(s: &str) -> Option<HStat> {
    Some(match Stat::parse(s)? {
        Stat::Min => HStat::Min,
        Stat::Mean => HStat::Mean,
        Stat::Max => HStat::Max,
        Stat::Quantile(m) => HStat::Q(f64::from(m) / 1e6),
    })
}

impl MetricRef {
    /// Parse a metric name: `rtt.p99`, `handshake.max`, `loss.downstream`, `connect_success`,
    /// `bots_lost`, or `TAG.STAT` for any histogram tag in the runs' hlogs (protocol metrics).
    pub fn parse(name: &str) -> Result<MetricRef, String> {
        let name = name.trim();
        let simple = |source, kind, higher_is_better| MetricRef {
            name: name.to_string(),
            source,
            kind,
            higher_is_better,
        };
        match name {
            "loss.downstream" | "loss.downstream.rate" | "downstream_loss" => {
                return Ok(simple(Source::LossDownstream, Kind::Rate, false))
            }
            "loss.upstream" | "loss.upstream.rate" | "upstream_loss" => {
                return Ok(simple(Source::LossUpstream, Kind::Rate, false))
            }
            "connect_success" => return Ok(simple(Source::ConnectSuccess, Kind::Rate, true)),
            "decode_errors" => return Ok(simple(Source::DecodeErrors, Kind::Count, false)),
            "bots_failed" | "bots.failed" => {
                return Ok(simple(Source::BotsFailed, Kind::Count, false))
            }
            "bots_lost" | "bots.lost" => return Ok(simple(Source::BotsLost, Kind::Count, false)),
            "bots_silent_at_end" | "bots.silent_at_end" => {
                return Ok(simple(Source::BotsSilentAtEnd, Kind::Count, false))
            }
            "inputs_skipped" | "generator.inputs_skipped" => {
                return Ok(simple(Source::InputsSkipped, Kind::Count, false))
            }
            "capacity" | "capacity.players" => {
                return Ok(simple(Source::Capacity, Kind::Count, true))
            }
            _ => {}
        }
        if let Some((series, stat)) = name
            .strip_prefix("server.")
            .and_then(|r| r.rsplit_once('.'))
        {
            let stat = parse_stat(stat).ok_or_else(|| {
                format!("`{stat}` in `{name}` is not a statistic; use {STAT_FORMS}")
            })?;
            let kind = if series.ends_with("_seconds") {
                Kind::Time
            } else if series.contains("bytes") {
                Kind::Bytes
            } else {
                Kind::Count
            };
            return Ok(simple(
                Source::Server {
                    name: series.to_string(),
                    stat,
                },
                kind,
                false,
            ));
        }
        let Some((hist, stat)) = name.rsplit_once('.').and_then(|(h, s)| {
            // `rtt.p99.9`: the statistic itself has a dot.
            if s.chars().all(|c| c.is_ascii_digit()) {
                let (h2, p) = h.rsplit_once('.')?;
                Some((h2, format!("{p}.{s}")))
            } else {
                Some((h, s.to_string()))
            }
        }) else {
            return Err(format!(
                "unknown metric `{name}`; use e.g. rtt.p99, handshake.max, send_lateness.p99, \
                 loss.downstream, loss.upstream, connect_success, bots_lost, decode_errors"
            ));
        };
        let stat = parse_stat(&stat)
            .ok_or_else(|| format!("`{stat}` in `{name}` is not a statistic; use {STAT_FORMS}"))?;
        let (tag, kind) = HISTOGRAMS
            .iter()
            .find(|(names, _, _)| names.contains(&hist))
            .map(|(_, tag, kind)| (tag.to_string(), *kind))
            // A protocol's own histogram, by its hlog tag (units as the protocol declares).
            .unwrap_or_else(|| {
                let kind = if hist.ends_with("_us") {
                    Kind::Time
                } else {
                    Kind::Count
                };
                (hist.to_string(), kind)
            });
        Ok(MetricRef {
            name: name.to_string(),
            source: Source::Hist { tag, stat },
            kind,
            higher_is_better: false,
        })
    }

    /// The hlog tag this metric reads, if it is a histogram statistic.
    pub fn hlog_tag(&self) -> Option<&str> {
        match &self.source {
            Source::Hist { tag, .. } => Some(tag),
            _ => None,
        }
    }
}

/// How much worse a metric may get.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "type", content = "value")]
pub enum Allowance {
    /// A share of the base value (0.10 for `10%`).
    Relative(f64),
    /// In the metric's unit: µs, a fraction (`+0.5pp` is 0.005), a count, bytes.
    Absolute(f64),
}

/// One `--max-regress METRIC=LIMIT`.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    pub metric: MetricRef,
    pub allowance: Allowance,
    /// The limit as written, e.g. `+0.5pp`.
    pub text: String,
}

impl Limit {
    /// Parse `METRIC=LIMIT` as `--max-regress` takes it.
    pub fn parse_assignment(s: &str) -> Result<Limit, CompareError> {
        let (m, l) = s.split_once('=').ok_or_else(|| CompareError::Limit {
            text: s.into(),
            message: "write METRIC=LIMIT, e.g. rtt.p99=10% or loss.downstream=+0.5pp".into(),
        })?;
        Limit::parse(m, l)
    }

    /// Parse one limit on `metric`: `10%` (relative to the base), `+0.5pp` (rates),
    /// `+2ms` (times), `+3` (counts, bytes).
    pub fn parse(metric: &str, limit: &str) -> Result<Limit, CompareError> {
        let err = |message: String| CompareError::Limit {
            text: format!("{}={}", metric.trim(), limit.trim()),
            message,
        };
        let m = MetricRef::parse(metric).map_err(err)?;
        let text = limit.trim().to_string();
        // Worse is up for most metrics (`+2ms`) and down for those where more is better:
        // `capacity=-5%` reads as the drop it allows.
        let body = text
            .strip_prefix('+')
            .or_else(|| text.strip_prefix('-').filter(|_| m.higher_is_better))
            .unwrap_or(&text)
            .trim();
        let number = |s: &str| -> Result<f64, CompareError> {
            s.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    err(format!(
                        "`{text}` is not a limit: the number must be 0 or more"
                    ))
                })
        };
        let allowance = if let Some(n) = body.strip_suffix("pp") {
            if m.kind != Kind::Rate {
                return Err(err(format!(
                    "`pp` (percentage points) is for rates such as loss.downstream; `{}` is not one",
                    m.name
                )));
            }
            Allowance::Absolute(number(n)? / 100.0)
        } else if let Some(n) = body.strip_suffix('%') {
            Allowance::Relative(number(n)? / 100.0)
        } else {
            match m.kind {
                Kind::Time => {
                    let d = crate::duration::parse_duration(body).map_err(|e| {
                        err(format!(
                            "{e}; a time metric takes a share (10%) or a time (+2ms)"
                        ))
                    })?;
                    Allowance::Absolute(d.as_secs_f64() * 1e6)
                }
                Kind::Rate => {
                    return Err(err(format!(
                        "a rate takes percentage points (+0.5pp) or a share of the base (10%), \
                         not `{text}`"
                    )))
                }
                Kind::Count | Kind::Bytes => Allowance::Absolute(number(body)?),
            }
        };
        Ok(Limit {
            metric: m,
            allowance,
            text,
        })
    }
}

/// One side of a comparison: a run folder's summary, its histograms' totals, and the
/// per-second histograms of the metrics a limit is on (for the noise test).
pub struct RunData {
    pub dir: PathBuf,
    pub summary: Summary,
    pub hists: BTreeMap<String, Histogram<u64>>,
    /// By tag: each second's non-zero counters. Only the tags [`RunData::load_seconds`] was
    /// asked for; a tag is absent when its log held more counters than [`MAX_SECOND_COUNTERS`].
    pub seconds: BTreeMap<String, Vec<noise::Second>>,
}

/// Counters kept per run for resampling (16 bytes each): beyond this the log is resampled no
/// more and a limited metric on it is judged inconclusive, so a log packed with distinct
/// values cannot take gigabytes.
pub const MAX_SECOND_COUNTERS: usize = 4 << 20;

impl RunData {
    /// Read `summary.json` and `histograms.hlog` from a run (or merged run) folder.
    pub fn load(dir: &Path) -> Result<RunData, CompareError> {
        Ok(RunData {
            dir: dir.to_path_buf(),
            summary: read_summary(&dir.join("summary.json"))?,
            hists: hlog_totals(&dir.join("histograms.hlog"))?,
            seconds: BTreeMap::new(),
        })
    }

    /// Read the per-second histograms of `tags` from the run's log (a second pass, bounded by
    /// [`MAX_SECOND_COUNTERS`]), for the noise test of the limits on them.
    pub fn load_seconds(&mut self, tags: &[String]) -> Result<(), CompareError> {
        if tags.is_empty() {
            return Ok(());
        }
        let mut by_tag: BTreeMap<String, BTreeMap<u64, noise::Second>> = BTreeMap::new();
        let mut kept = 0usize;
        let mut over: Vec<String> = Vec::new();
        super::hlog_read::read(&self.dir.join("histograms.hlog"), |e| {
            if !tags.iter().any(|t| t == e.tag) || over.iter().any(|t| t == e.tag) {
                return Ok(());
            }
            kept += e.counts.len();
            if kept > MAX_SECOND_COUNTERS {
                over.push(e.tag.to_string());
                by_tag.remove(e.tag);
                return Ok(());
            }
            by_tag
                .entry(e.tag.to_string())
                .or_default()
                .entry(e.second)
                .or_default()
                .extend_from_slice(e.counts);
            Ok(())
        })
        .map_err(|e| CompareError::Input(MergeError::from(e)))?;
        for (tag, secs) in by_tag {
            let seconds = secs
                .into_values()
                .map(|mut c| {
                    // Several entries of one second: one list, values ascending, each once.
                    c.sort_unstable_by_key(|x| x.0);
                    c.dedup_by(|b, a| {
                        if a.0 == b.0 {
                            a.1 = a.1.saturating_add(b.1);
                            true
                        } else {
                            false
                        }
                    });
                    c
                })
                .collect();
            self.seconds.insert(tag, seconds);
        }
        Ok(())
    }

    /// The metric's value; `None` when this run did not measure it.
    pub fn value(&self, m: &MetricRef) -> Option<f64> {
        let s = &self.summary;
        match &m.source {
            Source::Hist { tag, stat } => {
                let h = self.hists.get(tag).filter(|h| !h.is_empty())?;
                Some(match stat {
                    HStat::Min => h.min() as f64,
                    HStat::Mean => h.mean(),
                    HStat::Max => h.max() as f64,
                    HStat::Q(q) => h.value_at_quantile(*q) as f64,
                })
            }
            Source::LossDownstream => s.loss.downstream.filter(|l| l.expected > 0).map(|l| l.rate),
            Source::LossUpstream => s.loss.upstream.filter(|l| l.expected > 0).map(|l| l.rate),
            Source::ConnectSuccess => {
                (s.bots.planned > 0).then(|| s.bots.connected as f64 / s.bots.planned as f64)
            }
            Source::DecodeErrors => Some(s.errors.decode.values().sum::<u64>() as f64),
            Source::BotsFailed => Some(s.bots.failed as f64),
            Source::BotsLost => Some(s.bots.lost as f64),
            Source::BotsSilentAtEnd => Some(s.bots.silent_at_end as f64),
            Source::InputsSkipped => Some(s.generator.inputs_skipped as f64),
            Source::Capacity => s.capacity.as_ref()?.players.map(|p| p as f64),
            Source::Server { name, stat } => {
                let series = s.server_metrics.as_ref()?.find(name)?;
                let v = match stat {
                    HStat::Min => series.min,
                    HStat::Mean => series.mean,
                    HStat::Max => series.max,
                    HStat::Q(q) => series.quantile(*q),
                }?;
                Some(if name.ends_with("_seconds") {
                    v * 1e6
                } else {
                    v
                })
            }
        }
    }
}

/// One row of the comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub metric: String,
    pub kind: Kind,
    pub base: Option<f64>,
    pub new: Option<f64>,
    /// The limit as written, if this metric has one.
    pub limit: Option<String>,
    pub allowance: Option<Allowance>,
    /// Only rows with a limit can regress.
    pub regressed: bool,
    /// Why it regressed, in words (for the console and the report).
    pub reason: Option<String>,
    /// A limited metric whose value went past its limit but not beyond run-to-run noise, or
    /// that could not be resampled: what the noise test said, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise: Option<String>,
}

/// The limits `compare` gates on when it is given none (no `--max-regress`, no `compare:`
/// block): the ones docs/ci's examples ship, measured above (0 of 45 false alarms on
/// identical runs, 9 or 10 of 10 two-millisecond delays caught). Without them a run whose RTT
/// rose 187× compared as "no regression".
pub const DEFAULT_LIMITS: &[&str] = &["rtt.p50=+1ms", "loss.downstream=+0.5pp"];

/// [`DEFAULT_LIMITS`] on the metrics both runs measured (a protocol that cannot take
/// downstream loss is not failed for "no data" on a limit nobody asked for).
pub fn default_limits(base: &RunData, new: &RunData) -> Vec<Limit> {
    DEFAULT_LIMITS
        .iter()
        .filter_map(|text| Limit::parse_assignment(text).ok())
        .filter(|l| base.value(&l.metric).is_some() && new.value(&l.metric).is_some())
        .collect()
}

/// The metrics every comparison shows, limited or not.
pub const DEFAULT_ROWS: &[&str] = &[
    "rtt.p50",
    "rtt.p90",
    "rtt.p99",
    "rtt.p99.9",
    "rtt.max",
    "handshake.p99",
    "send_lateness.p99",
    "snapshot_interarrival.p99",
    "loss.downstream",
    "loss.upstream",
    "connect_success",
    "bots_lost",
    "decode_errors",
    // The server's own figures, when either run scraped them (`server_metrics:`).
    "server.tick_seconds.p99",
    "server.process_resident_memory_bytes.max",
    // A capacity search's answer, when either run was one.
    "capacity",
];

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The base run's folder (the first of several).
    pub base_dir: String,
    /// Every base run's folder, when there are several (`compare --base A --base B NEW`);
    /// each row's base value is then their median, and the noise test pools them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub base_dirs: Vec<String>,
    pub new_dir: String,
    pub rows: Vec<Row>,
    /// True when any limited metric got worse than its limit allows.
    pub regressed: bool,
}

/// How much worse `new` is than `base` (positive = worse).
fn worsening(m: &MetricRef, base: f64, new: f64) -> f64 {
    if m.higher_is_better {
        base - new
    } else {
        new - base
    }
}

/// Compare `new` with `base` under `limits` (the later of two limits on one metric wins).
pub fn compare(base: &RunData, new: &RunData, limits: &[Limit]) -> Comparison {
    compare_with_bases(std::slice::from_ref(base), new, limits)
}

/// The median of the values the runs have (`None` when none has one): a base of several runs
/// as one figure, which one odd run cannot move far.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.retain(|v| v.is_finite());
    values.sort_unstable_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// [`compare`] against several base runs: each row's base value is their median, and a
/// limited histogram row is tested against their seconds pooled, with their spread as the
/// drift between whole runs ([`noise`]). A metric some base lacks has no base value.
pub fn compare_with_bases(bases: &[RunData], new: &RunData, limits: &[Limit]) -> Comparison {
    let base_value = |m: &MetricRef| -> Option<f64> {
        let values: Option<Vec<f64>> = bases.iter().map(|b| b.value(m)).collect();
        median(values?)
    };
    let mut limit_by: BTreeMap<String, &Limit> = BTreeMap::new();
    let mut order: Vec<MetricRef> = Vec::new();
    for name in DEFAULT_ROWS {
        if let Ok(m) = MetricRef::parse(name) {
            order.push(m);
        }
    }
    for l in limits {
        // `rtt_us.p99` and `rtt.p99` are one row.
        let key = order
            .iter()
            .find(|m| m.source == l.metric.source)
            .map(|m| m.name.clone());
        match key {
            Some(k) => {
                limit_by.insert(k, l);
            }
            None => {
                order.push(l.metric.clone());
                limit_by.insert(l.metric.name.clone(), l);
            }
        }
    }
    let mut rows = Vec::new();
    let mut metrics = Vec::new();
    let mut tests = Vec::new();
    for m in &order {
        let (b, n) = (base_value(m), new.value(m));
        let limit = limit_by.get(&m.name).copied();
        if b.is_none() && n.is_none() && limit.is_none() {
            continue;
        }
        let mut reason = None;
        if let Some(l) = limit {
            reason = match (b, n) {
                (None, _) => Some(format!("no data in the base run for {}", m.name)),
                (_, None) => Some(format!("no data in the new run for {}", m.name)),
                (Some(b), Some(n)) => {
                    let worse = worsening(m, b, n);
                    let allowed = match l.allowance {
                        Allowance::Relative(f) => b.abs() * f,
                        Allowance::Absolute(a) => a,
                    };
                    // A hair of tolerance for float rounding of the same figure.
                    (worse > allowed + allowed.abs() * 1e-12).then(|| {
                        format!(
                            "{} {} by {}{} ({} -> {}), over the {} limit",
                            m.name,
                            if m.higher_is_better { "fell" } else { "rose" },
                            fmt_delta(m.kind, worse),
                            match relative(b, n) {
                                Some(r) => format!(", {:.1}%", r.abs()),
                                None => String::new(),
                            },
                            fmt_value(m.kind, Some(b)),
                            fmt_value(m.kind, Some(n)),
                            l.text
                        )
                    })
                }
            };
        }
        // The noise test of a limited histogram metric, judged below with the others (Holm).
        let mut judged = None;
        if let (Some(l), Some(bv), Some(_)) = (limit, b, n) {
            if let Source::Hist { tag, stat } = &m.source {
                let allowed = match l.allowance {
                    Allowance::Relative(f) => bv.abs() * f,
                    Allowance::Absolute(a) => a,
                };
                let base_seconds: Option<Vec<&[noise::Second]>> = bases
                    .iter()
                    .map(|b| b.seconds.get(tag).map(Vec::as_slice))
                    .collect();
                if let (Some(bs), Some(ns)) = (base_seconds, new.seconds.get(tag)) {
                    judged = Some(noise::test_change_from(
                        &bs,
                        ns,
                        stat.statistic(),
                        !m.higher_is_better,
                        allowed,
                    ));
                }
            }
        }
        tests.push(judged);
        rows.push(Row {
            metric: m.name.clone(),
            kind: m.kind,
            base: b,
            new: n,
            limit: limit.map(|l| l.text.clone()),
            allowance: limit.map(|l| l.allowance),
            regressed: reason.is_some(),
            reason,
            noise: None,
        });
        metrics.push(m.clone());
    }
    judge_noise(&mut rows, &metrics, tests);
    let dirs: Vec<String> = bases.iter().map(|b| b.dir.display().to_string()).collect();
    Comparison {
        base_dir: dirs.first().cloned().unwrap_or_default(),
        base_dirs: if dirs.len() > 1 { dirs } else { Vec::new() },
        new_dir: new.dir.display().to_string(),
        regressed: rows.iter().any(|r| r.regressed),
        rows,
    }
}

/// A p-value as the console says it: `p = 0.31`, `p = 0.0215`, or `p < 0.0005` at the
/// resolution of the shuffles.
fn p_text(p: f64) -> String {
    if p <= 1.0 / (noise::REPLICATES + 1) as f64 {
        format!("p < {:.4}", 1.0 / noise::REPLICATES as f64)
    } else if p >= 0.1 {
        format!("p = {p:.2}")
    } else {
        format!("p = {p:.4}")
    }
}

/// A confidence in percent as the console says it: `95%`, `97.5%`, `98.33%`.
fn pct_text(confidence: f64) -> String {
    let t = format!("{:.2}", confidence * 100.0);
    format!("{}%", t.trim_end_matches('0').trim_end_matches('.'))
}

/// Past their limits on the plain values: which changes are beyond run-to-run noise? Every
/// limited histogram row the noise test could resample is one of a family of `m` tests, and
/// Holm's step-down procedure keeps the chance that any of them fails identical runs at
/// `1 - CONFIDENCE`: the rows are ranked by p-value, the i-th smallest (from 0) is tested at
/// `(1 - CONFIDENCE) / (m - i)`, and testing stops at the first that is not significant.
/// A row past its limit and not significant gets its noise note instead of a reason.
fn judge_noise(rows: &mut [Row], metrics: &[MetricRef], tests: Vec<Option<noise::Verdict>>) {
    let alpha = 1.0 - noise::CONFIDENCE;
    let mut ranked: Vec<(usize, f64)> = tests
        .iter()
        .enumerate()
        .filter_map(|(i, t)| match t {
            Some(noise::Verdict::Tested(t)) => Some((i, t.p)),
            _ => None,
        })
        .collect();
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1));
    let family = ranked.len();
    let mut level = vec![alpha; rows.len()];
    let mut significant = vec![false; rows.len()];
    let mut still = true;
    for (rank, &(i, p)) in ranked.iter().enumerate() {
        level[i] = alpha / (family - rank) as f64;
        still = still && p <= level[i];
        significant[i] = still;
    }
    let holm = if family > 1 {
        format!(", Holm over {family} limited percentiles")
    } else {
        String::new()
    };
    for (i, t) in tests.into_iter().enumerate() {
        let (row, m) = (&mut rows[i], &metrics[i]);
        let (Some(text), Some(verdict), Some(bv), Some(nv)) =
            (row.reason.clone(), t, row.base, row.new)
        else {
            continue;
        };
        let limit = row.limit.clone().unwrap_or_default();
        let plain = format!(
            "{} changed {} ({} -> {}), past the {limit} limit",
            m.name,
            fmt_delta(m.kind, worsening(m, bv, nv)),
            fmt_value(m.kind, Some(bv)),
            fmt_value(m.kind, Some(nv)),
        );
        match verdict {
            noise::Verdict::Tested(t) => {
                let drift = if t.drift_sd > 0.0 && t.drift_between_runs {
                    format!(
                        ", spread of the {} base runs ±{:.0}%",
                        t.bases,
                        t.drift_sd.exp_m1() * 100.0
                    )
                } else if t.drift_sd > 0.0 {
                    format!(", run drift ±{:.0}%", t.drift_sd.exp_m1() * 100.0)
                } else {
                    String::new()
                };
                let test = format!(
                    "{} against the limit, at {} confidence{holm}{drift}",
                    p_text(t.p),
                    pct_text(1.0 - level[i]),
                );
                if significant[i] {
                    row.reason = Some(format!("{text}; significant ({test})"));
                } else {
                    row.reason = None;
                    row.noise = Some(format!("{plain} but within run-to-run noise ({test})"));
                }
            }
            noise::Verdict::Inconclusive { seconds, samples } => {
                row.reason = None;
                row.noise = Some(format!(
                    "{plain}, but one run has {samples} samples over {seconds} seconds: too \
                     few to tell a change from noise (at least {} samples over {} seconds); \
                     inconclusive",
                    noise::MIN_SAMPLES,
                    noise::MIN_SECONDS
                ));
            }
        }
        row.regressed = row.reason.is_some();
    }
}

/// Relative change in percent; `None` from a zero base.
pub fn relative(base: f64, new: f64) -> Option<f64> {
    (base != 0.0).then(|| (new - base) / base.abs() * 100.0)
}

/// A value in its unit, as the console and the report show it: through the one formatter
/// `tickswarm run` and report.html use (`850 µs`, `1.25 ms`, `0.10%`, `1.23 kB`), so a
/// compare reads like the runs it compares.
pub fn fmt_value(kind: Kind, v: Option<f64>) -> String {
    let Some(v) = v else {
        return "no data".into();
    };
    match kind {
        Kind::Time => fmt_us(v),
        Kind::Rate => fmt_pct(v),
        Kind::Count => fmt_plain(v),
        Kind::Bytes => fmt_bytes(v),
    }
}

/// A difference in its unit, signed (`+20.10 ms`, `+0.50pp`).
pub fn fmt_delta(kind: Kind, d: f64) -> String {
    let sign = if d < 0.0 { "-" } else { "+" };
    let a = d.abs();
    match kind {
        Kind::Rate => format!("{sign}{:.2}pp", a * 100.0),
        _ => format!("{sign}{}", fmt_value(kind, Some(a))),
    }
}

impl Row {
    /// The change column: absolute and, where the base is not 0, relative.
    pub fn change(&self) -> String {
        match (self.base, self.new) {
            (Some(b), Some(n)) => {
                let abs = fmt_delta(self.kind, n - b);
                match relative(b, n) {
                    Some(r) => format!("{abs} ({r:+.1}%)"),
                    None => abs,
                }
            }
            _ => "-".into(),
        }
    }
}

impl fmt::Display for Comparison {
    /// The console table.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header = ["metric", "base", "new", "change", "limit", ""];
        let cells: Vec<[String; 6]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.metric.clone(),
                    fmt_value(r.kind, r.base),
                    fmt_value(r.kind, r.new),
                    r.change(),
                    r.limit.clone().unwrap_or_else(|| "-".into()),
                    match (&r.limit, r.regressed) {
                        (_, true) => "REGRESSED".into(),
                        (Some(_), false) => "ok".into(),
                        (None, false) => String::new(),
                    },
                ]
            })
            .collect();
        let mut w = [0usize; 6];
        for row in std::iter::once(header.map(String::from)).chain(cells.iter().cloned()) {
            for (i, c) in row.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |f: &mut fmt::Formatter<'_>, row: &[String; 6]| {
            writeln!(
                f,
                "{:<w0$}  {:>w1$}  {:>w2$}  {:>w3$}  {:>w4$}  {}",
                row[0],
                row[1],
                row[2],
                row[3],
                row[4],
                row[5],
                w0 = w[0],
                w1 = w[1],
                w2 = w[2],
                w3 = w[3],
                w4 = w[4]
            )
        };
        line(f, &header.map(String::from))?;
        for row in &cells {
            line(f, row)?;
        }
        Ok(())
    }
}

/// One line of the side-by-side report's tables.
pub struct HtmlRow {
    pub name: String,
    pub base: String,
    pub new: String,
    pub change: String,
    pub limit: String,
    /// `regressed`, `ok` or empty (no limit).
    pub state: &'static str,
}

/// One histogram's percentile ladder for both runs.
pub struct Ladder {
    pub title: String,
    pub rows: Vec<HtmlRow>,
}

/// compare.html: both runs side by side. One offline file, like report.html.
#[derive(askama::Template)]
#[template(path = "compare.html")]
struct ComparePage {
    regressed: bool,
    base_dir: String,
    new_dir: String,
    meta: Vec<HtmlRow>,
    rows: Vec<HtmlRow>,
    regressions: Vec<String>,
    ladders: Vec<Ladder>,
    version: &'static str,
}

/// Quantiles of the side-by-side percentile ladders.
const LADDER: &[(&str, f64)] = &[
    ("p50", 0.5),
    ("p75", 0.75),
    ("p90", 0.9),
    ("p95", 0.95),
    ("p99", 0.99),
    ("p99.9", 0.999),
    ("p99.99", 0.9999),
    ("max", 1.0),
];

/// Render compare.html (against one base run or several: with several, a header cell shows
/// the bases' values where they differ, and the percentile ladders their histograms added).
pub fn render_html(c: &Comparison, bases: &[RunData], new: &RunData) -> String {
    use askama::Template as _;
    let of_bases = |f: &dyn Fn(&Summary) -> String| {
        let mut seen: Vec<String> = Vec::new();
        for b in bases {
            let v = f(&b.summary);
            if !seen.contains(&v) {
                seen.push(v);
            }
        }
        const SHOWN: usize = 4;
        let more = seen.len().saturating_sub(SHOWN);
        seen.truncate(SHOWN);
        let mut text = seen.join(" · ");
        if more > 0 {
            text.push_str(&format!(" · {more} more"));
        }
        text
    };
    let meta_row = |name: &str, f: &dyn Fn(&Summary) -> String| HtmlRow {
        name: name.into(),
        base: of_bases(f),
        new: f(&new.summary),
        change: String::new(),
        limit: String::new(),
        state: "",
    };
    let meta = vec![
        meta_row("scenario", &|s| s.scenario.clone()),
        meta_row("protocol", &|s| format!("{} ({})", s.protocol, s.dialect)),
        meta_row("target", &|s| s.target.clone()),
        meta_row("started", &|s| s.started_at.clone()),
        meta_row("duration", &|s| format!("{:.1}s", s.duration_s)),
        meta_row("bots", &|s| {
            format!("{} planned, {} connected", s.bots.planned, s.bots.connected)
        }),
        meta_row("seed", &|s| s.seed.to_string()),
        meta_row("verdict", &|s| s.verdict.clone()),
    ];
    let rows = c
        .rows
        .iter()
        .map(|r| HtmlRow {
            name: r.metric.clone(),
            base: fmt_value(r.kind, r.base),
            new: fmt_value(r.kind, r.new),
            change: r.change(),
            limit: r.limit.clone().unwrap_or_default(),
            state: match (&r.limit, r.regressed) {
                (_, true) => "regressed",
                (Some(_), false) => "ok",
                (None, false) => "",
            },
        })
        .collect();
    let mut ladders = Vec::new();
    for (names, tag, kind) in HISTOGRAMS {
        let pooled = bases.iter().try_fold(None::<Histogram<u64>>, |acc, b| {
            let h = b.hists.get(*tag)?;
            Some(Some(match acc {
                None => h.clone(),
                Some(mut sum) => {
                    // Both from the hlog's totals with one precision: an add that fails
                    // (a value past the first's range) leaves the ladder out.
                    sum.add(h).ok()?;
                    sum
                }
            }))
        });
        let (Some(Some(b)), Some(n)) = (pooled, new.hists.get(*tag)) else {
            continue;
        };
        let b = &b;
        if b.is_empty() && n.is_empty() {
            continue;
        }
        let at = |h: &Histogram<u64>, q: f64| {
            (!h.is_empty()).then(|| {
                if q >= 1.0 {
                    h.max() as f64
                } else {
                    h.value_at_quantile(q) as f64
                }
            })
        };
        let rows = LADDER
            .iter()
            .map(|(label, q)| {
                let (bv, nv) = (at(b, *q), at(n, *q));
                HtmlRow {
                    name: (*label).into(),
                    base: fmt_value(*kind, bv),
                    new: fmt_value(*kind, nv),
                    change: match (bv, nv) {
                        (Some(bv), Some(nv)) => {
                            let abs = fmt_delta(*kind, nv - bv);
                            match relative(bv, nv) {
                                Some(r) => format!("{abs} ({r:+.1}%)"),
                                None => abs,
                            }
                        }
                        _ => "-".into(),
                    },
                    limit: String::new(),
                    state: "",
                }
            })
            .collect();
        ladders.push(Ladder {
            title: format!("{} ({} and {} samples)", names[0], b.len(), n.len()),
            rows,
        });
    }
    let page = ComparePage {
        regressed: c.regressed,
        base_dir: if c.base_dirs.is_empty() {
            c.base_dir.clone()
        } else {
            format!(
                "median of {} runs: {}",
                c.base_dirs.len(),
                c.base_dirs.join(", ")
            )
        },
        new_dir: c.new_dir.clone(),
        meta,
        rows,
        regressions: c.rows.iter().filter_map(|r| r.reason.clone()).collect(),
        ladders,
        version: env!("CARGO_PKG_VERSION"),
    };
    page.render()
        .unwrap_or_else(|e| format!("<!DOCTYPE html><p>compare.html failed to render: {e}</p>"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_people_write() {
        let m = MetricRef::parse("rtt.p99").unwrap();
        assert_eq!(m.hlog_tag(), Some("rtt_us"));
        assert_eq!(m.kind, Kind::Time);
        assert_eq!(
            MetricRef::parse("rtt.p99.9").unwrap().source,
            MetricRef::parse("rtt_us.p999").unwrap().source
        );
        assert_eq!(
            MetricRef::parse("generator.send_lateness_us.p99")
                .unwrap()
                .hlog_tag(),
            Some("send_lateness_us")
        );
        assert!(
            MetricRef::parse("connect_success")
                .unwrap()
                .higher_is_better
        );
        assert!(MetricRef::parse("rtt.p101").is_err());
        assert!(MetricRef::parse("rtt.fast").is_err());
        assert!(MetricRef::parse("rtt").is_err());
    }

    #[test]
    fn limits_in_their_units() {
        let l = Limit::parse_assignment("rtt.p99=10%").unwrap();
        assert_eq!(l.allowance, Allowance::Relative(0.10));
        let l = Limit::parse_assignment("rtt.p99=+2ms").unwrap();
        assert_eq!(l.allowance, Allowance::Absolute(2000.0));
        let l = Limit::parse_assignment("loss.downstream=+0.5pp").unwrap();
        assert_eq!(l.allowance, Allowance::Absolute(0.005));
        let l = Limit::parse_assignment("bots_lost=+2").unwrap();
        assert_eq!(l.allowance, Allowance::Absolute(2.0));
        // pp only for rates; a bare number is no rate limit; no `=` is no limit.
        assert!(Limit::parse_assignment("rtt.p99=+1pp").is_err());
        assert!(Limit::parse_assignment("loss.downstream=0.5").is_err());
        assert!(Limit::parse_assignment("rtt.p99").is_err());
        assert!(Limit::parse_assignment("rtt.p99=-5%").is_err());
        // Where more is better, a minus says the drop allowed: a capacity may fall 5 %.
        let l = Limit::parse_assignment("capacity=-5%").unwrap();
        assert_eq!(l.allowance, Allowance::Relative(0.05));
        assert!(l.metric.higher_is_better);
        assert_eq!(worsening(&l.metric, 400.0, 380.0), 20.0);
        let l = Limit::parse_assignment("capacity.players=-20").unwrap();
        assert_eq!(l.allowance, Allowance::Absolute(20.0));
    }

    #[test]
    fn worse_is_the_direction_that_hurts() {
        let up = MetricRef::parse("rtt.p99").unwrap();
        assert_eq!(worsening(&up, 100.0, 130.0), 30.0);
        let down = MetricRef::parse("connect_success").unwrap();
        assert!((worsening(&down, 1.0, 0.9) - 0.1).abs() < 1e-12);
    }

    /// A run with `connected` of 100 bots connected, `lost` bots lost, and `rtt` samples.
    fn run(connected: u64, lost: u64, rtt: &[u64]) -> RunData {
        let hist = serde_json::json!({"count": 0});
        let summary: Summary = serde_json::from_value(serde_json::json!({
            "schema": 1, "protocol": "cafe", "transport": "udp", "dialect": "spec",
            "scenario": "s", "scenario_file": "s.yaml", "target": "t",
            "started_at": "2026-01-01T00:00:00Z", "duration_s": 1.0, "interrupted": false,
            "seed": 1,
            "bots": {"planned": 100, "connected": connected, "failed": 0, "lost": lost},
            "rtt_us": hist, "handshake_us": hist, "snapshot_interarrival_us": hist,
            "generator": {"send_lateness_us": hist, "inputs_skipped": 0, "workers": 1,
                          "send_errors": {}},
            "loss": {"downstream": null, "upstream": null},
            "loss_method": {"downstream": "", "upstream": ""},
            "bandwidth": {"up_bytes": 0, "down_bytes": 0, "up_packets": 0, "down_packets": 0},
            "inputs_sent": 0, "snapshots_applied": 0,
            "errors": {"decode": {}, "connect": {}},
            "protocol_metrics": {}, "thresholds": [], "verdict": "pass", "intervals": []
        }))
        .unwrap();
        let mut h = crate::metrics::new_histogram();
        for v in rtt {
            h.record(*v).unwrap();
        }
        RunData {
            dir: PathBuf::from("run"),
            summary,
            hists: [("rtt_us".to_string(), h)].into(),
            seconds: BTreeMap::new(),
        }
    }

    /// A run whose RTT samples come second by second: totals and the per-second histograms
    /// the noise test resamples.
    fn run_by_second(secs: &[Vec<u64>]) -> RunData {
        let all: Vec<u64> = secs.iter().flatten().copied().collect();
        let mut r = run(100, 0, &all);
        let seconds = secs
            .iter()
            .map(|vals| {
                let mut h = crate::metrics::new_histogram();
                vals.iter().for_each(|v| h.record(*v).unwrap());
                noise::second_of(&h)
            })
            .collect();
        r.seconds.insert("rtt_us".into(), seconds);
        r
    }

    /// `n` seconds of 20 samples each, 150..250 µs, and one slow sample (600 µs) in each of
    /// the seconds `slow`: the few slow samples are what a run's p99 (the 5th highest of 400)
    /// turns on, as a loopback run's tail does.
    fn steady(n: usize, shift: u64, slow: &[usize]) -> Vec<Vec<u64>> {
        (0..n)
            .map(|s| {
                (0..20u64)
                    .map(|i| {
                        let v = if i == 0 && slow.contains(&s) {
                            600
                        } else {
                            150 + (s as u64 * 131 + i * 17) % 100
                        };
                        v + shift
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_limit_crossed_within_noise_is_not_a_regression_and_a_real_shift_is() {
        let l = limits(&["rtt.p99=10%"]);
        // The plain p99 of these two differ by more than 10 % (one slow sample more or less
        // near the top), but resampling their seconds says it could be noise.
        let (a, b) = (
            run_by_second(&steady(20, 0, &[2, 9, 15])),
            run_by_second(&steady(20, 0, &[1, 5, 8, 12, 17])),
        );
        let c = compare(&a, &b, &l);
        let row = c.rows.iter().find(|r| r.metric == "rtt.p99").unwrap();
        assert!(
            row.new.unwrap() > row.base.unwrap() * 1.10,
            "the plain values cross the limit: {row:?}"
        );
        assert!(!row.regressed, "{row:?}");
        let note = row.noise.as_deref().unwrap();
        assert!(note.contains("within run-to-run noise"), "{note}");
        // 2 ms more on every sample of ~0.2 ms: significant.
        let shifted = run_by_second(&steady(20, 2_000, &[1, 5, 8, 12, 17]));
        let c = compare(&a, &shifted, &l);
        let row = c.rows.iter().find(|r| r.metric == "rtt.p99").unwrap();
        assert!(row.regressed, "{row:?}");
        let reason = row.reason.as_deref().unwrap();
        assert!(
            reason.contains("; significant (p < 0.0005 against the limit, at 95% confidence"),
            "{reason}"
        );
        // Two seconds of 20 samples are too few to tell anything: inconclusive, not a
        // regression, and said so.
        let (a, b) = (
            run_by_second(&steady(2, 0, &[])),
            run_by_second(&steady(2, 2_000, &[])),
        );
        let row = compare(&a, &b, &l)
            .rows
            .into_iter()
            .find(|r| r.metric == "rtt.p99")
            .unwrap();
        assert!(!row.regressed);
        assert!(row.noise.unwrap().contains("inconclusive"));
    }

    fn limits(text: &[&str]) -> Vec<Limit> {
        text.iter()
            .map(|t| Limit::parse_assignment(t).unwrap())
            .collect()
    }

    fn regressed(c: &Comparison) -> Vec<&str> {
        c.rows
            .iter()
            .filter(|r| r.regressed)
            .map(|r| r.metric.as_str())
            .collect()
    }

    #[test]
    fn a_relative_limit_from_zero_fails_on_any_worsening() {
        let l = limits(&["bots_lost=10%"]);
        assert!(regressed(&compare(&run(100, 0, &[100]), &run(100, 0, &[100]), &l)).is_empty());
        assert_eq!(
            regressed(&compare(&run(100, 0, &[100]), &run(100, 1, &[100]), &l)),
            ["bots_lost"]
        );
        // An absolute allowance lets one through.
        let l = limits(&["bots_lost=+1"]);
        assert!(regressed(&compare(&run(100, 0, &[100]), &run(100, 1, &[100]), &l)).is_empty());
    }

    #[test]
    fn connect_success_regresses_downwards() {
        let l = limits(&["connect_success=+1pp"]);
        // 100 % -> 99 %: exactly one point, allowed; 100 % -> 98 %: two, not.
        assert!(regressed(&compare(&run(100, 0, &[1]), &run(99, 0, &[1]), &l)).is_empty());
        let c = compare(&run(100, 0, &[1]), &run(98, 0, &[1]), &l);
        assert_eq!(regressed(&c), ["connect_success"]);
        let why = c.rows.iter().find_map(|r| r.reason.clone()).unwrap();
        assert!(why.starts_with("connect_success fell by +2.00pp"), "{why}");
        // Getting better is never a regression.
        assert!(regressed(&compare(&run(98, 0, &[1]), &run(100, 0, &[1]), &l)).is_empty());
    }

    #[test]
    fn percentiles_come_from_the_histograms_and_no_data_fails() {
        let base: Vec<u64> = (1..=100).collect();
        let slower: Vec<u64> = (1..=100).map(|v| v + 20).collect();
        let l = limits(&["rtt.p99=+20ms", "rtt.p50=+19us"]);
        let c = compare(&run(100, 0, &base), &run(100, 0, &slower), &l);
        let p50 = c.rows.iter().find(|r| r.metric == "rtt.p50").unwrap();
        assert_eq!((p50.base, p50.new), (Some(50.0), Some(70.0)));
        assert_eq!(regressed(&c), ["rtt.p50"]);
        // A limited metric the new run did not measure fails; unlimited rows never do.
        let c = compare(
            &run(100, 0, &base),
            &run(100, 0, &[]),
            &limits(&["rtt.p99=50%"]),
        );
        assert_eq!(regressed(&c), ["rtt.p99"]);
        assert!(c
            .rows
            .iter()
            .any(|r| r.reason.as_deref() == Some("no data in the new run for rtt.p99")));
    }

    #[test]
    fn deltas_read_in_units() {
        assert_eq!(fmt_delta(Kind::Rate, 0.005), "+0.50pp");
        assert_eq!(fmt_delta(Kind::Time, 20_100.0), "+20.10 ms");
        assert_eq!(fmt_delta(Kind::Time, -150.0), "-150 µs");
        assert_eq!(fmt_value(Kind::Rate, Some(0.001)), "0.10%");
        assert_eq!(fmt_value(Kind::Count, Some(12_345.0)), "12,345");
    }

    /// Holm's step-down over the limited percentiles: the smallest p-value is held to 2.5 %
    /// of two, the next to 5 %; the first that fails stops the rest.
    #[test]
    fn holm_steps_down_over_the_limited_percentiles() {
        let judge = |ps: [f64; 2]| -> Vec<bool> {
            let metrics: Vec<MetricRef> = ["rtt.p50", "rtt.p99"]
                .iter()
                .map(|n| MetricRef::parse(n).unwrap())
                .collect();
            let mut rows: Vec<Row> = metrics
                .iter()
                .map(|m| Row {
                    metric: m.name.clone(),
                    kind: m.kind,
                    base: Some(100.0),
                    new: Some(300.0),
                    limit: Some("10%".into()),
                    allowance: Some(Allowance::Relative(0.1)),
                    regressed: true,
                    reason: Some(format!("{} rose", m.name)),
                    noise: None,
                })
                .collect();
            let tests = ps
                .iter()
                .map(|&p| {
                    Some(noise::Verdict::Tested(noise::Tested {
                        p,
                        change: 200.0,
                        drift_sd: 0.0,
                        bases: 1,
                        drift_between_runs: false,
                    }))
                })
                .collect();
            judge_noise(&mut rows, &metrics, tests);
            rows.iter().map(|r| r.regressed).collect()
        };
        // 0.001 <= 0.025, then 0.03 <= 0.05: both (Bonferroni would keep only the first).
        assert_eq!(judge([0.03, 0.001]), [true, true]);
        // 0.03 > 0.025: neither, though 0.04 alone would pass a single test at 5 %.
        assert_eq!(judge([0.03, 0.04]), [false, false]);
        assert_eq!(judge([0.001, 0.2]), [true, false]);
    }
}
