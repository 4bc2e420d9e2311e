//! Pass/fail conditions: `rtt p99 < 50ms`, `downstream_loss < 1%`, `connect_success > 99.9%`.
//!
//! Grammar: `METRIC [STAT] OP VALUE[UNIT]`.
//! - Time metrics (`rtt`, `handshake`, `send_lateness`, `snapshot_interarrival`) take a STAT
//!   and a time value (`us`, `ms`, `s`). A STAT is `min`, `mean`, `max`, `median` or any
//!   percentile `tickswarm compare` takes (`p50`, `p95`, `p99`, `p99.9`, `p99.99`; `p999` is
//!   p99.9): `rtt p95 < 5ms`. The percentiles summary.json lists (p50, p90, p99, p999) are
//!   read from it; any other is read from the run's histogram (exact, as the summary's are),
//!   and the threshold's result names it (`rtt_us.p95`) with its observed value.
//! - Rate metrics (`downstream_loss`, `upstream_loss`, `connect_success`) take a percentage
//!   (`1%`) or a fraction (`0.01`).
//! - Count metrics (`decode_errors`, `bots_failed`, `bots_never_connected`, `inputs_skipped`, ...)
//!   take a plain number.
//! - `snapshot_rate` (the server's snapshots per bot per second, by whole second) takes `min`,
//!   `mean`, `median` (`p50`) or `max` and a rate in `Hz` (or a plain number):
//!   `snapshot_rate min >= 20Hz` fails a run in which the server lowered its rate.
//! - `capacity` (players, `tickswarm capacity` only) takes a plain number: `capacity >= 400`.
//!
//! A metric may name a group of the population (`groups:` in the scenario) in braces right
//! after its name: `rtt{group=mobile} p99 < 250ms`, `downstream_loss{group=wifi} < 5%`. The
//! threshold then reads the group's figure (`groups.mobile.rtt_us.p99` in summary.json)
//! instead of the whole run's.
//!
//! Observed values are compared in the metric's own unit: microseconds for times, a fraction
//! for rates.

use std::fmt;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

use crate::duration::parse_duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeMetric {
    Rtt,
    Handshake,
    SendLateness,
    SnapshotInterarrival,
}

impl TimeMetric {
    pub const ALL: [TimeMetric; 4] = [
        TimeMetric::Rtt,
        TimeMetric::Handshake,
        TimeMetric::SendLateness,
        TimeMetric::SnapshotInterarrival,
    ];

    /// The tag of its histogram in histograms.hlog.
    pub fn hlog_tag(self) -> &'static str {
        self.key().rsplit('.').next().unwrap_or_default()
    }

    /// The summary.json key of its histogram.
    pub fn key(self) -> &'static str {
        match self {
            TimeMetric::Rtt => "rtt_us",
            TimeMetric::Handshake => "handshake_us",
            TimeMetric::SendLateness => "generator.send_lateness_us",
            TimeMetric::SnapshotInterarrival => "snapshot_interarrival_us",
        }
    }
}

/// The statistic of a histogram a threshold reads: `min`, `mean`, `max`, or any percentile,
/// as `tickswarm compare` takes them (`p50`, `p95`, `p99.9`, `p999`, `median`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    Min,
    Mean,
    Max,
    /// A percentile in millionths of the whole (`p99.9` is 999_000): exact for every
    /// percentile written with up to four decimals, and `Eq`, so one threshold's metric is a
    /// key like any other.
    Quantile(u32),
}

/// What a threshold's statistic may be, said by the parser when it is something else.
pub const STAT_FORMS: &str = "min, mean (avg), max, median, or a percentile pN with N above 0 \
     and at most 100, up to four decimals (p50, p90, p95, p99, p99.9, p99.99; p999 is p99.9)";

impl Stat {
    pub const P50: Stat = Stat::Quantile(500_000);
    pub const P90: Stat = Stat::Quantile(900_000);
    pub const P99: Stat = Stat::Quantile(990_000);
    pub const P999: Stat = Stat::Quantile(999_000);

