//! `run --dashboard`: the run's report live in a browser.
//!
//! One run of the embedded cafe server, watched three ways while it goes:
//! - headless Chromium loads the page mid-run and keeps it open for a few seconds: the
//!   script swaps in the newer seconds (the DOM ends later than the page it loaded), and the
//!   charts hold the seconds already run; screenshots of the live page at 1280 and 420 px;
//! - the page as served mid-run goes through the report's layout checks (no overflow, no
//!   text over text, the live bar included) at both widths;
//! - raw event streams: the eight seats fill and a ninth is refused with a 503 saying so,
//!   anything but GET is refused, and the stream kept open to the end carries the final
//!   report, as written, before it closes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::report_browser::{
    at_both_widths, chromium, console_messages, drew_something, figures, no_more, shots_dir,
    try_framed_screenshot,
};

/// Seats for event streams (`dashboard::MAX_VIEWERS` in the crate).
const MAX_VIEWERS: usize = 8;

/// One GET on a connection of its own: the status line and the body.
fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the dashboard");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read the answer");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split("\r\n").next().unwrap_or("");
    (status.to_string(), body.to_string())
}

/// An event stream opened and its head read (its status line).
fn open_stream(addr: SocketAddr) -> (TcpStream, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the dashboard");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /events HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    // Byte by byte: a buffered reader would take some of what follows with it.
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        s.read_exact(&mut byte).expect("status line");
        line.push(byte[0]);
    }
    (s, String::from_utf8_lossy(&line).trim_end().to_string())
}

/// The seconds the live bar says have run (`N s of M s`), if it says so.
fn live_seconds(html: &str) -> Option<u64> {
    let bar = html.split("<div id=\"live\"").nth(1)?;
    let state = bar.split("class=\"state\">").nth(1)?;
    state.split(" s of ").next()?.trim().parse().ok()
}

