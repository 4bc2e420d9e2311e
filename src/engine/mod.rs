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
mod timer_wheel;
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
use crate::scenario::{Plan, SpawnKind};
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
    progress: impl FnMut(&IntervalPoint, u64, &Second),
) -> Result<RunOutcome, EngineError> {
    run_observed(plan, stop, |_| {}, progress)
}

/// One completed second as the collector merged it over the workers: all bots' figures,
/// and each group's (for the groups' lines in `histograms.hlog`).
pub struct Second {
    pub rec: Recorder,
    /// Each group's RTT histogram of the second, in the plan's order, when the scenario has
    /// `groups:` (empty without).
    pub group_rtt: Vec<hdrhistogram::Histogram<u64>>,
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
    mut progress: impl FnMut(&IntervalPoint, u64, &Second),
) -> Result<RunOutcome, EngineError> {
    limits::ensure_fd_limit(plan.planned)?;
    limits::reserve_fd_table(plan.planned);
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
    let mut home: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    for (n, ev) in plan.spawns.iter().enumerate() {
        let i = ev.index as usize;
        let mut params = plan.bot_params(ev.index);
        // With a timer step the bots' phases are on its steps (`Plan::bot_params`), counted
        // from the run's start: their inputs leave at their own slots, a step's bots together.
        if plan.timer_step.is_some() {
            params.input_epoch = Some(run_start);
        }
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
        // A storm's reconnection goes to the worker that ran the session it replaces, which
        // keeps what the bot needs to resume it (`Bot::resume_state`).
        let w = match ev.kind {
            SpawnKind::Reconnect => home.get(&ev.index).copied().unwrap_or(n % workers),
            _ => n % workers,
        };
        home.entry(ev.index).or_insert(w);
        shards[w].push((*ev, params, peer, plan.source_of(ev.index)));
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
            timer_step: plan.timer_step,
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
                            crate::scenario::spawn::mix_seed(seed, g as u64)
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
                socket_buffers: Some(buffers),
            },
        };
        let tx = tx.clone();
        let stop_rx = stop.subscribe();
        let t = std::thread::Builder::new()
            .name(format!("tickswarm-worker-{id}"))
            .spawn(move || run_worker(spec, tx, stop_rx))
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
    // Every worker hands in its end; one that has not by the deadline (a stop, or the run's
    // end, plus END_GRACE) is left behind, named, and the report written from what it sent.
    let mut deadline = run_end + END_GRACE;
    let mut stop_seen = false;
    loop {
        let now = Instant::now();
        if !stop_seen && stop.is_stopped() {
            stop_seen = true;
            deadline = deadline.min(now + END_GRACE);
        }
        if now >= deadline {
            break;
        }
        let wait = deadline.saturating_duration_since(now).min(STOP_POLL);
        match rx.recv_timeout(wait) {
            Ok(msg) => {
                if let Some((point, connected, rec)) = collector.accept(msg) {
                    progress(&point, connected, &rec);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let unfinished_workers: Vec<usize> = (0..workers)
        .filter(|w| !collector.done.contains(w))
        .collect();
    for (id, t) in threads.into_iter().enumerate() {
        // A worker left behind keeps its thread until the process ends; it holds nothing the
        // report needs.
        if !unfinished_workers.contains(&id) {
            let _ = t.join();
        }
    }
    let elapsed = Instant::now()
        .saturating_duration_since(run_start)
        .min(plan.duration);
    collector.finish(elapsed);
    let interrupted = stop.is_stopped();
    let server_stats = merge_server_stats(servers.into_iter().map(ServerHandle::shutdown));
    let sources = whole_source_counts(plan, &collector.connected_by_source);
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
        unfinished_workers,
        worker_cpu_ns: collector.cpu_ns,
        timer_step: plan.timer_step.map_or(Duration::ZERO, |s| s.duration()),
        tail: collector.tail,
        server: server_stats,
        target,
        sources,
        server_metrics: None,
        groups: group_outcomes(
            plan,
            collector.groups,
            collector.group_points,
            collector.group_tails,
            &collector.connected_by_source,
        ),
    })
}

/// The groups' figures for the report; none for a scenario without `groups:`.
fn group_outcomes(
    plan: &Plan,
    collected: Vec<(Recorder, crate::metrics::groups::GroupBots)>,
    points: Vec<Vec<crate::metrics::groups::GroupPoint>>,
    tails: Vec<crate::metrics::groups::GroupSecond>,
    connected_by_source: &BySource,
) -> Vec<crate::metrics::groups::GroupOutcome> {
    use crate::metrics::groups::GroupOutcome;
    use crate::scenario::GroupSize;
    if plan.groups.iter().all(|g| g.implicit) {
        return Vec::new();
    }
    let seconds = points
        .into_iter()
        .zip(tails)
        .enumerate()
        .map(|(i, (p, t))| {
            (
                p,
                t.rtt_us,
                group_source_counts(plan, i, connected_by_source),
            )
        });
    plan.groups
        .iter()
        .zip(collected)
        .zip(seconds)
        .map(
            |((g, (total, bots)), (intervals, tail_rtt, sources))| GroupOutcome {
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
                intervals,
                tail_rtt,
                sources,
            },
        )
        .collect()
}

/// Bots ever in play, by group and source address, over the workers.
type BySource = std::collections::BTreeMap<(usize, std::net::IpAddr), u64>;

/// Bots per source address over the whole run: every bot that binds to a pool (the
/// scenario's `engine.source_addresses` or its group's own), at the address it bound to.
/// `None` when no bot has a pool.
fn whole_source_counts(plan: &Plan, connected: &BySource) -> Option<crate::metrics::SourceCounts> {
    let own = plan.groups.iter().filter_map(|g| g.source_pool.as_ref());
    let pools: Vec<&crate::scenario::SourcePool> = plan.source_pool.iter().chain(own).collect();
    let size = pools.iter().fold(0u128, |n, p| n.saturating_add(p.len()));
    let widest = pools.iter().max_by_key(|p| p.len())?;
    let planned = plan.spawns.iter().filter_map(|e| plan.source_of(e.index));
    Some(source_counts(
        widest,
        size,
        planned,
        connected.iter().map(|((_, a), n)| (*a, *n)),
    ))
}

/// A group's bots per source address: its own pool, or its share of the scenario's; `None`
/// when its bots bind to no pool.
fn group_source_counts(
    plan: &Plan,
    group: usize,
    connected: &BySource,
) -> Option<crate::metrics::SourceCounts> {
    let pool = plan
        .groups
        .get(group)?
        .source_pool
        .as_ref()
        .or(plan.source_pool.as_ref())?;
    let planned = plan
        .spawns
        .iter()
        .filter(|e| usize::from(e.group) == group)
        .filter_map(|e| plan.source_of(e.index));
    let connected = connected
        .iter()
        .filter(|((g, _), _)| *g == group)
        .map(|((_, a), n)| (*a, *n));
    Some(source_counts(pool, pool.len(), planned, connected))
}

/// Bots per source address (or network, for a large pool): planned from the plan, connected
/// as the workers saw them. `pool` decides the grouping; `size` is the addresses in play.
fn source_counts(
    pool: &crate::scenario::SourcePool,
    size: u128,
    planned: impl Iterator<Item = std::net::IpAddr> + Clone,
    connected: impl Iterator<Item = (std::net::IpAddr, u64)>,
) -> crate::metrics::SourceCounts {
    use crate::scenario::source_pool::count_by_group;
    let grouping = pool.grouping(planned.clone());
    let rows = count_by_group(grouping, planned, connected);
    crate::metrics::SourceCounts {
        grouped_by: grouping.name(),
        pool_size: u64::try_from(size).unwrap_or(u64::MAX),
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

/// Longest the run's end waits for the workers to hand in their ends, counted from the stop
/// (Ctrl-C, SIGTERM) or from the planned end, whichever comes first. A worker ends within
/// about its CLOSE_GRACE (1 s) of either; this leaves room for a busy machine, and bounds the
/// wait when a worker cannot end at all.
pub const END_GRACE: Duration = Duration::from_secs(5);

/// How often the wait for the workers looks at the stop signal.
const STOP_POLL: Duration = Duration::from_millis(50);

/// Merges worker intervals into per-second points and run totals.
struct Collector {
    workers: usize,
    /// Workers that handed in their end, by id.
    done: Vec<usize>,
    total: Recorder,
    /// Interval index -> (merged recorder, workers reported, bots connected).
    open: std::collections::BTreeMap<u64, (Recorder, usize, u64)>,
    /// Interval index -> each worker's share of a core in it, by worker id.
    open_cpu: std::collections::BTreeMap<u64, Vec<Option<f64>>>,
    /// Interval index -> the workers' CPU time in it (ns, summed over the workers reported so
    /// far); `None` once one of them could not read its clock.
    open_cpu_ns: std::collections::BTreeMap<u64, Option<u64>>,
    /// The workers' CPU time over the whole run (ns): every reading handed in, each
    /// second's and each worker's last; `None` when one could not be read.
    cpu_ns: Option<u64>,
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
    /// Bots ever in play per group and source address, over workers.
    connected_by_source: BySource,
    /// Per group (none for a scenario without `groups:`): the whole run's figures and bot
    /// counts.
    groups: Vec<(Recorder, crate::metrics::groups::GroupBots)>,
    /// Interval index -> per group, the second's figures and bots in play, merged over the
    /// workers reported so far.
    open_groups: std::collections::BTreeMap<u64, Vec<crate::metrics::groups::GroupSecond>>,
    /// Per group: its completed seconds.
    group_points: Vec<Vec<crate::metrics::groups::GroupPoint>>,
    /// Per group: what no whole second holds (as `tail`).
    group_tails: Vec<crate::metrics::groups::GroupSecond>,
}

impl Collector {
    fn new(workers: usize, groups: usize) -> Self {
        Self {
            groups: (0..groups)
                .map(|_| (Recorder::new(), Default::default()))
                .collect(),
            open_groups: Default::default(),
            group_points: vec![Vec::new(); groups],
            group_tails: vec![crate::metrics::groups::GroupSecond::new(); groups],
            workers,
            done: Vec::with_capacity(workers),
            total: Recorder::new(),
            open: Default::default(),
            open_cpu: Default::default(),
            open_cpu_ns: Default::default(),
            cpu_ns: Some(0),
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
    fn accept(&mut self, msg: WorkerMsg) -> Option<(IntervalPoint, u64, Second)> {
        match msg {
            WorkerMsg::Interval {
                index,
                rec,
                groups,
                connected_now,
                connected_by_group,
                census,
                worker,
                cpu_ns,
                span_us,
            } => {
                let cpu = self
                    .open_cpu
                    .entry(index)
                    .or_insert_with(|| vec![None; self.workers]);
                if let Some(c) = cpu.get_mut(worker) {
                    *c = cpu_ns.map(|ns| cpu_share(ns / 1_000, span_us));
                }
                self.add_cpu(cpu_ns);
                let second = self.open_cpu_ns.entry(index).or_insert(Some(0));
                *second = second.zip(cpu_ns).map(|(a, b)| a.saturating_add(b));
                self.total.merge(&rec);
                self.add_groups(&rec, groups.iter().map(|g| (g, None)));
                self.add_group_second(index, &rec, &groups, connected_now, &connected_by_group);
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
                        let cpu_ns = self.open_cpu_ns.remove(&index).flatten();
                        p.generator = Some(health(&r, cpu, cpu_ns));
                        self.points.push(p.clone());
                        let group_rtt = self.close_group_second(index);
                        return Some((p, c, Second { rec: r, group_rtt }));
                    }
                }
                None
            }
            WorkerMsg::Done {
                worker,
                rec,
                groups,
                ever_connected,
                failed,
                connected_now,
                lost,
                silent_at_end,
                census,
                connected_by_source,
                cpu_ns,
            } => {
                self.done.push(worker);
                self.add_cpu(cpu_ns);
                self.add_groups(&rec, groups.iter().map(|(r, b)| (r, Some(b))));
                if groups.is_empty() {
                    if let Some(t) = self.group_tails.first_mut() {
                        t.add(&rec, 0);
                    }
                }
                for (t, (r, _)) in self.group_tails.iter_mut().zip(&groups) {
                    t.add(r, 0);
                }
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
                for (g, ip, n) in connected_by_source {
                    *self.connected_by_source.entry((g, ip)).or_default() += n;
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

    /// One worker's CPU reading into the run's total (`None`: the total is unknown).
    fn add_cpu(&mut self, ns: Option<u64>) {
        self.cpu_ns = self.cpu_ns.zip(ns).map(|(a, b)| a.saturating_add(b));
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

    /// Add a worker's second to each group's (with one group, `rec` is the group's).
    fn add_group_second(
        &mut self,
        index: u64,
        rec: &Recorder,
        groups: &[Recorder],
        connected_now: u64,
        connected_by_group: &[u64],
    ) {
        let n = self.groups.len();
        if n == 0 {
            return;
        }
        let open = self
            .open_groups
            .entry(index)
            .or_insert_with(|| vec![crate::metrics::groups::GroupSecond::new(); n]);
        if groups.is_empty() {
            if let Some(g) = open.first_mut() {
                g.add(rec, connected_now);
            }
            return;
        }
        for (i, (g, r)) in open.iter_mut().zip(groups).enumerate() {
            g.add(r, connected_by_group.get(i).copied().unwrap_or(0));
        }
    }

    /// A completed second: each group's point, and its RTT histogram (for the log).
    fn close_group_second(&mut self, index: u64) -> Vec<hdrhistogram::Histogram<u64>> {
        let Some(open) = self.open_groups.remove(&index) else {
            return Vec::new();
        };
        open.into_iter()
            .zip(self.group_points.iter_mut())
            .map(|(g, points)| {
                points.push(g.point(index));
                g.rtt_us
            })
            .collect()
    }

    /// After the last worker: what no whole second holds (seconds some workers finished
    /// before they reported them, and the time since the last whole second) becomes the
    /// tail, and the tail becomes the last, partial point, so the points add up to the totals.
    fn finish(&mut self, elapsed: Duration) {
        for (_, (r, _, _)) in std::mem::take(&mut self.open) {
            self.tail.merge(&r);
        }
        // Seconds not every worker reported: their groups' parts go to the tails.
        for (_, open) in std::mem::take(&mut self.open_groups) {
            for (t, g) in self.group_tails.iter_mut().zip(open) {
                t.merge(&g);
            }
        }
        let last_t = self.points.last().map_or(0.0, |p| p.t);
        let t = (elapsed.as_secs_f64() * 1000.0).round() / 1000.0;
        let tail_has_data = self.tail.packets_up + self.tail.packets_down > 0;
        if t > last_t || tail_has_data {
            let mut p = point(0, &self.tail, self.tail_connected);
            set_census(&mut p, std::mem::take(&mut self.tail_phases));
            p.t = t.max(last_t);
            p.partial = true;
            for ((tail, (_, bots)), points) in self
                .group_tails
                .iter()
                .zip(&self.groups)
                .zip(self.group_points.iter_mut())
            {
                let mut g = tail.point(0);
                g.bots_connected = bots.connected_now;
                g.t = p.t;
                g.partial = true;
                points.push(g);
            }
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

/// A worker's share of one core: its thread's CPU time over the wall time between the two
/// reads (not a nominal second: a worker woken late would read above its true share),
/// rounded to 0.001.
pub fn cpu_share(cpu_us: u64, span_us: u64) -> f64 {
    let share = cpu_us as f64 / span_us.max(1) as f64;
    (share * 1000.0).round() / 1000.0
}

/// The generator's health in a completed second: the workers' CPU shares (of one core, over
/// the time each took to read it) and their CPU time, and the process's memory and
/// descriptors read now.
fn health(
    r: &Recorder,
    cpu: Vec<Option<f64>>,
    cpu_ns: Option<u64>,
) -> crate::metrics::run::GeneratorHealth {
    crate::metrics::run::GeneratorHealth {
        worker_cpu: cpu,
        cpu_ns,
        datagrams_sent: cpu_ns.map(|_| r.wire.packets_up),
        cpu_ns_per_datagram_sent: crate::metrics::run::per_datagram(cpu_ns, r.wire.packets_up),
        rss_bytes: health::rss_bytes(),
        open_fds: health::open_fds(),
        send_errors: r.send_errors.total(),
        inputs_skipped: r.inputs_skipped,
        send_syscalls: (r.send_io.syscalls > 0).then_some(r.send_io.syscalls),
        send_batch_max: (r.send_io.syscalls > 0).then_some(r.send_io.max_batch),
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
        snapshot_rate_hz: r.snapshot_rate.hz(),
        snapshot_rate: r.snapshot_rate,
        ..IntervalPoint::default()
    };
    p.set_percentiles(Some(&r.rtt_us), Some(&r.send_lateness_us));
    p
}

#[cfg(test)]
mod cpu_share_tests {
    use super::cpu_share;

    /// A worker busy 80 % of the time, whose once-a-second read came 150 ms late: its thread
    /// used 920 ms of CPU in 1.15 s of wall time. Its share is 0.8, not 0.92 (which a fixed
    /// one-second divisor gave, and which would read as a saturated worker).
    #[test]
    fn a_late_read_divides_by_the_time_that_passed() {
        assert_eq!(cpu_share(920_000, 1_150_000), 0.8);
        assert_eq!(cpu_share(500_000, 1_000_000), 0.5);
        // No division by zero on a degenerate span.
        assert_eq!(cpu_share(0, 0), 0.0);
    }
}
