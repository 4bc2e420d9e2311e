//! `run --dashboard [ADDR]`: the run's report, live in a browser while the run goes.
//!
//! Each second the run's figures so far become a [`Summary`] and the same HTML report the run
//! writes at its end ([`report::html`]), so the live view and the final report can never
//! disagree on how a figure is drawn: its charts hold the seconds already run, its verdict is
//! the thresholds judged on the figures so far, and its threshold table says which pass now.
//! `GET /` is that page with a small script (`/live.js`) that opens `GET /events`, a stream of
//! server-sent events, and swaps in each new page body as it comes; when the run ends the
//! last event carries the final report as written, and the stream closes.
//!
//! What the live page cannot say yet, it says it does not: a threshold on a group is judged
//! at the end (the groups' figures are gathered then), and so are those on figures only the
//! end can count ([`judged_at_end`]: bots lost or silent at the end, and connecting, where a
//! bot still on its way in is not yet a failure); the bar at the top names them. Bots are
//! counted as planned once started, so a ramp's later bots do not read as missing.
//!
//! The cost stays off the bots' threads: the run's observer only hands each second (a copy
//! of its histograms, ~100 kB) to this module's renderer thread, which adds it up and renders
//! once a second however many watch (skipping to the newest when behind); the HTTP side is
//! [`super::http`], bounded as it says (but with no share per address: on loopback, where it
//! listens unless told otherwise, every tab comes from one), with at most [`MAX_VIEWERS`]
//! event streams at once (the next one gets a 503 saying so). Read-only: GET and HEAD of
//! three paths, nothing else.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use super::http::{self, Event, Reply, Routes};
use crate::metrics::threshold::{Metric, Threshold};
use crate::metrics::{IntervalPoint, Recorder, RunOutcome};
use crate::report::{self, RunInfo, Summary};

/// Where `--dashboard` listens when it names no address: loopback only, so nothing beyond
/// this machine sees the run unless asked to.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7465";
/// Event streams (browser tabs) served at once.
pub const MAX_VIEWERS: usize = 8;
/// How long the end waits for the open streams to take the final report.
const FINAL_FLUSH: Duration = Duration::from_secs(2);
/// The browser side: opens the event stream and swaps in each page body.
const LIVE_JS: &str = include_str!("../../templates/dashboard/live.js");
/// The live bar's style, added to the report's own.
const LIVE_CSS: &str = include_str!("../../templates/dashboard/live.css");
/// The live page's policy: the report's (no fetching, inline styles) plus this origin's
/// script and its event stream.
const LIVE_CSP: &str =
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'self'; connect-src 'self'";

/// The run's figures so far, and the report they make.
pub struct LiveReport {
    /// The run, with the thresholds the figures so far can judge.
    info: RunInfo,
    /// The thresholds judged at the end only, as written.
    at_end: Vec<String>,
    planned: u64,
    workers: usize,
    target: String,
    started_at: SystemTime,
    duration: Duration,
    total: Recorder,
    intervals: Vec<IntervalPoint>,
    connected: u64,
}

impl LiveReport {
    pub fn new(
        info: &RunInfo,
        planned: u64,
        workers: usize,
        target: String,
        duration: Duration,
    ) -> Self {
        let (at_end, now): (Vec<_>, Vec<_>) =
            info.thresholds.iter().cloned().partition(judged_at_end);
        Self {
            at_end: at_end.into_iter().map(|t| t.text).collect(),
            info: RunInfo {
                thresholds: now,
                ..info.clone()
            },
            planned,
            workers,
            target,
            started_at: SystemTime::now(),
            duration,
            total: Recorder::new(),
            intervals: Vec::new(),
            connected: 0,
        }
    }

    /// One more second of the run: its point, the bots ever connected, its histograms.
    pub fn add(&mut self, p: IntervalPoint, connected: u64, rec: &Recorder) {
        self.total.merge(rec);
        self.connected = connected;
        self.intervals.push(p);
    }

    /// Seconds run so far.
    pub fn seconds(&self) -> f64 {
        self.intervals.last().map_or(0.0, |p| p.t)
    }

