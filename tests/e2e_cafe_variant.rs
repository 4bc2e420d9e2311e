//! End to end against `scripts/cafe_variant_server.py`, a stand-in for the public server
//! NOTES.md lists as cafe's known variant: one header sequence counter shared by all clients,
//! pings echoed back whole, full snapshots every 3 ticks with deltas between, `last_input`,
//! snapshots of tens of kilobytes, 2 s silence drop.
//!
//! The real binary, real sockets on loopback, a bounded run (20 bots, ~6 s). Needs `python3`
//! (installed with the test dependencies).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Output, Stdio};

use serde_json::Value;

/// The variant server, stopped (stdin closed) and reaped on drop.
struct VariantServer {
    child: Option<Child>,
    stdout: BufReader<ChildStdout>,
    port: u16,
}

impl VariantServer {
    fn start() -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cafe_variant_server.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .args(["--port", "0", "--max-seconds", "60"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs scripts/cafe_variant_server.py");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout piped"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("server prints its port");
        let v: Value = serde_json::from_str(&line).expect("port line is JSON");
        let port = v["port"].as_u64().expect("port") as u16;
        Self {
            child: Some(child),
            stdout,
            port,
        }
    }

    /// Stop the server; its totals.
    fn stop(mut self) -> Value {
        let mut child = self.child.take().expect("running");
        drop(child.stdin.take()); // EOF on stdin: the server prints its totals and exits
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("totals line");
        let _ = child.wait();
        serde_json::from_str(&line).expect("totals are JSON")
    }
}

impl Drop for VariantServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn run(dir: &Path, scenario: &str) -> (Output, Value) {
    let sc = dir.join("s.yaml");
    std::fs::write(&sc, scenario).expect("write scenario");
    let out = dir.join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("run")
        .arg(&sc)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("tickswarm runs");
    let text = std::fs::read_to_string(out.join("summary.json")).expect("summary.json written");
    (
        o,
        serde_json::from_str(&text).expect("summary.json is JSON"),
    )
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn scenario(port: u16, dialect: &str, bots: u32, hold: &str) -> String {
    format!(
        r#"
name: e2e-cafe-variant
protocol:
  cafe:
    dialect: {dialect}
target: "127.0.0.1:{port}"
population:
  stages:
    - ramp_to: {bots}
      over: 500ms
    - hold: {hold}
behaviour:
  input_rate: 60
  ping_interval: 250ms
seed: 11
thresholds:
  - downstream_loss < 1%
  - snapshot_interarrival p50 < 1s
"#
    )
}

/// 20 bots in `dialect: implementation` for ~6 s: snapshots (over 8 KB among them, up to
/// ~60 KB) applied the whole run, an RTT sample for (nearly) every ping, no loss on loopback
/// although the server's sequence counter is shared, no decode errors, input-to-snapshot
/// latency measured from `last_input`.
#[test]
fn implementation_dialect_against_the_variant() {
    let server = VariantServer::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let (o, s) = run(
        tmp.path(),
        &scenario(server.port, "implementation", 20, "5500ms"),
    );
    let totals = server.stop();
    let err = stderr(&o);
    eprintln!("{err}\nserver totals: {totals}");
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(s["bots"]["connected"], 20);
    assert_eq!(u(&s["bots"]["lost"]), 0);

    // No decode errors of any kind.
    let decode = s["errors"]["decode"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert!(decode.is_empty(), "decode errors: {decode:?}");

    // Snapshots applied the whole run: about 60 per bot-second over ~5.5 s, and every one the
    // server sent (bar those in flight at the end).
    let applied = u(&s["snapshots_applied"]);
    let sent = u(&totals["snapshots_sent"]);
    assert!(applied >= 20 * 60 * 4, "applied {applied}");
    assert!(
        applied * 100 >= sent * 98,
        "applied {applied} of {sent} sent"
    );
    let pm = &s["protocol_metrics"];
    // Full snapshots (a third) are over 8 KB; the boss waves near 60 KB.
    let bytes = &pm["snapshot_bytes"];
    assert!(u(&bytes["p90"]) > 8192, "snapshot_bytes {bytes}");
    assert!(u(&bytes["max"]) > 50_000, "snapshot_bytes {bytes}");
    assert!(u(&totals["snapshots_over_8k_sent"]) > 0);
    // Applied the whole run: no long hole between two snapshots of a bot.
    assert!(
        u(&s["snapshot_interarrival_us"]["max"]) < 1_000_000,
        "{}",
        s["snapshot_interarrival_us"]
    );

    // RTT: an echo for (nearly) every ping, matched before any sequence bookkeeping.
    let pings = u(&pm["pings_sent"]);
    let rtt = u(&s["rtt_us"]["count"]);
    assert!(pings >= 20 * 15, "pings {pings}");
    assert!(
        rtt * 100 >= pings * 95,
        "rtt samples {rtt} of {pings} pings"
    );
    assert!(rtt <= pings);

    // Loss from snapshot ticks: about 0 on loopback, not the 95 % a shared header counter
    // would show.
    let l = &s["loss"]["downstream"];
    assert!(u(&l["expected"]) >= applied, "{l}");
    assert!(l["rate"].as_f64().unwrap_or(1.0) < 0.01, "{l}");

    eprintln!(
        "figures: applied {applied} of {sent} sent ({} over 8 KB sent, max {} B); rtt {rtt} of \
         {pings} pings; loss {l}",
        totals["snapshots_over_8k_sent"], totals["max_snapshot_bytes"]
    );

    // Input to snapshot, from `last_input`.
    assert!(
        u(&pm["input_to_snapshot_us"]["count"]) > 1000,
        "{}",
        pm["input_to_snapshot_us"]
    );
    assert!(s["protocol_metric_info"]
        .get("input_to_snapshot_us")
        .is_some());
    assert_eq!(
        u(&pm["snapshot_tick_step"]["max"]),
        1,
        "a snapshot every tick"
    );
}

/// A spec-dialect run against the variant: every snapshot is 6 bytes off the 33-byte grid and
/// fits the implementation dialect exactly. The run names it (`dialect_hint.implementation`,
/// decode reason `snapshot.fits_implementation_dialect`) and fails: no snapshot was applied,
/// so `snapshot_interarrival p50 < 1s` has no data.
#[test]
fn spec_dialect_against_the_variant_is_named() {
    let server = VariantServer::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let (o, s) = run(tmp.path(), &scenario(server.port, "spec", 5, "2s"));
    let totals = server.stop();
    let err = stderr(&o);
    eprintln!("{err}\nserver totals: {totals}");
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(u(&s["snapshots_applied"]), 0);
    let hint = u(&s["protocol_metrics"]["dialect_hint.implementation"]);
    let fits = u(&s["errors"]["decode"]["snapshot.fits_implementation_dialect"]);
    assert!(hint > 5 * 60, "dialect hint {hint}");
    assert_eq!(hint, fits);
    assert!(
        err.contains("fits_implementation_dialect"),
        "console names it: {err}"
    );
    assert!(err.contains("FAIL  snapshot_interarrival"), "{err}");
    // The default check says the same without any threshold in the scenario.
    let applied_check = s["thresholds"]
        .as_array()
        .and_then(|t| t.iter().find(|c| c["metric"] == "snapshots_applied"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(applied_check["ok"], false, "{applied_check}");
    assert_eq!(applied_check["default"], true, "{applied_check}");
}
