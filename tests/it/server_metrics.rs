//! `server_metrics:` and the reference servers' own `/metrics`: what a run stores from a
//! target's Prometheus endpoint is exactly what the endpoint said (a scripted endpoint whose
//! counters and histogram move by known amounts on each scrape), a target whose endpoint
//! hangs or answers garbage is reported and changes nothing the bots send, and `serve
//! --metrics-listen` serves counters that match what its clients did.

use crate::common::summary::{assert_absent, read_summary, run_scenario, stderr, u64_at};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

pub(crate) fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tickswarm"))
}

/// 4 cafe bots at 2 inputs a second for 3.2 s against the embedded server, with
/// `server_metrics` appended.
pub(crate) fn scenario(dir: &Path, server_metrics: &str) -> std::path::PathBuf {
    let p = dir.join("s.yaml");
    std::fs::write(
        &p,
        format!(
            "name: sm\nprotocol:\n  cafe: {{}}\npopulation:\n  stages:\n    - ramp_to: 4\n      over: 0s\n\
             behaviour:\n  input_rate: 2\n  ping_interval: 200ms\nduration: 3200ms\nseed: 7\n{server_metrics}"
        ),
    )
    .unwrap();
    p
}

/// The [`scenario`] with `server_metrics` run (`--quiet --force`) into `dir/out`, through the
/// shared harness (its exit code one of `codes`): the code, summary.json and stderr.
pub(crate) fn run_scraping(
    dir: &Path,
    server_metrics: &str,
    codes: &[i32],
) -> (i32, Value, String) {
    let (o, s) = run_scenario(
        &scenario(dir, server_metrics),
        &["--quiet", "--force"],
        &dir.join("out"),
        codes,
    );
    (o.status.code().expect("an exit code"), s, stderr(&o))
}

/// The text of scrape `n` (0, 1, 2, ...): a counter +100 a scrape, a gauge equal to `n`, and
/// a histogram that gains, each scrape, 10 observations ≤ 1 ms, 80 in (1 ms, 10 ms] and 10 in
/// (10 ms, 100 ms].
fn scripted(n: u64) -> String {
    format!(
        "# HELP game_frames_total Frames.\n# TYPE game_frames_total counter\ngame_frames_total {}\n\
         # TYPE game_players gauge\ngame_players {n}\n\
         # TYPE game_tick_seconds histogram\n\
         game_tick_seconds_bucket{{le=\"0.001\"}} {}\ngame_tick_seconds_bucket{{le=\"0.01\"}} {}\n\
         game_tick_seconds_bucket{{le=\"0.1\"}} {}\ngame_tick_seconds_bucket{{le=\"+Inf\"}} {}\n\
         game_tick_seconds_sum {}\ngame_tick_seconds_count {}\n",
        100 * n,
        10 * n,
        90 * n,
        100 * n,
        100 * n,
        n,
        100 * n
    )
}

/// A one-thread HTTP endpoint answering request `n` (0, 1, 2, ...) with the raw response
/// `answer(n)`, then closing; `None` holds the connection open without a word (a hung
/// target). Hands back its address and how many requests it has read.
pub(crate) fn raw_endpoint(
    answer: impl Fn(u64) -> Option<String> + Send + 'static,
) -> (SocketAddr, Arc<AtomicU64>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let served = Arc::new(AtomicU64::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        let mut held: Vec<TcpStream> = Vec::new();
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.read(&mut buf);
            let n = count.fetch_add(1, Ordering::SeqCst);
            match answer(n) {
                Some(reply) => {
                    let _ = s.write_all(reply.as_bytes());
                }
                None => held.push(s),
            }
        }
    });
    (addr, served)
}

/// A 200 response carrying `body` with its true length.
pub(crate) fn ok(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// [`raw_endpoint`] answering each request with a 200 carrying `answer(request number)`.
fn endpoint(answer: fn(u64) -> Option<String>) -> (SocketAddr, Arc<AtomicU64>) {
    raw_endpoint(move |n| answer(n).map(|body| ok(&body)))
}

fn series<'a>(s: &'a Value, name: &str) -> &'a Value {
    &s["server_metrics"]["endpoints"][0]["series"][name]
}

