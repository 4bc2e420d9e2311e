//! `server_metrics:` against a hostile or broken endpoint (issue 35): whatever a target's
//! `/metrics` does, the run ends on time, its memory and summary stay within the caps, and
//! nothing it sends that is not a measurement gates the run. Each endpoint here is a loopback
//! HTTP server written in the test, answering each request with a scripted response.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::server_metrics::{bin, ok, raw_endpoint, run_scraping, scenario};
use crate::common::summary::{at, opt_f64_at, run_command, summary_in, u64_at};

/// `tickswarm validate` of the 3.2 s swarm with `server_metrics` appended: exit code, stderr.
fn validate(dir: &Path, server_metrics: &str) -> (i32, String) {
    let o = bin()
        .arg("validate")
        .arg(scenario(dir, server_metrics))
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The result of the threshold written as `condition`.
fn threshold<'a>(s: &'a Value, condition: &str) -> &'a Value {
    at(s, "thresholds")
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["condition"] == condition)
        .unwrap_or_else(|| panic!("no threshold `{condition}` in {}", at(s, "thresholds")))
}

/// Break 3: a hung endpoint with the longest timeout allowed (10 s) holds nothing: the 3.2 s
/// run ends within its duration + 5 s (it took 10 s and more before: the run waited for the
/// scrape; `timeout: 25s` made a 5 s run take 26.6 s), and the one scrape it made is counted
/// as timed out or left behind.
#[test]
fn a_hung_endpoint_never_holds_the_end_of_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (hung, _) = raw_endpoint(|_| None);
    let t0 = Instant::now();
    let (code, s, err) = run_scraping(
        dir.path(),
        &format!("server_metrics:\n  - url: http://{hung}/metrics\n    timeout: 10s\n"),
        &[0],
    );
    let took = t0.elapsed();
    assert_eq!(code, 0, "{err}");
    assert!(
        took < Duration::from_millis(3200 + 5000),
        "the 3.2 s run took {took:?} with a hung endpoint"
    );
    let failed = (
        u64_at(&s, "server_metrics.endpoints.0.failed.timeout"),
        u64_at(&s, "server_metrics.endpoints.0.failed.abandoned"),
    );
    assert_eq!(
        u64_at(&s, "server_metrics.endpoints.0.scrapes"),
        1,
        "one scrape, held to the end: {failed:?}"
    );
    assert_eq!(
        failed.0 + failed.1,
        1,
        "timed out or left behind: {failed:?}"
    );
}

/// Break 3, with Ctrl-C: a run interrupted while a scrape hangs (10 s timeout) ends within 5 s
/// of the SIGINT, the scrape left behind and counted (before: the run waited the 10 s out).
#[test]
fn ctrl_c_does_not_wait_for_a_hung_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let (hung, served) = raw_endpoint(|_| None);
    let p = scenario(
        dir.path(),
        &format!("server_metrics:\n  - url: http://{hung}/metrics\n    timeout: 10s\n"),
    );
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("duration: 3200ms", "duration: 60s");
    std::fs::write(&p, text).unwrap();
    let out = dir.path().join("out");
    let mut child = run_command(&p, &["--quiet"], &out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The scrape is under way once the endpoint has read its request.
    let t0 = Instant::now();
    while served.load(Ordering::SeqCst) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "no scrape came");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child process by its pid.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let sent = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if sent.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the run did not end within 20 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = sent.elapsed();
    assert!(status.code().is_some(), "{status}");
    assert!(
        took < Duration::from_secs(5),
        "the run ended {took:?} after SIGINT, held by a hung scrape"
    );
    let s = summary_in(&out);
    assert_eq!(
        u64_at(&s, "server_metrics.endpoints.0.failed.abandoned"),
        1,
        "{}",
        at(&s, "server_metrics.endpoints.0")
    );
}

