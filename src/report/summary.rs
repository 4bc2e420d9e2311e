//! summary.json: the v1 contract of a run's result. Keys are added, never renamed.
//!
//! Every type of the file is here, the `groups` block ([`GroupSummary`]) and a sharded
//! search's `staircase` ([`Staircase`]) included, so what makes and reads summaries sits
//! above it: [`super::groups`], [`super::build`], [`super::capacity`], [`super::merge`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::metrics::capacity::CapacityStep;
use crate::metrics::server_series::ServerMetrics;
pub use crate::metrics::IntervalPoint;
use crate::metrics::{HistSummary, LossSummary};

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(into = "BotCountsJson", from = "BotCountsJson")]
pub struct BotCounts {
    /// Peak population the scenario asked for.
    pub planned: u64,
    /// Bots that completed the handshake at least once.
    pub connected: u64,
    /// Bots whose handshake failed (by reason in `errors.connect`).
    pub failed: u64,
    /// Bots that were in play and lost their session before the run ended.
    #[serde(default)]
    pub lost: u64,
    /// Bots in play at the end that had heard nothing from the server for a second or more.
    #[serde(default)]
    pub silent_at_end: u64,
}

/// [`BotCounts`] as written: with `connect_rate`, computed from the counts on the way out,
/// so the `connect_success` threshold's `metric` is a real path into the file.
#[derive(Serialize, Deserialize)]
struct BotCountsJson {
    planned: u64,
    connected: u64,
    failed: u64,
    #[serde(default)]
    lost: u64,
    #[serde(default)]
    silent_at_end: u64,
    /// `connected / planned`; `null` with no bots planned.
    #[serde(default)]
    connect_rate: Option<f64>,
    /// `planned - connected`: refused, unanswered, without a socket, or still on their way
    /// in when the run ended.
    #[serde(default)]
    never_connected: u64,
}

impl From<BotCounts> for BotCountsJson {
    fn from(b: BotCounts) -> Self {
        Self {
            connect_rate: b.rate(),
            never_connected: b.never_connected(),
            planned: b.planned,
            connected: b.connected,
            failed: b.failed,
            lost: b.lost,
            silent_at_end: b.silent_at_end,
        }
    }
}

impl From<BotCountsJson> for BotCounts {
    fn from(j: BotCountsJson) -> Self {
        Self {
            planned: j.planned,
            connected: j.connected,
            failed: j.failed,
            lost: j.lost,
            silent_at_end: j.silent_at_end,
        }
    }
}

impl BotCounts {
    /// Planned bots that never completed a handshake, for whatever reason (refused,
    /// unanswered, without a socket, still on their way in when the run ended).
    pub fn never_connected(&self) -> u64 {
        self.planned.saturating_sub(self.connected)
    }

