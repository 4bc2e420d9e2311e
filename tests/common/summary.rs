//! Reading counters out of summary.json so that a renamed or removed counter fails the test
//! instead of reading as 0 (a declared counter that never fired is absent or 0; an undeclared
//! one is a typo or a rename).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// `tickswarm run FILE ARGS... --out OUT`, whose verdict may pass or fail (exit 0 or 1; any
/// other exit fails the test, with the run's stderr), and its summary.json.
pub fn run_and_read(file: &Path, args: &[&str], out: &Path) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("run")
        .arg(file)
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{err}");
    let text = std::fs::read_to_string(out.join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("summary.json is JSON")
}

/// A protocol (or transport) counter of `s["protocol_metrics"]`: the run must declare it in
/// `s["protocol_metric_info"]`; a declared counter that never fired reads 0.
pub fn declared_counter(s: &Value, key: &str) -> u64 {
    assert!(
        s["protocol_metric_info"].get(key).is_some(),
        "`{key}` is not a counter this run declares: {}",
        s["protocol_metric_info"]
    );
    match s["protocol_metrics"].get(key) {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_u64()
            .unwrap_or_else(|| panic!("`{key}` is not a count: {v}")),
    }
}

/// A counter of the embedded server's events (`protocol_metrics.embedded_server.events`).
/// Servers declare no list of their events, so the key must be one the crate's sources emit
/// (a string literal in `src/`); a server that never counted it reads 0.
pub fn server_event(s: &Value, key: &str) -> u64 {
    assert!(
        source_mentions(&format!("\"{key}\"")),
        "no source file in src/ emits the server event `{key}`"
    );
    let events = &s["protocol_metrics"]["embedded_server"]["events"];
    assert!(events.is_object(), "no embedded server events: {s}");
    match events.get(key) {
        None => 0,
        Some(v) => v
            .as_u64()
            .unwrap_or_else(|| panic!("`{key}` is not a count: {v}")),
    }
}

/// A counter the crate records without declaring it in the protocol's metric table (the ping
/// exchange's `ping_timeout`, a netsim counter): the key must be one a source file in `src/`
/// names, so a renamed counter fails the test; it reads 0 when it never fired.
pub fn emitted_counter(s: &Value, key: &str) -> u64 {
    assert!(
        source_mentions(&format!("\"{key}\"")),
        "no source file in src/ records the counter `{key}`"
    );
    match at(s, "protocol_metrics").get(key) {
        None => 0,
        Some(v) => v
            .as_u64()
            .unwrap_or_else(|| panic!("`{key}` is not a count: {v}")),
    }
}

fn source_mentions(needle: &str) -> bool {
    fn walk(dir: &std::path::Path, needle: &str) -> bool {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        entries.flatten().any(|e| {
            let p = e.path();
            if p.is_dir() {
                walk(&p, needle)
            } else {
                p.extension().is_some_and(|x| x == "rs")
                    && std::fs::read_to_string(&p).is_ok_and(|t| t.contains(needle))
            }
        })
    }
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        needle,
    )
}

/// The value at a dotted path into summary.json (`capacity.steps.0.verdict`; list indices as
/// numbers). A missing key fails the test, naming the path: a renamed key never reads as 0.
pub fn at<'a>(s: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(s, |v, key| {
        let next = match key.parse::<usize>() {
            Ok(i) if v.is_array() => v.get(i),
            _ => v.get(key),
        };
        next.unwrap_or_else(|| panic!("summary.json has no `{path}` (missing at `{key}`)"))
    })
}

/// A whole number at `path` (see [`at`]); anything else fails the test.
pub fn u64_at(s: &Value, path: &str) -> u64 {
    let v = at(s, path);
    v.as_u64()
        .unwrap_or_else(|| panic!("`{path}` is not a whole number: {v}"))
}

/// A number at `path` (see [`at`]); anything else fails the test.
pub fn f64_at(s: &Value, path: &str) -> f64 {
    let v = at(s, path);
    v.as_f64()
        .unwrap_or_else(|| panic!("`{path}` is not a number: {v}"))
}

/// A string at `path` (see [`at`]); anything else fails the test.
pub fn str_at<'a>(s: &'a Value, path: &str) -> &'a str {
    let v = at(s, path);
    v.as_str()
        .unwrap_or_else(|| panic!("`{path}` is not a string: {v}"))
}
