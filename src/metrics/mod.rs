//! Per-worker metric recorders and their lossless merge.
//!
//! A [`Recorder`] belongs to one worker and is written on the hot path without locks; every
//! second the worker hands a copy to the collector and resets it. Histograms hold microseconds
//! with three significant figures; adding two histograms is exact, so intervals merge into
//! totals, and shards from several machines merge into one report, without losing anything.

pub mod capacity;
pub mod describe;
pub mod groups;
mod named;
pub mod phases;
pub mod run;
pub mod server_budget;
pub mod server_series;
pub mod snapshot_rate;
pub mod sources;
pub mod summary;
pub mod threshold;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

pub use describe::{MetricDesc, MetricInfo};
pub use named::NamedCounters;
pub use phases::{Phase, PhaseCounts, TargetPoint, Waiting};
pub use run::{IntervalPoint, RunOutcome, ServerStats, SourceCounts, SourceRow};
pub use summary::{HistSummary, LossSummary};
pub use threshold::{Metric, Threshold};

/// Highest value a histogram tracks: one minute in microseconds. Larger values saturate.
pub const HIST_MAX_US: u64 = 60_000_000;
/// Significant figures kept by every histogram.
pub const HIST_SIGFIG: u8 = 3;
/// The highest value the counters of the whole range (1 to [`HIST_MAX_US`]) hold:
/// HdrHistogram's counters at 3 digits come in buckets of 2,048 sub-buckets doubling in
/// width, so they end one below the power of two past [`HIST_MAX_US`] (2^26 - 1). A value up
/// to it is recorded as it is; a larger one as [`HIST_MAX_US`] (the crate's saturating rule).
pub const HIST_TOP: u64 = {
    let mut top = 2048;
    while top <= HIST_MAX_US {
        top *= 2;
    }
    top - 1
};

/// The bound a new histogram is made with: the smallest the crate accepts, which gets it
/// HdrHistogram's first bucket at [`HIST_SIGFIG`] digits (2,048 counters, 16 KiB, values to
/// 2,047) before it grows.
const HIST_FIRST_HIGH: u64 = 2;

/// A histogram of the project's layout (1 to [`HIST_MAX_US`], [`HIST_SIGFIG`] digits) whose
/// counters grow with the largest value recorded, record through [`record`].
///
/// Why grow: the whole range is 17,408 counters (136 KiB), written (so resident) when
/// allocated, and a run holds dozens of histograms (eight per recorder: each worker's, its
/// once-a-second hand-over, the collector's); most never see a value past a few
/// milliseconds. Grown, a histogram of RTTs under 2 ms holds 16 KiB, one under 65 ms 56 KiB.
/// Values, precision and merges are those of the full range: the counters a larger value
/// needs are appended (at most once per power of two), and adding a larger histogram grows
/// this one first.
pub fn new_histogram() -> Histogram<u64> {
    // The bounds are constants known to be valid.
    let mut h = Histogram::new_with_bounds(1, HIST_FIRST_HIGH, HIST_SIGFIG)
        .expect("valid histogram bounds");
    h.auto(true);
    h
}

/// A histogram of the project's layout over the whole range, as every histogram was before
/// they grew: what tests hold a grown one against.
#[cfg(test)]
pub(crate) fn whole_range_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, HIST_SIGFIG).expect("valid histogram bounds")
}

/// Record `value` once: see [`record_n`].
pub fn record(h: &mut Histogram<u64>, value: u64) {
    record_n(h, value, 1);
}

/// Record `value` `count` times, clamped into the project's bounds (0 counts as 1 µs, past
/// [`HIST_TOP`] as [`HIST_MAX_US`]), growing a [`new_histogram`] when it is the largest value
/// yet: the counts a histogram of the whole range would have.
///
/// The crate's own `saturating_record` would clamp to the counters a growing histogram has
/// so far, not to the project's bounds, so nothing records through it
/// (`clippy.toml` refuses it).
pub fn record_n(h: &mut Histogram<u64>, value: u64, count: u64) {
    let value = if value > HIST_TOP {
        HIST_MAX_US
    } else {
        value.max(1)
    };
    if h.record_n(value, count).is_err() {
        // Only a histogram made with fixed bounds (not by `new_histogram`: none in the crate)
        // can refuse a value within the whole range: it saturates to its highest rather than
        // being lost.
        #[allow(clippy::disallowed_methods)]
        h.saturating_record_n(value, count);
    }
}

