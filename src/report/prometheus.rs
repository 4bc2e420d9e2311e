//! Live metrics of a run in progress, in Prometheus' text exposition format (0.0.4).
//!
//! Fed once a second from the same per-second data as the progress line, the hlog and the
//! report's charts ([`Exposition::update`]), so a dashboard and the report never disagree.
//! Counters are cumulative from the start of the run; histograms are cumulative too, with
//! fixed Prometheus buckets read off the run's HdrHistograms (a bucket's count includes values
//! within the histogram's 0.1 % precision of its bound; `_sum` is likewise the sum of the
//! recorded values at that precision).
//!
//! The format is a few lines of text per metric, written here directly: the crates that
//! encode it (`prometheus`, `prometheus-client`) want to own the metric values and observe
//! samples one at a time, where tickswarm already holds exact merged histograms. The test
//! checks the output with Prometheus' own `promtool check metrics` and a real scrape.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use crate::metrics::{IntervalPoint, NamedCounters, Recorder, ServerStats};

/// Bucket bounds for durations, in seconds (100 µs to 10 s).
const SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Bucket bounds for one bot's bytes in one second.
const RATE_BUCKETS: &[f64] = &[
    100.0, 250.0, 500.0, 1e3, 2.5e3, 5e3, 1e4, 2.5e4, 5e4, 1e5, 2.5e5, 5e5, 1e6,
];

/// Bucket bounds for message sizes in bytes.
const SIZE_BUCKETS: &[f64] = &[
    16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 1500.0, 4096.0, 16384.0, 65536.0,
];

/// What `/metrics` serves: the run's totals so far.
pub struct Exposition {
    total: Recorder,
    scenario: String,
    protocol: String,
    planned: u64,
    connected: u64,
    elapsed_s: f64,
    seconds: u64,
}

impl Exposition {
    pub fn new(scenario: &str, protocol: &str, planned: u64) -> Self {
        Self {
            total: Recorder::new(),
            scenario: scenario.to_string(),
            protocol: protocol.to_string(),
            planned,
            connected: 0,
            elapsed_s: 0.0,
            seconds: 0,
        }
    }

    /// One more second of the run: `second` is what the workers measured in it.
    pub fn update(&mut self, point: &IntervalPoint, connected: u64, second: &Recorder) {
        self.total.merge(second);
        self.connected = connected;
        self.elapsed_s = point.t;
        self.seconds += 1;
    }

    /// The run ended: what was measured after its last whole second, so the final figures
    /// equal the report's totals.
    pub fn finish(&mut self, tail: &Recorder, elapsed_s: f64) {
        self.total.merge(tail);
        self.elapsed_s = elapsed_s;
    }

