//! A worker that cannot keep up still reports every second as it happens.
//!
//! An overloaded worker's timer task always has a deadline already due. Before it handed the
//! thread back to the runtime after each wake-up, it never did, so the worker's receive tasks
//! and its once-a-second interval task starved: the first second's record arrived seconds
//! late holding everything sent so far, the next ones held nothing, and the run's last
//! seconds had no record at all (and the bots read their pongs a second late). The run here
//! is overloaded on any machine: 300 bots at 1,000 inputs a second on one worker is 300,000
//! datagrams a second, more than a release build's worker sends on one core.

use crate::common::scenario::Scenario;
use crate::common::summary::run_and_read;

#[test]
fn an_overloaded_worker_still_reports_each_second_with_what_it_sent_in_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("overload.yaml");
    Scenario::file("quickstart.yaml")
        .set("behaviour.input_rate", 1000)
        .set("server.tick_rate", 10)
        .set("population.stages.0.over", "500ms")
        .add(
            "engine",
            serde_json::json!({ "workers": 1, "timer_coalesce": "1ms" }),
        )
        .write(&file);
    let s = run_and_read(
        &file,
        &["--bots", "300", "--duration", "4s"],
        &tmp.path().join("out"),
    );
    let g = &s["generator"];
    let skipped = g["inputs_skipped"].as_u64().expect("inputs_skipped");
    assert!(
        skipped > 0,
        "the worker kept up with 300,000 inputs a second: this test needs it behind ({g})"
    );
    let intervals = s["intervals"].as_array().expect("intervals");
    // Every whole second of the run has its own record, and each holds datagrams sent in it.
    for second in 1..=3u64 {
        let iv = intervals
            .iter()
            .find(|p| p["t"].as_f64() == Some(second as f64) && p["partial"] != true)
            .unwrap_or_else(|| panic!("no record for second {second}: {intervals:?}"));
        let up = iv["packets_up"].as_u64().expect("packets_up");
        assert!(up > 0, "second {second} sent nothing: {intervals:?}");
    }
}
