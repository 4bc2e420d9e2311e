//! `tickswarm trend`: eight real runs of one scenario against the embedded server, the
//! seventh with 15 ms of latency injected each way (its RTT p50 is known: at least 30 ms, where the
//! others' is well under a millisecond on loopback). The trend must find that run and only
//! that run, name it in trend.json and on the page, link every point to its run's report,
//! warn where the runs' labels say nothing changed but the scenario did, and lay out in
//! Chromium at 1280 and 420 px.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::summary::{at, finish, run_command, str_at};
use crate::report_browser::{at_both_widths, figures};

const RUNS: usize = 8;
/// The run (from 1) with latency injected: after the six a run needs to be judged at all.
const SLOW: usize = 7;

fn scenario(dir: &Path, latency_ms: u64) -> PathBuf {
    let network = if latency_ms > 0 {
        format!("network:\n  latency: {latency_ms}ms\n")
    } else {
        String::new()
    };
    let text = format!(
        "name: trend-test\nprotocol:\n  cafe: {{}}\ntarget: embedded\npopulation:\n  stages:\n    \
         - ramp_to: 8\n      over: 0s\n    - hold: 3s\nbehaviour:\n  input_rate: 30\n  \
         ping_interval: 100ms\nseed: 3\n{network}thresholds:\n  - rtt p50 < 25ms\n"
    );
    let path = dir.join(format!("scenario-{latency_ms}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn trend(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("trend")
        .args(args)
        .env_remove("TICKSWARM_JSON")
        .env_remove("TICKSWARM_QUIET")
        .output()
        .expect("run tickswarm trend")
}

#[test]
fn a_trend_finds_the_one_run_with_injected_latency_and_lays_out_in_chromium() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    std::fs::create_dir(&runs).unwrap();
    let normal = scenario(tmp.path(), 0);
    let slow = scenario(tmp.path(), 15);
    for n in 1..=RUNS {
        let file = if n == SLOW { &slow } else { &normal };
        // Folder names out of order: the trend orders by label (build numbers), not names.
        let out = runs.join(format!("run-{}", RUNS + 1 - n));
        let label = format!("{n}");
        let o = run_command(file, &["--label", &label, "--quiet"], &out)
            .output()
            .expect("run tickswarm");
        // The slow run fails its `rtt p50 < 25ms`: a failed run is marked, not left out.
        finish(&o, &out, if n == SLOW { &[1] } else { &[0] });
    }
    let out = tmp.path().join("trend");
    let o = trend(&[
        runs.to_str().unwrap(),
        "--order",
        "label",
        "--out",
        out.to_str().unwrap(),
        "--fail-on-regress",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    // The newest run (8) did not regress: exit 0 even with --fail-on-regress.
    assert_eq!(o.status.code(), Some(0), "{err}");
    let t: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("trend.json")).unwrap()).unwrap();
    let runs_json = at(&t, "runs").as_array().expect("runs");
    assert_eq!(runs_json.len(), RUNS);
    let labels: Vec<&str> = runs_json.iter().map(|r| str_at(r, "label")).collect();
    assert_eq!(labels, ["1", "2", "3", "4", "5", "6", "7", "8"]);
    // Every run judged on RTT p50 from the sixth on; only the slow one left the band, and
    // its RTT p50 is among what it changed (handshake time rides on the same latency).
    let mut changed: Vec<(usize, String, String)> = Vec::new();
    for (i, r) in runs_json.iter().enumerate() {
        for j in at(r, "judged").as_array().expect("judged") {
            let (id, judged) = (j[0].as_str().expect("figure id"), &j[1]);
            let state = str_at(judged, "state");
            if state != "within" {
                changed.push((i + 1, id.to_string(), state.to_string()));
            }
        }
        let judged_rtt = at(r, "judged")
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j[0] == "rtt_p50");
        assert_eq!(judged_rtt, i >= 5, "run {}: judged on RTT p50", i + 1);
    }
    // A p99 of 8 handshakes is the slowest of them: charted, never judged.
    assert!(runs_json.iter().all(|r| !at(r, "judged")
        .as_array()
        .unwrap()
        .iter()
        .any(|j| j[0] == "handshake_p99")));
    assert!(
        changed.iter().all(|(run, _, _)| *run == SLOW),
        "changes outside run {SLOW}: {changed:?}"
    );
    assert!(
        changed.contains(&(SLOW, "rtt_p50".into(), "regressed".into())),
        "{changed:?}"
    );
    let slow_rtt = runs_json[SLOW - 1]["values"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v[0] == "rtt_p50")
        .map(|v| v[1]["value"].as_f64().unwrap())
        .expect("slow run's RTT p50");
    assert!(
        slow_rtt >= 30_000.0,
        "injected 2 × 15 ms, measured {slow_rtt} µs"
    );
    // The scenario changed between runs 6 and 7 and back: said.
    let warnings = at(&t, "warnings").as_array().unwrap();
    let scenario_changes: Vec<u64> = warnings
        .iter()
        .filter(|w| str_at(w, "text").starts_with("scenario (hash) changed"))
        .map(|w| w["run"].as_u64().unwrap())
        .collect();
    assert_eq!(
        scenario_changes,
        [SLOW as u64 - 1, SLOW as u64],
        "{warnings:?}"
    );
    assert!(
        err.contains(&format!("REGRESSED run #{SLOW} {SLOW}: RTT p50")),
        "{err}"
    );

    // The page: the change in its table, a link from every run's point to its report, the
    // limit as a line, and the layout at both widths.
    let html = out.join("trend.html");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(&format!("data-run=\"{SLOW}\" data-figure=\"rtt_p50\"")));
    let rtt = figures(&page)
        .into_iter()
        .find(|(id, _)| id == "rtt_p50")
        .expect("an RTT p50 chart")
        .1;
    for n in 1..=RUNS {
        let dir = runs.join(format!("run-{}", RUNS + 1 - n));
        let link = format!("href=\"../runs/run-{}/report.html\"", RUNS + 1 - n);
        assert!(rtt.contains(&link), "run {n}: no {link}");
        assert!(dir.join("report.html").is_file());
    }
    assert!(rtt.contains(&format!(
        "data-run=\"{SLOW}\" data-failed=\"true\" data-changed=\"true\""
    )));
    assert_eq!(rtt.matches("data-changed=\"true\"").count(), 1);
    assert!(
        rtt.contains("threshold rtt p50 &lt; 25ms"),
        "the limit is drawn"
    );
    let charts = figures(&page).len();
    assert!(charts >= 4, "{charts} charts");
    at_both_widths(
        tmp.path(),
        &html,
        charts,
        "trend",
        &crate::report_browser::no_more,
    );
}

