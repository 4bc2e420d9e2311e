//! Thresholds take any percentile `compare` takes (`rtt p95`, `rtt p99.9`, `send_lateness
//! p99.5`): a real run judges them on its own histograms, and summary.json, junit.xml and
//! report.html name the percentile with its observed value; a statistic that is none is
//! refused by `validate` with file, line, column and the forms allowed.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::summary::run_scenario;

fn tickswarm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .args(args)
        .env_remove("TICKSWARM_FORCE")
        .env_remove("TICKSWARM_QUIET")
        .env_remove("TICKSWARM_JSON")
        .env_remove("TICKSWARM_OUT")
        .output()
        .expect("run tickswarm")
}

fn scenario(dir: &Path, thresholds: &[&str]) -> String {
    let p = dir.join("s.yaml");
    let list: String = thresholds.iter().map(|t| format!("  - {t}\n")).collect();
    std::fs::write(
        &p,
        format!(
            "name: percentiles\nprotocol:\n  cafe: {{}}\npopulation:\n  stages:\n    - ramp_to: 3\n      \
             over: 0s\nbehaviour:\n  input_rate: 30\n  ping_interval: 100ms\nduration: 2s\n\
             thresholds:\n{list}"
        ),
    )
    .unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn a_run_judges_any_percentile_on_its_histogram_and_names_it() {
    let tmp = tempfile::tempdir().unwrap();
    let s = scenario(
        tmp.path(),
        &[
            "rtt p95 < 10s",
            "rtt p99.9 < 10s",
            "send_lateness p99.5 < 10s",
            "rtt p95 < 1us",
        ],
    );
    let out = tmp.path().join("out");
    // `rtt p95 < 1us` cannot hold: the run fails on it, and on it alone.
    let (o, summary) = run_scenario(Path::new(&s), &[], &out, &[1]);
    let err = String::from_utf8_lossy(&o.stderr);
    let th = summary["thresholds"].as_array().unwrap();
    let by = |cond: &str| {
        th.iter()
            .find(|t| t["condition"] == cond)
            .unwrap_or_else(|| panic!("no {cond} in {th:?}"))
    };

    // The ground truth: the run's own RTT and lateness histograms, every interval added up.
    let hists = tickswarm::report::merge::hlog_totals(&out.join("histograms.hlog")).unwrap();
    let at = |tag: &str, q: f64| hists[tag].value_at_quantile(q) as f64;
    assert!(hists["rtt_us"].len() >= 20, "the run took RTT samples");

    let p95 = by("rtt p95 < 10s");
    assert_eq!(p95["metric"], "rtt_us.p95");
    assert_eq!(p95["observed"].as_f64(), Some(at("rtt_us", 0.95)));
    assert_eq!(p95["ok"], true);
    let p999 = by("rtt p99.9 < 10s");
    assert_eq!(p999["metric"], "rtt_us.p999");
    assert_eq!(
        p999["observed"].as_f64(),
        summary["rtt_us"]["p999"].as_f64(),
        "a percentile the summary lists is the summary's figure"
    );
    let late = by("send_lateness p99.5 < 10s");
    assert_eq!(late["metric"], "generator.send_lateness_us.p99_5");
    assert_eq!(
        late["observed"].as_f64(),
        Some(at("send_lateness_us", 0.995))
    );
    let fail = by("rtt p95 < 1us");
    assert_eq!(
        (&fail["ok"], &fail["observed"]),
        (&Value::Bool(false), &p95["observed"])
    );
    assert_eq!(summary["verdict"], "fail");

    // The console, junit.xml and report.html name the percentile and its observed value.
    let shown = tickswarm::report::build::format_observed("rtt_us.p95", Some(at("rtt_us", 0.95)));
    assert!(
        err.contains("FAIL  rtt p95 < 1us") && err.contains(&shown),
        "{err}"
    );
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(
        junit.contains(&format!(
            "name=\"rtt p95 &lt; 1us\">\n      <failure message=\"observed {shown} (rtt_us.p95)\"/>"
        )),
        "{junit}"
    );
    assert!(
        junit.contains(&format!(
            "name=\"rtt p95 &lt; 10s\">\n      <system-out>observed {shown} (rtt_us.p95)</system-out>"
        )),
        "{junit}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    // The template escapes `<` as a numeric reference.
    assert!(html.contains("rtt p95 &#60; 1us") && html.contains(&shown));
}

#[test]
fn a_statistic_that_is_none_is_refused_with_line_column_and_the_forms() {
    let tmp = tempfile::tempdir().unwrap();
    let s = scenario(tmp.path(), &["rtt p50 < 5ms", "rtt p101 < 5ms"]);
    let o = tickswarm(&["validate", &s]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    // The second threshold, on line 14 of the file.
    assert!(err.contains("s.yaml:14:"), "{err}");
    assert!(
        err.contains("unknown statistic `p101`") && err.contains("p95, p99, p99.9"),
        "{err}"
    );
}
