//! report.html as people see it: opened in headless Chromium (Debian's `chromium`, installed
//! by `scripts/install-test-deps.sh`) at a desktop width (1280 px) and a phone width (420 px).
//!
//! For each width the test
//! - loads the report as written (its Content-Security-Policy intact) and fails on any console
//!   message: a CSP violation (something fetched), a malformed SVG attribute, a script error;
//! - reads the DOM after layout and checks every chart figure holds an `<svg>` with drawn
//!   content (a line, an area), not an empty frame;
//! - loads a copy with a small probe script (the only change: the CSP meta removed so the
//!   probe may run) inside an `<iframe>` exactly `width` CSS px wide; the probe posts the
//!   page's scroll width, its viewport width and each chart's rendered size to the parent,
//!   which writes them into its DOM: no horizontal overflow at 420 px, every chart laid out
//!   with a non-zero size inside the viewport;
//! - saves a screenshot of the report in that iframe into `target/tmp/report_browser/`.
//!
//! Why the iframe: headless Chromium will not make its window narrower than 500 px (a
//! `--window-size=420,...` page reports a 500 px viewport and a screenshot of it is a 500 px
//! layout cut at 420), so the phone width is given to a frame instead. The phone screenshot
//! is therefore 500 px wide with the 420 px report at its left.
//!
//! It fails (never skips) when Chromium is missing or cannot be driven.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::summary::{finish, run_command, run_scenario, summary_in};

const INSTALL_HINT: &str = "run scripts/install-test-deps.sh (installs chromium)";

/// Where the screenshots stay after the test, for a person to open.
pub(crate) fn shots_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report_browser");
    std::fs::create_dir_all(&d).expect("create the screenshot folder");
    d
}

/// `tickswarm serve cafe` on a free port, and its address.
fn serve_cafe() -> (std::process::Child, String) {
    crate::common::serve::serve("cafe", &[])
}

/// A short real run: cafe against two servers (so the per-target section is drawn), with
/// thresholds to draw.
fn generate_report(dir: &Path) -> PathBuf {
    // The first server also serves its own /metrics, which the run scrapes: the server's
    // tick-time chart is drawn beside the RTT.
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let listen = format!("127.0.0.1:{metrics_port}");
    let (mut a, addr_a) = crate::common::serve::serve("cafe", &["--metrics-listen", &listen]);
    let (mut b, addr_b) = serve_cafe();
    let scenario = dir.join("s.yaml");
    let text = format!(
        "name: browser check\nprotocol:\n  cafe: {{}}\ntarget: embedded\npopulation:\n  stages:\n    \
         - ramp_to: 20\n      over: 1s\n    - hold: 2s\nbehaviour:\n  input_rate: 30\n  \
         ping_interval: 200ms\nduration: 3s\nserver:\n  snapshot_rate: 60\nthresholds:\n  \
         - rtt p99 < 50ms\n  - downstream_loss < 1%\n  - server.tick_seconds p99 < 1s\n\
         server_metrics:\n  - url: http://127.0.0.1:{metrics_port}/metrics\n",
    );
    std::fs::write(&scenario, text).unwrap();
    let targets = format!("{addr_a},{addr_b}");
    let out = dir.join("out");
    let o = run_command(&scenario, &["--target", &targets], &out)
        .output()
        .expect("run tickswarm");
    for server in [&mut a, &mut b] {
        let _ = server.kill();
        let _ = server.wait();
    }
    finish(&o, &out, &[0, 1]);
    let html = out.join("report.html");
    assert!(html.exists(), "no report.html");
    html
}

/// Run headless Chromium with `args` (after the fixed flags) on `url`; its stdout and stderr.
/// Bounded: killed after 90 s.
pub(crate) fn chromium(
    profile: &Path,
    width: u32,
    height: u32,
    args: &[&str],
    url: &str,
) -> (String, String) {
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={width},{height}"))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `chromium` ({e}): {INSTALL_HINT}"));
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for chromium") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 90 s on {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (o, e) = (t_out.join().unwrap(), t_err.join().unwrap());
    assert!(
        status.success(),
        "chromium failed ({status}) on {url}:\n{e}"
    );
    (o, e)
}

/// Console messages Chromium logged (`--enable-logging=stderr` prints them as `CONSOLE`).
pub(crate) fn console_messages(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains(":CONSOLE")).collect()
}