    /// Parse a statistic as thresholds and `compare` write it; `None` for anything else
    /// ([`STAT_FORMS`] says what is allowed).
    ///
    /// ```
    /// use tickswarm::scenario::threshold::Stat;
    /// assert_eq!(Stat::parse("p95"), Some(Stat::Quantile(950_000)));
    /// assert_eq!(Stat::parse("p99.9"), Stat::parse("p999"));
    /// assert_eq!(Stat::parse("p101"), None);
    /// ```
    pub fn parse(s: &str) -> Option<Stat> {
        Some(match s {
            "min" => Stat::Min,
            "mean" | "avg" => Stat::Mean,
            "max" => Stat::Max,
            "median" => Stat::P50,
            // The summary's name for p99.9 (and p9999 for p99.99): nines run together.
            "p999" => Stat::P999,
            "p9999" => Stat::Quantile(999_900),
            _ => {
                let digits = s.strip_prefix('p')?;
                let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
                let all_digits = |t: &str| t.chars().all(|c| c.is_ascii_digit());
                if int.is_empty()
                    || int.len() > 3
                    || !all_digits(int)
                    || !all_digits(frac)
                    || frac.len() > 4
                    || (digits.contains('.') && frac.is_empty())
                {
                    return None;
                }
                let int: u32 = int.parse().ok()?;
                let frac: u32 = format!("{frac:0<4}").parse().ok()?;
                // The percent in ten-thousandths is the quantile in millionths (p99.95 is
                // 999_500 of either).
                let millionths = int * 10_000 + frac;
                if millionths == 0 || millionths > 1_000_000 {
                    return None;
                }
                Stat::Quantile(millionths)
            }
        })
    }

    /// This statistic of `h`; `None` when it is empty (no sample is not zero).
    pub fn of(self, h: &hdrhistogram::Histogram<u64>) -> Option<f64> {
        (!h.is_empty()).then(|| match self {
            Stat::Min => h.min() as f64,
            Stat::Mean => h.mean(),
            Stat::Max => h.max() as f64,
            Stat::Quantile(m) => h.value_at_quantile(f64::from(m) / 1e6) as f64,
        })
    }

    /// The quantile in 0..=1 this statistic is, for percentiles.
    pub fn quantile(self) -> Option<f64> {
        match self {
            Stat::Quantile(m) => Some(f64::from(m) / 1e6),
            _ => None,
        }
    }

    /// As people write it: `min`, `mean`, `max`, `p50`, `p95`, `p99.9`.
    pub fn name(self) -> String {
        match self {
            Stat::Min => "min".into(),
            Stat::Mean => "mean".into(),
            Stat::Max => "max".into(),
            Stat::Quantile(m) => {
                let pct = format!("{}.{:04}", m / 10_000, m % 10_000);
                format!("p{}", pct.trim_end_matches('0').trim_end_matches('.'))
            }
        }
    }

