//! Scraping `server_metrics:` during a run: one thread per endpoint, on its own, so a slow,
//! hanging or lying endpoint costs that thread its time and nothing else (the swarm's
//! workers never wait on it, and what they send is the same with or without it).
//!
//! Each thread scrapes on the run's clock (slot `k` at `k × interval` from the run's start,
//! slot 0 the baseline); a scrape that outlasts its slot makes the next ones that are already
//! past be skipped, never queued. The series are built by
//! [`crate::metrics::server_series::Builder`], within the caps of
//! [`crate::metrics::server_budget`].
//!
//! The run's end never waits on an endpoint: a scrape's deadline is its timeout or the run's
//! end plus [`FINISH_GRACE`], whichever is first, and [`Scrapers::finish`] (the run's end, or
//! Ctrl-C) waits at most [`FINISH_GRACE`] before it leaves a scrape under way behind.
//!
//! The HTTP client is the minimum a `/metrics` scrape needs, on `std::net` with `httparse`
//! (already here for `--metrics-listen`): one `GET` as HTTP/1.0 (so no chunked encoding comes
//! back), no compression asked, a whole-scrape deadline checked between reads, and a body
//! limit. A general HTTP client (`ureq`, `reqwest`) would add a dependency tree for this.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::metrics::server_budget::{RunBudget, MAX_NAMED_SERIES_PER_ENDPOINT};
use crate::metrics::server_series::{Builder, Endpoint, Failure, ServerMetrics};
use crate::scenario::server_metrics::{ServerMetricsEndpoint, MAX_SERIES_PER_ENDPOINT};

/// The largest response read. A node exporter's page is ~100 KB and a game server's own a
/// few KB; 4 MiB is room for forty times that, and bounds what one endpoint holds in memory
/// at once (the parsed samples of a body are a few times its size).
pub const MAX_BODY: usize = 4 * 1024 * 1024;

/// How long the run's end (or Ctrl-C) waits for scrapes under way: past it they are left
/// behind, counted as `failed.abandoned`, and the report is written without them. A scrape's
/// own deadline never reaches past the run's end by more than this either, so even a thread
/// left behind is gone this long after the run ends (or, after a Ctrl-C, within its
/// timeout, at most 10 s).
pub const FINISH_GRACE: Duration = Duration::from_secs(1);

/// One endpoint's builder, shared between its thread and [`Scrapers::finish`], which takes
/// it (so a scrape that comes back after that is dropped).
#[derive(Default)]
struct Slot {
    builder: Option<Builder>,
    /// A scrape is under way (between its request and its result added).
    scraping: bool,
}

type Shared = Arc<Mutex<Slot>>;

/// The scrapers of one run.
pub struct Scrapers {
    stop: Vec<mpsc::Sender<()>>,
    threads: Vec<(Shared, JoinHandle<()>)>,
}

impl Scrapers {
    /// Start a thread per endpoint, scraping from `start` until `duration` has passed on the
    /// run's clock (or [`Scrapers::finish`]). `embedded` is the URL of the embedded server's
    /// endpoint, for `url: embedded`.
    pub fn start(
        endpoints: &[ServerMetricsEndpoint],
        embedded: Option<&str>,
        start: Instant,
        duration: Duration,
    ) -> Self {
        let budget = Arc::new(RunBudget::default());
        // No scrape's deadline passes the run's end by more than the grace.
        let hard_end = start + duration + FINISH_GRACE;
        let mut stop = Vec::new();
        let mut threads = Vec::new();
        for e in endpoints {
            let url = match (e.is_embedded(), embedded) {
                (true, Some(u)) => u.to_string(),
                (true, None) => continue,
                (false, _) => e.url.clone(),
            };
            let shown = if e.is_embedded() {
                format!("embedded ({url})")
            } else {
                url.clone()
            };
            // Read once, never stored: a missing variable sends no header.
            let auth = e
                .auth_header_env
                .as_ref()
                .and_then(|v| std::env::var(v).ok());
            let max_series = if e.series.is_empty() {
                MAX_SERIES_PER_ENDPOINT
            } else {
                MAX_NAMED_SERIES_PER_ENDPOINT
            };
            let shared: Shared = Arc::new(Mutex::new(Slot {
                builder: Some(Builder::sharing(
                    &shown,
                    e.interval.0.as_secs_f64(),
                    max_series,
                    budget.clone(),
                )),
                scraping: false,
            }));
            let (tx, rx) = mpsc::channel();
            let e = e.clone();
            let mine = shared.clone();
            let spawned = std::thread::Builder::new()
                .name("server-metrics".into())
                .spawn(move || {
                    let clock = Clock {
                        start,
                        duration,
                        hard_end,
                    };
                    scrape_loop(&e, &url, auth.as_deref(), clock, &mine, rx)
                });
            if let Ok(t) = spawned {
                stop.push(tx);
                threads.push((shared, t));
            }
        }
        Self { stop, threads }
    }

