//! Every run option also comes from the environment (CI secrets and matrix values need no
//! file edits), and a flag on the command line wins over its variable.

use std::path::PathBuf;
use std::process::{Command, Output};

fn quickstart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.yaml")
}

/// `tickswarm validate` with no TICKSWARM_* or JOB_COMPLETION_INDEX but those given.
fn validate(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tickswarm"));
    for (k, _) in std::env::vars() {
        if k.starts_with("TICKSWARM_") || k == "JOB_COMPLETION_INDEX" {
            c.env_remove(k);
        }
    }
    c.arg("validate")
        .arg(quickstart())
        .args(args)
        .envs(env.iter().copied());
    c.output().unwrap()
}

fn stdout(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn run_options_from_the_environment() {
    let plan = stdout(&validate(
        &[
            ("TICKSWARM_TARGET", "127.0.0.1:9999"),
            ("TICKSWARM_BOTS", "7"),
            ("TICKSWARM_DURATION", "3s"),
            ("TICKSWARM_SEED", "99"),
            ("TICKSWARM_WORKERS", "1"),
        ],
        &[],
    ));
    assert!(plan.contains("target     127.0.0.1:9999"), "{plan}");
    assert!(plan.contains("bots       7 over 3s (1 workers)"), "{plan}");
    assert!(plan.contains("seed       99"), "{plan}");
}

#[test]
fn a_flag_wins_over_its_variable() {
    let plan = stdout(&validate(&[("TICKSWARM_BOTS", "7")], &["--bots", "5"]));
    assert!(plan.contains("bots       5 over"), "{plan}");
}

/// CI systems pass a blank for a variable nobody filled in: that is unset, not an error.
#[test]
fn an_empty_variable_counts_as_unset() {
    let plan = stdout(&validate(
        &[("TICKSWARM_BOTS", ""), ("TICKSWARM_SEED", "")],
        &[],
    ));
    assert!(plan.contains("bots       100 over"), "{plan}");
}

#[test]
fn a_bad_value_in_a_variable_names_the_variable() {
    let o = validate(&[("TICKSWARM_BOTS", "many")], &[]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("many") && e.contains("--bots"), "{e}");
}

#[test]
fn the_shard_from_the_environment() {
    let plan = stdout(&validate(&[("TICKSWARM_SHARD", "1/3")], &[]));
    assert!(plan.contains("shard      1/3"), "{plan}");
    // The quickstart's 100 bots by index % 3: 33 for shard 1.
    assert!(plan.contains("bots       33 over"), "{plan}");
    // A Kubernetes Indexed Job: the index from JOB_COMPLETION_INDEX, the count from us.
    let plan = stdout(&validate(
        &[("JOB_COMPLETION_INDEX", "2"), ("TICKSWARM_SHARDS", "4")],
        &[],
    ));
    assert!(plan.contains("shard      2/4"), "{plan}");
    assert!(plan.contains("bots       25 over"), "{plan}");
    // JOB_COMPLETION_INDEX alone does not shard (N unknown).
    let plan = stdout(&validate(&[("JOB_COMPLETION_INDEX", "2")], &[]));
    assert!(!plan.contains("shard"), "{plan}");
    assert!(plan.contains("bots       100 over"), "{plan}");
    // An index past the count is bad usage.
    let o = validate(
        &[("JOB_COMPLETION_INDEX", "4"), ("TICKSWARM_SHARDS", "4")],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
}