/// Break 3: `timeout:` above 10 s is refused by `validate`, at its own line and column (the
/// scenario's line 15 is the endpoint's `timeout:`); 10 s is allowed. `timeout: 1000000000s`
/// passed before, and its run never ended.
#[test]
fn a_timeout_above_the_cap_is_refused_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    for t in ["1000000000s", "11s"] {
        let (code, err) = validate(
            dir.path(),
            &format!("server_metrics:\n  - url: http://127.0.0.1:9/metrics\n    timeout: {t}\n"),
        );
        assert_eq!(code, 2, "timeout: {t} passed validate: {err}");
        assert!(
            err.contains("s.yaml:15:") && err.contains("10s"),
            "timeout: {t}: {err}"
        );
    }
    let (code, err) = validate(
        dir.path(),
        "server_metrics:\n  - url: http://127.0.0.1:9/metrics\n    timeout: 10s\n",
    );
    assert_eq!(code, 0, "{err}");
}

/// Break 11: more than 32 endpoints for one shard are refused by `validate`, naming the
/// file and line (20,000 passed before, and the run then failed to start its threads); 32 pass, and so
/// do 33 spread over two shards.
#[test]
fn more_endpoints_than_the_cap_are_refused_by_validate() {
    let dir = tempfile::tempdir().unwrap();
    let list = |n: usize, shards: u32| -> String {
        let mut s = "server_metrics:\n".to_string();
        for i in 0..n {
            s.push_str(&format!(
                "  - url: http://127.0.0.1:{}/metrics\n    shard: {}\n",
                10_000 + i,
                i as u32 % shards
            ));
        }
        s
    };
    let (code, err) = validate(dir.path(), &list(33, 1));
    assert_eq!(code, 2, "33 endpoints for shard 0 passed validate: {err}");
    assert!(
        err.contains("s.yaml:") && err.contains("33 endpoints for shard 0, at most 32"),
        "{err}"
    );
    // 5,000: 20,000 would be refused anyway, as a scenario file over 1 MiB.
    let (code, err) = validate(dir.path(), &list(5_000, 1));
    assert!(
        code == 2 && err.contains("5000 endpoints for shard 0"),
        "5,000 endpoints: {code} {err}"
    );
    let (code, err) = validate(dir.path(), &list(32, 1));
    assert_eq!(code, 0, "32 endpoints: {err}");
    let (code, err) = validate(dir.path(), &list(33, 2));
    assert_eq!(code, 0, "33 endpoints over 2 shards: {err}");
}

/// Scrape `n` of an endpoint that renames its series every time: 64 that stay (`a_keep_*`,
/// first by name, so they are the ones kept) and 5,000 new ones.
fn churning(n: u64) -> Option<String> {
    let mut body = String::from("# TYPE a_keep gauge\n");
    for i in 0..64 {
        body.push_str(&format!("a_keep{{i=\"{i:02}\"}} 1\n"));
    }
    for i in 0..5000 {
        body.push_str(&format!("z_new_{n}_{i} 1\n"));
    }
    Some(ok(&body))
}

/// Break 4: new names on every scrape grew the set of left-out names without bound (1.71 GB
/// in 38 s). Now 64 series are kept, the distinct names left out are counted up to 10,000
/// and no further (the set that counts them is that big at most), and every sample left out
/// is counted exactly.
#[test]
fn new_names_every_scrape_are_counted_within_a_bounded_set() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, _) = raw_endpoint(churning);
    let (code, s, err) = run_scraping(dir.path(), &format!(
            "server_metrics:\n  - url: http://{addr}/metrics\n    interval: 200ms\n    timeout: 2s\n"
        ), &[0]);
    assert_eq!(code, 0, "{err}");
    let e = "server_metrics.endpoints.0";
    let good = u64_at(&s, &format!("{e}.scrapes"))
        - u64_at(&s, &format!("{e}.failed.timeout"))
        - u64_at(&s, &format!("{e}.failed.abandoned"));
    assert!(
        good >= 3,
        "3 scrapes of 5,000 new names pass the 10,000 cap: {good}"
    );
    let kept = at(&s, &format!("{e}.series")).as_object().unwrap().len();
    assert_eq!(kept, 64);
    assert_eq!(
        u64_at(&s, &format!("{e}.series_left_out")),
        10_000,
        "{good} scrapes of 5,000 new names each"
    );
    assert_eq!(
        u64_at(&s, &format!("{e}.dropped.samples_left_out")),
        5000 * good,
        "{good} scrapes of 5,000 left out"
    );
}

