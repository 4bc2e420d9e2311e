//! ENet: sessions with channels, reliability, fragmentation and ENet's own RTT.
//!
//! Bots: an ENet host per `bots_per_socket` bots to the same server from the same source
//! address, each host on one socket (a [`Source`]); each bot is a peer of its host. Bots of
//! a shared socket share its source address, so with `engine.source_addresses` a host takes
//! only bots of its address: each address gets its round-robin share of the bots, in
//! sockets of up to `bots_per_socket`. Servers: one host; each ENet session
//! is a connection, whatever address it comes from (bots sharing a socket, players behind one
//! NAT), and a reused peer slot gets a new connection id.
//!
//! Round trips: every acknowledged reliable command of a bot's session (ENet's PINGs
//! included) is one sample of `enet_ack_rtt_us`, in microseconds, timed by the host
//! ([`EnetHost::poll_rtt_sample`]). Where the protocol has no RTT probe of its own
//! ([`EnetBots::new`]'s `rtt_is_main`), the same samples are the run's `rtt_us`.
//!
//! Sends: a host's datagrams go to the worker's io_uring batch ([`UringBatch`]), the one
//! raw-UDP bots use, and leave with every other host's datagrams of the same wake-up in one
//! `io_uring_enter` at [`BotTransport::submit`] (`TICKSWARM_IO=plain`, or a kernel without
//! io_uring: one `send()` each, as before). Why not `sendmmsg` per host flush, which a
//! host's one socket would allow: measured (`benches/send_batch.rs`, 60 host sockets), a
//! `sendmmsg` of K datagrams cost 0.92-1.09x K `send()`s per datagram for K from 1 to 50,
//! while io_uring across hosts cost 0.45-0.58x; and a flush rarely holds many datagrams (the
//! bots of a host are spread over the input period), while a wake-up holds those of every
//! host. A wake-up with a single datagram sends it with a plain `send()` (cheaper than an
//! `io_uring_enter` for one). Datagrams keep their order per socket (submission order), a
//! full socket buffer is `would_block` as before, and the simulated path (`network:`) sits
//! between the host and the batch exactly as it sat before the socket.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::{BotTransport, DownReason, LinkEvents, Opened, ServerTransport, Slot, Source, Watch};
use crate::engine::io::send_batch::{IoMode, SendPath, UringBatch, WorkerSends};
use crate::engine::io::sim_path::{PathConditions, SimPath};
use crate::engine::io::socket::bot::BotSocket;
use crate::metrics::describe::MetricDesc;
use crate::metrics::{NamedCounters, Recorder, ServerStats};
use crate::protocol::{ConnId, Server, Transmit};
use crate::transport::{
    DisconnectReason, EnetConfig, EnetEvent, EnetHost, PeerId, MAX_ENET_DATAGRAM,
};

/// An ENet host with its socket, shared by up to `peer_limit` bots.
struct Group {
    sock: Rc<BotSocket>,
    peer_addr: SocketAddr,
    /// The source address the socket is bound to (`None`: the wildcard).
    source: Option<IpAddr>,
    /// The scenario group of the bots on this host (each group has its own path).
    bot_group: super::GroupId,
    host: EnetHost,
    /// Bot slot by ENet peer index.
    peers: Vec<Option<Slot>>,
    members: usize,
    /// Something was queued since the last flush.
    dirty: bool,
    /// In `EnetBots::to_flush` for the end of this wake-up.
    flush_pending: bool,
    /// Events taken out of the host during a relink, handed out at the next drain.
    deferred: std::collections::VecDeque<EnetEvent>,
    /// The simulated network path between the host and its socket (`network:`).
    path: Option<SimPath>,
    /// The host's forged and early acknowledgements already counted as events.
    acks_counted: (u64, u64),
}

