//! From a parsed scenario (plus command-line overrides) to what the engine runs.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::bot::{InputMode, PatternSpec, Target};
use super::file::{ScenarioFile, Stage};
use super::sockets::{self, SocketMemory};
use super::spawn::{mix_seed, SpawnEvent, SpawnKind, StopKind, MAX_BOTS};
use super::threshold::Threshold;
use super::{ProtocolSection, ScenarioError, ServerSection};
use crate::duration::format_duration;
use crate::protocol::{BotParams, InputPattern, Keys, TransportNeeds};

/// Command-line values that win over the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub target: Option<String>,
    pub bots: Option<u64>,
    pub duration: Option<Duration>,
    pub out: Option<PathBuf>,
    pub seed: Option<u64>,
    pub workers: Option<usize>,
    /// Run only this slice of the population (one of several load machines).
    pub shard: Option<Shard>,
    /// `--source-addresses`: replaces `engine.source_addresses`.
    pub source_addresses: Option<super::SourcePool>,
}

/// `--shard I/N`: this machine runs the bots whose index `i` has `i % N == I`. Every bot keeps
/// its index, seed, target and start time from the unsharded run, so the N shards together
/// are exactly one run, and each shard's ramp has the whole run's shape. Its grid phase too,
/// except under the default timer steps, whose phase steps follow the shard's own bots per
/// worker ([`super::TimerStep::default_for`]), and for ENet bots sharing a host, whose phase
/// is their host's (`Plan::phase_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// `I/N` with `0 <= I < N`.
    ///
    /// ```
    /// use tickswarm::scenario::Shard;
    /// assert_eq!(Shard::parse("2/3"), Ok(Shard { index: 2, count: 3 }));
    /// assert!(Shard::parse("3/3").is_err());
    /// assert!(Shard::parse("1").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<Shard, String> {
        let bad = || format!("shard `{s}`: write I/N with 0 <= I < N, e.g. 0/3");
        let (i, n) = s.trim().split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Whether bot `index` belongs to this shard.
    pub fn has(self, index: u32) -> bool {
        index % self.count == self.index
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[derive(Debug, Clone)]
pub enum Targets {
    Embedded,
    Addrs(Vec<SocketAddr>),
}

/// One population stage as the progress line names it: when it ends (seconds from the
/// start) and what it does ("ramp to 100", "hold 100").
#[derive(Debug, Clone, PartialEq)]
pub struct StageSpan {
    pub end_s: f64,
    pub label: String,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub name: String,
    pub file: PathBuf,
    pub protocol: ProtocolSection,
    pub targets: Targets,
    /// As written (or overridden), for reports.
    pub target_text: String,
    pub server: ServerSection,
    /// Bots that start within the run's duration.
    pub planned: u64,
    pub spawns: Vec<SpawnEvent>,
    /// The population stages (with `--bots` applied), for the progress line.
    pub stages: Vec<StageSpan>,
    pub duration: Duration,
    pub seed: u64,
    /// Behaviour shared by every bot; `for_bot` fills in index, phase and seed.
    pub bot_template: BotParams,
    pub thresholds: Vec<Threshold>,
    pub out_dir: Option<PathBuf>,
    pub junit: bool,
    pub workers: usize,
    /// Bots sharing one socket where the transport multiplexes (ENet); 1 for raw UDP.
    pub bots_per_socket: usize,
    /// ENet: whether the bots leave ENet's unreliable throttle on (see `EngineSection`).
    pub enet_throttle: bool,
    /// `engine.timer_coalesce`, or the default for this population: the workers' timer step
    /// (`None`: every deadline on its own). See [`super::timer_step`].
    pub timer_step: Option<super::TimerStep>,
    /// `timer_step` is the default for a population this large, not the scenario's.
    pub timer_step_default: bool,
    /// `engine.socket_buffer`: bytes each bot socket asks for each way, replacing the size
    /// derived from the protocol's burst ([`Plan::bot_socket_buffer`]).
    pub socket_buffer: Option<usize>,
    /// The slice of the population this process runs, if sharded.
    pub shard: Option<Shard>,
    /// `engine.source_addresses`: bot `i` binds to `pool.for_bot(i)`; `None`, the wildcard.
    pub source_pool: Option<super::SourcePool>,
    /// `compare.max_regress` as written (checked by the CLI against the compare parser).
    pub compare_limits: std::collections::BTreeMap<String, String>,
    /// `unmeasurable_thresholds:`: fail (default) or skip a threshold the run cannot measure.
    pub unmeasurable: crate::metrics::threshold::Unmeasurable,
    /// `interrupted:`: whether a run cut short by a signal fails (default) or passes on its
    /// thresholds.
    pub interrupted: crate::metrics::threshold::Interrupted,
    /// `abort_on_fail:`: stop the run when a threshold fails this long, second after second.
    pub abort_on_fail: Option<Duration>,
    /// `network:`, when it changes anything: the simulated link of every bot.
    pub network: Option<crate::netsim::NetworkConditions>,
    /// `server_metrics:`: the target's Prometheus endpoints to scrape during the run.
    pub server_metrics: Vec<super::server_metrics::ServerMetricsEndpoint>,
    /// The population's groups (`groups:`), in file order; one implicit group without it.
    pub groups: Vec<GroupPlan>,
    /// The group of each bot by index (empty: every bot is in group 0).
    pub bot_groups: Vec<u16>,
    /// Each bot's place among its group's bots, by index (for the group's source pool).
    pub bot_ranks: Vec<u32>,
}

/// One group of the population as the engine runs it.
#[derive(Debug, Clone)]
pub struct GroupPlan {
    pub name: String,
    /// The one group of a scenario without `groups:` (no `groups` block in summary.json).
    pub implicit: bool,
    /// As written (`None` for the implicit group).
    pub size: Option<super::GroupSize>,
    /// The group's behaviour; `Plan::bot_params` fills in index, phase and seed.
    pub template: BotParams,
    /// The group's simulated link (its own `network:` or the scenario's), when it changes
    /// anything.
    pub network: Option<crate::netsim::NetworkConditions>,
    /// The group's own servers (`None`: the scenario's).
    pub targets: Option<Vec<SocketAddr>>,
    /// The group's `target:` as written.
    pub target_text: Option<String>,
    /// The group's own source addresses (`None`: the scenario's pool, if any).
    pub source_pool: Option<super::SourcePool>,
    /// Sessions of this group that start within the run (and within this shard).
    pub planned: u64,
    /// What its `lifecycle:` schedules within the run (and this shard), if it has one.
    pub lifecycle: Option<super::lifecycle::LifecyclePlan>,
}

fn invalid(path: &Path, message: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// `host:port` or `host:first-last` (a fleet of servers on consecutive ports) to `host:port`
/// strings. A target without a port is refused, naming the protocol's default port: a port
/// filled in silently hid the one the user meant (a staging server on another port gets no
/// bots and the run says "unreachable" about the wrong address).
pub fn expand_port_range(t: &str, default_port: u16) -> Result<Vec<String>, String> {
    // An IPv6 address without brackets (`::1`, `fe80::1:7777`) cannot say where its port is.
    let unbracketed_v6 = t.matches(':').count() > 1 && !t.starts_with('[');
    let Some((host, ports)) = t.rsplit_once(':').filter(|(h, p)| {
        !unbracketed_v6
            && !h.is_empty()
            && !p.is_empty()
            && p.chars().all(|c| c.is_ascii_digit() || c == '-')
    }) else {
        let host = if t.contains(':') && !t.starts_with('[') {
            format!("[{t}]")
        } else {
            t.to_string()
        };
        return Err(format!(
            "target `{t}` has no port; write `{host}:{default_port}` for the protocol's default \
             port, or `{host}:FIRST-LAST` for servers on consecutive ports"
        ));
    };
    let bad = || format!("target `{t}`: the port must be a number or a range like 7777-7786");
    if let Some(m) = super::bot::port_zero(t) {
        return Err(m);
    }
    match ports.split_once('-') {
        None => {
            let p: u16 = ports.parse().map_err(|_| bad())?;
            Ok(vec![format!("{host}:{p}")])
        }
        Some((a, b)) => {
            let (a, b): (u16, u16) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
            if a > b || b - a > 10_000 {
                return Err(bad());
            }
            Ok((a..=b).map(|p| format!("{host}:{p}")).collect())
        }
    }
}

impl Plan {
    pub fn build(file: ScenarioFile, path: &Path, ov: &Overrides) -> Result<Plan, ScenarioError> {
        let protocol = file.protocol.clone();
        let info = protocol.name().info();
        protocol.validate(&file.server).map_err(|m| {
            if m.starts_with("server") {
                invalid(path, m)
            } else {
                invalid(path, format!("protocol.{}: {m}", protocol.name()))
            }
        })?;
        // Target.
        let target_text = match (&ov.target, &file.target) {
            (Some(t), _) => t.clone(),
            (None, Target::Embedded) => "embedded".into(),
            (None, Target::One(t)) => t.clone(),
            (None, Target::Many(v)) => v.join(","),
        };
        let targets =
            resolve_targets(&target_text, info.default_port).map_err(|m| invalid(path, m))?;
        if matches!(targets, Targets::Embedded) {
            // Refused now, not when the run starts its server.
            protocol.transport().check_servable().map_err(|why| {
                invalid(
                    path,
                    format!(
                        "target embedded: the {} reference server cannot run dialect `{}`: {why}",
                        protocol.name(),
                        protocol.dialect_name()
                    ),
                )
            })?;
        }

        // Population.
        let stages = &file.population.stages;
        if stages.is_empty() {
            return Err(invalid(
                path,
                "population.stages is empty: add e.g. `- ramp_to: 100\n    over: 5s`",
            ));
        }
        let file_peak = stages
            .iter()
            .filter_map(|s| match s {
                Stage::Ramp { ramp_to, .. } => Some(*ramp_to),
                Stage::Hold { .. } => None,
            })
            .max()
            .unwrap_or(0);
        let arrivals = file
            .groups
            .iter()
            .flatten()
            .any(|g| g.size == super::GroupSize::Arrivals);
        if file_peak == 0 && !arrivals {
            return Err(invalid(
                path,
                "population never rises above 0 bots: add a `ramp_to` stage",
            ));
        }
        // Checked before anything is sized by it: every bot is a socket (or an ENet peer) and
        // a schedule entry.
        if let Some(b) = ov.bots.filter(|&b| b > MAX_BOTS) {
            return Err(invalid(
                path,
                format!(
                    "--bots {b}: one load machine runs at most {MAX_BOTS} bots; \
                     shard the population over several machines and `tickswarm merge` them"
                ),
            ));
        }
        if ov.bots.is_none() && file_peak > MAX_BOTS {
            return Err(invalid(
                path,
                format!(
                    "population: ramp_to {file_peak} is more than the {MAX_BOTS} bots one load \
                     machine runs; shard the population and `tickswarm merge` the runs"
                ),
            ));
        }
        let scale = |n: u64| match ov.bots {
            Some(b) => ((n as f64) * (b as f64) / (file_peak as f64)).round() as u64,
            None => n,
        };
        if ov.bots == Some(0) {
            return Err(invalid(path, "--bots must be at least 1"));
        }
        let stage_total: Duration = stages
            .iter()
            .map(|s| match s {
                Stage::Ramp { over, .. } => over.0,
                Stage::Hold { hold } => hold.0,
            })
            .sum();
        let duration = ov
            .duration
            .or(file.duration.map(|d| d.0))
            .unwrap_or(stage_total);
        if duration.is_zero() {
            return Err(invalid(
                path,
                "the run lasts 0s: set `duration` or give the stages a length",
            ));
        }
        let stage_spans = {
            let (mut end, mut level) = (0.0, 0);
            stages
                .iter()
                .map(|st| {
                    let label = match st {
                        Stage::Ramp { ramp_to, over } => {
                            end += over.0.as_secs_f64();
                            level = scale(*ramp_to);
                            format!("ramp to {level}")
                        }
                        Stage::Hold { hold } => {
                            end += hold.0.as_secs_f64();
                            format!("hold {level}")
                        }
                    };
                    StageSpan { end_s: end, label }
                })
                .collect()
        };
        let mut spawns = spawn_schedule(stages, &scale).map_err(|m| invalid(path, m))?;
        // Every bot the stages ramp, before the run's length and the shard cut it: the
        // groups divide this population, so a bot's group is the same in every shard.
        let population = spawns.len() as u64;
        if let Some(rate) = file.population.spawn_rate {
            if rate <= 0.0 || !rate.is_finite() {
                return Err(invalid(
                    path,
                    "population.spawn_rate must be a positive number of bots per second",
                ));
            }
            let gap = Duration::try_from_secs_f64(1.0 / rate)
                .ok()
                .filter(|g| *g <= duration)
                .ok_or_else(|| {
                    invalid(
                        path,
                        format!(
                            "population.spawn_rate {rate:e}: less than one bot would start \
                             within the run ({})",
                            format_duration(duration)
                        ),
                    )
                })?;
            let mut last: Option<Duration> = None;
            for s in &mut spawns {
                if let Some(l) = last {
                    s.start = s.start.max(l + gap);
                }
                if let Some(stop) = s.stop {
                    s.stop = Some(stop.max(s.start));
                }
                last = Some(s.start);
            }
        }
        // Groups and their lifecycles, on the whole population before the run's length and
        // the shard cut it (so every shard agrees on each bot).
        let seed = ov.seed.or(file.seed).unwrap_or(1);
        let mut bot_groups: Vec<u16> = Vec::new();
        let mut bot_ranks: Vec<u32> = Vec::new();
        let mut dropped_arrivals: Vec<(u16, u32)> = Vec::new();
        if let Some(specs) = &file.groups {
            let sizes = super::groups::sizes(specs, population)
                .map_err(|m| invalid(path, format!("groups: {m}")))?;
            bot_groups = super::groups::assign(&sizes, seed);
            let mut next_rank = vec![0u32; specs.len()];
            bot_ranks = bot_groups
                .iter()
                .map(|g| {
                    let r = next_rank[usize::from(*g)];
                    next_rank[usize::from(*g)] += 1;
                    r
                })
                .collect();
            for ev in &mut spawns {
                ev.group = bot_groups.get(ev.index as usize).copied().unwrap_or(0);
            }
            let lifecycles: Vec<Option<&super::lifecycle::Lifecycle>> =
                specs.iter().map(|g| g.lifecycle.as_ref()).collect();
            if lifecycles.iter().any(Option::is_some) {
                dropped_arrivals = super::lifecycle::expand(
                    &mut spawns,
                    &lifecycles,
                    &mut bot_groups,
                    &mut bot_ranks,
                    seed,
                    duration,
                )
                .map_err(|m| invalid(path, m))?;
            }
        }
        spawns.retain(|s| s.start < duration);
        if let Some(shard) = ov.shard {
            dropped_arrivals.retain(|(_, i)| shard.has(*i));
        }
        if spawns.is_empty() {
            return Err(invalid(path, "no bot starts within the run's duration"));
        }
        if let Some(shard) = ov.shard {
            let all = spawns.len();
            spawns.retain(|s| shard.has(s.index));
            if spawns.is_empty() {
                return Err(invalid(
                    path,
                    format!(
                        "shard {shard} has no bots: the run starts {all} bots, fewer than the \
                         {} shards",
                        shard.count
                    ),
                ));
            }
        }
        let planned = spawns.len() as u64;

        // A threshold on a figure the protocol cannot take is not refused here: `validate`
        // warns, and the run fails it saying why, or skips it (`unmeasurable_thresholds`).

        // Behaviour.
        let scenario_targets: std::sync::Arc<[SocketAddr]> = match &targets {
            Targets::Addrs(a) => std::sync::Arc::from(a.as_slice()),
            // Known once the engine has started them.
            Targets::Embedded => std::sync::Arc::from(Vec::new()),
        };
        let bot_template = template(&file.behaviour, &protocol, seed, "behaviour")
            .map_err(|m| invalid(path, m))?;
        let bot_template = BotParams {
            targets: scenario_targets.clone(),
            ..bot_template
        };

        let source_pool = ov
            .source_addresses
            .clone()
            .or(file.engine.source_addresses.clone());
        if let Some(pool) = &source_pool {
            check_source_pool(pool, &targets, &protocol).map_err(|m| invalid(path, m))?;
        }
        let any_network =
            file.network.is_some() || file.groups.iter().flatten().any(|g| g.network.is_some());
        if any_network {
            use crate::protocol::TransportNeeds;
            match protocol.transport() {
                TransportNeeds::Udp | TransportNeeds::Enet(_) => {}
                other => {
                    return Err(invalid(
                        path,
                        format!(
                            "network: is applied between a transport and its socket, which \
                             tickswarm owns for raw UDP and ENet; the {} transport of this \
                             protocol does its own I/O. Leave network: out, or simulate the \
                             link outside (tc netem)",
                            other.name()
                        ),
                    ))
                }
            }
        }

        for e in &file.server_metrics {
            e.check().map_err(|m| invalid(path, m))?;
            if e.is_embedded() && !matches!(targets, Targets::Embedded) {
                return Err(invalid(
                    path,
                    "server_metrics: `embedded` scrapes the embedded reference server, and the \
                     target is a real server: give its metrics URL instead",
                ));
            }
        }
        // Groups: their behaviour, link, servers and sources, and which bots they have.
        let network = file
            .network
            .clone()
            .filter(|n| n != &crate::netsim::NetworkConditions::default());
        let (groups, bot_groups, bot_ranks) = match &file.groups {
            None => (
                vec![GroupPlan {
                    name: super::groups::IMPLICIT.into(),
                    implicit: true,
                    size: None,
                    template: bot_template.clone(),
                    network: network.clone(),
                    targets: None,
                    target_text: None,
                    source_pool: None,
                    planned,
                    lifecycle: None,
                }],
                Vec::new(),
                Vec::new(),
            ),
            Some(specs) => {
                let mut groups = Vec::with_capacity(specs.len());
                for g in specs {
                    let at = |m: String| invalid(path, format!("group `{}`: {m}", g.name));
                    let behaviour = g.behaviour.apply(&file.behaviour);
                    let mut t = template(&behaviour, &protocol, seed, "behaviour").map_err(at)?;
                    let (own, text) = match &g.target {
                        None | Some(Target::Embedded) => (None, None),
                        Some(t) => {
                            let text = match t {
                                Target::One(s) => s.clone(),
                                Target::Many(v) => v.join(","),
                                Target::Embedded => String::new(),
                            };
                            let Targets::Addrs(a) =
                                resolve_targets(&text, info.default_port).map_err(at)?
                            else {
                                return Err(at(
                                    "target: embedded is the scenario's server; leave the group's target out to use it"
                                        .into(),
                                ));
                            };
                            (Some(a), Some(text))
                        }
                    };
                    t.targets = match &own {
                        Some(a) => std::sync::Arc::from(a.as_slice()),
                        None => scenario_targets.clone(),
                    };
                    let group_targets = match &own {
                        Some(a) => Targets::Addrs(a.clone()),
                        None => targets.clone(),
                    };
                    if let Some(pool) = &g.source_addresses {
                        check_source_pool(pool, &group_targets, &protocol).map_err(|m| {
                            at(m.replace("engine.source_addresses", "source_addresses"))
                        })?;
                    } else if let (Some(pool), Some(_)) = (&source_pool, &own) {
                        check_source_pool(pool, &group_targets, &protocol).map_err(at)?;
                    }
                    groups.push(GroupPlan {
                        name: g.name.clone(),
                        implicit: false,
                        size: Some(g.size),
                        template: t,
                        network: g
                            .network
                            .clone()
                            .or_else(|| network.clone())
                            .filter(|n| n != &crate::netsim::NetworkConditions::default()),
                        targets: own,
                        target_text: text,
                        source_pool: g.source_addresses.clone(),
                        planned: 0,
                        lifecycle: g
                            .lifecycle
                            .as_ref()
                            .map(|_| super::lifecycle::LifecyclePlan::default()),
                    });
                }
                for ev in &spawns {
                    let Some(g) = groups.get_mut(usize::from(ev.group)) else {
                        continue;
                    };
                    g.planned += 1;
                    if let Some(l) = &mut g.lifecycle {
                        match ev.kind {
                            SpawnKind::Arrival => l.arrivals += 1,
                            SpawnKind::Replacement => l.replacements += 1,
                            SpawnKind::Stage | SpawnKind::Reconnect => {}
                        }
                        // Stops past the run's end never happen.
                        if ev.stop.is_some_and(|s| s < duration) {
                            match ev.stop_kind {
                                StopKind::SessionEnd => l.session_ends += 1,
                                StopKind::Drop => l.storm_drops += 1,
                                StopKind::End => {}
                            }
                        }
                    }
                }
                for (g, _) in &dropped_arrivals {
                    if let Some(l) = groups
                        .get_mut(usize::from(*g))
                        .and_then(|g| g.lifecycle.as_mut())
                    {
                        l.arrivals_dropped += 1;
                    }
                }
                (
                    groups,
                    std::mem::take(&mut bot_groups),
                    std::mem::take(&mut bot_ranks),
                )
            }
        };

        let socket_buffer = match &file.engine.socket_buffer {
            None => None,
            Some(b) => {
                let n = b
                    .bytes()
                    .map_err(|m| invalid(path, format!("engine.socket_buffer: {m}")))?;
                let range = sockets::SOCKET_BUFFER_RANGE;
                match usize::try_from(n).ok().filter(|n| range.contains(n)) {
                    Some(n) => Some(n),
                    None => {
                        return Err(invalid(
                            path,
                            format!(
                                "engine.socket_buffer: {n} bytes is outside {} B to {} MiB",
                                range.start(),
                                range.end() / (1024 * 1024)
                            ),
                        ))
                    }
                }
            }
        };
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let workers = ov
            .workers
            .or(file.engine.workers)
            .unwrap_or(cores)
            .clamp(1, planned.max(1) as usize);
        let simulated = groups.iter().any(|g| g.network.is_some());
        // The step divides the input period of the most bots (their slots then fall on it).
        let grid_period = groups
            .iter()
            .filter(|g| g.planned > 0)
            .max_by_key(|g| g.planned)
            .map_or(bot_template.input_period(), |g| g.template.input_period());
        let bots_per_worker = planned / workers.max(1) as u64;
        let (timer_step, timer_step_default) = match file.engine.timer_coalesce {
            Some(d) => (super::TimerStep::nearest(d.0, grid_period), false),
            None => {
                let step = super::TimerStep::default_for(bots_per_worker, grid_period, simulated);
                (step, step.is_some())
            }
        };

        Ok(Plan {
            name: file.name.clone(),
            file: path.to_path_buf(),
            protocol,
            targets,
            target_text,
            server: file.server.clone(),
            planned,
            spawns,
            stages: stage_spans,
            duration,
            seed,
            bot_template,
            thresholds: {
                let mut t = file.thresholds.clone();
                if file.default_checks {
                    t.extend(crate::metrics::threshold::default_checks(&file.thresholds));
                }
                t
            },
            out_dir: ov
                .out
                .clone()
                .or(file.output.dir.as_ref().map(PathBuf::from)),
            junit: file.output.junit.unwrap_or(true),
            workers,
            bots_per_socket: file.engine.bots_per_socket.unwrap_or(1).max(1),
            enet_throttle: file.engine.enet_throttle.unwrap_or(true),
            timer_step,
            timer_step_default,
            socket_buffer,
            shard: ov.shard,
            network,
            groups,
            bot_groups,
            bot_ranks,
            source_pool,
            compare_limits: file.compare.max_regress.clone(),
            unmeasurable: file.unmeasurable_thresholds,
            interrupted: file.interrupted,
            abort_on_fail: file.abort_on_fail.map(|d| d.0),
            server_metrics: file.server_metrics.clone(),
        })
    }

    /// The group (index into [`Plan::groups`]) bot `index` is in.
    pub fn group_of(&self, index: u32) -> usize {
        self.bot_groups
            .get(index as usize)
            .map_or(0, |g| usize::from(*g))
    }

    /// Bot `index`'s source address: its group's pool, else the scenario's, if any.
    pub fn source_of(&self, index: u32) -> Option<std::net::IpAddr> {
        let own = self
            .groups
            .get(self.group_of(index))
            .and_then(|g| g.source_pool.as_ref());
        match own {
            Some(pool) => {
                let rank = self.bot_ranks.get(index as usize).copied().unwrap_or(index);
                Some(pool.for_bot(rank))
            }
            None => self.source_pool.as_ref().map(|p| p.for_bot(index)),
        }
    }

    /// The parameters of bot `index`: its group's behaviour, its own seed and its place on
    /// the input grid.
    pub fn bot_params(&self, index: u32) -> BotParams {
        let mut p = self
            .groups
            .get(self.group_of(index))
            .map_or_else(|| self.bot_template.clone(), |g| g.template.clone());
        p.index = index;
        p.seed = mix_seed(self.seed, u64::from(index));
        if let Some(period) = p.input_period() {
            // Spread bots evenly across one input period: on the timer's steps when it divides
            // this period, so a step's bots leave together at their own slots.
            let frac = (self.phase_key(index) as f64 * 0.618_033_988_749_895).fract();
            p.phase_offset = super::TimerStep::phase(self.timer_step, period, frac);
        }
        p
    }

    /// What spreads bot `index` over the input period: the bot itself, or, where bots
    /// share an ENet host (`bots_per_socket` > 1) and the workers serve timers in steps, the
    /// host it lands in. A host's flush walks every one of its peers whatever is due
    /// (rusty_enet's `enet_host_flush`), so a step that finds a few due bots in each of many
    /// hosts walks every peer of every host for them; with a host's bots on one step, a
    /// flush finds them all due (docs/measurements/generator.md has the figures). Bots are
    /// dealt round-robin over the workers, their targets round-robin by index, and a worker
    /// fills a host of one target before it opens the next, so in a plain ramp the bots of
    /// one host fall within `bots_per_socket × workers × targets` consecutive indices (times
    /// the shard count in a shard): one key, or two where a host straddles a boundary.
    /// Where groups, source addresses or reconnections split hosts otherwise, a host's bots
    /// sit on a few steps instead of one.
    fn phase_key(&self, index: u32) -> u64 {
        let shared = matches!(self.protocol.transport(), TransportNeeds::Enet(_))
            && self.bots_per_socket > 1
            && self.timer_step.is_some();
        if !shared {
            return u64::from(index);
        }
        let targets = match &self.targets {
            Targets::Addrs(a) => a.len(),
            Targets::Embedded => self.embedded_instances(),
        };
        // A shard runs every `count`-th index: its hosts span as many more.
        let shards = self.shard.map_or(1, |s| s.count as usize);
        let span = self.bots_per_socket * self.workers.max(1) * targets.max(1) * shards.max(1);
        u64::from(index) / span as u64
    }

    /// The groups' lines of `validate`: name, bots, size as written, and what is their own.
    fn describe_groups(&self) -> String {
        use super::GroupSize;
        if self.groups.iter().all(|g| g.implicit) {
            return String::new();
        }
        let mut s = format!(
            "groups     {} (shares of the population left after the fixed counts, rounded to \
             whole bots by the largest remainder; bots shuffled into groups by the seed)\n",
            self.groups.len()
        );
        let width = self.groups.iter().map(|g| g.name.len()).max().unwrap_or(0);
        for g in &self.groups {
            let size = match g.size {
                Some(GroupSize::Share(x)) => format!("share {}%", (x * 1e4).round() / 1e2),
                Some(GroupSize::Count(n)) => format!("count {n}"),
                Some(GroupSize::Arrivals) => "arrival rate".into(),
                None => String::new(),
            };
            let mut own = Vec::new();
            let t = &g.template;
            if self.protocol.sends_input() {
                own.push(format!("input {} Hz {}", t.input_rate_hz, t.pattern));
            }
            own.push(match &g.network {
                Some(n) => format!("network {n}"),
                None => format!("network {}", crate::netsim::REAL_LINK),
            });
            if let Some(text) = &g.target_text {
                own.push(format!("target {text}"));
            }
            if let Some(pool) = &g.source_pool {
                own.push(format!("sources {}", pool.text()));
            }
            if let Some(l) = &g.lifecycle {
                own.push(format!(
                    "lifecycle: {} arrivals ({} dropped at max_bots), {} session ends, {} \
                     replacements, {} dropped and reconnected by the storm",
                    l.arrivals, l.arrivals_dropped, l.session_ends, l.replacements, l.storm_drops
                ));
            }
            s.push_str(&format!(
                "group      {:width$}  {:>6} {} ({size}); {}\n",
                g.name,
                g.planned,
                // With a lifecycle, a bot may have several sessions (reconnected, replaced).
                if g.lifecycle.is_some() {
                    "sessions"
                } else {
                    "bots"
                },
                own.join("; ")
            ));
        }
        s
    }

    /// What `validate` prints.
    pub fn describe(&self) -> String {
        self.describe_with(None)
    }

    /// [`Plan::describe`] with what the engine found on this machine for the bots' sends
    /// (`send_path`, from the CLI: the scenario layer does not reach into the engine).
    pub fn describe_with(&self, send_path: Option<&str>) -> String {
        let info = self.protocol.name().info();
        let mut s = String::new();
        s.push_str(&format!(
            "scenario   {} ({})\n",
            self.name,
            self.file.display()
        ));
        s.push_str(&format!(
            "protocol   {} over {}, dialect {}\n",
            info.name,
            self.protocol.transport().describe(),
            self.protocol.dialect_name()
        ));
        s.push_str(&format!("target     {}\n", self.target_text));
        s.push_str(&format!(
            "bots       {} over {} ({} workers)\n",
            self.planned,
            format_duration(self.duration),
            self.workers
        ));
        if let Some(path) = send_path {
            s.push_str(&format!("send path  {path}\n"));
        }
        if let Some(step) = self.timer_step {
            s.push_str(&format!(
                "timers     served in steps of {} from the run's start (engine.timer_coalesce{}): \
                 {}\n",
                format_duration(step.duration()),
                if self.timer_step_default {
                    ", the default for this many bots per worker"
                } else {
                    ""
                },
                if step.phases < step.per_period {
                    format!(
                        "bots' inputs leave at their slots on {} of its {} steps per input \
                         period, a step's bots together; other timers up to a step late",
                        step.phases, step.per_period
                    )
                } else if step.period != step.duration() {
                    format!(
                        "{} per input period; bots' inputs leave at their slots, a step's \
                         bots together; other timers up to a step late",
                        step.per_period
                    )
                } else {
                    "bots due within a step share a wake-up; other timers up to a step late"
                        .to_string()
                }
            ));
        }
        s.push_str(&self.describe_groups());
        if let Some(shard) = self.shard {
            s.push_str(&format!(
                "shard      {shard}: bots whose index % {} == {} (indices and seeds as in the \
                 whole run)\n",
                shard.count, shard.index
            ));
        }
        if let (Some(first), Some(last)) = (self.spawns.first(), self.spawns.last()) {
            s.push_str(&format!(
                "ramp       first bot at {}, last at {}\n",
                format_duration(first.start),
                format_duration(last.start)
            ));
        }
        let b = &self.bot_template;
        if self.protocol.sends_input() {
            s.push_str(&format!(
                "input      {} Hz{}, pattern {}\n",
                b.input_rate_hz,
                match (b.input_on_change, self.protocol.input_on_change_applies()) {
                    (true, true) => " (sent on change)",
                    (true, false) => {
                        " (input_mode on_change does not apply to this protocol: every slot is sent)"
                    }
                    (false, _) => "",
                },
                b.pattern
            ));
        } else {
            s.push_str(
                "input      none: this dialect's bots send no player input (behaviour.input_rate \
                 and pattern are not used)\n",
            );
        }
        if self.protocol.measures_rtt() {
            s.push_str(&format!(
                "pings      every {}; handshake retry {} timeout {}\n",
                format_duration(b.ping_interval),
                format_duration(b.handshake_retry),
                format_duration(b.handshake_timeout)
            ));
        } else {
            s.push_str(&format!(
                "pings      not answered by this dialect's server: RTT, where measured, is the \
                 transport's (ENet's acknowledgements); handshake retry {} timeout {}\n",
                format_duration(b.handshake_retry),
                format_duration(b.handshake_timeout)
            ));
        }
        if let Some(pool) = &self.source_pool {
            let (most, fewest) = pool.share(self.planned);
            s.push_str(&format!(
                "sources    {} address{} (first {}, last {}{}) from {}; {}\n",
                pool.len(),
                if pool.len() == 1 { "" } else { "es" },
                pool.first(),
                pool.last(),
                if pool.interleaved() {
                    format!(
                        ", consecutive bots on consecutive {}",
                        if pool.is_ipv6() { "/64s" } else { "/24s" }
                    )
                } else {
                    String::new()
                },
                pool.text(),
                if most == fewest {
                    format!("{most} bots each")
                } else {
                    format!("{fewest} to {most} bots each")
                }
            ));
        }
        s.push_str(&self.describe_sockets());
        s.push_str(&format!("seed       {}\n", self.seed));
        if self.thresholds.is_empty() {
            s.push_str("thresholds none (verdict is always pass)\n");
        }
        for t in &self.thresholds {
            let default = if t.default { " (default check)" } else { "" };
            s.push_str(&format!("threshold  {}  [{}]{default}\n", t.text, t.path()));
        }
        s
    }
}

/// `embedded`, or `host:port` entries (with port ranges) separated by commas, resolved.
fn resolve_targets(text: &str, default_port: u16) -> Result<Targets, String> {
    if text == "embedded" {
        return Ok(Targets::Embedded);
    }
    let mut addrs = Vec::new();
    for t in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        for one in expand_port_range(t, default_port)? {
            let a = one
                .to_socket_addrs()
                .map_err(|e| format!("target `{t}` does not resolve: {e}"))?
                .next()
                .ok_or_else(|| format!("target `{t}` has no address"))?;
            addrs.push(a);
        }
    }
    if addrs.is_empty() {
        return Err("target is empty".into());
    }
    Ok(Targets::Addrs(addrs))
}

/// A script's or a replay's steps as keys and hold times; a script with no length is an error.
fn script_steps(
    steps: &[super::bot::ScriptStep],
    key: &str,
) -> Result<Vec<(Keys, Duration)>, String> {
    let mut out = Vec::with_capacity(steps.len());
    for s in steps {
        let keys = Keys::from_names(s.keys.iter().map(String::as_str))
            .map_err(|m| format!("{key}.pattern.steps: {m}"))?;
        out.push((keys, s.hold_for.0));
    }
    if out.iter().all(|(_, d)| d.is_zero()) {
        return Err(format!("{key}.pattern.steps: the script has no length"));
    }
    Ok(out)
}

/// A bot's parameters from a `behaviour:` (index, phase and targets filled in later).
/// `key` names the section in messages.
fn template(
    b: &super::Behaviour,
    protocol: &ProtocolSection,
    seed: u64,
    key: &str,
) -> Result<BotParams, String> {
    for (name, d) in [
        ("ping_interval", b.ping_interval.0),
        ("handshake_timeout", b.handshake_timeout.0),
        ("handshake_retry", b.handshake_retry.0),
        ("silence_timeout", b.silence_timeout.0),
    ] {
        if d.is_zero() {
            return Err(format!("{key}.{name} must be longer than 0"));
        }
    }
    if !(b.input_rate > 0.0 && b.input_rate <= 1000.0) {
        return Err(format!("{key}.input_rate must be between 0 and 1000 Hz"));
    }
    protocol.check_input_rate(b.input_rate)?;
    let pattern = match &b.pattern {
        PatternSpec::Idle => InputPattern::Idle,
        PatternSpec::RandomWalk { change_every } => InputPattern::RandomWalk {
            change_every: change_every.0,
        },
        PatternSpec::Circle { period } => InputPattern::Circle { period: period.0 },
        PatternSpec::Scripted { steps } => InputPattern::Scripted {
            steps: script_steps(steps, key)?,
        },
        PatternSpec::Replay { steps, .. } => InputPattern::Replay {
            steps: script_steps(steps, key)?,
        },
    };
    Ok(BotParams {
        index: 0,
        input_rate_hz: b.input_rate,
        input_on_change: b.input_mode == InputMode::OnChange,
        phase_offset: Duration::ZERO,
        input_epoch: None,
        pattern,
        ping_interval: b.ping_interval.0.max(Duration::from_millis(10)),
        handshake_retry: b.handshake_retry.0.max(Duration::from_millis(10)),
        handshake_timeout: b.handshake_timeout.0,
        server_silence_timeout: b.silence_timeout.0,
        seed,
        targets: std::sync::Arc::from(Vec::new()),
    })
}

/// A source pool must be of the targets' family, and the transport must be able to bind it.
fn check_source_pool(
    pool: &super::SourcePool,
    targets: &Targets,
    protocol: &ProtocolSection,
) -> Result<(), String> {
    if protocol.transport() == crate::protocol::registry::TransportNeeds::Gns {
        return Err(format!(
            "engine.source_addresses cannot be used with {} (transport gns): \
             GameNetworkingSockets opens its client sockets itself and has no setting for the \
             local address they bind, so the bots would not come from the pool",
            protocol.name()
        ));
    }
    let family = |v6: bool| if v6 { "IPv6" } else { "IPv4" };
    let embedded = [SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0))];
    let addrs: &[SocketAddr] = match targets {
        Targets::Addrs(a) => a,
        // The embedded server listens on 127.0.0.1.
        Targets::Embedded => &embedded,
    };
    if let Some(t) = addrs.iter().find(|t| t.is_ipv6() != pool.is_ipv6()) {
        let shown = if matches!(targets, Targets::Embedded) {
            "embedded (127.0.0.1)".to_string()
        } else {
            t.to_string()
        };
        return Err(format!(
            "engine.source_addresses is {} ({}) but target {shown} is {}: a socket sends to \
             its own family only",
            family(pool.is_ipv6()),
            pool.text(),
            family(t.is_ipv6())
        ));
    }
    Ok(())
}

