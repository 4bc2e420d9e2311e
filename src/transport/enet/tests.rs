//! Two hosts back to back over a simulated link: the host's contract end to end.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const A: &str = "10.0.0.1:5000";
const B: &str = "10.0.0.2:7777";

/// Two hosts joined by a simulated link with one-way delay and random loss, on a simulated
/// clock advancing 1 ms per step.
struct Sim {
    now: Instant,
    hosts: [EnetHost; 2],
    addrs: [SocketAddr; 2],
    /// (deliver at, to host index, from, bytes)
    wire: Vec<(Instant, usize, SocketAddr, Vec<u8>)>,
    delay: Duration,
    loss: f64,
    rng: ChaCha8Rng,
    events: [Vec<EnetEvent>; 2],
    sent: u64,
    lost: u64,
}

impl Sim {
    fn new(a: EnetConfig, b: EnetConfig, delay: Duration, loss: f64) -> Self {
        let now = Instant::now();
        Self {
            now,
            hosts: [
                EnetHost::new(now, &a).unwrap(),
                EnetHost::new(now, &b).unwrap(),
            ],
            addrs: [A.parse().unwrap(), B.parse().unwrap()],
            wire: Vec::new(),
            delay,
            loss,
            rng: ChaCha8Rng::seed_from_u64(7),
            events: [Vec::new(), Vec::new()],
            sent: 0,
            lost: 0,
        }
    }

    fn step(&mut self) {
        self.now += Duration::from_millis(1);
        let now = self.now;
        let mut i = 0;
        while i < self.wire.len() {
            if self.wire[i].0 <= now {
                let (_, to, from, bytes) = self.wire.swap_remove(i);
                self.hosts[to].handle_datagram(now, from, &bytes);
            } else {
                i += 1;
            }
        }
        let mut buf = [0u8; MAX_ENET_DATAGRAM];
        for h in 0..2 {
            if self.hosts[h].poll_timeout().is_some_and(|t| t <= now) {
                self.hosts[h].service(now);
            }
            while let Some(ev) = self.hosts[h].poll_event() {
                self.events[h].push(ev);
            }
            self.hosts[h].flush(now);
            while let Some((to, len)) = self.hosts[h].poll_transmit(&mut buf) {
                let to_idx = self.addrs.iter().position(|a| *a == to).unwrap();
                self.sent += 1;
                if self.rng.random_bool(self.loss) {
                    self.lost += 1;
                    continue;
                }
                self.wire
                    .push((now + self.delay, to_idx, self.addrs[h], buf[..len].to_vec()));
            }
        }
    }

    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Self) -> bool) -> bool {
        let end = self.now + limit;
        while self.now < end {
            self.step();
            if done(self) {
                return true;
            }
        }
        false
    }

    fn connect(&mut self, peers: usize, channels: usize) -> Vec<PeerId> {
        let (now, b) = (self.now, self.addrs[1]);
        let ids: Vec<PeerId> = (0..peers)
            .map(|i| self.hosts[0].connect(now, b, channels, i as u32).unwrap())
            .collect();
        let n = peers;
        assert!(self.run_until(Duration::from_secs(5), |s| {
            s.events[0]
                .iter()
                .filter(|e| matches!(e, EnetEvent::Connected { .. }))
                .count()
                == n
        }));
        ids
    }
}