    /// `connected / planned`, `None` when no bot was planned.
    pub fn rate(&self) -> Option<f64> {
        (self.planned > 0).then(|| self.connected as f64 / self.planned as f64)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Loss {
    pub downstream: Option<LossSummary>,
    /// `null` where the protocol cannot measure it.
    pub upstream: Option<LossSummary>,
}

/// Application payload (`up_*`/`down_*`: protocol messages, whether a datagram each or
/// inside ENet packets) and what crossed the bots' sockets (`wire_*`: UDP payload, ENet's
/// headers, acks, retransmissions and fragments included). For raw UDP protocols the two are
/// equal.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Bandwidth {
    pub up_bytes: u64,
    pub down_bytes: u64,
    pub up_packets: u64,
    pub down_packets: u64,
    #[serde(default)]
    pub wire_up_bytes: u64,
    #[serde(default)]
    pub wire_down_bytes: u64,
    #[serde(default)]
    pub wire_up_packets: u64,
    #[serde(default)]
    pub wire_down_packets: u64,
    /// Payload bytes per second of one bot in play, one sample per bot per second.
    #[serde(default)]
    pub per_bot_up_bytes_per_s: HistSummary,
    #[serde(default)]
    pub per_bot_down_bytes_per_s: HistSummary,
    /// Payload message sizes in bytes.
    #[serde(default)]
    pub packet_size_up_bytes: HistSummary,
    #[serde(default)]
    pub packet_size_down_bytes: HistSummary,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Generator {
    /// How late inputs left relative to their intended grid time.
    pub send_lateness_us: HistSummary,
    /// Grid slots skipped because a worker fell a whole period behind.
    pub inputs_skipped: u64,
    pub workers: usize,
    /// Local send failures by reason (socket buffer full, ...).
    pub send_errors: std::collections::BTreeMap<String, u64>,
    /// Skipped grid slots over all slots due (sent + skipped); `null` when none were due.
    #[serde(default)]
    pub skipped_share: Option<f64>,
    /// Send lateness p99 over the input period; `null` without samples.
    #[serde(default)]
    pub lateness_p99_of_period: Option<f64>,
    /// The one rule for "the generator, not the server, was the bottleneck": more than
    /// 0.1 % of grid slots skipped, or a p99 send lateness above half the input period. The
    /// console, the report and the `generator_saturated` threshold all read this.
    #[serde(default)]
    pub saturated: bool,
    /// Seconds in which a worker used 90 % of a core or more while input slots were skipped
    /// (`intervals[].generator`): the generator, not the server, was the limit then.
    #[serde(default)]
    pub cpu_bound_seconds: u64,
    /// The busiest worker's highest CPU share of a second (of one core).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_cpu_max: Option<f64>,
    /// The process's highest resident memory and open descriptors, sampled once a second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_max_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_fds_max: Option<u64>,
    /// How the bots' datagrams went to the kernel: the send path, system calls per second and
    /// datagrams per call. Absent where the transport does not count them (GNS, TCP login).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_io: Option<SendIoSummary>,
    /// The worker threads' CPU time over the run (ns, user and system), from each worker's
    /// thread CPU clock (read once a second and once at its end, summed): the generator's own
    /// cost, the bots, the engine and the kernel's send and receive work done in the workers'
    /// time. Absent where a clock could not be read, in a group's block, and in summaries
    /// written before it was measured; `merge` adds the runs' (absent if one run lacks it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
    /// The workers' timer step in µs (`engine.timer_coalesce`, or by default about 1 ms, a
    /// division of the input period): the bots' input slots are on steps and
    /// leave at their own instants; other timers may wait up to a step. 0 without a step
    /// (and read as 0 from summaries written before it was recorded); `merge` keeps the
    /// largest.
    #[serde(default)]
    pub timer_step_us: u64,
    /// `cpu_ns` over the datagrams the bots' sockets sent (`bandwidth.wire_up_packets`): what
    /// one datagram sent costs this machine, to compare with a bare `send()` loop's
    /// (`scripts/bench_ceiling.sh`). Absent without `cpu_ns` or without a datagram.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns_per_datagram_sent: Option<f64>,
    /// `cpu_ns` over the datagrams the bots' sockets received (`bandwidth.wire_down_packets`):
    /// the same CPU, per datagram the other way (both directions share it: the two figures are
    /// two views of one cost, not its parts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns_per_datagram_received: Option<f64>,
}

/// How hard the generator works to put the bots' datagrams on the wire.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SendIoSummary {
    /// `io_uring` (batched sends across sockets), `send` (one `send()` per datagram: forced
    /// by `TICKSWARM_IO=plain` or io_uring unavailable), or `mixed` (workers differed).
    pub path: String,
    /// Workers on each path.
    pub workers_uring: u64,
    pub workers_plain: u64,
    /// System calls that sent datagrams, and the datagrams they carried.
    pub syscalls: u64,
    pub datagrams: u64,
    /// `syscalls` over the run's duration.
    pub syscalls_per_s: f64,
    /// Datagrams per system call, on average (`null` without a call) and at most.
    pub batch_mean: Option<f64>,
    pub batch_max: u64,
}

impl SendIoSummary {
    /// From a run's totals; `None` when no worker counted its sends.
    pub fn of(io: &crate::metrics::SendIo, duration_s: f64) -> Option<Self> {
        if io.workers_uring + io.workers_plain == 0 && io.syscalls == 0 {
            return None;
        }
        let mut s = SendIoSummary {
            workers_uring: io.workers_uring,
            workers_plain: io.workers_plain,
            syscalls: io.syscalls,
            datagrams: io.datagrams,
            batch_max: io.max_batch,
            ..SendIoSummary::default()
        };
        s.finish(duration_s);
        Some(s)
    }