    /// Its key in summary.json: the summary's own for the statistics it holds (`p50`, `p90`,
    /// `p99`, `p999`, ...); for another percentile `p` and its digits with `_` for the point
    /// (`p95`, `p99_5`), which the summary does not list (it is read from the run's
    /// histogram; the threshold's `observed` holds it).
    pub fn key(self) -> String {
        match self {
            Stat::P999 => "p999".into(),
            s => s.name().replace('.', "_"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Time(TimeMetric, Stat),
    DownstreamLoss,
    UpstreamLoss,
    ConnectSuccess,
    DecodeErrors,
    BotsFailed,
    /// Planned bots that never completed a handshake, whatever the reason: refused, never
    /// answered, never got a socket, or still on their way in when the run ended.
    BotsNeverConnected,
    InputsSkipped,
    /// Bots that were in play and lost their session before the run ended (server silent
    /// past the silence timeout, closed by the server, transport gone).
    BotsLost,
    /// Bots in play at the end that had heard nothing from the server for a second or more.
    BotsSilentAtEnd,
    /// Snapshots (or the protocol's state updates) the bots applied.
    SnapshotsApplied,
    /// 1 when the generator was saturated (the report's one rule), else 0.
    GeneratorSaturated,
    /// The server's snapshot rate per bot, in Hz: a statistic over the run's whole seconds
    /// (`min`, `mean`, `p50`, `max`).
    SnapshotRate(Stat),
    /// A capacity search's answer in players (`tickswarm capacity`): judged on the answer,
    /// never on a step; a plain run cannot measure it.
    Capacity,
    /// A series the target's own `/metrics` exposed (`server_metrics:`), as
    /// `server.NAME STAT` ([`ServerFigure`]).
    Server(ServerFigure),
}

/// `server.NAME STAT OP VALUE`: a statistic of a scraped series. `NAME` is the family's name,
/// or what follows `tickswarm_server_` in the reference servers' names (`server.tick_seconds`).
/// A percentile reads a histogram's whole-run buckets; `min`/`mean`/`max` read a gauge's
/// values, a counter's per-second rates, or a histogram's per-second p99s. The limit is a time
/// (`16.7ms`: the series is in seconds, as Prometheus' `_seconds` names say), a size with a
/// unit (`2GB`, `512MiB`: bytes), or a plain number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerFigure {
    /// Interned when parsed (a scenario's few thresholds, once per process), so [`Metric`]
    /// stays `Copy`.
    pub name: &'static str,
    pub stat: Stat,
    /// The limit was a time: the observed value (seconds) is compared in µs.
    pub time: bool,
}

/// `2GB`, `512MiB`, `100KB` in bytes (SI for KB/MB/GB, binary for KiB/MiB/GiB); `None` when
/// `s` has none of these units.
fn parse_size(s: &str) -> Option<f64> {
    const UNITS: [(&str, f64); 6] = [
        ("KiB", 1024.0),
        ("MiB", 1_048_576.0),
        ("GiB", 1_073_741_824.0),
        ("KB", 1e3),
        ("MB", 1e6),
        ("GB", 1e9),
    ];
    UNITS.iter().find_map(|(u, m)| {
        s.strip_suffix(u)
            .and_then(|n| n.trim().parse::<f64>().ok())
            .map(|n| n * m)
    })
}

/// Names are interned once each (the same threshold parsed again reuses its name).
fn intern(name: &str) -> &'static str {
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<Vec<&'static str>>> = OnceLock::new();
    let names = NAMES.get_or_init(|| Mutex::new(Vec::new()));
    let Ok(mut names) = names.lock() else {
        return Box::leak(name.to_string().into_boxed_str());
    };
    if let Some(n) = names.iter().find(|n| **n == name) {
        return n;
    }
    let n: &'static str = Box::leak(name.to_string().into_boxed_str());
    names.push(n);
    n
}

impl Metric {
    /// Whether `self` and `other` read the same figure, whatever statistic of it (`rtt p99`
    /// and `rtt p50` both need RTT samples): what "the run cannot measure X" is about.
    pub fn same_figure(self, other: Metric) -> bool {
        match (self, other) {
            (Metric::Time(a, _), Metric::Time(b, _)) => a == b,
            (Metric::SnapshotRate(_), Metric::SnapshotRate(_)) => true,
            (a, b) => a == b,
        }
    }

