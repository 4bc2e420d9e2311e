//! `run --metrics-listen ADDR`: Prometheus scrapes of the run in progress.
//!
//! `GET /metrics` gets the text the run published last (rendered once a second by
//! [`crate::report::prometheus::Exposition`], never per scrape), anything else a 404.
//! A reference server's endpoint (`serve --metrics-listen`, the embedded server of a run)
//! renders its counters on each scrape instead ([`MetricsServer::start_live`]): a copy of a
//! few counters and one histogram, cheap enough, and never older than the driver's last
//! 100 ms report.
//!
//! The endpoint is reachable by whoever can reach the port, and it must never take what the
//! bots need, so everything it holds is bounded:
//! - **One thread**, whatever the number of clients: connections are tasks on a
//!   current-thread tokio runtime of its own (a thread per connection let 3,000 idle
//!   connections start 2,351 threads);
//! - **At most [`MAX_CONNECTIONS`] held at once, at most [`MAX_PER_SOURCE`] from one
//!   address, and a newcomer always gets a place** ([`Held::victim`] picks whose): the cap
//!   keeps the endpoint within the descriptors the run's budget keeps for it, and the order
//!   decides who is served. Refusing newcomers at the cap (as before) let 32 idle or slow
//!   connections, renewed as they were closed, refuse a real scraper: a review's 1,000 slow or
//!   3,000 idle connections failed 40 of 80 scrapes. Now one address holds at most a quarter
//!   of the places, so a scraper on another machine always finds one; a newcomer from an
//!   address at its share takes the place of that address's oldest idle connection (its
//!   request head not read yet), and one from a new address takes a place from the address
//!   holding most. A scraper sends its request at once, so it is idle for moments only; a
//!   connection that sends nothing, or a byte a second, stays idle and goes first. What this
//!   cannot protect: a scraper on the *same* address as a flood of new connections, which
//!   may be pushed out before its request arrives;
//! - **A request head of at most [`MAX_HEAD`] bytes, within [`HEAD_TIMEOUT`]**: a huge request
//!   line or endless headers get 431 and the connection is closed; a client that sends
//!   nothing is closed when the timeout runs out (each held 1 GB or a thread before);
//! - **One request per connection** (`Connection: close`), the response written within
//!   [`WRITE_TIMEOUT`]. Prometheus opens a connection per scrape happily.
//!
//! The request head is parsed with `httparse` (hyper's parser).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Notify};

/// Content type of the text exposition format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Connections held at once; a newcomer beyond it takes another's place.
pub const MAX_CONNECTIONS: usize = 32;
/// Connections held at once from one address (IP): a quarter of the places, so a flood from
/// one machine leaves the rest to the others.
pub const MAX_PER_SOURCE: usize = MAX_CONNECTIONS / 4;
/// The longest request head (request line and headers) read.
pub const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long writing the response may take.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Headers parsed at most (more is a 431, as an over-long head is).
const MAX_HEADERS: usize = 32;

/// What a scrape gets, rendered when it comes.
type Body = Arc<dyn Fn() -> Arc<String> + Send + Sync>;

