//! What a run measured, as the engine hands it over: the merged recorder, the per-second
//! points, bot outcomes and the embedded server's counters. The report reads only this (and
//! a [`RunInfo`](crate::metrics) it is given), never the engine.

use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::{
    HistSummary, NamedCounters, PhaseCounts, Recorder, SnapshotRateCounts, TargetPoint, Waiting,
};

/// Counters every reference server keeps; the serve command prints them.
#[derive(Debug, Default, Clone)]
pub struct ServerStats {
    /// Sessions open now (a gauge).
    pub clients: usize,
    /// Connections the transport holds open: ENet sessions, or raw UDP source addresses the
    /// server has not closed. A gauge, like `clients`.
    pub connections: usize,
    /// Handshakes accepted.
    pub accepted: u64,
    /// Handshakes refused (full, wrong version, ...).
    pub refused: u64,
    /// Sessions dropped for silence.
    pub timed_out: u64,
    /// Sessions the client ended.
    pub disconnected: u64,
    /// Datagrams (or messages) received.
    pub datagrams_in: u64,
    /// Datagrams (or messages) sent.
    pub datagrams_out: u64,
    /// Bytes received.
    pub bytes_in: u64,
    /// Bytes sent.
    pub bytes_out: u64,
    /// Malformed or unexpected datagrams, by `message.reason`.
    pub dropped: NamedCounters,
    /// Everything else worth counting (heartbeat echoes, skipped ticks, ...).
    pub events: NamedCounters,
    /// Datagram batches the driver failed to send (a `sendmmsg` error), counted by the
    /// driver rather than the protocol's server.
    pub send_errors: u64,
    /// How long each server tick took, timer due to output flushed (µs), as the driver
    /// measured it: what `/metrics` exposes as `tickswarm_server_tick_seconds`.
    pub tick_us: TickHistogram,
}

/// Server tick durations in µs (1 µs to 60 s, 3 significant digits): the driver records one
/// value per tick, read off the clock it already reads at the tick's start and one more read
/// once the tick's output is flushed.
#[derive(Debug, Clone)]
pub struct TickHistogram(pub Histogram<u64>);

impl Default for TickHistogram {
    fn default() -> Self {
        Self(super::new_histogram())
    }
}

impl TickHistogram {
    /// One tick of `us` microseconds (clamped into the histogram's range).
    pub fn record(&mut self, us: u64) {
        super::record(&mut self.0, us);
    }
}

impl ServerStats {
    /// Add another instance's counters (a fleet of instances reports as one).
    pub fn merge(&mut self, o: &ServerStats) {
        self.clients += o.clients;
        self.connections += o.connections;
        self.accepted += o.accepted;
        self.refused += o.refused;
        self.timed_out += o.timed_out;
        self.disconnected += o.disconnected;
        self.datagrams_in += o.datagrams_in;
        self.datagrams_out += o.datagrams_out;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
        self.dropped.merge(&o.dropped);
        self.events.merge(&o.events);
        self.send_errors += o.send_errors;
        // Same bounds on both sides: the add cannot fail.
        let _ = self.tick_us.0.add(&o.tick_us.0);
    }
}