/// Expected versus received datagrams in one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LossCounts {
    /// Datagrams (or messages) that should have arrived.
    pub expected: u64,
    /// Of those, the ones that did.
    pub received: u64,
}

impl LossCounts {
    /// Count `expected` more, of which `received` arrived.
    pub fn add(&mut self, expected: u64, received: u64) {
        self.expected += expected;
        self.received += received;
    }

    /// Add another count (another bot, worker or second).
    pub fn merge(&mut self, o: &LossCounts) {
        self.add(o.expected, o.received);
    }

    /// Fraction lost, 0 when nothing was expected.
    pub fn rate(&self) -> f64 {
        if self.expected == 0 {
            0.0
        } else {
            self.expected.saturating_sub(self.received) as f64 / self.expected as f64
        }
    }
}

/// The bots' snapshot rate as sums that merge exactly (across workers, seconds and shards):
/// whole seconds bots spent in play, and the snapshots the server sent them in those seconds.
/// Their ratio is the rate per bot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRateCounts {
    /// Whole seconds in play, one per bot per second, of bots whose protocol counts
    /// snapshots sent.
    pub bot_seconds: u64,
    /// Snapshots the server sent those bots in those seconds.
    pub snapshots: u64,
}

impl SnapshotRateCounts {
    /// Add `o` (exact).
    pub fn merge(&mut self, o: &SnapshotRateCounts) {
        self.bot_seconds += o.bot_seconds;
        self.snapshots += o.snapshots;
    }

    /// No sample.
    pub fn is_empty(&self) -> bool {
        self.bot_seconds == 0
    }

    /// Snapshots per bot per second; `None` without a sample.
    pub fn hz(&self) -> Option<f64> {
        (self.bot_seconds > 0).then(|| self.snapshots as f64 / self.bot_seconds as f64)
    }
}

/// All a worker measures. Protocols write into it through the methods below.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// Round-trip times in microseconds (`rtt` thresholds).
    pub rtt_us: Histogram<u64>,
    /// Handshake times in microseconds, from `start` to the server's accept.
    pub handshake_us: Histogram<u64>,
    /// Time between consecutive snapshots, in microseconds.
    pub snapshot_interarrival_us: Histogram<u64>,
    /// How late each input left relative to its intended time on the grid (coordinated
    /// omission guard: large values mean the generator, not the server, was slow).
    pub send_lateness_us: Histogram<u64>,
    /// Application messages sent (counted by the caller, not the bot).
    pub packets_up: u64,
    /// Application messages received (counted by the caller).
    pub packets_down: u64,
    /// Application payload bytes sent.
    pub bytes_up: u64,
    /// Application payload bytes received.
    pub bytes_down: u64,
    /// Inputs sent: a bot adds one per input.
    pub inputs_sent: u64,
    /// Grid slots skipped because the worker was more than a whole period late.
    pub inputs_skipped: u64,
    /// Snapshots the bot understood and applied (a default check needs this above 0).
    pub snapshots_applied: u64,
    /// Snapshots the server sent the bots as their snapshot ticks tell: those received plus
    /// those counted lost (`TickNews::sent`), so a server's send rate reads true under loss.
    /// Written by the bots of protocols that number their snapshots; 0 for others.
    pub snapshots_sent: u64,
    /// The bots' snapshot rate, sampled by the engine over whole seconds in play.
    pub snapshot_rate: SnapshotRateCounts,
    /// Downstream loss: what the server sent against what arrived.
    pub loss_down: LossCounts,
    /// Upstream loss, where the server reports what it received.
    pub loss_up: LossCounts,
    /// Handshakes that completed (counted by the engine from the bot's phase).
    pub connects_ok: u64,
    /// Failed handshakes by reason (timeout, refused, ...).
    pub connect_failures: NamedCounters,
    /// Malformed datagrams by `message.reason`.
    pub decode_errors: NamedCounters,
    /// Protocol-specific counters (reported under `protocol_metrics`).
    pub events: NamedCounters,
    /// Protocol-specific histograms (reported under `protocol_metrics`).
    pub extra: Vec<(&'static str, Histogram<u64>)>,
    /// Local send failures (socket buffer full and the like), by reason.
    pub send_errors: NamedCounters,
    /// What crossed the bots' sockets (UDP payload: for ENet, its headers, acks,
    /// retransmissions and fragments included), next to the application payload counted in
    /// `packets_*`/`bytes_*`.
    pub wire: WireCounts,
    /// Application payload bytes one bot sent (received) in one second: one sample per bot
    /// per second it was in play from start to end (not the second it connected in).
    pub bot_up_bytes_per_s: Histogram<u64>,
    /// Application payload bytes one bot received in one second (see above).
    pub bot_down_bytes_per_s: Histogram<u64>,
    /// Application payload sizes, one sample per message (datagram or ENet packet).
    pub packet_size_up: Histogram<u64>,
    /// Received application payload sizes, one sample per message.
    pub packet_size_down: Histogram<u64>,
    /// How the bots' sends went to the kernel (system calls, datagrams per call): how hard
    /// the generator works. Counted by transports that send datagram by datagram (raw UDP).
    pub send_io: SendIo,
}

