//! A small, bounded, read-only HTTP/1.1 server for what a run shows while it goes: the
//! Prometheus endpoint (`--metrics-listen`, [`super::metrics_listen`]) and the live dashboard
//! (`--dashboard`, [`super::dashboard`]).
//!
//! Each request gets what [`Routes::reply`] gives for its path: a whole response, or a stream
//! of server-sent events (the dashboard's updates). Reachable by whoever can reach the port,
//! it must never take what the bots need, so everything it holds is bounded:
//! - **One thread**, whatever the number of clients: connections are tasks on a
//!   current-thread tokio runtime of its own (a thread per connection let 3,000 idle
//!   connections start 2,351 threads);
//! - **At most [`MAX_CONNECTIONS`] held at once, at most [`MAX_PER_SOURCE`] from one
//!   address, and a newcomer always gets a place** ([`Held::victim`] picks whose): the cap
//!   keeps the endpoint within the descriptors the run's budget keeps for it, and the order
//!   decides who is served. Refusing newcomers at the cap (as before) let 32 idle or slow
//!   connections, renewed as they were closed, refuse a real scraper: a review's 1,000 slow or
//!   3,000 idle connections failed 40 of 80 scrapes. Now one address holds at most a quarter
//!   of the places, so a client on another machine always finds one; a newcomer from an
//!   address at its share takes the place of that address's oldest idle connection (its
//!   request head not read yet), and one from a new address takes a place from the address
//!   holding most. A scraper sends its request at once, so it is idle for moments only; a
//!   connection that sends nothing, or a byte a second, stays idle and goes first. What this
//!   cannot protect: a client on the *same* address as a flood of new connections, which
//!   may be pushed out before its request arrives;
//! - **A request head of at most [`MAX_HEAD`] bytes, within [`HEAD_TIMEOUT`]**: a huge request
//!   line or endless headers get 431 and the connection is closed; a client that sends
//!   nothing is closed when the timeout runs out (each held 1 GB or a thread before);
//! - **One request per connection** (`Connection: close`), each write done within
//!   [`WRITE_TIMEOUT`] (an event stream whose reader stalls that long is closed). Prometheus
//!   opens a connection per scrape happily; a browser's `EventSource` holds one of its own.
//! - **GET and HEAD only**: nothing a request says changes anything (400 otherwise).
//!
//! The request head is parsed with `httparse` (hyper's parser).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch, Notify};

/// Connections held at once; a newcomer beyond it takes another's place.
pub const MAX_CONNECTIONS: usize = 32;
/// Connections held at once from one address (IP) by default: a quarter of the places, so a
/// flood from one machine leaves the rest to the others.
pub const MAX_PER_SOURCE: usize = MAX_CONNECTIONS / 4;
/// The longest request head (request line and headers) read.
pub const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long writing a response (or one event of a stream) may take.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Headers parsed at most (more is a 431, as an over-long head is).
const MAX_HEADERS: usize = 32;

/// A plain-text content type.
pub const TEXT: &str = "text/plain; charset=utf-8";

/// One server-sent event, formatted once (`event:` and `data:` lines) and written as it is
/// to every reader.
#[derive(Debug, Clone, Default)]
pub struct Event {
    /// The whole event as it goes on the wire; empty for "nothing yet".
    pub wire: Arc<String>,
    /// The stream's last event: written, then the stream ends.
    pub last: bool,
}

impl Event {
    /// An event named `name` carrying `data` (each line of it a `data:` line, as the format
    /// asks; the reader joins them back with newlines).
    pub fn new(name: &str, data: &str, last: bool) -> Self {
        let mut wire = String::with_capacity(data.len() + data.len() / 40 + 32);
        wire.push_str("event: ");
        wire.push_str(name);
        wire.push('\n');
        for line in data.split('\n') {
            wire.push_str("data: ");
            wire.push_str(line.strip_suffix('\r').unwrap_or(line));
            wire.push('\n');
        }
        wire.push('\n');
        Self {
            wire: Arc::new(wire),
            last,
        }
    }
}

/// What a request gets.
pub enum Reply {
    /// A whole response.
    Whole {
        status: &'static str,
        content_type: &'static str,
        body: Arc<String>,
    },
    /// `200 OK` with `text/event-stream`: the channel's current event at once, then each new
    /// one as it is published, until an event marked last (or the channel closes). `seat`
    /// is held as long as the stream is, and dropped when it ends.
    Events {
        events: watch::Receiver<Event>,
        seat: Box<dyn Send>,
    },
}

