//! The scenario side of a link: `network:` as a scenario writes it, checked.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

use crate::duration::Dur;

/// A probability written as a share: `2%`, `0.5 %` or `0.02`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Share(pub f64);

impl Share {
    fn parse(s: &str) -> Result<Share, String> {
        let t = s.trim();
        let (num, scale) = match t.strip_suffix('%') {
            Some(n) => (n.trim(), 100.0),
            None => (t, 1.0),
        };
        let v: f64 = num
            .parse()
            .map_err(|_| format!("`{t}` is not a share; write e.g. 2% or 0.02"))?;
        Share::checked(v / scale).map_err(|_| format!("`{t}` is not between 0% and 100%"))
    }

    fn checked(v: f64) -> Result<Share, String> {
        if v.is_finite() && (0.0..=1.0).contains(&v) {
            Ok(Share(v))
        } else {
            Err(format!("{v} is not between 0 and 1"))
        }
    }
}

impl<'de> Deserialize<'de> for Share {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Share;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a share such as 2% or 0.02")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Share, E> {
                Share::parse(v).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Share, E> {
                Share::checked(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Share, E> {
                Share::checked(v as f64).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Share, E> {
                Share::checked(v as f64).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Share {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}%", self.0 * 100.0))
    }
}

/// How datagrams are lost.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum LossModel {
    /// Each datagram lost with this probability, independently: `loss: 1%`.
    Uniform(Share),
    /// Bursts of loss, as on radio links: `loss: { rate: 2%, mean_burst: 4 }`. A two-state
    /// (Gilbert) chain where every datagram in the bad state is lost: a burst lasts
    /// `mean_burst` datagrams on average and the long-run loss is `rate`.
    Bursty { rate: Share, mean_burst: f64 },
    /// The general Gilbert–Elliott chain: `p` good→bad and `r` bad→good per datagram, and
    /// the loss probability in each state (`loss_good`, usually 0; `loss_bad`, usually 1).
    GilbertElliott {
        p: Share,
        r: Share,
        #[serde(default)]
        loss_good: Share,
        #[serde(default = "one")]
        loss_bad: Share,
    },
}

fn one() -> Share {
    Share(1.0)
}

impl LossModel {
    /// The chain's parameters `(p, r, loss_good, loss_bad)`; uniform loss is a chain that
    /// never leaves the good state.
    pub(crate) fn chain(&self) -> (f64, f64, f64, f64) {
        match *self {
            LossModel::Uniform(s) => (0.0, 1.0, s.0, 1.0),
            LossModel::Bursty { rate, mean_burst } => {
                // Bad-state share = p / (p + r) = rate, with r = 1 / mean_burst.
                let r = 1.0 / mean_burst.max(1.0);
                let p = if rate.0 >= 1.0 {
                    1.0
                } else {
                    (rate.0 * r / (1.0 - rate.0)).min(1.0)
                };
                (p, r, 0.0, 1.0)
            }
            LossModel::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
            } => (p.0, r.0, loss_good.0, loss_bad.0),
        }
    }

    /// The long-run share of datagrams lost.
    pub fn mean_rate(&self) -> f64 {
        let (p, r, lg, lb) = self.chain();
        if p + r == 0.0 {
            return lg;
        }
        let bad = p / (p + r);
        (1.0 - bad) * lg + bad * lb
    }
}

/// The random part of the delay, added to `latency`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Jitter {
    /// Uniform between 0 and this.
    Uniform(Dur),
    /// Normal with this standard deviation around 0, cut at 0 (a datagram is never early):
    /// the mean added delay is then about 0.4 standard deviations.
    Normal(Dur),
    /// A measured distribution: the added delay at some percentiles, e.g.
    /// `{ p50: 2ms, p90: 10ms, p99: 40ms }`, interpolated linearly from 0 at p0 and held at
    /// the last given value above it.
    Percentiles(std::collections::BTreeMap<String, Dur>),
}

