//! End to end on loopback: the real binary, 120 bots over plain UDP against two embedded
//! DarkAges zones; bots walk across the border, so handoffs happen and are counted.

use crate::common::scenario::Scenario;
use crate::common::summary::{declared_counter, object_at, run_scenario, server_event};

#[test]
fn darkages_swarm_hands_over_between_two_embedded_zones() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("darkages.yaml");
    Scenario::file("darkages.yaml")
        .set("duration", "6s")
        .set("population.stages.1.hold", "4s")
        .set("protocol.darkages.turn_every_ms", 2500)
        // This checks behaviour, not speed: a debug build of the swarm and two zones on a
        // shared 2-core machine queues for hundreds of milliseconds.
        .replace_item("thresholds", "rtt p99 < 50ms", "rtt p99 < 5s")
        .write(&scenario);
    let out = tmp.path().join("out");
    let (_, s) = run_scenario(&scenario, &["--bots", "120"], &out, &[0]);
    assert_eq!(s["protocol"], "darkages");
    assert_eq!(s["dialect"], "spec");
    assert!(
        s["transport"].as_str().unwrap().contains("UDP"),
        "{}",
        s["transport"]
    );
    assert!(
        s["target"].as_str().unwrap().contains("2 instances"),
        "{}",
        s["target"]
    );
    assert_eq!(s["bots"]["planned"], 120);
    assert_eq!(s["bots"]["connected"], 120);
    assert!(s["rtt_us"]["count"].as_u64().unwrap() > 200);
    let down = &s["loss"]["downstream"];
    assert!(down["expected"].as_u64().unwrap() > 120 * 20 * 3, "{down}");
    let pm = &s["protocol_metrics"];
    let handoffs = declared_counter(&s, "handoffs");
    assert!(handoffs >= 30, "handoffs {handoffs}: {pm}");
    assert_eq!(pm["handoff_us"]["count"].as_u64(), Some(handoffs));
    for reason in ["timeout", "refused", "expired_token", "bad_address"] {
        assert_eq!(
            declared_counter(&s, &format!("handoff_failed.{reason}")),
            0,
            "{reason}: {pm}"
        );
    }
    let server = &pm["embedded_server"]["events"];
    // Every handoff a bot completed arrived at a zone; a few more may have arrived whose
    // completion the bot had not seen yet when the run stopped (one per bot at most).
    let arrived = server_event(&s, "handoff_in");
    assert!(
        arrived >= handoffs && arrived - handoffs <= 12,
        "zones saw {arrived} handoffs arrive, bots completed {handoffs}: {server}"
    );
    for h in [
        "delta_savings_pct",
        "snapshot_full_bytes",
        "snapshot_delta_bytes",
        "prediction_error",
    ] {
        assert!(pm[h]["count"].as_u64().unwrap() > 0, "{h}: {pm}");
    }
    assert!(declared_counter(&s, "invalid_input_sent") > 0, "{pm}");
    let decode = object_at(&s, "errors.decode");
    assert!(decode.is_empty(), "decode errors: {decode:?}");
}