/// One second of the run, for the time-series charts.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct IntervalPoint {
    /// Seconds since the run started (end of the interval).
    pub t: f64,
    pub bots_connected: u64,
    /// RTT percentiles of the second; `null` when no pong arrived in it (empty is not zero).
    pub rtt_p50_us: Option<u64>,
    pub rtt_p99_us: Option<u64>,
    /// Downstream loss of the second; `null` when no datagram was expected in it (no data,
    /// never 0 %).
    pub loss_down_rate: Option<f64>,
    pub packets_up: u64,
    pub packets_down: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// `null` when no input was due in the second.
    pub lateness_p99_us: Option<u64>,
    pub inputs_sent: u64,
    pub snapshots_applied: u64,
    /// The snapshot rate per bot in the second (snapshots the server sent a bot in a whole
    /// second in play, on average over the bots); `null` when no bot was in play for the whole
    /// second or the protocol counts no snapshots. `snapshot_rate` holds its sums.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_rate_hz: Option<f64>,
    /// The sums the rate is made of, which merge exactly across shards.
    #[serde(default, skip_serializing_if = "SnapshotRateCounts::is_empty")]
    pub snapshot_rate: SnapshotRateCounts,
    /// Bots per phase at the end of the interval (connecting, transport handshake, protocol
    /// handshake, content, in game, reconnecting, failed, closed).
    #[serde(default)]
    pub phases: PhaseCounts,
    /// Bots on their way into the game, grouped by phase and what they wait for, with how
    /// long the longest has waited; empty when every bot plays or has finished.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<Waiting>,
    /// Per target (game instance) when the bots play on two or more (and at most
    /// [`MAX_TARGETS`](super::phases::MAX_TARGETS)): bots per phase and payload bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetPoint>,
    /// The run's last, shorter interval (from the last whole second to the stop), so that the
    /// points add up to the run's totals. Absent (false) on whole seconds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    /// The generator's own health in the second (absent in the last, partial point; in a
    /// merged run, the shards' workers side by side and their processes' figures added up,
    /// for the seconds every shard has it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<GeneratorHealth>,
}

/// A worker above this share of one core in a second where input slots were skipped: the
/// generator, not the server, was the limit in that second.
pub const CPU_BOUND_SHARE: f64 = 0.9;

/// The generator's health in one second, beside its send lateness and skipped slots.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct GeneratorHealth {
    /// Each worker's CPU time in the second, as a share of one core (by worker id; `null`
    /// where its thread's clock could not be read).
    pub worker_cpu: Vec<Option<f64>>,
    /// The process's resident memory at the end of the second, in bytes.
    pub rss_bytes: Option<u64>,
    /// The process's open file descriptors (the bots' sockets, mostly).
    pub open_fds: Option<u64>,
    /// Local send and receive failures in the second.
    pub send_errors: u64,
    /// Input slots skipped in the second (the generator fell a whole period behind).
    pub inputs_skipped: u64,
    /// System calls that sent the bots' datagrams in the second, and the most datagrams one
    /// carried (absent where the transport does not count them: GNS, the TCP login).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_syscalls: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_batch_max: Option<u64>,
    /// The workers' CPU time in the second, summed over them (ns, user and system, from each
    /// worker thread's CPU clock, read once a second); absent where a clock could not be read
    /// (and in summaries written before it was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
    /// Datagrams the bots' sockets sent in the second (UDP payloads: for ENet its acks and
    /// retransmissions too, unlike `packets_up`); absent with `cpu_ns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datagrams_sent: Option<u64>,
    /// `cpu_ns` over `datagrams_sent`; absent without either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns_per_datagram_sent: Option<f64>,
}

/// CPU time per datagram (ns, rounded to 0.1 ns); `None` without CPU time or without a
/// datagram. The one division the engine, the report and `merge` make.
pub fn per_datagram(cpu_ns: Option<u64>, datagrams: u64) -> Option<f64> {
    let cpu = cpu_ns?;
    (datagrams > 0).then(|| (cpu as f64 / datagrams as f64 * 10.0).round() / 10.0)
}

impl GeneratorHealth {
    /// The busiest worker's share of a core.
    pub fn max_cpu(&self) -> Option<f64> {
        self.worker_cpu.iter().flatten().copied().reduce(f64::max)
    }

    /// The rule: a worker at [`CPU_BOUND_SHARE`] of a core or more while slots were skipped.
    pub fn cpu_bound(&self) -> bool {
        self.inputs_skipped > 0 && self.max_cpu().is_some_and(|c| c >= CPU_BOUND_SHARE)
    }
}