/// The ENet hosts of one worker's bots.
pub struct EnetBots {
    cfg: EnetConfig,
    channels: usize,
    groups: Vec<Group>,
    /// (group, peer) by bot slot.
    links: Vec<Option<(Source, PeerId)>>,
    /// Datagram buffer for the host's output.
    buf: Vec<u8>,
    /// Sessions opened and not yet reported down.
    live: usize,
    /// The acknowledgement round trips are also the run's `rtt_us`.
    rtt_is_main: bool,
    /// By scenario group: its `network:`, if any: the hosts of its bots put every datagram
    /// through it.
    network: Vec<Option<PathConditions>>,
    /// Hosts a bot queued on since the last [`BotTransport::submit`], and the instant of the
    /// wake-up that did: they are flushed once each at the end of the wake-up instead of once
    /// per bot. A flush packs and sends what every peer of the host has queued, so bots of
    /// one host due at the same instant share one pass (and one datagram per peer).
    to_flush: Vec<Source>,
    flush_at: Option<Instant>,
    /// Kernel buffers each host socket asks for (`None`: the socket's default).
    socket_buffers: Option<super::socket::SocketBuffers>,
    /// The worker's way to the kernel: every host's datagrams of one wake-up leave together
    /// at [`BotTransport::submit`] through io_uring, or one `send()` each.
    sends: WorkerSends,
    /// The shortest handshake any of the worker's hosts timed, per server: every host to
    /// that server gets it as the base of its floor under acknowledgement samples
    /// (`transport/enet/ack_rtt.rs`). A handful of servers at most: a list.
    shortest_handshake: Vec<(SocketAddr, Duration)>,
}

/// A host's datagram carries messages ENet already counted when the bots queued them: it is
/// counted on the wire only.
const ONE_MESSAGE_EACH: bool = false;

impl EnetBots {
    /// Bots' hosts with these settings. `rtt_is_main`: the protocol measures no RTT itself
    /// (its server answers no ping), so the acknowledgement round trips are also `rtt_us`.
    /// They send through io_uring unless `TICKSWARM_IO=plain` or the kernel refuses it.
    pub fn new(cfg: EnetConfig, channels: usize, rtt_is_main: bool) -> Self {
        Self::with_send_path(
            cfg,
            channels,
            rtt_is_main,
            IoMode::from_env(),
            UringBatch::new,
        )
    }

    /// [`EnetBots::new`] with the send path chosen by `mode` and `ring` (tests force either).
    pub fn with_send_path(
        cfg: EnetConfig,
        channels: usize,
        rtt_is_main: bool,
        mode: IoMode,
        ring: impl FnOnce() -> std::io::Result<UringBatch>,
    ) -> Self {
        Self {
            sends: WorkerSends::new(mode, ring),
            cfg,
            channels,
            groups: Vec::new(),
            links: Vec::new(),
            buf: vec![0; MAX_ENET_DATAGRAM],
            live: 0,
            rtt_is_main,
            to_flush: Vec::new(),
            flush_at: None,
            socket_buffers: None,
            network: Vec::new(),
            shortest_handshake: Vec::new(),
        }
    }

    /// Put the datagrams of each group's hosts through its simulated path `network[group]`.
    pub fn with_network(mut self, network: Vec<Option<PathConditions>>) -> Self {
        self.network = network;
        self
    }

    /// Host sockets ask the kernel for `b` (the plan's size for a host's bots).
    pub fn with_socket_buffers(mut self, b: Option<super::socket::SocketBuffers>) -> Self {
        self.socket_buffers = b;
        self
    }

    /// Record the round trips group `gi`'s host measured, for the peers that carry a bot.
    fn record_rtt(&mut self, gi: Source, rec: &mut Recorder) {
        let main = self.rtt_is_main;
        let Some(g) = self.groups.get_mut(gi) else {
            return;
        };
        while let Some((peer, rtt)) = g.host.poll_rtt_sample() {
            if !matches!(g.peers.get(peer.index()), Some(Some(_))) {
                continue;
            }
            let us = rtt.as_micros() as u64;
            rec.record_extra("enet_ack_rtt_us", us);
            if main {
                rec.record_rtt(us);
            }
        }
        // The floor under this host's samples: half the shortest handshake to its server
        // that any host of the worker timed.
        // A host that timed no handshake yet has no session to measure.
        if let Some(own) = g.host.ack_handshake() {
            let shortest = match self
                .shortest_handshake
                .iter_mut()
                .find(|(a, _)| *a == g.peer_addr)
            {
                Some((_, d)) => {
                    *d = (*d).min(own);
                    *d
                }
                None => {
                    self.shortest_handshake.push((g.peer_addr, own));
                    own
                }
            };
            g.host.share_ack_handshake(shortest);
        }
        // Acknowledgements that were no samples (forged, or back sooner than the floor):
        // events, so a run says why its RTT count is short.
        let a = g.host.stats().ack_rtt;
        let (forged, early) = g.acks_counted;
        if a.forged > forged {
            rec.events.add("enet_ack_forged", a.forged - forged);
        }
        if a.early > early {
            rec.events.add("enet_ack_early", a.early - early);
        }
        g.acks_counted = (a.forged, a.early);
    }

