//! End to end: the real binary, real sockets on loopback, the embedded cafe server.
//!
//! Each run is bounded (a few seconds, a few hundred bots at most).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::kernel::{assert_loopback_loss, assert_pass_on_a_loaded_machine, UdpDrops};
use crate::common::scenario::replace_once;
use crate::common::summary::{
    assert_absent, at, emitted_counter, run_command, run_scenario, stderr, summary_in,
};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tickswarm"))
}

fn write_scenario(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write scenario");
    p
}

const SWARM: &str = r#"
name: e2e
protocol:
  cafe: {}
target: embedded
population:
  stages:
    - ramp_to: 200
      over: 1s
    - hold: 3s
behaviour:
  input_rate: 60
  ping_interval: 250ms
seed: 7
thresholds:
  - rtt p99 < 2s
  - downstream_loss < 1%
  - connect_success >= 100%
"#;

/// A few hundred bots against the embedded server: every bot connects, RTT is sampled, nothing
/// is lost on loopback, inputs go out at 60 Hz, and summary.json, report.html and junit.xml
/// are written with the contract's keys.
#[test]
fn swarm_against_embedded_server() {
    let tmp = tempfile::tempdir().unwrap();
    let sc = write_scenario(tmp.path(), "s.yaml", SWARM);
    let out = tmp.path().join("out");
    let drops = UdpDrops::now();
    let (_, s) = run_scenario(&sc, &[], &out, &[0, 1]);
    let dropped = drops.since();
    // Passes, or fails only where the run's own figures show a loaded machine.
    assert_pass_on_a_loaded_machine(&s, dropped);
    assert_eq!(s["protocol"], "cafe");
    assert_eq!(s["bots"]["planned"], 200);
    assert_eq!(s["bots"]["connected"], 200);
    assert_eq!(s["bots"]["failed"], 0);
    assert!(
        s["rtt_us"]["count"].as_u64().unwrap() > 200 * 4,
        "{}",
        s["rtt_us"]
    );
    assert!(s["rtt_us"]["p50"].as_u64().unwrap() > 0);
    for k in ["count", "min", "mean", "p50", "p90", "p99", "p999", "max"] {
        assert!(s["rtt_us"].get(k).is_some(), "rtt_us.{k}");
        assert!(s["handshake_us"].get(k).is_some(), "handshake_us.{k}");
        assert!(
            s["generator"]["send_lateness_us"].get(k).is_some(),
            "lateness.{k}"
        );
    }
    let down = &s["loss"]["downstream"];
    assert!(down["expected"].as_u64().unwrap() > 200 * 60 * 2);
    // Loopback loses nothing the kernel did not drop for a starved receiver.
    assert_loopback_loss(down, dropped, 1, "downstream");
    assert!(
        at(&s, "loss.upstream").is_null(),
        "cafe cannot measure upstream loss: {}",
        s["loss"]
    );
    // Grid slots: ~60 Hz for ~3-4 s per bot; the grid is exact, so allow only the ramp's
    // spread. A worker more than a period late (a loaded machine) skips slots and counts
    // them, so sent plus skipped is what the grid held.
    let inputs = s["inputs_sent"].as_u64().unwrap();
    let skipped = s["generator"]["inputs_skipped"].as_u64().unwrap();
    assert!(
        inputs + skipped > 200 * 60 * 3 * 9 / 10,
        "inputs_sent {inputs} + skipped {skipped}"
    );
    assert!(inputs + skipped <= 200 * 60 * 4, "inputs_sent {inputs}");
    assert!(s["snapshots_applied"].as_u64().unwrap() > 0);
    assert!(s["bandwidth"]["up_bytes"].as_u64().unwrap() > 0);
    // The scenario's three thresholds and the six default checks (met, as above).
    let th = s["thresholds"].as_array().unwrap();
    assert_eq!(th.len(), 9);
    assert_eq!(th.iter().filter(|t| t["default"] == true).count(), 6);
    assert_eq!(s["bots"]["never_connected"], 0);
    assert_eq!(s["bots"]["lost"], 0);
    // Silent at the end only where the kernel dropped a starved receiver's datagrams.
    let silent = s["bots"]["silent_at_end"].as_u64().expect("silent_at_end");
    assert!(
        silent == 0 || dropped > 0,
        "{silent} silent, no kernel drops"
    );
    assert!(s["intervals"].as_array().unwrap().len() >= 3);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("e2e"));
    assert!(out.join("junit.xml").exists());
    let hlog = std::fs::read_to_string(out.join("histograms.hlog")).unwrap();
    assert!(hlog.contains("Tag=rtt_us,"), "{hlog}");
}