/// One direction's conditions. Every field is optional; a missing one means a perfect link in
/// that respect.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Conditions {
    /// Fixed one-way delay.
    pub latency: Option<Dur>,
    pub jitter: Option<Jitter>,
    pub loss: Option<LossModel>,
    /// Share of datagrams delivered twice.
    pub duplicate: Option<Share>,
    /// How much later the copy arrives (default 1 ms).
    pub duplicate_delay: Option<Dur>,
    /// Share of datagrams held back by `reorder_delay`, so later ones overtake them.
    pub reorder: Option<Share>,
    /// How long a reordered datagram is held back (default 10 ms).
    pub reorder_delay: Option<Dur>,
    /// Bits per second, e.g. `bandwidth_bps: 1000000` for 1 Mbit/s.
    pub bandwidth_bps: Option<u64>,
    /// Bytes not yet sent on the wire (the datagram being serialised included) that the
    /// bandwidth cap may hold (default 64 KiB); a datagram that would exceed it is dropped
    /// (tail drop).
    pub queue_bytes: Option<u64>,
    /// The link goes down for `down_for` every `every`.
    pub outage: Option<Outage>,
}

/// Link down for `down_for` every `every`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Outage {
    pub every: Dur,
    pub down_for: Dur,
}

/// `network:` of a scenario (or of a group): conditions for both directions, with `up:` and
/// `down:` overriding them for one direction.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(from = "NetworkFile")]
pub struct NetworkConditions {
    #[serde(flatten)]
    pub both: Conditions,
    /// Bot to server.
    pub up: Option<Conditions>,
    /// Server to bot.
    pub down: Option<Conditions>,
}

/// What [`describe_written`] says of no conditions: the bots' datagrams took the real link.
pub const REAL_LINK: &str = "real link";

/// On one line without the unset keys, as written: `latency: 75ms, down: {loss: 5%}`;
/// [`REAL_LINK`] when nothing is set. The words are those of the conditions as summary.json
/// keeps them ([`describe_written`]), so a report read back from a file says what the run's
/// plan said.
impl fmt::Display for NetworkConditions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let written = serde_json::to_value(self).ok();
        f.write_str(&describe_written(written.as_ref()))
    }
}

/// Conditions as written (`network:` serialized, as summary.json keeps them), on one line
/// without the unset keys: `latency: 75ms, down: {loss: 5%}`; [`REAL_LINK`] when nothing is
/// set. A summary's conditions are described from the file as it is, also when it was written
/// by another version.
pub fn describe_written(network: Option<&serde_json::Value>) -> String {
    use serde_json::Value;
    fn one(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Object(o) => format!("{{{}}}", entries(o)),
            other => other.to_string(),
        }
    }
    fn entries(o: &serde_json::Map<String, Value>) -> String {
        o.iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("{k}: {}", one(v)))
            .collect::<Vec<_>>()
            .join(", ")
    }
    match network {
        Some(Value::Object(o)) if o.values().any(|v| !v.is_null()) => entries(o),
        _ => REAL_LINK.into(),
    }
}

/// `network:` as written: the both-ways fields spelled out beside `up:` and `down:`.
///
/// Why not `#[serde(flatten)]` on [`NetworkConditions::both`]: serde buffers a flattened
/// map before deserialising it, which loses the YAML positions, so a bad value would be
/// reported at the start of the `network:` mapping instead of its own line and column.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct NetworkFile {
    latency: Option<Dur>,
    jitter: Option<Jitter>,
    loss: Option<LossModel>,
    duplicate: Option<Share>,
    duplicate_delay: Option<Dur>,
    reorder: Option<Share>,
    reorder_delay: Option<Dur>,
    bandwidth_bps: Option<u64>,
    queue_bytes: Option<u64>,
    outage: Option<Outage>,
    up: Option<Conditions>,
    down: Option<Conditions>,
}

impl From<NetworkFile> for NetworkConditions {
    fn from(f: NetworkFile) -> Self {
        NetworkConditions {
            both: Conditions {
                latency: f.latency,
                jitter: f.jitter,
                loss: f.loss,
                duplicate: f.duplicate,
                duplicate_delay: f.duplicate_delay,
                reorder: f.reorder,
                reorder_delay: f.reorder_delay,
                bandwidth_bps: f.bandwidth_bps,
                queue_bytes: f.queue_bytes,
                outage: f.outage,
            },
            up: f.up,
            down: f.down,
        }
    }
}

/// A value a scenario got wrong, with the key it came from.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("network.{key}: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.into(),
        message: message.into(),
    }
}