/// Each `<figure ... data-chart="ID">` of the DOM and its markup up to `</figure>`.
pub(crate) fn figures(dom: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = dom;
    while let Some(at) = rest.find("<figure") {
        let tail = &rest[at..];
        let end = tail.find("</figure>").expect("figure is closed");
        let fig = &tail[..end];
        let id = fig
            .split("data-chart=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or("")
            .to_string();
        out.push((id, fig.to_string()));
        rest = &tail[end..];
    }
    out
}

/// The `points` of the element carrying `marker` in `fig`, as a count of x,y pairs.
pub(crate) fn points_after(fig: &str, marker: &str) -> usize {
    fig.split(marker)
        .nth(1)
        .and_then(|s| s.split("points=\"").nth(1))
        .and_then(|s| s.split('"').next())
        .map_or(0, |pts| pts.split(' ').filter(|p| p.contains(',')).count())
}

/// `data-value` of the expected-value line `id` in `fig`, if it is drawn as a line.
fn expected_value(fig: &str, id: &str) -> Option<f64> {
    fig.split(&format!(
        "<line class=\"expected\" data-expected=\"{id}\" data-value=\""
    ))
    .nth(1)?
    .split('"')
    .next()?
    .parse()
    .ok()
}

/// Every time-series chart carries the bots in game as a second series on its own axis, and
/// the expected-value lines the scenario implies are drawn: snapshots 1/60 s apart (its
/// `server.snapshot_rate: 60`, which `tickswarm serve cafe`'s 60 Hz ticks honour), inputs
/// 1/30 s apart (on the lateness chart: drawn, or named above a low axis), no loss.
fn overlays_and_expected_lines(figs: &[(String, String)], width: u32) {
    let fig = |id: &str| {
        figs.iter()
            .find(|(i, _)| i == id)
            .map(|(_, f)| f.as_str())
            .unwrap_or_else(|| panic!("no {id} chart at {width} px"))
    };
    for id in [
        "over-time-rtt_us",
        "loss",
        "bandwidth",
        "lateness",
        "over-time-snapshot_interarrival_us",
    ] {
        let f = fig(id);
        assert!(
            points_after(f, "data-overlay=\"active-bots\"") >= 2,
            "{id} has no active-bots overlay at {width} px: {f}"
        );
        assert!(f.contains("class=\"yt2\""), "{id}: the overlay's own axis");
        assert!(
            f.contains("bots in game (right axis)"),
            "{id}: the overlay's legend"
        );
    }
    let snap = expected_value(
        fig("over-time-snapshot_interarrival_us"),
        "snapshot-interval",
    );
    assert!(
        snap.is_some_and(|v| (v - 1e6 / 60.0).abs() < 0.01),
        "snapshot spacing line at {snap:?} µs"
    );
    assert_eq!(expected_value(fig("loss"), "loss"), Some(0.0));
    assert!(
        fig("lateness").contains("data-expected=\"input-interval\""),
        "input interval on the lateness chart"
    );
}

/// A chart drew something: a polyline or polygon with at least two points.
pub(crate) fn drew_something(fig: &str) -> bool {
    fig.contains("<svg")
        && fig
            .split("points=\"")
            .skip(1)
            .filter_map(|s| s.split('"').next())
            .any(|pts| pts.split(' ').filter(|p| p.contains(',')).count() >= 2)
}

/// The probe: page and viewport widths, and each chart's rendered size, written into the DOM.
const PROBE: &str = r#"<script>
window.addEventListener('load', function () {
  var de = document.documentElement;
  var lines = ['viewport ' + de.clientWidth, 'scroll ' + de.scrollWidth,
               'height ' + de.scrollHeight];
  document.querySelectorAll('figure[data-chart]').forEach(function (f) {
    var svg = f.querySelector('svg');
    var r = svg ? svg.getBoundingClientRect() : {width: 0, height: 0, right: 0};
    lines.push('chart ' + f.dataset.chart + ' ' + Math.round(r.width) + ' ' +
               Math.round(r.height) + ' ' + Math.round(r.right));
  });
  // Layout: text that overprints other text, or runs out of its chart.
  var boxes = function (root) {
    var out = [];
    if (root instanceof SVGElement) {
      root.querySelectorAll('text').forEach(function (t) {
        if (t.textContent.trim()) out.push([t.textContent.trim(), t.getBoundingClientRect(), t]);
      });
      return out;
    }
    var walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (var n = walk.nextNode(); n; n = walk.nextNode()) {
      if (!n.textContent.trim() || n.parentNode.closest('svg')) continue;
      var range = document.createRange();
      range.selectNodeContents(n);
      Array.from(range.getClientRects()).forEach(function (r) {
        if (r.width > 0 && r.height > 0) out.push([n.textContent.trim(), r, n]);
      });
    }
    return out;
  };
  var overlaps = function (where, root) {
    var b = boxes(root);
    for (var i = 0; i < b.length; i++) for (var j = i + 1; j < b.length; j++) {
      var p = b[i][1], q = b[j][1];
      var w = Math.min(p.right, q.right) - Math.max(p.left, q.left);
      var h = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
      if (w > 1 && h > 1 && b[i][2] !== b[j][2]) {
        lines.push('problem overlap in ' + where + ': "' + b[i][0] + '" and "' + b[j][0] + '"');
      }
    }
  };
  document.querySelectorAll('figure[data-chart]').forEach(function (f) {
    var svg = f.querySelector('svg');
    if (!svg) return;
    var id = 'chart ' + f.dataset.chart;
    overlaps(id, svg);
    var sr = svg.getBoundingClientRect();
    boxes(svg).forEach(function (t) {
      var r = t[1];
      if (r.right > sr.right + 0.5 || r.left < sr.left - 0.5 || r.right > de.clientWidth) {
        lines.push('problem clipped in ' + id + ': "' + t[0] + '" spans ' + Math.round(r.left) +
                   '..' + Math.round(r.right) + ', the chart ' + Math.round(sr.left) + '..' +
                   Math.round(sr.right));
      }
    });
  });
  document.querySelectorAll('header.top, .banner, .notice, .live').forEach(function (h, i) {
    overlaps(h.className + ' ' + i, h);
  });
  var g = document.querySelector('table.groups');
  if (g) {
    var tallest = 0;
    g.querySelectorAll('tr').forEach(function (tr) {
      tallest = Math.max(tallest, tr.getBoundingClientRect().height);
    });
    lines.push('groups ' + g.parentNode.scrollWidth + ' ' + g.parentNode.clientWidth + ' ' +
               Math.round(tallest));
  }
  parent.postMessage(lines.join('\n'), '*');
});
</script>"#;

/// A page holding `src` in a frame `width` × `height` CSS px; what the framed page posts
/// is written into this page's DOM (`<pre id="probe">`).
pub(crate) fn frame_page(src: &str, width: u32, height: u32) -> String {
    format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head>\
         <body style=\"margin:0;background:#fff\">\
         <iframe src=\"{src}\" style=\"display:block;border:0;width:{width}px;height:{height}px\">\
         </iframe><script>window.addEventListener('message', function (e) {{\
         var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = e.data;\
         document.body.appendChild(pre); }});</script></body></html>"
    )
}