/// Start (and stop) times per bot from piecewise-linear stages.
fn spawn_schedule(stages: &[Stage], scale: &dyn Fn(u64) -> u64) -> Result<Vec<SpawnEvent>, String> {
    let mut out: Vec<SpawnEvent> = Vec::new();
    let mut t0 = Duration::ZERO;
    let mut current: u64 = 0;
    let mut went_down = false;
    for stage in stages {
        match stage {
            Stage::Hold { hold } => t0 += hold.0,
            Stage::Ramp { ramp_to, over } => {
                let to = scale(*ramp_to);
                let over = over.0;
                if to > current {
                    if went_down {
                        return Err("ramping up again after a ramp down is not supported".into());
                    }
                    let span = (to - current) as f64;
                    for i in current..to {
                        let frac = (i + 1 - current) as f64 / span;
                        out.push(SpawnEvent {
                            index: u32::try_from(i).map_err(|_| "too many bots")?,
                            start: t0 + over.mul_f64(frac),
                            stop: None,
                            group: 0,
                            kind: SpawnKind::Stage,
                            stop_kind: StopKind::End,
                        });
                    }
                } else if to < current {
                    went_down = true;
                    let span = (current - to) as f64;
                    for i in to..current {
                        let frac = (current - i) as f64 / span;
                        if let Some(ev) = out.get_mut(i as usize) {
                            ev.stop = Some(t0 + over.mul_f64(frac));
                        }
                    }
                }
                current = to;
                t0 += over;
            }
        }
    }
    Ok(out)
}