    /// Service group `gi` and turn its events into link events.
    fn drain_events(&mut self, gi: Source, out: &mut LinkEvents) {
        let Some(g) = self.groups.get_mut(gi) else {
            return;
        };
        while let Some(ev) = g.deferred.pop_front().or_else(|| g.host.poll_event()) {
            match ev {
                EnetEvent::Connected { peer, .. } => {
                    if let Some(Some(slot)) = g.peers.get(peer.index()) {
                        out.up(*slot);
                    }
                }
                EnetEvent::Received { peer, packet, .. } => {
                    if let Some(Some(slot)) = g.peers.get(peer.index()) {
                        out.data(*slot, &packet);
                    }
                }
                EnetEvent::Disconnected { peer, reason, .. } => {
                    if let Some(slot) = g.peers.get_mut(peer.index()).and_then(Option::take) {
                        self.live = self.live.saturating_sub(1);
                        let why = match reason {
                            DisconnectReason::ConnectFailed => DownReason::ConnectFailed,
                            DisconnectReason::Remote => DownReason::ClosedByServer,
                            DisconnectReason::Local => DownReason::Closed,
                        };
                        out.down(slot, why);
                    }
                }
            }
        }
    }

    /// Flush each host a bot queued on since the last submit, once.
    fn flush_hosts(&mut self, recs: &mut [Recorder]) {
        let Some(now) = self.flush_at.take() else {
            return;
        };
        let last = recs.len().saturating_sub(1);
        let mut hosts = std::mem::take(&mut self.to_flush);
        for gi in hosts.drain(..) {
            let Some(g) = self.groups.get_mut(gi) else {
                continue;
            };
            g.flush_pending = false;
            // Flushed meanwhile (a close, a relink, the host's own timer): nothing left.
            if !g.dirty {
                continue;
            }
            let Some(rec) = recs.get_mut(g.bot_group.min(last)) else {
                continue;
            };
            self.flush_group(gi, now, rec);
        }
        // The list's capacity is kept for the next wake-up.
        self.to_flush = hosts;
    }

    /// The send path this worker uses.
    pub fn send_path(&self) -> SendPath {
        self.sends.path()
    }

    /// Pack what the host has queued into datagrams and send them on its socket, counted in
    /// `rec`, which is the recorder of the host's group (batched: counted there at submit).
    fn flush_group(&mut self, gi: Source, now: Instant, rec: &mut Recorder) {
        let group = self.groups.get(gi).map_or(0, |g| g.bot_group);
        self.flush_group_into(gi, now, group, rec);
    }

    /// [`EnetBots::flush_group`] counted in group `group` (the recorder `rec` is).
    fn flush_group_into(&mut self, gi: Source, now: Instant, group: usize, rec: &mut Recorder) {
        let Some(g) = self.groups.get_mut(gi) else {
            return;
        };
        g.dirty = false;
        // After a service nothing is left to flush, and ENet's flush walks every peer.
        if g.host.has_unflushed() {
            g.host.flush(now);
        }
        let (sock, sends) = (&g.sock, &mut self.sends);
        let mut send =
            |d: &[u8], rec: &mut Recorder| sends.send(sock, group, d, rec, ONE_MESSAGE_EACH);
        while let Some((_, len)) = g.host.poll_transmit(&mut self.buf) {
            let datagram = &self.buf[..len.min(self.buf.len())];
            match g.path.as_mut() {
                Some(path) => path.send(now, datagram, |d| send(d, rec)),
                None => send(datagram, rec),
            }
        }
        if let Some(path) = g.path.as_mut() {
            path.send_due(now, |d| send(d, rec));
            path.record(rec);
        }
    }
}

