//! The engine: shards bots over a few worker threads, starts the embedded reference server
//! when the target is `embedded`, collects per-second metrics and returns the merged result.
//!
//! `worker` runs the bots of one thread, [`server_driver`] runs an embedded reference server,
//! and [`io`] carries both over each transport on real sockets.

#[cfg(test)]
mod footprint;
pub mod health;
pub mod io;
pub mod limits;
pub mod server_driver;
pub mod timer;
mod worker;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use thiserror::Error;
use tokio::sync::watch;

pub use server_driver::{spawn_reference_server, ServerHandle, StatsSource};

use crate::metrics::phases::{merge_targets, merge_waiting, MAX_TARGETS};
pub use crate::metrics::RunOutcome;
use crate::metrics::{IntervalPoint, Recorder, ServerStats};
use crate::protocol::ServerParams;
use crate::scenario::plan::Targets;
use crate::scenario::Plan;
use worker::{run_worker, WorkerMsg, WorkerSpec};

#[derive(Debug, Error)]
pub enum EngineError {
    #[error(transparent)]
    FdLimit(#[from] limits::FdLimitError),
    #[error("cannot start the embedded reference server: {0}")]
    EmbeddedServer(std::io::Error),
    #[error("cannot start worker thread: {0}")]
    Thread(std::io::Error),
    /// The first bot's source address cannot be bound: the run would be a swarm of failures.
    #[error("{0}")]
    SourceAddress(std::io::Error),
}

/// Stops a run early (Ctrl-C). Cloneable across threads.
#[derive(Clone)]
pub struct StopSignal(watch::Sender<bool>);

impl Default for StopSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl StopSignal {
    pub fn new() -> Self {
        Self(watch::channel(false).0)
    }
    /// Stop. Never lost: the flag is stored even while nobody is subscribed (a plain
    /// `watch::Sender::send` drops the value when there is no receiver, which lost a Ctrl-C
    /// that came before the workers started and every Ctrl-C of `serve`).
    pub fn stop(&self) {
        self.0.send_replace(true);
    }
    pub fn is_stopped(&self) -> bool {
        *self.0.borrow()
    }
    fn subscribe(&self) -> watch::Receiver<bool> {
        self.0.subscribe()
    }
}

/// Run the plan to its end (or until `stop`), calling `progress` once per second.
pub fn run(
    plan: &Plan,
    stop: &StopSignal,
    progress: impl FnMut(&IntervalPoint, u64, &Recorder),
) -> Result<RunOutcome, EngineError> {
    run_observed(plan, stop, |_| {}, progress)
}

/// What a run is about to start with, for whoever watches it from outside the swarm (the
/// embedded server's `/metrics`, the scrapes of `server_metrics:`).
pub struct RunStart {
    /// The instant the run's clock reads 0: per-second points end at 1 s, 2 s, ... after it.
    pub at: Instant,
    /// Live views of the embedded server instances' counters (none for a real target).
    pub servers: Vec<StatsSource>,
}

/// [`run`], calling `on_start` once, before the first worker starts.
pub fn run_observed(
    plan: &Plan,
    stop: &StopSignal,
    on_start: impl FnOnce(&RunStart),
    mut progress: impl FnMut(&IntervalPoint, u64, &Recorder),
) -> Result<RunOutcome, EngineError> {
    limits::ensure_fd_limit(plan.planned)?;
    // The first bot's source address is tried before anything starts (a bind, nothing
    // sent): a pool this machine lacks fails the run at once, saying how to add it. Later
    // bots whose address is missing fail one by one (`socket.address_not_available`).
    let first_bot = plan.spawns.iter().min_by_key(|e| (e.start, e.index));
    if let Some(ip) = first_bot.and_then(|e| plan.source_of(e.index)) {
        io::socket::bot::check_source(ip).map_err(EngineError::SourceAddress)?;
    }

    let servers = match plan.targets {
        Targets::Embedded => start_embedded(plan)?,
        Targets::Addrs(_) => Vec::new(),
    };
    let addrs: Vec<SocketAddr> = match &plan.targets {
        Targets::Addrs(a) => a.clone(),
        Targets::Embedded => servers.iter().map(|s| s.addr).collect(),
    };
    let target = match servers.as_slice() {
        [] => plan.target_text.clone(),
        [one] => format!("embedded ({})", one.addr),
        many => format!(
            "embedded ({} instances, {} .. {})",
            many.len(),
            many[0].addr,
            many[many.len() - 1].addr
        ),
    };

    let workers = plan.workers.max(1);
    let started_at = SystemTime::now();
    // A short lead so every worker is up before the first bot is due.
    let run_start = Instant::now() + Duration::from_millis(50);
    let run_end = run_start + plan.duration;
    on_start(&RunStart {
        at: run_start,
        servers: servers.iter().map(ServerHandle::stats_source).collect(),
    });
    let mut shards: Vec<Vec<_>> = (0..workers).map(|_| Vec::new()).collect();
    // Bots are dealt to workers by their place in the schedule (the same as their index in a
    // whole run), so a sharded run, whose indices step by the shard count, still uses every
    // worker; the target follows the bot's index, as in the whole run.
    let all: std::sync::Arc<[SocketAddr]> = std::sync::Arc::from(addrs.as_slice());
    for (n, ev) in plan.spawns.iter().enumerate() {
        let i = ev.index as usize;
        let mut params = plan.bot_params(ev.index);
        // A group with servers of its own plays on them; the others on the scenario's.
        let peer = match plan
            .groups
            .get(usize::from(ev.group))
            .and_then(|g| g.targets.as_ref())
        {
            Some(own) => own[i % own.len().max(1)],
            None => {
                params.targets = all.clone();
                addrs[i % addrs.len().max(1)]
            }
        };
        shards[n % workers].push((*ev, params, peer, plan.source_of(ev.index)));
    }
    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    // Every bot socket asks for what the plan says (the protocol's burst, or
    // engine.socket_buffer): `validate` printed the kernel memory this commits.
    let buffers = io::socket::SocketBuffers::both(plan.bot_socket_buffer());
    for (id, mut bots) in shards.into_iter().enumerate() {
        bots.sort_by_key(|b| b.0.start);
        let spec = WorkerSpec {
            bots,
            protocol: plan.protocol.clone(),
            run_start,
            run_end,
            id,
            groups: plan.groups.len(),
            transport: io::BotTransportOptions {
                // Each group's link, seeded per worker and group (the first group as a
                // scenario without groups: the seed and the worker).
                network: plan
                    .groups
                    .iter()
                    .enumerate()
                    .map(|(g, group)| {
                        let seed = plan.seed ^ id as u64;
                        let seed = if g == 0 {
                            seed
                        } else {
                            crate::scenario::plan::mix_seed(seed, g as u64)
                        };
                        group
                            .network
                            .as_ref()
                            .map(|n| io::sim_path::PathConditions::new(n, seed))
                    })
                    .collect(),
                bots_per_socket: plan.bots_per_socket,
                enet_throttle: plan.enet_throttle,
                transport_rtt: (!plan.protocol.measures_rtt())
                    .then_some(plan.bot_template.ping_interval),
            },
        };
        let tx = tx.clone();
        let stop_rx = stop.subscribe();
        let t = std::thread::Builder::new()
            .name(format!("tickswarm-worker-{id}"))
            .spawn(move || {
                io::socket::size_bot_sockets(buffers);
                run_worker(spec, tx, stop_rx)
            })
            .map_err(EngineError::Thread)?;
        threads.push(t);
    }
    drop(tx);

    // A scenario without groups: is reported as the whole run only.
    let reported_groups = if plan.groups.iter().all(|g| g.implicit) {
        0
    } else {
        plan.groups.len()
    };
    let mut collector = Collector::new(workers, reported_groups);
    while let Ok(msg) = rx.recv() {
        if let Some((point, connected, rec)) = collector.accept(msg) {
            progress(&point, connected, &rec);
        }
    }
    for t in threads {
        let _ = t.join();
    }
    let elapsed = Instant::now()
        .saturating_duration_since(run_start)
        .min(plan.duration);
    collector.finish(elapsed);
    let interrupted = stop.is_stopped();
    let server_stats = merge_server_stats(servers.into_iter().map(ServerHandle::shutdown));
    let sources = plan
        .source_pool
        .as_ref()
        .map(|pool| source_counts(plan, pool, &collector.connected_by_source));
    Ok(RunOutcome {
        total: collector.total,
        intervals: collector.points,
        planned: plan.planned,
        ever_connected: collector.ever_connected,
        failed: collector.failed,
        bots_lost: collector.lost,
        bots_silent_at_end: collector.silent_at_end,
        started_at,
        elapsed,
        interrupted,
        workers,
        tail: collector.tail,
        server: server_stats,
        target,
        sources,
        server_metrics: None,
        groups: group_outcomes(plan, collector.groups),
    })
}

/// The groups' figures for the report; none for a scenario without `groups:`.
fn group_outcomes(
    plan: &Plan,
    collected: Vec<(Recorder, crate::metrics::groups::GroupBots)>,
) -> Vec<crate::metrics::groups::GroupOutcome> {
    use crate::scenario::GroupSize;
    if plan.groups.iter().all(|g| g.implicit) {
        return Vec::new();
    }
    plan.groups
        .iter()
        .zip(collected)
        .map(|(g, (total, bots))| crate::metrics::groups::GroupOutcome {
            name: g.name.clone(),
            size: match g.size {
                Some(GroupSize::Share(x)) => format!("share {}%", (x * 1e4).round() / 1e2),
                Some(GroupSize::Count(n)) => format!("count {n}"),
                Some(GroupSize::Arrivals) => "arrival rate".into(),
                None => String::new(),
            },
            planned: g.planned,
            total,
            bots,
            network: g
                .network
                .as_ref()
                .and_then(|n| serde_json::to_value(n).ok()),
            lifecycle: g.lifecycle,
        })
        .collect()
}

/// Bots per source address (or network, for a large pool): planned from the plan, connected
/// as the workers saw them.
fn source_counts(
    plan: &Plan,
    pool: &crate::scenario::SourcePool,
    connected: &std::collections::BTreeMap<std::net::IpAddr, u64>,
) -> crate::metrics::SourceCounts {
    use crate::scenario::source_pool::count_by_group;
    let planned = plan.spawns.iter().map(|e| pool.for_bot(e.index));
    let grouping = pool.grouping(planned.clone());
    let rows = count_by_group(grouping, planned, connected.iter().map(|(a, n)| (*a, *n)));
    crate::metrics::SourceCounts {
        grouped_by: grouping.name(),
        pool_size: u64::try_from(pool.len()).unwrap_or(u64::MAX),
        rows: rows
            .into_iter()
            .map(|(source, planned, connected)| crate::metrics::SourceRow {
                source,
                planned,
                connected,
            })
            .collect(),
    }
}

/// Start the reference server for an `embedded` target: one instance, or for protocols with
/// a player cap per instance (City) as many as the population needs, on consecutive ports
/// (the first one ephemeral) when `server.instances` is unset.
fn start_embedded(plan: &Plan) -> Result<Vec<ServerHandle>, EngineError> {
    let instances = plan.embedded_instances();
    let mut handles: Vec<ServerHandle> = Vec::with_capacity(instances);
    for i in 0..instances {
        // The first instance takes a free port; the others the ports after it, as a fleet of
        // game servers on one host would. A taken (or missing) port falls back to a free one.
        let port = handles
            .first()
            .and_then(|h| h.addr.port().checked_add(i as u16))
            .unwrap_or(0);
        let bind: SocketAddr = (Ipv4Addr::LOCALHOST, port).into();
        let params = ServerParams {
            instance: i,
            ..plan.server.clone()
        };
        let h = match spawn_reference_server(bind, &plan.protocol, &params) {
            Ok(h) => h,
            Err(_) if port != 0 => {
                spawn_reference_server((Ipv4Addr::LOCALHOST, 0).into(), &plan.protocol, &params)
                    .map_err(EngineError::EmbeddedServer)?
            }
            Err(e) => return Err(EngineError::EmbeddedServer(e)),
        };
        handles.push(h);
    }
    Ok(handles)
}

/// Add up the counters of several server instances.
fn merge_server_stats(stats: impl Iterator<Item = ServerStats>) -> Option<ServerStats> {
    stats.reduce(|mut a, b| {
        a.merge(&b);
        a
    })
}

/// Merges worker intervals into per-second points and run totals.
struct Collector {
    workers: usize,
    total: Recorder,
    /// Interval index -> (merged recorder, workers reported, bots connected).
    open: std::collections::BTreeMap<u64, (Recorder, usize, u64)>,
    /// Interval index -> each worker's CPU time in it (µs), by worker id.
    open_cpu: std::collections::BTreeMap<u64, Vec<Option<u64>>>,
    /// Interval index -> bots per phase, the waiting groups and the per-target points,
    /// merged over workers.
    open_phases: std::collections::BTreeMap<u64, worker::Census>,
    /// The same when the workers stopped.
    tail_phases: worker::Census,
    points: Vec<IntervalPoint>,
    tail: Recorder,
    /// Bots in play at the end, summed over workers.
    tail_connected: u64,
    lost: u64,
    silent_at_end: u64,
    ever_connected: u64,
    failed: u64,
    /// Bots ever in play per source address, over workers.
    connected_by_source: std::collections::BTreeMap<std::net::IpAddr, u64>,
    /// Per group (none for a scenario without `groups:`): the whole run's figures and bot
    /// counts.
    groups: Vec<(Recorder, crate::metrics::groups::GroupBots)>,
}

impl Collector {
    fn new(workers: usize, groups: usize) -> Self {
        Self {
            groups: (0..groups)
                .map(|_| (Recorder::new(), Default::default()))
                .collect(),
            workers,
            total: Recorder::new(),
            open: Default::default(),
            open_cpu: Default::default(),
            open_phases: Default::default(),
            tail_phases: Default::default(),
            points: Vec::new(),
            tail: Recorder::new(),
            tail_connected: 0,
            lost: 0,
            silent_at_end: 0,
            ever_connected: 0,
            failed: 0,
            connected_by_source: Default::default(),
        }
    }

