//! The scenario file as written (serde types). `docs/guide/scenarios.md` documents every key; `scenarios/`
//! has commented examples.

use serde::{Deserialize, Serialize};

use super::bot::{network, target, Behaviour, Target, INPUT_RATE};
use super::threshold::{Interrupted, Threshold, Unmeasurable};
use crate::duration::Dur;
use crate::netsim::NetworkConditions;
use crate::protocol::{ProtocolSection, ServerParams};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// Names the run and its default output folder.
    pub name: String,
    pub protocol: ProtocolSection,
    /// `embedded` (default) runs the reference server in-process on a loopback port.
    #[serde(default, deserialize_with = "target")]
    pub target: Target,
    /// Options of the embedded reference server (ignored for a real target).
    #[serde(default)]
    pub server: ServerParams,
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
    /// Add the default checks (`bots_lost <= 0`, `bots_silent_at_end <= 0`,
    /// `snapshots_applied > 0`) that fail a run
    /// whose server died or went silent; a threshold of the scenario's own on the same metric
    /// replaces its default. `false` turns them off.
    #[serde(default = "yes")]
    pub default_checks: bool,
    /// A threshold on a figure this protocol configuration cannot take (upstream loss where
    /// the server acknowledges no input): `fail` (default: a gate never passes on a figure
    /// nobody took) or `skip` (shown with the reason, left out of the verdict).
    #[serde(default)]
    pub unmeasurable_thresholds: Unmeasurable,
    /// A run cut short by Ctrl-C or SIGTERM: `fail` (default; the run's report says
    /// INTERRUPTED and it exits 1) or `pass` (the thresholds alone decide).
    #[serde(default)]
    pub interrupted: Interrupted,
    /// Stop the run early when one of its thresholds fails this long, judged second by
    /// second (k6's `abortOnFail` with a delay): the report is written and names the threshold
    /// that stopped it, and the run fails. Only figures a second can hold are judged that way
    /// (times, loss, snapshot rate). Unset: every run lasts its duration.
    #[serde(
        default,
        deserialize_with = "abort_on_fail",
        skip_serializing_if = "Option::is_none"
    )]
    pub abort_on_fail: Option<Dur>,
    #[serde(default)]
    pub output: OutputSection,
    #[serde(default)]
    pub engine: EngineSection,
    /// Limits for `tickswarm compare` on this scenario's runs.
    #[serde(default)]
    pub compare: CompareSection,
    /// Simulated network conditions (latency, jitter, loss, duplication, reordering, a
    /// bandwidth cap, outages) every bot's datagrams go through inside the engine, in both
    /// directions, with `up:`/`down:` for one direction (see [`crate::netsim`]). Unset: the
    /// real link only.
    #[serde(
        default,
        deserialize_with = "network",
        skip_serializing_if = "Option::is_none"
    )]
    pub network: Option<NetworkConditions>,
    /// The target's own Prometheus endpoints, scraped during the run
    /// ([`super::server_metrics`]).
    #[serde(
        default,
        deserialize_with = "super::server_metrics::endpoints",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub server_metrics: Vec<super::server_metrics::ServerMetricsEndpoint>,
    /// Named groups of bots, each a share of the population (or a fixed count) with its own
    /// behaviour, network, target and source addresses (see [`super::groups`]). Unset: one
    /// group of every bot, with the settings above.
    #[serde(
        default,
        deserialize_with = "groups",
        skip_serializing_if = "Option::is_none"
    )]
    pub groups: Option<Vec<super::groups::GroupSpec>>,
    /// How `tickswarm capacity` searches for the most players the server holds
    /// ([`super::capacity`]); `tickswarm run` ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<super::capacity::CapacitySection>,
}

/// `abort_on_fail:`, at least one second (whole seconds are judged).
fn abort_on_fail<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Dur>, D::Error> {
    let v = Option::<Dur>::deserialize(d)?;
    if v.is_some_and(|v| v.0 < std::time::Duration::from_secs(1)) {
        return Err(serde::de::Error::custom(
            "abort_on_fail must be at least 1s: whole seconds are judged",
        ));
    }
    Ok(v)
}

/// `groups:`, checked as a whole where it is read (shares adding up, names unique, at most
/// [`super::groups::MAX_GROUPS`]), so the message points at it.
fn groups<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<super::groups::GroupSpec>>, D::Error> {
    let g = Option::<Vec<super::groups::GroupSpec>>::deserialize(d)?;
    if let Some(g) = &g {
        super::groups::check_groups(g).map_err(serde::de::Error::custom)?;
    }
    Ok(g)
}