pub struct MetricsServer {
    text: Arc<Mutex<Arc<String>>>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl MetricsServer {
    /// Listen on `addr` (port 0 picks a free one; see [`MetricsServer::addr`]).
    pub fn start(addr: SocketAddr) -> anyhow::Result<Self> {
        let text = Arc::new(Mutex::new(Arc::new(String::new())));
        let published = text.clone();
        let body: Body = Arc::new(move || published.lock().map(|t| t.clone()).unwrap_or_default());
        Self::start_with(addr, text, body)
    }

    /// Listen on `addr` and answer each scrape with what `render` returns then.
    pub fn start_live(
        addr: SocketAddr,
        render: impl Fn() -> String + Send + Sync + 'static,
    ) -> anyhow::Result<Self> {
        let text = Arc::new(Mutex::new(Arc::new(String::new())));
        Self::start_with(addr, text, Arc::new(move || Arc::new(render())))
    }

    fn start_with(
        addr: SocketAddr,
        text: Arc<Mutex<Arc<String>>>,
        body: Body,
    ) -> anyhow::Result<Self> {
        let std_listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("--metrics-listen: cannot listen on {addr}"))?;
        std_listener
            .set_nonblocking(true)
            .context("--metrics-listen: setting the listener non-blocking")?;
        let addr = std_listener
            .local_addr()
            .context("--metrics-listen: reading the bound address")?;
        let (shutdown, stopped) = oneshot::channel();
        let thread = {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("--metrics-listen: starting its runtime")?;
            std::thread::Builder::new()
                .name("metrics-listen".into())
                .spawn(move || {
                    rt.block_on(async move {
                        let Ok(listener) = TcpListener::from_std(std_listener) else {
                            return;
                        };
                        tokio::select! {
                            _ = accept_loop(listener, body) => {}
                            _ = stopped => {}
                        }
                    });
                })
                .context("--metrics-listen: starting its thread")?
        };
        Ok(Self {
            text,
            shutdown: Some(shutdown),
            thread: Some(thread),
            addr,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What scrapes get from now on.
    pub fn publish(&self, text: String) {
        if let Ok(mut t) = self.text.lock() {
            *t = Arc::new(text);
        }
    }
}

impl Drop for MetricsServer {
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
#[derive(Default)]
struct Held {
    conns: Vec<Conn>,
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
        if self.held_from(ip) >= MAX_PER_SOURCE {
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

async fn accept_loop(listener: TcpListener, body: Body) {
    let mut held = Held::default();
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
        let (stage, evict, body) = (conn.stage.clone(), conn.evict.clone(), body.clone());
        held.conns.push(conn);
        tokio::spawn(async move {
            tokio::select! {
                _ = serve_one(stream, &*body, &stage) => {}
                _ = evict.notified() => {}
            }
            stage.store(DONE, Ordering::Relaxed);
        });
    }
}

/// What a request head asked for.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    Metrics,
    Other,
    /// Not HTTP, or not a GET/HEAD.
    Bad,
    /// Longer than [`MAX_HEAD`] or more headers than [`MAX_HEADERS`].
    TooLarge,
}

/// Read one request head and answer it; the connection is closed afterwards.
async fn serve_one(
    mut stream: TcpStream,
    body: &(dyn Fn() -> Arc<String> + Send + Sync),
    stage: &AtomicU8,
) {
    let mut head = [0u8; MAX_HEAD];
    let ask = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream, &mut head)).await {
        Ok(Some(ask)) => ask,
        // Timed out, closed, or a read error: nothing to answer.
        _ => return,
    };
    stage.store(ANSWERING, Ordering::Relaxed);
    let body_text;
    let (status, content_type, body): (&str, &str, &[u8]) = match ask {
        Ask::Metrics => {
            body_text = body();
            ("200 OK", CONTENT_TYPE, body_text.as_bytes())
        }
        Ask::Other => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            b"tickswarm: metrics are at /metrics\n",
        ),
        Ask::Bad => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            b"bad request\n",
        ),
        Ask::TooLarge => (
            "431 Request Header Fields Too Large",
            "text/plain; charset=utf-8",
            b"request head too large\n",
        ),
    };
    let header = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(header.as_bytes()).await?;
        stream.write_all(body).await?;
        stream.shutdown().await
    };
    // A scraper that went away or stalls is not the run's problem.
    let _ = tokio::time::timeout(WRITE_TIMEOUT, write).await;
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
            Some(if path == "/metrics" {
                Ask::Metrics
            } else {
                Ask::Other
            })
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
        assert_eq!(parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"), None);
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(Ask::Metrics)
        );
        assert_eq!(
            parse_head(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Some(Ask::Metrics)
        );
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\n\r\n"), Some(Ask::Other));
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
}