fn received(events: &[EnetEvent]) -> Vec<(PeerId, u8, Vec<u8>)> {
    events
        .iter()
        .filter_map(|e| match e {
            EnetEvent::Received {
                peer,
                channel,
                packet,
            } => Some((*peer, *channel, packet.to_vec())),
            _ => None,
        })
        .collect()
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

#[test]
fn connect_exchange_fragmented_and_disconnect() {
    let mut sim = Sim::new(
        EnetConfig::default(),
        EnetConfig::with_peers(4),
        Duration::from_millis(5),
        0.0,
    );
    let ids = sim.connect(1, 2);
    let p = ids[0];
    // The server announces the peer once the client acknowledged its verify.
    assert!(sim.run_until(Duration::from_secs(1), |s| !s.events[1].is_empty()));
    assert!(matches!(
        sim.events[1][0],
        EnetEvent::Connected { data: 0, addr, .. } if addr == sim.addrs[0]
    ));
    let big = pattern(10_000);
    sim.hosts[0].send(p, 0, true, b"hello").unwrap();
    sim.hosts[0].send(p, 0, true, &big).unwrap();
    sim.hosts[0].send(p, 1, false, b"input").unwrap();
    let before = sim.hosts[0].stats().datagrams_out;
    assert!(
        sim.run_until(Duration::from_secs(2), |s| received(&s.events[1]).len()
            == 3)
    );
    // 10 000 bytes over a 1392-byte MTU: at least 8 datagrams of fragments.
    assert!(sim.hosts[0].stats().datagrams_out - before >= 8);
    // Channels are sequenced independently: channel 1 may overtake the fragments.
    let got = received(&sim.events[1]);
    let ch0: Vec<_> = got.iter().filter(|r| r.1 == 0).map(|r| &r.2).collect();
    let ch1: Vec<_> = got.iter().filter(|r| r.1 == 1).map(|r| &r.2).collect();
    assert_eq!(ch0, [&b"hello".to_vec(), &big]);
    assert_eq!(ch1, [&b"input".to_vec()]);
    let stats = sim.hosts[0].peer_stats(p).unwrap();
    assert_eq!(stats.packets_sent, 3);
    assert_eq!(stats.bytes_sent, 10_010);
    let rtt = stats.rtt.expect("acks measured the RTT");
    assert!(
        rtt >= Duration::from_millis(8) && rtt <= Duration::from_millis(20),
        "{rtt:?}"
    );

    sim.hosts[0].disconnect(sim.now, p, 99).unwrap();
    assert!(sim.run_until(Duration::from_secs(2), |s| s.events[1]
        .iter()
        .any(|e| matches!(e, EnetEvent::Disconnected { .. }))));
    assert!(matches!(
        sim.events[1].last(),
        Some(EnetEvent::Disconnected {
            data: 99,
            reason: DisconnectReason::Remote,
            ..
        })
    ));
    assert!(sim.run_until(Duration::from_secs(1), |s| s.events[0]
        .iter()
        .any(|e| matches!(e, EnetEvent::Disconnected { .. }))));
    assert!(matches!(
        sim.events[0].last(),
        Some(EnetEvent::Disconnected {
            reason: DisconnectReason::Local,
            ..
        })
    ));
    // Both idle now: nothing to wake up for.
    sim.step();
    assert_eq!(sim.hosts[0].poll_timeout(), None);
    assert_eq!(sim.hosts[1].poll_timeout(), None);
}

#[test]
fn several_peers_share_one_host() {
    let mut sim = Sim::new(
        EnetConfig::with_peers(8),
        EnetConfig::with_peers(8),
        Duration::from_millis(2),
        0.0,
    );
    let ids = sim.connect(8, 2);
    let distinct: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(distinct.len(), 8);
    for (i, &p) in ids.iter().enumerate() {
        sim.hosts[0].send(p, 0, true, &[i as u8; 3]).unwrap();
    }
    assert!(
        sim.run_until(Duration::from_secs(2), |s| received(&s.events[1]).len()
            == 8)
    );
    // Server side: 8 distinct peers, all from the one client address.
    let mut from = std::collections::HashSet::new();
    for (peer, _, bytes) in received(&sim.events[1]) {
        from.insert(peer);
        assert_eq!(sim.hosts[1].peer_addr(peer), Some(sim.addrs[0]));
        // Echo back; the client must route each echo to the bot that sent it.
        sim.hosts[1].send(peer, 0, true, &bytes).unwrap();
    }
    assert_eq!(from.len(), 8);
    assert!(
        sim.run_until(Duration::from_secs(2), |s| received(&s.events[0]).len()
            == 8)
    );
    for (peer, _, bytes) in received(&sim.events[0]) {
        let i = ids.iter().position(|p| *p == peer).unwrap();
        assert_eq!(bytes, vec![i as u8; 3]);
    }
    // Each peer's acknowledgements are its own: every one of the 8 sessions was measured,
    // each sample at the link's 4 ms round trip.
    let got = rtt_samples(&mut sim.hosts[0]);
    for id in &ids {
        assert!(got.iter().any(|(p, _)| p == id), "{id:?} has no sample");
    }
    assert!(got.iter().all(|&(_, rtt)| rtt == Duration::from_millis(4)));
    // A ninth connection has no slot.
    assert_eq!(
        sim.hosts[0].connect(sim.now, sim.addrs[1], 2, 0),
        Err(EnetError::NoFreePeer(8))
    );
}

#[test]
fn injected_delay_moves_enet_rtt() {
    for one_way_ms in [10u64, 60] {
        let mut sim = Sim::new(
            EnetConfig::default(),
            EnetConfig::default(),
            Duration::from_millis(one_way_ms),
            0.0,
        );
        let p = sim.connect(1, 2)[0];
        // A few seconds of reliable traffic and pings.
        for _ in 0..30 {
            sim.hosts[0].send(p, 0, true, b"tick").unwrap();
            sim.run_until(Duration::from_millis(100), |_| false);
        }
        let rtt = sim.hosts[0].rtt(p).unwrap().as_millis() as u64;
        let want = 2 * one_way_ms;
        eprintln!("simulated one-way delay {one_way_ms} ms: ENet RTT {rtt} ms");
        assert!(
            rtt.abs_diff(want) <= 3,
            "one-way {one_way_ms} ms: rtt {rtt} ms"
        );
    }
}

fn rtt_samples(host: &mut EnetHost) -> Vec<(PeerId, Duration)> {
    std::iter::from_fn(|| host.poll_rtt_sample()).collect()
}

/// Every acknowledged reliable command is one sample, equal to the simulated round trip
/// to the microsecond: sent at one step, acknowledged by the other host in the step it
/// arrives, and the acknowledgement arrives one delay later.
#[test]
fn ack_samples_equal_the_simulated_round_trip_in_microseconds() {
    for one_way_ms in [10u64, 60] {
        let mut sim = Sim::new(
            EnetConfig::default(),
            EnetConfig::default(),
            Duration::from_millis(one_way_ms),
            0.0,
        );
        let p = sim.connect(1, 2)[0];
        rtt_samples(&mut sim.hosts[0]);
        for _ in 0..30 {
            sim.hosts[0].send(p, 0, true, b"tick").unwrap();
            sim.run_until(Duration::from_millis(100), |_| false);
        }
        let got = rtt_samples(&mut sim.hosts[0]);
        let want = Duration::from_millis(2 * one_way_ms);
        // 30 reliable packets, and ENet's own pings while the other side is silent.
        assert!(got.len() >= 30, "{} samples", got.len());
        assert!(
            got.iter().all(|&(peer, rtt)| peer == p && rtt == want),
            "{got:?}"
        );
        let stats = sim.hosts[0].stats().ack_rtt;
        assert_eq!(stats.samples, got.len() as u64);
        assert_eq!(stats.earlier_transmission + stats.dropped, 0, "{stats:?}");
    }
}

/// Under 10 % loss in both directions, commands are retransmitted and acknowledgements
/// lost, yet every sample is still exactly the round trip: an acknowledgement is paired
/// only with the transmission whose sent time it echoes.
#[test]
fn retransmitted_commands_are_measured_from_the_transmission_acknowledged() {
    let mut sim = Sim::new(
        EnetConfig::default(),
        EnetConfig::default(),
        Duration::from_millis(15),
        0.1,
    );
    let p = sim.connect(1, 2)[0];
    rtt_samples(&mut sim.hosts[0]);
    for i in 0..200u32 {
        sim.hosts[0].send(p, 0, true, &i.to_be_bytes()).unwrap();
        sim.run_until(Duration::from_millis(50), |_| false);
    }
    let got = rtt_samples(&mut sim.hosts[0]);
    assert!(got.len() > 150, "{} samples", got.len());
    assert!(
        got.iter().all(|&(_, rtt)| rtt == Duration::from_millis(30)),
        "{got:?}"
    );
    assert!(sim.lost > 0);
}

/// A peer that sends nothing reliable, talking to a remote that streams unreliable
/// data, is still measured: ENet pings a peer it has had no acknowledgement from for its
/// ping interval, and each PING's acknowledgement is a sample.
#[test]
fn enet_pings_measure_a_link_carrying_only_unreliable_traffic() {
    let pinging = EnetConfig {
        ping_interval: Duration::from_millis(250),
        ..EnetConfig::default()
    };
    let mut sim = Sim::new(
        pinging,
        EnetConfig::default(),
        Duration::from_millis(5),
        0.0,
    );
    let p = sim.connect(1, 2)[0];
    assert!(sim.run_until(Duration::from_secs(1), |s| !s.events[1].is_empty()));
    let server_peer = match sim.events[1][0] {
        EnetEvent::Connected { peer, .. } => peer,
        ref e => panic!("{e:?}"),
    };
    rtt_samples(&mut sim.hosts[0]);
    // 4 s of the server streaming unreliable state at 50 Hz.
    for _ in 0..200 {
        sim.hosts[1].send(server_peer, 1, false, b"state").unwrap();
        sim.run_until(Duration::from_millis(20), |_| false);
    }
    let got = rtt_samples(&mut sim.hosts[0]);
    // A PING every 250 ms plus the round trip before the next one may leave.
    assert!(
        (14..=16).contains(&got.len()),
        "one PING per 250-260 ms over 4 s: {} samples",
        got.len()
    );
    assert!(got
        .iter()
        .all(|&(peer, rtt)| peer == p && rtt == Duration::from_millis(10)));
}

#[test]
fn injected_loss_is_repaired_and_estimated() {
    let mut sim = Sim::new(
        EnetConfig::default(),
        EnetConfig::default(),
        Duration::from_millis(10),
        0.1,
    );
    let p = sim.connect(1, 2)[0];
    // 45 simulated seconds of 20 Hz reliable traffic: four of ENet's 10 s loss windows (its
    // estimate moves 1/8 of the way to each window's loss rate).
    let n = 900;
    for i in 0..n {
        sim.hosts[0]
            .send(p, 0, true, &(i as u32).to_be_bytes())
            .unwrap();
        sim.run_until(Duration::from_millis(50), |_| false);
    }
    assert!(
        sim.run_until(Duration::from_secs(5), |s| received(&s.events[1]).len()
            == n)
    );
    let got = received(&sim.events[1]);
    for (i, (_, _, bytes)) in got.iter().enumerate() {
        assert_eq!(bytes, &(i as u32).to_be_bytes(), "reliable order");
    }
    let loss = sim.hosts[0].packet_loss(p).unwrap();
    eprintln!(
        "simulated 10% datagram loss: {} of {} datagrams dropped, all {n} reliable packets \
         delivered in order, ENet loss estimate {loss:.3}",
        sim.lost, sim.sent
    );
    assert!(sim.lost > 0);
    assert!(loss > 0.03 && loss < 0.3, "ENet loss estimate {loss}");
}

#[test]
fn connect_to_silence_fails_within_the_timeout() {
    let cfg = EnetConfig {
        timeout_minimum: Duration::from_millis(500),
        timeout_maximum: Duration::from_secs(1),
        ..EnetConfig::default()
    };
    let mut sim = Sim::new(cfg, EnetConfig::default(), Duration::from_millis(5), 1.0);
    let (now, b) = (sim.now, sim.addrs[1]);
    let p = sim.hosts[0].connect(now, b, 2, 0).unwrap();
    assert!(sim.hosts[0].poll_timeout().is_some());
    assert!(sim.run_until(Duration::from_secs(3), |s| !s.events[0].is_empty()));
    assert!(matches!(
        sim.events[0][0],
        EnetEvent::Disconnected { peer, reason: DisconnectReason::ConnectFailed, .. } if peer == p
    ));
    assert!(sim.now - now <= Duration::from_secs(2));
}

#[test]
fn disconnect_while_connecting_reports_once() {
    let mut sim = Sim::new(
        EnetConfig::default(),
        EnetConfig::default(),
        Duration::from_millis(5),
        0.0,
    );
    let (now, b) = (sim.now, sim.addrs[1]);
    let p = sim.hosts[0].connect(now, b, 2, 0).unwrap();
    sim.hosts[0].disconnect(now, p, 0).unwrap();
    sim.run_until(Duration::from_secs(1), |_| false);
    let ends = sim.events[0]
        .iter()
        .filter(|e| matches!(e, EnetEvent::Disconnected { .. }))
        .count();
    assert_eq!(ends, 1);
    assert_eq!(sim.hosts[0].peer_state(p), Some(PeerState::Disconnected));
}

#[test]
fn checksum_and_range_coder_interoperate() {
    let cfg = EnetConfig {
        checksum: true,
        range_coder: true,
        ..EnetConfig::default()
    };
    let mut sim = Sim::new(cfg.clone(), cfg, Duration::from_millis(1), 0.0);
    let p = sim.connect(1, 2)[0];
    let text = b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    sim.hosts[0].send(p, 0, true, text).unwrap();
    assert!(
        sim.run_until(Duration::from_secs(1), |s| received(&s.events[1]).len()
            == 1)
    );
    assert_eq!(received(&sim.events[1])[0].2, text);
    // The acknowledgements are read through the checksum and the range coder too.
    let got = rtt_samples(&mut sim.hosts[0]);
    assert!(!got.is_empty());
    assert!(
        got.iter().all(|&(_, rtt)| rtt == Duration::from_millis(2)),
        "{got:?}"
    );
}

#[test]
fn client_wrapper_and_wakeups() {
    let now = Instant::now();
    let server: SocketAddr = B.parse().unwrap();
    let mut c = EnetClient::connect(now, server, 2).unwrap();
    assert_eq!(c.state(), PeerState::Connecting);
    // The connect is queued: due now.
    assert_eq!(c.poll_timeout(), Some(now));
    assert!(matches!(
        c.send(0, true, b"x"),
        Err(EnetError::NotConnected)
    ));
    c.service(now);
    let mut buf = [0u8; crate::protocol::MAX_DATAGRAM];
    let (to, len) = c.poll_transmit(&mut buf).expect("the CONNECT datagram");
    assert_eq!(to, server);
    assert!(len > 0);
    // Waiting on the server: wake up at the service interval.
    assert_eq!(c.poll_timeout(), Some(now + Duration::from_millis(10)));
    assert_eq!(c.rtt(), None);
}

/// A caller that flushes what it queued itself (the bots' engine: once per wake-up) asks
/// `poll_service_timeout`, which a queued send leaves at the service interval; `poll_timeout`
/// says "now" for it. Before the engine asked the former, every bot input on a shared host
/// fired the host's timer and ran a full service (several walks over all its peers).
#[test]
fn queued_sends_wake_only_a_host_that_is_not_flushed_by_its_caller() {
    let mut sim = Sim::new(
        EnetConfig::with_peers(4),
        EnetConfig::with_peers(4),
        Duration::from_millis(2),
        0.0,
    );
    let ids = sim.connect(4, 2);
    let host = &mut sim.hosts[0];
    host.service(sim.now);
    let serviced = sim.now;
    let next_service = serviced + Duration::from_millis(10);
    assert_eq!(host.poll_timeout(), Some(next_service));
    assert_eq!(host.poll_service_timeout(), Some(next_service));
    assert!(!host.has_unflushed());
    host.send(ids[1], 0, false, b"input").unwrap();
    assert!(host.has_unflushed());
    assert_eq!(host.poll_timeout(), Some(serviced), "due now: flush me");
    assert_eq!(host.poll_service_timeout(), Some(next_service));
    // The caller's flush sends it: one datagram, to the one peer that queued.
    host.flush(sim.now);
    assert!(!host.has_unflushed());
    let mut buf = [0u8; MAX_ENET_DATAGRAM];
    assert!(host.poll_transmit(&mut buf).is_some());
    assert!(host.poll_transmit(&mut buf).is_none());
    assert_eq!(host.poll_timeout(), Some(next_service));
}

#[test]
fn bad_settings_are_refused() {
    let now = Instant::now();
    for cfg in [
        EnetConfig::with_peers(0),
        EnetConfig {
            mtu: 100,
            ..EnetConfig::default()
        },
        EnetConfig {
            channel_limit: 0,
            ..EnetConfig::default()
        },
    ] {
        assert!(matches!(
            EnetHost::new(now, &cfg),
            Err(EnetError::BadParameter(_))
        ));
    }
}

/// A bots' host keeps per peer slot only what it uses: the accepting side's admission state
/// (half-open since, the remote's ids: 56 bytes) is made at the first CONNECT, which a bots'
/// host never receives. Measured 72 bytes a slot (128 with that state inside).
#[test]
fn a_bots_host_carries_no_admission_state() {
    assert!(std::mem::size_of::<super::host::PeerMeta>() <= 72);
    let now = Instant::now();
    let mut h = EnetHost::new(now, &EnetConfig::with_peers(50)).unwrap();
    h.connect(now, B.parse().unwrap(), 2, 0).unwrap();
    h.service(now);
    assert!(h.accepted.is_empty());
    assert_eq!(h.slot_addrs.capacity(), 0);
    // The first CONNECT (a datagram from peer id 0xFFF) makes it, for every slot.
    let mut connect = [0u8; 52];
    connect[..2].copy_from_slice(&0x0FFFu16.to_be_bytes());
    h.handle_datagram(now, A.parse().unwrap(), &connect);
    assert_eq!(h.accepted.len(), 50);
}

/// A bots' host talks to one server address. With one bot (the default) its proven-address
/// table and its acknowledgement-timing sessions stay inline: no hash table (about 0.4 KiB a
/// host less) and no SipHash per datagram. With three bots the address stays inline and the
/// sessions (one per remote peer id) use the table, as the server's do. Round trips are
/// measured either way.
#[test]
fn a_bots_host_keeps_its_one_address_inline() {
    for bots in [1usize, 3] {
        let mut sim = Sim::new(
            EnetConfig::with_peers(bots),
            EnetConfig::with_peers(8),
            Duration::from_millis(5),
            0.0,
        );
        let ids = sim.connect(bots, 2);
        for &id in &ids {
            sim.hosts[0].send(id, 0, true, b"hello").unwrap();
        }
        sim.run_until(Duration::from_millis(200), |_| false);
        let mine = sim.hosts[0].host.socket();
        assert_eq!(mine.gate.proven.len(), 1, "{bots} bots: one server address");
        assert_eq!(mine.gate.proven.table_capacity(), 0, "{bots} bots");
        let (sessions, table) = mine.acks.as_ref().expect("ack_rtt is on").sessions();
        assert_eq!(sessions, bots);
        assert_eq!(table == 0, bots == 1, "{bots} bots: table of {table}");
        let server = sim.hosts[1].host.socket();
        assert_eq!(server.gate.proven.len(), 1, "one client address");
        assert_eq!(server.acks.as_ref().expect("on").sessions().0, bots);
        for h in &sim.hosts {
            assert!(h.stats().ack_rtt.samples >= bots as u64, "{bots} bots");
        }
    }
}
