//! End to end on loopback over real ENet: City bots against the embedded City reference
//! servers, directly and through an impairment proxy.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::common::kernel::{assert_loopback_loss, UdpDrops};
use crate::common::proxy::{Impairment, Proxy};
use crate::common::scenario::Scenario;
use crate::common::summary::{at, declared_counter, emitted_counter, run_text, server_event};
use serde_json::Value;
use tickswarm::engine::spawn_reference_server;
use tickswarm::games::city::CityOptions;
use tickswarm::scenario::{ProtocolSection, ServerSection};

/// ENet packs what one service queued into one datagram (a snapshot with acknowledgements and
/// a ping, say): a datagram the kernel dropped can carry a few messages of a counted stream.
const ENET_MESSAGES_PER_DATAGRAM: u64 = 4;

/// One swarm at a time: each test runs hundreds of ENet bots and their servers, and five at
/// once on a 2-core machine measure the machine, not the code (loopback loss appears).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A histogram of `protocol_metrics`: a missing one fails the test.
fn hist(s: &Value, name: &str) -> Value {
    at(s, &format!("protocol_metrics.{name}")).clone()
}

/// 150 bots over ENet against two embedded instances (100 players each): every bot connects,
/// downloads its content (checksums verified), plays with prediction; RTT comes from the
/// protocol and from ENet; nothing is lost on loopback.
#[test]
fn city_swarm_over_enet() {
    let _one_at_a_time = serial();
    let text = Scenario::file("city.yaml")
        .set("population.stages.0.ramp_to", 150)
        .set("population.stages.0.over", "1s")
        .set("population.stages.1.hold", "4s")
        .set("duration", "5s")
        .text();
    let drops = UdpDrops::now();
    let s = run_text(&text, &[], &[0, 1]).1;
    let dropped = drops.since();
    assert_eq!(s["protocol"], "city");
    assert_eq!(s["bots"]["connected"], 150, "{}", s["errors"]);
    assert!(
        s["target"].as_str().unwrap().contains("2 instances"),
        "{}",
        s["target"]
    );
    assert_eq!(hist(&s, "content_time_us")["count"], 150);
    assert_eq!(emitted_counter(&s, "content_checksum_mismatch"), 0);
    assert!(hist(&s, "prediction_error")["count"].as_u64().unwrap() > 1000);
    assert!(hist(&s, "input_ack_latency_us")["count"].as_u64().unwrap() > 1000);
    assert!(hist(&s, "enet_rtt_us")["count"].as_u64().unwrap() > 150);
    assert!(s["rtt_us"]["count"].as_u64().unwrap() > 150);
    let down = &s["loss"]["downstream"];
    // Snapshots for about 2 s of 60 Hz per bot at least, less the ticks a starved server
    // skipped (counted; each denies a snapshot to the 75 players of its instance).
    let skipped = server_event(&s, "ticks_skipped");
    assert!(
        down["expected"].as_u64().unwrap() + skipped * 75 > 150 * 60 * 2,
        "{down}, server ticks skipped {skipped}"
    );
    let per = ENET_MESSAGES_PER_DATAGRAM;
    assert_loopback_loss(down, dropped, per, "downstream");
    assert_loopback_loss(&s["loss"]["upstream"], dropped, per, "upstream");
}