/// How a worker's sends went to the kernel: system calls and the datagrams they carried.
/// Merged exactly across workers, intervals and shards (sums and a max).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendIo {
    /// System calls that sent datagrams (`send()`, or `io_uring_enter` with sends).
    pub syscalls: u64,
    /// Datagrams handed to those calls (sent or refused by the kernel).
    pub datagrams: u64,
    /// Most datagrams one call carried.
    pub max_batch: u64,
    /// Workers that sent through io_uring, and through plain `send()` (counted once each,
    /// when the worker starts).
    pub workers_uring: u64,
    pub workers_plain: u64,
}

impl SendIo {
    /// One system call that carried `n` datagrams.
    pub fn call(&mut self, n: usize) {
        self.syscalls += 1;
        self.datagrams += n as u64;
        self.max_batch = self.max_batch.max(n as u64);
    }

    /// `self` and `o` together.
    pub fn merged_with(&self, o: &SendIo) -> SendIo {
        let mut m = *self;
        m.merge(o);
        m
    }

    pub fn merge(&mut self, o: &SendIo) {
        self.syscalls += o.syscalls;
        self.datagrams += o.datagrams;
        self.max_batch = self.max_batch.max(o.max_batch);
        self.workers_uring += o.workers_uring;
        self.workers_plain += o.workers_plain;
    }
}

/// Datagrams and their bytes as they crossed the sockets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireCounts {
    /// Datagrams sent through the bots' sockets.
    pub packets_up: u64,
    /// Datagrams received.
    pub packets_down: u64,
    /// Bytes sent.
    pub bytes_up: u64,
    /// Bytes received.
    pub bytes_down: u64,
}

impl WireCounts {
    /// Add another count.
    pub fn merge(&mut self, o: &WireCounts) {
        self.packets_up += o.packets_up;
        self.packets_down += o.packets_down;
        self.bytes_up += o.bytes_up;
        self.bytes_down += o.bytes_down;
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self {
            rtt_us: new_histogram(),
            handshake_us: new_histogram(),
            snapshot_interarrival_us: new_histogram(),
            send_lateness_us: new_histogram(),
            packets_up: 0,
            packets_down: 0,
            bytes_up: 0,
            bytes_down: 0,
            inputs_sent: 0,
            inputs_skipped: 0,
            snapshots_applied: 0,
            snapshots_sent: 0,
            snapshot_rate: SnapshotRateCounts::default(),
            loss_down: LossCounts::default(),
            loss_up: LossCounts::default(),
            connects_ok: 0,
            connect_failures: NamedCounters::default(),
            decode_errors: NamedCounters::default(),
            events: NamedCounters::default(),
            extra: Vec::new(),
            send_errors: NamedCounters::default(),
            wire: WireCounts::default(),
            bot_up_bytes_per_s: new_histogram(),
            bot_down_bytes_per_s: new_histogram(),
            packet_size_up: new_histogram(),
            packet_size_down: new_histogram(),
            send_io: SendIo::default(),
        }
    }