#[test]
fn a_scripted_endpoint_is_stored_as_exact_rates_values_and_quantiles() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, served) = endpoint(|n| Some(scripted(n)));
    let (code, s, err) = run_scraping(
        dir.path(),
        &format!("server_metrics:\n  - url: http://{addr}/metrics\n    timeout: 800ms\n"),
        &[0],
    );
    assert_eq!(code, 0, "{err}");
    let e = &s["server_metrics"]["endpoints"][0];
    let scrapes = served.load(Ordering::SeqCst);
    assert_eq!(e["scrapes"].as_u64(), Some(scrapes));
    assert!(
        scrapes >= 2,
        "at least the baseline and one more: {scrapes}"
    );
    assert_eq!(e["failed"]["timeout"], 0);
    // The counter rose 100 between two scrapes, however far apart their slots were.
    let counter = series(&s, "game_frames_total");
    assert_eq!(counter["kind"], "counter");
    let points = counter["points"].as_array().unwrap();
    assert_eq!(points.len() as u64, scrapes - 1);
    let mut prev_t = 0.0;
    for p in points {
        let t = p["t"].as_f64().unwrap();
        assert_eq!(p["value"].as_f64().unwrap() * (t - prev_t), 100.0, "{p}");
        prev_t = t;
    }
    // The gauge is the scrape number, at whole seconds of the run's clock.
    let gauge = series(&s, "game_players")["points"].as_array().unwrap();
    assert_eq!(gauge.len() as u64, scrapes);
    assert_eq!(gauge[0]["t"], 0.0);
    for (i, p) in gauge.iter().enumerate() {
        assert_eq!(p["value"].as_f64(), Some(i as f64));
        assert_eq!(p["t"].as_f64().unwrap().fract(), 0.0);
    }
    // Each interval's histogram: 100 observations, p50 the 40th of 80 in (1 ms, 10 ms],
    // p99 the 9th of 10 in (10 ms, 100 ms], linearly interpolated.
    let h = series(&s, "game_tick_seconds");
    let p50 = 0.001 + (0.01 - 0.001) * (0.5 * 100.0 - 10.0) / 80.0;
    let p99 = 0.01 + (0.1 - 0.01) * (0.99 * 100.0 - 90.0) / 10.0;
    for p in h["points"].as_array().unwrap() {
        assert_eq!(p["p50"].as_f64(), Some(p50), "{p}");
        assert_eq!(p["p99"].as_f64(), Some(p99), "{p}");
    }
    // The whole run: (scrapes - 1) × 100 observations, the same shape.
    let total = (scrapes - 1) as f64 * 100.0;
    let whole = 0.01 + (0.1 - 0.01) * (0.99 * total - 0.9 * total) / (0.1 * total);
    assert_eq!(h["p99"].as_f64(), Some(whole));
}

