//! What a run writes and prints for CI: `--out` never mixes two runs' files unless `--force`;
//! `--json` puts summary.json on stdout; `--quiet` and `-v`/`-vv` set how much stderr says.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::summary::{opt_f64_at, run_command, run_scenario};

fn tiny_scenario(dir: &Path) -> PathBuf {
    let p = dir.join("s.yaml");
    std::fs::write(
        &p,
        "name: tiny\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 3\n      over: 0s\nduration: 2s\n",
    )
    .unwrap();
    p
}

/// `tickswarm run` with no `--out`, the run folder left to `env` (`TICKSWARM_OUT`): what
/// these runs test is where the folder comes from, which the shared harness (always an
/// `--out`) cannot. The caller's own output options (`TICKSWARM_FORCE`, `_QUIET`, `_JSON`,
/// `_OUT`) are removed.
fn run_without_out(scenario: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("run")
        .arg(scenario)
        .args(args)
        .env_remove("TICKSWARM_FORCE")
        .env_remove("TICKSWARM_QUIET")
        .env_remove("TICKSWARM_JSON")
        .env_remove("TICKSWARM_OUT")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_non_empty_out_folder_is_refused_unless_forced() {
    let tmp = tempfile::tempdir().unwrap();
    let s = tiny_scenario(tmp.path());
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let o = run_command(&s, &[], &out).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("is not empty") && e.contains("--force"), "{e}");
    // Nothing written, nothing run.
    assert_eq!(listing(&out), vec!["notes.txt"]);
    assert!(!e.contains("verdict"), "{e}");

    // TICKSWARM_OUT is refused the same way; --force (here from TICKSWARM_FORCE) writes.
    let o = run_without_out(&s, &[], &[("TICKSWARM_OUT", out.to_str().unwrap())]);
    assert_eq!(o.status.code(), Some(2));
    let o = run_without_out(
        &s,
        &["--quiet"],
        &[
            ("TICKSWARM_OUT", out.to_str().unwrap()),
            ("TICKSWARM_FORCE", "1"),
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let files = listing(&out);
    for f in [
        "notes.txt",
        "summary.json",
        "report.html",
        "junit.xml",
        "histograms.hlog",
    ] {
        assert!(files.contains(&f.to_string()), "{files:?}");
    }
    assert_eq!(
        std::fs::read_to_string(out.join("notes.txt")).unwrap(),
        "mine"
    );

    // An empty folder is fine without --force.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    run_scenario(&s, &["--quiet"], &empty, &[0]);
}

#[test]
fn json_on_stdout_quiet_on_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    let s = tiny_scenario(tmp.path());
    let out = tmp.path().join("out");
    let (o, file) = run_scenario(&s, &["--json", "--quiet"], &out, &[0]);
    let printed: Value = serde_json::from_slice(&o.stdout).expect("stdout is the summary");
    assert_eq!(printed, file);
    assert_eq!(printed["bots"]["planned"], 3);
    // --quiet: no progress, no result lines.
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.trim().is_empty(), "quiet stderr: {e}");
}

#[test]
fn verbose_levels_say_more() {
    let tmp = tempfile::tempdir().unwrap();
    let s = tiny_scenario(tmp.path());
    let normal = run_scenario(&s, &[], &tmp.path().join("a"), &[0]).0;
    let e0 = String::from_utf8_lossy(&normal.stderr).into_owned();
    assert!(e0.contains("verdict  PASS"), "{e0}");
    assert!(!e0.contains("pings      every"), "{e0}");
    // -v: the plan first.
    let v = run_scenario(&s, &["-v"], &tmp.path().join("b"), &[0]).0;
    let e1 = String::from_utf8_lossy(&v.stderr).into_owned();
    assert!(
        e1.contains("pings      every") && e1.contains("verdict  PASS"),
        "{e1}"
    );
    // -vv: each second as a JSON line too.
    let vv = run_scenario(&s, &["-vv"], &tmp.path().join("c"), &[0]).0;
    let e2 = String::from_utf8_lossy(&vv.stderr).into_owned();
    let points: Vec<Value> = e2
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!points.is_empty(), "{e2}");
    assert!(points
        .iter()
        .all(|p| p["t"].is_number() && p["bots_connected"].is_number()));
}

