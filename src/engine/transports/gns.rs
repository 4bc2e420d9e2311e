//! GameNetworkingSockets (GNS): Valve's connection-oriented transport over UDP (encrypted
//! connections, reliable and unreliable messages, its own acks, fragmentation and
//! congestion control), through the `game-networking-sockets` crate (`gns`), which builds
//! the C++ library from source. Only in a build with the `gns` cargo feature.
//!
//! Bots: one GNS connection per bot. Servers: one GNS listen socket; each accepted
//! connection is a [`ConnId`].
//!
//! **How it is driven.** GNS owns its sockets: a service thread inside the library reads and
//! writes them, and the application polls for received messages and connection-state
//! changes. GNS offers no callback when a message arrives (its callbacks cover connection
//! state only, and are themselves dispatched by polling), so there is nothing to wake a
//! worker with: both sides are polled on the source timer every [`POLL_INTERVAL`] while they
//! have connections ([`BotTransport::poll_timeout`], [`ServerTransport::poll_timeout`]).
//! That poll adds up to one interval (plus the timer's slack) to each message's delivery at
//! each end, so an RTT measured over GNS includes up to about two intervals of polling.
//!
//! **What is measured.** The engine never sees GNS's datagrams, so it cannot count wire
//! bytes as it does for UDP and ENet: the bots' `wire_*` counters stay 0 for GNS (the report
//! then shows payload bytes). What GNS tells about each connection is sampled per bot each
//! second ([`BotTransport::sample`]): its ping, its connection quality, its own smoothed
//! estimates of bytes and packets per second in and out (GNS headers, acks, encryption and
//! retransmissions included), and the bytes still queued. Those are GNS's estimates, named
//! as such in the report, not exact counts.
//!
//! **Allocation.** GNS allocates a message object per send in its own code (its API has no
//! other way to send); the transport adds one boxed copy of the payload per message, and
//! batches a flush's messages into one `SendMessages` call.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use gns::sys::ESteamNetworkingConnectionState as State;
use gns::{
    GnsConnection, GnsGlobal, GnsNetworkMessage, GnsSocket, IsClient, IsCreated, IsServer,
    SendFlags, SendOutcome, ToSend,
};

use super::{BotTransport, DownReason, LinkEvents, Opened, ServerTransport, Slot, Source};
use crate::metrics::describe::MetricDesc;
use crate::metrics::{NamedCounters, Recorder, ServerStats};
use crate::protocol::{ConnId, Server, Transmit};

/// How often a GNS endpoint with open connections is polled for messages and state changes.
pub const POLL_INTERVAL: Duration = Duration::from_millis(1);

/// Messages taken from GNS per receive call.
const RECV_BATCH: usize = 64;

/// The one source all of a worker's GNS connections share: they are polled together.
const SOURCE: Source = 0;

/// `k_ESteamNetConnectionEnd_App_Min`: an application's normal close.
const END_APP: u32 = 1000;

/// GNS's process-wide state (its service thread starts on first use).
fn global() -> std::io::Result<&'static GnsGlobal> {
    GnsGlobal::get().map_err(|e| std::io::Error::other(format!("GameNetworkingSockets: {e}")))
}

/// GNS's send flags for a protocol transmit. Nagle stays on: a flush sends what a bot (or
/// the server, for one connection) queued in one call together, at once.
fn flags(t: &Transmit) -> SendFlags {
    if t.reliable {
        SendFlags::RELIABLE
    } else {
        SendFlags::UNRELIABLE
    }
}

/// Counter name of a failed send, by GNS's result code.
fn send_failure(r: gns::sys::EResult) -> &'static str {
    use gns::sys::EResult as R;
    match r {
        R::k_EResultLimitExceeded => "send_buffer_full",
        R::k_EResultInvalidState => "not_connected",
        R::k_EResultNoConnection => "no_connection",
        R::k_EResultInvalidParam => "invalid_message",
        R::k_EResultIgnored => "ignored",
        _ => "other",
    }
}

/// One bot's connection.
struct Link {
    sock: GnsSocket<IsClient>,
    /// GNS reported the connection connected.
    up: bool,
}

/// The GNS connections of one worker's bots.
pub struct GnsBots {
    global: Option<&'static GnsGlobal>,
    /// By bot slot.
    links: Vec<Option<Link>>,
    /// Slots with a link, to poll without walking every slot.
    active: Vec<Slot>,
    /// Messages queued since the last flush, all to the bot being driven.
    batch: Vec<GnsNetworkMessage<ToSend>>,
    /// When the connections are next polled.
    next_poll: Option<Instant>,
}