/// A scrape that hangs (2 s timeout) or answers garbage never holds up the bots: every slot
/// of every bot's input grid is sent, none skipped and none late by a stall's length. (The
/// count of inputs itself is not compared with a run without the endpoints: each bot's grid
/// starts when it connects, and on a loaded machine the handshake alone moves that by
/// seconds, so the totals differ for a reason that is not the scrape.)
#[test]
fn a_hanging_or_garbage_endpoint_is_reported_and_changes_no_input_sent() {
    let dir = tempfile::tempdir().unwrap();
    let (hung, _) = endpoint(|_| None);
    let (junk, _) = endpoint(|_| Some("<html>not metrics</html>\n".into()));
    let (code, s, err) = run_scraping(dir.path(), &format!(
            "server_metrics:\n  - url: http://{hung}/metrics\n    timeout: 2s\n  - url: http://{junk}/metrics\n"
        ), &[0]);
    assert_eq!(code, 0, "{err}");
    // At 2 inputs a second a slot is skipped once its bot is 500 ms behind: a worker held
    // by a 2 s scrape would skip several per bot, and send the rest seconds late.
    assert!(
        s["inputs_sent"].as_u64().unwrap() >= 4,
        "{}",
        s["inputs_sent"]
    );
    assert_eq!(s["generator"]["inputs_skipped"], 0);
    let late = s["generator"]["send_lateness_us"]["max"].as_u64().unwrap();
    assert!(late < 250_000, "an input went out {late} µs late");
    let e = s["server_metrics"]["endpoints"].as_array().unwrap();
    assert!(e[0]["failed"]["timeout"].as_u64().unwrap() >= 1, "{}", e[0]);
    // Every scrape of the hung endpoint failed: timed out, or (the one still waiting when the
    // run ended) abandoned.
    assert_eq!(
        u64_at(&e[0], "failed.timeout") + u64_at(&e[0], "failed.abandoned"),
        u64_at(&e[0], "scrapes"),
        "{}",
        e[0]
    );
    assert_eq!(e[1]["failed"]["garbage"], e[1]["scrapes"]);
    assert!(err.contains("gave nothing"), "{err}");
}

#[test]
fn the_embedded_server_s_own_metrics_gate_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (code, s, err) = run_scraping(dir.path(), "server_metrics:\n  - url: embedded\nthresholds:\n  - server.tick_seconds p99 < 10s\n  - server.sessions max < 4\n", &[1]);
    // Four sessions at the peak: `max < 4` fails, and says so with the figure.
    assert_eq!(code, 1, "{err}");
    let sessions = series(&s, "tickswarm_server_sessions");
    assert_eq!(sessions["max"].as_f64(), Some(4.0));
    let t: Vec<&Value> = s["thresholds"].as_array().unwrap().iter().collect();
    let tick = t
        .iter()
        .find(|t| t["condition"] == "server.tick_seconds p99 < 10s")
        .unwrap();
    assert_eq!(tick["ok"], true);
    assert!(tick["observed"].as_f64().unwrap() > 0.0);
    let max = t
        .iter()
        .find(|t| t["condition"] == "server.sessions max < 4")
        .unwrap();
    assert_eq!(
        (max["ok"].clone(), max["observed"].as_f64()),
        (Value::Bool(false), Some(4.0))
    );
    // The server saw every bot's handshake.
    let accepted = series(&s, "tickswarm_server_sessions_accepted_total")["points"]
        .as_array()
        .unwrap()
        .iter()
        .zip(
            std::iter::once(0.0).chain(
                series(&s, "tickswarm_server_sessions_accepted_total")["points"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p["t"].as_f64().unwrap()),
            ),
        )
        .map(|(p, prev)| p["value"].as_f64().unwrap() * (p["t"].as_f64().unwrap() - prev))
        .sum::<f64>();
    assert_eq!(accepted, 4.0);
}

