//! `tickswarm compare` against ground truth: real runs against the reference server, one of
//! them through the loopback impairment proxy with a known added delay. The delayed run must
//! fail an `rtt.p99` limit (and say by how much); runs under the same conditions must pass a
//! generous one; a merged base compares with the percentiles of its merged histograms.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::proxy::{Impairment, Proxy};
use crate::common::summary::{f64_at, run_scenario, summary_in};
use serde_json::Value;
use tickswarm::engine::spawn_reference_server;
use tickswarm::scenario::{ProtocolSection, ServerSection};

/// Added each way by the proxy: the delayed run's RTT is at least 20 ms more.
const ONE_WAY_DELAY: Duration = Duration::from_millis(10);

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tickswarm"))
}

fn scenario(dir: &Path, compare_block: &str) -> PathBuf {
    let p = dir.join("s.yaml");
    std::fs::write(
        &p,
        format!(
            "name: compare\nprotocol:\n  cafe: {{}}\npopulation:\n  stages:\n    - ramp_to: 10\n      over: 300ms\n    - hold: 2s\nbehaviour:\n  ping_interval: 100ms\n  silence_timeout: 3s\n{compare_block}"
        ),
    )
    .unwrap();
    p
}

fn compare(base: &Path, new: &Path, extra: &[&str]) -> Output {
    bin()
        .arg("compare")
        .arg(base)
        .arg(new)
        .args(extra)
        .output()
        .unwrap()
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn row<'a>(c: &'a Value, metric: &str) -> &'a Value {
    c["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == metric)
        .unwrap_or_else(|| panic!("no row {metric} in {c}"))
}