/// The sockets the plan opens, counted as the engine opens them, and the kernel buffer they
/// may take ([`sockets`]).
impl Plan {
    /// Bytes each bot socket asks the kernel for, each way.
    pub fn bot_socket_buffer(&self) -> usize {
        let sharing = match self.protocol.transport() {
            TransportNeeds::Enet(_) => self.bots_per_socket,
            _ => 1,
        };
        sockets::bot_socket_buffer(
            self.socket_buffer,
            self.protocol.receive_burst().bytes(),
            sharing,
        )
    }

    /// Embedded server instances this plan starts (the engine starts exactly these).
    pub fn embedded_instances(&self) -> usize {
        let per_instance = self.protocol.players_per_instance(&self.server);
        match (self.server.instances, per_instance) {
            (Some(n), _) => n.max(1),
            (None, Some(p)) => (self.planned as usize).div_ceil(p).max(1),
            (None, None) => 1,
        }
    }

    /// The sockets this plan opens and what they ask for. Bot sockets are counted as the
    /// engine opens them: one per session of the schedule on raw UDP; with ENet, one per host,
    /// a host taking up to `bots_per_socket` bots of one worker to one server from one source
    /// address in one group. GNS opens its own sockets (none counted here).
    pub fn socket_memory(&self) -> SocketMemory {
        let (server_sockets, targets) = match &self.targets {
            Targets::Embedded => (self.embedded_instances() as u64, self.embedded_instances()),
            Targets::Addrs(a) => (0, a.len()),
        };
        let bot_sockets = match self.protocol.transport() {
            TransportNeeds::Gns => 0,
            TransportNeeds::Udp | TransportNeeds::UdpTcpLogin { .. } => self.spawns.len() as u64,
            TransportNeeds::Enet(_) => self.enet_hosts(targets),
        };
        SocketMemory {
            bot_sockets,
            per_socket: self.bot_socket_buffer(),
            server_sockets,
        }
    }