    /// The summary of the run so far, as the end would write it had the run stopped now.
    /// (`&mut`: the histograms and points are lent to the summary, not copied, and put back.)
    pub fn summary(&mut self) -> Summary {
        let last = self.intervals.last();
        // Started so far (every phase, finished ones too), never more than the plan.
        let started = last.map_or(0, |p| p.phases.total().max(self.connected));
        let failed = last.map_or(0, |p| p.phases.failed);
        let elapsed = Duration::from_secs_f64(self.seconds());
        // The whole seconds so far (the end adds the workers' last, partial readings).
        let cpu: Option<u64> = (self.intervals.iter())
            .map(|p| p.generator.as_ref().and_then(|g| g.cpu_ns))
            .sum();
        let run = RunOutcome {
            total: std::mem::take(&mut self.total),
            intervals: std::mem::take(&mut self.intervals),
            planned: started.min(self.planned),
            ever_connected: self.connected,
            failed,
            // Counted at the end (the bar says so).
            bots_lost: 0,
            bots_silent_at_end: 0,
            started_at: self.started_at,
            elapsed,
            interrupted: false,
            workers: self.workers,
            unfinished_workers: Vec::new(),
            worker_cpu_ns: cpu,
            timer_step: Duration::ZERO,
            tail: Recorder::new(),
            server: None,
            target: self.target.clone(),
            sources: None,
            server_metrics: None,
            groups: Vec::new(),
        };
        let summary = report::summarize(&self.info, &run);
        self.total = run.total;
        self.intervals = run.intervals;
        summary
    }

    /// The live page and its body (what an update event carries).
    pub fn page(&mut self) -> Page {
        let mut s = self.summary();
        let later = if self.at_end.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = self
                .at_end
                .iter()
                .map(|t| format!("<code>{}</code>", escape(t)))
                .collect();
            format!(" · judged at the end: {}", names.join(", "))
        };
        let bar = if self.intervals.is_empty() {
            // Nothing measured yet: no verdict (every threshold would read "no data").
            s.verdict = "starting".into();
            Bar {
                state: "live",
                title: format!("{} · starting · tickswarm", s.scenario),
                text: format!(
                    "<strong>LIVE</strong> <span class=\"state\">starting</span> · the first \
                     figures come after the run's first second · {:.0} s planned",
                    self.duration.as_secs_f64()
                ),
            }
        } else {
            let verdict = if s.verdict == "pass" { "PASS" } else { "FAIL" };
            Bar {
                state: "live",
                title: format!(
                    "{} · live {}s · {verdict} so far · tickswarm",
                    s.scenario,
                    self.seconds().round()
                ),
                text: format!(
                    "<strong>LIVE</strong> <span class=\"state\">{:.0} s of {:.0} s</span> · \
                     verdict so far <strong class=\"{}\">{verdict}</strong> on {} \
                     threshold{}{later} · {} of {} bots started · updated each second",
                    self.seconds(),
                    self.duration.as_secs_f64(),
                    s.verdict,
                    self.info.thresholds.len(),
                    plural(self.info.thresholds.len()),
                    s.bots.planned,
                    self.planned
                ),
            }
        };
        Page::of(&report::html::render(&s), &bar)
    }
}

/// A threshold the figures so far cannot judge: one on a group (the groups' figures are
/// gathered at the end), or on a figure only the end counts (a bot lost, silent at the end,
/// or never connected; connect success, where a bot still on its way in is not a failure).
pub fn judged_at_end(t: &Threshold) -> bool {
    t.group.is_some()
        || matches!(
            t.metric,
            Metric::ConnectSuccess
                | Metric::BotsNeverConnected
                | Metric::BotsLost
                | Metric::BotsSilentAtEnd
        )
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The line above the report: live, or finished.
struct Bar {
    /// `live` or `done` (its class).
    state: &'static str,
    /// The tab's title.
    title: String,
    /// Its HTML (made here from escaped or fixed text only).
    text: String,
}

/// A report made live: the whole page for `GET /`, its body for an event.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub html: Arc<String>,
    pub body: String,
}