impl Reply {
    /// A whole `200 OK`.
    pub fn ok(content_type: &'static str, body: Arc<String>) -> Self {
        Reply::Whole {
            status: "200 OK",
            content_type,
            body,
        }
    }

    /// A plain-text answer with another status.
    pub fn text(status: &'static str, text: &str) -> Self {
        Reply::Whole {
            status,
            content_type: TEXT,
            body: Arc::new(text.to_string()),
        }
    }
}

/// What a server answers, by path (the query string already cut off).
pub trait Routes: Send + Sync + 'static {
    fn reply(&self, path: &str) -> Reply;
}

/// The server: its thread, stopped and joined when dropped.
pub struct Server {
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl Server {
    /// Listen on `addr` (port 0 picks a free one; see [`Server::addr`]); `flag` names the
    /// option that asked for it, for the errors; one address holds at most `per_source`
    /// connections (at most [`MAX_CONNECTIONS`]).
    pub fn start(
        addr: SocketAddr,
        flag: &str,
        per_source: usize,
        routes: Arc<dyn Routes>,
    ) -> anyhow::Result<Self> {
        let std_listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("{flag}: cannot listen on {addr}"))?;
        std_listener
            .set_nonblocking(true)
            .with_context(|| format!("{flag}: setting the listener non-blocking"))?;
        let addr = std_listener
            .local_addr()
            .with_context(|| format!("{flag}: reading the bound address"))?;
        let (shutdown, stopped) = oneshot::channel();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .with_context(|| format!("{flag}: starting its runtime"))?;
        let thread = std::thread::Builder::new()
            .name(flag.trim_start_matches('-').into())
            .spawn(move || {
                rt.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(std_listener) else {
                        return;
                    };
                    tokio::select! {
                        _ = accept_loop(listener, routes, per_source) => {}
                        _ = stopped => {}
                    }
                });
            })
            .with_context(|| format!("{flag}: starting its thread"))?;
        Ok(Self {
            shutdown: Some(shutdown),
            thread: Some(thread),
            addr,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A connection's stage, shared between its task and the accept loop.
const IDLE: u8 = 0;
const ANSWERING: u8 = 1;
const DONE: u8 = 2;

/// One connection the accept loop holds a place for.
struct Conn {
    from: IpAddr,
    /// [`IDLE`] until its request head is read, then [`ANSWERING`], then [`DONE`].
    stage: Arc<AtomicU8>,
    /// Told when the connection loses its place; its task then ends, closing the socket.
    evict: Arc<Notify>,
}

/// The connections held, oldest first. Owned by the accept loop alone: a task only flips
/// its stage, so there is no lock to hold across an await.
struct Held {
    conns: Vec<Conn>,
    /// Connections one address may hold.
    per_source: usize,
}

impl Held {
    /// Forget the connections whose task has ended.
    fn prune(&mut self) {
        self.conns
            .retain(|c| c.stage.load(Ordering::Relaxed) != DONE);
    }

    fn held_from(&self, ip: IpAddr) -> usize {
        self.conns.iter().filter(|c| c.from == ip).count()
    }

    /// The index of the connection a newcomer from `ip` displaces, if it must displace one:
    /// at its address's share, that address's oldest idle connection (else its oldest); at
    /// the cap, the oldest idle one of the address holding most (else that address's oldest).
    fn victim(&self, ip: IpAddr) -> Option<usize> {
        let oldest_of = |src: IpAddr| {
            let mine = || {
                self.conns
                    .iter()
                    .enumerate()
                    .filter(move |(_, c)| c.from == src)
            };
            mine()
                .find(|(_, c)| c.stage.load(Ordering::Relaxed) == IDLE)
                .or_else(|| mine().next())
                .map(|(i, _)| i)
        };
        if self.held_from(ip) >= self.per_source {
            return oldest_of(ip);
        }
        if self.conns.len() < MAX_CONNECTIONS {
            return None;
        }
        // The address holding most (the one whose connection came first among equals:
        // `min_by_key` keeps the first of equal keys).
        let top = self
            .conns
            .iter()
            .map(|c| c.from)
            .min_by_key(|&src| std::cmp::Reverse(self.held_from(src)))?;
        oldest_of(top)
    }
}

async fn accept_loop(listener: TcpListener, routes: Arc<dyn Routes>, per_source: usize) {
    let mut held = Held {
        conns: Vec::new(),
        per_source: per_source.clamp(1, MAX_CONNECTIONS),
    };
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(accepted) => accepted,
            // Out of descriptors or a connection reset before accept: try again shortly,
            // without spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        held.prune();
        if let Some(i) = held.victim(from.ip()) {
            // Its task ends at its next poll and drops the socket.
            held.conns.remove(i).evict.notify_one();
        }
        let conn = Conn {
            from: from.ip(),
            stage: Arc::new(AtomicU8::new(IDLE)),
            evict: Arc::new(Notify::new()),
        };
        let (stage, evict, routes) = (conn.stage.clone(), conn.evict.clone(), routes.clone());
        held.conns.push(conn);
        tokio::spawn(async move {
            tokio::select! {
                _ = serve_one(stream, &*routes, &stage) => {}
                _ = evict.notified() => {}
            }
            stage.store(DONE, Ordering::Relaxed);
        });
    }
}

/// What a request head asked for.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    /// A GET or HEAD of this path (without its query).
    Get(String),
    /// Not HTTP, or not a GET/HEAD.
    Bad,
    /// Longer than [`MAX_HEAD`] or more headers than [`MAX_HEADERS`].
    TooLarge,
}