/// `compare: { max_regress: { rtt.p99: 10%, loss.downstream: +0.5pp } }`: how much worse
/// than a base run each metric may get before `tickswarm compare` fails. The same syntax as
/// `--max-regress METRIC=LIMIT`; the limits are checked by `tickswarm validate` and
/// `tickswarm compare` (the parser lives with the comparison, in the report layer).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct CompareSection {
    /// Metric name to limit, in file order.
    pub max_regress: std::collections::BTreeMap<String, String>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Population {
    pub stages: Vec<Stage>,
    /// At most this many new bots per second (default: no limit beyond the ramps).
    #[serde(default, deserialize_with = "spawn_rate")]
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

/// What a scenario key takes, in words, where its type alone does not say it (a unit, a
/// range): the message for a value of the wrong type names it ([`super::yaml_error`]).
pub(super) fn allowed(key: &str) -> Option<&'static str> {
    Some(match key {
        "input_rate" => INPUT_RATE,
        "spawn_rate" => SPAWN_RATE,
        "ramp_to" => "a whole number of bots (0 or more), e.g. 100",
        "seed" => "a whole number (0 or more), e.g. 42",
        _ => return None,
    })
}

/// What `population.spawn_rate` takes.
const SPAWN_RATE: &str = "a number of bots per second above 0, e.g. 50";

/// `population.spawn_rate`: a positive, finite number of bots per second.
fn spawn_rate<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let v = Option::<f64>::deserialize(d)?;
    match v {
        Some(r) if !(r > 0.0 && r.is_finite()) => Err(serde::de::Error::custom(format!(
            "spawn_rate must be a positive number of bots per second, got {r}"
        ))),
        v => Ok(v),
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct OutputSection {
    /// Output folder; default `reports/<name>-<UTC timestamp>/`.
    pub dir: Option<String>,
    /// Also write JUnit XML (for CI test tabs).
    pub junit: Option<bool>,
}

/// A number of bytes as a scenario writes it: `49152`, `48KiB`, `1 MiB`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum ByteCount {
    Bytes(u64),
    Text(String),
}

impl ByteCount {
    /// The count in bytes, or what is wrong with it.
    pub fn bytes(&self) -> Result<u64, String> {
        match self {
            ByteCount::Bytes(n) => Ok(*n),
            ByteCount::Text(t) => {
                let t = t.trim();
                let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
                let (num, unit) = t.split_at(split);
                let n: u64 = num
                    .parse()
                    .map_err(|_| format!("`{t}` is not a byte count (e.g. 49152, 48KiB, 1MiB)"))?;
                let mul = match unit.trim() {
                    "" | "B" => 1,
                    "KiB" => 1024,
                    "MiB" => 1024 * 1024,
                    other => {
                        return Err(format!(
                            "`{t}`: unit `{other}` (use B, KiB or MiB: binary units, as the kernel counts)"
                        ))
                    }
                };
                n.checked_mul(mul)
                    .ok_or_else(|| format!("`{t}` is too large"))
            }
        }
    }
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
    /// Kernel buffer each bot socket asks for, each way (`SO_RCVBUF` and `SO_SNDBUF`): bytes,
    /// or a number with `KiB`/`MiB`. Default: what the protocol's server can send in a burst
    /// (its largest datagram × a count; times `bots_per_socket` for a shared ENet host).
    /// `tickswarm validate` prints the kernel memory this commits.
    pub socket_buffer: Option<ByteCount>,
    /// ENet (city): keep ENet's unreliable-packet throttle for the traffic *to* the bots
    /// (default true, as every ENet client has it). ENet lets the receiving side set how its
    /// peer throttles: false makes each bot tell the server, through ENet's throttle
    /// configuration, never to drop unreliable packets for it when its RTT rises.
    pub enet_throttle: Option<bool>,
    /// Wake a worker at most once per this long for its bots' timers, on a grid from the
    /// run's start: bots due within one step are served together, so their datagrams leave
    /// in one batch (one io_uring submission) and the worker wakes once instead of once per
    /// bot. Each wake-up costs a timer re-arm, an epoll round and a read; at thousands of
    /// bots per worker those dominate. A step adds at most its length to send lateness
    /// (shown in `send_lateness_us`, which measures it). Default 0 (off): every bot on its
    /// own instant.
    pub timer_coalesce: Option<crate::duration::Dur>,
    /// Local addresses the bots' sockets bind to: addresses and CIDR ranges of the target's
    /// family, bot `i` on the pool's `i % len`-th address (see [`super::SourcePool`]). Default:
    /// the wildcard address (the kernel picks one per route).
    pub source_addresses: Option<super::SourcePool>,
}
