//! The engine's I/O per transport: how the engine carries a protocol's datagrams, for bots
//! and for reference servers, over whichever transport the protocol needs, on real sockets.
//!
//! A *transport* is the wire layer under a protocol; a sans-IO one (ENet) lives in
//! [`crate::transport`]. This module is the other half: per transport, the adapter that
//! drives it on the engine's sockets ([`socket`]) and clock.
//!
//! The worker (bots) and the server driver are written once, against [`BotTransport`] and
//! [`ServerTransport`]. Each transport is one file that implements both sides:
//!
//! - [`udp`]: one connected socket per bot; the server gives each source address a
//!   [`ConnId`](crate::protocol::ConnId).
//! - [`enet`]: an ENet host per `bots_per_socket` bots; the server runs one host, and each
//!   ENet session is a connection.
//! - `gns` (cargo feature `gns`): a GameNetworkingSockets connection per bot; the server
//!   runs one listen socket, and each GNS connection is a connection.
//!
//! The engine owns the sockets and the clock: a transport is handed received datagrams and
//! the time, and hands back [`LinkEvents`] (a link came up, a payload for a bot, a link went
//! down) and datagrams to send. A transport that runs its own I/O (GameNetworkingSockets
//! reads and writes its sockets in its own thread) fits the same traits: its bot side opens
//! sources with no socket to watch and is polled on their timers
//! ([`BotTransport::poll_timeout`], [`BotTransport::on_timer`]); its server side names the
//! address it bound itself ([`ServerTransport::local_addr`]), so the driver binds no socket,
//! and does its sending in [`ServerTransport::poll_datagram`]. GNS is polled on a timer
//! rather than woken: it has no callback for a message's arrival.
//!
//! [`TransportNeeds`] (what the protocol asks for) is mapped to an implementation in one
//! place, [`run_bots`] and [`server_transport`]; ENet's settings are built in one place,
//! [`enet_config`].

pub mod enet;
#[cfg(feature = "gns")]
pub mod gns;
pub mod send_batch;
pub mod sim_path;
pub mod socket;
pub mod tcp_login;
pub mod udp;

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::rc::Rc;
use std::time::Instant;

use self::socket::bot::BotSocket;
use crate::metrics::{MetricDesc, Recorder, ServerStats};
use crate::protocol::{Server, Transmit, TransportNeeds};
use crate::transport::EnetConfig;

/// A bot's index in its worker.
pub type Slot = usize;
/// A bot's group (`groups:` in the scenario, an index into the plan's groups): a
/// transport puts bots of different groups on different sources, each with its group's
/// simulated network path, so every source belongs to one group.
pub type GroupId = usize;
/// A transport's unit of I/O in a worker: a socket (one bot's, or an ENet host's shared by
/// several bots) or a self-driven endpoint. Sources have their own timers.
pub type Source = usize;

/// What the worker must watch for a new source.
pub enum Watch {
    /// Readability of this socket: received datagrams go to [`BotTransport::on_datagrams`].
    Socket(Rc<BotSocket>),
}

/// The result of [`BotTransport::open`].
pub struct Opened {
    /// The source now carrying the bot.
    pub source: Source,
    /// A source the worker has not seen before, to watch.
    pub watch: Option<Watch>,
    /// The link is usable at once (raw UDP): the bot starts now. Otherwise it starts on
    /// [`LinkEvent::Up`].
    pub up: bool,
}

/// Why a link went down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DownReason {
    /// The transport's handshake never completed (no answer, or refused).
    ConnectFailed,
    /// The server refused the connection (TCP RST: nothing listens on the port).
    Refused,
    /// The server closed the session.
    ClosedByServer,
    /// Closed from this side.
    Closed,
}

impl DownReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DownReason::ConnectFailed => "connect_failed",
            DownReason::Refused => "refused",
            DownReason::ClosedByServer => "closed_by_server",
            DownReason::Closed => "closed",
        }
    }
}

/// What happened on a bot's link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEvent {
    /// The transport's session is up: the bot may start its protocol.
    Up,
    /// A payload for the bot: this range of the events' byte buffer ([`LinkEvents::get`]).
    Data(Range<usize>),
    /// Bytes of the bot's stream (a TCP login), same buffer: for [`crate::protocol::Bot::handle_stream`].
    Stream(Range<usize>),
    Down(DownReason),
}

