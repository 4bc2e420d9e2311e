//! RTT from ENet's acknowledgements, against injected ground truth: City `dialect:
//! implementation` (whose server never answers a Ping) against the C libenet variant peer
//! (tests/peers/city-variant-peer), through the loopback impairment proxy adding a fixed delay
//! each way. Every round trip the bots report then is at least the injected one, and most
//! sit right on it.
//!
//! The peer is built here with `cc`; it needs libenet-dev (`scripts/install-test-deps.sh`).
//! This test fails (never skips) without it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::proxy::{Impairment, Proxy};
use crate::common::summary::{f64_at, run_scenario, u64_at};
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;

/// Added each way by the proxy.
const ONE_WAY_DELAY: Duration = Duration::from_millis(10);
const BOTS: u64 = 20;

fn build_peer() -> PathBuf {
    crate::common::city_peer::build("city_variant_peer_rtt")
}

/// The running peer, killed when dropped.
struct Peer {
    child: Child,
    port: u16,
}

impl Peer {
    fn start() -> Peer {
        let mut child = Command::new(build_peer())
            .args(["0", "--seconds", "40", "--tick-rate", "20"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the city variant peer");
        let stdout = child.stdout.take().expect("peer stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = lines
            .next()
            .and_then(Result::ok)
            .expect("peer prints LISTENING");
        let port = first
            .strip_prefix("LISTENING ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
        // Keep draining its statistics lines so the pipe never fills.
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        Peer { child, port }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// scenarios/city.yaml's thresholds, as shipped.
fn shipped_thresholds() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("scenarios/city.yaml")).expect("city.yaml");
    let at = text
        .find("\nthresholds:")
        .expect("city.yaml has thresholds");
    text[at + 1..].to_string()
}

/// rtt_us samples per second of the run, from its histograms.hlog.
fn rtt_counts_by_second(hlog: &Path) -> BTreeMap<u64, u64> {
    let bytes = std::fs::read(hlog).expect("histograms.hlog");
    let mut de = Deserializer::new();
    let mut out = BTreeMap::new();
    for entry in IntervalLogIterator::new(&bytes) {
        let Ok(LogEntry::Interval(iv)) = entry else {
            continue;
        };
        if iv.tag().map(|t| t.as_str()) != Some("rtt_us") {
            continue;
        }
        use base64::Engine as _;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(iv.encoded_histogram())
            .expect("base64");
        let h: Histogram<u64> = de.deserialize(&mut raw.as_slice()).expect("histogram");
        *out.entry(iv.start_timestamp().as_secs()).or_default() += h.len();
    }
    out
}

/// 20 bots through a proxy adding 10 ms each way: `rtt_us` comes from ENet's
/// acknowledgements (`rtt_source: enet_acks`), at least one sample per bot per second in
/// play, none below the injected 20 ms round trip, the median within the bound below, and
/// city.yaml's thresholds pass. The peer ticks at 20 Hz and the bots send 20 inputs a
/// second (city.yaml: 60) and ask the peer not to throttle their unreliable traffic: the
/// round trips come from ENet's pings either way, and less traffic through the debug
/// build's proxy keeps the loss and tail thresholds about the network, not this machine.
#[test]
fn city_implementation_rtt_is_the_injected_round_trip() {
    let peer = Peer::start();
    let server = format!("127.0.0.1:{}", peer.port).parse().expect("address");
    let proxy = Proxy::start(
        server,
        Impairment {
            one_way_delay: ONE_WAY_DELAY,
            ..Impairment::default()
        },
        Duration::from_secs(60),
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let scenario = tmp.path().join("city.yaml");
    std::fs::write(
        &scenario,
        format!(
            "name: city-enet-rtt\nprotocol:\n  city:\n    dialect: implementation\n\
             population:\n  stages:\n    - ramp_to: {BOTS}\n      over: 500ms\n    - hold: 5s\n\
             behaviour:\n  input_rate: 20\n  ping_interval: 500ms\n  handshake_timeout: 5s\n\
             engine:\n  enet_throttle: false\n{}",
            shipped_thresholds()
        ),
    )
    .expect("write scenario");
    let out = tmp.path().join("out");
    let (o, s) = run_scenario(
        &scenario,
        &["--target", &proxy.addr.to_string()],
        &out,
        &[0, 1],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    let rtt = &s["rtt_us"];
    eprintln!("rtt_us {rtt}\nrtt_source {}", s["rtt_source"]);
    eprintln!(
        "enet_ack_rtt_us {}\nenet_rtt_us {}",
        s["protocol_metrics"]["enet_ack_rtt_us"], s["protocol_metrics"]["enet_rtt_us"]
    );
    assert_eq!(s["bots"]["connected"], BOTS, "{}\n{err}", s["errors"]);
    assert_eq!(s["rtt_source"], "enet_acks");

    // Ground truth: the proxy adds 20 ms to every round trip, so no sample is below it (the
    // histogram keeps 3 significant figures: a value reads back at most 16 µs low here).
    let injected = 2 * ONE_WAY_DELAY.as_micros() as u64;
    let min = rtt["min"].as_u64().expect("rtt min");
    let p50 = rtt["p50"].as_u64().expect("rtt p50");
    assert!(min + 16 >= injected, "min {min} µs below {injected} µs");
    // The proxy's timers (tokio, millisecond wheel) add up to about 1 ms each way on top,
    // and the loopback hops, the debug build's proxy and both ENet services a little more:
    // on two busy cores the median sat 2.3-3.0 ms above the injected round trip (through a
    // relay with microsecond timers and a release build, 0.4-0.5 ms above it).
    // On a machine so loaded that the bots' own sends ran late (send lateness p99 of 1 ms
    // or more; at load 9-10 the median sat 4.6 ms above), the same starvation delays the
    // proxy and both ENet services: up to 10 ms then.
    let late = s["generator"]["send_lateness_us"]["p99"]
        .as_u64()
        .expect("send lateness p99");
    let slack = if late >= crate::common::kernel::STARVED_LATENESS_P99_US {
        10_000
    } else {
        4_000
    };
    assert!(
        p50 <= injected + slack,
        "p50 {p50} µs, injected {injected} µs, send lateness p99 {late} µs"
    );

    // Every sample is also an enet_ack_rtt_us sample; ENet's own estimate stays beside them.
    let pm = &s["protocol_metrics"];
    assert_eq!(pm["enet_ack_rtt_us"]["count"], rtt["count"]);
    assert!(u64_at(&s, "protocol_metrics.enet_rtt_us.count") > 0);

    // At least one sample per bot per second in play: ENet pings each bot's session at the
    // scenario's ping_interval (500 ms) when nothing else was acknowledged.
    let counts = rtt_counts_by_second(&out.join("histograms.hlog"));
    let iv = s["intervals"].as_array().expect("intervals");
    let mut full_seconds = 0;
    for pair in iv.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        if before["bots_connected"] != BOTS || after["bots_connected"] != BOTS {
            continue;
        }
        if after["partial"] == true {
            continue;
        }
        // The interval ending at t covers second t - 1.
        let sec = f64_at(after, "t").round() as u64 - 1;
        let n = counts.get(&sec).copied().unwrap_or(0);
        assert!(
            n >= BOTS,
            "second {sec}: {n} samples for {BOTS} bots in play"
        );
        assert!(after["rtt_p50_us"].as_u64().is_some(), "{after}");
        full_seconds += 1;
    }
    assert!(
        full_seconds >= 4,
        "{full_seconds} whole seconds with every bot in play"
    );

    let verdicts: Vec<_> = s["thresholds"]
        .as_array()
        .expect("thresholds")
        .iter()
        .map(|t| {
            (
                t["condition"].clone(),
                t["ok"].clone(),
                t["observed"].clone(),
            )
        })
        .collect();
    eprintln!("{verdicts:?}");
    // The shipped thresholds hold, or only RTT ones fail where the run's own send lateness
    // shows a starved machine (the proxy and both ENet services wait for CPU too).
    crate::common::kernel::assert_pass_on_a_loaded_machine(&s, 0);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{err}");
    drop(proxy);
}