#[test]
fn a_delayed_server_fails_compare_and_the_same_conditions_pass() {
    let server = spawn_reference_server(
        (Ipv4Addr::LOCALHOST, 0).into(),
        &ProtocolSection::of(&tickswarm::games::cafe::Cafe, Default::default()),
        &ServerSection::default(),
    )
    .unwrap();
    let delayed = Proxy::start(
        server.addr,
        Impairment {
            one_way_delay: ONE_WAY_DELAY,
            ..Impairment::default()
        },
        Duration::from_secs(60),
    );
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let plain = scenario(t, "");
    let (base, same, slow) = (t.join("base"), t.join("same"), t.join("slow"));
    let swarm = |target: SocketAddr, out: &Path| {
        run_scenario(
            &plain,
            &["--target", &target.to_string(), "--quiet"],
            out,
            &[0],
        )
        .1
    };
    let base_summary = swarm(server.addr, &base);
    swarm(server.addr, &same);
    let slow_summary = swarm(delayed.addr, &slow);

    // The injected regression: rtt.p99 limited to 10 % more than the base fails, exit 1.
    let out = t.join("cmp");
    let o = compare(
        &base,
        &slow,
        &[
            "--max-regress",
            "rtt.p99=10%",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    // Shown with --nocapture: what a CI log shows for this regression.
    eprintln!("{stderr}");
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("REGRESSED rtt.p99 rose by +"), "{stderr}");
    let c: Value = serde_json::from_slice(&o.stdout).expect("--json prints the comparison");
    assert_eq!(c["regressed"], true);
    let r = row(&c, "rtt.p99");
    let (b, n) = (r["base"].as_f64().unwrap(), r["new"].as_f64().unwrap());
    // Ground truth: every delayed sample carries 20 ms more round trip than the proxy adds.
    assert!(n >= 20_000.0, "delayed p99 {n} us");
    assert!(b < n, "base {b} new {n}");
    assert_eq!(r["regressed"], true);
    // The figures are the runs' own exact percentiles (the summaries hold the same histograms).
    assert_eq!(b, f64_at(&base_summary, "rtt_us.p99"));
    assert_eq!(n, f64_at(&slow_summary, "rtt_us.p99"));
    // Rows without a limit are shown, never failed.
    assert_eq!(row(&c, "rtt.p50")["regressed"], false);
    let html = std::fs::read_to_string(out.join("compare.html")).unwrap();
    assert!(
        html.contains("REGRESSED") && html.contains("rtt.p99"),
        "{html}"
    );
    assert!(html.contains(base.to_str().unwrap()) && html.contains(slow.to_str().unwrap()));
    assert_eq!(json(&out.join("compare.json"))["regressed"], true);

    // The same conditions pass generous limits, and the same limits still catch the delay: it
    // adds 20 ms to every sample, so the median moves by nearly that, while on a busy machine
    // (tests share two cores with parallel builds) the tail of two plain runs moves by tens of
    // milliseconds on its own.
    let generous = [
        "--max-regress",
        "rtt.p50=+10ms,rtt.p99=+100ms",
        "--max-regress",
        "loss.downstream=+1pp",
    ];
    let o = compare(&base, &same, &generous);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("no regression"), "{stderr}");
    let o = compare(&base, &slow, &generous);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("REGRESSED rtt.p50 rose by +"), "{stderr}");

    // No limits at all: the shipped defaults gate (rtt.p50=+1ms, loss.downstream=+0.5pp) and
    // say so; the delay's 20 ms on every sample is caught (it compared as "no regression").
    let o = compare(&base, &slow, &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(
            "limits   rtt.p50=+1ms, loss.downstream=+0.5pp (the defaults: no --max-regress or compare: block given)"
        ),
        "{stderr}"
    );
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("REGRESSED rtt.p50 rose by +"), "{stderr}");

    // Runs of different scenario contents are compared, with a warning naming both hashes.
    let edited = t.join("edited");
    std::fs::create_dir(&edited).unwrap();
    for f in ["histograms.hlog", "summary.json"] {
        std::fs::copy(same.join(f), edited.join(f)).unwrap();
    }
    let mut sj = json(&edited.join("summary.json"));
    let hash = sj["scenario_hash"]
        .as_str()
        .expect("scenario_hash")
        .to_string();
    sj["scenario_hash"] = Value::from("00000000deadbeef");
    std::fs::write(edited.join("summary.json"), sj.to_string()).unwrap();
    let o = compare(&base, &edited, &generous);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!(
            "warning: the runs came from different scenarios (scenario_hash {hash} and 00000000deadbeef"
        )),
        "{stderr}"
    );
    let o = compare(&base, &same, &generous);
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("different scenarios"),
        "one scenario, no warning"
    );

    // A merged base (two runs) compares with its merged histograms' exact percentiles.
    let merged = t.join("merged");
    let m = bin()
        .args(["merge", "--quiet"])
        .arg(&base)
        .arg(&same)
        .arg("--out")
        .arg(&merged)
        .output()
        .unwrap();
    assert!(m.status.code() == Some(0) || m.status.code() == Some(1));
    let o = compare(&merged, &slow, &["--max-regress", "rtt.p99=10%", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let c: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        row(&c, "rtt.p99")["base"].as_f64().unwrap(),
        f64_at(&summary_in(&merged), "rtt_us.p99")
    );
    let o = compare(&merged, &same, &generous);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // Several base runs (`--base`, repeated or comma-separated): each row's base is their
    // median, the delay is still caught, like conditions still pass.
    let cmp2 = t.join("cmp2");
    let o = bin()
        .arg("compare")
        .args(["--base", base.to_str().unwrap(), "--base"])
        .arg(&same)
        .arg(&slow)
        .args(["--json", "--out", cmp2.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("base     the median of 2 runs:"),
        "{stderr}"
    );
    assert!(stderr.contains("REGRESSED rtt.p50 rose by +"), "{stderr}");
    let c: Value = serde_json::from_slice(&o.stdout).unwrap();
    let dirs: Vec<&str> = c["base_dirs"]
        .as_array()
        .expect("base_dirs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(dirs, [base.to_str().unwrap(), same.to_str().unwrap()]);
    let median =
        (f64_at(&base_summary, "rtt_us.p50") + f64_at(&summary_in(&same), "rtt_us.p50")) / 2.0;
    assert_eq!(row(&c, "rtt.p50")["base"].as_f64().unwrap(), median);
    let html = std::fs::read_to_string(cmp2.join("compare.html")).unwrap();
    assert!(html.contains("median of 2 runs"), "{html}");
    let both = format!("{},{}", base.display(), same.display());
    let o = bin()
        .args(["compare", "--base", &both])
        .arg(&same)
        .args(generous)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");

    // The scenario's compare: block gates the same way, without a flag.
    let gated = scenario(t, "compare:\n  max_regress:\n    rtt.p99: 10%\n");
    let o = compare(&base, &slow, &["--scenario", gated.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("REGRESSED rtt.p99"), "{stderr}");
}

#[test]
fn bad_usage_exits_2_with_a_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let o = compare(tmp.path(), tmp.path(), &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("summary.json"));
    let o = compare(tmp.path(), tmp.path(), &["--max-regress", "rtt.p99=lots"]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("rtt.p99=lots"), "{e}");
    let o = compare(
        tmp.path(),
        tmp.path(),
        &["--max-regress", "loss.downstream=+1ms"],
    );
    assert_eq!(o.status.code(), Some(2));
    // A base given twice over, or none at all: said, exit 2.
    let o = bin()
        .args(["compare", "--base"])
        .arg(tmp.path())
        .arg(tmp.path())
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("with --base give only the new run's folder"),
        "{e}"
    );
    let o = bin().arg("compare").arg(tmp.path()).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("compare needs a base"), "{e}");
    // A bad compare: block is a scenario error at validate time.
    let s = scenario(tmp.path(), "compare:\n  max_regress:\n    rtt.p99: fast\n");
    let o = bin().arg("validate").arg(&s).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("compare.max_regress"), "{e}");
}