    /// The interval this message completed, if any: its point, the bots connected then, and
    /// its merged recorder.
    fn accept(&mut self, msg: WorkerMsg) -> Option<(IntervalPoint, u64, Recorder)> {
        match msg {
            WorkerMsg::Interval {
                index,
                rec,
                groups,
                connected_now,
                census,
                worker,
                cpu_us,
            } => {
                let cpu = self
                    .open_cpu
                    .entry(index)
                    .or_insert_with(|| vec![None; self.workers]);
                if let Some(c) = cpu.get_mut(worker) {
                    *c = cpu_us;
                }
                self.total.merge(&rec);
                self.add_groups(&rec, groups.iter().map(|g| (g, None)));
                merge_census(self.open_phases.entry(index).or_default(), &census);
                let e = self
                    .open
                    .entry(index)
                    .or_insert_with(|| (Recorder::new(), 0, 0));
                e.0.merge(&rec);
                e.1 += 1;
                e.2 += connected_now;
                if e.1 == self.workers {
                    if let Some((r, _, c)) = self.open.remove(&index) {
                        let mut p = point(index, &r, c);
                        if let Some(c) = self.open_phases.remove(&index) {
                            set_census(&mut p, c);
                        }
                        let cpu = self.open_cpu.remove(&index).unwrap_or_default();
                        p.generator = Some(health(&r, cpu));
                        self.points.push(p.clone());
                        return Some((p, c, r));
                    }
                }
                None
            }
            WorkerMsg::Done {
                rec,
                groups,
                ever_connected,
                failed,
                connected_now,
                lost,
                silent_at_end,
                census,
                connected_by_source,
            } => {
                self.add_groups(&rec, groups.iter().map(|(r, b)| (r, Some(b))));
                if groups.is_empty() {
                    // One group: its counts are the worker's.
                    if let Some(g) = self.groups.first_mut() {
                        g.1.add(&crate::metrics::groups::GroupBots {
                            sessions: 0,
                            connected: ever_connected,
                            failed,
                            lost,
                            connected_now,
                            silent_at_end,
                        });
                    }
                }
                for (ip, n) in connected_by_source {
                    *self.connected_by_source.entry(ip).or_default() += n;
                }
                merge_census(&mut self.tail_phases, &census);
                self.lost += lost;
                self.silent_at_end += silent_at_end;
                self.total.merge(&rec);
                self.tail.merge(&rec);
                self.tail_connected += connected_now;
                self.ever_connected += ever_connected;
                self.failed += failed;
                None
            }
        }
    }