impl Default for GnsBots {
    fn default() -> Self {
        Self {
            global: None,
            links: Vec::new(),
            active: Vec::new(),
            batch: Vec::new(),
            next_poll: None,
        }
    }
}

impl GnsBots {
    fn connect(&mut self, slot: Slot, peer: SocketAddr, now: Instant) -> std::io::Result<Opened> {
        let global = match self.global {
            Some(g) => g,
            None => *self.global.insert(global()?),
        };
        let sock = GnsSocket::<IsCreated>::new(global)
            .connect(peer.ip(), peer.port())
            .map_err(|e| std::io::Error::other(format!("GNS connect to {peer}: {e}")))?;
        if self.links.len() <= slot {
            self.links.resize_with(slot + 1, || None);
        }
        self.links[slot] = Some(Link { sock, up: false });
        if !self.active.contains(&slot) {
            self.active.push(slot);
        }
        // Poll soon: the handshake's answer is what the bot waits for.
        self.next_poll = Some(self.next_poll.map_or(now, |t| t.min(now + POLL_INTERVAL)));
        Ok(Opened {
            source: SOURCE,
            // Polled on the source's timer: GNS has nothing to wake the worker with.
            watch: None,
            up: false,
        })
    }

    /// Close bot `slot`'s connection: GNS keeps sending what was queued (`linger`) and says
    /// goodbye to the peer in its own thread; no event for it reaches the bot.
    fn drop_link(&mut self, slot: Slot, linger: bool) {
        if let Some(link) = self.links.get_mut(slot).and_then(Option::take) {
            let conn = link.sock.connection();
            let _ = link.sock.flush_messages_on_connection(conn);
            let _ = link.sock.close_connection(conn, END_APP, None, linger);
        }
        self.active.retain(|&s| s != slot);
    }

    /// Hand GNS the messages queued for `slot` and put them on the wire now.
    fn flush_batch(&mut self, slot: Slot, rec: &mut Recorder) {
        if self.batch.is_empty() {
            return;
        }
        let Some(Some(link)) = self.links.get(slot) else {
            self.batch.clear();
            return;
        };
        for outcome in link.sock.send_messages(self.batch.drain(..)) {
            match outcome {
                SendOutcome::Sent(_) => {}
                SendOutcome::Failed(r, _) => rec.send_errors.add2("gns", send_failure(r), 1),
                SendOutcome::Skipped(_) => rec.send_errors.add2("gns", "skipped", 1),
            }
        }
        let _ = link
            .sock
            .flush_messages_on_connection(link.sock.connection());
    }
}

