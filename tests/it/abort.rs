//! `abort_on_fail:`: a plain run stops itself when a threshold fails for a sustained span,
//! writes its report, names the threshold, and fails.

use std::time::Instant;

use crate::common::scenario::Scenario;
use crate::common::summary::{f64_at, run_scenario, str_at, u64_at};

#[test]
fn a_threshold_failing_second_after_second_stops_the_run_early() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("abort.yaml");
    // Loopback round trips are never under a microsecond: this threshold fails every second.
    Scenario::file("quickstart.yaml")
        .set(
            "thresholds",
            serde_json::json!(["rtt p99 < 1us", "downstream_loss < 50%"]),
        )
        .add("abort_on_fail", "2s")
        .write(&file);
    let out = tmp.path().join("out");
    let t0 = Instant::now();
    let (o, s) = run_scenario(&file, &["--bots", "10", "--duration", "20s"], &out, &[1]);
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    // 20 s asked for; the breach is sustained from the first second with a pong.
    assert!(took.as_secs() < 15, "ran {took:?}: {err}");
    assert!(
        err.contains("stopping: `rtt p99 < 1us` failed 2 s in a row"),
        "{err}"
    );
    assert_eq!(str_at(&s, "aborted.condition"), "rtt p99 < 1us");
    assert_eq!(u64_at(&s, "aborted.seconds"), 2);
    assert!(f64_at(&s, "aborted.at_s") < 10.0);
    assert!(f64_at(&s, "aborted.observed") >= 1.0);
    assert_eq!(str_at(&s, "verdict"), "fail");
    let html = std::fs::read_to_string(out.join("report.html")).expect("report");
    assert!(html.contains("The run stopped itself (abort_on_fail)"));
    assert!(f64_at(&s, "duration_s") < 12.0);
}