    /// ENet hosts the engine opens: bots dealt to workers by their place in the schedule,
    /// each to its target by index, grouped per (worker, target, source, group).
    fn enet_hosts(&self, targets: usize) -> u64 {
        /// A host's key: worker, target (own list of the group, or the scenario's), source,
        /// group.
        type Key = (usize, Option<SocketAddr>, usize, Option<IpAddr>, u16);
        let workers = self.workers.max(1);
        let mut per_host: HashMap<Key, u64> = HashMap::new();
        for (n, ev) in self.spawns.iter().enumerate() {
            let i = ev.index as usize;
            let own = self
                .groups
                .get(usize::from(ev.group))
                .and_then(|g| g.targets.as_ref());
            let (addr, t) = match own {
                Some(own) => (own.get(i % own.len().max(1)).copied(), 0),
                None => (None, i % targets.max(1)),
            };
            let key = (n % workers, addr, t, self.source_of(ev.index), ev.group);
            *per_host.entry(key).or_default() += 1;
        }
        let k = self.bots_per_socket.max(1) as u64;
        per_host.values().map(|c| c.div_ceil(k)).sum()
    }

    /// The plan's `sockets` line(s) for `describe`.
    pub(super) fn describe_sockets(&self) -> String {
        if self.protocol.transport() == TransportNeeds::Gns {
            // GNS opens and sizes its own sockets, bots' and servers' alike.
            return String::new();
        }
        let source = if self.socket_buffer.is_some() {
            "engine.socket_buffer".to_string()
        } else {
            let b = self.protocol.receive_burst();
            let shared = match self.protocol.transport() {
                TransportNeeds::Enet(_) if self.bots_per_socket > 1 => {
                    format!(" × {} bots per socket", self.bots_per_socket)
                }
                _ => String::new(),
            };
            format!("{} datagrams of {} B{shared}", b.count, b.largest)
        };
        sockets::describe(&self.socket_memory(), &source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Dur;

    fn ramp(to: u64, secs: u64) -> Stage {
        Stage::Ramp {
            ramp_to: to,
            over: Dur(Duration::from_secs(secs)),
        }
    }

    fn plan_of(protocol: &str) -> Plan {
        let text = format!(
            "name: d\nprotocol:\n{protocol}population:\n  stages:\n    - ramp_to: 4\n      \
             over: 1s\nbehaviour:\n  input_rate: 30\n"
        );
        let p = std::path::Path::new("s.yaml");
        let f = crate::scenario::parse(&text, p).expect("parses");
        Plan::build(f, p, &crate::scenario::Overrides::default()).expect("plans")
    }

    /// `validate` promises only what the run sends: the input rate where the bots send input,
    /// and pings where the server answers them.
    #[test]
    fn the_plan_names_input_and_pings_only_where_the_dialect_has_them() {
        let cafe = plan_of("  cafe: {}\n").describe();
        assert!(cafe.contains("input      30 Hz"), "{cafe}");
        assert!(cafe.contains("pings      every 1s"), "{cafe}");
        let bench = plan_of("  zergcity:\n    dialect: benchmark\n").describe();
        assert!(!bench.contains("30 Hz"), "{bench}");
        assert!(bench.contains("input      none"), "{bench}");
        assert!(bench.contains("pings      not answered"), "{bench}");
        let city = plan_of("  city:\n    dialect: implementation\n").describe();
        assert!(city.contains("input      30 Hz"), "{city}");
        assert!(city.contains("pings      not answered"), "{city}");
    }

    #[test]
    fn linear_ramp_spaces_bots_evenly() {
        let s = spawn_schedule(&[ramp(4, 4)], &|n| n).unwrap();
        let starts: Vec<u64> = s.iter().map(|e| e.start.as_millis() as u64).collect();
        assert_eq!(starts, vec![1000, 2000, 3000, 4000]);
    }

    #[test]
    fn ramp_down_stops_highest_first() {
        let s = spawn_schedule(
            &[
                ramp(4, 0),
                Stage::Hold {
                    hold: Dur(Duration::from_secs(10)),
                },
                ramp(2, 2),
            ],
            &|n| n,
        )
        .unwrap();
        assert_eq!(s[3].stop, Some(Duration::from_secs(11)));
        assert_eq!(s[2].stop, Some(Duration::from_secs(12)));
        assert_eq!(s[1].stop, None);
    }

    #[test]
    fn up_after_down_is_refused() {
        assert!(spawn_schedule(&[ramp(4, 1), ramp(2, 1), ramp(5, 1)], &|n| n).is_err());
    }

    #[test]
    fn targets_with_port_ranges() {
        assert_eq!(
            expand_port_range("127.0.0.1:7777-7779", 1).unwrap(),
            vec!["127.0.0.1:7777", "127.0.0.1:7778", "127.0.0.1:7779"]
        );
        let e = expand_port_range("localhost", 4242).unwrap_err();
        assert!(e.contains("has no port; write `localhost:4242`"), "{e}");
        let e = expand_port_range("::1", 4242).unwrap_err();
        assert!(e.contains("write `[::1]:4242`"), "{e}");
        assert_eq!(expand_port_range("[::1]:9", 1).unwrap(), vec!["[::1]:9"]);
        assert!(expand_port_range("h:9-3", 1).is_err());
        // Port 0 (issue 37), also from --target, which replaces the scenario's.
        let e = expand_port_range("127.0.0.1:0", 1).unwrap_err();
        assert!(
            e.starts_with("target `127.0.0.1:0`: port 0 is not a server's port"),
            "{e}"
        );
        assert!(expand_port_range("h:0-3", 1).is_err());
        assert!(expand_port_range("h:10", 1).is_ok());
    }

    /// The shards partition the whole run's population: every bot in exactly one shard, with
    /// the same index, start time and parameters (seed) as unsharded.
    #[test]
    fn shards_partition_the_population_and_keep_each_bot() {
        let p = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scenarios/quickstart.yaml"
        ));
        let file = crate::scenario::load(p).unwrap();
        let whole = Plan::build(file.clone(), p, &Overrides::default()).unwrap();
        let mut seen = Vec::new();
        for index in 0..3 {
            let ov = Overrides {
                shard: Some(Shard { index, count: 3 }),
                ..Overrides::default()
            };
            let part = Plan::build(file.clone(), p, &ov).unwrap();
            assert_eq!(part.planned, part.spawns.len() as u64);
            for ev in &part.spawns {
                assert_eq!(ev.index % 3, index);
                let w = whole.spawns.iter().find(|w| w.index == ev.index).unwrap();
                assert_eq!(w, ev);
                assert_eq!(
                    part.bot_params(ev.index).seed,
                    whole.bot_params(ev.index).seed
                );
                seen.push(ev.index);
            }
        }
        seen.sort_unstable();
        let all: Vec<u32> = whole.spawns.iter().map(|e| e.index).collect();
        assert_eq!(seen, all);
        // More shards than bots: the empty one says so.
        let ov = Overrides {
            shard: Some(Shard {
                index: 150,
                count: 200,
            }),
            ..Overrides::default()
        };
        let e = Plan::build(file, p, &ov).unwrap_err().to_string();
        assert!(e.contains("shard 150/200 has no bots"), "{e}");
    }

