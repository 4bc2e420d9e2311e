//! What a bot is given, as the scenario file writes it: where it connects (`target:`), the
//! simulated link it takes (`network:`) and what it does (`behaviour:`). The scenario sets
//! them for every bot and a group may set its own ([`super::groups`]), so they sit below both
//! the file (`file.rs`) and its groups.

use serde::{Deserialize, Serialize};

use crate::duration::Dur;
use crate::netsim::NetworkConditions;

/// `target:`, refused where it is read when an entry's port is 0, so the message points at it
/// (the rest of a target, which needs the protocol's default port, is checked by the plan).
pub(super) fn target<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Target, D::Error> {
    let t = Target::deserialize(d)?;
    t.check_ports().map_err(serde::de::Error::custom)?;
    Ok(t)
}

/// A group's `target:`, checked as the scenario's is.
pub(super) fn group_target<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Target>, D::Error> {
    let t = Option::<Target>::deserialize(d)?;
    if let Some(t) = &t {
        t.check_ports().map_err(serde::de::Error::custom)?;
    }
    Ok(t)
}

/// `network:`, checked where it is read, so a bad value is reported at its own line.
pub(super) fn network<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<NetworkConditions>, D::Error> {
    let n = Option::<NetworkConditions>::deserialize(d)?;
    if let Some(n) = &n {
        n.validate().map_err(serde::de::Error::custom)?;
    }
    Ok(n)
}

/// Where the bots go.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(untagged)]
pub enum Target {
    /// `embedded`, or one `host:port`.
    #[default]
    #[serde(skip)]
    Embedded,
    One(String),
    /// Several servers; bots are spread over them round-robin.
    Many(Vec<String>),
}