struct Probe {
    viewport: u32,
    scroll: u32,
    height: u32,
    /// id, width, height, right edge
    charts: Vec<(String, u32, u32, u32)>,
    /// Text that overprints other text in a chart, the header or the banner, or runs out of
    /// its chart.
    problems: Vec<String>,
    /// The groups table's box: its content's width, its own width, its tallest row (px).
    groups: Option<(u32, u32, u32)>,
}

fn read_probe(dom: &str) -> Probe {
    let at = dom
        .find("<pre id=\"probe\">")
        .unwrap_or_else(|| panic!("the probe did not run; DOM tail:\n{}", tail(dom)));
    let body = &dom[at + 16..];
    let body = &body[..body.find("</pre>").expect("probe closed")];
    let mut p = Probe {
        viewport: 0,
        scroll: 0,
        height: 0,
        charts: Vec::new(),
        problems: Vec::new(),
        groups: None,
    };
    for line in body.lines() {
        if let Some(problem) = line.strip_prefix("problem ") {
            p.problems.push(
                problem
                    .replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&amp;", "&"),
            );
            continue;
        }
        let w: Vec<&str> = line.split(' ').collect();
        let n = |i: usize| -> u32 { w.get(i).and_then(|x| x.parse().ok()).unwrap_or(0) };
        match w.first() {
            Some(&"viewport") => p.viewport = n(1),
            Some(&"scroll") => p.scroll = n(1),
            Some(&"height") => p.height = n(1),
            Some(&"chart") => p.charts.push((w[1].to_string(), n(2), n(3), n(4))),
            Some(&"groups") => p.groups = Some((n(1), n(2), n(3))),
            _ => {}
        }
    }
    p
}