    /// A pool must be of the target's family, and GNS, which binds its own sockets, cannot
    /// take one; bots keep their index's address in every shard.
    #[test]
    fn source_pools_are_checked_against_targets_and_transport() {
        let pool = |s: &str| crate::scenario::SourcePool::parse_list(s).unwrap();
        let section = |y: &str| -> ProtocolSection { serde_saphyr::from_str(y).unwrap() };
        let cafe = section("cafe: {}\n");
        let v6: Targets = Targets::Addrs(vec!["[::1]:7777".parse().unwrap()]);
        assert!(check_source_pool(&pool("127.0.1.0/24"), &Targets::Embedded, &cafe).is_ok());
        assert!(check_source_pool(&pool("fd00::/120"), &v6, &cafe).is_ok());
        let e = check_source_pool(&pool("10.0.0.5"), &v6, &cafe).unwrap_err();
        assert!(
            e.contains("is IPv4 (10.0.0.5) but target [::1]:7777 is IPv6"),
            "{e}"
        );
        let gns = section("darkages:\n  transport: gns\n");
        let e = check_source_pool(&pool("127.0.1.1"), &Targets::Embedded, &gns).unwrap_err();
        assert!(
            e.contains("transport gns") && e.contains("local address"),
            "{e}"
        );

        let p = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scenarios/quickstart.yaml"
        ));
        let file = crate::scenario::load(p).unwrap();
        let ov = Overrides {
            source_addresses: Some(pool("127.0.1.0/30")),
            ..Overrides::default()
        };
        let whole = Plan::build(file.clone(), p, &ov).unwrap();
        let shard = Plan::build(
            file,
            p,
            &Overrides {
                shard: Some(Shard { index: 1, count: 3 }),
                ..ov
            },
        )
        .unwrap();
        for ev in &shard.spawns {
            assert_eq!(shard.source_of(ev.index), whole.source_of(ev.index));
        }
        let hosts: Vec<_> = (0..3).filter_map(|i| whole.source_of(i)).collect();
        assert_eq!(
            hosts,
            ["127.0.1.1", "127.0.1.2", "127.0.1.1"].map(|a| a.parse::<std::net::IpAddr>().unwrap())
        );
    }

    #[test]
    fn seeds_differ_per_bot_and_repeat_per_seed() {
        assert_ne!(mix_seed(1, 0), mix_seed(1, 1));
        assert_eq!(mix_seed(7, 3), mix_seed(7, 3));
    }
}