impl BotTransport for EnetBots {
    const NAME: &'static str = "enet";
    const METRICS: &'static [MetricDesc] = &[
        MetricDesc::micros(
            "enet_ack_rtt_us",
            "ENet ack RTT",
            "one sample per acknowledged reliable command (ENet's pings included): sent to acknowledged, in µs",
        ),
        MetricDesc::micros(
            "enet_rtt_us",
            "ENet RTT estimate",
            "ENet's own smoothed estimate (whole milliseconds), read per bot each second",
        )
        .display(crate::metrics::describe::Display::Table),
        MetricDesc::micros(
            "transport_handshake_us",
            "ENet handshake",
            "CONNECT to VERIFY_CONNECT, before the protocol's own handshake",
        ),
        MetricDesc::micros(
            "connect_total_us",
            "Connect, end to end",
            "ENet handshake plus the protocol handshake: what a player waits",
        ),
        MetricDesc::histogram(
            "enet_packet_loss_ppm",
            "ENet packet loss",
            "ENet's own estimate of its reliable packets lost, sampled per bot each second; ENet recomputes it every 10 s, so it reads about 0 for a run's first 10 s",
            "ppm",
        ),
    ];

    fn open(
        &mut self,
        slot: Slot,
        group: super::GroupId,
        peer_addr: SocketAddr,
        source: Option<IpAddr>,
        now: Instant,
        rec: &mut Recorder,
    ) -> std::io::Result<Opened> {
        let per_socket = self.cfg.peer_limit;
        let open = self.groups.iter().position(|g| {
            g.peer_addr == peer_addr
                && g.source == source
                && g.bot_group == group
                && g.members < per_socket
        });
        let (gi, watch) = match open {
            Some(gi) => (gi, None),
            None => {
                let sock = Rc::new(BotSocket::connect_to(
                    peer_addr,
                    source,
                    self.socket_buffers,
                )?);
                let host = EnetHost::new(now, &self.cfg)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                self.groups.push(Group {
                    sock: sock.clone(),
                    peer_addr,
                    source,
                    bot_group: group,
                    host,
                    peers: vec![None; per_socket],
                    members: 0,
                    dirty: false,
                    flush_pending: false,
                    deferred: Default::default(),
                    acks_counted: (0, 0),
                    path: self
                        .network
                        .get(group)
                        .and_then(Option::as_ref)
                        .map(|c| SimPath::new(c, self.groups.len() as u64, now)),
                });
                (self.groups.len() - 1, Some(Watch::Socket(sock)))
            }
        };
        let g = &mut self.groups[gi];
        let peer = g
            .host
            .connect(now, peer_addr, self.channels, slot as u32)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        if let Some(p) = g.peers.get_mut(peer.index()) {
            *p = Some(slot);
        }
        g.members += 1;
        self.live += 1;
        if self.links.len() <= slot {
            self.links.resize(slot + 1, None);
        }
        self.links[slot] = Some((gi, peer));
        self.flush_group(gi, now, rec);
        Ok(Opened {
            source: gi,
            watch,
            up: false,
        })
    }

    fn relink(
        &mut self,
        slot: Slot,
        group: super::GroupId,
        peer_addr: SocketAddr,
        source: Option<IpAddr>,
        now: Instant,
        rec: &mut Recorder,
    ) -> std::io::Result<Opened> {
        if let Some((gi, peer)) = self.links.get_mut(slot).and_then(Option::take) {
            if let Some(g) = self.groups.get_mut(gi) {
                // Forget the peer first, so its Disconnected event reaches no bot.
                if let Some(p) = g.peers.get_mut(peer.index()) {
                    *p = None;
                }
                g.members = g.members.saturating_sub(1);
                let _ = g.host.disconnect_now(now, peer, 0);
                self.live = self.live.saturating_sub(1);
                // disconnect_now queues the old peer's Disconnected at once, and the new
                // session may get the same peer index: drop that event here, or it would
                // reach the bot as the end of its new session.
                while let Some(ev) = g.host.poll_event() {
                    let stale = matches!(ev, EnetEvent::Disconnected { peer: p, .. } if p == peer);
                    if !stale {
                        g.deferred.push_back(ev);
                    }
                }
            }
            self.flush_group(gi, now, rec);
        }
        self.open(slot, group, peer_addr, source, now, rec)
    }

    fn poll_retired(&mut self) -> Option<Source> {
        // Hosts outlive their bots (a slot freed by a relink takes the next bot).
        None
    }

    fn send(&mut self, slot: Slot, t: &Transmit, bytes: &[u8], _now: Instant, rec: &mut Recorder) {
        let Some(Some((gi, peer))) = self.links.get(slot).copied() else {
            return;
        };
        let Some(g) = self.groups.get_mut(gi) else {
            return;
        };
        match g.host.send(peer, t.channel, t.reliable, bytes) {
            Ok(()) => {
                rec.datagram_up(bytes.len());
                g.dirty = true;
            }
            Err(_) => rec.send_errors.add2("enet", "not_queued", 1),
        }
    }

    fn flush(&mut self, slot: Slot, now: Instant, _rec: &mut Recorder) {
        if let Some(Some((gi, _))) = self.links.get(slot).copied() {
            if let Some(g) = self.groups.get_mut(gi).filter(|g| g.dirty) {
                if !g.flush_pending {
                    g.flush_pending = true;
                    self.to_flush.push(gi);
                }
                self.flush_at = Some(now);
            }
        }
    }

    fn submit(&mut self, recs: &mut [Recorder]) {
        self.flush_hosts(recs);
        // Every host's datagrams of this wake-up (the flushes above, and those a receive, a
        // host timer, an open or a close made since the last submit): one system call for
        // up to `BATCH` of them, on as many sockets.
        self.sends.submit(recs);
    }

    fn close(&mut self, slot: Slot, now: Instant, rec: &mut Recorder) {
        let Some(Some((gi, peer))) = self.links.get(slot).copied() else {
            return;
        };
        if let Some(g) = self.groups.get_mut(gi) {
            let _ = g.host.disconnect(now, peer, 0);
        }
        self.flush_group(gi, now, rec);
    }

    fn on_datagrams<'a>(
        &mut self,
        src: Source,
        now: Instant,
        datagrams: impl Iterator<Item = &'a [u8]>,
        rec: &mut Recorder,
        out: &mut LinkEvents,
    ) {
        let Some(g) = self.groups.get_mut(src) else {
            return;
        };
        let from = g.peer_addr;
        match g.path.as_mut() {
            Some(path) => {
                let host = &mut g.host;
                for d in datagrams {
                    path.receive(now, d, |d| host.handle_datagram(now, from, d));
                }
            }
            None => {
                for d in datagrams {
                    g.host.handle_datagram(now, from, d);
                }
            }
        }
        g.host.service(now);
        self.record_rtt(src, rec);
        self.drain_events(src, out);
        self.flush_group(src, now, rec);
    }

    fn on_timer(&mut self, src: Source, now: Instant, rec: &mut Recorder, out: &mut LinkEvents) {
        let Some(g) = self.groups.get_mut(src) else {
            return;
        };
        // Held datagrams of the simulated path first: the host then sees what arrived.
        if let Some(path) = g.path.as_mut() {
            let (host, from) = (&mut g.host, g.peer_addr);
            path.deliver_due(now, |d| host.handle_datagram(now, from, d));
        }
        g.host.service(now);
        self.record_rtt(src, rec);
        self.drain_events(src, out);
        self.flush_group(src, now, rec);
    }

    fn poll_timeout(&self, src: Source) -> Option<Instant> {
        let g = self.groups.get(src)?;
        let path = g.path.as_ref().and_then(SimPath::next_due);
        // A host in `to_flush` is flushed at this wake-up's submit: what its bots queued needs
        // no timer (the host's own says "now" for it, and a service per bot input would walk
        // the host's peers several times).
        let host = if g.flush_pending {
            g.host.poll_service_timeout()
        } else {
            g.host.poll_timeout()
        };
        match (host, path) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn sample(&self, slot: Slot, rec: &mut Recorder) {
        let Some(Some((gi, peer))) = self.links.get(slot).copied() else {
            return;
        };
        let Some(g) = self.groups.get(gi) else {
            return;
        };
        if let Some(rtt) = g.host.rtt(peer) {
            rec.record_extra("enet_rtt_us", rtt.as_micros() as u64);
        }
        if let Some(loss) = g.host.packet_loss(peer) {
            rec.record_extra("enet_packet_loss_ppm", (loss * 1e6) as u64);
        }
    }

    fn finish(&mut self, now: Instant, rec: &mut Recorder) {
        // Counted in the recorder given (the first group's), on either path.
        for gi in 0..self.groups.len() {
            self.flush_group_into(gi, now, 0, rec);
        }
    }

    fn is_idle(&self) -> bool {
        self.live == 0
    }
}

