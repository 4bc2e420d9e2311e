//! A new ENet session from an address (IP and UDP port) that an old, dead session used must
//! not be ended by what the server still sends that old session.
//!
//! The operating system hands a new bot process an ephemeral UDP port that a bot of the previous
//! reconnect storm used seconds earlier. The server may still hold a peer for that address
//! (it is retransmitting its DISCONNECT to a client that is gone, or it has not timed out a
//! client that vanished). ENet tells a datagram's session by the receiver's peer id (0 at every
//! one-peer client) and a 2-bit session id, and a fresh server slot's first session always gets
//! session id 0, so the new client takes the old session's DISCONNECT as its own.
//!
//! Two [`EnetHost`]s over a simulated loopback on a simulated clock (1 ms steps): no sockets,
//! no wall clock, the same datagrams every run.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tickswarm::transport::{
    DisconnectReason, EnetConfig, EnetEvent, EnetHost, PeerId, PeerState, MAX_ENET_DATAGRAM,
};

const SERVER: &str = "127.0.0.1:7777";
/// The reused ephemeral port.
const BOT: &str = "127.0.0.1:40000";

/// A server host and, at one address, whichever client host currently owns that port (none
/// while the port is free). Datagrams take `delay` each way; a datagram to the port while no
/// host owns it is lost, as the kernel drops it.
struct Link {
    now: Instant,
    server: EnetHost,
    client: Option<EnetHost>,
    /// (deliver at, to the server?, bytes)
    wire: Vec<(Instant, bool, Vec<u8>)>,
    delay: Duration,
    server_events: Vec<EnetEvent>,
    client_events: Vec<EnetEvent>,
    clients_started: u32,
    wire_cfg: EnetConfig,
}

impl Link {
    /// `wire` is what both ends agree on (checksums, compression); the server has 8 slots.
    fn new(wire: &EnetConfig) -> Self {
        let now = Instant::now();
        let server = EnetConfig {
            peer_limit: 8,
            ..wire.clone()
        };
        Self {
            now,
            wire_cfg: wire.clone(),
            server: EnetHost::new(now, &server).unwrap(),
            client: None,
            wire: Vec::new(),
            delay: Duration::from_millis(1),
            server_events: Vec::new(),
            client_events: Vec::new(),
            clients_started: 0,
        }
    }

    fn server_addr() -> SocketAddr {
        SERVER.parse().unwrap()
    }

    fn bot_addr() -> SocketAddr {
        BOT.parse().unwrap()
    }

    /// A new client process on the port: a fresh host connecting to the server.
    fn start_client(&mut self) -> PeerId {
        // Each process's own seed, so each session has its own connect id.
        self.clients_started += 1;
        let cfg = EnetConfig {
            seed: Some(self.clients_started),
            peer_limit: 1,
            ..self.wire_cfg.clone()
        };
        let mut h = EnetHost::new(self.now, &cfg).unwrap();
        let p = h.connect(self.now, Self::server_addr(), 2, 0).unwrap();
        self.client = Some(h);
        self.client_events.clear();
        p
    }

    /// The client process is gone: nothing answers on the port.
    fn kill_client(&mut self) {
        self.client = None;
    }

    fn step(&mut self) {
        self.now += Duration::from_millis(1);
        let now = self.now;
        let (due, later): (Vec<_>, Vec<_>) = self.wire.drain(..).partition(|d| d.0 <= now);
        self.wire = later;
        for (_, to_server, bytes) in due {
            if to_server {
                self.server.handle_datagram(now, Self::bot_addr(), &bytes);
            } else if let Some(c) = self.client.as_mut() {
                c.handle_datagram(now, Self::server_addr(), &bytes);
            }
        }
        let mut buf = [0u8; MAX_ENET_DATAGRAM];
        if self.server.poll_timeout().is_some_and(|t| t <= now) {
            self.server.service(now);
        }
        while let Some(ev) = self.server.poll_event() {
            self.server_events.push(ev);
        }
        self.server.flush(now);
        while let Some((to, len)) = self.server.poll_transmit(&mut buf) {
            assert_eq!(to, Self::bot_addr());
            self.wire
                .push((now + self.delay, false, buf[..len].to_vec()));
        }
        if let Some(c) = self.client.as_mut() {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.service(now);
            }
            while let Some(ev) = c.poll_event() {
                self.client_events.push(ev);
            }
            c.flush(now);
            while let Some((_, len)) = c.poll_transmit(&mut buf) {
                self.wire
                    .push((now + self.delay, true, buf[..len].to_vec()));
            }
        }
    }

    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.step();
        }
    }

    fn server_connected(&self) -> Vec<PeerId> {
        self.server_events
            .iter()
            .filter_map(|e| match e {
                EnetEvent::Connected { peer, .. } => Some(*peer),
                _ => None,
            })
            .collect()
    }

    fn client_state(&self, p: PeerId) -> Option<PeerState> {
        self.client.as_ref()?.peer_state(p)
    }

    fn client_disconnects(&self) -> Vec<DisconnectReason> {
        self.client_events
            .iter()
            .filter_map(|e| match e {
                EnetEvent::Disconnected { reason, .. } => Some(*reason),
                _ => None,
            })
            .collect()
    }
}

