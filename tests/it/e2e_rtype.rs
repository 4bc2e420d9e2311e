//! End to end on loopback: a few hundred bots against the embedded R-Type reference server.

use crate::common::kernel::{assert_loopback_loss, UdpDrops};
use crate::common::scenario::Scenario;
use crate::common::summary::{at, run_scenario, u64_at};

/// Every bot is accepted; RTT, snapshot and entity metrics land in summary.json; nothing is
/// lost on loopback; the report is written.
#[test]
fn rtype_swarm_against_embedded_server() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("rtype.yaml");
    Scenario::file("rtype.yaml")
        .set("duration", "4s")
        .set("population.stages.1.hold", "3s")
        .set("population.stages.0.over", "1s")
        // The verdict under test is the default checks (nothing lost, every bot in);
        // loopback RTT on a shared 2-core CI machine is not (a loaded run saw p99 86 ms).
        .replace_item("thresholds", "rtt p99 < 50ms", "rtt p99 < 5s")
        .write(&scenario);
    let out = tmp.path().join("out");
    let drops = UdpDrops::now();
    let (_, s) = run_scenario(&scenario, &[], &out, &[0]);
    let dropped = drops.since();
    assert_eq!(s["protocol"], "rtype");
    assert_eq!(s["bots"]["planned"], 200);
    assert_eq!(s["bots"]["connected"], 200);
    assert!(s["rtt_us"]["count"].as_u64().unwrap() > 200);
    let down = &s["loss"]["downstream"];
    assert!(down["expected"].as_u64().unwrap() > 200 * 20 * 2, "{down}");
    assert_loopback_loss(down, dropped, 1, "downstream");
    assert!(at(&s, "loss.upstream").is_null(), "{}", s["loss"]);
    let pm = &s["protocol_metrics"];
    for h in [
        "entities",
        "snapshot_jitter_us",
        "snapshot_age_ticks",
        "interp_delay_us",
    ] {
        assert!(
            u64_at(&s, &format!("protocol_metrics.{h}.count")) > 0,
            "protocol_metrics.{h}: {pm}"
        );
    }
    // The server snapshots at 20 Hz: inter-arrival p50 is ~50 ms.
    let p50 = s["snapshot_interarrival_us"]["p50"].as_u64().unwrap();
    assert!(
        (40_000..=60_000).contains(&p50),
        "snapshot inter-arrival p50 {p50}"
    );
    assert!(out.join("report.html").exists());
}