    /// Add another run's (a shard's): counts summed, the largest batch kept, the derived
    /// figures computed again over `duration_s` (the merged run's).
    pub fn merge(&mut self, o: &SendIoSummary, duration_s: f64) {
        self.workers_uring += o.workers_uring;
        self.workers_plain += o.workers_plain;
        self.syscalls += o.syscalls;
        self.datagrams += o.datagrams;
        self.batch_max = self.batch_max.max(o.batch_max);
        self.finish(duration_s);
    }

    fn finish(&mut self, duration_s: f64) {
        self.path = match (self.workers_uring, self.workers_plain) {
            (0, _) => "send",
            (_, 0) => "io_uring",
            _ => "mixed",
        }
        .to_string();
        self.syscalls_per_s = if duration_s > 0.0 {
            (self.syscalls as f64 / duration_s * 10.0).round() / 10.0
        } else {
            0.0
        };
        self.batch_mean = (self.syscalls > 0)
            .then(|| (self.datagrams as f64 / self.syscalls as f64 * 100.0).round() / 100.0);
    }
}

/// Skipped share above which the generator counts as saturated.
pub const SATURATION_SKIPPED_SHARE: f64 = 0.001;
/// Send lateness p99, as a share of the input period, above which it counts as saturated.
pub const SATURATION_LATENESS_OF_PERIOD: f64 = 0.5;

impl Generator {
    /// Set the workers' CPU time and its figures per datagram sent and received (the one
    /// place they are derived: the run's end and `merge` both come here).
    pub fn set_cpu(&mut self, cpu_ns: Option<u64>, sent: u64, received: u64) {
        use crate::metrics::run::per_datagram;
        // A run's workers always use some CPU: zero is a clock never read, not a free run.
        self.cpu_ns = cpu_ns.filter(|&c| c > 0);
        self.cpu_ns_per_datagram_sent = per_datagram(self.cpu_ns, sent);
        self.cpu_ns_per_datagram_received = per_datagram(self.cpu_ns, received);
    }

    /// Fill in the saturation figures from the counts and `input_rate_hz`.
    pub fn judge_saturation(&mut self, inputs_sent: u64, input_rate_hz: f64) {
        let due = inputs_sent + self.inputs_skipped;
        self.skipped_share = (due > 0).then(|| self.inputs_skipped as f64 / due as f64);
        self.lateness_p99_of_period = (self.send_lateness_us.count > 0 && input_rate_hz > 0.0)
            .then(|| self.send_lateness_us.p99 as f64 * input_rate_hz / 1e6);
        self.saturated = self
            .skipped_share
            .is_some_and(|s| s > SATURATION_SKIPPED_SHARE)
            || self
                .lateness_p99_of_period
                .is_some_and(|l| l > SATURATION_LATENESS_OF_PERIOD);
    }
}

/// Intervals the scenario implies (microseconds); `null` where it implies none.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Expected {
    /// 1 s / the bots' input rate: the spacing of one bot's inputs on its send grid (the bots'
    /// own schedule, so always known when they send inputs).
    #[serde(default)]
    pub input_interval_us: Option<f64>,
    /// 1 s / the snapshot rate the scenario's `server.snapshot_rate` states: the spacing a
    /// bot's snapshots should arrive at. `null` when the scenario states none (tickswarm
    /// does not guess a server's rate).
    #[serde(default)]
    pub snapshot_interval_us: Option<f64>,
}

