//! Runs a reference server state machine on a UDP socket in its own thread: the embedded
//! target of a swarm, and `tickswarm serve`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::factory::{transport_for, TransportKind};
use super::udp::{RxBatch, Socket, TxBatch};
use crate::protocol::{ConnId, ProtocolSection, Server, ServerParams, ServerStats};
use crate::transport::{EnetConfig, EnetEvent, EnetHost, PeerId, MAX_ENET_DATAGRAM};

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

    /// Stop the server and wait for its thread.
    pub fn shutdown(mut self) -> ServerStats {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.stats()
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Bind `bind` and run the reference server of `protocol` there, over the protocol's own
/// transport, with `params`: what `serve` and an embedded target do for each instance.
pub fn spawn_reference_server(
    bind: SocketAddr,
    protocol: &ProtocolSection,
    params: &ServerParams,
) -> std::io::Result<ServerHandle> {
    let peers = protocol
        .players_per_instance(params)
        .unwrap_or(params.max_clients);
    let (section, server) = (protocol.clone(), params.clone());
    spawn_server_on(
        bind,
        transport_for(protocol),
        peers,
        params.enet_throttle,
        move |now| section.make_server(&server, now),
    )
}

/// Bind `bind` and serve raw UDP in a new thread. `make` builds the state machine there.
pub fn spawn_server(
    bind: SocketAddr,
    make: impl FnOnce(Instant) -> Box<dyn Server> + Send + 'static,
) -> std::io::Result<ServerHandle> {
    spawn_server_on(bind, TransportKind::Udp, 0, false, make)
}

/// Bind `bind` and serve over `transport` in a new thread; `max_peers` sizes an ENet host and
/// `enet_throttle` keeps ENet's unreliable-packet throttle (C ENet's default) or turns it off.
pub fn spawn_server_on(
    bind: SocketAddr,
    transport: TransportKind,
    max_peers: usize,
    enet_throttle: bool,
    make: impl FnOnce(Instant) -> Box<dyn Server> + Send + 'static,
) -> std::io::Result<ServerHandle> {
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
                let sock = match Socket::bind(bind) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e));
                        return;
                    }
                };
                let _ = addr_tx.send(sock.local_addr());
                let now = Instant::now();
                let server = make(now);
                match transport {
                    TransportKind::Udp => serve_loop(sock, server, stop_rx, stats2).await,
                    TransportKind::Enet { .. } => {
                        // Room for every player plus those being refused politely.
                        let mut cfg = EnetConfig::with_peers(max_peers.max(1) + 16);
                        cfg.channel_limit = 255;
                        if !enet_throttle {
                            cfg.throttle.2 = 0;
                        }
                        // The settings are fixed and valid; a failure leaves the thread (and the
                        // swarm sees an unreachable target).
                        if let Ok(host) = EnetHost::new(now, &cfg) {
                            serve_loop_enet(sock, server, host, stop_rx, stats2).await;
                        }
                    }
                }
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