impl BotTransport for GnsBots {
    const NAME: &'static str = "gns";
    const METRICS: &'static [MetricDesc] = &[
        MetricDesc::micros(
            "gns_ping_us",
            "GNS ping",
            "GameNetworkingSockets' own ping estimate (whole milliseconds; 0 is stored as 1 µs), \
             sampled per bot each second",
        ),
        MetricDesc::micros(
            "transport_handshake_us",
            "GNS handshake",
            "connect to GNS's Connected state (its key exchange included, plus up to 1 ms of \
             polling), before the protocol's own handshake",
        ),
        MetricDesc::micros(
            "connect_total_us",
            "Connect, end to end",
            "GNS handshake plus the protocol handshake: what a player waits",
        ),
        MetricDesc::histogram(
            "gns_quality_local_pct",
            "GNS quality (local)",
            "share of packets from the server that arrived, GNS's estimate (1.0 = 100 %), \
             sampled per bot each second",
            "%",
        )
        .unit("%", 100),
        MetricDesc::histogram(
            "gns_quality_remote_pct",
            "GNS quality (remote)",
            "share of the bot's packets the server received, as the server's GNS reported it",
            "%",
        )
        .unit("%", 100),
        MetricDesc::histogram(
            "gns_out_bytes_per_s",
            "GNS bytes out per second",
            "GNS's smoothed estimate of what one bot's connection sends, its headers, acks and \
             encryption included (an estimate: GNS gives no exact wire byte counts, so the \
             wire_* bandwidth counters stay 0 over GNS); sampled per bot each second",
            "B/s",
        ),
        MetricDesc::histogram(
            "gns_in_bytes_per_s",
            "GNS bytes in per second",
            "GNS's smoothed estimate of what one bot's connection receives, headers included \
             (an estimate, not an exact count); sampled per bot each second",
            "B/s",
        ),
        MetricDesc::histogram(
            "gns_out_packets_per_s",
            "GNS packets out per second",
            "GNS's smoothed estimate of UDP packets one bot's connection sends; sampled per \
             bot each second",
            "packets/s",
        ),
        MetricDesc::histogram(
            "gns_in_packets_per_s",
            "GNS packets in per second",
            "GNS's smoothed estimate of UDP packets one bot's connection receives; sampled \
             per bot each second",
            "packets/s",
        ),
        MetricDesc::histogram(
            "gns_pending_bytes",
            "GNS bytes queued",
            "bytes waiting to be sent plus reliable bytes sent and not yet acknowledged, per \
             bot each second (0 is stored as 1)",
            "bytes",
        ),
        MetricDesc::count(
            "gns_closed_by_peer",
            "GNS closed by server",
            "connections the server's GNS closed",
        ),
        MetricDesc::count(
            "gns_problem_detected_locally",
            "GNS connection problems",
            "connections the bot's GNS gave up on (timeout, unreachable)",
        ),
    ];

    fn open(
        &mut self,
        slot: Slot,
        peer: SocketAddr,
        now: Instant,
        _rec: &mut Recorder,
    ) -> std::io::Result<Opened> {
        self.connect(slot, peer, now)
    }

    fn relink(
        &mut self,
        slot: Slot,
        peer: SocketAddr,
        now: Instant,
        rec: &mut Recorder,
    ) -> std::io::Result<Opened> {
        // What the bot queued before leaving (its DISCONNECT) is flushed and, reliable, kept
        // being retransmitted by GNS while the old connection lingers; the bot hears nothing
        // more from it.
        self.flush_batch(slot, rec);
        self.drop_link(slot, true);
        self.connect(slot, peer, now)
    }

    fn poll_retired(&mut self) -> Option<Source> {
        None
    }

    fn send(&mut self, slot: Slot, t: &Transmit, bytes: &[u8], rec: &mut Recorder) {
        let Some(Some(link)) = self.links.get(slot) else {
            return;
        };
        let Some(global) = self.global else {
            return;
        };
        let msg = global.utils().allocate_message(
            link.sock.connection(),
            flags(t),
            Box::<[u8]>::from(bytes),
        );
        self.batch.push(msg);
        rec.datagram_up(bytes.len());
    }

    fn flush(&mut self, slot: Slot, _now: Instant, rec: &mut Recorder) {
        self.flush_batch(slot, rec);
    }

    fn close(&mut self, slot: Slot, _now: Instant, rec: &mut Recorder) {
        self.flush_batch(slot, rec);
        self.drop_link(slot, true);
    }

    fn on_datagrams<'a>(
        &mut self,
        _src: Source,
        _now: Instant,
        _datagrams: impl Iterator<Item = &'a [u8]>,
        _rec: &mut Recorder,
        _out: &mut LinkEvents,
    ) {
        // GNS reads its own sockets: the worker watches none for it.
    }

    fn on_timer(&mut self, _src: Source, now: Instant, rec: &mut Recorder, out: &mut LinkEvents) {
        self.next_poll = None;
        let Some(global) = self.global else {
            return;
        };
        // Connection-state callbacks reach each connection's queue from here.
        global.poll_callbacks();
        let mut i = 0;
        while i < self.active.len() {
            let slot = self.active[i];
            let Some(Some(link)) = self.links.get_mut(slot) else {
                self.active.swap_remove(i);
                continue;
            };
            let mut ended = None;
            for ev in link.sock.receive_events() {
                match ev.info().state() {
                    State::k_ESteamNetworkingConnectionState_Connected if !link.up => {
                        link.up = true;
                        out.up(slot);
                    }
                    State::k_ESteamNetworkingConnectionState_ClosedByPeer => {
                        rec.events.add("gns_closed_by_peer", 1);
                        ended = Some(link.up);
                    }
                    State::k_ESteamNetworkingConnectionState_ProblemDetectedLocally => {
                        rec.events.add("gns_problem_detected_locally", 1);
                        ended = Some(link.up);
                    }
                    _ => {}
                }
            }
            // Messages that arrived before a close are still the bot's.
            if link.up {
                loop {
                    let Ok(msgs) = link.sock.receive_messages::<RECV_BATCH>() else {
                        break;
                    };
                    let n = msgs.len();
                    for m in msgs {
                        out.data(slot, m.payload());
                    }
                    if n < RECV_BATCH {
                        break;
                    }
                }
            }
            if let Some(was_up) = ended {
                if let Some(link) = self.links.get_mut(slot).and_then(Option::take) {
                    let _ =
                        link.sock
                            .close_connection(link.sock.connection(), END_APP, None, false);
                }
                self.active.swap_remove(i);
                out.down(
                    slot,
                    if was_up {
                        DownReason::ClosedByServer
                    } else {
                        DownReason::ConnectFailed
                    },
                );
                continue;
            }
            i += 1;
        }
        if !self.active.is_empty() {
            self.next_poll = Some(now + POLL_INTERVAL);
        }
    }

    fn poll_timeout(&self, _src: Source) -> Option<Instant> {
        self.next_poll
    }

    fn sample(&self, slot: Slot, rec: &mut Recorder) {
        let Some(Some(link)) = self.links.get(slot) else {
            return;
        };
        let Ok((s, _)) = link
            .sock
            .get_connection_real_time_status(link.sock.connection(), 0)
        else {
            return;
        };
        rec.record_extra("gns_ping_us", u64::from(s.ping()) * 1000);
        // Quality is -1 while GNS has no estimate yet.
        if s.quality_local() >= 0.0 {
            rec.record_extra(
                "gns_quality_local_pct",
                (f64::from(s.quality_local()) * 10_000.0).round() as u64,
            );
        }
        if s.quality_remote() >= 0.0 {
            rec.record_extra(
                "gns_quality_remote_pct",
                (f64::from(s.quality_remote()) * 10_000.0).round() as u64,
            );
        }
        let rate = |v: f32| f64::from(v.max(0.0)).round() as u64;
        rec.record_extra("gns_out_bytes_per_s", rate(s.out_bytes_per_sec()));
        rec.record_extra("gns_in_bytes_per_s", rate(s.in_bytes_per_sec()));
        rec.record_extra("gns_out_packets_per_s", rate(s.out_packets_per_sec()));
        rec.record_extra("gns_in_packets_per_s", rate(s.in_packets_per_sec()));
        rec.record_extra(
            "gns_pending_bytes",
            u64::from(s.pending_bytes_reliable())
                + u64::from(s.pending_bytes_unreliable())
                + u64::from(s.bytes_sent_unacked_reliable()),
        );
    }

    fn finish(&mut self, _now: Instant, _rec: &mut Recorder) {
        for link in self.links.iter().flatten() {
            let _ = link
                .sock
                .flush_messages_on_connection(link.sock.connection());
        }
    }

    fn is_idle(&self) -> bool {
        // Closed connections linger inside GNS, which finishes them in its own thread.
        self.active.is_empty()
    }
}

