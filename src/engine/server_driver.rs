//! Runs a reference server state machine on a UDP socket in its own thread, over the server
//! side of its protocol's transport: the embedded target of a swarm, and `tickswarm serve`.
//! A transport that binds its own socket (GNS) gets none from the driver: it is serviced on
//! its timer instead.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::io::socket::server::{RxBatch, Socket, TxBatch};
use super::io::{server_transport, ServerTransport};
use crate::metrics::run::TickHistogram;
use crate::protocol::{ProtocolSection, Server, ServerParams, ServerStats};

/// A reference server's counters as its driver last published them (every 100 ms).
#[derive(Clone)]
pub struct StatsSource(Arc<Mutex<ServerStats>>);

impl StatsSource {
    pub fn get(&self) -> ServerStats {
        self.0.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// A server running in a background thread.
pub struct ServerHandle {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    stats: Arc<Mutex<ServerStats>>,
    thread: Option<JoinHandle<()>>,
}

impl ServerHandle {
    /// The server's counters as of its last report (updated every 100 ms).
    pub fn stats(&self) -> ServerStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// A live view of the same counters that outlives this handle's borrow: what a
    /// `/metrics` endpoint renders on each scrape.
    pub fn stats_source(&self) -> StatsSource {
        StatsSource(self.stats.clone())
    }

    /// Stop the server and wait for its thread.
    pub fn shutdown(mut self) -> ServerStats {
        self.stop.send_replace(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.stats()
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One whole second of a server's ticks, for a tick log (`serve --tick-log`): exact, not a
/// sample, as every tick is counted in the second it began in.
#[derive(Debug, Clone)]
pub struct TickSecond {
    /// Which of the instances started together sent it ([`ServerParams::instance`]).
    pub instance: usize,
    /// The second's end, in whole seconds since the log's origin (1 for the first second).
    pub t_s: u64,
    /// Sessions open at the second's end (when the driver noticed it was over).
    pub players: usize,
    /// The ticks that began in the second, in µs each (empty when none did).
    pub tick_us: TickHistogram,
}

/// Where a server's driver sends a [`TickSecond`] at the end of each whole second since
/// `origin` (the same origin for every instance of one `serve`).
#[derive(Clone)]
pub struct TickSeconds {
    pub origin: Instant,
    pub to: std::sync::mpsc::Sender<TickSecond>,
}

/// Bind `bind` and run the reference server of `protocol` there, over the protocol's own
/// transport, with `params`: what `serve` and an embedded target do for each instance.
pub fn spawn_reference_server(
    bind: SocketAddr,
    protocol: &ProtocolSection,
    params: &ServerParams,
) -> std::io::Result<ServerHandle> {
    spawn_reference_server_logged(bind, protocol, params, None)
}

/// [`spawn_reference_server`], with the figures of every second's ticks sent to `seconds`
/// when it is given (`serve --tick-log`).
pub fn spawn_reference_server_logged(
    bind: SocketAddr,
    protocol: &ProtocolSection,
    params: &ServerParams,
    seconds: Option<TickSeconds>,
) -> std::io::Result<ServerHandle> {
    let extras = Extras {
        tick_cost: params
            .tick_cost_per_player
            .map(|d| d.0)
            .filter(|d| !d.is_zero()),
        seconds: seconds.map(|to| SecondLog::new(to, params.instance)),
    };
    let peers = protocol
        .players_per_instance(params)
        .unwrap_or(params.max_clients);
    let needs = protocol.transport();
    let throttle = params.enet_throttle;
    let (section, server) = (protocol.clone(), params.clone());
    spawn_server_with(
        bind,
        move |now, bind| {
            let transport = server_transport(needs, bind, peers, throttle, now)?;
            Ok((transport, move |local| {
                let server = ServerParams {
                    bind: Some(local),
                    ..server
                };
                section.make_server(&server, now)
            }))
        },
        extras,
    )
}

/// What a driver does besides serving, both off unless asked for: the simulated cost of a
/// tick ([`ServerParams::tick_cost_per_player`]) and the per-second tick log.
struct Extras {
    /// Busy time a tick spends per session open (never zero when set).
    tick_cost: Option<Duration>,
    seconds: Option<SecondLog>,
}

/// The ticks of the second under way, and where each whole second goes once it is over.
struct SecondLog {
    to: TickSeconds,
    instance: usize,
    /// Whole seconds since the origin already sent.
    sent: u64,
    /// When the second under way ends.
    next: Instant,
    tick_us: TickHistogram,
}

impl SecondLog {
    fn new(to: TickSeconds, instance: usize) -> Self {
        let next = to.origin + Duration::from_secs(1);
        Self {
            to,
            instance,
            sent: 0,
            next,
            tick_us: TickHistogram::default(),
        }
    }

    /// Send every second over by `now`: the one under way with its ticks, and any the loop
    /// slept or spun through with none (a tick is counted in the second it began in, and
    /// the loop records a tick before it looks at the clock again).
    fn roll(&mut self, now: Instant, players: usize) {
        let over = now.saturating_duration_since(self.to.origin).as_secs();
        while self.sent < over {
            self.sent += 1;
            let tick_us = std::mem::take(&mut self.tick_us);
            // A log whose reader has gone is not the server's concern.
            let _ = self.to.to.send(TickSecond {
                instance: self.instance,
                t_s: self.sent,
                players,
                tick_us,
            });
        }
        self.next = self.to.origin + Duration::from_secs(self.sent + 1);
    }
}

/// Spin until `until`, reading the clock: the simulated work of a tick, on this core.
fn burn_until(until: Instant) {
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Serve in a new thread. `make` builds the transport there, given the time and `bind`; a
/// transport that names its own address (GNS) has bound it, else the driver binds `bind`.
/// The closure it returns builds the state machine, given the address actually bound.
fn spawn_server_with<M>(
    bind: SocketAddr,
    make: impl FnOnce(Instant, SocketAddr) -> std::io::Result<(Box<dyn ServerTransport + Send>, M)>
        + Send
        + 'static,
    extras: Extras,
) -> std::io::Result<ServerHandle>
where
    M: FnOnce(SocketAddr) -> Box<dyn Server>,
{
    let (stop_tx, stop_rx) = watch::channel(false);
    let stats = Arc::new(Mutex::new(ServerStats::default()));
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let stats2 = stats.clone();
    let thread = std::thread::Builder::new()
        .name("tickswarm-server".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = addr_tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                let (transport, make_server) = match make(Instant::now(), bind) {
                    Ok(parts) => parts,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e));
                        return;
                    }
                };
                let bound = match transport.local_addr() {
                    Some(local) => Ok((None, local)),
                    None => Socket::bind(bind)
                        .and_then(|s| s.local_addr().map(|local| (Some(s), local))),
                };
                let (sock, local) = match bound {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e));
                        return;
                    }
                };
                let server = make_server(local);
                let _ = addr_tx.send(Ok(local));
                serve_loop(sock, server, transport, stop_rx, stats2, extras).await;
            });
        })?;
    let addr = addr_rx
        .recv()
        .map_err(|_| std::io::Error::other("server thread died before binding"))??;
    Ok(ServerHandle {
        addr,
        stop: stop_tx,
        stats,
        thread: Some(thread),
    })
}