    /// Stop scraping and collect the series, waiting at most [`FINISH_GRACE`] for scrapes
    /// under way: one still running then is counted as abandoned and its thread left to end
    /// at its own deadline.
    pub fn finish(self) -> Option<ServerMetrics> {
        for s in &self.stop {
            let _ = s.send(());
        }
        let deadline = Instant::now() + FINISH_GRACE;
        while Instant::now() < deadline && self.threads.iter().any(|(_, t)| !t.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut endpoints: Vec<Endpoint> = Vec::new();
        for (shared, t) in self.threads {
            let taken = shared.lock().ok().and_then(|mut slot| {
                let scraping = slot.scraping;
                slot.builder.take().map(|mut b| {
                    if scraping {
                        b.abandoned();
                    }
                    b
                })
            });
            if t.is_finished() {
                let _ = t.join();
            }
            endpoints.extend(taken.map(Builder::finish));
        }
        (!endpoints.is_empty()).then_some(ServerMetrics {
            endpoints,
            ..ServerMetrics::default()
        })
    }
}

/// Where a scraper is on the run's clock.
#[derive(Clone, Copy)]
struct Clock {
    start: Instant,
    duration: Duration,
    /// No scrape's deadline is later than this.
    hard_end: Instant,
}

fn scrape_loop(
    e: &ServerMetricsEndpoint,
    url: &str,
    auth: Option<&str>,
    clock: Clock,
    shared: &Shared,
    stop: mpsc::Receiver<()>,
) {
    let interval = e.interval.0;
    let start = clock.start;
    let last_slot = (clock.duration.as_nanos() / interval.as_nanos().max(1)) as u64;
    let mut slot = 0u64;
    while slot <= last_slot {
        let due = start + interval.saturating_mul(u32::try_from(slot).unwrap_or(u32::MAX));
        let wait = due.saturating_duration_since(Instant::now());
        match stop.recv_timeout(wait) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // Stopped, or the run is gone.
            _ => break,
        }
        match shared.lock() {
            Ok(mut s) if s.builder.is_some() => s.scraping = true,
            _ => return,
        }
        let deadline = (Instant::now() + e.timeout()).min(clock.hard_end);
        let got = get_until(url, auth, deadline).and_then(|body| {
            crate::metrics::server_series::parse(&body, &e.series).ok_or(Failure::Garbage)
        });
        match shared.lock() {
            Ok(mut s) => {
                s.scraping = false;
                match s.builder.as_mut() {
                    Some(b) => b.add(slot, got),
                    // Finished without us: this scrape was counted as abandoned.
                    None => return,
                }
            }
            Err(_) => return,
        }
        // The next slot not yet past: a slow scrape skips slots, never queues them.
        let since = Instant::now().saturating_duration_since(start);
        let next = (since.as_nanos() / interval.as_nanos().max(1)) as u64 + 1;
        slot = next.max(slot + 1);
    }
}

/// `GET url` within `timeout`: the body of a 200 response (the tests' shorthand for
/// [`get_until`]).
#[cfg(test)]
pub fn get(url: &str, auth: Option<&str>, timeout: Duration) -> Result<String, Failure> {
    get_until(url, auth, Instant::now() + timeout)
}