/// Through the proxy: 15 ms each way moves both RTTs (protocol and ENet) to at least 30 ms;
/// every 10th datagram lost in each direction is repaired on the reliable channel (content
/// completes), shows as downstream and upstream loss on the unreliable one, and makes the
/// bots' prediction disagree with the server (corrections).
#[test]
fn city_through_delay_and_loss() {
    let _one_at_a_time = serial();
    let section = ProtocolSection::of(&tickswarm::games::city::City, CityOptions::default());
    let server = ServerSection::default();
    let bind: SocketAddr = (Ipv4Addr::LOCALHOST, 0).into();
    let handle = spawn_reference_server(bind, &section, &server).unwrap();
    let proxy = Proxy::start(
        handle.addr,
        Impairment {
            one_way_delay: Duration::from_millis(15),
            drop_every_down: 10,
            drop_every_up: 10,
            corrupt_every_down: 0,
        },
        Duration::from_secs(40),
    );
    let text = "name: city-impaired\nprotocol:\n  city:\n    cached_content_share: 0.5\npopulation:\n  stages:\n    - ramp_to: 20\n      over: 500ms\n    - hold: 5s\nbehaviour:\n  ping_interval: 250ms\n  handshake_timeout: 10s\n";
    let s = run_text(text, &["--target", &proxy.addr.to_string()], &[0, 1]).1;
    drop(handle);
    eprintln!(
        "impaired city: rtt {} enet_rtt {} loss down {} up {} corrections {} prediction_error {}",
        s["rtt_us"],
        hist(&s, "enet_rtt_us"),
        s["loss"]["downstream"],
        s["loss"]["upstream"],
        s["protocol_metrics"]["corrections"],
        hist(&s, "prediction_error")
    );
    assert_eq!(s["bots"]["connected"], 20, "{}", s["errors"]);
    assert_eq!(
        hist(&s, "content_time_us")["count"],
        20,
        "content completes despite loss"
    );
    // The ENet handshake is timed apart from City's: one round trip through the proxy each,
    // at least, and the end-to-end connect time holds both.
    let transport = hist(&s, "transport_handshake_us");
    assert_eq!(transport["count"], 20, "{transport}");
    assert!(transport["min"].as_u64().unwrap() >= 30_000, "{transport}");
    let total = hist(&s, "connect_total_us");
    assert_eq!(total["count"], 20, "{total}");
    assert!(total["min"].as_u64().unwrap() >= 60_000, "{total}");
    assert!(
        s["rtt_us"]["min"].as_u64().unwrap() >= 30_000,
        "{}",
        s["rtt_us"]
    );
    assert!(
        hist(&s, "enet_rtt_us")["p50"].as_u64().unwrap() >= 30_000,
        "{}",
        hist(&s, "enet_rtt_us")
    );
    let down = s["loss"]["downstream"]["rate"].as_f64().unwrap();
    let up = s["loss"]["upstream"]["rate"].as_f64().unwrap();
    assert!((0.02..0.25).contains(&down), "downstream loss {down}");
    assert!((0.02..0.25).contains(&up), "upstream loss {up}");
    assert!(
        declared_counter(&s, "corrections") > 0,
        "lost inputs make prediction diverge: {}",
        s["protocol_metrics"]
    );
    assert!(hist(&s, "prediction_error")["max"].as_u64().unwrap() > 1);
}

/// Bots sharing sockets (ENet multiplexing, 10 per socket): every session is its own player on
/// the server (sessions are keyed per ENet peer, not per UDP address), and nothing is lost.
#[test]
fn city_bots_share_sockets() {
    let _one_at_a_time = serial();
    let text = "name: shared\nprotocol:\n  city:\n    cached_content_share: 1.0\npopulation:\n  stages:\n    - ramp_to: 60\n      over: 500ms\n    - hold: 3s\nengine:\n  bots_per_socket: 10\n";
    let drops = UdpDrops::now();
    let s = run_text(text, &[], &[0, 1]).1;
    let dropped = drops.since();
    assert_eq!(s["bots"]["connected"], 60, "{}", s["errors"]);
    let server = &s["protocol_metrics"]["embedded_server"];
    assert_eq!(server["accepted"], 60, "{server}");
    let down = &s["loss"]["downstream"];
    assert!(down["expected"].as_u64().unwrap() > 60 * 60 * 2, "{down}");
    assert_loopback_loss(down, dropped, ENET_MESSAGES_PER_DATAGRAM, "downstream");
    assert_eq!(
        emitted_counter(&s, "pong_unsolicited"),
        0,
        "no crossed sessions"
    );
}