/// A scenario error names the file, line and column, and exits 2.
#[test]
fn bad_scenario_exits_2_with_location() {
    let tmp = tempfile::tempdir().unwrap();
    let sc = write_scenario(
        tmp.path(),
        "bad.yaml",
        "name: x\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 10\n      over: 1s\nbehavior:\n  input_rate: 60\n",
    );
    let o = bin().arg("run").arg(&sc).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("bad.yaml:8:1"), "{e}");
    assert!(e.contains("did you mean `behaviour`"), "{e}");
    let o = bin().arg("validate").arg(&sc).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// A bad value is reported like a syntax error: file, line and column, the range stated
/// rightly, numbers in words a scenario's author uses; a misspelt protocol gets a did-you-mean;
/// a target without a port is refused with the port to write.
#[test]
fn value_errors_name_file_line_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    let base = "name: x\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 10\n      over: 1s\n";
    let cases: [(&str, String, &[&str]); 5] = [
        (
            "rate.yaml",
            format!("{base}behaviour:\n  input_rate: 0\n"),
            &[
                "rate.yaml:9:15",
                "above 0 and at most 1000 inputs per second, got 0",
            ],
        ),
        (
            "lots.yaml",
            replace_once(base, "ramp_to: 10", "ramp_to: lots"),
            &[
                "lots.yaml:6:16",
                "ramp_to: `lots` is not a whole number; write a whole number of bots (0 or more)",
            ],
        ),
        (
            "ping.yaml",
            format!("{base}behaviour:\n  ping_interval: 0s\n"),
            &["ping.yaml:9:18", "must be longer than 0"],
        ),
        (
            "proto.yaml",
            replace_once(base, "cafe: {}", "cafee: {}"),
            &["proto.yaml:3:3", "did you mean `cafe`?"],
        ),
        (
            "noport.yaml",
            format!("{base}target: 127.0.0.1\n"),
            &["target `127.0.0.1` has no port; write `127.0.0.1:4242`"],
        ),
    ];
    for (name, text, wants) in cases {
        let sc = write_scenario(tmp.path(), name, &text);
        let o = bin().arg("validate").arg(&sc).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{name}");
        let e = stderr(&o);
        for want in wants {
            assert!(e.contains(want), "{name}: `{want}` not in {e}");
        }
    }
}

/// `validate` prints the plan and exits 0 for a good file.
#[test]
fn validate_prints_the_plan() {
    let tmp = tempfile::tempdir().unwrap();
    let sc = write_scenario(tmp.path(), "s.yaml", SWARM);
    let o = bin()
        .arg("validate")
        .arg(&sc)
        .arg("--bots")
        .arg("50")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("bots       50 over 4s"), "{out}");
    assert!(out.contains("rtt p99 < 2s"), "{out}");
}