/// The most points a chart's polyline has; `None` when it has no polyline at all.
fn most_points(fig: &str) -> Option<usize> {
    fig.split("points=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .map(|pts| pts.split(' ').filter(|p| p.contains(',')).count())
        .max()
}

#[test]
fn the_dashboard_shows_the_run_live_and_ends_with_the_final_report() {
    let tmp = tempfile::tempdir().unwrap();
    // Long enough for every look at the live page (the DOM, then screenshots at two widths,
    // each a Chromium start that takes seconds on two busy cores) to end before the run: at
    // 14 s the 420 px screenshot sometimes came after the run had ended, and stayed empty.
    let scenario = tmp.path().join("live.yaml");
    std::fs::write(
        &scenario,
        "name: live view\nprotocol:\n  cafe: {}\ntarget: embedded\npopulation:\n  stages:\n    \
         - ramp_to: 20\n      over: 1s\n    - hold: 29s\nbehaviour:\n  input_rate: 30\n  \
         ping_interval: 200ms\nduration: 30s\nthresholds:\n  - rtt p99 < 10s\n  \
         - downstream_loss < 50%\n",
    )
    .unwrap();
    let out = tmp.path().join("run");
    let mut run = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("run")
        .arg(&scenario)
        .arg("--dashboard=127.0.0.1:0")
        .arg("-v")
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tickswarm run");
    // Its stderr, line by line: the dashboard's address first, everything kept for the end.
    let (lines_tx, lines) = mpsc::channel::<String>();
    let stderr = run.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let mut said = Vec::new();
    let addr: SocketAddr = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the run says where its dashboard is");
        said.push(line.clone());
        if let Some(url) = line.strip_prefix("dashboard http://") {
            break url.trim_end_matches('/').parse().expect("an address");
        }
    };

    // A viewer kept to the end, for the final report.
    let (mut keeper, status) = open_stream(addr);
    assert_eq!(status, "HTTP/1.1 200 OK");
    let kept = std::thread::spawn(move || {
        keeper
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut all = String::new();
        let _ = keeper.read_to_string(&mut all);
        all
    });
    // The other seven seats, then one too many.
    let seats: Vec<_> = (1..MAX_VIEWERS)
        .map(|_| {
            let (s, status) = open_stream(addr);
            assert_eq!(status, "HTTP/1.1 200 OK");
            s
        })
        .collect();
    let (_, refused) = open_stream(addr);
    assert_eq!(refused, "HTTP/1.1 503 Service Unavailable");
    let (_, body) = get(addr, "/events");
    assert!(body.contains("the dashboard has 8 viewers"), "{body}");
    drop(seats);
    // Read-only: nothing but GET and HEAD.
    let mut post = TcpStream::connect(addr).unwrap();
    write!(
        post,
        "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    post.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");

    // Mid-run: wait for three seconds run.
    let deadline = Instant::now() + Duration::from_secs(40);
    let page = loop {
        let (status, page) = get(addr, "/");
        assert_eq!(status, "HTTP/1.1 200 OK");
        if live_seconds(&page).is_some_and(|s| s >= 3) {
            break page;
        }
        assert!(
            Instant::now() < deadline,
            "no third second on the dashboard"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let served_at = live_seconds(&page).unwrap();
    assert!(page.contains("<script src=\"/live.js\" defer></script>"));
    assert!(page.contains("script-src 'self'; connect-src 'self'"));
    // The RTT over time holds a point per second run (at least those the page says).
    let rtt = figures(&page)
        .into_iter()
        .find(|(id, _)| id == "over-time-rtt_us")
        .expect("the RTT chart");
    let points = most_points(&rtt.1).expect("the RTT chart draws a line");
    assert!(
        points as u64 >= served_at,
        "{served_at} s run, the RTT chart has {points} points"
    );

    // Chromium loads the page a second and a half later: it shows a later second. (Chromium's
    // --dump-dom writes the DOM at the page's load, before the event stream's first message,
    // so this checks the served page moves on, not the script's swaps: those are checked on
    // the raw stream below.)
    std::thread::sleep(Duration::from_millis(1500));
    let profile = tmp.path().join("profile");
    let url = format!("http://{addr}/");
    let (dom, err) = chromium(
        &profile,
        1280,
        1000,
        &["--timeout=4000", "--dump-dom"],
        &url,
    );
    let msgs = console_messages(&err);
    assert!(msgs.is_empty(), "console:\n{}", msgs.join("\n"));
    let shown = live_seconds(&dom).expect("the live bar in the DOM");
    assert!(
        shown > served_at,
        "the page served at {served_at} s still shows {shown} s 1.5 s later"
    );
    let figs = figures(&dom);
    assert!(figs.len() >= 4, "{} charts in the live DOM", figs.len());
    for (id, fig) in &figs {
        assert!(drew_something(fig), "live chart {id} drew nothing");
    }
    // Screenshots of the live page for a person (CI keeps target/tmp).
    let shots = shots_dir();
    for width in [1280u32, 420] {
        let shot = shots.join(format!("dashboard-live-{width}.png"));
        let _ = std::fs::remove_file(&shot);
        // A live page over HTTP in a new Chromium: on a loaded machine the frame may still be
        // loading when a short wait ends (an empty picture), so the wait grows.
        let taken = ["--timeout=4000", "--timeout=8000", "--timeout=15000"]
            .iter()
            .map(|wait| {
                try_framed_screenshot(&profile, tmp.path(), &url, (width, 2400), wait, &shot)
            })
            .find(|&bytes| bytes > 10_000);
        assert!(
            taken.is_some(),
            "screenshot {} stayed empty",
            shot.display()
        );
        eprintln!("screenshot: {}", shot.display());
    }

    // The page as served mid-run, through the report's layout checks (its script out: a
    // file has no stream to read).
    let copy = tmp.path().join("out");
    std::fs::create_dir_all(&copy).unwrap();
    let still = page.replace("<script src=\"/live.js\" defer></script>", "");
    let html = copy.join("report.html");
    std::fs::write(&html, &still).unwrap();
    at_both_widths(
        tmp.path(),
        &html,
        figures(&still).len(),
        "dashboard",
        &no_more,
    );

    // The end: a verdict (a debug build next to Chromium on two cores may saturate the
    // generator, which fails the run: the dashboard is not what decides it), and the stream
    // kept open carried the final report and closed.
    let status = run.wait().expect("wait for the run");
    reader.join().unwrap();
    said.extend(lines.try_iter());
    assert!(
        matches!(status.code(), Some(0 | 1)),
        "{status}: {}",
        said.join("\n")
    );
    let stream = kept.join().unwrap();
    assert!(
        stream.starts_with("Content-Type: text/event-stream\r\n"),
        "{}",
        &stream[..stream.len().min(200)]
    );
    let updates = stream.matches("event: update\n").count();
    assert!(updates >= 3, "{updates} updates on the kept stream");
    let last = stream
        .rsplit("event: final\n")
        .next()
        .filter(|_| stream.contains("event: final\n"))
        .expect("a final event");
    assert!(last.contains("<strong>FINISHED</strong>"), "{last}");
    let written = std::fs::read_to_string(out.join("report.html")).unwrap();
    let h1 = written
        .split("<h1>")
        .nth(1)
        .and_then(|s| s.split("</h1>").next())
        .expect("the report's title");
    assert!(last.contains(&format!("data: <h1>{h1}</h1>")), "{last}");
    assert!(
        said.iter()
            .any(|l| l.starts_with("dashboard: ") && l.contains("pages rendered")),
        "{}",
        said.join("\n")
    );
    let _ = Path::new(&out);
}