    /// Where the observed value sits in summary.json: a dotted JSON path into it
    /// (`generator.saturated` is a boolean, observed as 1 or 0).
    pub fn path(self) -> String {
        match self {
            Metric::Time(m, s) => format!("{}.{}", m.key(), s.key()),
            Metric::DownstreamLoss => "loss.downstream.rate".into(),
            Metric::UpstreamLoss => "loss.upstream.rate".into(),
            Metric::ConnectSuccess => "bots.connect_rate".into(),
            Metric::DecodeErrors => "errors.decode_total".into(),
            Metric::BotsFailed => "bots.failed".into(),
            Metric::BotsNeverConnected => "bots.never_connected".into(),
            Metric::InputsSkipped => "generator.inputs_skipped".into(),
            Metric::BotsLost => "bots.lost".into(),
            Metric::BotsSilentAtEnd => "bots.silent_at_end".into(),
            Metric::SnapshotsApplied => "snapshots_applied".into(),
            Metric::GeneratorSaturated => "generator.saturated".into(),
            Metric::SnapshotRate(st) => format!("snapshot_rate.{}_hz", st.key()),
            Metric::Capacity => "capacity.players".into(),
            // The report files the observed value there; `_us` names the unit of a
            // time-limited figure for the report's formatter.
            Metric::Server(f) => format!(
                "server_metrics.figures.{}.{}{}",
                f.name,
                f.stat.key(),
                if f.time { "_us" } else { "" }
            ),
        }
    }
}

/// What a threshold on a figure the run cannot take does to the verdict (`unmeasurable_thresholds:`
/// in a scenario). A protocol says which figures its configuration cannot take and why
/// (City's implementation dialect acknowledges no input, so upstream loss has no evidence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Unmeasurable {
    /// The threshold fails, saying why it could not be measured: a gate never passes on a
    /// figure nobody took.
    #[default]
    Fail,
    /// The threshold is shown as skipped, with the reason, and does not count in the verdict
    /// (a scenario shared between servers that can and cannot take the figure).
    Skip,
}

