//! End to end through an impairment proxy on loopback: known one-way delay and exact loss
//! injected between real bots and the real reference server; the summary must report them.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::common::kernel::{assert_loopback_loss, UdpDrops};
use crate::common::proxy::{Impairment, Proxy};
use crate::common::summary::{at, run_scenario};
use serde_json::Value;
use tickswarm::engine::spawn_reference_server;
use tickswarm::scenario::{ProtocolSection, ServerSection};

fn run_through_proxy(
    protocol_yaml: &str,
    section: ProtocolSection,
    imp: Impairment,
    thresholds: &str,
) -> (Value, Proxy) {
    let bind: SocketAddr = (Ipv4Addr::LOCALHOST, 0).into();
    let server = ServerSection::default();
    let handle = spawn_reference_server(bind, &section, &server).unwrap();
    let proxy = Proxy::start(handle.addr, imp, Duration::from_secs(30));
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("s.yaml");
    std::fs::write(
        &scenario,
        format!(
            "name: impaired\nprotocol:\n{protocol_yaml}\npopulation:\n  stages:\n    - ramp_to: 20\n      over: 500ms\n    - hold: 4s\nbehaviour:\n  ping_interval: 200ms\n  silence_timeout: 3s\n{thresholds}"
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let (_, s) = run_scenario(
        &scenario,
        &["--target", &proxy.addr.to_string()],
        &out,
        &[0],
    );
    // Let the last delayed datagrams drain before the counts are read.
    std::thread::sleep(Duration::from_millis(200));
    drop(handle);
    (s, proxy)
}

/// cafe: every 10th server datagram dropped per bot, 15 ms each way. Header-seq loss equals
/// what the proxy dropped (up to one trailing drop per bot that no later datagram revealed),
/// and no RTT sample is below the injected 30 ms round trip.
#[test]
fn cafe_loss_and_delay_through_a_proxy() {
    use std::sync::atomic::Ordering;
    let imp = Impairment {
        one_way_delay: Duration::from_millis(15),
        drop_every_down: 10,
        drop_every_up: 0,
        corrupt_every_down: 0,
    };
    let drops = UdpDrops::now();
    let (s, proxy) = run_through_proxy(
        "  cafe: {}",
        ProtocolSection::of(&tickswarm::games::cafe::Cafe, Default::default()),
        imp,
        "",
    );
    // Datagrams the kernel dropped for full receive buffers meanwhile (starved bots or
    // proxy): lost too, beyond the proxy's own count.
    let kernel = drops.since();
    let dropped = proxy.counts.down_dropped.load(Ordering::Relaxed);
    let down = &s["loss"]["downstream"];
    let expected = down["expected"].as_u64().unwrap();
    let missing = expected - down["received"].as_u64().unwrap();
    assert!(dropped > 100, "proxy dropped {dropped}");
    assert!(
        missing <= dropped + kernel && dropped <= missing + 20,
        "bots saw {missing} missing, proxy dropped {dropped}, kernel {kernel}"
    );
    let rate = down["rate"].as_f64().unwrap();
    let slack = kernel as f64 / expected as f64;
    assert!(
        rate > 0.095 && rate < 0.105 + slack,
        "loss rate {rate}, kernel drops {kernel}"
    );
    let rtt = &s["rtt_us"];
    assert!(rtt["min"].as_u64().unwrap() >= 30_000, "{rtt}");
    assert!(rtt["p50"].as_u64().unwrap() < 45_000, "{rtt}");
    // The handshake is one round trip through the same delay.
    let hs = &s["handshake_us"];
    assert_eq!(hs["count"], 20);
    assert!(hs["min"].as_u64().unwrap() >= 30_000, "{hs}");
    // Packet counters against the proxy's own count: every datagram the bots say they sent
    // reached it, and what they say they received is what it forwarded, less at most a few
    // per bot still in flight when they stopped.
    let up = proxy.counts.up.load(Ordering::Relaxed);
    assert_eq!(s["bandwidth"]["up_packets"].as_u64(), Some(up));
    let forwarded = proxy.counts.down_forwarded.load(Ordering::Relaxed);
    let down = s["bandwidth"]["down_packets"].as_u64().unwrap();
    assert!(
        down <= forwarded && forwarded - down <= 20 * 4 + kernel,
        "down {down}, forwarded {forwarded}"
    );
    assert_eq!(s["bots"]["connected"], 20);
}

/// rtype: loss comes from snapshot ticks, RTT from one ping in flight; the same injected
/// delay bounds RTT from below, and loss is reported.
#[test]
fn rtype_delay_through_a_proxy() {
    let imp = Impairment {
        one_way_delay: Duration::from_millis(15),
        drop_every_down: 0,
        drop_every_up: 0,
        corrupt_every_down: 0,
    };
    let drops = UdpDrops::now();
    let (s, _proxy) = run_through_proxy(
        "  rtype: {}",
        ProtocolSection::of(&tickswarm::games::rtype::Rtype, Default::default()),
        imp,
        "",
    );
    let kernel = drops.since();
    let rtt = &s["rtt_us"];
    assert!(rtt["min"].as_u64().unwrap() >= 30_000, "{rtt}");
    assert!(rtt["p50"].as_u64().unwrap() < 45_000, "{rtt}");
    assert_loopback_loss(&s["loss"]["downstream"], kernel, 1, "downstream");
    assert_eq!(s["bots"]["connected"], 20);
}

/// A server sending junk: every 7th datagram to each bot arrives with its first byte flipped
/// (a bad magic). Each one is counted as a decode error by reason and dropped, the swarm
/// carries on, and the junk shows as downstream loss (its sequence number never decoded).
#[test]
fn cafe_counts_malformed_datagrams_and_carries_on() {
    use std::sync::atomic::Ordering;
    let imp = Impairment {
        corrupt_every_down: 7,
        ..Impairment::default()
    };
    let (s, proxy) = run_through_proxy(
        "  cafe: {}",
        ProtocolSection::of(&tickswarm::games::cafe::Cafe, Default::default()),
        imp,
        // The proxy corrupts one datagram in 7 on purpose: the default `decode_errors <= 0`
        // check would fail the run, so the scenario relaxes it by name.
        "thresholds:\n  - decode_errors <= 100000\n",
    );
    let corrupted = proxy.counts.down_corrupted.load(Ordering::Relaxed);
    // Present: the proxy corrupted over 100 datagrams (asserted below), each a bad magic.
    let counted = at(&s, "errors.decode")
        .get("header.bad_magic")
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no header.bad_magic decode error: {}", s["errors"]));
    assert!(corrupted > 100, "proxy corrupted {corrupted}");
    // Junk still in flight when the bots stop is not a decode error of a live session.
    assert!(
        counted <= corrupted && corrupted - counted <= 20,
        "counted {counted} of {corrupted}"
    );
    let down = &s["loss"]["downstream"];
    let missing = down["expected"].as_u64().unwrap() - down["received"].as_u64().unwrap();
    assert!(
        missing <= counted && counted - missing <= 20,
        "missing {missing}, junk {counted}"
    );
    assert_eq!(s["bots"]["connected"], 20);
    assert!(s["snapshots_applied"].as_u64().unwrap() > 1000);
}
