//! summary.json is what schemas/summary.schema.json says it is: real outputs (a cafe run, a
//! city run over ENet, a zergcity run on two games, a merge of two runs) validate against the schema, and every
//! `thresholds[].metric` is a JSON path into the same file that leads to the observed value.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::summary::run_and_read;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tickswarm"))
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A short run of a shipped scenario against its embedded server: these flags, then a
/// test's own, for [`run_and_read`] (pass or a failed threshold: both write a whole summary).
const SHORT: &[&str] = &[
    "--bots",
    "8",
    "--duration",
    "2s",
    "--quiet",
    "--target",
    "embedded",
];

/// Follow a dotted path (`rtt_us.p99`) into `v`.
fn at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, key| v.get(key))
}

fn check(validator: &jsonschema::Validator, what: &str, s: &Value) {
    let errors: Vec<String> = validator
        .iter_errors(s)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{what}: {errors:#?}");
    let thresholds = s["thresholds"].as_array().unwrap();
    assert!(
        !thresholds.is_empty(),
        "{what}: the default checks at least"
    );
    for t in thresholds {
        let path = t["metric"].as_str().unwrap();
        let found = at(s, path).unwrap_or_else(|| panic!("{what}: `{path}` is not in the summary"));
        let observed = &t["observed"];
        let value = match found {
            Value::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
            v => v.as_f64(),
        };
        assert_eq!(
            value,
            observed.as_f64(),
            "{what}: {path} vs observed {observed}"
        );
    }
}

#[test]
fn real_summaries_match_the_schema() {
    let schema = json(&root().join("schemas/summary.schema.json"));
    let validator = jsonschema::validator_for(&schema).expect("the schema is a valid schema");
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let cafe = run_and_read(
        &root().join("scenarios/quickstart.yaml"),
        SHORT,
        &t.join("cafe"),
    );
    check(&validator, "cafe", &cafe);
    // The schema is not a formality: what it does not describe is refused.
    for (path, value) in [
        ("surprise", Value::from(1)),
        ("rtt_us.p99", Value::from("fast")),
        ("verdict", Value::from("maybe")),
        ("bots.connect_rate", Value::from(1.5)),
    ] {
        let mut bad = cafe.clone();
        let (parent, key) = path.rsplit_once('.').unwrap_or(("", path));
        let obj = if parent.is_empty() {
            &mut bad
        } else {
            parent.split('.').fold(&mut bad, |v, k| &mut v[k])
        };
        obj[key] = value;
        assert!(!validator.is_valid(&bad), "{path} changed, still valid");
    }
    // The server's own metrics, scraped from the embedded server, with a threshold on them.
    let sm = run_and_read(
        &root().join("scenarios/server-metrics.yaml"),
        SHORT,
        &t.join("server-metrics"),
    );
    check(&validator, "server-metrics", &sm);
    assert!(sm["server_metrics"]["figures"]["tick_seconds"]["p99_us"].is_number());
    let city = run_and_read(&root().join("scenarios/city.yaml"), SHORT, &t.join("city"));
    check(&validator, "city", &city);
    // Four players per ZergCity game: 8 bots play on two embedded games, so the intervals
    // carry the per-target breakdown too.
    let zc = run_and_read(
        &root().join("scenarios/zergcity.yaml"),
        SHORT,
        &t.join("zergcity"),
    );
    check(&validator, "zergcity", &zc);
    assert!(
        zc["intervals"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["targets"].as_array().is_some_and(|t| t.len() == 2)),
        "two targets in the intervals"
    );
    // A threshold on every kind of path: times, rates, counts, the boolean.
    let many = t.join("many.yaml");
    std::fs::write(
        &many,
        "name: many\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 4\n      over: 0s\nduration: 2s\nthresholds:\n  - rtt p99 < 1s\n  - generator_saturated < 1\n  - connect_success > 50%\n  - decode_errors <= 0\n  - downstream_loss < 50%\n  - send_lateness p99 < 1s\n  - inputs_skipped <= 100\n  - bots_failed <= 0\n",
    )
    .unwrap();
    let s = run_and_read(&many, &["--quiet"], &t.join("many"));
    check(&validator, "every threshold kind", &s);

    let second = run_and_read(
        &root().join("scenarios/quickstart.yaml"),
        &[SHORT, &["--seed", "9"]].concat(),
        &t.join("cafe2"),
    );
    check(&validator, "cafe (second)", &second);
    let o = bin()
        .args(["merge", "--quiet"])
        .arg(t.join("cafe"))
        .arg(t.join("cafe2"))
        .arg("--out")
        .arg(t.join("merged"))
        .output()
        .unwrap();
    assert!(matches!(o.status.code(), Some(0 | 1)));
    check(&validator, "merged", &json(&t.join("merged/summary.json")));
}