#[cfg(test)]
mod socket_tests {
    use std::path::Path;

    use super::*;
    use crate::scenario::sockets::SocketMemory;
    use crate::scenario::{load, parse, Overrides};

    fn shipped(name: &str, ov: &Overrides) -> Plan {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("scenarios")
            .join(name);
        Plan::build(load(&p).unwrap(), &p, ov).unwrap()
    }

    /// quickstart: 100 cafe bots, one socket each, 32 datagrams of 1500 bytes each way, and
    /// the embedded server's one socket.
    #[test]
    fn quickstart_commits_what_its_hundred_sockets_ask_for() {
        let plan = shipped("quickstart.yaml", &Overrides::default());
        let m = plan.socket_memory();
        assert_eq!(
            m,
            SocketMemory {
                bot_sockets: 100,
                per_socket: 48_000,
                server_sockets: 1,
            }
        );
        assert_eq!(m.bot_requested(), 9_600_000);
        assert_eq!(m.bot_ceiling(), 19_200_000);
        assert_eq!(m.server_ceiling(), 33_554_432);
        assert_eq!(
            plan.describe_sockets(),
            "sockets    100 bot sockets × (receive 46.9 KiB + send 46.9 KiB) = 9.2 MiB asked of \
             the kernel (32 datagrams of 1500 B); Linux doubles each request, so at most \
             18.3 MiB if every buffer filled\n           plus 1 embedded server socket × 2 × \
             8.0 MiB: at most 32.0 MiB\n"
        );
    }