/// Folders from elsewhere: a summary that is not one, a folder of nothing, and a label full
/// of markup; each refused with its path, or shown escaped.
#[test]
fn hostile_run_folders_are_refused_or_shown_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    std::fs::write(bad.join("summary.json"), "{\"schema\": 1").unwrap();
    let o = trend(&[
        bad.to_str().unwrap(),
        "--out",
        tmp.path().join("t1").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("not a tickswarm summary"), "{err}");
    assert!(err.contains("bad/summary.json"), "{err}");

    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = trend(&[
        empty.to_str().unwrap(),
        "--out",
        tmp.path().join("t2").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("neither a run folder"), "{err}");

    // A real run whose summary is then given a hostile label by hand.
    let run = tmp.path().join("run");
    let normal = scenario(tmp.path(), 0);
    let o = run_command(&normal, &["--quiet", "--duration", "1s"], &run)
        .output()
        .unwrap();
    finish(&o, &run, &[0, 1]);
    let path = run.join("summary.json");
    let mut s: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    s["label"] = Value::String(format!("<script>x</script>\n{}", "y".repeat(5000)));
    std::fs::write(&path, serde_json::to_string(&s).unwrap()).unwrap();
    let out = tmp.path().join("t3");
    let o = trend(&[run.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let page = std::fs::read_to_string(out.join("trend.html")).unwrap();
    assert!(!page.contains("<script>x"), "markup escaped");
    assert!(
        page.contains("&lt;script&gt;x&lt;/script&gt;?"),
        "newline shown as ?"
    );
    assert!(
        !page.contains(&"y".repeat(200)),
        "label cut to 128 characters"
    );

    // A folder of kept runs where one summary was cut short (a CI job killed while writing
    // its artifact): the others make the trend, the broken one is named and passed over;
    // named on its own it is an error.
    let kept = tmp.path().join("kept");
    std::fs::create_dir_all(kept.join("broken")).unwrap();
    std::fs::write(kept.join("broken/summary.json"), "{\"schema_version\": ").unwrap();
    std::fs::rename(&run, kept.join("good")).unwrap();
    let out = tmp.path().join("t4");
    let o = trend(&[kept.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("broken (its summary.json cannot be read"),
        "{err}"
    );
    assert!(err.contains("runs     1 "), "{err}");
    let o = trend(&[
        kept.join("broken").to_str().unwrap(),
        "--out",
        tmp.path().join("t5").to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
