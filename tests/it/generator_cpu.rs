//! The generator's CPU per datagram (`generator.cpu_ns`, `.cpu_ns_per_datagram_sent`,
//! `.cpu_ns_per_datagram_received`, and per second `intervals[].generator.cpu_ns`): present,
//! positive, and consistent with the counts it divides, never a timing figure. Whatever the
//! machine's load, the figures per datagram are the CPU sum over the datagram counts of the
//! same summary, the seconds' CPU never exceeds the run's, a run with twice the bots sends
//! about twice the datagrams, and `merge` adds the machines' CPU.

use std::process::Command;

use serde_json::Value;

use crate::common::summary::{at, f64_at, run_text_in, stderr, summary_in, u64_at};

/// Cafe against the embedded server, one worker, the bots all in at once.
fn scenario(bots: u64) -> String {
    format!(
        "name: cpu\nprotocol:\n  cafe: {{}}\ntarget: embedded\npopulation:\n  stages:\n    \
         - ramp_to: {bots}\n      over: 0s\nbehaviour:\n  input_rate: 60\n  ping_interval: \
         250ms\nduration: 3s\nengine:\n  workers: 1\n"
    )
}

/// `cpu / datagrams`, as the summary rounds it (0.1 ns), times `datagrams` gives `cpu` back
/// within the rounding: half a tenth of a ns per datagram.
fn assert_divides(cpu: u64, per: f64, datagrams: u64, what: &str) {
    let back = per * datagrams as f64;
    let slack = 0.05 * datagrams as f64 + 1.0;
    assert!(
        (back - cpu as f64).abs() <= slack,
        "{what}: {per} ns × {datagrams} = {back}, the CPU is {cpu} ns"
    );
}

/// The run's figures and each whole second's, checked against their own counts.
fn check(s: &Value) -> (u64, u64) {
    let cpu = u64_at(s, "generator.cpu_ns");
    let sent = u64_at(s, "bandwidth.wire_up_packets");
    let received = u64_at(s, "bandwidth.wire_down_packets");
    assert!(
        cpu > 0 && sent > 0 && received > 0,
        "{}",
        at(s, "generator")
    );
    assert_divides(
        cpu,
        f64_at(s, "generator.cpu_ns_per_datagram_sent"),
        sent,
        "sent",
    );
    assert_divides(
        cpu,
        f64_at(s, "generator.cpu_ns_per_datagram_received"),
        received,
        "received",
    );
    // Not more CPU than one worker's thread could have used over the run and its close (the
    // run's 3 s, up to 1 s of sessions closing, and a second for a slow machine's end).
    assert!(cpu <= 5_000_000_000, "{cpu} ns on one worker in a 3 s run");
    let mut seconds = 0u64;
    let mut whole = 0;
    for p in at(s, "intervals").as_array().expect("intervals") {
        if p.get("partial").is_some() {
            // The last, partial second carries no health (its CPU is in the total).
            continue;
        }
        whole += 1;
        let g = at(p, "generator");
        let c = u64_at(g, "cpu_ns");
        let n = u64_at(g, "datagrams_sent");
        assert!(c > 0, "a second with bots playing used no CPU: {g}");
        if n > 0 {
            assert_divides(c, f64_at(g, "cpu_ns_per_datagram_sent"), n, "a second");
        }
        seconds += c;
    }
    assert!(whole >= 2, "{}", at(s, "intervals"));
    // The whole seconds' readings are part of the run's: the run adds the last, partial
    // second and the sessions' close.
    assert!(seconds < cpu, "seconds {seconds} ns, run {cpu} ns");
    (cpu, sent)
}

#[test]
fn cpu_per_datagram_is_the_workers_cpu_over_the_datagrams_and_merges_as_a_sum() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dirs: Vec<_> = ["a", "b", "c"].iter().map(|d| tmp.path().join(d)).collect();
    for d in &dirs {
        std::fs::create_dir_all(d).expect("dir");
    }
    let (_, small) = run_text_in(&dirs[0], &scenario(20), &[], &[0, 1]);
    let (_, again) = run_text_in(&dirs[1], &scenario(20), &[], &[0, 1]);
    let (_, large) = run_text_in(&dirs[2], &scenario(40), &[], &[0, 1]);
    let (cpu_a, sent_a) = check(&small);
    let (cpu_b, sent_b) = check(&again);
    let (_, sent_large) = check(&large);
    // Twice the bots on the same 60 Hz grid: about twice the datagrams due (the handshakes
    // and the pings' share are the same per bot). Counted with the slots a worker skipped: on
    // a loaded machine a run sends fewer than were due, and says so there.
    let due = |s: &Value, sent: u64| sent + u64_at(s, "generator.inputs_skipped");
    let ratio = due(&large, sent_large) as f64 / due(&small, sent_a) as f64;
    assert!(
        (1.6..=2.4).contains(&ratio),
        "{sent_a} datagrams with 20 bots, {sent_large} with 40; skipped: {}, {}; connected: \
         {}, {}",
        at(&small, "generator.inputs_skipped"),
        at(&large, "generator.inputs_skipped"),
        at(&small, "bots.connected"),
        at(&large, "bots.connected"),
    );

    // Two machines' runs of one scenario merged: their CPU adds up, and so do the datagrams
    // it is divided by.
    let merged = tmp.path().join("merged");
    let o = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("merge")
        .arg(dirs[0].join("out"))
        .arg(dirs[1].join("out"))
        .arg("--out")
        .arg(&merged)
        .output()
        .expect("merge");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let m = summary_in(&merged);
    assert_eq!(u64_at(&m, "generator.cpu_ns"), cpu_a + cpu_b);
    assert_eq!(u64_at(&m, "bandwidth.wire_up_packets"), sent_a + sent_b);
    assert_divides(
        cpu_a + cpu_b,
        f64_at(&m, "generator.cpu_ns_per_datagram_sent"),
        sent_a + sent_b,
        "merged",
    );
}