    /// City over ENet, 300 bots, 2 workers, 3 embedded instances: one host per bot, and at
    /// 50 bots per socket one host per (worker, instance): 6 sockets of 50 bots' bursts.
    #[test]
    fn enet_hosts_are_counted_as_the_engine_opens_them() {
        let two = Overrides {
            workers: Some(2),
            ..Overrides::default()
        };
        let plan = shipped("city.yaml", &two);
        assert_eq!(plan.embedded_instances(), 3);
        assert_eq!(plan.socket_memory().bot_sockets, 300);
        assert_eq!(plan.socket_memory().per_socket, 48_000);

        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/city.yaml");
        let text = std::fs::read_to_string(&p)
            .unwrap()
            .replace("bots_per_socket: 1 ", "bots_per_socket: 50 ");
        let plan = Plan::build(parse(&text, &p).unwrap(), &p, &two).unwrap();
        let m = plan.socket_memory();
        assert_eq!(m.bot_sockets, 6);
        assert_eq!(m.per_socket, 50 * 48_000);
        assert_eq!(m.bot_requested(), 6 * 2 * 2_400_000);
    }

    /// Bots sharing an ENet host share a timer step, so a host's flush finds its peers due
    /// together; one bot per socket keeps every bot on its own spread phase. City, 300 bots
    /// on 2 workers against 2 servers (60 Hz inputs, timer steps by default): at 25 bots per
    /// host a host's bots are within 25 × 2 × 2 = 100 consecutive indices.
    #[test]
    fn bots_of_one_enet_host_share_a_phase_and_lone_bots_do_not() {
        let ov = Overrides {
            workers: Some(2),
            target: Some("127.0.0.1:7777,127.0.0.1:7778".into()),
            ..Overrides::default()
        };
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/city.yaml");
        let text = std::fs::read_to_string(&p).unwrap();
        let phases = |text: &str| -> Vec<Duration> {
            let plan = Plan::build(parse(text, &p).unwrap(), &p, &ov).unwrap();
            assert!(
                plan.timer_step.is_some(),
                "City at 60 Hz runs on timer steps"
            );
            (0..300).map(|i| plan.bot_params(i).phase_offset).collect()
        };
        let distinct = |v: &[Duration]| {
            let mut d = v.to_vec();
            d.sort();
            d.dedup();
            d.len()
        };

        let shared = phases(&text.replace("bots_per_socket: 1 ", "bots_per_socket: 25 "));
        for block in shared.chunks(100) {
            assert_eq!(distinct(block), 1, "one host's bots, one phase: {block:?}");
        }
        assert!(distinct(&shared) <= 3, "three blocks of hosts: {shared:?}");

        // 150 bots per worker: 4 phase steps (about 32 inputs per worker on each).
        let lone = phases(&text);
        assert_eq!(
            distinct(&lone[..100]),
            4,
            "bots with sockets of their own spread over every phase step: {:?}",
            &lone[..100]
        );
    }