impl Target {
    /// Refuses an entry with port 0 ([`port_zero`]).
    pub fn check_ports(&self) -> Result<(), String> {
        let entries: Vec<&str> = match self {
            Target::Embedded => Vec::new(),
            Target::One(s) => s.split(',').collect(),
            Target::Many(v) => v.iter().flat_map(|s| s.split(',')).collect(),
        };
        match entries.into_iter().find_map(port_zero) {
            Some(m) => Err(m),
            None => Ok(()),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Behaviour {
    /// Inputs per second on each bot's fixed grid (above 0, at most 1000).
    #[serde(deserialize_with = "input_rate")]
    pub input_rate: f64,
    /// `rate` sends every grid slot; `on_change` only when the keys change.
    pub input_mode: InputMode,
    pub pattern: PatternSpec,
    #[serde(deserialize_with = "positive::ping_interval")]
    pub ping_interval: Dur,
    #[serde(deserialize_with = "positive::handshake_timeout")]
    pub handshake_timeout: Dur,
    #[serde(deserialize_with = "positive::handshake_retry")]
    pub handshake_retry: Dur,
    /// The session is lost after this long without a datagram from the server.
    #[serde(deserialize_with = "positive::silence_timeout")]
    pub silence_timeout: Dur,
}

/// What `behaviour.input_rate` takes.
pub(super) const INPUT_RATE: &str =
    "a number of inputs per second, above 0 and at most 1000, e.g. 60";

/// `behaviour.input_rate`, checked where it is read, so a bad value is reported at its own
/// line and column as a syntax error is.
pub(super) fn input_rate<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let hz = f64::deserialize(d)?;
    if hz > 0.0 && hz <= 1000.0 {
        Ok(hz)
    } else {
        Err(serde::de::Error::custom(format!(
            "input_rate must be above 0 and at most 1000 inputs per second, got {hz}"
        )))
    }
}

/// Durations that must be longer than 0 (a ping interval, a timeout), one function per key so
/// the message names it.
pub(super) mod positive {
    use serde::Deserialize;

    use crate::duration::Dur;

    macro_rules! positive_durations {
        ($($key:ident),*) => {$(
            pub fn $key<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Dur, D::Error> {
                let v = Dur::deserialize(d)?;
                if v.0.is_zero() {
                    return Err(serde::de::Error::custom(concat!(
                        "behaviour.",
                        stringify!($key),
                        " must be longer than 0"
                    )));
                }
                Ok(v)
            }
        )*};
    }

    positive_durations!(
        ping_interval,
        handshake_timeout,
        handshake_retry,
        silence_timeout
    );
}

impl Default for Behaviour {
    fn default() -> Self {
        use std::time::Duration;
        Self {
            input_rate: 60.0,
            input_mode: InputMode::Rate,
            pattern: PatternSpec::RandomWalk {
                change_every: Dur(Duration::from_millis(500)),
            },
            ping_interval: Dur(Duration::from_secs(1)),
            handshake_timeout: Dur(Duration::from_secs(5)),
            handshake_retry: Dur(Duration::from_millis(500)),
            silence_timeout: Dur(Duration::from_secs(5)),
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum InputMode {
    Rate,
    OnChange,
}

/// `pattern: idle`, `pattern: { random_walk: { change_every: 500ms } }`,
/// `pattern: { circle: { period: 4s } }`, `pattern: { scripted: { steps: [...] } }`,
/// `pattern: { replay: { from: "...", steps: [...] } }` (written by `inspect --write-scenario`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PatternSpec {
    Idle,
    RandomWalk {
        change_every: Dur,
    },
    Circle {
        period: Dur,
    },
    Scripted {
        steps: Vec<ScriptStep>,
    },
    /// A captured client's key stream: `from` names the capture and flow (for the reader),
    /// the steps are its keys and how long each was held; each bot starts at its own offset.
    Replay {
        #[serde(default)]
        from: Option<String>,
        steps: Vec<ScriptStep>,
    },
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptStep {
    /// Any of up, down, left, right, shoot; empty for none.
    pub keys: Vec<String>,
    #[serde(rename = "for")]
    pub hold_for: Dur,
}

/// What is wrong with a target entry (`host:port` or `host:FIRST-LAST`) whose port is 0, if it
/// is. To a listening socket 0 means "any free port"; nothing listens on port 0, so a swarm
/// sent there found no server and the run ended "unreachable" after its handshake timeout.
/// Checked where the scenario is read (so the message has the key's line and column) and again
/// when `--target` replaces it.
pub fn port_zero(t: &str) -> Option<String> {
    let (_, ports) = t.trim().rsplit_once(':')?;
    let first = ports.split_once('-').map_or(ports, |(a, _)| a);
    (first.trim().parse::<u16>() == Ok(0)).then(|| {
        format!(
            "target `{t}`: port 0 is not a server's port (to a server it means \"any free \
             port\"); give the port the server listens on, 1 to 65535"
        )
    })
}

/// A group's `behaviour:`: each key it sets replaces the scenario's.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BehaviourOverride {
    #[serde(
        deserialize_with = "opt::input_rate",
        skip_serializing_if = "Option::is_none"
    )]
    pub input_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_mode: Option<InputMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pattern: Option<PatternSpec>,
    #[serde(
        deserialize_with = "opt::ping_interval",
        skip_serializing_if = "Option::is_none"
    )]
    pub ping_interval: Option<Dur>,
    #[serde(
        deserialize_with = "opt::handshake_timeout",
        skip_serializing_if = "Option::is_none"
    )]
    pub handshake_timeout: Option<Dur>,
    #[serde(
        deserialize_with = "opt::handshake_retry",
        skip_serializing_if = "Option::is_none"
    )]
    pub handshake_retry: Option<Dur>,
    #[serde(
        deserialize_with = "opt::silence_timeout",
        skip_serializing_if = "Option::is_none"
    )]
    pub silence_timeout: Option<Dur>,
}

impl BehaviourOverride {
    pub fn is_empty(&self) -> bool {
        self == &BehaviourOverride::default()
    }

    /// `base` with the keys this group sets replaced.
    pub fn apply(&self, base: &Behaviour) -> Behaviour {
        let mut b = base.clone();
        if let Some(v) = self.input_rate {
            b.input_rate = v;
        }
        if let Some(v) = self.input_mode {
            b.input_mode = v;
        }
        if let Some(v) = &self.pattern {
            b.pattern = v.clone();
        }
        if let Some(v) = self.ping_interval {
            b.ping_interval = v;
        }
        if let Some(v) = self.handshake_timeout {
            b.handshake_timeout = v;
        }
        if let Some(v) = self.handshake_retry {
            b.handshake_retry = v;
        }
        if let Some(v) = self.silence_timeout {
            b.silence_timeout = v;
        }
        b
    }
}

/// The scenario's checks of `behaviour:` keys, for a group's optional ones.
mod opt {
    use crate::duration::Dur;

    pub fn input_rate<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        super::input_rate(d).map(Some)
    }

    macro_rules! opt_durations {
        ($($key:ident),*) => {$(
            pub fn $key<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Dur>, D::Error> {
                super::positive::$key(d).map(Some)
            }
        )*};
    }

    opt_durations!(
        ping_interval,
        handshake_timeout,
        handshake_retry,
        silence_timeout
    );
}