/// Nobody listening: no bot completes the handshake, exit 3, and the report is still written.
#[test]
fn unreachable_target_exits_3() {
    // A port that was free a moment ago: bind, note, drop.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let tmp = tempfile::tempdir().unwrap();
    let sc = write_scenario(
        tmp.path(),
        "s.yaml",
        "name: gone\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 5\n      over: 0s\nbehaviour:\n  handshake_timeout: 500ms\n  handshake_retry: 100ms\nduration: 1500ms\n",
    );
    let out = tmp.path().join("out");
    let (o, s) = run_scenario(&sc, &["--target", &format!("127.0.0.1:{port}")], &out, &[3]);
    assert!(stderr(&o).contains("target unreachable"));
    // The message names what was seen, not an empty "()".
    assert!(stderr(&o).contains("(timeout: 5)"), "{}", stderr(&o));
    assert_eq!(s["bots"]["connected"], 0);
    assert_eq!(s["bots"]["failed"], 5);
    assert_eq!(s["errors"]["connect"]["timeout"], 5);
    // Nothing measured is not zero: a `jq '.rtt_us.p99 < 50000'` gate cannot pass on it.
    assert_eq!(s["rtt_us"]["count"], 0);
    assert!(at(&s, "rtt_us.p99").is_null(), "{}", s["rtt_us"]);
    assert!(
        at(&s, "handshake_us.p50").is_null(),
        "{}",
        s["handshake_us"]
    );
    // No loss figure either: with nothing expected, `loss.downstream` is null (there is no
    // `rate` to read; a 0 % would pass a loss gate).
    assert!(
        at(&s, "loss.downstream").is_null(),
        "{}",
        s["loss"]["downstream"]
    );
}

/// A threshold that cannot hold fails the run with exit 1, and says which one.
#[test]
fn failed_threshold_exits_1() {
    let tmp = tempfile::tempdir().unwrap();
    let sc = write_scenario(
        tmp.path(),
        "s.yaml",
        "name: strict\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 5\n      over: 0s\nbehaviour:\n  ping_interval: 100ms\nduration: 1500ms\nthresholds:\n  - rtt max < 1us\n",
    );
    let out = tmp.path().join("out");
    let (_, s) = run_scenario(&sc, &[], &out, &[1]);
    assert_eq!(s["verdict"], "fail");
    assert_eq!(s["thresholds"][0]["ok"], false);
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(junit.contains("<failure"), "{junit}");
}

/// Ctrl-C (SIGINT) stops the swarm early and still writes the report, marked interrupted.
#[cfg(unix)]
#[test]
fn ctrl_c_still_writes_the_report() {
    let tmp = tempfile::tempdir().unwrap();
    let sc = write_scenario(
        tmp.path(),
        "s.yaml",
        "name: cut\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 20\n      over: 0s\nduration: 60s\n",
    );
    let out = tmp.path().join("out");
    let mut child = run_command(&sc, &[], &out).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    // SAFETY: sending a signal to our own child process.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let started = std::time::Instant::now();
    let status = child.wait().unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    let s = summary_in(&out);
    assert_eq!(s["interrupted"], true);
    assert_eq!(s["bots"]["connected"], 20);
    let ran = s["duration_s"].as_f64().expect("duration_s");
    assert!(ran < 10.0);
    // Cut short of its 60 s, the run fails by default (`interrupted: fail`), whatever its
    // thresholds say of the part that ran, and says why in every output.
    assert_eq!(s["verdict"], "fail", "{s}");
    assert_eq!(status.code(), Some(1));
    let check = s["thresholds"]
        .as_array()
        .expect("thresholds")
        .iter()
        .find(|t| t["metric"] == "duration_s")
        .expect("the interruption's row among the thresholds");
    assert_eq!(
        check["condition"],
        "not interrupted: ran its whole 1 min 00 s (interrupted: fail)"
    );
    assert_eq!(check["ok"], false);
    assert_eq!(check["observed"].as_f64(), Some(ran));
    let junit = std::fs::read_to_string(out.join("junit.xml")).expect("junit.xml");
    assert!(
        junit.contains("name=\"not interrupted: ran its whole 1 min 00 s (interrupted: fail)\"")
            && junit.contains("<failure message=\"observed "),
        "{junit}"
    );
}

/// More bots than file descriptors: a plain message and exit 2 before anything starts.
#[cfg(unix)]
#[test]
fn too_few_file_descriptors_is_said_plainly() {
    let tmp = tempfile::tempdir().unwrap();
    let sc = write_scenario(tmp.path(), "s.yaml", SWARM);
    let cmd = format!(
        "ulimit -n 100 && ulimit -Hn 100 && exec '{}' run '{}' --bots 500 --out '{}'",
        env!("CARGO_BIN_EXE_tickswarm"),
        sc.display(),
        tmp.path().join("out").display()
    );
    let o = Command::new("sh").arg("-c").arg(&cmd).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("500 bots need about 564 open files"), "{e}");
    assert!(e.contains("the limit is 100"), "{e}");
}