impl Page {
    /// `report` (a whole report.html) with the live bar above it, the live script, and the
    /// policy that lets the script run and read the stream.
    fn of(report: &str, bar: &Bar) -> Self {
        let bar_html = format!(
            "<div id=\"live\" class=\"live {}\" role=\"status\" data-title=\"{}\">{}</div>\n",
            bar.state,
            escape(&bar.title),
            bar.text
        );
        let (open, close) = match (report.find("<body>"), report.rfind("</body>")) {
            (Some(o), Some(c)) if o < c => (o + "<body>".len(), c),
            // Not a report as the template writes it: shown as text, not lost.
            _ => {
                let body = format!("{bar_html}<pre>{}</pre>", escape(report));
                return Self {
                    html: Arc::new(format!(
                        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head><body>{body}</body></html>"
                    )),
                    body,
                };
            }
        };
        let body = format!("{bar_html}{}", &report[open..close]);
        let head = with_live_head(&report[..open]);
        let html = format!("{head}{body}{}", &report[close..]);
        Self {
            html: Arc::new(html),
            body,
        }
    }
}

/// The report's head with the live policy, style and script.
fn with_live_head(head: &str) -> String {
    const CSP: &str = "<meta http-equiv=\"Content-Security-Policy\" content=\"";
    let mut out = match head.find(CSP) {
        Some(at) => {
            let from = at + CSP.len();
            let to = head[from..].find('"').map_or(head.len(), |n| from + n);
            format!("{}{LIVE_CSP}{}", &head[..from], &head[to..])
        }
        None => head.to_string(),
    };
    let extra = format!("<style>\n{LIVE_CSS}</style>\n<script src=\"/live.js\" defer></script>\n");
    match out.find("</head>") {
        Some(at) => out.insert_str(at, &extra),
        None => out.push_str(&extra),
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// What the page and the streams read: the newest page and event.
struct Shown {
    page: Mutex<Arc<String>>,
    events: watch::Sender<Event>,
    viewers: AtomicUsize,
    most_viewers: AtomicUsize,
}

/// Held by an event stream while it is open.
struct Seat(Arc<Shown>);

impl Drop for Seat {
    fn drop(&mut self) {
        self.0.viewers.fetch_sub(1, Ordering::AcqRel);
    }
}

struct DashboardRoutes(Arc<Shown>);

impl Routes for DashboardRoutes {
    fn reply(&self, path: &str) -> Reply {
        let shown = &self.0;
        match path {
            "/" | "/index.html" => Reply::ok(
                "text/html; charset=utf-8",
                shown.page.lock().map(|p| p.clone()).unwrap_or_default(),
            ),
            "/live.js" => Reply::ok(
                "text/javascript; charset=utf-8",
                Arc::new(LIVE_JS.to_string()),
            ),
            "/events" => {
                let taken = shown
                    .viewers
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                        (n < MAX_VIEWERS).then_some(n + 1)
                    });
                match taken {
                    Ok(before) => {
                        shown.most_viewers.fetch_max(before + 1, Ordering::Relaxed);
                        Reply::Events {
                            events: shown.events.subscribe(),
                            seat: Box::new(Seat(shown.clone())),
                        }
                    }
                    Err(_) => Reply::text(
                        "503 Service Unavailable",
                        &format!(
                            "tickswarm: the dashboard has {MAX_VIEWERS} viewers, its most; \
                             try again when one closes\n"
                        ),
                    ),
                }
            }
            _ => Reply::text(
                "404 Not Found",
                "tickswarm: the dashboard is at /, its updates at /events\n",
            ),
        }
    }
}

/// What the renderer is handed.
enum Feed {
    Second {
        point: Box<IntervalPoint>,
        connected: u64,
        rec: Box<Recorder>,
    },
    /// The report as written, and where.
    Final { report: String, path: String },
}

/// What the renderer did, said at the end.
#[derive(Debug, Default, Clone, Copy)]
pub struct RenderStats {
    pub frames: u64,
    pub slowest: Duration,
    pub total: Duration,
}

/// The dashboard of one run: its server and its renderer thread.
pub struct Dashboard {
    server: http::Server,
    shown: Arc<Shown>,
    feed: mpsc::Sender<Feed>,
    renderer: Option<JoinHandle<RenderStats>>,
}