/// Scrape `n` of a family with a label per player: 1,000 label values (500,000 took 2.43 GB).
fn per_player(_: u64) -> Option<String> {
    let mut body = String::from("# TYPE g gauge\n");
    for i in 0..1000 {
        body.push_str(&format!("g{{player=\"{i:04}\"}} 1\n"));
    }
    Some(ok(&body))
}

/// Break 4: a family named in `series:` keeps at most 128 label sets; the other 872 are
/// counted, as names and as samples, not kept.
#[test]
fn a_named_family_keeps_at_most_its_cap_of_label_values() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, _) = raw_endpoint(per_player);
    let (code, s, err) = run_scraping(
        dir.path(),
        &format!(
            "server_metrics:\n  - url: http://{addr}/metrics\n    timeout: 2s\n    series: [g]\n"
        ),
        &[0],
    );
    assert_eq!(code, 0, "{err}");
    let e = "server_metrics.endpoints.0";
    let good = u64_at(&s, &format!("{e}.scrapes"))
        - u64_at(&s, &format!("{e}.failed.timeout"))
        - u64_at(&s, &format!("{e}.failed.abandoned"));
    assert!(good >= 1, "no scrape succeeded");
    let kept = at(&s, &format!("{e}.series")).as_object().unwrap().len();
    assert_eq!(kept, 128, "of 1,000 label values");
    assert_eq!(u64_at(&s, &format!("{e}.series_left_out")), 872);
    assert_eq!(
        u64_at(&s, &format!("{e}.dropped.samples_left_out")),
        872 * good,
        "{good} scrapes"
    );
}

/// Scrape `n`: a gauge that is NaN on odd scrapes, a gauge always `+Inf`, and a counter at
/// `-Inf`.
fn non_finite(n: u64) -> Option<String> {
    let g = if n % 2 == 1 {
        "NaN".into()
    } else {
        n.to_string()
    };
    Some(ok(&format!(
        "# TYPE g gauge\ng {g}\n# TYPE big gauge\nbig +Inf\n# TYPE c_total counter\nc_total -Inf\n"
    )))
}