    /// The text a scrape gets.
    pub fn render(&self) -> String {
        let r = &self.total;
        let mut o = String::with_capacity(16 * 1024);
        let info = format!(
            "scenario=\"{}\",protocol=\"{}\"",
            escape(&self.scenario),
            escape(&self.protocol)
        );
        family(
            &mut o,
            "tickswarm_run_info",
            "gauge",
            "The run being measured (always 1).",
        );
        let _ = writeln!(o, "tickswarm_run_info{{{info}}} 1");
        gauge(
            &mut o,
            "tickswarm_elapsed_seconds",
            "Seconds of the run measured so far.",
            self.elapsed_s,
        );
        gauge(
            &mut o,
            "tickswarm_bots_planned",
            "Peak population of the scenario.",
            self.planned as f64,
        );
        gauge(
            &mut o,
            "tickswarm_bots_connected",
            "Bots in play at the end of the last second.",
            self.connected as f64,
        );

        family(
            &mut o,
            "tickswarm_messages_total",
            "counter",
            "Application messages (datagrams, or ENet/GNS packets) sent up and received down.",
        );
        dir_pair(
            &mut o,
            "tickswarm_messages_total",
            r.packets_up,
            r.packets_down,
        );
        family(
            &mut o,
            "tickswarm_payload_bytes_total",
            "counter",
            "Application payload bytes sent up and received down.",
        );
        dir_pair(
            &mut o,
            "tickswarm_payload_bytes_total",
            r.bytes_up,
            r.bytes_down,
        );
        family(&mut o, "tickswarm_wire_datagrams_total", "counter", "UDP datagrams that crossed the bots' sockets (transport headers, acks and retransmissions included).");
        dir_pair(
            &mut o,
            "tickswarm_wire_datagrams_total",
            r.wire.packets_up,
            r.wire.packets_down,
        );
        family(
            &mut o,
            "tickswarm_wire_bytes_total",
            "counter",
            "UDP payload bytes that crossed the bots' sockets.",
        );
        dir_pair(
            &mut o,
            "tickswarm_wire_bytes_total",
            r.wire.bytes_up,
            r.wire.bytes_down,
        );

        counter(
            &mut o,
            "tickswarm_inputs_sent_total",
            "Inputs sent on the grid.",
            r.inputs_sent,
        );
        counter(
            &mut o,
            "tickswarm_inputs_skipped_total",
            "Grid slots skipped because a worker was a whole period late (generator saturated).",
            r.inputs_skipped,
        );
        counter(
            &mut o,
            "tickswarm_snapshots_applied_total",
            "Snapshots the bots applied.",
            r.snapshots_applied,
        );
        counter(
            &mut o,
            "tickswarm_connects_total",
            "Handshakes completed.",
            r.connects_ok,
        );

        family(&mut o, "tickswarm_loss_expected_total", "counter", "Messages the loss measure expected, by direction (only where the protocol makes it measurable).");
        dir_pair(
            &mut o,
            "tickswarm_loss_expected_total",
            r.loss_up.expected,
            r.loss_down.expected,
        );
        family(
            &mut o,
            "tickswarm_loss_received_total",
            "counter",
            "Of those, the ones that arrived.",
        );
        dir_pair(
            &mut o,
            "tickswarm_loss_received_total",
            r.loss_up.received,
            r.loss_down.received,
        );

        reasons(
            &mut o,
            "tickswarm_connect_failures_total",
            "Handshakes that failed, by reason.",
            &r.connect_failures,
        );
        reasons(
            &mut o,
            "tickswarm_decode_errors_total",
            "Malformed datagrams counted and dropped, by message.reason.",
            &r.decode_errors,
        );
        reasons(
            &mut o,
            "tickswarm_send_errors_total",
            "Local send and receive failures, by reason.",
            &r.send_errors,
        );

        seconds_histogram(
            &mut o,
            "tickswarm_rtt_seconds",
            "Round-trip time of the protocol's ping.",
            &r.rtt_us,
        );
        seconds_histogram(
            &mut o,
            "tickswarm_handshake_seconds",
            "Handshake time.",
            &r.handshake_us,
        );
        seconds_histogram(
            &mut o,
            "tickswarm_snapshot_interarrival_seconds",
            "Time between two snapshot arrivals at a bot.",
            &r.snapshot_interarrival_us,
        );
        seconds_histogram(
            &mut o,
            "tickswarm_send_lateness_seconds",
            "How late each input left against its slot on the grid.",
            &r.send_lateness_us,
        );

        family(
            &mut o,
            "tickswarm_bot_bytes_per_second",
            "histogram",
            "Payload bytes one bot sent (up) or received (down) in one second.",
        );
        histogram_series(
            &mut o,
            "tickswarm_bot_bytes_per_second",
            "direction=\"up\"",
            &r.bot_up_bytes_per_s,
            RATE_BUCKETS,
            1.0,
        );
        histogram_series(
            &mut o,
            "tickswarm_bot_bytes_per_second",
            "direction=\"down\"",
            &r.bot_down_bytes_per_s,
            RATE_BUCKETS,
            1.0,
        );
        family(
            &mut o,
            "tickswarm_message_size_bytes",
            "histogram",
            "Application message sizes.",
        );
        histogram_series(
            &mut o,
            "tickswarm_message_size_bytes",
            "direction=\"up\"",
            &r.packet_size_up,
            SIZE_BUCKETS,
            1.0,
        );
        histogram_series(
            &mut o,
            "tickswarm_message_size_bytes",
            "direction=\"down\"",
            &r.packet_size_down,
            SIZE_BUCKETS,
            1.0,
        );
        o
    }
}

/// A label value with `\`, `"` and newlines escaped, as the format requires.
/// Bucket bounds for a server's tick time, in seconds: finer around the usual budgets
/// (128 Hz: 7.8 ms, 60 Hz: 16.7 ms, 30 Hz: 33.3 ms) than `SECONDS_BUCKETS`.
pub const TICK_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.004, 0.0078, 0.01, 0.0167, 0.025, 0.0333,
    0.05, 0.1, 0.25, 1.0,
];