impl Expected {
    /// From the rates in Hz (0 or none: no figure).
    pub fn from_rates(input_hz: f64, snapshot_hz: Option<f64>) -> Self {
        let interval = |hz: f64| (hz.is_finite() && hz > 0.0).then(|| 1e6 / hz);
        Self {
            input_interval_us: interval(input_hz),
            snapshot_interval_us: snapshot_hz.and_then(interval),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ThresholdResult {
    /// Where the observed value sits in this summary, as a dotted JSON path (`rtt_us.p99`,
    /// `loss.downstream.rate`, `bots.connect_rate`, `errors.decode_total`,
    /// `generator.saturated`, whose `true` is observed as 1).
    pub metric: String,
    /// As written in the scenario, e.g. `rtt p99 < 50ms`.
    pub condition: String,
    /// The measured value in the metric's unit (µs for times, a fraction for rates).
    pub observed: Option<f64>,
    /// The condition held, or it was skipped (see `skipped`).
    pub ok: bool,
    /// A default check (the scenario did not ask for it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    /// Why this run could not take the metric at all (the dialect has no source for it, or
    /// the server never answered what it is read from): "not measurable", not "no data".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmeasurable: Option<String>,
    /// Unmeasurable, and the scenario skips such thresholds (`unmeasurable_thresholds:
    /// skip`): shown, but not part of the verdict.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(into = "ErrorsJson", from = "ErrorsJson")]
pub struct Errors {
    /// Malformed datagrams dropped, by `message.reason`.
    pub decode: std::collections::BTreeMap<String, u64>,
    /// Failed handshakes by reason.
    pub connect: std::collections::BTreeMap<String, u64>,
}

/// [`Errors`] as written: with `decode_total` (the sum of `decode`, computed on the way out),
/// so the `decode_errors` threshold's `metric` is a real path into the file.
#[derive(Serialize, Deserialize)]
struct ErrorsJson {
    decode: std::collections::BTreeMap<String, u64>,
    connect: std::collections::BTreeMap<String, u64>,
    #[serde(default)]
    decode_total: u64,
}

impl From<Errors> for ErrorsJson {
    fn from(e: Errors) -> Self {
        Self {
            decode_total: e.decode.values().sum(),
            decode: e.decode,
            connect: e.connect,
        }
    }
}

impl From<ErrorsJson> for Errors {
    fn from(j: ErrorsJson) -> Self {
        Self {
            decode: j.decode,
            connect: j.connect,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// Contract version of this file.
    pub schema: u32,
    pub protocol: String,
    pub transport: String,
    pub dialect: String,
    pub scenario: String,
    pub scenario_file: String,
    pub target: String,
    pub started_at: String,
    pub duration_s: f64,
    /// True when the run was cut short (Ctrl-C).
    pub interrupted: bool,
    /// The run stopped itself: a threshold failed `abort_on_fail` seconds in a row (which,
    /// for how long, and its last figure). The verdict is then a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted: Option<super::abort::Aborted>,
    pub seed: u64,
    /// Which slice of a sharded run this is (`--shard I/N`); absent for a whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardId>,
    /// Identifies what was run: the scenario file's bytes and the overrides that shape the
    /// population (bots, duration), hashed (FNV-1a 64, hex); the seed is `seed`. Shards of one run share it;
    /// `tickswarm merge` refuses runs whose hashes differ. Not a security measure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario_hash: Option<String>,
    /// What the run was given to name it (`run --label TEXT` or `TICKSWARM_LABEL`: a build
    /// id, a commit), for `tickswarm trend` to order runs by and show. Absent when none was
    /// given, and in files written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The tickswarm version that measured the run (`trend` says where it changes between
    /// runs: a change of the tool, not the server). Absent in files written before it was
    /// recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<String>,
    /// On a merged result of shards: which of how many were merged and which were missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_shards: Option<MergedShards>,
    pub bots: BotCounts,
    pub rtt_us: HistSummary,
    /// What `rtt_us` measures: `protocol_ping` (the bots' own Ping answered by the server,
    /// timed by the bot), `enet_acks` (the protocol has no ping its server answers; one sample
    /// per acknowledged ENet reliable command, ENet's pings included, timed by the transport),
    /// or `null` when nothing measures round trips (and `rtt_us` is empty).
    #[serde(default)]
    pub rtt_source: Option<String>,
    pub handshake_us: HistSummary,
    pub snapshot_interarrival_us: HistSummary,
    pub generator: Generator,
    pub loss: Loss,
    /// How each loss direction is measured for this protocol (or why it cannot be).
    pub loss_method: LossMethod,
    pub bandwidth: Bandwidth,
    pub inputs_sent: u64,
    pub snapshots_applied: u64,
    /// The server's snapshot rate per bot: snapshots it sent a bot in a whole second in play
    /// (received or counted lost, so loss does not lower it; ZergCity and R-Type's
    /// implementation dialect count what arrived), the slowest, median and fastest second,
    /// and each sustained change with when it began and the players in game then. Absent
    /// when no bot was in play for a whole second or the protocol counts no snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_rate: Option<crate::metrics::snapshot_rate::SnapshotRate>,
    pub errors: Errors,
    /// Bots per source address (`engine.source_addresses`), planned and connected; per
    /// network for pools of more than 1,024 addresses (`grouped_by`). Absent without a pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_addresses: Option<crate::metrics::SourceCounts>,
    /// The scenario's `network:` (the simulated link every bot socket's datagrams took), as
    /// written; absent when the run simulated none. What the link did is counted in
    /// `protocol_metrics` (`netsim_*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<serde_json::Value>,
    /// The target's own metrics, scraped during the run (`server_metrics:`): per endpoint,
    /// its scrapes, failures and per-second series on the run's clock with whole-run figures.
    /// Absent when the scenario scrapes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_metrics: Option<crate::metrics::server_series::ServerMetrics>,
    /// Per group of the population (`groups:` in the scenario), in the scenario's order:
    /// the same figures as the whole run's, under the same keys, beside the conditions the
    /// group was given (see [`GroupSummary`]). Absent when the scenario has no groups.
    #[serde(default, skip_serializing_if = "Groups::is_empty")]
    pub groups: Groups,
    /// Per-protocol extras: counters, and histograms as `{count,min,mean,p50,...}`.
    pub protocol_metrics: serde_json::Map<String, serde_json::Value>,
    /// How to read and show `protocol_metrics` entries (label, unit, card/chart/table), as
    /// the protocol declares them. Keys absent here are shown as plain table rows.
    #[serde(default)]
    pub protocol_metric_info: std::collections::BTreeMap<String, crate::metrics::MetricInfo>,
    /// What the run should show when all is well, for the report's expected-value lines:
    /// the bots' input interval and the snapshot interval the scenario states. Absent in
    /// files written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<Expected>,
    pub thresholds: Vec<ThresholdResult>,
    /// `pass` or `fail`.
    pub verdict: String,
    /// Per-second series (also drawn in report.html).
    pub intervals: Vec<IntervalPoint>,
    /// A capacity search's answer (`tickswarm capacity`): the players the server held, the
    /// interval, what limited it and every step; the rest of this file is then the window of
    /// the step the answer stands on. Absent for a plain run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<crate::metrics::capacity::Capacity>,
    /// One shard's part of a sharded capacity search (`tickswarm capacity --shard I/N`): the
    /// fixed staircase it followed and every step's window, which `merge` adds up across the
    /// shards to find the answer (see [`Staircase`]). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staircase: Option<Staircase>,
}

/// One group's figures, with the same keys (and meanings) as the whole run's.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct GroupSummary {
    /// The group's name (the key it is written under).
    #[serde(skip)]
    pub name: String,
    /// Its size as the scenario wrote it: `share 70%`, `count 5`, `arrival rate`.
    pub size: String,
    /// The simulated link the group's bots had (its own `network:` or the scenario's), as
    /// written: the injected conditions, beside what was measured. `null`: the real link.
    #[serde(default)]
    pub network: Option<Value>,
    /// Sessions of the group: planned, connected, failed, lost, silent at the end.
    pub bots: BotCounts,
    pub rtt_us: HistSummary,
    pub handshake_us: HistSummary,
    pub snapshot_interarrival_us: HistSummary,
    pub generator: Generator,
    pub loss: Loss,
    pub bandwidth: Bandwidth,
    pub inputs_sent: u64,
    pub snapshots_applied: u64,
    pub errors: Errors,
    /// What the group's `lifecycle:` scheduled and what the engine did of it; absent
    /// without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<LifecycleSummary>,
    /// The protocol's own figures for this group (prediction error, corrections, the
    /// transport's handshake, the simulated link's drops as `netsim_*`).
    pub protocol_metrics: Map<String, Value>,
    /// The group's whole-run histograms by hlog tag, compressed V2 in base64: what `merge`
    /// adds up.
    #[serde(default)]
    pub histograms: BTreeMap<String, String>,
    /// The group's bots per source address (its own `source_addresses`, or its share of
    /// `engine.source_addresses`), as the whole run's `source_addresses`. Absent when its
    /// bots bind to no pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_addresses: Option<crate::metrics::SourceCounts>,
    /// The group's per-second series, on the whole run's time axis (`intervals[].t`): bots
    /// in play, RTT p50/p99, loss each way as counts, payload, and what its simulated link
    /// was given and dropped. What report.html's per-group charts draw.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intervals: Vec<crate::metrics::groups::GroupPoint>,
}

/// A group's lifecycle: the schedule, and what happened of it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct LifecycleSummary {
    pub planned: crate::metrics::groups::LifecyclePlan,
    pub done: crate::metrics::groups::LifecycleDone,
}

/// The groups in the scenario's order, written as an object keyed by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Groups(pub Vec<GroupSummary>);

impl Groups {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&GroupSummary> {
        self.0.iter().find(|g| g.name == name)
    }
}

impl Serialize for Groups {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for g in &self.0 {
            m.serialize_entry(&g.name, g)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Groups {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Groups;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of groups by name")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Groups, A::Error> {
                let mut out = Vec::new();
                while let Some((name, mut g)) = a.next_entry::<String, GroupSummary>()? {
                    if out.len() >= crate::metrics::groups::MAX_GROUPS {
                        return Err(serde::de::Error::custom(format!(
                            "more than {} groups",
                            crate::metrics::groups::MAX_GROUPS
                        )));
                    }
                    g.name = name;
                    out.push(g);
                }
                Ok(Groups(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// One shard's part of a sharded capacity search (summary.json `staircase`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Staircase {
    /// The shared start time, in milliseconds since the Unix epoch.
    pub start_at_ms: u64,
    /// The populations of the staircase, whole (every shard's bots), in order: the plan, also
    /// past the steps this shard ran.
    pub plan: Vec<u64>,
    /// The objectives every step is judged on, as the scenario wrote them.
    pub objectives: Vec<String>,
    /// Conditions on the answer (`capacity >= 400`), judged once merged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_answer: Vec<String>,
    /// Round-trip samples a window needs before an RTT objective is judged.
    pub min_samples: u64,
    /// The resolution the scenario asked for (a staircase's own is its step).
    pub resolution: f64,
    /// `capacity.max_players`: a staircase that held up to it found a lower bound; one cut
    /// short of it (by the time budget) is unfinished.
    pub max_players: u64,
    /// The steps this shard ran, in order.
    pub steps: Vec<StaircaseStep>,
    /// Why this shard ran fewer steps than planned, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// One step of one shard's staircase.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StaircaseStep {
    /// The step as this shard judged its own slice (its `players` are the whole step's).
    pub record: CapacityStep,
    /// The window's start, in milliseconds since the Unix epoch (as this shard's clock read it).
    pub window_start_ms: u64,
    /// The window's figures and histograms (named `step N`).
    pub window: GroupSummary,
    /// The server's series scraped over the window, when this shard scraped any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_metrics: Option<ServerMetrics>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LossMethod {
    pub downstream: String,
    pub upstream: String,
}

/// One shard of a run: index `I` of `N` (`--shard I/N`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ShardId {
    pub index: u32,
    pub count: u32,
}

/// The shards a merged result holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct MergedShards {
    pub count: u32,
    pub merged: Vec<u32>,
    /// Shards not merged (`merge --allow-missing`): the verdict fails while any is missing.
    pub missing: Vec<u32>,
}

/// The most characters a run's label may have: a build id or a commit, not prose.
pub const MAX_LABEL_CHARS: usize = 128;

/// A label as `run --label` takes it: 1 to [`MAX_LABEL_CHARS`] characters, no control
/// characters (it is printed on the console and in pages, one line). Leading and trailing
/// blanks are dropped.
pub fn check_label(text: &str) -> Result<String, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("a label must not be empty".into());
    }
    if t.chars().count() > MAX_LABEL_CHARS {
        return Err(format!(
            "a label has at most {MAX_LABEL_CHARS} characters (a build id, a commit), not {}",
            t.chars().count()
        ));
    }
    if t.chars().any(char::is_control) {
        return Err("a label must not hold control characters (a newline, a tab, ...)".into());
    }
    Ok(t.to_string())
}

/// A label read from a file from elsewhere, fit to show: control characters as `?`, cut to
/// [`MAX_LABEL_CHARS`] characters (with `…`). What [`check_label`] accepts is kept as it is.
pub fn shown_label(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(MAX_LABEL_CHARS)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if text.chars().nth(MAX_LABEL_CHARS).is_some() {
        out.push('…');
    }
    out
}

/// FNV-1a, 64 bits: a stable identity of what was run (the same on every machine and
/// version), for telling shards of one run from others. Not a security measure.
pub fn fnv1a64(parts: &[&[u8]]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator, so ("ab","c") and ("a","bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// `pass` when every threshold held (or was skipped), else `fail`: the one rule every
/// verdict is judged by (a run, a group, a merge, an interrupted run's check).
pub fn verdict_of(results: &[ThresholdResult]) -> String {
    if results.iter().all(|t| t.ok) {
        "pass".into()
    } else {
        "fail".into()
    }
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    /// A summary written before the CPU figures were measured still loads: they read as
    /// absent (the timer step as 0), never as a CPU of 0.
    #[test]
    fn a_generator_block_without_the_cpu_figures_still_loads() {
        let g: Generator = serde_json::from_value(serde_json::json!({
            "send_lateness_us": HistSummary::default(),
            "inputs_skipped": 0,
            "workers": 2,
            "send_errors": {},
        }))
        .expect("an older generator block");
        assert_eq!(
            (g.cpu_ns, g.cpu_ns_per_datagram_sent, g.timer_step_us),
            (None, None, 0)
        );
        let text = serde_json::to_string(&g).expect("written");
        assert!(!text.contains("cpu_ns"), "{text}");
    }

    /// The CPU over each direction's datagrams, rounded to 0.1 ns; a CPU of 0 is a clock never
    /// read, not a free run.
    #[test]
    fn cpu_per_datagram_divides_the_cpu_by_each_direction() {
        let mut g = Generator::default();
        g.set_cpu(Some(10_000_000), 3_000, 7_000);
        assert_eq!(g.cpu_ns_per_datagram_sent, Some(3_333.3));
        assert_eq!(g.cpu_ns_per_datagram_received, Some(1_428.6));
        g.set_cpu(Some(0), 3_000, 7_000);
        assert_eq!((g.cpu_ns, g.cpu_ns_per_datagram_sent), (None, None));
    }
}