/// Break 7: NaN and ±Inf samples are dropped and counted, never written as `null` where the
/// schema wants a number; summary.json matches its schema and `compare` reads it (it exited
/// 2 before, and so did `merge`).
#[test]
fn non_finite_values_are_dropped_and_counted_and_compare_reads_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, _) = raw_endpoint(non_finite);
    let (code, s, err) = run_scraping(
        dir.path(),
        &format!("server_metrics:\n  - url: http://{addr}/metrics\n    timeout: 2s\n"),
        &[0],
    );
    assert_eq!(code, 0, "{err}");
    let e = "server_metrics.endpoints.0";
    let scrapes = u64_at(&s, &format!("{e}.scrapes"));
    let failed = at(&s, &format!("{e}.failed")).clone();
    let none_failed = failed
        .as_object()
        .unwrap()
        .values()
        .all(|v| v.as_u64() == Some(0));
    assert!(none_failed, "{failed}");
    // Per scrape: `big` and `c_total`; `g` on every odd one.
    assert_eq!(
        u64_at(&s, &format!("{e}.dropped.non_finite")),
        2 * scrapes + scrapes / 2,
        "{scrapes} scrapes"
    );
    let points = at(&s, &format!("{e}.series.g.points")).as_array().unwrap();
    assert_eq!(points.len() as u64, scrapes - scrapes / 2, "{points:?}");
    assert!(points.iter().all(|p| p["value"].is_number()), "{points:?}");
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/summary.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = v.iter_errors(&s).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");
    let out = dir.path().join("out");
    let o = bin()
        .arg("compare")
        .arg(&out)
        .arg(&out)
        .args(["--quiet", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Scrape `n`: `tick_seconds` with a negative bound (99 of each 100 observations "≤ -1 s"),
/// and `falling`, whose cumulative counts go down.
fn bad_histograms(n: u64) -> Option<String> {
    Some(ok(&format!(
        "# TYPE tick_seconds histogram\n\
         tick_seconds_bucket{{le=\"-1\"}} {a}\ntick_seconds_bucket{{le=\"1\"}} {a}\n\
         tick_seconds_bucket{{le=\"+Inf\"}} {b}\ntick_seconds_sum 0\ntick_seconds_count {b}\n\
         # TYPE falling histogram\n\
         falling_bucket{{le=\"0.01\"}} {b}\nfalling_bucket{{le=\"0.1\"}} {h}\n\
         falling_bucket{{le=\"+Inf\"}} {b}\nfalling_sum 0\nfalling_count {b}\n",
        // From n + 1: the first page's `falling` counts must fall too (all 0 do not).
        a = 99 * (n + 1),
        b = 100 * (n + 1),
        h = 50 * (n + 1),
    )))
}

/// Break 9: a histogram with a negative bound or falling counts is no histogram: dropped and
/// counted, so `server.tick_seconds p99 < 16.7ms` has no data and fails (it passed before, on
/// a p99 of -1 s).
#[test]
fn a_histogram_with_a_negative_bound_or_falling_counts_gates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, _) = raw_endpoint(bad_histograms);
    let (code, s, err) = run_scraping(
        dir.path(),
        &format!(
            "server_metrics:\n  - url: http://{addr}/metrics\n    timeout: 2s\n\
             thresholds:\n  - server.tick_seconds p99 < 16.7ms\n"
        ),
        &[1],
    );
    let t = threshold(&s, "server.tick_seconds p99 < 16.7ms");
    assert_eq!(t["ok"], false, "passed on {}: {err}", t["observed"]);
    assert_eq!(opt_f64_at(t, "observed"), None, "{t}");
    assert_eq!(code, 1, "{err}");
    let e = "server_metrics.endpoints.0";
    let scrapes = u64_at(&s, &format!("{e}.scrapes"));
    assert_eq!(u64_at(&s, &format!("{e}.failed.timeout")), 0);
    // A scrape still running when the run ended is abandoned, its page never read.
    let read = scrapes - u64_at(&s, &format!("{e}.failed.abandoned"));
    assert!(read >= 2, "{read} pages read");
    assert_eq!(
        u64_at(&s, &format!("{e}.dropped.bad_histogram")),
        2 * read,
        "two per page read, {read} of {scrapes} scrapes"
    );
    assert!(
        at(&s, &format!("{e}.series"))
            .as_object()
            .unwrap()
            .is_empty(),
        "{}",
        at(&s, &format!("{e}.series"))
    );
}

/// The server meant `g 10\n` and the connection closed after `g 1`.
fn cut_short(_: u64) -> Option<String> {
    Some("HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\ng 1".into())
}

/// Break 10: a body short of its Content-Length is a failed scrape (`failed.truncated`), not
/// a page: `server.g max < 5` has no data and fails (it passed before, reading `g 1`).
#[test]
fn a_body_cut_short_of_its_content_length_is_a_failed_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, _) = raw_endpoint(cut_short);
    let (code, s, err) = run_scraping(
        dir.path(),
        &format!(
            "server_metrics:\n  - url: http://{addr}/metrics\n    timeout: 2s\n\
             thresholds:\n  - server.g max < 5\n"
        ),
        &[1],
    );
    let t = threshold(&s, "server.g max < 5");
    assert_eq!(t["ok"], false, "passed on {}: {err}", t["observed"]);
    assert_eq!(code, 1, "{err}");
    let e = "server_metrics.endpoints.0";
    let scrapes = u64_at(&s, &format!("{e}.scrapes"));
    assert!(scrapes >= 1);
    assert_eq!(
        u64_at(&s, &format!("{e}.failed.truncated")),
        scrapes,
        "every scrape was cut short"
    );
    assert!(at(&s, &format!("{e}.series"))
        .as_object()
        .unwrap()
        .is_empty());
}