    /// Add a worker's per-group figures (with one group, `rec` is the group's).
    fn add_groups<'a>(
        &mut self,
        rec: &Recorder,
        groups: impl ExactSizeIterator<
            Item = (&'a Recorder, Option<&'a crate::metrics::groups::GroupBots>),
        >,
    ) {
        if self.groups.is_empty() {
            return;
        }
        if groups.len() == 0 {
            if let Some(g) = self.groups.first_mut() {
                g.0.merge(rec);
            }
            return;
        }
        for ((total, bots), (r, b)) in self.groups.iter_mut().zip(groups) {
            total.merge(r);
            if let Some(b) = b {
                bots.add(b);
            }
        }
    }

    /// After the last worker: what no whole second holds (seconds some workers finished
    /// before they reported them, and the time since the last whole second) becomes the
    /// tail, and the tail becomes the last, partial point, so the points add up to the totals.
    fn finish(&mut self, elapsed: Duration) {
        for (_, (r, _, _)) in std::mem::take(&mut self.open) {
            self.tail.merge(&r);
        }
        let last_t = self.points.last().map_or(0.0, |p| p.t);
        let t = (elapsed.as_secs_f64() * 1000.0).round() / 1000.0;
        let tail_has_data = self.tail.packets_up + self.tail.packets_down > 0;
        if t > last_t || tail_has_data {
            let mut p = point(0, &self.tail, self.tail_connected);
            set_census(&mut p, std::mem::take(&mut self.tail_phases));
            p.t = t.max(last_t);
            p.partial = true;
            self.points.push(p);
        }
    }
}