/// `protocols` names each protocol, its transport and what it cannot measure.
#[test]
fn protocols_lists_transports_and_measurability() {
    let o = bin().arg("protocols").output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("cafe (docs/protocols/cafe.md)"), "{out}");
    assert!(out.contains("rtype"), "{out}");
    assert!(out.contains("raw UDP"), "{out}");
    assert!(out.contains("upstream loss    not measurable"), "{out}");
}

/// Two runs (two "load machines") merge exactly: counts add up, and the merged histogram
/// holds every sample of both (its count is the sum; its min and max are the extremes).
#[test]
fn merge_two_runs_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let sc = write_scenario(
        tmp.path(),
        "s.yaml",
        "name: part\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 30\n      over: 0s\nbehaviour:\n  ping_interval: 100ms\nduration: 2500ms\nthresholds:\n  - rtt p99 < 2s\n",
    );
    let mut parts = Vec::new();
    for i in 0..2 {
        let out = tmp.path().join(format!("run{i}"));
        parts.push(run_scenario(&sc, &[], &out, &[0]).1);
    }
    let merged = tmp.path().join("merged");
    let o = bin()
        .arg("merge")
        .arg(tmp.path().join("run0"))
        .arg(tmp.path().join("run1"))
        .arg("--out")
        .arg(&merged)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let m = summary_in(&merged);
    let sum = |f: &dyn Fn(&Value) -> u64| parts.iter().map(f).sum::<u64>();
    assert_eq!(m["bots"]["connected"].as_u64(), Some(60));
    assert_eq!(
        m["inputs_sent"].as_u64(),
        Some(sum(&|s| s["inputs_sent"].as_u64().unwrap()))
    );
    assert_eq!(
        m["rtt_us"]["count"].as_u64(),
        Some(sum(&|s| s["rtt_us"]["count"].as_u64().unwrap()))
    );
    let min = parts
        .iter()
        .map(|s| s["rtt_us"]["min"].as_u64().unwrap())
        .min();
    let max = parts
        .iter()
        .map(|s| s["rtt_us"]["max"].as_u64().unwrap())
        .max();
    assert_eq!(m["rtt_us"]["min"].as_u64(), min);
    assert_eq!(m["rtt_us"]["max"].as_u64(), max);
    assert_eq!(
        m["loss"]["downstream"]["expected"].as_u64(),
        Some(sum(&|s| s["loss"]["downstream"]["expected"]
            .as_u64()
            .unwrap()))
    );
    assert_eq!(m["verdict"], "pass");
    assert!(merged.join("report.html").exists());
    assert!(merged.join("histograms.hlog").exists());
}

/// The per-second points add up to the run: the last, partial second is a point of its own
/// (a 2.5 s run has points at 1, 2 and 2.5 s), and every packet counted in the totals is in
/// exactly one point.
#[test]
fn intervals_add_up_to_the_totals_including_the_last_partial_second() {
    let tmp = tempfile::tempdir().unwrap();
    let sc = write_scenario(
        tmp.path(),
        "s.yaml",
        "name: tail\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 10\n      over: 0s\nduration: 2500ms\n",
    );
    let out = tmp.path().join("out");
    let (_, s) = run_scenario(&sc, &[], &out, &[0]);
    let iv = s["intervals"].as_array().unwrap();
    let ts: Vec<f64> = iv.iter().map(|p| p["t"].as_f64().unwrap()).collect();
    assert_eq!(ts.len(), 3, "{ts:?}");
    assert_eq!(&ts[..2], &[1.0, 2.0]);
    assert!((ts[2] - 2.5).abs() < 0.05, "{ts:?}");
    assert_eq!(iv[2]["partial"], true);
    // Left out on whole seconds (the last interval above has it).
    assert_absent(&iv[1], "partial");
    for (total, key) in [
        ("up_packets", "packets_up"),
        ("down_packets", "packets_down"),
        ("up_bytes", "bytes_up"),
        ("down_bytes", "bytes_down"),
    ] {
        let sum: u64 = iv.iter().map(|p| p[key].as_u64().unwrap()).sum();
        assert_eq!(sum, s["bandwidth"][total].as_u64().unwrap(), "{key}");
    }
    let inputs: u64 = iv.iter().map(|p| p["inputs_sent"].as_u64().unwrap()).sum();
    assert_eq!(inputs, s["inputs_sent"].as_u64().unwrap());
}