fn tail(s: &str) -> &str {
    let n = s.len().saturating_sub(2000);
    let mut i = n;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

#[test]
fn report_renders_at_desktop_and_phone_widths() {
    let tmp = tempfile::tempdir().unwrap();
    let html = generate_report(tmp.path());
    let page = std::fs::read_to_string(&html).unwrap();

    // What the expected-value lines are drawn from.
    let summary = summary_in(html.parent().expect("the run folder"));
    let close = |key: &str, want: f64| {
        summary["expected"][key]
            .as_f64()
            .is_some_and(|v| (v - want).abs() < 0.01)
    };
    assert!(
        close("snapshot_interval_us", 1e6 / 60.0) && close("input_interval_us", 1e6 / 30.0),
        "{}",
        summary["expected"]
    );
    let expected_charts = figures(&page).len();
    assert!(
        expected_charts >= 8,
        "{expected_charts} charts in the report"
    );
    for id in [
        "phases",
        "over-time-rtt_us",
        "dist-rtt_us",
        "dist-bot-bytes-per-s",
        "targets",
        "server-0-tick_seconds",
    ] {
        assert!(
            page.contains(&format!("data-chart=\"{id}\"")),
            "no {id} chart in the report"
        );
    }
    at_both_widths(
        tmp.path(),
        &html,
        expected_charts,
        "report",
        &overlays_and_expected_lines,
    );
}

/// A check of the charts of a page (id, DOM text) at a width.
pub(crate) type ChartCheck = dyn Fn(&[(String, String)], u32);

/// The report at `html` (in `dir/out/`) in Chromium at 1280 and 420 px: no console message,
/// `expected_charts` charts each drawing something, no horizontal overflow, every chart laid
/// out inside the viewport, and what `also` checks of the charts; a screenshot
/// `NAME-WIDTH.png` of each width for a person.
pub(crate) fn at_both_widths(
    tmp: &Path,
    html: &Path,
    expected_charts: usize,
    name: &str,
    also: &ChartCheck,
) {
    let page = std::fs::read_to_string(html).unwrap();
    // The probe copy: CSP meta out (else the probe may not run), the probe in.
    let csp_at = page
        .find("<meta http-equiv=\"Content-Security-Policy\"")
        .expect("CSP meta");
    let csp_end = csp_at + page[csp_at..].find('>').unwrap() + 1;
    let probed = format!("{}{}", &page[..csp_at], &page[csp_end..])
        .replace("</body>", &format!("{PROBE}</body>"));
    let probed_path = tmp.join("probed.html");
    std::fs::write(&probed_path, probed).unwrap();
    let url = format!("file://{}", html.display());
    let shots = shots_dir();
    for width in [1280u32, 420] {
        let profile = tmp.join(format!("profile-{width}"));
        let window = width.max(500);
        // As written: no console message, every chart drawn.
        let (dom, err) = chromium(
            &profile,
            window,
            1000,
            &["--virtual-time-budget=2000", "--dump-dom"],
            &url,
        );
        let msgs = console_messages(&err);
        assert!(
            msgs.is_empty(),
            "console at {width} px:\n{}",
            msgs.join("\n")
        );
        let figs = figures(&dom);
        assert_eq!(
            figs.len(),
            expected_charts,
            "charts in the DOM at {width} px"
        );
        for (id, fig) in &figs {
            assert!(!id.is_empty(), "a chart without an id: {fig}");
            assert!(drew_something(fig), "chart {id} drew nothing at {width} px");
        }
        also(&figs, width);
        // Laid out `width` px wide: sizes and overflow from the probe.
        let frame = tmp.join(format!("frame-{width}.html"));
        std::fs::write(&frame, frame_page("probed.html", width, 1000)).unwrap();
        let (dom, err) = chromium(
            &profile,
            window,
            1000,
            &["--virtual-time-budget=3000", "--dump-dom"],
            &format!("file://{}", frame.display()),
        );
        let msgs = console_messages(&err);
        assert!(
            msgs.is_empty(),
            "console (probe) at {width} px:\n{}",
            msgs.join("\n")
        );
        let p = read_probe(&dom);
        assert_eq!(p.viewport, width, "viewport width");
        assert!(
            p.scroll <= p.viewport,
            "horizontal overflow at {width} px: the page is {} px wide",
            p.scroll
        );
        assert_eq!(p.charts.len(), expected_charts);
        assert!(
            p.problems.is_empty(),
            "{name} at {width} px: {} layout problem(s):\n{}",
            p.problems.len(),
            p.problems.join("\n")
        );
        if let Some((content, boxw, tallest)) = p.groups {
            eprintln!("{name} at {width} px: groups table {content} px in a {boxw} px box, tallest row {tallest} px");
            if width >= 1280 {
                assert!(
                    content <= boxw,
                    "the groups table scrolls sideways at {width} px: {content} px in {boxw} px"
                );
                assert!(
                    tallest <= 120,
                    "a groups table row is {tallest} px tall at {width} px"
                );
            }
        }
        for (id, w, h, right) in &p.charts {
            assert!(
                *w > 100 && *h > 50,
                "chart {id} is {w}×{h} px at {width} px"
            );
            assert!(
                *right <= width,
                "chart {id} ends at {right} px, past {width} px"
            );
        }
        // For a person: the page as rendered.
        let shot = shots.join(format!("{name}-{width}.png"));
        let _ = std::fs::remove_file(&shot);
        let height = p.height.clamp(1000, 16_000);
        let src = html
            .strip_prefix(tmp)
            .expect("the page is inside the test's folder");
        framed_screenshot(
            &profile,
            tmp,
            &src.to_string_lossy(),
            (width, height),
            "--virtual-time-budget=2000",
            &shot,
        );
    }
}

/// A screenshot `shot` of `src` in a frame `width` × `height` CSS px (the frame page written
/// into `dir`), taken once `wait` (a Chromium flag) has passed; fails on an empty picture.
pub(crate) fn framed_screenshot(
    profile: &Path,
    dir: &Path,
    src: &str,
    size: (u32, u32),
    wait: &str,
    shot: &Path,
) {
    let bytes = try_framed_screenshot(profile, dir, src, size, wait, shot);
    assert!(
        bytes > 10_000,
        "screenshot {} is {bytes} bytes",
        shot.display()
    );
    eprintln!("screenshot: {}", shot.display());
}

/// [`framed_screenshot`] without the check: the picture's size in bytes (an empty frame
/// makes a small one).
pub(crate) fn try_framed_screenshot(
    profile: &Path,
    dir: &Path,
    src: &str,
    (width, height): (u32, u32),
    wait: &str,
    shot: &Path,
) -> u64 {
    let frame = dir.join(format!("shot-{width}.html"));
    std::fs::write(&frame, frame_page(src, width, height)).unwrap();
    let arg = format!("--screenshot={}", shot.display());
    chromium(
        profile,
        width.max(500),
        height,
        &[wait, &arg],
        &format!("file://{}", frame.display()),
    );
    match std::fs::metadata(shot) {
        Ok(m) => m.len(),
        // Chromium wrote no picture: as empty as a blank one, and the caller says so.
        Err(e) => {
            eprintln!("no screenshot at {}: {e}", shot.display());
            0
        }
    }
}

/// A capacity search's report (two steps against the embedded server, each with its window's
/// figures): the answer first, and a knee chart per objective, drawn and laid out at both
/// widths as every other chart.
#[test]
fn a_capacity_report_renders_its_knee_charts_at_desktop_and_phone_widths() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("cap.yaml");
    std::fs::write(
        &scenario,
        "name: knee\nprotocol:\n  cafe: {}\ntarget: embedded\npopulation:\n  stages:\n    \
         - ramp_to: 4\n      over: 1s\nbehaviour:\n  input_rate: 10\n  ping_interval: 200ms\n\
         thresholds:\n  - rtt p99 < 1s\n  - downstream_loss < 5%\ncapacity:\n  start: 4\n  \
         max_players: 8\n  settle: 1s\n  window: 2s\n  min_samples: 4\n  time_budget: 2m\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("capacity")
        .arg(&scenario)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run tickswarm capacity");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let html = out.join("report.html");
    let page = std::fs::read_to_string(&html).expect("report.html");
    assert!(
        page.find("capacity at least 8 players") < page.find("data-chart=\"knee-0\""),
        "the answer before the knee charts"
    );
    for id in ["knee-0", "knee-1"] {
        assert!(
            page.contains(&format!("data-chart=\"{id}\"")),
            "no {id} chart in the report"
        );
    }
    // A knee chart marks each step: one point per step tried (4 and 8 players).
    let knees = |figs: &[(String, String)], width: u32| {
        for (id, fig) in figs.iter().filter(|(id, _)| id.starts_with("knee-")) {
            let steps = fig.matches("<circle data-step=").count();
            assert_eq!(steps, 2, "{id} marks {steps} steps at {width} px, not 2");
        }
    };
    at_both_widths(tmp.path(), &html, figures(&page).len(), "capacity", &knees);
}

/// A run against a port where nothing answers (exit 3): the report opens with why it failed,
/// "The server never answered", above the thresholds, in the first screenful at both widths;
/// the failing cards are red.
#[test]
fn a_failed_run_opens_with_why() {
    let tmp = tempfile::tempdir().unwrap();
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let scenario = tmp.path().join("s.yaml");
    std::fs::write(
        &scenario,
        "name: nobody home\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 5\n      \
         over: 0s\nbehaviour:\n  handshake_timeout: 500ms\n  handshake_retry: 100ms\nduration: 1500ms\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    run_scenario(
        &scenario,
        &["--target", &format!("127.0.0.1:{port}")],
        &out,
        &[3],
    );
    let url = format!("file://{}", out.join("report.html").display());
    let shots = shots_dir();
    for width in [1280u32, 420] {
        let profile = tmp.path().join(format!("profile-{width}"));
        let (dom, _) = chromium(&profile, width.max(500), 1000, &["--dump-dom"], &url);
        let banner = dom
            .find("role=\"alert\"")
            .expect("a failure banner in the DOM");
        let thresholds = dom
            .find("<h2>Thresholds</h2>")
            .expect("the thresholds section");
        assert!(
            banner < thresholds,
            "the banner comes before the thresholds"
        );
        let first = &dom[banner..thresholds];
        assert!(
            first.contains("The server never answered: none of the 5 bots completed the handshake"),
            "{first}"
        );
        assert!(dom.contains("class=\"v bad\""), "failing cards are red");
        let shot = shots.join(format!("failed-{width}.png"));
        let _ = chromium(
            &profile,
            width.max(500),
            900,
            &[&format!("--screenshot={}", shot.display())],
            &url,
        );
        assert!(shot.exists(), "screenshot {}", shot.display());
    }
}

/// Run `tickswarm run` on `scenario` (YAML) with `args` in `dir/out`; its exit code is one
/// of `codes`. The report's path.
fn run_report(dir: &Path, scenario: &str, args: &[&str], codes: &[i32]) -> PathBuf {
    let path = dir.join("s.yaml");
    std::fs::write(&path, scenario).unwrap();
    let out = dir.join("out");
    run_scenario(&path, args, &out, codes);
    let html = out.join("report.html");
    assert!(html.exists(), "no report.html");
    html
}

/// Nothing more to check of the charts than `at_both_widths` does.
pub(crate) fn no_more(_: &[(String, String)], _: u32) {}

/// A failed run against the embedded server with its own /metrics scraped: two loss limits
/// a few pixels apart and a limit far above the data (labels that printed over each other
/// and over the legend), the server's charts, a tinted failing row and the why with code.
/// No text overprints other text in any chart, the header or the banner, and no text runs
/// out of its chart, at 1280 and 420 px.
#[test]
fn a_failed_run_s_report_lays_out_without_overprinting() {
    let tmp = tempfile::tempdir().unwrap();
    let html = run_report(
        tmp.path(),
        "name: failed layout\nprotocol:\n  cafe: {}\ntarget: embedded\npopulation:\n  stages:\n    \
         - ramp_to: 10\n      over: 1s\n    - hold: 1s\nbehaviour:\n  input_rate: 30\n  \
         ping_interval: 200ms\nduration: 2s\nthresholds:\n  - rtt p99 < 1us\n  \
         - rtt p99 < 2us\n  - downstream_loss < 0.01%\n  - downstream_loss <= 0.012%\n  - downstream_loss < 12%\n  \
         - server.tick_seconds p99 < 1s\nserver_metrics:\n  - url: embedded\n",
        &[],
        &[1],
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("<tr class=\"failed\"><td><code>rtt_us.p99</code>"),
        "tinted row"
    );
    assert!(
        page.contains("<li><code>rtt p99 &#60; 1us</code> failed: observed "),
        "code in the why"
    );
    for id in [
        "server-0-sessions",
        "server-0-bytes",
        "server-0-datagrams",
        "server-0-errors",
    ] {
        assert!(
            page.contains(&format!("data-chart=\"{id}\"")),
            "no {id} chart"
        );
    }
    at_both_widths(
        tmp.path(),
        &html,
        figures(&page).len(),
        "failed-layout",
        &no_more,
    );
}

/// A run of two groups on injected network conditions, with thresholds on the whole run
/// and on each group: the header names the conditions, each chart draws its own thresholds
/// only, and the groups table fits a desktop's width without a tall, half-empty row.
#[test]
fn a_grouped_run_s_report_shows_its_network_and_fits() {
    let tmp = tempfile::tempdir().unwrap();
    let html = run_report(
        tmp.path(),
        "name: grouped layout\nprotocol:\n  cafe: {}\ntarget: embedded\npopulation:\n  stages:\n    \
         - ramp_to: 12\n      over: 1s\n    - hold: 1s\nbehaviour:\n  input_rate: 30\n  \
         ping_interval: 200ms\nduration: 2s\nnetwork:\n  latency: 2ms\ngroups:\n  \
         - name: broadband\n    share: 50%\n  - name: mobile\n    share: 50%\n    network:\n      \
         latency: 20ms\n      jitter: { normal: 2ms }\n      down:\n        loss: { rate: 3%, mean_burst: 4 }\n    \
         lifecycle:\n      reconnect_storm: { at: 1s, share: 50%, over: 500ms }\n\
         thresholds:\n  - rtt p99 < 500ms\n  - downstream_loss < 10%\n  \
         - downstream_loss{group=mobile} < 8%\n  - downstream_loss{group=mobile} < 12%\n  \
         - downstream_loss{group=broadband} < 1%\n  - rtt{group=mobile} p99 < 450ms\n",
        &[],
        &[0, 1],
    );
    let page = std::fs::read_to_string(&html).unwrap();
    let header = &page[..page.find("</header>").expect("header")];
    assert!(
        header.contains("<strong>Simulated network:</strong>"),
        "{header}"
    );
    assert!(header.contains("group mobile: <code>"), "{header}");
    // The whole run's loss chart: the whole run's limit only, none of the groups'.
    let figs = figures(&page);
    let fig = |id: &str| {
        figs.iter()
            .find(|(i, _)| i == id)
            .map(|(_, f)| f.clone())
            .unwrap_or_else(|| panic!("no {id} chart"))
    };
    let limits = |f: &str| f.matches("<text class=\"thr\"").count();
    assert_eq!(limits(&fig("loss")), 1, "{}", fig("loss"));
    assert_eq!(limits(&fig("group-loss-mobile")), 2);
    assert_eq!(limits(&fig("group-loss-broadband")), 1);
    assert_eq!(limits(&fig("group-rtt-broadband")), 0);
    at_both_widths(tmp.path(), &html, figs.len(), "grouped", &no_more);
}

/// A run stopped by Ctrl-C: INTERRUPTED stands beside the verdict, laid out like the rest.
#[cfg(unix)]
#[test]
fn an_interrupted_run_s_report_says_so_beside_the_verdict() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("s.yaml");
    std::fs::write(
        &scenario,
        "name: cut short\nprotocol:\n  cafe: {}\ntarget: embedded\npopulation:\n  stages:\n    \
         - ramp_to: 6\n      over: 0s\nbehaviour:\n  ping_interval: 200ms\nduration: 60s\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    let mut child = run_command(&scenario, &[], &out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run tickswarm");
    std::thread::sleep(Duration::from_millis(2500));
    // SAFETY: a signal to our own child.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    assert!(status.code().is_some(), "{status}");
    let html = out.join("report.html");
    let page = std::fs::read_to_string(&html).expect("report.html");
    let header = &page[..page.find("</header>").expect("header")];
    assert!(
        header.contains("<div class=\"verdict interrupted\" role=\"status\""),
        "{header}"
    );
    at_both_widths(
        tmp.path(),
        &html,
        figures(&page).len(),
        "interrupted",
        &no_more,
    );
}

