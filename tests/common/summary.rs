//! The one harness for `tickswarm run` and its summary.json (issue 36): every test that runs
//! a scenario starts it here, so the exit code is always checked and stderr shown when it is
//! wrong, and reads the summary through accessors that fail on a missing, renamed, null or
//! mistyped key instead of reading it as 0 (a test that compares a renamed counter with 0
//! would otherwise pass without checking anything). A declared counter that never fired is
//! absent or 0; an undeclared one is a typo or a rename.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// The variables that set a run option (docs/reference/environment.md), and the index a
/// Kubernetes Indexed Job gives a shard.
const RUN_OPTION_VARS: &[&str] = &[
    "TICKSWARM_SCENARIO",
    "TICKSWARM_TARGET",
    "TICKSWARM_BOTS",
    "TICKSWARM_DURATION",
    "TICKSWARM_OUT",
    "TICKSWARM_SEED",
    "TICKSWARM_WORKERS",
    "TICKSWARM_SHARD",
    "TICKSWARM_SHARDS",
    "TICKSWARM_SOURCE_ADDRESSES",
    "TICKSWARM_FORCE",
    "TICKSWARM_JSON",
    "TICKSWARM_QUIET",
    "TICKSWARM_METRICS_LISTEN",
    "TICKSWARM_LABEL",
    "TICKSWARM_DASHBOARD",
    "JOB_COMPLETION_INDEX",
];

/// `tickswarm run FILE ARGS... --out OUT`, not started: for a caller that sets the
/// environment or spawns it (a run stopped by a signal), then checks it with [`finish`].
/// No run option of the caller's environment reaches it (a developer's `TICKSWARM_JSON` or
/// `TICKSWARM_BOTS` would change what the test runs); a test that means one sets it on the
/// command. `TICKSWARM_IO` passes: it is how the suite runs on a machine without io_uring.
pub fn run_command(file: &Path, args: &[&str], out: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tickswarm"));
    for var in RUN_OPTION_VARS {
        c.env_remove(var);
    }
    c.arg("run").arg(file).args(args).arg("--out").arg(out);
    c
}

/// A file of the crate (`scenarios/city.yaml`: a shipped scenario); an absolute path as is.
pub fn crate_file(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// A finished run's exit code must be one of `codes` (else the test fails showing its
/// stderr); its summary.json in `out`, read with [`read_summary`].
pub fn finish(o: &Output, out: &Path, codes: &[i32]) -> Value {
    let code = o.status.code();
    if !code.is_some_and(|c| codes.contains(&c)) {
        // A quiet run says nothing on stderr: its failed thresholds say why it exited 1.
        let failed: Vec<String> = match read_summary(out) {
            Ok(s) => s["thresholds"].as_array().map_or_else(Vec::new, |ts| {
                ts.iter()
                    .filter(|t| t["ok"] != true)
                    .map(|t| format!("{} (observed {})", t["condition"], t["observed"]))
                    .collect()
            }),
            Err(e) => vec![e],
        };
        panic!(
            "tickswarm run exited {code:?}, expected one of {codes:?}; failed thresholds: \
             {failed:?}; stderr:\n{}",
            stderr(o)
        );
    }
    read_summary(out).unwrap_or_else(|e| panic!("{e}; the run's stderr:\n{}", stderr(o)))
}

/// The summary.json of the run folder `out`, parsed; `Err` names what was wrong.
pub fn read_summary(out: &Path) -> Result<Value, String> {
    let path = out.join("summary.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("no {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))
}

/// The summary.json of the run (or merge) folder `out`; a missing or broken file fails the test.
pub fn summary_in(out: &Path) -> Value {
    read_summary(out).unwrap_or_else(|e| panic!("{e}"))
}

/// `tickswarm run FILE ARGS... --out OUT`, which must exit with one of `codes`: its output
/// (for stdout, stderr and the exact code) and its summary.json.
pub fn run_scenario(file: &Path, args: &[&str], out: &Path, codes: &[i32]) -> (Output, Value) {
    let o = run_command(file, args, out)
        .output()
        .expect("tickswarm runs");
    let s = finish(&o, out, codes);
    (o, s)
}

/// [`run_scenario`] with the run folder in a fresh temporary folder, removed once the
/// summary has been read: for a test that needs nothing else of the folder.
pub fn run_file(file: &Path, args: &[&str], codes: &[i32]) -> (Output, Value) {
    let tmp = tempfile::tempdir().expect("tempdir");
    run_scenario(file, args, &tmp.path().join("out"), codes)
}

/// [`run_scenario`] of a scenario given as text, written to `dir/s.yaml`, the run folder
/// `dir/out` (kept for a test that reads more of it than summary.json).
pub fn run_text_in(dir: &Path, text: &str, args: &[&str], codes: &[i32]) -> (Output, Value) {
    let file = dir.join("s.yaml");
    std::fs::write(&file, text).expect("write the scenario");
    run_scenario(&file, args, &dir.join("out"), codes)
}

/// [`run_text_in`] in a fresh temporary folder, removed once the summary has been read.
pub fn run_text(text: &str, args: &[&str], codes: &[i32]) -> (Output, Value) {
    let tmp = tempfile::tempdir().expect("tempdir");
    run_text_in(tmp.path(), text, args, codes)
}

/// `tickswarm run FILE ARGS... --out OUT`, whose verdict may pass or fail (exit 0 or 1; any
/// other exit fails the test, with the run's stderr), and its summary.json.
pub fn run_and_read(file: &Path, args: &[&str], out: &Path) -> Value {
    run_scenario(file, args, out, &[0, 1]).1
}

/// A process's stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A process's stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A protocol (or transport) counter of `s["protocol_metrics"]`: the run must declare it in
/// `s["protocol_metric_info"]`; a declared counter that never fired is absent and reads 0
/// (null is not a count and fails).
pub fn declared_counter(s: &Value, key: &str) -> u64 {
    assert!(
        s["protocol_metric_info"].get(key).is_some(),
        "`{key}` is not a counter this run declares: {}",
        s["protocol_metric_info"]
    );
    match s["protocol_metrics"].get(key) {
        None => 0,
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
/// numbers). A missing key fails the test, naming the path and showing the JSON around the
/// miss: a renamed key never reads as 0.
pub fn at<'a>(s: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(s, |v, key| {
        let next = match key.parse::<usize>() {
            Ok(i) if v.is_array() => v.get(i),
            _ => v.get(key),
        };
        next.unwrap_or_else(|| {
            panic!(
                "summary.json has no `{path}` (missing at `{key}` in {})",
                excerpt(v)
            )
        })
    })
}