    /// One round trip, in microseconds.
    pub fn record_rtt(&mut self, us: u64) {
        record(&mut self.rtt_us, us);
    }

    /// One handshake time, in microseconds.
    pub fn record_handshake(&mut self, us: u64) {
        record(&mut self.handshake_us, us);
        self.connects_ok += 1;
    }

    /// The time between two snapshots that count for loss, in microseconds.
    pub fn record_snapshot_interarrival(&mut self, us: u64) {
        record(&mut self.snapshot_interarrival_us, us);
    }

    /// How late one input left against its grid slot, in microseconds.
    pub fn record_lateness(&mut self, us: u64) {
        // Zero lateness is the common case; the histogram's floor is 1 µs.
        record(&mut self.send_lateness_us, us);
    }

    /// One sample of the protocol's own histogram `name` (listed in `ProtocolInfo::metrics`).
    pub fn record_extra(&mut self, name: &'static str, value: u64) {
        let h = match self.extra.iter().position(|(n, _)| *n == name) {
            Some(i) => &mut self.extra[i].1,
            None => {
                self.extra.push((name, new_histogram()));
                let last = self.extra.len() - 1;
                &mut self.extra[last].1
            }
        };
        record(h, value);
    }

    /// The protocol's own histogram `name`, if it has a sample (what a protocol's tests read).
    pub fn extra(&self, name: &str) -> Option<&Histogram<u64>> {
        self.extra.iter().find(|(n, _)| *n == name).map(|(_, h)| h)
    }

    /// One datagram the bot could not read: `message` is what it was, `reason` why (`decode_errors` thresholds).
    pub fn decode_error(&mut self, message: &'static str, reason: &'static str) {
        self.decode_errors.add2(message, reason, 1);
    }

    /// One occurrence of the protocol's own counter `name`.
    pub fn event(&mut self, name: &'static str) {
        self.events.add(name, 1);
    }

    /// One application message sent (a datagram for raw UDP, an ENet packet for ENet).
    pub fn datagram_up(&mut self, bytes: usize) {
        self.packets_up += 1;
        self.bytes_up += bytes as u64;
        record(&mut self.packet_size_up, bytes as u64);
    }

    /// One application message received.
    pub fn datagram_down(&mut self, bytes: usize) {
        self.packets_down += 1;
        self.bytes_down += bytes as u64;
        record(&mut self.packet_size_down, bytes as u64);
    }

    /// One datagram left a bot socket.
    pub fn wire_up(&mut self, bytes: usize) {
        self.wire.packets_up += 1;
        self.wire.bytes_up += bytes as u64;
    }

    /// One datagram arrived on a bot socket (at its real size, even if it was cut short).
    pub fn wire_down(&mut self, bytes: usize) {
        self.wire.packets_down += 1;
        self.wire.bytes_down += bytes as u64;
    }

    /// The histogram a time threshold reads (`rtt`, `handshake`, `send_lateness`,
    /// `snapshot_interarrival`).
    pub fn time_histogram(&self, m: threshold::TimeMetric) -> &Histogram<u64> {
        match m {
            threshold::TimeMetric::Rtt => &self.rtt_us,
            threshold::TimeMetric::Handshake => &self.handshake_us,
            threshold::TimeMetric::SendLateness => &self.send_lateness_us,
            threshold::TimeMetric::SnapshotInterarrival => &self.snapshot_interarrival_us,
        }
    }

    /// A bot's snapshots (sent to it, by [`Recorder::snapshots_sent`]) over the last whole
    /// second in play.
    pub fn record_bot_snapshot_second(&mut self, snapshots: u64) {
        self.snapshot_rate.bot_seconds += 1;
        self.snapshot_rate.snapshots += snapshots;
    }

    /// A bot's application bytes over the last second, up and down.
    pub fn record_bot_second(&mut self, up: u64, down: u64) {
        record(&mut self.bot_up_bytes_per_s, up);
        record(&mut self.bot_down_bytes_per_s, down);
    }