/// What an interrupted run (Ctrl-C, SIGTERM) does to the verdict (`interrupted:` in a
/// scenario). A run stopped by its `duration` is not interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Interrupted {
    /// The run fails: its figures cover only part of the load it was asked for, so a CI
    /// job cancelled mid-run must not read as a pass.
    #[default]
    Fail,
    /// The verdict is the thresholds' alone (a run stopped by hand once it showed enough).
    Pass,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    pub fn holds(self, observed: f64, limit: f64) -> bool {
        match self {
            Op::Lt => observed < limit,
            Op::Le => observed <= limit,
            Op::Gt => observed > limit,
            Op::Ge => observed >= limit,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub metric: Metric,
    pub op: Op,
    /// In the metric's unit (µs, fraction, count).
    pub limit: f64,
    /// As written.
    pub text: String,
    /// One of the checks every run gets unless the scenario sets its own threshold on the
    /// same metric (or turns them off with `default_checks: false`).
    pub default: bool,
    /// The group of the population whose figure this reads (`rtt{group=mobile} p99`);
    /// `None`: the whole run's.
    pub group: Option<String>,
}

/// The checks a run gets without asking: a server that died or went silent must fail the
/// run even when the scenario lists no thresholds.
/// `snapshots_applied > 0` catches a run whose bots connected but never understood a snapshot
/// (a wrong dialect).
pub const DEFAULT_CHECKS: &[&str] = &[
    "bots_lost <= 0",
    "bots_silent_at_end <= 0",
    "snapshots_applied > 0",
    // A bot the server refused or never answered, and a datagram no dialect of the protocol
    // can read, are facts about the server a gate must see even when the scenario lists
    // nothing (a scenario relaxes either by naming it: `bots_failed <= 5`).
    "bots_failed <= 0",
    // A bot still in its handshake when the run ended (a slow handshake, a run cut short) or
    // one that never got a socket is not a failure by reason, and must still fail the gate:
    // the load the scenario asked for never reached the server.
    "bots_never_connected <= 0",
    "decode_errors <= 0",
];

/// `DEFAULT_CHECKS` as thresholds, minus those on a metric `own` already has a threshold on.
pub fn default_checks(own: &[Threshold]) -> Vec<Threshold> {
    DEFAULT_CHECKS
        .iter()
        .filter_map(|t| Threshold::parse(t).ok())
        .filter(|d| {
            !own.iter()
                .any(|t| t.metric == d.metric && t.group.is_none())
        })
        .map(|mut d| {
            d.default = true;
            d
        })
        .collect()
}

impl Threshold {
    /// Parse a condition as scenarios write it.
    ///
    /// ```
    /// use tickswarm::scenario::threshold::{Metric, Op, Stat, Threshold, TimeMetric};
    ///
    /// let t = Threshold::parse("rtt p99 < 50ms").unwrap();
    /// assert_eq!(t.metric, Metric::Time(TimeMetric::Rtt, Stat::P99));
    /// assert_eq!((t.op, t.limit), (Op::Lt, 50_000.0)); // microseconds
    ///
    /// let loss = Threshold::parse("downstream_loss < 1%").unwrap();
    /// assert_eq!(loss.limit, 0.01); // a fraction
    /// assert!(Threshold::parse("rtt < 50ms").is_err()); // which statistic?
    /// ```
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let (op_at, op, op_len) = ["<=", ">=", "<", ">"]
            .iter()
            .find_map(|o| t.find(o).map(|i| (i, *o, o.len())))
            .ok_or_else(|| format!("`{t}` has no comparison; write e.g. `rtt p99 < 50ms`"))?;
        let (group, lhs_text) = split_group(&t[..op_at])?;
        let op = match op {
            "<=" => Op::Le,
            ">=" => Op::Ge,
            "<" => Op::Lt,
            _ => Op::Gt,
        };
        let lhs: Vec<&str> = lhs_text.split_whitespace().collect();
        let rhs = t[op_at + op_len..].trim();
        let time = |name: &str| match name {
            "rtt" => Some(TimeMetric::Rtt),
            "handshake" => Some(TimeMetric::Handshake),
            "send_lateness" | "lateness" => Some(TimeMetric::SendLateness),
            "snapshot_interarrival" => Some(TimeMetric::SnapshotInterarrival),
            _ => None,
        };
        let metric = match lhs.as_slice() {
            [name, stat] if time(name).is_some() => {
                let stat = Stat::parse(stat).ok_or_else(|| {
                    format!("unknown statistic `{stat}`; use {STAT_FORMS}")
                })?;
                Metric::Time(time(name).unwrap_or(TimeMetric::Rtt), stat)
            }
            [name] if time(name).is_some() => {
                return Err(format!(
                    "`{name}` needs a statistic, e.g. `{name} p99 < 50ms`"
                ))
            }
            ["downstream_loss"] => Metric::DownstreamLoss,
            ["upstream_loss"] => Metric::UpstreamLoss,
            ["connect_success"] => Metric::ConnectSuccess,
            ["decode_errors"] => Metric::DecodeErrors,
            ["bots_failed"] => Metric::BotsFailed,
            ["bots_never_connected"] => Metric::BotsNeverConnected,
            ["inputs_skipped"] => Metric::InputsSkipped,
            ["bots_lost"] => Metric::BotsLost,
            ["bots_silent_at_end"] => Metric::BotsSilentAtEnd,
            ["snapshots_applied"] => Metric::SnapshotsApplied,
            ["generator_saturated"] => Metric::GeneratorSaturated,
            ["snapshot_rate", stat] => match Stat::parse(stat) {
                Some(st @ (Stat::Min | Stat::Mean | Stat::Max | Stat::P50)) => {
                    Metric::SnapshotRate(st)
                }
                _ => {
                    return Err(format!(
                        "`snapshot_rate` takes min, mean, median (p50) or max, not `{stat}`"
                    ))
                }
            },
            ["capacity"] => Metric::Capacity,
            ["snapshot_rate"] => {
                return Err(
                    "`snapshot_rate` needs a statistic, e.g. `snapshot_rate min >= 20Hz`".into(),
                )
            }
            [name, stat] if name.starts_with("server.") && name.len() > "server.".len() => {
                let stat = Stat::parse(stat).ok_or_else(|| {
                    format!("unknown statistic `{stat}`; use {STAT_FORMS}")
                })?;
                Metric::Server(ServerFigure {
                    name: intern(&name["server.".len()..]),
                    stat,
                    time: parse_duration(rhs).is_ok(),
                })
            }
            [name] if name.starts_with("server.") => {
                return Err(format!(
                    "`{name}` needs a statistic, e.g. `{name} p99 < 16.7ms` or `{name} max < 2GB`"
                ))
            }
            _ => {
                return Err(format!(
                    "unknown metric `{}`; use rtt, handshake, send_lateness, snapshot_interarrival \
                     (with a statistic), downstream_loss, upstream_loss, connect_success, \
                     decode_errors, bots_failed, bots_never_connected, bots_lost, bots_silent_at_end, snapshots_applied, \
                     generator_saturated, inputs_skipped, snapshot_rate, capacity or server.NAME (with a statistic)",
                    lhs.join(" ")
                ))
            }
        };
        let limit = match metric {
            Metric::Time(..) => parse_duration(rhs)?.as_secs_f64() * 1e6,
            Metric::Server(f) if f.time => parse_duration(rhs)?.as_secs_f64() * 1e6,
            Metric::Server(_) => match parse_size(rhs) {
                Some(v) => v,
                None => rhs
                    .parse::<f64>()
                    .map_err(|_| format!("`{rhs}` is not a time, a size (2GB) or a number"))?,
            },
            Metric::DownstreamLoss | Metric::UpstreamLoss | Metric::ConnectSuccess => {
                let (num, pct) = match rhs.strip_suffix('%') {
                    Some(n) => (n.trim(), true),
                    None => (rhs, false),
                };
                let v: f64 = num
                    .parse()
                    .map_err(|_| format!("`{rhs}` is not a rate; write e.g. 1% or 0.01"))?;
                let v = if pct { v / 100.0 } else { v };
                if !(0.0..=1.0).contains(&v) {
                    return Err(format!("`{rhs}` is not between 0% and 100%"));
                }
                v
            }
            Metric::SnapshotRate(_) => {
                let num = rhs.strip_suffix("Hz").unwrap_or(rhs).trim();
                num.parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| format!("`{rhs}` is not a rate; write e.g. 20Hz"))?
            }
            _ => rhs
                .parse::<f64>()
                .map_err(|_| format!("`{rhs}` is not a number"))?,
        };
        Ok(Threshold {
            metric,
            op,
            limit,
            text: t.to_string(),
            default: false,
            group,
        })
    }

    /// Where the observed value sits in summary.json: the metric's path, under
    /// `groups.NAME.` for a group's.
    pub fn path(&self) -> String {
        match &self.group {
            Some(g) => format!("groups.{g}.{}", self.metric.path()),
            None => self.metric.path(),
        }
    }
}

