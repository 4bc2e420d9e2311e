//! End to end on loopback: the real binary, 120 bots over plain UDP against two embedded
//! DarkAges zones; bots walk across the border, so handoffs happen and are counted.

use std::process::Command;

use serde_json::Value;

#[test]
fn darkages_swarm_hands_over_between_two_embedded_zones() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("darkages.yaml");
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/darkages.yaml"
    ))
    .unwrap()
    .replace("duration: 10s", "duration: 6s")
    .replace("hold: 8s", "hold: 4s")
    .replace("turn_every_ms: 4000", "turn_every_ms: 2500")
    // This checks behaviour, not speed: a debug build of the swarm and two zones on a
    // shared 2-core machine queues for hundreds of milliseconds.
    .replace("rtt p99 < 50ms", "rtt p99 < 5s");
    std::fs::write(&scenario, text).unwrap();
    let out = tmp.path().join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("run")
        .arg(&scenario)
        .arg("--out")
        .arg(&out)
        .args(["--bots", "120"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
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
    let handoffs = pm["handoffs"].as_u64().unwrap_or(0);
    assert!(handoffs >= 30, "handoffs {handoffs}: {pm}");
    assert_eq!(pm["handoff_us"]["count"].as_u64(), Some(handoffs));
    for reason in ["timeout", "refused", "expired_token", "bad_address"] {
        assert_eq!(
            pm[format!("handoff_failed.{reason}")].as_u64().unwrap_or(0),
            0,
            "{reason}: {pm}"
        );
    }
    let server = &pm["embedded_server"]["events"];
    // Every handoff a bot completed arrived at a zone; a few more may have arrived whose
    // completion the bot had not seen yet when the run stopped (one per bot at most).
    let arrived = server["handoff_in"].as_u64().unwrap_or(0);
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
        assert!(pm[h]["count"].as_u64().unwrap_or(0) > 0, "{h}: {pm}");
    }
    assert!(pm["invalid_input_sent"].as_u64().unwrap_or(0) > 0, "{pm}");
    assert_eq!(s["errors"]["decode"].as_object().map_or(0, |m| m.len()), 0);
}