/// Against a port where nothing answers: cafe measures downstream loss, so the report does
/// not call it unmeasurable; histograms.hlog is beside the report, so no caption says it
/// was not. Laid out like the rest at both widths.
#[test]
fn an_unreachable_target_s_report_says_what_was_measurable() {
    let tmp = tempfile::tempdir().unwrap();
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let html = run_report(
        tmp.path(),
        "name: nobody home\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 5\n      \
         over: 0s\nbehaviour:\n  handshake_timeout: 500ms\n  handshake_retry: 100ms\nduration: 1500ms\n",
        &["--target", &format!("127.0.0.1:{port}")],
        &[3],
    );
    assert!(html.with_file_name("histograms.hlog").exists());
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        !page.contains("not measurable for this protocol"),
        "loss sentence"
    );
    assert!(
        page.contains("No downstream loss was measured"),
        "loss sentence"
    );
    assert!(!page.contains("was not beside the report"), "hlog sentence");
    assert!(
        !page.contains("no histograms.hlog was read"),
        "hlog sentence"
    );
    at_both_widths(
        tmp.path(),
        &html,
        figures(&page).len(),
        "unreachable",
        &no_more,
    );
}

/// compare.html on a phone: every column of the metrics table (base, new, change, limit) is
/// on screen, none scrolled out of sight; nothing overflows the page at either width.
#[test]
fn compare_html_shows_change_and_limit_on_a_phone() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario =
        "name: compared\nprotocol:\n  cafe: {}\ntarget: embedded\npopulation:\n  stages:\n    \
         - ramp_to: 4\n      over: 0s\nbehaviour:\n  ping_interval: 200ms\nduration: 1s\n";
    let mut runs = Vec::new();
    for name in ["base", "new"] {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        runs.push(
            run_report(&dir, scenario, &[], &[0, 1])
                .parent()
                .unwrap()
                .to_path_buf(),
        );
    }
    let out = tmp.path().join("cmp");
    let o = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("compare")
        .args([&runs[0], &runs[1]])
        .args(["--max-regress", "rtt.p99=1000%"])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run tickswarm compare");
    assert!(
        o.status.code().is_some_and(|c| c <= 1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let page = std::fs::read_to_string(out.join("compare.html")).expect("compare.html");
    let csp_at = page
        .find("<meta http-equiv=\"Content-Security-Policy\"")
        .expect("CSP meta");
    let csp_end = csp_at + page[csp_at..].find('>').unwrap() + 1;
    const CELLS: &str = r#"<script>
window.addEventListener('load', function () {
  var de = document.documentElement, lines = ['viewport ' + de.clientWidth, 'scroll ' + de.scrollWidth];
  document.querySelectorAll('table[data-table=metrics] td').forEach(function (td) {
    var r = td.getBoundingClientRect();
    if (td.textContent.trim() && (r.right > de.clientWidth + 0.5 || r.width === 0)) {
      lines.push('problem cell "' + td.textContent.trim() + '" (' + (td.dataset.label || 'metric') +
                 ') spans ' + Math.round(r.left) + '..' + Math.round(r.right));
    }
  });
  var limits = document.querySelectorAll('table[data-table=metrics] td[data-label=limit]');
  lines.push('limits ' + Array.from(limits).filter(function (td) { return td.textContent.trim(); }).length);
  parent.postMessage(lines.join('\n'), '*');
});
</script>"#;
    let probed = format!("{}{}", &page[..csp_at], &page[csp_end..])
        .replace("</body>", &format!("{CELLS}</body>"));
    std::fs::write(out.join("probed.html"), probed).unwrap();
    for width in [1280u32, 420] {
        let profile = tmp.path().join(format!("profile-{width}"));
        let frame = out.join(format!("frame-{width}.html"));
        std::fs::write(&frame, frame_page("probed.html", width, 1000)).unwrap();
        let (dom, _) = chromium(
            &profile,
            width.max(500),
            1000,
            &["--virtual-time-budget=2000", "--dump-dom"],
            &format!("file://{}", frame.display()),
        );
        let at = dom
            .find("<pre id=\"probe\">")
            .unwrap_or_else(|| panic!("no probe: {}", tail(&dom)));
        let body = &dom[at + 16..];
        let body = &body[..body.find("</pre>").unwrap()];
        let problems: Vec<&str> = body.lines().filter(|l| l.starts_with("problem")).collect();
        assert!(
            problems.is_empty(),
            "compare.html at {width} px:\n{}",
            problems.join("\n")
        );
        let n = |k: &str| -> u32 {
            body.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {k} in {body}"))
        };
        assert_eq!(n("viewport "), width);
        assert!(
            n("scroll ") <= width,
            "compare.html overflows at {width} px"
        );
        assert!(n("limits ") >= 1, "a limit to show: {body}");
        let shot = shots_dir().join(format!("compare-{width}.png"));
        let frame = out.join(format!("shot-{width}.html"));
        std::fs::write(&frame, frame_page("compare.html", width, 1400)).unwrap();
        chromium(
            &profile,
            width.max(500),
            1400,
            &[
                "--virtual-time-budget=2000",
                &format!("--screenshot={}", shot.display()),
            ],
            &format!("file://{}", frame.display()),
        );
        eprintln!("screenshot: {}", shot.display());
    }
}