/// Events a transport produced in one call, for the worker to hand to the bots once the
/// transport is no longer borrowed. Payload bytes live in one reused buffer, so delivering a
/// datagram allocates nothing once the buffers have grown.
#[derive(Debug, Default)]
pub struct LinkEvents {
    events: Vec<(Slot, LinkEvent)>,
    bytes: Vec<u8>,
}

impl LinkEvents {
    pub fn up(&mut self, slot: Slot) {
        self.events.push((slot, LinkEvent::Up));
    }

    pub fn data(&mut self, slot: Slot, payload: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(payload);
        self.events
            .push((slot, LinkEvent::Data(start..self.bytes.len())));
    }

    pub fn stream(&mut self, slot: Slot, bytes: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(bytes);
        self.events
            .push((slot, LinkEvent::Stream(start..self.bytes.len())));
    }

    pub fn down(&mut self, slot: Slot, why: DownReason) {
        self.events.push((slot, LinkEvent::Down(why)));
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Event `i` and the payload it refers to (empty for `Up`/`Down`).
    pub fn get(&self, i: usize) -> Option<(Slot, &LinkEvent, &[u8])> {
        let (slot, ev) = self.events.get(i)?;
        let bytes = match ev {
            LinkEvent::Data(r) | LinkEvent::Stream(r) => {
                self.bytes.get(r.clone()).unwrap_or_default()
            }
            _ => &[],
        };
        Some((*slot, ev, bytes))
    }

    pub fn clear(&mut self) {
        self.events.clear();
        self.bytes.clear();
    }
}

/// Datagrams (or messages) one receive turn hands the bots before the worker's other tasks
/// get theirs: a server that floods a socket or a connection cannot keep a worker from its
/// timers and the stop signal (issue 35). The raw-UDP receive loop and GNS's poll both keep it.
pub const RECV_TURN_DATAGRAMS: usize = 64;

/// The bot side of a transport, driven by one worker thread.
pub trait BotTransport {
    /// Prefix of this transport's counters (`connect_failures`, `send_errors`).
    const NAME: &'static str;
    /// Metrics the transport records into the worker's recorder.
    const METRICS: &'static [MetricDesc];

    /// Carry bot `slot` of group `group` to `peer`, from `source` (its source address;
    /// `None`: any).
    fn open(
        &mut self,
        slot: Slot,
        group: GroupId,
        peer: SocketAddr,
        source: Option<IpAddr>,
        now: Instant,
        rec: &mut Recorder,
    ) -> std::io::Result<Opened>;

    /// Replace bot `slot`'s link: drop the current one at once (no goodbye, as a lost
    /// connection) and carry the bot to `peer` on a new one. Its old source, if no other bot
    /// uses it, comes back from [`BotTransport::poll_retired`]. The bot keeps its source
    /// address (`source`) and group, as given to [`BotTransport::open`].
    fn relink(
        &mut self,
        slot: Slot,
        group: GroupId,
        peer: SocketAddr,
        source: Option<IpAddr>,
        now: Instant,
        rec: &mut Recorder,
    ) -> std::io::Result<Opened>;

    /// A source no bot uses any more: the worker stops watching it.
    fn poll_retired(&mut self) -> Option<Source>;

    /// Queue one transmit of the bot (`bytes` is its payload) for the wire, at `now`.
    fn send(&mut self, slot: Slot, t: &Transmit, bytes: &[u8], now: Instant, rec: &mut Recorder);

    /// The bot has queued all it has for now: put it on the wire.
    fn flush(&mut self, slot: Slot, now: Instant, rec: &mut Recorder);

    /// The worker is about to wait (the end of one wake-up): submit every send batched
    /// across bots since the last call and count each in its group's recorder (`recs`, by
    /// group). A transport that sends at once (the default) has nothing to do.
    fn submit(&mut self, recs: &mut [Recorder]) {
        let _ = recs;
    }

    /// End the bot's session after what it queued (ENet's disconnect). Called once.
    fn close(&mut self, slot: Slot, now: Instant, rec: &mut Recorder);