/// Add one worker's census to the others' of the same second.
fn merge_census(into: &mut worker::Census, c: &worker::Census) {
    into.phases.merge(&c.phases);
    merge_waiting(&mut into.waiting, &c.waiting);
    // A worker that saw too many targets sent none: the second has no per-target point.
    into.too_many_targets |= c.too_many_targets;
    merge_targets(&mut into.targets, &c.targets);
}

/// A second's census into its point; per-target points only for 2..=MAX_TARGETS targets.
fn set_census(p: &mut IntervalPoint, c: worker::Census) {
    p.phases = c.phases;
    p.waiting = c.waiting;
    if !c.too_many_targets && (2..=MAX_TARGETS).contains(&c.targets.len()) {
        p.targets = c.targets;
    }
}

/// The generator's health in a completed second: the workers' CPU shares (of one core, over
/// the one-second interval), and the process's memory and descriptors read now.
fn health(r: &Recorder, cpu_us: Vec<Option<u64>>) -> crate::metrics::run::GeneratorHealth {
    crate::metrics::run::GeneratorHealth {
        worker_cpu: cpu_us
            .into_iter()
            .map(|c| c.map(|us| (us as f64 / 1e6 * 1000.0).round() / 1000.0))
            .collect(),
        rss_bytes: health::rss_bytes(),
        open_fds: health::open_fds(),
        send_errors: r.send_errors.total(),
        inputs_skipped: r.inputs_skipped,
    }
}

fn point(index: u64, r: &Recorder, connected: u64) -> IntervalPoint {
    let mut p = IntervalPoint {
        t: (index + 1) as f64,
        bots_connected: connected,
        loss_down_rate: (r.loss_down.expected > 0).then(|| r.loss_down.rate()),
        packets_up: r.packets_up,
        packets_down: r.packets_down,
        bytes_up: r.bytes_up,
        bytes_down: r.bytes_down,
        inputs_sent: r.inputs_sent,
        snapshots_applied: r.snapshots_applied,
        ..IntervalPoint::default()
    };
    p.set_percentiles(Some(&r.rtt_us), Some(&r.send_lateness_us));
    p
}
