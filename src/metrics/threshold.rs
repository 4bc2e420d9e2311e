//! Pass/fail conditions: `rtt p99 < 50ms`, `downstream_loss < 1%`, `connect_success > 99.9%`.
//!
//! Grammar: `METRIC [STAT] OP VALUE[UNIT]`.
//! - Time metrics (`rtt`, `handshake`, `send_lateness`, `snapshot_interarrival`) take a STAT
//!   (`min`, `mean`, `p50`, `p90`, `p99`, `p999`, `max`) and a time value (`us`, `ms`, `s`).
//! - Rate metrics (`downstream_loss`, `upstream_loss`, `connect_success`) take a percentage
//!   (`1%`) or a fraction (`0.01`).
//! - Count metrics (`decode_errors`, `bots_failed`, `bots_never_connected`, `inputs_skipped`, ...)
//!   take a plain number.
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    Min,
    Mean,
    P50,
    P90,
    P99,
    P999,
    Max,
}

impl Stat {
    pub fn name(self) -> &'static str {
        match self {
            Stat::Min => "min",
            Stat::Mean => "mean",
            Stat::P50 => "p50",
            Stat::P90 => "p90",
            Stat::P99 => "p99",
            Stat::P999 => "p999",
            Stat::Max => "max",
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
}

impl Metric {
    /// Whether `self` and `other` read the same figure, whatever statistic of it (`rtt p99`
    /// and `rtt p50` both need RTT samples): what "the run cannot measure X" is about.
    pub fn same_figure(self, other: Metric) -> bool {
        match (self, other) {
            (Metric::Time(a, _), Metric::Time(b, _)) => a == b,
            (a, b) => a == b,
        }
    }

    /// Where the observed value sits in summary.json: a dotted JSON path into it
    /// (`generator.saturated` is a boolean, observed as 1 or 0).
    pub fn path(self) -> String {
        match self {
            Metric::Time(m, s) => format!("{}.{}", m.key(), s.name()),
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
        .filter(|d| !own.iter().any(|t| t.metric == d.metric))
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
        let op = match op {
            "<=" => Op::Le,
            ">=" => Op::Ge,
            "<" => Op::Lt,
            _ => Op::Gt,
        };
        let lhs: Vec<&str> = t[..op_at].split_whitespace().collect();
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
                let stat = match *stat {
                    "min" => Stat::Min,
                    "mean" | "avg" => Stat::Mean,
                    "p50" | "median" => Stat::P50,
                    "p90" => Stat::P90,
                    "p99" => Stat::P99,
                    "p999" | "p99.9" => Stat::P999,
                    "max" => Stat::Max,
                    other => {
                        return Err(format!(
                            "unknown statistic `{other}`; use min, mean, p50, p90, p99, p999 or max"
                        ))
                    }
                };
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
            _ => {
                return Err(format!(
                    "unknown metric `{}`; use rtt, handshake, send_lateness, snapshot_interarrival \
                     (with a statistic), downstream_loss, upstream_loss, connect_success, \
                     decode_errors, bots_failed, bots_never_connected, bots_lost, bots_silent_at_end, snapshots_applied, \
                     generator_saturated or inputs_skipped",
                    lhs.join(" ")
                ))
            }
        };
        let limit = match metric {
            Metric::Time(..) => parse_duration(rhs)?.as_secs_f64() * 1e6,
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
        })
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Threshold {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Threshold::parse(&s).map_err(de::Error::custom)
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
}
