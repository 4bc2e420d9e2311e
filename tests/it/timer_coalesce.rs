//! `engine.timer_coalesce`: a worker serves its bots' timers on a grid of steps from the
//! run's start. What must hold whatever the machine's load: a deadline is rounded *up* to its
//! step, so send lateness is at least what the rounding adds (with a 10 ms step and bots
//! spread over the 60 Hz grid, half of them wait 5 ms or more); bots due within one step
//! leave in one batch (with io_uring); and `validate` says which step a run will use,
//! including the default (1 ms at every population).

use std::process::Command;

use crate::common::scenario::Scenario;
use crate::common::summary::run_and_read;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tickswarm"))
}

#[test]
fn a_10ms_step_delays_sends_to_its_grid_and_batches_them() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("coalesced.yaml");
    Scenario::file("quickstart.yaml")
        .add(
            "engine",
            serde_json::json!({ "timer_coalesce": "10ms", "workers": 1 }),
        )
        .write(&file);
    let s = run_and_read(
        &file,
        &["--bots", "100", "--duration", "3s"],
        &tmp.path().join("out"),
    );
    let g = &s["generator"];
    // On a loaded machine a few handshakes may not finish; the bots that play are enough.
    assert!(
        s["bots"]["connected"].as_u64().unwrap() >= 90,
        "{}",
        s["bots"]
    );
    // Rounded up to 10 ms steps: a bot's input waits (step - its phase within the step), so
    // the median wait is about 5 ms; a late worker only adds to it.
    let p50 = g["send_lateness_us"]["p50"].as_u64().expect("lateness p50");
    assert!(p50 >= 2_500, "lateness p50 {p50} µs with a 10 ms step");
    // 100 bots at 60 Hz over 10 ms steps: about 60 inputs per step, sent together.
    if g["send_io"]["path"] == "io_uring" {
        let max = g["send_io"]["batch_max"].as_u64().expect("batch_max");
        assert!(max >= 30, "largest batch {max}: {}", g["send_io"]);
    }
}

#[test]
fn validate_names_the_step_and_the_default_at_every_population() {
    let quickstart = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/quickstart.yaml");
    let text = |args: &[&str]| {
        let o = bin()
            .arg("validate")
            .arg(quickstart)
            .args(args)
            .output()
            .expect("validate");
        assert_eq!(o.status.code(), Some(0));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    // 1 ms steps by default however few bots a worker has (issue 40: below 1,000 bots per
    // worker each input used to be a wake-up of its own).
    for bots in ["10", "1999", "2000"] {
        let plan = text(&["--bots", bots, "--workers", "2"]);
        assert!(
            plan.contains("timers     served in steps of 1ms") && plan.contains("the default)"),
            "{bots} bots: {plan}"
        );
    }
}

/// A run with simulated links keeps exact timers by default below 1,000 bots per worker: the
/// links' delays are released by the worker's timers, and a step would add to them.
#[test]
fn simulated_links_keep_exact_timers_by_default_below_1000_bots_per_worker() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("linked.yaml");
    Scenario::file("quickstart.yaml")
        .add("network", serde_json::json!({ "latency": "20ms" }))
        .write(&file);
    let text = |bots: &str| {
        let o = bin()
            .arg("validate")
            .arg(&file)
            .args(["--bots", bots, "--workers", "2"])
            .output()
            .expect("validate");
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let small = text("1999");
    assert!(!small.contains("timers "), "{small}");
    let large = text("2000");
    assert!(
        large.contains("timers     served in steps of 1ms"),
        "{large}"
    );
}