/// What a reference server's `/metrics` serves (`serve --metrics-listen`, and the embedded
/// server of a run): its counters since it started, summed over its instances, and the
/// tick-time histogram its driver measured.
pub fn render_server(protocol: &str, s: &ServerStats) -> String {
    let mut o = String::with_capacity(4 * 1024);
    family(
        &mut o,
        "tickswarm_server_info",
        "gauge",
        "The reference server being measured (always 1).",
    );
    let _ = writeln!(
        o,
        "tickswarm_server_info{{protocol=\"{}\"}} 1",
        escape(protocol)
    );
    gauge(
        &mut o,
        "tickswarm_server_sessions",
        "Sessions open now.",
        s.clients as f64,
    );
    gauge(
        &mut o,
        "tickswarm_server_connections",
        "Connections the transport holds open now.",
        s.connections as f64,
    );
    counter(
        &mut o,
        "tickswarm_server_sessions_accepted_total",
        "Handshakes accepted.",
        s.accepted,
    );
    counter(
        &mut o,
        "tickswarm_server_admission_refused_total",
        "Handshakes refused (full, wrong version, ...).",
        s.refused,
    );
    counter(
        &mut o,
        "tickswarm_server_sessions_timed_out_total",
        "Sessions dropped for silence.",
        s.timed_out,
    );
    family(
        &mut o,
        "tickswarm_server_datagrams_total",
        "counter",
        "Datagrams (or messages) received (in) and sent (out).",
    );
    let _ = writeln!(
        o,
        "tickswarm_server_datagrams_total{{direction=\"in\"}} {}",
        s.datagrams_in
    );
    let _ = writeln!(
        o,
        "tickswarm_server_datagrams_total{{direction=\"out\"}} {}",
        s.datagrams_out
    );
    family(
        &mut o,
        "tickswarm_server_bytes_total",
        "counter",
        "Bytes received (in) and sent (out).",
    );
    let _ = writeln!(
        o,
        "tickswarm_server_bytes_total{{direction=\"in\"}} {}",
        s.bytes_in
    );
    let _ = writeln!(
        o,
        "tickswarm_server_bytes_total{{direction=\"out\"}} {}",
        s.bytes_out
    );
    counter(
        &mut o,
        "tickswarm_server_send_errors_total",
        "Batches of datagrams the server failed to send.",
        s.send_errors,
    );
    reasons(
        &mut o,
        "tickswarm_server_dropped_total",
        "Malformed or unexpected datagrams, by reason.",
        &s.dropped,
    );
    family(
        &mut o,
        "tickswarm_server_tick_seconds",
        "histogram",
        "How long each server tick took, from its timer to its output flushed.",
    );
    histogram_series(
        &mut o,
        "tickswarm_server_tick_seconds",
        "",
        &s.tick_us.0,
        TICK_BUCKETS,
        1e-6,
    );
    o
}

fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn family(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} {kind}");
}

fn gauge(o: &mut String, name: &str, help: &str, v: f64) {
    family(o, name, "gauge", help);
    let _ = writeln!(o, "{name} {v}");
}

fn counter(o: &mut String, name: &str, help: &str, v: u64) {
    family(o, name, "counter", help);
    let _ = writeln!(o, "{name} {v}");
}

fn dir_pair(o: &mut String, name: &str, up: u64, down: u64) {
    let _ = writeln!(o, "{name}{{direction=\"up\"}} {up}");
    let _ = writeln!(o, "{name}{{direction=\"down\"}} {down}");
}

fn reasons(o: &mut String, name: &str, help: &str, c: &NamedCounters) {
    family(o, name, "counter", help);
    for (reason, n) in c.iter() {
        let _ = writeln!(o, "{name}{{reason=\"{}\"}} {n}", escape(&reason));
    }
}

fn seconds_histogram(o: &mut String, name: &str, help: &str, h: &Histogram<u64>) {
    family(o, name, "histogram", help);
    histogram_series(o, name, "", h, SECONDS_BUCKETS, 1e-6);
}