    #[test]
    fn the_scenario_sets_the_size_and_is_held_to_its_range() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.yaml");
        let text = std::fs::read_to_string(&p).unwrap();
        let with = |v: &str| {
            let t = format!("{text}\nengine:\n  socket_buffer: {v}\n");
            Plan::build(parse(&t, &p).unwrap(), &p, &Overrides::default())
        };
        assert_eq!(with("256KiB").unwrap().bot_socket_buffer(), 262_144);
        assert_eq!(with("65536").unwrap().bot_socket_buffer(), 65_536);
        assert_eq!(
            with("1 MiB").unwrap().socket_memory().bot_requested(),
            100 * 2 * 1_048_576
        );
        let e = with("100").unwrap_err().to_string();
        assert!(
            e.contains("engine.socket_buffer: 100 bytes is outside 4096 B"),
            "{e}"
        );
        let e = with("2GB").unwrap_err().to_string();
        assert!(e.contains("unit `GB`"), "{e}");
    }
}

#[cfg(test)]
mod input_mode_tests {
    use std::path::Path;

    use super::*;
    use crate::scenario::{parse, Overrides};

    fn described(protocol: &str) -> String {
        let text = format!(
            "name: m\nprotocol:\n  {protocol}: {{}}\npopulation:\n  stages:\n    - ramp_to: 2\n      \
             over: 0s\n    - hold: 1s\nbehaviour:\n  input_mode: on_change\n"
        );
        let p = Path::new("s.yaml");
        let f = parse(&text, p).unwrap_or_else(|e| panic!("{e}"));
        Plan::build(f, p, &Overrides::default())
            .unwrap_or_else(|e| panic!("{e}"))
            .describe()
    }

    /// `validate` promises `on_change` only where the bots keep it: cafe's do; City's send
    /// every slot (each input is one tick of movement), and the plan says so.
    #[test]
    fn on_change_is_promised_only_where_the_bots_keep_it() {
        let cafe = described("cafe");
        assert!(cafe.contains("(sent on change)"), "{cafe}");
        let city = described("city");
        assert!(
            city.contains("on_change does not apply to this protocol: every slot is sent"),
            "{city}"
        );
    }
}
