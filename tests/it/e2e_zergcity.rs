//! End to end on loopback over real ENet: the tickswarm binary runs ZergCity bots against an
//! embedded fleet of four-player reference servers, a share of them reconnecting.

use serde_json::Value;

use crate::common::kernel::{assert_loopback_loss, assert_pass_but_kernel_loss, UdpDrops};
use crate::common::scenario::Scenario;
use crate::common::summary::run_text;

/// ENet packs what one service queued into one datagram (a snapshot with acknowledgements and
/// a ping, say): a datagram the kernel dropped can carry a few messages of a counted stream.
const ENET_MESSAGES_PER_DATAGRAM: u64 = 4;

fn metric<'a>(s: &'a Value, name: &str) -> &'a Value {
    &s["protocol_metrics"][name]
}

/// 200 bots over 50 games: every bot connects, applies full snapshots and deltas, gets its
/// inputs acknowledged; a quarter drop their ENet session and get their slot back with the
/// token; summary.json carries the ZergCity metrics.
#[test]
fn zergcity_swarm_over_an_embedded_fleet_with_reconnection() {
    let text = Scenario::file("zergcity.yaml")
        .set("population.stages.0.ramp_to", 200)
        .set("population.stages.0.over", "1s")
        .set("population.stages.1.hold", "4s")
        .set("protocol.zergcity.reconnect_after_ms", 1000)
        .set("duration", "5s")
        // This checks behaviour, not speed: a debug build of 200 bots and 50 servers on a
        // shared 2-core machine queues for hundreds of milliseconds.
        .replace_item("thresholds", "rtt p99 < 50ms", "rtt p99 < 5s")
        .text();
    let drops = UdpDrops::now();
    let s = run_text(&text, &[], &[0, 1]).1;
    let dropped = drops.since();
    assert_eq!(s["protocol"], "zergcity");
    assert_eq!(s["bots"]["connected"], 200, "{}", s["errors"]);
    assert!(
        s["target"].as_str().unwrap().contains("50 instances"),
        "{}",
        s["target"]
    );
    // Every threshold met; the loss ones may fail only for datagrams the kernel dropped.
    assert_pass_but_kernel_loss(&s, dropped);
    // Snapshots: one FullSnapshot per session at least, LZ4 compressed, then deltas.
    let full = metric(&s, "full_snapshot_compressed_bytes");
    assert!(full["count"].as_u64().unwrap() >= 200, "{full}");
    let raw = metric(&s, "full_snapshot_uncompressed_bytes");
    assert!(raw["p50"].as_u64().unwrap() > full["p50"].as_u64().unwrap());
    assert!(metric(&s, "compression_ratio")["p50"].as_u64().unwrap() > 100);
    assert!(
        metric(&s, "delta_compressed_bytes")["count"]
            .as_u64()
            .unwrap()
            > 200 * 20 * 2
    );
    // A delta on a baseline the bot lacks needs a lost datagram: on loopback, only one the
    // kernel dropped for a starved receiver.
    let misses = metric(&s, "baseline_misses");
    assert!(
        misses == 0 || dropped > 0,
        "{misses} baseline misses, no kernel drops"
    );
    assert!(
        metric(&s, "input_ack_latency_us")["count"]
            .as_u64()
            .unwrap()
            > 1000
    );
    assert!(metric(&s, "input_result.accepted").as_u64().unwrap() > 100);
    // Reconnection: a quarter of the bots, all back in their slot.
    let attempts = metric(&s, "reconnect_attempts").as_u64().unwrap();
    assert!(attempts >= 30, "{attempts}");
    assert_eq!(
        metric(&s, "reconnect_slot_restored").as_u64().unwrap(),
        attempts
    );
    assert_eq!(metric(&s, "reconnect_failed"), 0);
    assert_eq!(metric(&s, "resync_us")["count"].as_u64().unwrap(), attempts);
    // Measurements.
    assert!(s["rtt_us"]["count"].as_u64().unwrap() > 200);
    let down = &s["loss"]["downstream"];
    let per = ENET_MESSAGES_PER_DATAGRAM;
    assert_loopback_loss(down, dropped, per, "downstream");
    assert_loopback_loss(&s["loss"]["upstream"], dropped, per, "upstream");
    assert!(s["protocol_metric_info"]["resync_us"]["label"].is_string());
    assert_eq!(s["errors"]["decode"], serde_json::json!({}));
}

/// A fleet of one game: the fifth player is refused as "server full", a counted outcome.
#[test]
fn the_fifth_player_of_a_game_is_refused() {
    let text = Scenario::file("zergcity.yaml")
        .set("population.stages.0.ramp_to", 5)
        .set("population.stages.0.over", "1s")
        .set("population.stages.1.hold", "3s")
        .set("protocol.zergcity.reconnect_share", 0)
        .add("server.instances", 1)
        .set("duration", "4s")
        .text();
    let s = run_text(&text, &[], &[0, 1]).1;
    assert_eq!(s["bots"]["connected"], 4, "{}", s["errors"]);
    assert_eq!(s["errors"]["connect"]["server_full"], 1, "{}", s["errors"]);
    assert_eq!(s["verdict"], "fail", "connect_success < 99.9 %");
}