/// One histogram series: `scale` converts the recorded unit to the exposed one (µs to s).
fn histogram_series(
    o: &mut String,
    name: &str,
    labels: &str,
    h: &Histogram<u64>,
    buckets: &[f64],
    scale: f64,
) {
    let sep = if labels.is_empty() { "" } else { "," };
    for &le in buckets {
        // Values at or below the bound, in the recorded unit.
        let bound = (le / scale).floor() as u64;
        let n = if h.is_empty() || bound == 0 {
            0
        } else {
            // A bound past the counters a histogram has grown counts up to its last one
            // (the crate's `count_between`); its `high()` is not the range's top.
            h.count_between(0, bound)
        };
        let _ = writeln!(o, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {n}");
    }
    let _ = writeln!(o, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", h.len());
    let sum: f64 = h
        .iter_recorded()
        .map(|v| v.value_iterated_to() as f64 * v.count_at_value() as f64)
        .sum::<f64>()
        * scale;
    let braces = |l: &str| {
        if l.is_empty() {
            String::new()
        } else {
            format!("{{{l}}}")
        }
    };
    let _ = writeln!(o, "{name}_sum{} {sum}", braces(labels));
    let _ = writeln!(o, "{name}_count{} {}", braces(labels), h.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t: f64) -> IntervalPoint {
        IntervalPoint {
            t,
            ..IntervalPoint::default()
        }
    }

    /// The value of the first line starting with `series` (name and labels exactly).
    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    }

    #[test]
    fn counters_accumulate_second_by_second() {
        let mut e = Exposition::new("s", "cafe", 10);
        let mut sec = Recorder::new();
        sec.inputs_sent = 600;
        sec.datagram_up(16);
        sec.datagram_down(100);
        e.update(&point(1.0), 10, &sec);
        e.update(&point(2.0), 9, &sec);
        let t = e.render();
        assert_eq!(value(&t, "tickswarm_inputs_sent_total"), 1200.0);
        assert_eq!(
            value(&t, "tickswarm_payload_bytes_total{direction=\"up\"}"),
            32.0
        );
        assert_eq!(
            value(&t, "tickswarm_payload_bytes_total{direction=\"down\"}"),
            200.0
        );
        assert_eq!(value(&t, "tickswarm_bots_connected"), 9.0);
        assert_eq!(value(&t, "tickswarm_elapsed_seconds"), 2.0);
    }

    /// The exposition after one second that recorded these RTTs (µs).
    fn render_rtts(rtts: &[u64]) -> String {
        let mut e = Exposition::new("s", "cafe", 1);
        let mut sec = Recorder::new();
        for &us in rtts {
            sec.record_rtt(us);
        }
        e.update(&point(1.0), 1, &sec);
        e.render()
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_in_seconds() {
        // 3 RTTs: 0.2 ms, 3 ms, 40 ms.
        let t = render_rtts(&[200, 3_000, 40_000]);
        assert_eq!(
            value(&t, "tickswarm_rtt_seconds_bucket{le=\"0.0001\"}"),
            0.0
        );
        assert_eq!(
            value(&t, "tickswarm_rtt_seconds_bucket{le=\"0.00025\"}"),
            1.0
        );
        assert_eq!(value(&t, "tickswarm_rtt_seconds_bucket{le=\"0.005\"}"), 2.0);
        assert_eq!(value(&t, "tickswarm_rtt_seconds_bucket{le=\"0.05\"}"), 3.0);
        assert_eq!(value(&t, "tickswarm_rtt_seconds_bucket{le=\"+Inf\"}"), 3.0);
        assert_eq!(value(&t, "tickswarm_rtt_seconds_count"), 3.0);
        let sum = value(&t, "tickswarm_rtt_seconds_sum");
        assert!((sum - 0.0432).abs() < 0.0432 * 0.001, "{sum}");
    }

    /// Each second's histograms come grown to different sizes (a worker's recorder keeps the
    /// counters its largest value ever needed; a fresh one has the first bucket only): the
    /// cumulative buckets still count every sample at or below their bound.
    #[test]
    fn buckets_count_every_sample_whatever_size_each_second_grew_to() {
        let mut e = Exposition::new("s", "cafe", 1);
        let mut worker = Recorder::new();
        // One early outlier grows the worker's histogram to 3 s; later seconds are small.
        let seconds: [&[u64]; 4] = [&[150, 3_000_000], &[90, 120, 2_000], &[80], &[60_000, 70]];
        for (i, rtts) in seconds.iter().enumerate() {
            for &us in *rtts {
                worker.record_rtt(us);
            }
            let second = worker.take_interval();
            e.update(&point(i as f64 + 1.0), 1, &second);
            // And a fresh recorder's second besides (another worker).
            let mut fresh = Recorder::new();
            fresh.record_rtt(100);
            e.update(&point(i as f64 + 1.0), 1, &fresh);
        }
        let t = e.render();
        let total = value(&t, "tickswarm_rtt_seconds_count");
        assert_eq!(total, 12.0);
        assert_eq!(value(&t, "tickswarm_rtt_seconds_bucket{le=\"10\"}"), total);
        assert_eq!(
            value(&t, "tickswarm_rtt_seconds_bucket{le=\"+Inf\"}"),
            total
        );
        // 0.1 ms: 90, 80, 70 and the four fresh 100s; 1 s: all but the 3 s outlier.
        assert_eq!(
            value(&t, "tickswarm_rtt_seconds_bucket{le=\"0.0001\"}"),
            7.0
        );
        assert_eq!(value(&t, "tickswarm_rtt_seconds_bucket{le=\"1\"}"), 11.0);

        // Every value in the first bucket of counters (as on loopback): none ever grew.
        let t = render_rtts(&[100, 400, 1_500]);
        assert_eq!(value(&t, "tickswarm_rtt_seconds_bucket{le=\"0.001\"}"), 2.0);
        assert_eq!(value(&t, "tickswarm_rtt_seconds_bucket{le=\"10\"}"), 3.0);
    }

    #[test]
    fn label_values_are_escaped() {
        let e = Exposition::new("a \"quoted\"\\name\n", "cafe", 1);
        let t = e.render();
        assert!(
            t.contains(r#"tickswarm_run_info{scenario="a \"quoted\"\\name\n",protocol="cafe"} 1"#),
            "{t}"
        );
    }
}
