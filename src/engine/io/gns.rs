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
//! **What is measured.** The engine never sees GNS's datagrams, but GNS counts every UDP
//! payload it sends and receives on a connection (handshake, data, acks, keep-alives; its
//! header and encryption included) and prints the lifetime totals in its detailed connection
//! status, the only place its API gives them. The bots' `wire_*` counters are those totals
//! ([`parse_totals`]), read each second and when a connection closes: exact up to the
//! moment the bot closed the connection (GNS's own close packet and anything it lingers to
//! resend after that are not seen). Beside them, what GNS's real-time status tells is
//! sampled per bot each second ([`BotTransport::sample`]): ping, connection quality, its
//! rate estimates (bytes and packets per second over its last 5-second interval) and the
//! bytes still queued.
//!
//! **Allocation.** GNS allocates a message object per send in its own code (its API has no
//! other way to send); the transport adds one boxed copy of the payload per message, and
//! batches a flush's messages into one `SendMessages` call.

use std::cell::Cell;
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

/// Messages taken from one connection per poll: a server that floods one bot leaves the rest
/// in GNS's queue for the next poll, which then comes at once, instead of keeping the worker
/// from its timers and the stop signal (the raw-UDP receive turn's rule, issue 35).
const RECV_TURN_MESSAGES: usize = super::RECV_TURN_DATAGRAMS;

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

/// Lifetime totals of one connection as GNS counts them: every UDP payload it sent or
/// received on the connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireTotals {
    pub packets_sent: u64,
    pub bytes_sent: u64,
    pub packets_recv: u64,
    pub bytes_recv: u64,
}

/// The totals in a detailed connection status (`GetDetailedConnectionStatus`), as GNS
/// (`LinkStatsPrintToBuf`) prints them:
///
/// ```text
///     Lifetime stats:
///         Totals
///             Sent:      1,234 pkts         567,890 bytes
///             Recv:        987 pkts          65,432 bytes
/// ```
///
/// The first such block is this end's own count; blocks after "received from remote host"
/// are what the peer reported (rounded to KB) and are not read. `None` when the block is
/// missing (nothing sent yet) or not laid out as above.
pub fn parse_totals(text: &str) -> Option<WireTotals> {
    let (_, after) = text.split_once("Lifetime stats:")?;
    let own = after.split("received from remote host").next()?;
    let line = |label: &str| -> Option<(u64, u64)> {
        let l = own
            .lines()
            .map(str::trim_start)
            .find(|l| l.starts_with(label))?;
        let num = |t: &str| t.replace(',', "").parse::<u64>().ok();
        match l.split_whitespace().collect::<Vec<_>>().as_slice() {
            [_, pkts, "pkts", bytes, "bytes"] => Some((num(pkts)?, num(bytes)?)),
            _ => None,
        }
    };
    let (packets_sent, bytes_sent) = line("Sent:")?;
    let (packets_recv, bytes_recv) = line("Recv:")?;
    Some(WireTotals {
        packets_sent,
        bytes_sent,
        packets_recv,
        bytes_recv,
    })
}

/// A connection's lifetime totals, from GNS.
fn read_totals<S: gns::IsReady>(sock: &GnsSocket<S>, conn: GnsConnection) -> Option<WireTotals> {
    parse_totals(&sock.get_detailed_connection_status(conn)?)
}

/// One bot's connection.
struct Link {
    sock: GnsSocket<IsClient>,
    /// GNS reported the connection connected.
    up: bool,
    /// Totals already added to the bots' wire counters.
    counted: Cell<WireTotals>,
}

impl Link {
    /// Add what GNS counted on the wire since the last call to the bots' wire counters.
    fn account(&self, rec: &mut Recorder) {
        let Some(t) = read_totals(&self.sock, self.sock.connection()) else {
            return;
        };
        let c = self.counted.replace(t);
        rec.wire.packets_up += t.packets_sent.saturating_sub(c.packets_sent);
        rec.wire.bytes_up += t.bytes_sent.saturating_sub(c.bytes_sent);
        rec.wire.packets_down += t.packets_recv.saturating_sub(c.packets_recv);
        rec.wire.bytes_down += t.bytes_recv.saturating_sub(c.bytes_recv);
    }
}