/// A reference server's GNS listen socket.
pub struct GnsServerSide {
    global: &'static GnsGlobal,
    sock: GnsSocket<IsServer>,
    local: SocketAddr,
    /// Players the server takes, plus room for those being refused politely.
    max_conns: usize,
    by_conn: HashMap<ConnId, GnsConnection>,
    by_gns: HashMap<GnsConnection, ConnId>,
    next_conn: u64,
    next_poll: Instant,
    /// Connections that were sent something since the last flush.
    dirty: Vec<GnsConnection>,
    /// What the transport lost or refused, reported with the server's own counters.
    counters: NamedCounters,
    buf: Vec<u8>,
}

impl GnsServerSide {
    /// Listen on `bind` (port 0: one the system picks).
    pub fn listen(bind: SocketAddr, max_peers: usize, now: Instant) -> std::io::Result<Self> {
        let global = global()?;
        let listen = |port: u16| {
            GnsSocket::<IsCreated>::new(global)
                .listen(bind.ip(), port)
                .map_err(|e| {
                    std::io::Error::other(format!(
                        "GNS listen on {}: {e}",
                        SocketAddr::new(bind.ip(), port)
                    ))
                })
        };
        let sock = if bind.port() != 0 {
            listen(bind.port())?
        } else {
            // GNS refuses port 0: take a port the system offers for UDP and listen there, a
            // few times over in case someone else takes it in between.
            let mut tries = 0;
            loop {
                let port = std::net::UdpSocket::bind(SocketAddr::new(bind.ip(), 0))?
                    .local_addr()?
                    .port();
                match listen(port) {
                    Ok(s) => break s,
                    Err(_) if tries < 8 => tries += 1,
                    Err(e) => return Err(e),
                }
            }
        };
        let local = sock
            .get_listen_socket_address()
            .map(|(ip, port)| {
                // Listening on every interface reports the unspecified address: keep the one
                // asked for, with the port GNS bound.
                let ip = if ip.is_unspecified() { bind.ip() } else { ip };
                SocketAddr::new(unmap(ip), port)
            })
            .unwrap_or(bind);
        Ok(Self {
            global,
            sock,
            local,
            max_conns: max_peers.max(1) + 16,
            by_conn: HashMap::new(),
            by_gns: HashMap::new(),
            next_conn: 0,
            next_poll: now,
            dirty: Vec::new(),
            counters: NamedCounters::default(),
            buf: vec![0; crate::protocol::MAX_MESSAGE],
        })
    }
}