/// Bandwidth against what the bots must send. Cafe's Input is 16 bytes (8-byte header, player
/// id, mask, time), a Ping or a heartbeat echo 12, the Hello 24 and the Disconnect 8, so the
/// upstream total is known exactly from the counters; and a bot's second in play holds 60 grid
/// slots, give or take the one slot a second boundary can land beside, plus at most its one
/// ping (every 10 s) and one echo of the server's 2-second heartbeat.
#[test]
fn per_bot_bandwidth_matches_the_input_grid() {
    let tmp = tempfile::tempdir().unwrap();
    let sc = write_scenario(
        tmp.path(),
        "s.yaml",
        "name: bw\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 5\n      over: 500ms\nbehaviour:\n  input_rate: 60\n  ping_interval: 10s\nduration: 4500ms\n",
    );
    let out = tmp.path().join("out");
    let (_, s) = run_scenario(&sc, &[], &out, &[0]);
    let bw = &s["bandwidth"];
    let n = |v: &serde_json::Value| v.as_u64().unwrap();
    let inputs = n(&s["inputs_sent"]);
    let pm = &s["protocol_metrics"];
    let pings = n(&pm["pings_sent"]);
    // Heartbeat echoes are counted undeclared: absent when the server echoed none.
    let echoes = emitted_counter(&s, "heartbeat_echoed");
    let bots = 5;
    assert_eq!(
        pings, bots,
        "one ping per bot in a run shorter than the interval"
    );
    // Up: every byte accounted for, message by message.
    assert_eq!(
        n(&bw["up_bytes"]),
        16 * inputs + 12 * (pings + echoes) + 24 * bots + 8 * bots,
        "{bw}"
    );
    assert_eq!(
        n(&bw["up_packets"]),
        inputs + pings + echoes + 2 * bots,
        "{bw}"
    );
    assert_eq!(bw["wire_up_bytes"], bw["up_bytes"]);

    let up = &bw["per_bot_up_bytes_per_s"];
    // 3 seconds × 5 bots: the first second, in which the bots connected (the last about
    // 0.5 s in), is not a whole second in play and gives no sample (nor does the Hello): the
    // seconds ending at 2, 3 and 4 s. Counted, as before, those part-seconds gave samples far
    // below the grid's 59 slots (count 20, min 228 bytes in one run). A bot whose Welcome
    // came late on a loaded machine has a whole second fewer.
    let samples = n(&up["count"]);
    assert!((10..=15).contains(&samples), "{up}");
    // A second holds 60 grid slots, one of which a late send can carry into the next; a
    // worker a whole period behind skips slots and counts them (any of them could fall in
    // one bot-second), so the floor gives back what was skipped.
    let skipped = n(&s["generator"]["inputs_skipped"]);
    let floor = 59u64.saturating_sub(skipped) * 16;
    assert!(n(&up["min"]) >= floor, "{up}, {skipped} slots skipped");
    assert!(n(&up["max"]) <= 61 * 16 + 12 + 12, "{up}");
    let p50 = n(&up["p50"]);
    assert!((floor..=61 * 16 + 12).contains(&p50), "{up}");
    let size = &bw["packet_size_up_bytes"];
    assert_eq!(size["p50"], 16, "{size}");
    // The smallest is the goodbye (Disconnect: the header alone), the largest the Hello.
    assert_eq!(size["min"], 8, "{size}");
    assert_eq!(size["max"], 24, "{size}");
}