/// Read one request head and answer it; the connection is closed afterwards.
async fn serve_one(mut stream: TcpStream, routes: &dyn Routes, stage: &AtomicU8) {
    let mut head = [0u8; MAX_HEAD];
    let ask = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream, &mut head)).await {
        Ok(Some(ask)) => ask,
        // Timed out, closed, or a read error: nothing to answer.
        _ => return,
    };
    stage.store(ANSWERING, Ordering::Relaxed);
    let reply = match ask {
        Ask::Get(path) => routes.reply(&path),
        Ask::Bad => Reply::text("400 Bad Request", "bad request (GET or HEAD only)\n"),
        Ask::TooLarge => Reply::text(
            "431 Request Header Fields Too Large",
            "request head too large\n",
        ),
    };
    // A client that went away or stalls is not the run's problem.
    match reply {
        Reply::Whole {
            status,
            content_type,
            body,
        } => {
            let header = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
                 Cache-Control: no-store\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let write = async {
                stream.write_all(header.as_bytes()).await?;
                stream.write_all(body.as_bytes()).await?;
                stream.shutdown().await
            };
            let _ = tokio::time::timeout(WRITE_TIMEOUT, write).await;
        }
        Reply::Events { events, seat } => {
            let _ = stream_events(&mut stream, events).await;
            drop(seat);
        }
    }
}

/// Write the event stream: the current event, then each new one, until the last.
async fn stream_events(
    stream: &mut TcpStream,
    mut events: watch::Receiver<Event>,
) -> Result<(), ()> {
    const HEADER: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                          Cache-Control: no-store\r\nConnection: close\r\n\r\n";
    write_timed(stream, HEADER.as_bytes()).await?;
    loop {
        // Cloned (an Arc), so the channel is not borrowed across the write.
        let event = events.borrow_and_update().clone();
        if !event.wire.is_empty() {
            write_timed(stream, event.wire.as_bytes()).await?;
        }
        if event.last {
            let _ = tokio::time::timeout(WRITE_TIMEOUT, stream.shutdown()).await;
            return Ok(());
        }
        if events.changed().await.is_err() {
            return Ok(());
        }
    }
}

/// Write all of `bytes` within [`WRITE_TIMEOUT`].
async fn write_timed(stream: &mut TcpStream, bytes: &[u8]) -> Result<(), ()> {
    match tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(bytes)).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(()),
    }
}

/// Read until a whole request head is in `buf`; `None` when the peer closed first.
async fn read_head(stream: &mut TcpStream, buf: &mut [u8; MAX_HEAD]) -> Option<Ask> {
    let mut len = 0;
    loop {
        if len == buf.len() {
            return Some(Ask::TooLarge);
        }
        let n = stream.read(&mut buf[len..]).await.ok()?;
        if n == 0 {
            return None;
        }
        len += n;
        if let Some(ask) = parse_head(&buf[..len]) {
            return Some(ask);
        }
    }
}