/// How long a session the server closed may take to finish ENet's polite disconnect (its
/// last messages, the DISCONNECT and its acknowledgement) before the peer slot is freed at
/// once. Far above a loopback or WAN round trip, far below ENet's 5-30 s peer timeout.
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// A reference server's ENet host.
pub struct EnetServerSide {
    host: EnetHost,
    by_conn: HashMap<ConnId, PeerId>,
    /// Sessions the server closed whose ENet disconnect is still under way.
    closing: std::collections::HashSet<ConnId>,
    /// When each of those is cut off if the peer has not acknowledged its disconnect, so a
    /// refused or hostile client cannot hold a peer slot for ENet's whole timeout.
    close_deadlines: VecDeque<(Instant, ConnId)>,
    by_peer: Vec<Option<ConnId>>,
    next_conn: u64,
    /// The server's output has been moved into the host and flushed.
    collected: bool,
    /// What the transport lost or refused, reported with the server's own counters.
    counters: NamedCounters,
    buf: Vec<u8>,
}

impl EnetServerSide {
    pub fn new(cfg: EnetConfig, now: Instant) -> Result<Self, crate::transport::EnetError> {
        let host = EnetHost::new(now, &cfg)?;
        let peers = host.peer_limit();
        Ok(Self {
            host,
            by_conn: HashMap::new(),
            closing: Default::default(),
            close_deadlines: VecDeque::new(),
            by_peer: vec![None; peers],
            next_conn: 0,
            collected: false,
            counters: NamedCounters::default(),
            // Holds a protocol's whole message (ENet fragments it), and a datagram.
            buf: vec![0; MAX_ENET_DATAGRAM.max(crate::protocol::MAX_MESSAGE)],
        })
    }