    /// Datagrams arrived on `src`'s socket.
    fn on_datagrams<'a>(
        &mut self,
        src: Source,
        now: Instant,
        datagrams: impl Iterator<Item = &'a [u8]>,
        rec: &mut Recorder,
        out: &mut LinkEvents,
    );

    /// `src`'s timer fired (a transport without a socket to watch is polled this way).
    fn on_timer(&mut self, src: Source, now: Instant, rec: &mut Recorder, out: &mut LinkEvents);

    /// When `src` next wants [`BotTransport::on_timer`].
    fn poll_timeout(&self, src: Source) -> Option<Instant>;

    /// Once a second per connected bot: the transport's own view of its link.
    fn sample(&self, slot: Slot, rec: &mut Recorder);

    /// Before the worker ends: put everything queued (goodbyes, disconnects) on the wire.
    fn finish(&mut self, now: Instant, rec: &mut Recorder);

    /// No session is still closing: the worker may end without cutting a goodbye short
    /// (ENet's disconnect goes out only after the packets queued before it are acknowledged).
    fn is_idle(&self) -> bool;
}

/// The server side of a transport: one per reference server instance.
pub trait ServerTransport {
    /// A datagram from `from` arrived on the server's socket.
    fn on_datagram(&mut self, now: Instant, from: SocketAddr, data: &[u8], server: &mut dyn Server);

    /// The transport's own timers (and the events they produce) at `now`.
    fn service(&mut self, now: Instant, server: &mut dyn Server);

    /// When the transport next wants [`ServerTransport::service`].
    fn poll_timeout(&self) -> Option<Instant>;

    /// The next datagram for the socket, written into `buf`, taking what the server queued
    /// (datagrams to connections, sessions to close) as needed. `None` once all is out. A
    /// transport with its own sockets (GNS) sends the server's output itself here and
    /// returns `None`.
    fn poll_datagram(
        &mut self,
        now: Instant,
        server: &mut dyn Server,
        buf: &mut [u8],
    ) -> Option<(SocketAddr, usize)>;

    /// The transport's own counters, added to the server's.
    fn report(&self, stats: &mut ServerStats);

    /// The address the transport listens on when it binds its own socket (GNS): the driver
    /// then binds none, never calls [`ServerTransport::on_datagram`], and calls
    /// [`ServerTransport::service`] at [`ServerTransport::poll_timeout`]. `None` (the
    /// default): the transport runs over the driver's UDP socket.
    fn local_addr(&self) -> Option<SocketAddr> {
        None
    }
}

/// ENet settings, in one place, for bots (a host per `bots_per_socket` bots) and servers.
pub fn enet_config(
    role: EnetRole,
    needs: &crate::protocol::EnetNeeds,
    throttle: bool,
) -> EnetConfig {
    let mut cfg = match role {
        EnetRole::Bots { per_socket } => {
            let mut cfg = EnetConfig::with_peers(per_socket.clamp(1, 4095));
            // Housekeeping (retransmission, ping and timeout checks) every 25 ms instead of
            // ENet's usual 10: a worker holds hundreds of hosts, and receiving and sending
            // already service a host at once. Retransmissions may leave up to 25 ms late, well
            // under ENet's minimum RTO.
            cfg.service_interval = std::time::Duration::from_millis(25);
            cfg.channel_limit = needs.channels.clamp(1, 255);
            cfg
        }
        EnetRole::Server { max_peers } => {
            // Room for every player plus those being refused politely.
            let mut cfg = EnetConfig::with_peers(max_peers.max(1) + 16);
            cfg.channel_limit = 255;
            // A reference server reports no round trips: spare it the acknowledgement timing.
            cfg.ack_rtt = false;
            cfg
        }
    };
    cfg.range_coder = needs.compression == crate::protocol::EnetCompression::RangeCoder;
    if !throttle {
        // A deceleration of 0 keeps every unreliable packet.
        cfg.throttle.2 = 0;
    }
    cfg
}

/// Which end an ENet host is.
#[derive(Debug, Clone, Copy)]
pub enum EnetRole {
    Bots { per_socket: usize },
    Server { max_peers: usize },
}