/// An IPv4 address GNS reports as IPv4-mapped IPv6, as the IPv4 address it is.
fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

impl ServerTransport for GnsServerSide {
    fn on_datagram(
        &mut self,
        _now: Instant,
        _from: SocketAddr,
        _data: &[u8],
        _server: &mut dyn Server,
    ) {
        // GNS reads its own socket: the driver binds none for it.
    }

    fn service(&mut self, now: Instant, server: &mut dyn Server) {
        self.next_poll = now + POLL_INTERVAL;
        self.global.poll_callbacks();
        // One event at a time: the queue is not borrowed while the server handles it.
        while let Some(ev) = self.sock.receive_events().next() {
            let c = ev.connection();
            match ev.info().state() {
                State::k_ESteamNetworkingConnectionState_Connecting => {
                    if self.by_gns.len() >= self.max_conns {
                        self.counters.add("gns_refused_full", 1);
                        let _ = self.sock.close_connection(c, END_APP, None, false);
                    } else if self.sock.accept(c).is_err() {
                        self.counters.add("gns_accept_failed", 1);
                        let _ = self.sock.close_connection(c, END_APP, None, false);
                    }
                }
                State::k_ESteamNetworkingConnectionState_Connected => {
                    let id = ConnId(self.next_conn);
                    self.next_conn += 1;
                    self.by_gns.insert(c, id);
                    self.by_conn.insert(id, c);
                    server.handle_connect(now, id);
                }
                State::k_ESteamNetworkingConnectionState_ClosedByPeer
                | State::k_ESteamNetworkingConnectionState_ProblemDetectedLocally => {
                    let name = if ev.info().state()
                        == State::k_ESteamNetworkingConnectionState_ClosedByPeer
                    {
                        "gns_closed_by_peer"
                    } else {
                        "gns_problem_detected_locally"
                    };
                    self.counters.add(name, 1);
                    if let Some(id) = self.by_gns.remove(&c) {
                        self.by_conn.remove(&id);
                        server.handle_disconnect(now, id);
                    }
                    // The handle stays ours until closed.
                    let _ = self.sock.close_connection(c, END_APP, None, false);
                }
                _ => {}
            }
        }
        loop {
            let Ok(msgs) = self.sock.receive_messages::<RECV_BATCH>() else {
                break;
            };
            let n = msgs.len();
            for m in msgs {
                match self.by_gns.get(&m.connection()) {
                    Some(&id) => server.handle_datagram(now, id, m.payload()),
                    None => self.counters.add("gns_message_unknown_connection", 1),
                }
            }
            if n < RECV_BATCH {
                break;
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_poll)
    }

    fn poll_datagram(
        &mut self,
        _now: Instant,
        server: &mut dyn Server,
        _buf: &mut [u8],
    ) -> Option<(SocketAddr, usize)> {
        // GNS sends itself: the server's messages go to their connections here, then the
        // sessions it is done with are closed once their queued messages are out.
        let mut batch = Vec::new();
        while let Some((to, t)) = server.poll_transmit(&mut self.buf) {
            let bytes = &self.buf[..t.len.min(self.buf.len())];
            match self.by_conn.get(&to) {
                Some(&c) => {
                    batch.push(self.global.utils().allocate_message(
                        c,
                        flags(&t),
                        Box::<[u8]>::from(bytes),
                    ));
                    if !self.dirty.contains(&c) {
                        self.dirty.push(c);
                    }
                }
                None => self.counters.add("gns_no_connection", 1),
            }
        }
        if !batch.is_empty() {
            for outcome in self.sock.send_messages(batch) {
                match outcome {
                    SendOutcome::Sent(_) => {}
                    SendOutcome::Failed(r, _) => {
                        self.counters.add2("gns_send_failed", send_failure(r), 1)
                    }
                    SendOutcome::Skipped(_) => self.counters.add("gns_send_skipped", 1),
                }
            }
        }
        for c in self.dirty.drain(..) {
            let _ = self.sock.flush_messages_on_connection(c);
        }
        while let Some(id) = server.poll_close() {
            if let Some(c) = self.by_conn.remove(&id) {
                self.by_gns.remove(&c);
                let _ = self
                    .sock
                    .close_connection(c, END_APP, Some(c"closed by the server"), true);
            }
        }
        None
    }

    fn report(&self, stats: &mut ServerStats) {
        stats.connections = self.by_conn.len();
        stats.events.merge(&self.counters);
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        Some(self.local)
    }
}
