//! `engine.timer_coalesce`: a worker serves its bots' timers on a grid of steps from the
//! run's start, a division of the input period, and the bots' phases are on its steps. What
//! must hold whatever the machine's load: an input leaves at its own slot, not rounded up to
//! a step (with one step per period, half the bots would otherwise wait 8 ms or more); bots
//! due within one step leave in one batch (with io_uring); and `validate` says which step a
//! run will use, including the default for the population.

use std::process::Command;

use crate::common::scenario::Scenario;
use crate::common::summary::{run_and_read, u64_at};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tickswarm"))
}

#[test]
fn a_step_of_a_whole_period_sends_each_workers_bots_together_at_their_own_slots() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("coalesced.yaml");
    Scenario::file("quickstart.yaml")
        .add(
            "engine",
            serde_json::json!({ "timer_coalesce": "16ms", "workers": 1 }),
        )
        .write(&file);
    let s = run_and_read(
        &file,
        &["--bots", "100", "--duration", "3s"],
        &tmp.path().join("out"),
    );
    let g = &s["generator"];
    // 16 ms at 60 Hz is the nearest division of the period: one step per period.
    assert_eq!(u64_at(&s, "generator.timer_step_us"), 16_666, "{g}");
    // On a loaded machine a few handshakes may not finish; the bots that play are enough.
    assert!(u64_at(&s, "bots.connected") >= 90, "{}", s["bots"]);
    // Every bot's phase is the step's one instant, counted from the run's start: its inputs
    // leave at their slots, late only by the wake-up's own delay. Rounded up to a 16.7 ms
    // step, as before the phases were put on steps, the median input waited half a step
    // (8.3 ms); a saturated debug build wakes within a quarter of one.
    let p50 = u64_at(&s, "generator.send_lateness_us.p50");
    assert!(p50 < 4_000, "lateness p50 {p50} µs with a 16.7 ms step");
    // 100 bots in one step: their inputs go out in one batch per period.
    if g["send_io"]["path"] == "io_uring" {
        let max = u64_at(&s, "generator.send_io.batch_max");
        assert!(max >= 60, "largest batch {max}: {}", g["send_io"]);
    }
}

#[test]
fn validate_names_the_step_and_the_default_for_the_population() {
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
    // 1 ms steps (17 of the 60 Hz period) at every population (issue 40: below 1,000 bots per
    // worker each input used to be a wake-up of its own), the bots' phases on as few of them
    // as keep about 32 inputs per worker each: 2 for 10 bots, 3 for 200, every step from about
    // 1,100 per worker.
    for (bots, phases) in [
        ("10", "on 2 of its 17 steps"),
        ("200", "on 3 of its 17 steps"),
        ("2200", "17 per input period"),
    ] {
        let plan = text(&["--bots", bots, "--workers", "2"]);
        assert!(
            plan.contains("timers     served in steps of 980us")
                && plan.contains(phases)
                && plan.contains("the default for this many bots per worker"),
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
        large.contains("timers     served in steps of 980us"),
        "{large}"
    );
}