/// A threshold on a figure the protocol cannot take (cafe acknowledges no input, so upstream
/// loss has no evidence) is not a bare "no data": validate warns, the run says "not measurable
/// against this server (why)" on the console, in summary.json and in junit.xml, and fails it;
/// `unmeasurable_thresholds: skip` shows it as skipped and leaves it out of the verdict.
#[test]
fn an_unmeasurable_threshold_says_so_and_fails_or_is_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let text = |policy: &str| {
        format!(
            "name: um\nprotocol:\n  cafe: {{}}\npopulation:\n  stages:\n    - ramp_to: 2\n      over: 0s\nduration: 2s\n{policy}thresholds:\n  - upstream_loss < 1%\n"
        )
    };
    let fail = tmp.path().join("fail.yaml");
    std::fs::write(&fail, text("")).unwrap();
    let skip = tmp.path().join("skip.yaml");
    std::fs::write(&skip, text("unmeasurable_thresholds: skip\n")).unwrap();

    let v = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("validate")
        .arg(&fail)
        .output()
        .unwrap();
    assert_eq!(v.status.code(), Some(0));
    let e = String::from_utf8_lossy(&v.stderr);
    assert!(
        e.contains("warning: threshold `upstream_loss < 1%` cannot be measured with cafe")
            && e.contains("the run will FAIL it"),
        "{e}"
    );

    let out = tmp.path().join("fail-out");
    let (o, s) = run_scenario(&fail, &[], &out, &[1]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("FAIL  upstream_loss < 1%")
            && e.contains(
                "not measurable against this server (a cafe server acknowledges no input)"
            ),
        "{e}"
    );
    let t = &s["thresholds"][0];
    assert_eq!(t["condition"], "upstream_loss < 1%");
    assert_eq!(t["ok"], false);
    assert_eq!(opt_f64_at(t, "observed"), None, "{t}");
    assert_eq!(t["unmeasurable"], "a cafe server acknowledges no input");
    assert_eq!(s["verdict"], "fail");
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(
        junit.contains("<failure message=\"not measurable against this server (a cafe server acknowledges no input) (loss.upstream.rate)\"/>"),
        "{junit}"
    );

    let out = tmp.path().join("skip-out");
    let (o, s) = run_scenario(&skip, &[], &out, &[0]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("SKIP  upstream_loss < 1%"), "{e}");
    assert_eq!(s["thresholds"][0]["skipped"], true);
    assert_eq!(s["thresholds"][0]["ok"], true);
    assert_eq!(s["verdict"], "pass");
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(
        junit.contains("skipped=\"1\"")
            && junit.contains("<skipped message=\"skipped: not measurable"),
        "{junit}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("not measurable against this server"),
        "report.html says why"
    );
}

/// What a user reads is words: no Rust debug shape (`Some(`, `[(`, `{ field: … }`,
/// `RandomWalk {`) in any command's console output (validate of every shipped scenario,
/// protocols, a run).
#[test]
fn no_rust_debug_formatting_reaches_a_user() {
    let debug_shapes = ["Some(", "None", "[(", " { ", "{:", "RandomWalk", "[]"];
    let check = |what: &str, text: &str| {
        for shape in debug_shapes {
            assert!(
                !text.contains(shape),
                "`{shape}` in the output of {what}:\n{text}"
            );
        }
    };
    let bin = env!("CARGO_BIN_EXE_tickswarm");
    let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut checked = 0;
    for entry in std::fs::read_dir(&scenarios).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let o = Command::new(bin)
            .arg("validate")
            .arg(&path)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        check(&format!("validate {}", path.display()), &text);
        checked += 1;
    }
    assert!(checked >= 5, "the shipped scenarios were found ({checked})");
    let o = Command::new(bin).arg("protocols").output().unwrap();
    check("protocols", &String::from_utf8_lossy(&o.stdout));
    let tmp = tempfile::tempdir().unwrap();
    let s = tiny_scenario(tmp.path());
    let (o, _) = run_scenario(&s, &[], &tmp.path().join("o"), &[0]);
    check("run", &String::from_utf8_lossy(&o.stderr));
}