async fn serve_loop(
    sock: Socket,
    mut server: Box<dyn Server>,
    mut stop: watch::Receiver<bool>,
    stats: Arc<Mutex<ServerStats>>,
) {
    let mut rx = RxBatch::new();
    let mut tx = TxBatch::new();
    let mut conns = UdpConns::default();
    let mut next_report = Instant::now();
    loop {
        let wake = server
            .poll_timeout()
            .unwrap_or_else(|| Instant::now() + Duration::from_millis(100));
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            r = sock.io.readable() => {
                if r.is_err() {
                    break;
                }
                drain(&sock, &mut rx, |now, from, d| {
                    server.handle_datagram(now, conns.id_of(from), d)
                });
            }
            _ = tokio::time::sleep_until(wake.into()) => {
                server.handle_timeout(Instant::now());
            }
        }
        flush(&sock, server.as_mut(), &mut tx, &conns).await;
        while let Some(c) = server.poll_close() {
            conns.forget(c);
        }
        let now = Instant::now();
        if now >= next_report {
            next_report = now + Duration::from_millis(100);
            if let Ok(mut s) = stats.lock() {
                *s = server.stats().clone();
            }
        }
    }
    if let Ok(mut s) = stats.lock() {
        *s = server.stats().clone();
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

/// Connection ids for raw UDP: one per source address, forgotten when the server closes the
/// session.
#[derive(Default)]
struct UdpConns {
    by_addr: std::collections::HashMap<SocketAddr, ConnId>,
    by_id: std::collections::HashMap<ConnId, SocketAddr>,
    next: u64,
}

impl UdpConns {
    fn id_of(&mut self, addr: SocketAddr) -> ConnId {
        if let Some(&c) = self.by_addr.get(&addr) {
            return c;
        }
        let c = ConnId(self.next);
        self.next += 1;
        self.by_addr.insert(addr, c);
        self.by_id.insert(c, addr);
        c
    }

    fn addr_of(&self, c: ConnId) -> Option<SocketAddr> {
        self.by_id.get(&c).copied()
    }

    fn forget(&mut self, c: ConnId) {
        if let Some(a) = self.by_id.remove(&c) {
            self.by_addr.remove(&a);
        }
    }
}

/// Send everything the server has queued, in `sendmmsg` batches.
async fn flush(sock: &Socket, server: &mut dyn Server, batch: &mut TxBatch, conns: &UdpConns) {
    while let Some((to, t)) = server.poll_transmit(batch.next_buf()) {
        let Some(to) = conns.addr_of(to) else {
            continue;
        };
        batch.push(to, t.len);
        if batch.is_full() && batch.flush(sock).await.is_err() {
            return;
        }
    }
    if !batch.is_empty() {
        let _ = batch.flush(sock).await;
    }
}

/// The ENet variant: datagrams feed an ENet host; its sessions and packets feed the server.
/// A server's message to an address goes to that address's ENet peer with the protocol's
/// channel and reliability.
async fn serve_loop_enet(
    sock: Socket,
    mut server: Box<dyn Server>,
    mut host: EnetHost,
    mut stop: watch::Receiver<bool>,
    stats: Arc<Mutex<ServerStats>>,
) {
    let mut rx = RxBatch::new();
    let mut tx = TxBatch::new();
    let mut buf = vec![0u8; MAX_ENET_DATAGRAM];
    // Each ENet session gets a fresh connection id: several sessions (bots sharing a socket,
    // players behind one NAT) come from one UDP address, and a peer slot is reused.
    let mut by_conn: std::collections::HashMap<ConnId, PeerId> = Default::default();
    let mut by_peer: Vec<Option<ConnId>> = vec![None; host.peer_limit()];
    let mut next_conn = 0u64;
    let mut next_report = Instant::now();
    // What the transport lost or refused, reported with the server's own counters.
    let mut transport = crate::metrics::NamedCounters::default();
    let report =
        |server: &dyn Server, host: &EnetHost, transport: &crate::metrics::NamedCounters| {
            let mut s = server.stats().clone();
            s.events.merge(transport);
            let h = host.stats();
            s.events.add("enet_datagrams_dropped_in", h.dropped_in);
            s.events.add("enet_datagrams_dropped_out", h.dropped_out);
            s
        };
    loop {
        let wake = [server.poll_timeout(), host.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or_else(|| Instant::now() + Duration::from_millis(100));
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            r = sock.io.readable() => {
                if r.is_err() {
                    break;
                }
                drain(&sock, &mut rx, |now, from, d| host.handle_datagram(now, from, d));
            }
            _ = tokio::time::sleep_until(wake.into()) => {}
        }
        let now = Instant::now();
        if server.poll_timeout().is_some_and(|t| t <= now) {
            server.handle_timeout(now);
        }
        host.service(now);
        while let Some(ev) = host.poll_event() {
            match ev {
                EnetEvent::Connected { peer, .. } => {
                    let addr = ConnId(next_conn);
                    next_conn += 1;
                    by_conn.insert(addr, peer);
                    if let Some(slot) = by_peer.get_mut(peer.index()) {
                        *slot = Some(addr);
                    }
                    server.handle_connect(now, addr);
                }
                EnetEvent::Received { peer, packet, .. } => {
                    if let Some(Some(addr)) = by_peer.get(peer.index()) {
                        server.handle_datagram(now, *addr, &packet);
                    }
                }
                EnetEvent::Disconnected { peer, .. } => {
                    if let Some(addr) = by_peer.get_mut(peer.index()).and_then(Option::take) {
                        by_conn.remove(&addr);
                        server.handle_disconnect(now, addr);
                    }
                }
            }
        }
        while let Some((to, t)) = server.poll_transmit(&mut buf) {
            match by_conn.get(&to) {
                Some(&peer) => {
                    if host.send_transmit(peer, &t, &buf).is_err() {
                        transport.add("enet_send_refused", 1);
                    }
                }
                None => transport.add("enet_no_session", 1),
            }
        }
        while let Some(addr) = server.poll_close() {
            if let Some(&peer) = by_conn.get(&addr) {
                let _ = host.disconnect(now, peer, 0);
            }
        }
        host.flush(now);
        while let Some((to, len)) = host.poll_transmit(tx.next_buf()) {
            tx.push(to, len);
            if tx.is_full() && tx.flush(&sock).await.is_err() {
                break;
            }
        }
        if !tx.is_empty() {
            let _ = tx.flush(&sock).await;
        }
        if now >= next_report {
            next_report = now + Duration::from_millis(100);
            if let Ok(mut s) = stats.lock() {
                *s = report(server.as_ref(), &host, &transport);
            }
        }
    }
    if let Ok(mut s) = stats.lock() {
        *s = report(server.as_ref(), &host, &transport);
    }
}