/// The JSON around a failed read, cut short: enough to see a renamed key next to the asked one.
fn excerpt(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(1500) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

/// The value at `path`, converted by `get`; `what` names the type wanted when it fails.
fn typed<'a, T>(s: &'a Value, path: &str, what: &str, get: impl Fn(&'a Value) -> Option<T>) -> T {
    let v = at(s, path);
    get(v).unwrap_or_else(|| panic!("`{path}` is not {what}: {}", excerpt(v)))
}

/// A whole number at `path` (see [`at`]); null or anything else fails the test.
pub fn u64_at(s: &Value, path: &str) -> u64 {
    typed(s, path, "a whole number", Value::as_u64)
}

/// A number at `path` (see [`at`]); null or anything else fails the test.
pub fn f64_at(s: &Value, path: &str) -> f64 {
    typed(s, path, "a number", Value::as_f64)
}

/// A string at `path` (see [`at`]); anything else fails the test.
pub fn str_at<'a>(s: &'a Value, path: &str) -> &'a str {
    typed(s, path, "a string", Value::as_str)
}

/// `v` itself as a whole number (an element of a list, a counter already looked up);
/// anything else fails the test.
pub fn u64_of(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not a whole number: {}", excerpt(v)))
}

/// A whole number under the single key `key` of the object `v`, for keys that hold a dot
/// themselves (`errors.connect`'s `tcp_login.refused`); missing or mistyped fails the test.
pub fn u64_key(v: &Value, key: &str) -> u64 {
    let n = v
        .get(key)
        .unwrap_or_else(|| panic!("no `{key}` in {}", excerpt(v)));
    n.as_u64()
        .unwrap_or_else(|| panic!("`{key}` is not a whole number: {n}"))
}

/// A boolean at `path` (see [`at`]); anything else fails the test.
pub fn bool_at(s: &Value, path: &str) -> bool {
    typed(s, path, "a boolean", Value::as_bool)
}

/// A list at `path` (see [`at`]); anything else fails the test.
pub fn array_at<'a>(s: &'a Value, path: &str) -> &'a Vec<Value> {
    typed(s, path, "a list", Value::as_array)
}

/// An object at `path` (see [`at`]); anything else fails the test.
pub fn object_at<'a>(s: &'a Value, path: &str) -> &'a serde_json::Map<String, Value> {
    typed(s, path, "an object", Value::as_object)
}

/// A number that may be null at `path` (a figure the run could not measure is written as
/// null): `None` for null, but a missing key or a non-number still fails the test.
pub fn opt_f64_at(s: &Value, path: &str) -> Option<f64> {
    typed(s, path, "a number or null", |v| {
        if v.is_null() {
            Some(None)
        } else {
            v.as_f64().map(Some)
        }
    })
}

/// A whole number that may be null at `path` (see [`opt_f64_at`]).
pub fn opt_u64_at(s: &Value, path: &str) -> Option<u64> {
    typed(s, path, "a whole number or null", |v| {
        if v.is_null() {
            Some(None)
        } else {
            v.as_u64().map(Some)
        }
    })
}

/// Asserts that the object at the dotted `path`'s parent exists and has no key `path`'s last
/// part: for a field the summary leaves out on purpose, said explicitly rather than read
/// as null or 0 (which a renamed key would also give).
pub fn assert_absent(s: &Value, path: &str) {
    let (parent, key) = match path.rsplit_once('.') {
        Some((p, k)) => (object_at(s, p), k),
        None => (s.as_object().expect("summary.json is an object"), path),
    };
    assert!(
        !parent.contains_key(key),
        "`{path}` is present, expected absent: {}",
        excerpt(&parent[key])
    );
}
