//! Half-open ENet connects must not starve real players: 200 CONNECTs that never finish,
//! sent to a City server whose host has `players + 16` peer slots, used to keep 2 of 5 real
//! bots out. Half-open peers now expire (2 s) and give their slot to a newer CONNECT once
//! 200 ms old (`src/transport/enet/admission.rs`, "Admission" in the module docs).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use crate::common::enet_forge::{first_message, forged_verify_ack};
use crate::common::summary::run_scenario;
use tickswarm::engine::spawn_reference_server;
use tickswarm::games::city::CityOptions;
use tickswarm::protocol::ProtocolName;
use tickswarm::scenario::{ProtocolSection, ServerSection};
use tickswarm::transport::{EnetClient, EnetConfig, EnetEvent, EnetHost};

/// The bytes of one ENet CONNECT to `server`.
fn connect_datagram(server: SocketAddr) -> Vec<u8> {
    let t0 = Instant::now();
    let mut c = EnetClient::connect(t0, server, 2).unwrap();
    c.flush(t0);
    let mut buf = vec![0u8; 4096];
    let (_, n) = c.poll_transmit(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// `n` sockets each send one CONNECT and never answer (kept open so nothing is refused).
fn flood(server: SocketAddr, n: usize) -> Vec<UdpSocket> {
    let hs = connect_datagram(server);
    (0..n)
        .map(|_| {
            let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            s.send_to(&hs, server).unwrap();
            s
        })
        .collect()
}

#[test]
fn half_open_flood_does_not_keep_real_bots_out() {
    let server = ServerSection {
        players_per_instance: Some(5),
        ..ServerSection::default()
    };
    let section = ProtocolSection::of(&tickswarm::games::city::City, CityOptions::default());
    let handle =
        spawn_reference_server((Ipv4Addr::LOCALHOST, 0).into(), &section, &server).unwrap();
    // 200 half-open connects fill all 21 peer slots; a second wave arrives while the bots
    // connect.
    let first = flood(handle.addr, 200);
    std::thread::sleep(Duration::from_millis(300));
    let flooder = std::thread::spawn({
        let addr = handle.addr;
        move || {
            std::thread::sleep(Duration::from_millis(200));
            flood(addr, 200)
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("city.yaml");
    std::fs::write(
        &scenario,
        "name: city-half-open\nprotocol:\n  city: {}\npopulation:\n  stages:\n    - ramp_to: 5\n      over: 500ms\n    - hold: 2s\nbehaviour:\n  handshake_timeout: 6s\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    let (o, s) = run_scenario(
        &scenario,
        &["--target", &handle.addr.to_string()],
        &out,
        &[0, 1],
    );
    let second = flooder.join().unwrap();
    drop(handle);
    drop((first, second));
    assert_eq!(
        s["bots"]["connected"],
        5,
        "{} / {}",
        s["bots"],
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(s["bots"]["failed"], 0, "{}", s["bots"]);
}

/// Four sockets that each send a CONNECT and then, without reading, acknowledge the
/// VERIFY_CONNECT they never read with the game's ClientHello in the same datagram (as a
/// real client does): 16 guesses of peer id and session id, each echoing a sent time of 0
/// and the times a host clock started at 1,000 ms at the server's start would show. Before
/// the host checked the echo, these completed the handshake and took all four player slots
/// of a ZergCity server. Now every guess is dropped and ends its half-open connect, and the
/// four real bots get in.
#[test]
fn spoofed_sessions_do_not_lock_real_bots_out_of_zergcity() {
    let server = ServerSection {
        players_per_instance: Some(4),
        ..ServerSection::default()
    };
    let section = ProtocolSection::of(&tickswarm::games::zergcity::ZergCity, Default::default());
    let started = Instant::now();
    let handle =
        spawn_reference_server((Ipv4Addr::LOCALHOST, 0).into(), &section, &server).unwrap();
    let hs = connect_datagram(handle.addr);
    let hello = first_message(ProtocolName::ZergCity);
    let attackers: Vec<UdpSocket> = (0..4)
        .map(|_| {
            let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            s.send_to(&hs, handle.addr).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    let elapsed = started.elapsed().as_millis() as u16;
    let times = [0u16].into_iter().chain((0..40).map(|d| {
        1_000u16
            .wrapping_add(elapsed)
            .wrapping_sub(20)
            .wrapping_add(d)
    }));
    for st in times {
        for s in &attackers {
            for peer in 0..4 {
                for session in 0..4 {
                    let d = forged_verify_ack(peer, session, st, Some(&hello));
                    s.send_to(&d, handle.addr).unwrap();
                }
            }
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("zergcity.yaml");
    std::fs::write(
        &scenario,
        "name: zergcity-spoofed\nprotocol:\n  zergcity: {}\npopulation:\n  stages:\n    - ramp_to: 4\n      over: 200ms\n    - hold: 2s\nbehaviour:\n  handshake_timeout: 6s\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    let (o, s) = run_scenario(
        &scenario,
        &["--target", &handle.addr.to_string()],
        &out,
        &[0, 1],
    );
    drop(handle);
    drop(attackers);
    assert_eq!(
        s["bots"]["connected"],
        4,
        "{} / {}",
        s["bots"],
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(s["bots"]["failed"], 0, "{}", s["bots"]);
}

/// The server side of one ENet handshake, sans-IO: a host with 4 slots gets a CONNECT from
/// `client`; returns the host and the VERIFY_CONNECT it answered with (its header's peer id
/// word and sent time are what the client's acknowledgement must carry).
fn half_open_host(t0: Instant, client: SocketAddr) -> (EnetHost, Vec<u8>) {
    let server = SocketAddr::from(([127, 0, 0, 1], 7777));
    let mut host = EnetHost::new(t0, &EnetConfig::with_peers(4)).unwrap();
    host.handle_datagram(t0, client, &connect_datagram(server));
    host.service(t0);
    let mut buf = vec![0u8; 4096];
    let (to, n) = host.poll_transmit(&mut buf).expect("a VERIFY_CONNECT");
    assert_eq!(to, client);
    buf.truncate(n);
    (host, buf)
}

fn connected(host: &mut EnetHost) -> bool {
    std::iter::from_fn(|| host.poll_event()).any(|e| matches!(e, EnetEvent::Connected { .. }))
}

/// The proof that completes an incoming ENet handshake is exact: the acknowledgement of
/// VERIFY_CONNECT must echo the sent time of the datagram that carried it, to the slot and
/// session the VERIFY_CONNECT named, from the address it went to. A wrong echo (0, or one
/// off) is dropped and ends the half-open connect, so a blind attacker gets one guess per
/// CONNECT; the exact echo completes it.
#[test]
fn verify_connect_acknowledgement_must_echo_its_sent_time() {
    let t0 = Instant::now();
    let client = SocketAddr::from(([127, 0, 0, 9], 40_000));
    let later = t0 + Duration::from_millis(5);
    // A VERIFY_CONNECT's header carries its sent time; its command names our slot (4 bytes
    // into the command). Each host's clock has its own phase, so both are read per host.
    // The session bits are tried all four ways (ENet itself drops a wrong one).
    let sent_and_slot = |verify: &[u8]| {
        (
            u16::from_be_bytes([verify[2], verify[3]]),
            u16::from_be_bytes([verify[8], verify[9]]) & 0x0FFF,
        )
    };
    let ack_all_sessions = |host: &mut EnetHost, from: SocketAddr, slot: u16, echo: u16| {
        for session in 0..4 {
            host.handle_datagram(later, from, &forged_verify_ack(slot, session, echo, None));
        }
        host.service(later);
    };

    for off in [None, Some(1u16), Some(u16::MAX)] {
        let (mut host, verify) = half_open_host(t0, client);
        let (sent, slot) = sent_and_slot(&verify);
        let wrong = off.map_or(0, |o| sent.wrapping_add(o));
        ack_all_sessions(&mut host, client, slot, wrong);
        assert!(
            !connected(&mut host),
            "echo {wrong} (sent {sent}) completed it"
        );
        assert_eq!(host.stats().forged_proofs, 4);
        // The half-open connect is gone: even the right echo now finds no session.
        ack_all_sessions(&mut host, client, slot, sent);
        assert!(!connected(&mut host), "one guess per CONNECT");
    }
    // From another address, the right echo proves nothing.
    let (mut host, verify) = half_open_host(t0, client);
    let (sent, slot) = sent_and_slot(&verify);
    let other = SocketAddr::from(([127, 0, 0, 9], 40_001));
    ack_all_sessions(&mut host, other, slot, sent);
    assert!(!connected(&mut host));
    // The exact echo from the client completes the handshake.
    ack_all_sessions(&mut host, client, slot, sent);
    assert!(connected(&mut host), "the real acknowledgement connects");
}