    /// Add everything in `o` to `self` (exact).
    pub fn merge(&mut self, o: &Recorder) {
        // Same bounds on both sides, so `add` cannot fail.
        let _ = self.rtt_us.add(&o.rtt_us);
        let _ = self.handshake_us.add(&o.handshake_us);
        let _ = self
            .snapshot_interarrival_us
            .add(&o.snapshot_interarrival_us);
        let _ = self.send_lateness_us.add(&o.send_lateness_us);
        let _ = self.bot_up_bytes_per_s.add(&o.bot_up_bytes_per_s);
        let _ = self.bot_down_bytes_per_s.add(&o.bot_down_bytes_per_s);
        let _ = self.packet_size_up.add(&o.packet_size_up);
        let _ = self.packet_size_down.add(&o.packet_size_down);
        self.wire.merge(&o.wire);
        self.send_io.merge(&o.send_io);
        self.packets_up += o.packets_up;
        self.packets_down += o.packets_down;
        self.bytes_up += o.bytes_up;
        self.bytes_down += o.bytes_down;
        self.inputs_sent += o.inputs_sent;
        self.inputs_skipped += o.inputs_skipped;
        self.snapshots_applied += o.snapshots_applied;
        self.snapshots_sent += o.snapshots_sent;
        self.snapshot_rate.merge(&o.snapshot_rate);
        self.loss_down.merge(&o.loss_down);
        self.loss_up.merge(&o.loss_up);
        self.connects_ok += o.connects_ok;
        self.connect_failures.merge(&o.connect_failures);
        self.decode_errors.merge(&o.decode_errors);
        self.events.merge(&o.events);
        self.send_errors.merge(&o.send_errors);
        for (name, h) in &o.extra {
            match self.extra.iter_mut().find(|(n, _)| n == name) {
                Some((_, mine)) => {
                    let _ = mine.add(h);
                }
                None => self.extra.push((name, h.clone())),
            }
        }
    }

    /// Hand over what was recorded since the last call and start afresh. Runs once a second
    /// per worker, so the clone is off the hot path.
    pub fn take_interval(&mut self) -> Recorder {
        let out = self.clone();
        self.reset();
        out
    }