/// `rtt{group=mobile} p99` -> (`mobile`, `rtt p99`); without braces, no group.
fn split_group(lhs: &str) -> Result<(Option<String>, String), String> {
    let Some(open) = lhs.find('{') else {
        if lhs.contains('}') {
            return Err(format!("`{}`: a `}}` without its `{{`", lhs.trim()));
        }
        return Ok((None, lhs.to_string()));
    };
    let close = lhs[open..].find('}').map(|i| i + open).ok_or_else(|| {
        format!(
            "`{}`: `{{` is not closed; write e.g. `rtt{{group=mobile}} p99`",
            lhs.trim()
        )
    })?;
    let inner = &lhs[open + 1..close];
    let bad = || {
        format!(
            "`{{{inner}}}`: a threshold names a group as `{{group=NAME}}` after the metric, \
             e.g. `rtt{{group=mobile}} p99 < 250ms`"
        )
    };
    let (key, name) = inner.split_once('=').ok_or_else(bad)?;
    let name = name.trim();
    if key.trim() != "group"
        || name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(bad());
    }
    let rest = format!("{} {}", &lhs[..open], &lhs[close + 1..]);
    if rest.contains(['{', '}']) {
        return Err(bad());
    }
    Ok((Some(name.to_string()), rest))
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Threshold {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        // A threshold is a list item, with no key to name: its text says which one it is.
        Threshold::parse(&s).map_err(|m| de::Error::custom(format!("threshold `{s}`: {m}")))
    }
}