/// The answer a complete head asks for, or `None` while the head is incomplete.
fn parse_head(bytes: &[u8]) -> Option<Ask> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(bytes) {
        Ok(httparse::Status::Partial) => None,
        Err(httparse::Error::TooManyHeaders) => Some(Ask::TooLarge),
        Err(_) => Some(Ask::Bad),
        Ok(httparse::Status::Complete(_)) => {
            if !matches!(req.method, Some("GET") | Some("HEAD")) {
                return Some(Ask::Bad);
            }
            let path = req.path.unwrap_or("").split('?').next().unwrap_or("");
            Some(Ask::Get(path.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn held(conns: &[(u8, u8)]) -> Held {
        Held {
            conns: conns
                .iter()
                .map(|&(last, stage)| Conn {
                    from: ip(last),
                    stage: Arc::new(AtomicU8::new(stage)),
                    evict: Arc::new(Notify::new()),
                })
                .collect(),
            per_source: MAX_PER_SOURCE,
        }
    }

    #[test]
    fn one_address_holds_a_quarter_of_the_places_and_its_oldest_idle_goes_first() {
        // Below every cap: nobody is displaced.
        assert_eq!(held(&[(1, IDLE), (2, IDLE)]).victim(ip(1)), None);
        // Address 1 at its share of 8, its first two answering: the oldest idle one goes.
        let mut at_share: Vec<(u8, u8)> = vec![(1, ANSWERING), (1, ANSWERING)];
        at_share.extend([(1, IDLE); 6]);
        at_share.insert(1, (2, IDLE));
        let h = held(&at_share);
        assert_eq!(h.victim(ip(1)), Some(3));
        // Another address is not displaced by address 1's newcomers, nor displaces anyone.
        assert_eq!(h.victim(ip(2)), None);
        // All of address 1's answering: its oldest goes.
        assert_eq!(held(&[(1, ANSWERING); 8]).victim(ip(1)), Some(0));
    }

    #[test]
    fn at_the_cap_a_new_address_takes_a_place_from_the_address_holding_most() {
        // Four addresses, 8 each except address 4 with 6, and 2 from address 5: full.
        let mut conns = Vec::new();
        for a in [1u8, 2, 3] {
            conns.extend([(a, ANSWERING), (a, IDLE)]);
            conns.extend([(a, ANSWERING); 6]);
        }
        conns.extend([(4, IDLE); 6]);
        conns.extend([(5, IDLE); 2]);
        let h = held(&conns);
        assert_eq!(h.conns.len(), MAX_CONNECTIONS);
        // Address 1 holds most (first among the 8s): its oldest idle (index 1).
        assert_eq!(h.victim(ip(9)), Some(1));
        // A newcomer from address 5, below its share, the same.
        assert_eq!(h.victim(ip(5)), Some(1));
    }

    #[test]
    fn finished_connections_free_their_place() {
        let mut h = held(&[(1, DONE), (1, IDLE), (2, DONE)]);
        h.prune();
        assert_eq!(h.conns.len(), 1);
        assert_eq!(h.conns[0].from, ip(1));
    }

    #[test]
    fn heads_are_read_whole_before_answering() {
        let get = |p: &str| Some(Ask::Get(p.to_string()));
        assert_eq!(parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"), None);
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            get("/metrics")
        );
        assert_eq!(
            parse_head(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"),
            get("/metrics")
        );
        assert_eq!(parse_head(b"HEAD / HTTP/1.1\r\n\r\n"), get("/"));
        assert_eq!(
            parse_head(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Some(Ask::Bad)
        );
        assert_eq!(
            parse_head(b"\x16\x03\x01 tls hello\r\n\r\n"),
            Some(Ask::Bad)
        );
        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("X-{i}: y\r\n"))
            .collect();
        assert_eq!(
            parse_head(format!("GET /metrics HTTP/1.1\r\n{many}\r\n").as_bytes()),
            Some(Ask::TooLarge)
        );
    }

    #[test]
    fn an_event_s_lines_each_become_a_data_line() {
        let e = Event::new("update", "<p>a</p>\n<p>b</p>", false);
        assert_eq!(
            e.wire.as_str(),
            "event: update\ndata: <p>a</p>\ndata: <p>b</p>\n\n"
        );
        // A CR before a newline would end the field early in some readers: dropped.
        let e = Event::new("final", "x\r\ny", true);
        assert_eq!(e.wire.as_str(), "event: final\ndata: x\ndata: y\n\n");
        assert!(e.last);
    }
}