    /// Zero everything, keeping histogram storage and counter names.
    pub fn reset(&mut self) {
        self.rtt_us.reset();
        self.handshake_us.reset();
        self.snapshot_interarrival_us.reset();
        self.send_lateness_us.reset();
        self.bot_up_bytes_per_s.reset();
        self.bot_down_bytes_per_s.reset();
        self.packet_size_up.reset();
        self.packet_size_down.reset();
        self.wire = WireCounts::default();
        self.send_io = SendIo::default();
        for (_, h) in &mut self.extra {
            h.reset();
        }
        self.packets_up = 0;
        self.packets_down = 0;
        self.bytes_up = 0;
        self.bytes_down = 0;
        self.inputs_sent = 0;
        self.inputs_skipped = 0;
        self.snapshots_applied = 0;
        self.snapshots_sent = 0;
        self.snapshot_rate = SnapshotRateCounts::default();
        self.loss_down = LossCounts::default();
        self.loss_up = LossCounts::default();
        self.connects_ok = 0;
        self.connect_failures.zero();
        self.decode_errors.zero();
        self.events.zero();
        self.send_errors.zero();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (counter's value, count) of every non-zero counter.
    fn counts(h: &Histogram<u64>) -> Vec<(u64, u64)> {
        h.iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    }

    #[test]
    fn the_whole_range_ends_at_hist_top() {
        let mut h = whole_range_histogram();
        assert!(h.record(HIST_TOP).is_ok());
        assert!(h.record(HIST_TOP + 1).is_err());
        assert_eq!(HIST_TOP, (1 << 26) - 1);
    }

    #[test]
    fn a_growing_histogram_counts_what_the_whole_range_counts() {
        let values = [
            0,
            1,
            2,
            1_500,
            2_047,
            2_048,
            4_095,
            70_000,
            59_999_999,
            HIST_MAX_US,
            HIST_MAX_US + 1,
            HIST_TOP,
            HIST_TOP + 1,
            u64::MAX,
        ];
        let mut grown = new_histogram();
        let mut whole = whole_range_histogram();
        for v in values {
            record(&mut grown, v);
            #[allow(clippy::disallowed_methods)]
            whole.saturating_record(v.max(1));
        }
        assert_eq!(counts(&grown), counts(&whole));
        assert_eq!(grown.len(), values.len() as u64);
        assert_eq!(grown.max(), whole.max());
        assert_eq!(grown.min_nz(), whole.min_nz());
        for q in [0.5, 0.9, 0.99, 1.0] {
            assert_eq!(grown.value_at_quantile(q), whole.value_at_quantile(q));
        }
        // Merged either way round, the same counts.
        let mut small = new_histogram();
        record(&mut small, 900);
        small.add(&whole).unwrap();
        let mut into_whole = whole_range_histogram();
        into_whole.add(&grown).unwrap();
        record(&mut into_whole, 900);
        assert_eq!(counts(&small), counts(&into_whole));
    }

    #[test]
    fn a_new_histogram_holds_the_counters_its_largest_value_needs() {
        let mut h = new_histogram();
        // One bucket of 2,048 counters: 16 KiB.
        assert_eq!(h.distinct_values(), 2_048);
        record(&mut h, 1_999);
        assert_eq!(h.distinct_values(), 2_048);
        // Each doubling of the largest value adds a half bucket (1,024 counters, 8 KiB).
        record(&mut h, 3_000);
        assert_eq!(h.distinct_values(), 3_072);
        record(&mut h, 60_000);
        assert_eq!(h.distinct_values(), 2_048 + 5 * 1_024);
        // At most the whole range's.
        record(&mut h, u64::MAX);
        assert_eq!(
            h.distinct_values(),
            whole_range_histogram().distinct_values()
        );
        assert_eq!(h.distinct_values(), 17_408);
    }

    /// A recorder is made once per worker, per second handed over and per open second: it
    /// starts with each histogram's first bucket only (128 KiB of counters in all, where the
    /// whole range was 1.1 MiB), and a second's hand-over keeps what it grew to.
    #[test]
    fn a_new_recorder_starts_with_first_buckets_only() {
        let counters = |r: &Recorder| -> usize {
            [
                &r.rtt_us,
                &r.handshake_us,
                &r.snapshot_interarrival_us,
                &r.send_lateness_us,
                &r.bot_up_bytes_per_s,
                &r.bot_down_bytes_per_s,
                &r.packet_size_up,
                &r.packet_size_down,
            ]
            .iter()
            .map(|h| h.distinct_values())
            .sum()
        };
        let mut r = Recorder::new();
        assert_eq!(counters(&r), 8 * 2_048);
        r.record_rtt(70_000);
        let second = r.take_interval();
        assert_eq!(counters(&second), 7 * 2_048 + 2_048 + 6 * 1_024);
        assert_eq!(second.rtt_us.len(), 1);
        assert!(r.rtt_us.is_empty());
    }

    #[test]
    fn merge_is_exact() {
        let mut a = Recorder::new();
        let mut b = Recorder::new();
        for v in [100, 200, 300] {
            a.record_rtt(v);
        }
        for v in [400, 500] {
            b.record_rtt(v);
        }
        b.decode_error("snapshot", "bad_size");
        b.record_extra("x", 7);
        a.merge(&b);
        assert_eq!(a.rtt_us.len(), 5);
        assert_eq!(a.rtt_us.max(), a.rtt_us.highest_equivalent(500));
        assert_eq!(a.decode_errors.get("snapshot.bad_size"), 1);
        assert_eq!(a.extra.len(), 1);
    }

    #[test]
    fn take_interval_resets_but_keeps_names() {
        let mut a = Recorder::new();
        a.record_rtt(100);
        a.event("pong_late");
        a.record_extra("x", 3);
        let first = a.take_interval();
        assert_eq!(first.rtt_us.len(), 1);
        assert_eq!(first.events.get("pong_late"), 1);
        assert_eq!(a.rtt_us.len(), 0);
        assert_eq!(a.events.get("pong_late"), 0);
        assert_eq!(a.extra[0].1.len(), 0);
        a.record_rtt(50);
        assert_eq!(a.rtt_us.len(), 1);
    }

    #[test]
    fn loss_rate() {
        let l = LossCounts {
            expected: 200,
            received: 190,
        };
        assert!((l.rate() - 0.05).abs() < 1e-12);
        assert_eq!(LossCounts::default().rate(), 0.0);
    }
}