/// Datagrams in to the transport (which hands the server what is its), timers, and the
/// server's output back out in `sendmmsg` batches; counters published every 100 ms. Without
/// a socket (the transport has its own) only the timers run. With a tick cost, each tick
/// spins until its cost has passed (before its end is measured, so the tick time holds it);
/// with a second log, each whole second's ticks are sent once it is over.
async fn serve_loop(
    sock: Option<Socket>,
    mut server: Box<dyn Server>,
    mut transport: Box<dyn ServerTransport + Send>,
    mut stop: watch::Receiver<bool>,
    stats: Arc<Mutex<ServerStats>>,
    extras: Extras,
) {
    let Extras {
        tick_cost,
        mut seconds,
    } = extras;
    let mut rx = RxBatch::new();
    let mut tx = TxBatch::new();
    // A transport polled on its timer (GNS, every millisecond) needs a timer that wakes on
    // time: tokio's rounds every sleep up to the next millisecond.
    let precise = sock
        .is_none()
        .then(|| super::timer::PreciseTimer::new().ok())
        .flatten();
    let mut next_report = Instant::now();
    let mut tick_us = TickHistogram::default();
    let mut send_errors = 0u64;
    let report = |server: &dyn Server,
                  transport: &dyn ServerTransport,
                  tick_us: &TickHistogram,
                  send_errors: u64| {
        let mut s = server.stats().clone();
        transport.report(&mut s);
        s.tick_us = tick_us.clone();
        s.send_errors = send_errors;
        s
    };
    loop {
        if *stop.borrow_and_update() {
            break;
        }
        let wake = [server.poll_timeout(), transport.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or_else(|| Instant::now() + Duration::from_millis(100));
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            r = readable(sock.as_ref()) => {
                let Some(sock) = sock.as_ref().filter(|_| r.is_ok()) else {
                    break;
                };
                drain(sock, &mut rx, |now, from, d| {
                    transport.on_datagram(now, from, d, server.as_mut())
                });
            }
            _ = sleep_until(precise.as_ref(), wake) => {}
        }
        let now = Instant::now();
        if let Some(log) = seconds.as_mut().filter(|l| now >= l.next) {
            log.roll(now, server.stats().clients);
        }
        // A tick is the server's timer coming due; it lasts until its output is flushed.
        let ticked = server.poll_timeout().is_some_and(|t| t <= now);
        if ticked {
            server.handle_timeout(now);
            if let Some(cost) = tick_cost {
                // The test aid: `cost` of work for each session open, from the tick's start.
                let players = u32::try_from(server.stats().clients).unwrap_or(u32::MAX);
                if let Some(until) = now.checked_add(cost.saturating_mul(players)) {
                    burn_until(until);
                }
            }
        }
        transport.service(now, server.as_mut());
        while let Some((to, len)) = transport.poll_datagram(now, server.as_mut(), tx.next_buf()) {
            let Some(sock) = sock.as_ref() else {
                break;
            };
            tx.push(to, len);
            if tx.is_full() && tx.flush(sock).await.is_err() {
                send_errors += 1;
                break;
            }
        }
        if let Some(sock) = sock.as_ref().filter(|_| !tx.is_empty()) {
            if tx.flush(sock).await.is_err() {
                send_errors += 1;
            }
        }
        if ticked {
            // The one extra clock read per tick: its end (its start is `now`).
            let us = Instant::now().saturating_duration_since(now).as_micros();
            let us = u64::try_from(us).unwrap_or(u64::MAX);
            tick_us.record(us);
            if let Some(log) = seconds.as_mut() {
                log.tick_us.record(us);
            }
        }
        if now >= next_report {
            next_report = now + Duration::from_millis(100);
            if let Ok(mut s) = stats.lock() {
                *s = report(server.as_ref(), transport.as_ref(), &tick_us, send_errors);
            }
        }
    }
    if let Ok(mut s) = stats.lock() {
        *s = report(server.as_ref(), transport.as_ref(), &tick_us, send_errors);
    }
}

/// Sleep until `at`, on the precise timer when there is one.
async fn sleep_until(precise: Option<&super::timer::PreciseTimer>, at: Instant) {
    match precise {
        Some(t) => {
            if super::timer::sleep_until(t, at).await.is_err() {
                tokio::time::sleep_until(at.into()).await;
            }
        }
        None => tokio::time::sleep_until(at.into()).await,
    }
}

/// Readability of the driver's socket; never, when the transport has its own.
async fn readable(sock: Option<&Socket>) -> std::io::Result<()> {
    match sock {
        Some(s) => s.io.readable().await,
        None => std::future::pending().await,
    }
}

/// Receive everything queued on `sock`, in batches, one clock read per batch.
fn drain(sock: &Socket, rx: &mut RxBatch, mut f: impl FnMut(Instant, SocketAddr, &[u8])) {
    loop {
        match sock.try_recv_batch(rx) {
            Ok(n) => {
                let now = Instant::now();
                for (from, d) in rx.datagrams(n) {
                    f(now, from, d);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            // ICMP errors from departed clients and the like: not fatal.
            Err(_) => continue,
        }
    }
}
