//! The snapshot rate the engine reports (summary.json `snapshot_rate` and each second's
//! `snapshot_rate_hz`) against a server whose rate is known: the embedded cafe server sends a
//! snapshot every tick, so at `tick_rate: 30` every bot in play gets 30 a second.

use crate::common::scenario::Scenario;
use crate::common::summary::{at, f64_at, run_and_read, u64_at};

#[test]
fn a_server_at_30_snapshots_a_second_reads_30_hz_every_second() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("rate.yaml");
    Scenario::file("quickstart.yaml")
        .set("server.tick_rate", 30)
        .set("population.stages.0.over", "500ms")
        .write(&file);
    let s = run_and_read(
        &file,
        &["--bots", "10", "--duration", "5s", "--quiet"],
        &tmp.path().join("out"),
    );
    assert!(
        u64_at(&s, "snapshot_rate.seconds") >= 3,
        "{}",
        at(&s, "snapshot_rate")
    );
    // A bot's second holds 29 to 31 snapshots as the second's edge falls between two; the
    // average over 10 bots stays within one of 30.
    for key in ["min_hz", "p50_hz", "max_hz", "mean_hz"] {
        let v = f64_at(&s, &format!("snapshot_rate.{key}"));
        assert!(
            (29.0..=31.0).contains(&v),
            "{key} {v}: {}",
            at(&s, "snapshot_rate")
        );
    }
    assert!(at(&s, "snapshot_rate.changes")
        .as_array()
        .expect("changes")
        .is_empty());
    // Each whole second carries its rate and the sums it is made of.
    let seconds: Vec<&serde_json::Value> = at(&s, "intervals")
        .as_array()
        .expect("intervals")
        .iter()
        .filter(|p| p.get("snapshot_rate_hz").is_some())
        .collect();
    assert!(seconds.len() >= 3);
    for p in seconds {
        let hz = f64_at(p, "snapshot_rate_hz");
        let sums = f64_at(p, "snapshot_rate.snapshots") / f64_at(p, "snapshot_rate.bot_seconds");
        assert_eq!(hz, sums, "{p}");
        assert!((26.0..=34.0).contains(&hz), "{p}");
    }
}