/// The old session is closed by the server (as the City server closes a session that said
/// goodbye or that it refused) just as its client vanishes; the server retransmits its
/// DISCONNECT for the peer timeout. A new client on the same port connects meanwhile and must
/// keep its session.
#[test]
fn stale_disconnect_to_a_reused_port_does_not_end_the_new_session() {
    stale_disconnect_case(&EnetConfig::default());
}

/// The same with checksums and range-coder compression: the handshakes are read through both.
#[test]
fn stale_disconnect_case_with_checksum_and_compression() {
    stale_disconnect_case(&EnetConfig {
        checksum: true,
        range_coder: true,
        ..EnetConfig::default()
    });
}

fn stale_disconnect_case(wire: &EnetConfig) {
    let mut link = Link::new(wire);
    let first = link.start_client();
    link.run(Duration::from_millis(50));
    assert_eq!(link.client_state(first), Some(PeerState::Connected));
    let old = link.server_connected()[0];

    // The server closes the old session; its client is already gone.
    link.kill_client();
    let now = link.now;
    link.server.disconnect(now, old, 0).unwrap();
    link.run(Duration::from_millis(100));
    assert_eq!(link.server.peer_state(old), Some(PeerState::Disconnecting));

    // A new client process gets the same port and connects.
    let second = link.start_client();
    link.run(Duration::from_millis(50));
    assert_eq!(link.client_state(second), Some(PeerState::Connected));
    assert_eq!(link.server_connected().len(), 2);

    // The server dropped the old session when the new CONNECT came (the new session may take
    // its slot), and told its caller.
    assert_eq!(link.server.stats().superseded, 1);
    assert!(link.server_events.iter().any(|e| matches!(
        e,
        EnetEvent::Disconnected { peer, reason: DisconnectReason::Local, .. } if *peer == old
    )));

    // Two seconds of the new session, in which the old peer would have retransmitted its
    // DISCONNECT several times.
    link.run(Duration::from_secs(2));
    assert_eq!(link.client_disconnects(), []);
    assert_eq!(link.client_state(second), Some(PeerState::Connected));
}

/// Bots sharing one socket are distinct ENet peers of one client host: a bot connecting while
/// the server closes its neighbour must leave the neighbour's close alone.
#[test]
fn a_new_bot_on_a_shared_socket_does_not_supersede_its_neighbour() {
    let mut link = Link::new(&EnetConfig::default());
    link.clients_started = 41;
    let cfg = EnetConfig {
        seed: Some(42),
        ..EnetConfig::with_peers(2)
    };
    let mut host = EnetHost::new(link.now, &cfg).unwrap();
    let a = host.connect(link.now, Link::server_addr(), 2, 0).unwrap();
    link.client = Some(host);
    link.run(Duration::from_millis(50));
    let old = link.server_connected()[0];

    let now = link.now;
    link.server.disconnect(now, old, 7).unwrap();
    let b = link
        .client
        .as_mut()
        .unwrap()
        .connect(now, Link::server_addr(), 2, 0)
        .unwrap();
    link.run(Duration::from_millis(200));

    assert_eq!(link.server.stats().superseded, 0);
    assert_eq!(link.client_state(b), Some(PeerState::Connected));
    // The neighbour heard the server's goodbye.
    assert!(link.client_events.iter().any(|e| matches!(
        e,
        EnetEvent::Disconnected { peer, data: 7, reason: DisconnectReason::Remote } if *peer == a
    )));
}