impl Serialize for Threshold {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_a_number_of_players() {
        let t = Threshold::parse("capacity >= 400").unwrap();
        assert_eq!((t.metric, t.op, t.limit), (Metric::Capacity, Op::Ge, 400.0));
        assert_eq!(t.path(), "capacity.players");
    }

    #[test]
    fn snapshot_rate_takes_four_statistics_and_hertz() {
        let t = Threshold::parse("snapshot_rate min >= 20Hz").unwrap();
        assert_eq!(t.metric, Metric::SnapshotRate(Stat::Min));
        assert_eq!((t.op, t.limit), (Op::Ge, 20.0));
        assert_eq!(t.path(), "snapshot_rate.min_hz");
        let t = Threshold::parse("snapshot_rate median > 9.5").unwrap();
        assert_eq!((t.metric, t.limit), (Metric::SnapshotRate(Stat::P50), 9.5));
        assert_eq!(t.path(), "snapshot_rate.p50_hz");
        assert!(Threshold::parse("snapshot_rate p99 > 10Hz")
            .unwrap_err()
            .contains("min, mean, median (p50) or max"));
        assert!(Threshold::parse("snapshot_rate > 10Hz")
            .unwrap_err()
            .contains("needs a statistic"));
        assert!(Threshold::parse("snapshot_rate min > fast")
            .unwrap_err()
            .contains("not a rate"));
    }

    #[test]
    fn server_figures_take_times_sizes_and_numbers() {
        let t = Threshold::parse("server.tick_seconds p99 < 16.7ms").unwrap();
        assert_eq!(
            t.metric,
            Metric::Server(ServerFigure {
                name: "tick_seconds",
                stat: Stat::P99,
                time: true
            })
        );
        assert!((t.limit - 16_700.0).abs() < 1e-6);
        assert_eq!(
            t.metric.path(),
            "server_metrics.figures.tick_seconds.p99_us"
        );
        let m = Threshold::parse("server.process_resident_memory_bytes max < 2GB").unwrap();
        assert_eq!(m.limit, 2e9);
        assert_eq!(
            Threshold::parse("server.x max < 2MiB").unwrap().limit,
            2_097_152.0
        );
        assert_eq!(
            Threshold::parse("server.sessions min >= 100")
                .unwrap()
                .limit,
            100.0
        );
        assert!(Threshold::parse("server.sessions < 3")
            .unwrap_err()
            .contains("statistic"));
    }

    #[test]
    fn parses_the_documented_forms() {
        let t = Threshold::parse("rtt p99 < 50ms").unwrap();
        assert_eq!(t.metric, Metric::Time(TimeMetric::Rtt, Stat::P99));
        assert_eq!(t.op, Op::Lt);
        assert_eq!(t.limit, 50_000.0);
        let t = Threshold::parse("downstream_loss < 1%").unwrap();
        assert_eq!((t.metric, t.limit), (Metric::DownstreamLoss, 0.01));
        let t = Threshold::parse("connect_success >= 99.9%").unwrap();
        assert_eq!(t.op, Op::Ge);
        assert!((t.limit - 0.999).abs() < 1e-12);
        let t = Threshold::parse("decode_errors <= 0").unwrap();
        assert_eq!((t.metric, t.limit), (Metric::DecodeErrors, 0.0));
    }

    #[test]
    fn a_metric_may_name_a_group() {
        let t = Threshold::parse("rtt{group=mobile} p99 < 250ms").unwrap();
        assert_eq!(t.metric, Metric::Time(TimeMetric::Rtt, Stat::P99));
        assert_eq!(t.group.as_deref(), Some("mobile"));
        assert_eq!(t.limit, 250_000.0);
        assert_eq!(t.path(), "groups.mobile.rtt_us.p99");
        let t = Threshold::parse("downstream_loss{group = wifi-5} < 5%").unwrap();
        assert_eq!(
            (t.metric, t.group.as_deref()),
            (Metric::DownstreamLoss, Some("wifi-5"))
        );
        assert_eq!(t.path(), "groups.wifi-5.loss.downstream.rate");
        assert_eq!(Threshold::parse("rtt p99 < 5ms").unwrap().group, None);
        for bad in [
            "rtt{group=} p99 < 5ms",
            "rtt{grp=a} p99 < 5ms",
            "rtt{group=a p99 < 5ms",
            "rtt}group=a{ p99 < 5ms",
            "rtt{group=a b} p99 < 5ms",
        ] {
            assert!(Threshold::parse(bad).is_err(), "{bad}");
        }
        // A group's threshold does not replace the whole run's default check.
        let own = [Threshold::parse("bots_lost{group=a} <= 3").unwrap()];
        assert!(default_checks(&own)
            .iter()
            .any(|d| d.metric == Metric::BotsLost));
    }