#[test]
fn serve_metrics_listen_counts_what_its_clients_did() {
    let dir = tempfile::tempdir().unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = bin()
        .args([
            "serve",
            "cafe",
            "--port",
            "0",
            "--quiet",
            "--duration",
            "20s",
        ])
        .args(["--metrics-listen", &format!("127.0.0.1:{port}")])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = std::io::BufReader::new(server.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let udp = line.split_whitespace().nth(6).unwrap().to_string();
    let p = scenario(dir.path(), "");
    let (_, s) = run_scenario(
        &p,
        &["--quiet", "--target", &udp],
        &dir.path().join("out"),
        &[0],
    );
    // The driver publishes every 100 ms; the bots are gone by now.
    std::thread::sleep(Duration::from_millis(300));
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(c, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let body = text.split_once("\r\n\r\n").unwrap().1;
    let v = |name: &str| -> f64 {
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing in:\n{body}"))
    };
    assert_eq!(v("tickswarm_server_sessions_accepted_total"), 4.0);
    assert_eq!(
        v("tickswarm_server_datagrams_total{direction=\"in\"}"),
        s["bandwidth"]["up_packets"].as_f64().unwrap(),
        "{body}"
    );
    assert!(v("tickswarm_server_tick_seconds_count") > 0.0);
    assert_eq!(v("tickswarm_server_send_errors_total"), 0.0);
}

#[test]
fn compare_diffs_the_server_series_of_two_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let sm = "server_metrics:\n  - url: embedded\n";
    let (_, sa, _) = run_scraping(&a, sm, &[0, 1]);
    let (_, sb, _) = run_scraping(&b, sm, &[0, 1]);
    let o = bin()
        .arg("compare")
        .arg(a.join("out"))
        .arg(b.join("out"))
        .args([
            "--json",
            "--quiet",
            "--max-regress",
            "server.sessions.max=0",
        ])
        .output()
        .unwrap();
    let c: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    let row = |m: &str| {
        c["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["metric"] == m)
            .cloned()
            .unwrap_or_else(|| panic!("no {m} row in {c}"))
    };
    // The whole-run p99 of the tick histogram, in µs, as each summary holds it in seconds.
    let tick = row("server.tick_seconds.p99");
    let p99 = |s: &Value| {
        s["server_metrics"]["endpoints"][0]["series"]["tickswarm_server_tick_seconds"]["p99"]
            .as_f64()
            .unwrap()
            * 1e6
    };
    // Equal but for float rounding: compare converts seconds to µs its own way (a p99 of
    // 248.90909090909093 µs came back as 248.9090909090909).
    let same =
        |got: Option<f64>, want: f64| got.is_some_and(|g| (g - want).abs() <= want.abs() * 1e-12);
    assert!(
        same(tick["base"].as_f64(), p99(&sa)),
        "{tick} vs {}",
        p99(&sa)
    );
    assert!(
        same(tick["new"].as_f64(), p99(&sb)),
        "{tick} vs {}",
        p99(&sb)
    );
    // Four sessions at the peak in both: no regression on a limit of 0.
    let sessions = row("server.sessions.max");
    assert_eq!(
        (sessions["base"].as_f64(), sessions["new"].as_f64()),
        (Some(4.0), Some(4.0))
    );
    assert_eq!(sessions["regressed"], false);
}

#[test]
fn shard_0_scrapes_the_others_skip_and_merge_judges_the_server_figures() {
    let dir = tempfile::tempdir().unwrap();
    let p = scenario(
        dir.path(),
        "server_metrics:\n  - url: embedded\nthresholds:\n  - server.tick_seconds p99 < 10s\n",
    );
    let mut outs = Vec::new();
    for i in 0..2 {
        let out = dir.path().join(format!("shard{i}"));
        let (_, s) = run_scenario(&p, &["--quiet", "--shard", &format!("{i}/2")], &out, &[0]);
        outs.push((out, s));
    }
    let server_threshold = |s: &Value| {
        s["thresholds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["condition"] == "server.tick_seconds p99 < 10s")
            .cloned()
            .unwrap()
    };
    let (s0, s1) = (&outs[0].1, &outs[1].1);
    assert_eq!(
        s0["server_metrics"]["endpoints"].as_array().unwrap().len(),
        1
    );
    assert_absent(s1, "server_metrics");
    assert_eq!(server_threshold(s1)["skipped"], true);
    let merged = dir.path().join("merged");
    let o = bin()
        .arg("merge")
        .args(outs.iter().map(|(d, _)| d))
        .args(["--quiet", "--out"])
        .arg(&merged)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let m = read_summary(&merged).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        m["server_metrics"]["endpoints"],
        s0["server_metrics"]["endpoints"]
    );
    let t = server_threshold(&m);
    assert_eq!(
        (t["ok"].clone(), t["observed"].clone()),
        (Value::Bool(true), server_threshold(s0)["observed"].clone())
    );
}