    /// ENet peer slots in use (connecting, connected or disconnecting).
    pub fn peers_in_use(&self) -> usize {
        self.host.peers_in_use()
    }

    fn events(&mut self, now: Instant, server: &mut dyn Server) {
        while let Some(ev) = self.host.poll_event() {
            match ev {
                EnetEvent::Connected { peer, .. } => {
                    let conn = ConnId(self.next_conn);
                    self.next_conn += 1;
                    self.by_conn.insert(conn, peer);
                    if let Some(slot) = self.by_peer.get_mut(peer.index()) {
                        *slot = Some(conn);
                    }
                    server.handle_connect(now, conn);
                }
                EnetEvent::Received { peer, packet, .. } => {
                    if let Some(Some(conn)) = self.by_peer.get(peer.index()) {
                        server.handle_datagram(now, *conn, &packet);
                    }
                }
                EnetEvent::Disconnected { peer, .. } => {
                    if let Some(conn) = self.by_peer.get_mut(peer.index()).and_then(Option::take) {
                        self.by_conn.remove(&conn);
                        self.closing.remove(&conn);
                        server.handle_disconnect(now, conn);
                    }
                }
            }
        }
        self.collected = false;
    }
}

impl ServerTransport for EnetServerSide {
    fn on_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        data: &[u8],
        _server: &mut dyn Server,
    ) {
        self.host.handle_datagram(now, from, data);
        self.collected = false;
    }

    fn service(&mut self, now: Instant, server: &mut dyn Server) {
        self.host.service(now);
        self.events(now, server);
        while let Some(&(at, conn)) = self.close_deadlines.front() {
            if at > now {
                break;
            }
            self.close_deadlines.pop_front();
            if !self.closing.contains(&conn) {
                continue;
            }
            if let Some(&peer) = self.by_conn.get(&conn) {
                self.counters.add("enet_close_forced", 1);
                let _ = self.host.disconnect_now(now, peer, 0);
            }
        }
        self.events(now, server);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.host.poll_timeout()
    }

    fn poll_datagram(
        &mut self,
        now: Instant,
        server: &mut dyn Server,
        buf: &mut [u8],
    ) -> Option<(SocketAddr, usize)> {
        if !self.collected {
            // The server's messages go to their connection's ENet peer with the protocol's
            // channel and reliability, then the sessions it is done with are closed.
            self.collected = true;
            while let Some((to, t)) = server.poll_transmit(&mut self.buf) {
                match self.by_conn.get(&to) {
                    Some(&peer) => {
                        if self.host.send_transmit(peer, &t, &self.buf).is_err() {
                            self.counters.add("enet_send_refused", 1);
                        }
                    }
                    None => self.counters.add("enet_no_session", 1),
                }
            }
            while let Some(conn) = server.poll_close() {
                if let Some(&peer) = self.by_conn.get(&conn) {
                    if self.closing.insert(conn) {
                        self.close_deadlines.push_back((now + CLOSE_GRACE, conn));
                    }
                    let _ = self.host.disconnect(now, peer, 0);
                }
            }
            self.host.flush(now);
        }
        self.host.poll_transmit(buf)
    }

    fn report(&self, stats: &mut ServerStats) {
        let h = self.host.stats();
        for (name, n) in [
            ("enet_half_open_expired", h.half_open_expired),
            ("enet_half_open_evicted", h.half_open_evicted),
            ("enet_gated_datagrams_out", h.gated_out),
            ("enet_sessions_superseded", h.superseded),
            ("enet_forged_proofs", h.forged_proofs),
        ] {
            if n > 0 {
                stats.events.add(name, n);
            }
        }
        // Open sessions: a session the server closed is on its way out.
        stats.connections = self.by_conn.len().saturating_sub(self.closing.len());
        stats.events.merge(&self.counters);
        let h = self.host.stats();
        stats.events.add("enet_datagrams_dropped_in", h.dropped_in);
        stats
            .events
            .add("enet_datagrams_dropped_out", h.dropped_out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::io::{enet_config, EnetRole};
    use crate::protocol::registry::EnetNeeds;

    /// Bots sharing a host share its socket, so a host takes only bots of one source
    /// address; a relinked bot goes back to a host of its own address.
    #[test]
    fn hosts_are_shared_only_by_bots_of_one_source_address() {
        let rt = crate::engine::io::test_runtime();
        let _guard = rt.enter();
        let now = Instant::now();
        let mut rec = Recorder::new();
        let needs = EnetNeeds {
            channels: 2,
            compression: Default::default(),
        };
        let cfg = enet_config(EnetRole::Bots { per_socket: 4 }, &needs, true);
        let mut t = EnetBots::new(cfg, 2, false);
        // The discard port: nothing answers, and nothing needs to.
        let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let (x, y): (IpAddr, IpAddr) = ("127.0.4.1".parse().unwrap(), "127.0.4.2".parse().unwrap());
        let bound = |t: &EnetBots, gi: Source| t.groups[gi].sock.local_addr().unwrap().ip();
        let a = t.open(0, 0, peer, Some(x), now, &mut rec).unwrap();
        let b = t.open(1, 0, peer, Some(y), now, &mut rec).unwrap();
        let c = t.open(2, 0, peer, Some(x), now, &mut rec).unwrap();
        assert_ne!(a.source, b.source);
        assert_eq!(a.source, c.source);
        assert!(c.watch.is_none(), "bot 2 joins bot 0's host");
        assert_eq!((bound(&t, a.source), bound(&t, b.source)), (x, y));
        let moved = t.relink(1, 0, peer, Some(y), now, &mut rec).unwrap();
        assert_eq!(bound(&t, moved.source), y);
        assert_eq!(t.groups.len(), 2);
    }
}