    #[test]
    fn rejects_nonsense_with_a_hint() {
        assert!(Threshold::parse("rtt < 50ms")
            .unwrap_err()
            .contains("statistic"));
        assert!(Threshold::parse("latency p99 < 5ms")
            .unwrap_err()
            .contains("unknown metric"));
        assert!(Threshold::parse("rtt p99 50ms")
            .unwrap_err()
            .contains("comparison"));
        assert!(Threshold::parse("downstream_loss < 150%").is_err());
    }

    /// Any percentile compare takes, on every histogram metric; the result's path names it.
    #[test]
    fn takes_any_percentile_compare_takes() {
        let t = Threshold::parse("rtt p95 < 5ms").unwrap();
        assert_eq!(
            t.metric,
            Metric::Time(TimeMetric::Rtt, Stat::Quantile(950_000))
        );
        assert_eq!(t.limit, 5_000.0);
        assert_eq!(t.metric.path(), "rtt_us.p95");
        let t = Threshold::parse("rtt p99.9 < 5ms").unwrap();
        assert_eq!(t.metric, Metric::Time(TimeMetric::Rtt, Stat::P999));
        assert_eq!(t.metric.path(), "rtt_us.p999");
        assert_eq!(
            Threshold::parse("rtt p999 < 5ms").unwrap().metric,
            t.metric,
            "p999 is the summary's name for p99.9"
        );
        let cases = [
            (
                "send_lateness p99.5 <= 2ms",
                TimeMetric::SendLateness,
                995_000,
                "generator.send_lateness_us.p99_5",
            ),
            (
                "snapshot_interarrival p75 < 40ms",
                TimeMetric::SnapshotInterarrival,
                750_000,
                "snapshot_interarrival_us.p75",
            ),
            (
                "handshake median < 1s",
                TimeMetric::Handshake,
                500_000,
                "handshake_us.p50",
            ),
            (
                "rtt p99.99 < 9ms",
                TimeMetric::Rtt,
                999_900,
                "rtt_us.p99_99",
            ),
            ("rtt p0.5 > 1us", TimeMetric::Rtt, 5_000, "rtt_us.p0_5"),
            ("rtt p100 < 1s", TimeMetric::Rtt, 1_000_000, "rtt_us.p100"),
        ];
        for (text, m, q, path) in cases {
            let t = Threshold::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(t.metric, Metric::Time(m, Stat::Quantile(q)), "{text}");
            assert_eq!(t.metric.path(), path, "{text}");
        }
        // Names read back as written.
        for name in [
            "p50", "p95", "p99.9", "p99.99", "p0.5", "p100", "min", "mean", "max",
        ] {
            assert_eq!(Stat::parse(name).map(Stat::name).as_deref(), Some(name));
        }
    }

    #[test]
    fn a_statistic_that_is_none_names_the_allowed_forms() {
        for bad in [
            "p101",
            "p0",
            "p",
            "p99.",
            "p99.99999",
            "q95",
            "p-5",
            "p9.9.9",
            "fast",
        ] {
            let e = Threshold::parse(&format!("rtt {bad} < 5ms")).unwrap_err();
            assert!(
                e.contains(&format!("unknown statistic `{bad}`")) && e.contains(STAT_FORMS),
                "{bad}: {e}"
            );
        }
    }
}