impl Dashboard {
    /// Listen on `addr` and start rendering from `live` (its first page: no second yet).
    pub fn start(addr: std::net::SocketAddr, live: LiveReport) -> anyhow::Result<Self> {
        let mut live = live;
        let first = live.page();
        let (events, _) = watch::channel(Event::new("update", &first.body, false));
        let shown = Arc::new(Shown {
            page: Mutex::new(first.html),
            events,
            viewers: AtomicUsize::new(0),
            most_viewers: AtomicUsize::new(0),
        });
        // No share per address: the dashboard listens on loopback unless told otherwise, where
        // every tab and page load comes from one address; its streams have seats of their own.
        let server = http::Server::start(
            addr,
            "--dashboard",
            http::MAX_CONNECTIONS,
            Arc::new(DashboardRoutes(shown.clone())),
        )?;
        let (feed, seconds) = mpsc::channel();
        let renderer = {
            let shown = shown.clone();
            std::thread::Builder::new()
                .name("dashboard".into())
                .spawn(move || render_loop(live, seconds, &shown))?
        };
        Ok(Self {
            server,
            shown,
            feed,
            renderer: Some(renderer),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.server.addr()
    }

    /// One more second of the run (cheap: a copy handed to the renderer).
    pub fn second(&self, p: &IntervalPoint, connected: u64, rec: &Recorder) {
        let _ = self.feed.send(Feed::Second {
            point: Box::new(p.clone()),
            connected,
            rec: Box::new(rec.clone()),
        });
    }

    /// Show the final report (`report`, read from `path`), give the open streams up to
    /// [`FINAL_FLUSH`] to take it, and stop. Returns what the renderer did and the most
    /// viewers at once.
    pub fn finish(mut self, report: String, path: String) -> (RenderStats, usize) {
        let _ = self.feed.send(Feed::Final { report, path });
        let stats = self
            .renderer
            .take()
            .and_then(|r| r.join().ok())
            .unwrap_or_default();
        let until = Instant::now() + FINAL_FLUSH;
        while self.shown.viewers.load(Ordering::Acquire) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        (stats, self.shown.most_viewers.load(Ordering::Relaxed))
    }
}

/// The renderer: adds up each second and renders the newest state once, until the final
/// report (or the run's end without one, when the feed closes).
fn render_loop(mut live: LiveReport, seconds: mpsc::Receiver<Feed>, shown: &Shown) -> RenderStats {
    let mut stats = RenderStats::default();
    let publish = |page: Page, name: &str, last: bool| {
        if let Ok(mut p) = shown.page.lock() {
            *p = page.html;
        }
        shown
            .events
            .send_replace(Event::new(name, &page.body, last));
    };
    while let Ok(first) = seconds.recv() {
        // Behind (a slow render): everything queued is added, and rendered once.
        let mut next = Some(first);
        while let Some(feed) = next {
            match feed {
                Feed::Second {
                    point,
                    connected,
                    rec,
                } => live.add(*point, connected, &rec),
                Feed::Final { report, path } => {
                    let bar = Bar {
                        state: "done",
                        title: format!("{} · finished · tickswarm", live.info.scenario),
                        text: format!(
                            "<strong>FINISHED</strong> <span class=\"state\">after {:.0} s</span> \
                             · the final report, as written to <code>{}</code>",
                            live.seconds(),
                            escape(&path)
                        ),
                    };
                    publish(Page::of(&report, &bar), "final", true);
                    return stats;
                }
            }
            next = seconds.try_recv().ok();
        }
        let t0 = Instant::now();
        let page = live.page();
        let took = t0.elapsed();
        stats.frames += 1;
        stats.total += took;
        stats.slowest = stats.slowest.max(took);
        publish(page, "update", false);
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
        <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
        <title>t</title>\n</head>\n<body>\n<main>report</main>\n</body>\n</html>\n";

    fn bar() -> Bar {
        Bar {
            state: "live",
            title: "a \"run\" <x>".into(),
            text: "<strong>LIVE</strong>".into(),
        }
    }

    #[test]
    fn the_live_page_is_the_report_with_a_bar_a_script_and_a_policy_that_lets_them_run() {
        let p = Page::of(REPORT, &bar());
        assert_eq!(
            p.body,
            "<div id=\"live\" class=\"live live\" role=\"status\" data-title=\"a &quot;run&quot; \
             &lt;x&gt;\"><strong>LIVE</strong></div>\n\n<main>report</main>\n"
        );
        assert!(
            p.html.contains(&format!("content=\"{LIVE_CSP}\"")),
            "{}",
            p.html
        );
        assert!(!p
            .html
            .contains("content=\"default-src 'none'; style-src 'unsafe-inline'\""));
        let script = p
            .html
            .find("<script src=\"/live.js\" defer></script>")
            .expect("script");
        assert!(script < p.html.find("</head>").expect("head"));
        assert!(p
            .html
            .ends_with(&format!("<body>{}</body>\n</html>\n", p.body)));
    }

    fn info(thresholds: &[&str]) -> RunInfo {
        RunInfo {
            scenario: "live".into(),
            scenario_file: "live.yaml".into(),
            protocol: "cafe".into(),
            transport: "raw UDP".into(),
            dialect: "spec".into(),
            rtt_source: Some("protocol_ping".into()),
            seed: 1,
            shard: None,
            scenario_hash: None,
            label: None,
            loss_method: report::summary::LossMethod {
                downstream: "sequence".into(),
                upstream: "not measurable: no acks".into(),
            },
            metrics: Vec::new(),
            thresholds: thresholds
                .iter()
                .map(|t| Threshold::parse(t).expect("a threshold"))
                .collect(),
            input_rate_hz: 60.0,
            snapshot_rate_hz: None,
            cannot_measure: Vec::new(),
            unmeasurable: crate::metrics::threshold::Unmeasurable::Fail,
            network: None,
        }
    }

    /// Second `t`: `in_game` bots playing and `connecting` on their way, RTT samples of `us`.
    fn second(live: &mut LiveReport, t: f64, in_game: u64, connecting: u64, rtt: &[u64]) {
        let mut p = IntervalPoint {
            t,
            bots_connected: in_game,
            ..IntervalPoint::default()
        };
        p.phases.in_game = in_game;
        p.phases.connecting = connecting;
        let mut rec = Recorder::new();
        for &us in rtt {
            rec.record_rtt(us);
        }
        live.add(p, in_game, &rec);
    }

    #[test]
    fn the_run_so_far_is_judged_on_what_it_can_judge_and_names_the_rest() {
        let mut live = LiveReport::new(
            &info(&[
                "rtt p99 < 50ms",
                "connect_success > 99.9%",
                "bots_lost <= 0",
            ]),
            100,
            1,
            "127.0.0.1:1".into(),
            Duration::from_secs(30),
        );
        // Before the first second: no verdict at all.
        let page = live.page();
        assert!(
            page.body.contains("class=\"state\">starting<"),
            "{}",
            page.body
        );
        assert!(page.html.contains("STARTING"));
        assert!(!page.body.contains(">FAIL<"));

        // Second 1: 10 of 100 bots started, 4 of them still connecting; RTT 10 ms.
        second(&mut live, 1.0, 6, 4, &[10_000; 100]);
        let s = live.summary();
        assert_eq!(s.bots.planned, 10, "started so far, not the plan's 100");
        assert_eq!(s.bots.connected, 6);
        let judged: Vec<&str> = s.thresholds.iter().map(|t| t.condition.as_str()).collect();
        assert_eq!(judged, ["rtt p99 < 50ms"]);
        assert_eq!(s.verdict, "pass");
        let page = live.page();
        assert!(page.body.contains("1 s of 30 s"), "{}", page.body);
        assert!(
            page.body.contains(
                "judged at the end: <code>connect_success &gt; 99.9%</code>, \
                 <code>bots_lost &lt;= 0</code>"
            ),
            "{}",
            page.body
        );
        assert!(
            page.body.contains("10 of 100 bots started"),
            "{}",
            page.body
        );

        // Second 2: every bot in, RTT 80 ms on most samples: the p99 so far breaks.
        second(&mut live, 2.0, 100, 0, &[80_000; 1000]);
        let s = live.summary();
        assert_eq!(s.rtt_us.count, 1100, "both seconds' samples");
        assert_eq!(s.verdict, "fail");
        let page = live.page();
        assert!(
            page.body.contains("<strong class=\"fail\">FAIL</strong>"),
            "{}",
            page.body
        );
        assert!(page.body.contains("100 of 100 bots started"));
    }

    #[test]
    fn a_page_that_is_not_a_report_is_shown_as_text() {
        let p = Page::of("<b>oops", &bar());
        assert!(p.body.ends_with("<pre>&lt;b&gt;oops</pre>"), "{}", p.body);
    }
}