/// Transport settings of a swarm that are not the protocol's.
#[derive(Debug, Clone)]
pub struct BotTransportOptions {
    /// Per group (by [`GroupId`]): the simulated path its bots' sockets' datagrams take
    /// (the group's `network:`, or the scenario's), `None` for the real link only.
    pub network: Vec<Option<crate::engine::io::sim_path::PathConditions>>,
    pub bots_per_socket: usize,
    /// ENet: keep the unreliable-packet throttle of the server's traffic to the bots.
    pub enet_throttle: bool,
    /// The protocol (in its dialect) has no RTT probe of its own: the transport's round
    /// trips are the run's `rtt_us`, and a quiet link is probed this often (the scenario's
    /// `ping_interval`). Only ENet measures round trips; see [`rtt_source`].
    pub transport_rtt: Option<std::time::Duration>,
    /// Kernel buffers each bot socket asks for (`None`: the socket's own default).
    pub socket_buffers: Option<socket::SocketBuffers>,
}

/// Where a run's `rtt_us` comes from (`summary.json`'s `rtt_source`): the bots' own pings
/// when the protocol measures RTT itself, else ENet's acknowledgements when the transport is
/// ENet, else nothing.
pub fn rtt_source(needs: TransportNeeds, protocol_measures_rtt: bool) -> Option<&'static str> {
    match needs {
        _ if protocol_measures_rtt => Some("protocol_ping"),
        TransportNeeds::Enet(_) => Some("enet_acks"),
        _ => None,
    }
}

/// Calls back with the bot transport the protocol needs: the one place `TransportNeeds` meets
/// the bot-side implementations. Generic, so the worker is compiled once per transport and
/// its hot path has no dynamic dispatch.
pub trait WithBotTransport {
    type Output;
    fn run<T: BotTransport + 'static>(self, transport: T) -> Self::Output;
}

pub fn run_bots<W: WithBotTransport>(
    needs: TransportNeeds,
    opts: BotTransportOptions,
    w: W,
) -> W::Output {
    match needs {
        TransportNeeds::Udp => {
            w.run(udp::UdpBots::new(opts.network).with_socket_buffers(opts.socket_buffers))
        }
        // `network:` is refused for this transport at validation (plan.rs).
        TransportNeeds::UdpTcpLogin { udp_port_offset } => w.run(
            tcp_login::TcpLoginBots::new(udp_port_offset).with_socket_buffers(opts.socket_buffers),
        ),
        TransportNeeds::Enet(e) => {
            let mut cfg = enet_config(
                EnetRole::Bots {
                    per_socket: opts.bots_per_socket,
                },
                &e,
                opts.enet_throttle,
            );
            if let Some(every) = opts.transport_rtt {
                // ENet pings a peer it has had no acknowledgement from for this long: at
                // least one round trip per interval even while the protocol sends nothing
                // reliable.
                cfg.ping_interval = every;
            }
            w.run(
                enet::EnetBots::new(cfg, e.channels, opts.transport_rtt.is_some())
                    .with_network(opts.network)
                    .with_socket_buffers(opts.socket_buffers),
            )
        }
        #[cfg(feature = "gns")]
        TransportNeeds::Gns => w.run(gns::GnsBots::default()),
        // Scenario validation refuses this first (`TransportNeeds::check_built`); should a
        // plan get here anyway, every bot fails to connect with that reason.
        #[cfg(not(feature = "gns"))]
        TransportNeeds::Gns => w.run(NotBuilt),
    }
}

/// The metrics a transport records for bots, for the report.
pub fn transport_metrics(needs: TransportNeeds) -> &'static [MetricDesc] {
    match needs {
        TransportNeeds::Udp => <udp::UdpBots as BotTransport>::METRICS,
        TransportNeeds::UdpTcpLogin { .. } => <tcp_login::TcpLoginBots as BotTransport>::METRICS,
        TransportNeeds::Enet(_) => <enet::EnetBots as BotTransport>::METRICS,
        #[cfg(feature = "gns")]
        TransportNeeds::Gns => <gns::GnsBots as BotTransport>::METRICS,
        #[cfg(not(feature = "gns"))]
        TransportNeeds::Gns => &[],
    }
}