/// The GNS connections of one worker's bots.
#[derive(Default)]
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
        self.links[slot] = Some(Link {
            sock,
            up: false,
            counted: Cell::new(WireTotals::default()),
        });
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

    /// Close bot `slot`'s connection, its wire totals counted first: GNS keeps resending
    /// what was queued reliably (it lingers) and says goodbye to the peer in its own thread;
    /// no event for it reaches the bot.
    fn drop_link(&mut self, slot: Slot, rec: &mut Recorder) {
        if let Some(link) = self.links.get_mut(slot).and_then(Option::take) {
            let conn = link.sock.connection();
            let _ = link.sock.flush_messages_on_connection(conn);
            link.account(rec);
            let _ = link.sock.close_connection(conn, END_APP, None, true);
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
            "share of the server's packets that arrived in order, GNS's judgement of its last \
             5-second interval, sampled per bot each second once judged",
            "%",
        )
        .unit("%", 10),
        MetricDesc::histogram(
            "gns_quality_remote_pct",
            "GNS quality (remote)",
            "share of the bot's packets the server received in order, as the server's GNS \
             reported it, sampled per bot each second once reported",
            "%",
        )
        .unit("%", 10),
        MetricDesc::histogram(
            "gns_out_bytes_per_s",
            "GNS bytes out per second",
            "GNS's rate over its last 5-second interval for one bot's connection, headers, acks \
             and encryption included; sampled per bot each second once measured (exact totals \
             are the wire bandwidth figures)",
            "B/s",
        ),
        MetricDesc::histogram(
            "gns_in_bytes_per_s",
            "GNS bytes in per second",
            "GNS's rate over its last 5-second interval for one bot's connection, headers \
             included; sampled per bot each second once measured",
            "B/s",
        ),
        MetricDesc::histogram(
            "gns_out_packets_per_s",
            "GNS packets out per second",
            "GNS's rate over its last 5-second interval of UDP packets one bot's connection \
             sends; sampled per bot each second once measured",
            "packets/s",
        ),
        MetricDesc::histogram(
            "gns_in_packets_per_s",
            "GNS packets in per second",
            "GNS's rate over its last 5-second interval of UDP packets one bot's connection \
             receives; sampled per bot each second once measured",
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
        _group: super::GroupId,
        peer: SocketAddr,
        // Scenario validation refuses a source pool with GNS: it binds its own sockets.
        _source: Option<std::net::IpAddr>,
        now: Instant,
        _rec: &mut Recorder,
    ) -> std::io::Result<Opened> {
        self.connect(slot, peer, now)
    }

    fn relink(
        &mut self,
        slot: Slot,
        _group: super::GroupId,
        peer: SocketAddr,
        _source: Option<std::net::IpAddr>,
        now: Instant,
        rec: &mut Recorder,
    ) -> std::io::Result<Opened> {
        // What the bot queued before leaving (its DISCONNECT) is flushed and, reliable, kept
        // being retransmitted by GNS while the old connection lingers; the bot hears nothing
        // more from it.
        self.flush_batch(slot, rec);
        self.drop_link(slot, rec);
        self.connect(slot, peer, now)
    }

    fn poll_retired(&mut self) -> Option<Source> {
        None
    }

    fn send(&mut self, slot: Slot, t: &Transmit, bytes: &[u8], _now: Instant, rec: &mut Recorder) {
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
        self.drop_link(slot, rec);
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
        // A connection with more waiting than one turn takes: poll again at once.
        let mut more_waiting = false;
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
                let mut taken = 0;
                loop {
                    let Ok(msgs) = link.sock.receive_messages::<RECV_BATCH>() else {
                        break;
                    };
                    let n = msgs.len();
                    for m in msgs {
                        out.data(slot, m.payload());
                    }
                    taken += n;
                    if n < RECV_BATCH {
                        break;
                    }
                    if taken >= RECV_TURN_MESSAGES {
                        more_waiting = true;
                        break;
                    }
                }
            }
            if let Some(was_up) = ended {
                if let Some(link) = self.links.get_mut(slot).and_then(Option::take) {
                    link.account(rec);
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
            self.next_poll = Some(if more_waiting {
                now
            } else {
                now + POLL_INTERVAL
            });
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
        link.account(rec);
        // GNS says -1 (here u32::MAX) until it has measured a ping.
        if let Ok(ms) = i32::try_from(s.ping()) {
            rec.record_extra("gns_ping_us", u64::from(ms.unsigned_abs()) * 1000);
        }
        // Quality is -1 until GNS has judged a 5-second interval; its arithmetic can pass
        // 1.0 by a hair, so it is clamped to 0..=100 %. Recorded in 1/10 % (exact in the
        // histogram).
        let quality = |q: f32| (f64::from(q.min(1.0)) * 1000.0).round() as u64;
        if s.quality_local() >= 0.0 {
            rec.record_extra("gns_quality_local_pct", quality(s.quality_local()));
        }
        if s.quality_remote() >= 0.0 {
            rec.record_extra("gns_quality_remote_pct", quality(s.quality_remote()));
        }
        // Rates are 0 until the connection's first 5-second interval ends: only measured
        // rates are recorded (a live bot always sends inputs and receives snapshots).
        for (key, v) in [
            ("gns_out_bytes_per_s", s.out_bytes_per_sec()),
            ("gns_in_bytes_per_s", s.in_bytes_per_sec()),
            ("gns_out_packets_per_s", s.out_packets_per_sec()),
            ("gns_in_packets_per_s", s.in_packets_per_sec()),
        ] {
            if v > 0.0 {
                rec.record_extra(key, f64::from(v).round() as u64);
            }
        }
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

impl GnsServerSide {
    /// A connection the server now talks to: its `ConnId`.
    fn admit(&mut self, c: GnsConnection, now: Instant, server: &mut dyn Server) {
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        self.by_gns.insert(c, id);
        self.by_conn.insert(id, c);
        server.handle_connect(now, id);
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
        // Messages before connection events: a client's last messages (a DISCONNECT, a
        // handoff's) reach the server before the close that follows them in the same poll,
        // so the session ends the way the client said, not as a dropped transport.
        loop {
            let Ok(msgs) = self.sock.receive_messages::<RECV_BATCH>() else {
                break;
            };
            let n = msgs.len();
            for m in msgs {
                match self.by_gns.get(&m.connection()) {
                    Some(&id) => server.handle_datagram(now, id, m.payload()),
                    // Queued before the server closed the session.
                    None => self.counters.add("gns_message_after_close", 1),
                }
            }
            if n < RECV_BATCH {
                break;
            }
        }
        // One event at a time: the queue is not borrowed while the server handles it.
        loop {
            let Some(ev) = self.sock.receive_events().next() else {
                break;
            };
            let c = ev.connection();
            match ev.info().state() {
                State::k_ESteamNetworkingConnectionState_Connecting => {
                    if self.by_gns.len() >= self.max_conns {
                        self.counters.add("gns_refused_full", 1);
                        let _ = self.sock.close_connection(c, END_APP, None, false);
                    } else if self.sock.accept(c).is_err() {
                        self.counters.add("gns_accept_failed", 1);
                        let _ = self.sock.close_connection(c, END_APP, None, false);
                    } else {
                        // Accepting connects at once; the client's first messages may be
                        // received before the Connected event is dispatched.
                        self.admit(c, now, server);
                    }
                }
                State::k_ESteamNetworkingConnectionState_Connected
                    if !self.by_gns.contains_key(&c) =>
                {
                    self.admit(c, now, server);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A detailed status laid out as GNS's `LinkStatsPrintToBuf` prints it (written by hand
    /// from its format strings), with the peer's own report after ours.
    const STATUS: &str = "End-to-end connection: connected
    Current rates:
        Sent:  61.0 pkts/sec   3.8 K/sec
        Recv:  23.0 pkts/sec   3.2 K/sec
        Ping:0ms    Max latency variance: 0.4ms
    Lifetime stats:
        Totals
            Sent:      1,234 pkts         567,890 bytes
            Recv:        987 pkts          65,432 bytes
            Recv w seq:        986 pkts
    Rate stats received from remote host 1.2s ago:
        Sent:  23.0 pkts/sec   3.2 K/sec
    Lifetime stats received from remote host 1.2s ago:
        Totals
            Sent:        990 pkts          65,536 bytes
            Recv:      1,230 pkts         566,272 bytes
";

    #[test]
    fn totals_are_this_ends_lifetime_counts() {
        assert_eq!(
            parse_totals(STATUS),
            Some(WireTotals {
                packets_sent: 1234,
                bytes_sent: 567_890,
                packets_recv: 987,
                bytes_recv: 65_432,
            })
        );
    }

    #[test]
    fn a_status_without_totals_or_laid_out_otherwise_gives_none() {
        assert_eq!(parse_totals("End-to-end connection: connecting\n"), None);
        let odd = STATUS.replace("567,890 bytes", "567,890 octets");
        assert_eq!(parse_totals(&odd), None);
        let odd = STATUS.replace("1,234 pkts", "1.234k pkts");
        assert_eq!(parse_totals(&odd), None);
    }
}