/// At the end of a run every ENet session is closed properly (the protocol's goodbye, then
/// ENet's disconnect), so the server frees every slot at once, not at its timeout: back-to-back
/// CI runs must not find it full.
#[test]
fn sessions_are_closed_when_the_run_ends() {
    let _one_at_a_time = serial();
    use tickswarm::engine::{self, StopSignal};
    use tickswarm::scenario::{self, Overrides, Plan};

    let section = ProtocolSection::of(&tickswarm::games::city::City, CityOptions::default());
    let handle = spawn_reference_server(
        (Ipv4Addr::LOCALHOST, 0).into(),
        &section,
        &ServerSection::default(),
    )
    .unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/city.yaml");
    let ov = Overrides {
        target: Some(handle.addr.to_string()),
        bots: Some(20),
        // The scenario ramps over 3 s: every bot is in play before the end.
        duration: Some(Duration::from_secs(5)),
        ..Overrides::default()
    };
    let plan = Plan::build(scenario::load(&path).unwrap(), &path, &ov).unwrap();
    let outcome = engine::run(&plan, &StopSignal::new(), |_, _, _| {}).unwrap();
    assert_eq!(outcome.ever_connected, 20);
    // The run returns after its sessions closed (or its 1 s grace); the server publishes its
    // counters every 100 ms.
    std::thread::sleep(Duration::from_millis(300));
    let s = handle.stats();
    assert_eq!(
        s.clients, 0,
        "players still in the game after the run: {s:?}"
    );
    assert_eq!(
        s.connections, 0,
        "ENet sessions still open after the run: {s:?}"
    );
    assert_eq!(s.timed_out, 0, "{s:?}");
}

/// Bytes on the wire: what the bots report as crossing their sockets (ENet headers, acks,
/// retransmissions and fragments included) is what a counting proxy between them and the
/// server saw; the City payload inside is reported separately and is smaller.
#[test]
fn wire_bytes_equal_what_a_counting_proxy_saw() {
    let _one_at_a_time = serial();
    use std::sync::atomic::Ordering;

    let section = ProtocolSection::of(&tickswarm::games::city::City, CityOptions::default());
    let handle = spawn_reference_server(
        (Ipv4Addr::LOCALHOST, 0).into(),
        &section,
        &ServerSection::default(),
    )
    .unwrap();
    let proxy = Proxy::start(
        handle.addr,
        Impairment {
            one_way_delay: Duration::ZERO,
            drop_every_down: 0,
            drop_every_up: 0,
            corrupt_every_down: 0,
        },
        Duration::from_secs(30),
    );
    let text = Scenario::file("city.yaml")
        .set("population.stages.0.ramp_to", 10)
        .set("population.stages.0.over", "1s")
        .set("duration", "3s")
        .text();
    let s = run_text(&text, &["--target", &proxy.addr.to_string()], &[0, 1]).1;
    let bw = &s["bandwidth"];
    let n = |k: &str| bw[k].as_u64().unwrap();
    // Up: every datagram the bots sent reached the proxy on loopback, byte for byte.
    assert_eq!(
        n("wire_up_packets"),
        proxy.counts.up_received.load(Ordering::Relaxed)
    );
    assert_eq!(
        n("wire_up_bytes"),
        proxy.counts.up_received_bytes.load(Ordering::Relaxed)
    );
    // Down: what the bots received is what the proxy forwarded, less what the server still
    // sent after the bots had gone (a retransmission or two of its disconnect per session).
    let fwd = proxy.counts.down_forwarded.load(Ordering::Relaxed);
    let fwd_bytes = proxy.counts.down_forwarded_bytes.load(Ordering::Relaxed);
    assert!(
        n("wire_down_packets") <= fwd && fwd - n("wire_down_packets") <= 10 * 3,
        "{bw} vs {fwd}"
    );
    assert!(
        n("wire_down_bytes") <= fwd_bytes && fwd_bytes - n("wire_down_bytes") <= 10 * 3 * 64,
        "{bw} vs {fwd_bytes}"
    );
    // The City payload is inside: fewer bytes than the wire, and ENet adds acks both ways.
    assert!(n("down_bytes") < n("wire_down_bytes"), "{bw}");
    assert!(n("up_bytes") < n("wire_up_bytes"), "{bw}");
    // Per-bot bandwidth and message sizes are histograms.
    assert!(
        bw["per_bot_down_bytes_per_s"]["count"].as_u64().unwrap() >= 10,
        "{bw}"
    );
    assert!(
        bw["packet_size_down_bytes"]["max"].as_u64().unwrap() > 0,
        "{bw}"
    );
}