impl Conditions {
    /// `self` with the fields `over` sets replaced.
    pub fn overridden_by(&self, over: &Conditions) -> Conditions {
        Conditions {
            latency: over.latency.or(self.latency),
            jitter: over.jitter.clone().or_else(|| self.jitter.clone()),
            loss: over.loss.clone().or_else(|| self.loss.clone()),
            duplicate: over.duplicate.or(self.duplicate),
            duplicate_delay: over.duplicate_delay.or(self.duplicate_delay),
            reorder: over.reorder.or(self.reorder),
            reorder_delay: over.reorder_delay.or(self.reorder_delay),
            bandwidth_bps: over.bandwidth_bps.or(self.bandwidth_bps),
            queue_bytes: over.queue_bytes.or(self.queue_bytes),
            outage: over.outage.or(self.outage),
        }
    }

    /// Whether these conditions change nothing (the engine then skips the link entirely).
    pub fn is_perfect(&self) -> bool {
        self == &Conditions::default()
    }

    /// Check the values; `dir` names the direction in messages (`up`, `down` or empty).
    pub fn validate(&self, dir: &str) -> Result<(), ConfigError> {
        let key = |k: &str| {
            if dir.is_empty() {
                k.to_string()
            } else {
                format!("{dir}.{k}")
            }
        };
        if let Some(LossModel::Bursty { mean_burst, rate }) = &self.loss {
            if !mean_burst.is_finite() || *mean_burst < 1.0 {
                return Err(err(
                    &key("loss.mean_burst"),
                    "must be at least 1 (datagrams)",
                ));
            }
            if rate.0 >= 1.0 {
                return Err(err(&key("loss.rate"), "must be below 100%"));
            }
        }
        if let Some(LossModel::GilbertElliott { p, r, .. }) = &self.loss {
            if p.0 + r.0 == 0.0 {
                return Err(err(&key("loss"), "p and r cannot both be 0"));
            }
        }
        if let Some(Jitter::Percentiles(table)) = &self.jitter {
            percentile_table(table).map_err(|m| err(&key("jitter.percentiles"), m))?;
        }
        if self.bandwidth_bps == Some(0) {
            return Err(err(
                &key("bandwidth_bps"),
                "must be above 0 (leave it out for no cap)",
            ));
        }
        if self.queue_bytes.is_some() && self.bandwidth_bps.is_none() {
            return Err(err(
                &key("queue_bytes"),
                "needs bandwidth_bps (a queue in front of a cap)",
            ));
        }
        if let Some(o) = self.outage {
            if o.every.0.is_zero() || o.down_for.0 >= o.every.0 {
                return Err(err(
                    &key("outage"),
                    "down_for must be shorter than every, and every above 0",
                ));
            }
        }
        Ok(())
    }
}

impl NetworkConditions {
    /// The conditions of each direction, overrides applied: `(up, down)`.
    pub fn directions(&self) -> (Conditions, Conditions) {
        let up = match &self.up {
            Some(o) => self.both.overridden_by(o),
            None => self.both.clone(),
        };
        let down = match &self.down {
            Some(o) => self.both.overridden_by(o),
            None => self.both.clone(),
        };
        (up, down)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.both.validate("")?;
        let (up, down) = self.directions();
        up.validate("up")?;
        down.validate("down")
    }
}

/// `{p50: 2ms, p99: 40ms}` as sorted `(quantile, delay)` points starting at `(0, 0)`.
pub(crate) fn percentile_table(
    table: &std::collections::BTreeMap<String, Dur>,
) -> Result<Vec<(f64, Duration)>, String> {
    if table.is_empty() {
        return Err("give at least one percentile, e.g. { p50: 2ms, p99: 40ms }".into());
    }
    let mut points = vec![(0.0, Duration::ZERO)];
    for (k, v) in table {
        let q: f64 = k
            .strip_prefix('p')
            .and_then(|n| n.parse().ok())
            .filter(|q: &f64| *q > 0.0 && *q <= 100.0)
            .ok_or_else(|| format!("`{k}` is not a percentile; write p50, p90, p99.9"))?;
        points.push((q / 100.0, v.0));
    }
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    if points.windows(2).any(|w| w[1].1 < w[0].1) {
        return Err("delays must not fall as the percentile rises".into());
    }
    Ok(points)
}
