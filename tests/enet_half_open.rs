//! Half-open ENet connects must not starve real players: 200 CONNECTs that never finish,
//! sent to a City server whose host has `players + 16` peer slots, used to keep 2 of 5 real
//! bots out. Half-open peers now expire (2 s) and give their slot to a newer CONNECT once
//! 200 ms old (`src/transport/enet.rs`, "Admission").

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use tickswarm::engine::spawn_reference_server;
use tickswarm::protocol::city::CityOptions;
use tickswarm::scenario::{ProtocolSection, ServerSection};
use tickswarm::transport::EnetClient;

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
    let section = ProtocolSection::City(CityOptions::default());
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
    let o = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("run")
        .arg(&scenario)
        .arg("--target")
        .arg(handle.addr.to_string())
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let second = flooder.join().unwrap();
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
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
