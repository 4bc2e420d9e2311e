//! City reference server: content without a request, refused sessions that give their ENet
//! peer slot back (issue 10 item 14).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tickswarm::engine::io::enet::EnetServerSide;
use tickswarm::engine::io::ServerTransport;
use tickswarm::games::city::codec::{self, Dialect, Message, MsgType, PlayerInput, Vec2i};
use tickswarm::games::city::{CityOptions, CityServer, CityServerConfig};
use tickswarm::protocol::{ConnId, Server, MAX_DATAGRAM};
use tickswarm::transport::{EnetClient, EnetConfig, EnetEvent};

fn small_content() -> CityServerConfig {
    CityServerConfig {
        content_assets: 3,
        content_asset_size: 2048,
        ..CityServerConfig::default()
    }
}

fn encode(msg: &Message<'_>) -> Vec<u8> {
    let mut b = vec![0u8; 512];
    let n = codec::encode(&mut b, 0, msg).unwrap();
    b.truncate(n);
    b
}

fn hello(version: u32) -> Vec<u8> {
    encode(&Message::ClientHello {
        protocol_version: version,
        client_version: "test",
        player_name: "cached",
    })
}

/// Message types the server sent to `conn` since the last call.
fn drain_types(server: &mut CityServer, conn: ConnId) -> Vec<MsgType> {
    let mut buf = vec![0u8; MAX_DATAGRAM.max(64 * 1024)];
    let mut out = Vec::new();
    while let Some((to, t)) = server.poll_transmit(&mut buf) {
        if to != conn {
            continue;
        }
        for m in codec::messages(&buf[..t.len]) {
            let m = m.expect("well-framed");
            if let Some(ty) = MsgType::from_u8(m.type_byte, Dialect::Spec) {
                out.push(ty);
            }
        }
    }
    out
}

/// A client that has every asset sends no ContentRequest (city.md: "if missing assets").
/// Within CONTENT_REQUEST_WAIT of the manifest it still gets ContentComplete and FullState.
#[test]
fn a_client_with_every_asset_gets_full_state_without_a_request() {
    let t0 = Instant::now();
    let mut server = CityServer::new(small_content(), t0);
    let c = ConnId(1);
    server.handle_connect(t0, c);
    server.handle_datagram(t0, c, &hello(codec::PROTOCOL_VERSION));
    let first = drain_types(&mut server, c);
    assert!(first.contains(&MsgType::ServerHello), "{first:?}");
    assert!(first.contains(&MsgType::ContentManifest), "{first:?}");
    assert!(!first.contains(&MsgType::FullState));
    // Nothing before the wait is over...
    let mut t = t0;
    while t < t0 + Duration::from_millis(900) {
        t += Duration::from_millis(10);
        server.handle_timeout(t);
        let got = drain_types(&mut server, c);
        assert!(
            !got.contains(&MsgType::ContentComplete),
            "at {t:?}: {got:?}"
        );
    }
    // ...then ContentComplete and FullState, in that order.
    let mut got = Vec::new();
    while t < t0 + Duration::from_millis(1200) {
        t += Duration::from_millis(10);
        server.handle_timeout(t);
        got.extend(drain_types(&mut server, c));
    }
    let cc = got.iter().position(|&m| m == MsgType::ContentComplete);
    let fs = got.iter().position(|&m| m == MsgType::FullState);
    assert!(cc.is_some() && fs.is_some() && cc < fs, "{got:?}");
    assert!(
        !got.contains(&MsgType::ContentChunk),
        "nothing was requested"
    );
    assert_eq!(server.stats().events.get("content_without_request"), 1);
}

/// The same client starting to play right away ends the content stage at its first input.
#[test]
fn a_first_input_instead_of_a_request_ends_the_content_stage() {
    let t0 = Instant::now();
    let mut server = CityServer::new(small_content(), t0);
    let c = ConnId(1);
    server.handle_connect(t0, c);
    server.handle_datagram(t0, c, &hello(codec::PROTOCOL_VERSION));
    drain_types(&mut server, c);
    let input = encode(&Message::PlayerInput(PlayerInput {
        tick: 1,
        last_received_tick: 0,
        move_x: 1,
        move_y: 0,
        buttons: 0,
        target_tile: Vec2i { x: 0, y: 0 },
    }));
    let t = t0 + Duration::from_millis(50);
    server.handle_datagram(t, c, &input);
    let got = drain_types(&mut server, c);
    assert_eq!(
        &got[..2],
        &[MsgType::ContentComplete, MsgType::FullState],
        "{got:?}"
    );
    assert_eq!(server.stats().events.get("input_before_game"), 0);
}

/// A refused client (wrong version) that never acknowledges ENet's disconnect gives its
/// peer slot back within CLOSE_GRACE, instead of ENet's 5-30 s peer timeout.
#[test]
fn a_refused_silent_client_does_not_hold_a_peer_slot() {
    let t0 = Instant::now();
    let opts = tickswarm::protocol::ProtocolSection::of(
        &tickswarm::games::city::City,
        CityOptions::default(),
    );
    let mut server: Box<dyn Server> =
        opts.make_server(&tickswarm::protocol::registry::ServerParams::default(), t0);
    let mut side = EnetServerSide::new(EnetConfig::with_peers(4), t0).unwrap();
    let server_addr: SocketAddr = ([127, 0, 0, 1], 7000).into();
    let client_addr: SocketAddr = ([127, 0, 0, 1], 7001).into();
    let mut client = EnetClient::connect(t0, server_addr, 2).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut t = t0;
    let mut connected = false;
    let mut silent = false;
    let mut freed_at = None;
    while t < t0 + Duration::from_secs(4) {
        t += Duration::from_millis(5);
        if !silent {
            client.service(t);
            while let Some(ev) = client.poll_event() {
                if let EnetEvent::Connected { .. } = ev {
                    connected = true;
                    client
                        .send(0, true, &hello(codec::PROTOCOL_VERSION + 7))
                        .unwrap();
                }
                if let EnetEvent::Received { .. } = ev {
                    // The refusal: from now on the client is silent.
                    silent = true;
                }
            }
            client.flush(t);
            while let Some((_, n)) = client.poll_transmit(&mut buf) {
                side.on_datagram(t, client_addr, &buf[..n], server.as_mut());
            }
        }
        if server.poll_timeout().is_some_and(|d| d <= t) {
            server.handle_timeout(t);
        }
        side.service(t, server.as_mut());
        while let Some((_, n)) = side.poll_datagram(t, server.as_mut(), &mut buf) {
            if !silent {
                client.handle_datagram(t, server_addr, &buf[..n]);
            }
        }
        if silent && freed_at.is_none() && side.peers_in_use() == 0 {
            freed_at = Some(t);
        }
    }
    assert!(connected && silent, "the client connected and was refused");
    assert_eq!(server.stats().refused, 1);
    let freed = freed_at.expect("the refused peer's slot was freed");
    assert!(
        freed - t0 < Duration::from_millis(1500),
        "freed after {:?}",
        freed - t0
    );
}