impl IntervalPoint {
    /// The second's RTT and send-lateness percentiles from its histograms, `None` where a
    /// histogram is absent or empty (empty is not zero). The engine fills its points this way,
    /// and `merge` fills the merged points from the runs' histograms the same way.
    pub fn set_percentiles(
        &mut self,
        rtt: Option<&Histogram<u64>>,
        lateness: Option<&Histogram<u64>>,
    ) {
        let of = |h: Option<&Histogram<u64>>| h.filter(|h| !h.is_empty()).map(HistSummary::of);
        let rtt = of(rtt);
        self.rtt_p50_us = rtt.as_ref().map(|h| h.p50);
        self.rtt_p99_us = rtt.map(|h| h.p99);
        self.lateness_p99_us = of(lateness).map(|h| h.p99);
    }
}

/// What a run measured.
pub struct RunOutcome {
    pub total: Recorder,
    pub intervals: Vec<IntervalPoint>,
    pub planned: u64,
    pub ever_connected: u64,
    pub failed: u64,
    /// Bots that were in play and lost their session before the run ended.
    pub bots_lost: u64,
    /// Bots in play at the end that had heard nothing from the server for a second or more.
    pub bots_silent_at_end: u64,
    pub started_at: SystemTime,
    pub elapsed: Duration,
    pub interrupted: bool,
    pub workers: usize,
    /// Workers that had not handed in their end when the run's end stopped waiting
    /// (`engine::END_GRACE` after the stop or the planned end): the report holds what they
    /// sent until then.
    pub unfinished_workers: Vec<usize>,
    /// The worker threads' CPU time over the run (ns, user and system: every worker's
    /// once-a-second readings of its thread's CPU clock and its last one at its end, summed);
    /// `None` where a clock could not be read. The main thread, the collector and an embedded
    /// server are not in it.
    pub worker_cpu_ns: Option<u64>,
    /// The workers' timer step (`engine.timer_coalesce` or the population's default; zero:
    /// none): inputs leave on steps, other timers up to a step late.
    pub timer_step: Duration,
    /// What was measured after the last whole second (the stop), so that the per-second
    /// histograms plus this add up to `total`.
    pub tail: Recorder,
    /// The embedded server's counters, when the target was embedded.
    pub server: Option<ServerStats>,
    pub target: String,
    /// Bots per source address, when the scenario has `engine.source_addresses`.
    pub sources: Option<SourceCounts>,
    /// The target's own metrics, scraped during the run (`server_metrics:`); the engine
    /// leaves it `None`, the CLI's scrapers fill it.
    pub server_metrics: Option<super::server_series::ServerMetrics>,
    /// Per group, in the scenario's order, when it has `groups:` (empty without).
    pub groups: Vec<super::groups::GroupOutcome>,
}

/// Bots per source address (`engine.source_addresses`): planned and ever connected. A pool
/// of more than 1,024 addresses is counted per network (`grouped_by`), so the table stays
/// small whatever the pool.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SourceCounts {
    /// `address`, or the prefix length each row's network has (`/24`, `/64`, `/16`, `/48`).
    pub grouped_by: String,
    /// Addresses in the pool (capped at 2^64 - 1 for IPv6 ranges wider than that).
    pub pool_size: u64,
    /// In address order; only addresses (networks) that had a bot planned or connected.
    pub rows: Vec<SourceRow>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SourceRow {
    /// The address, or the network (`127.0.1.0/24`).
    pub source: String,
    /// Bots of this run planned on it.
    pub planned: u64,
    /// Of those, bots that completed their handshake at least once.
    pub connected: u64,
}

#[cfg(test)]
mod health_tests {
    use super::*;

    #[test]
    fn cpu_bound_needs_a_busy_worker_and_a_skipped_slot() {
        let g = |cpu: Vec<Option<f64>>, skipped| GeneratorHealth {
            worker_cpu: cpu,
            inputs_skipped: skipped,
            ..GeneratorHealth::default()
        };
        assert!(g(vec![Some(0.2), Some(0.95)], 3).cpu_bound());
        assert!(g(vec![Some(0.9)], 1).cpu_bound());
        // Busy but keeping up, or behind without a busy worker: not the rule.
        assert!(!g(vec![Some(0.99)], 0).cpu_bound());
        assert!(!g(vec![Some(0.5), None], 5).cpu_bound());
        assert_eq!(g(vec![None, Some(0.3)], 0).max_cpu(), Some(0.3));
    }
}