/// `GET url` by `deadline`: the body of a 200 response, whole (a body shorter than its
/// `Content-Length` is [`Failure::Truncated`], never a page that happens to parse).
pub fn get_until(url: &str, auth: Option<&str>, deadline: Instant) -> Result<String, Failure> {
    let rest = url.strip_prefix("http://").ok_or(Failure::Connect)?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/metrics"),
    };
    let with_port = if hostport
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        hostport.to_string()
    } else {
        format!("{hostport}:80")
    };
    let addr = with_port
        .to_socket_addrs()
        .map_err(|_| Failure::Connect)?
        .next()
        .ok_or(Failure::Connect)?;
    let left = |deadline: Instant| {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or(Failure::Timeout)
    };
    let mut s = TcpStream::connect_timeout(&addr, left(deadline)?).map_err(|e| {
        if e.kind() == std::io::ErrorKind::TimedOut {
            Failure::Timeout
        } else {
            Failure::Connect
        }
    })?;
    let mut req = format!(
        "GET {path} HTTP/1.0\r\nHost: {hostport}\r\nAccept: text/plain;version=0.0.4\r\nUser-Agent: tickswarm\r\n"
    );
    if let Some(a) = auth {
        req.push_str(&format!("Authorization: {a}\r\n"));
    }
    req.push_str("\r\n");
    let io_err = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => Failure::Timeout,
        _ => Failure::Connect,
    };
    s.set_write_timeout(Some(left(deadline)?)).map_err(io_err)?;
    s.write_all(req.as_bytes()).map_err(io_err)?;
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut chunk = [0u8; 16 * 1024];
    loop {
        s.set_read_timeout(Some(left(deadline)?)).map_err(io_err)?;
        let n = s.read(&mut chunk).map_err(io_err)?;
        if n == 0 {
            break;
        }
        if buf.len() + n > MAX_BODY {
            return Err(Failure::Garbage);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let head = match resp.parse(&buf) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return Err(Failure::Garbage),
    };
    if resp.code != Some(200) {
        return Err(Failure::Status);
    }
    let body = &buf[head..];
    // HTTP/1.0 without a length: the body is what came before the close.
    let body = match resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
    {
        None => body,
        Some(h) => {
            let declared = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or(Failure::Garbage)?;
            body.get(..declared).ok_or(Failure::Truncated)?
        }
    };
    String::from_utf8(body.to_vec()).map_err(|_| Failure::Garbage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A one-shot server: answers the first request with `reply` (or nothing, when `None`,
    /// holding the connection), and hands back the request it read.
    fn once(reply: Option<&'static str>) -> (String, std::thread::JoinHandle<String>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", l.local_addr().unwrap());
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 2048];
            let n = s.read(&mut buf).unwrap();
            let req = String::from_utf8_lossy(&buf[..n]).into_owned();
            match reply {
                Some(r) => s.write_all(r.as_bytes()).unwrap(),
                None => std::thread::sleep(Duration::from_millis(600)),
            }
            req
        });
        (url, t)
    }

    #[test]
    fn a_scrape_sends_the_auth_header_and_reads_the_body() {
        let (url, t) = once(Some("HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\ng 1\nXX"));
        assert_eq!(
            get(&url, Some("Bearer s3cret"), Duration::from_secs(2)),
            Ok("g 1\nXX".into())
        );
        let req = t.join().unwrap();
        assert!(req.starts_with("GET /metrics HTTP/1.0\r\n"), "{req}");
        assert!(
            req.contains("\r\nAuthorization: Bearer s3cret\r\n"),
            "{req}"
        );
    }

    #[test]
    fn a_body_short_of_its_content_length_is_truncated_not_a_page() {
        let (url, t) = once(Some("HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\ng 1\n"));
        assert_eq!(
            get(&url, None, Duration::from_secs(2)),
            Err(Failure::Truncated)
        );
        t.join().unwrap();
        let (url, t) = once(Some("HTTP/1.0 200 OK\r\nContent-Length: x\r\n\r\ng 1\n"));
        assert_eq!(
            get(&url, None, Duration::from_secs(2)),
            Err(Failure::Garbage)
        );
        t.join().unwrap();
        let (url, t) = once(Some("HTTP/1.0 200 OK\r\n\r\ng 1\n"));
        assert_eq!(get(&url, None, Duration::from_secs(2)), Ok("g 1\n".into()));
        t.join().unwrap();
    }

    #[test]
    fn a_bad_status_a_silent_server_and_no_server_are_told_apart() {
        let (url, t) = once(Some("HTTP/1.0 401 Unauthorized\r\n\r\nno"));
        assert_eq!(
            get(&url, None, Duration::from_secs(2)),
            Err(Failure::Status)
        );
        t.join().unwrap();
        let (url, t) = once(None);
        assert_eq!(
            get(&url, None, Duration::from_millis(200)),
            Err(Failure::Timeout)
        );
        t.join().unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        assert_eq!(
            get(
                &format!("http://127.0.0.1:{port}/metrics"),
                None,
                Duration::from_secs(1)
            ),
            Err(Failure::Connect)
        );
    }
}