/// The server side the protocol needs, for one instance taking `max_peers` players. A
/// transport that binds its own socket (GNS) listens on `bind` here.
pub fn server_transport(
    needs: TransportNeeds,
    bind: SocketAddr,
    max_peers: usize,
    enet_throttle: bool,
    now: Instant,
) -> std::io::Result<Box<dyn ServerTransport + Send>> {
    Ok(match needs {
        TransportNeeds::Udp => Box::new(udp::UdpServerSide::default()),
        // No reference server speaks a TCP login: such a dialect loads real servers only.
        TransportNeeds::UdpTcpLogin { .. } => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                needs.check_servable().err().unwrap_or_default(),
            ))
        }
        TransportNeeds::Enet(e) => {
            let cfg = enet_config(EnetRole::Server { max_peers }, &e, enet_throttle);
            Box::new(enet::EnetServerSide::new(cfg, now).map_err(std::io::Error::other)?)
        }
        #[cfg(feature = "gns")]
        TransportNeeds::Gns => Box::new(gns::GnsServerSide::listen(bind, max_peers, now)?),
        #[cfg(not(feature = "gns"))]
        TransportNeeds::Gns => {
            let _ = bind;
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                TransportNeeds::Gns.check_built().err().unwrap_or_default(),
            ));
        }
    })
}

/// The bot side of a transport this build lacks (GNS without the `gns` feature): every
/// bot fails to open its link, with the reason.
#[cfg(not(feature = "gns"))]
struct NotBuilt;

#[cfg(not(feature = "gns"))]
impl BotTransport for NotBuilt {
    const NAME: &'static str = "gns";
    const METRICS: &'static [MetricDesc] = &[];

    fn open(
        &mut self,
        _: Slot,
        _: GroupId,
        _: SocketAddr,
        _: Option<IpAddr>,
        _: Instant,
        _: &mut Recorder,
    ) -> std::io::Result<Opened> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "built without the gns feature",
        ))
    }

    fn relink(
        &mut self,
        slot: Slot,
        group: GroupId,
        peer: SocketAddr,
        source: Option<IpAddr>,
        now: Instant,
        rec: &mut Recorder,
    ) -> std::io::Result<Opened> {
        self.open(slot, group, peer, source, now, rec)
    }

    fn poll_retired(&mut self) -> Option<Source> {
        None
    }

    fn send(&mut self, _: Slot, _: &Transmit, _: &[u8], _: Instant, _: &mut Recorder) {}

    fn flush(&mut self, _: Slot, _: Instant, _: &mut Recorder) {}

    fn close(&mut self, _: Slot, _: Instant, _: &mut Recorder) {}

    fn on_datagrams<'a>(
        &mut self,
        _: Source,
        _: Instant,
        _: impl Iterator<Item = &'a [u8]>,
        _: &mut Recorder,
        _: &mut LinkEvents,
    ) {
    }

    fn on_timer(&mut self, _: Source, _: Instant, _: &mut Recorder, _: &mut LinkEvents) {}

    fn poll_timeout(&self, _: Source) -> Option<Instant> {
        None
    }

    fn sample(&self, _: Slot, _: &mut Recorder) {}

    fn finish(&mut self, _: Instant, _: &mut Recorder) {}

    fn is_idle(&self) -> bool {
        true
    }
}

/// A current-thread tokio runtime for the unit tests of bot sockets and transports (their
/// sockets register with a reactor, as on a worker): enter it, or block on it.
#[cfg(test)]
pub(crate) fn test_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ProtocolName, ProtocolSection};

    fn section(yaml: &str) -> ProtocolSection {
        serde_saphyr::from_str(yaml).expect("a protocol section")
    }

    /// Every protocol's default dialect answers the bots' pings; City's implementation
    /// dialect does not, so its round trips come from ENet's acknowledgements.
    #[test]
    fn rtt_source_is_the_bots_pings_unless_the_server_answers_none() {
        for name in ProtocolName::ALL {
            let s = name.default_section();
            assert!(s.measures_rtt(), "{name:?}");
            assert_eq!(
                rtt_source(s.transport(), s.measures_rtt()),
                Some("protocol_ping")
            );
        }
        let city = section("city:\n  dialect: implementation\n");
        assert!(!city.measures_rtt());
        assert_eq!(
            rtt_source(city.transport(), city.measures_rtt()),
            Some("enet_acks")
        );
        assert!(section("city:\n  dialect: spec\n").measures_rtt());
        // Over raw UDP nothing else measures a round trip.
        assert_eq!(rtt_source(TransportNeeds::Udp, false), None);
    }
}
