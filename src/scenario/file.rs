//! The scenario file as written (serde types). README documents every key; `scenarios/`
//! has commented examples.

use serde::{Deserialize, Serialize};

use super::duration::Dur;
use super::threshold::Threshold;
use crate::protocol::cafe::CafeOptions;
use crate::protocol::city::CityOptions;
use crate::protocol::rtype::RtypeOptions;
use crate::protocol::ProtocolName;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// Names the run and its default output folder.
    pub name: String,
    pub protocol: ProtocolSection,
    /// `embedded` (default) runs the reference server in-process on a loopback port.
    #[serde(default)]
    pub target: Target,
    /// Options of the embedded reference server (ignored for a real target).
    #[serde(default)]
    pub server: ServerSection,
    pub population: Population,
    #[serde(default)]
    pub behaviour: Behaviour,
    /// Total run time; defaults to the sum of the population stages.
    #[serde(default)]
    pub duration: Option<Dur>,
    /// Same seed, same bot decisions.
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub thresholds: Vec<Threshold>,
    #[serde(default)]
    pub output: OutputSection,
    #[serde(default)]
    pub engine: EngineSection,
}

/// `protocol: { cafe: { ...options } }`: externally tagged, so a mistake inside the options
/// is reported at its own line and column.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum ProtocolSection {
    Cafe(CafeOptions),
    Rtype(RtypeOptions),
    City(CityOptions),
}

impl ProtocolSection {
    pub fn name(&self) -> ProtocolName {
        match self {
            ProtocolSection::Cafe(_) => ProtocolName::Cafe,
            ProtocolSection::Rtype(_) => ProtocolName::Rtype,
            ProtocolSection::City(_) => ProtocolName::City,
        }
    }

    pub fn dialect_name(&self) -> String {
        match self {
            ProtocolSection::Cafe(o) => format!("{:?}", o.dialect).to_lowercase(),
            ProtocolSection::Rtype(o) => format!("float_order={}", o.dialect_name()),
            ProtocolSection::City(o) => format!("{:?}", o.dialect).to_lowercase(),
        }
    }

    /// Protocol-specific checks of the options.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            ProtocolSection::Cafe(_) => Ok(()),
            ProtocolSection::Rtype(o) => o.validate(),
            ProtocolSection::City(o) => o.validate(),
        }
    }
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

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSection {
    /// Simulation ticks per second.
    pub tick_rate: u16,
    /// Snapshots per second where the protocol sends them slower than it ticks
    /// (rtype: 20-30, default 20); cafe snapshots every tick.
    pub snapshot_rate: Option<u32>,
    /// A full snapshot every this many ticks (deltas in between).
    pub full_every: u32,
    pub max_clients: usize,
    pub client_timeout: Dur,
    /// Players per room (a client's snapshots carry its room); default per protocol
    /// (cafe 32, rtype 8).
    pub room_size: Option<usize>,
    /// Players one server instance takes (city: MAX_PLAYERS, default 100).
    pub players_per_instance: Option<usize>,
    /// Server instances on consecutive ports (city). Default: as many as the population needs.
    pub instances: Option<usize>,
    /// ENet servers (city): keep ENet's unreliable-packet throttle, which drops unreliable
    /// packets at random while a peer's RTT is above its recent mean (C ENet's default). Off by
    /// default, so loss measured against the embedded server is the network's.
    pub enet_throttle: bool,
}

impl Default for ServerSection {
    fn default() -> Self {
        Self {
            tick_rate: 60,
            snapshot_rate: None,
            full_every: 60,
            max_clients: 10_000,
            client_timeout: Dur(std::time::Duration::from_secs(5)),
            room_size: None,
            players_per_instance: None,
            instances: None,
            enet_throttle: false,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Population {
    pub stages: Vec<Stage>,
    /// At most this many new bots per second (default: no limit beyond the ramps).
    #[serde(default)]
    pub spawn_rate: Option<f64>,
}

/// One population stage: ramp to a count over a time, or hold the current count.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(try_from = "StageRaw", untagged)]
pub enum Stage {
    Ramp { ramp_to: u64, over: Dur },
    Hold { hold: Dur },
}

/// The keys a stage may have; [`Stage`] checks the combination, so a mistake is reported at
/// the stage's own line.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct StageRaw {
    ramp_to: Option<u64>,
    over: Option<Dur>,
    hold: Option<Dur>,
}

impl TryFrom<StageRaw> for Stage {
    type Error = String;
    fn try_from(r: StageRaw) -> Result<Self, String> {
        match (r.ramp_to, r.over, r.hold) {
            (Some(ramp_to), over, None) => Ok(Stage::Ramp {
                ramp_to,
                over: over.unwrap_or_default(),
            }),
            (None, None, Some(hold)) => Ok(Stage::Hold { hold }),
            (None, Some(_), None) => Err("a stage with `over` needs `ramp_to`".into()),
            (None, None, None) => Err("a stage needs `ramp_to` (with `over`) or `hold`".into()),
            _ => Err("a stage is either `ramp_to` + `over` or `hold`, not both".into()),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Behaviour {
    /// Inputs per second on each bot's fixed grid.
    pub input_rate: f64,
    /// `rate` sends every grid slot; `on_change` only when the keys change.
    pub input_mode: InputMode,
    pub pattern: PatternSpec,
    pub ping_interval: Dur,
    pub handshake_timeout: Dur,
    pub handshake_retry: Dur,
    /// The session is lost after this long without a datagram from the server.
    pub silence_timeout: Dur,
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
/// `pattern: { circle: { period: 4s } }`, `pattern: { scripted: { steps: [...] } }`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PatternSpec {
    Idle,
    RandomWalk { change_every: Dur },
    Circle { period: Dur },
    Scripted { steps: Vec<ScriptStep> },
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptStep {
    /// Any of up, down, left, right, shoot; empty for none.
    pub keys: Vec<String>,
    #[serde(rename = "for")]
    pub hold_for: Dur,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct OutputSection {
    /// Output folder; default `reports/<name>-<UTC timestamp>/`.
    pub dir: Option<String>,
    /// Also write JUnit XML (for CI test tabs).
    pub junit: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSection {
    /// Worker threads; default one per core.
    pub workers: Option<usize>,
    /// Bots per socket where the transport multiplexes peers (ENet): sharing sockets is how a
    /// generator goes past the per-socket syscall ceiling. Default 1. Raw UDP protocols always
    /// use one socket per bot (servers key clients by address).
    pub bots_per_socket: Option<usize>,
    /// ENet (city): keep ENet's unreliable-packet throttle for the traffic *to* the bots
    /// (default true, as every ENet client has it). ENet lets the receiving side set how its
    /// peer throttles: false makes each bot tell the server, through ENet's throttle
    /// configuration, never to drop unreliable packets for it when its RTT rises.
    pub enet_throttle: Option<bool>,
}
