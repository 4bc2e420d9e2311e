//! Where bots are stuck, against ground truth.
//!
//! A City server that answers ClientHello with ServerHello (and Ping with Pong) but never
//! starts the content transfer leaves every bot "connected" and none playing. The run must
//! say so: `intervals[].phases` counts them in `content` each second, and the console names
//! what they wait for ("10 bots waiting for ContentManifest for 5 s"). Against the real
//! reference server the same bots are counted in game and nothing is reported waiting.
//!
//! The broken server is written here on the crate's sans-IO ENet host: real ENet on a
//! loopback socket, real City messages from the codec, and nothing else.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use tickswarm::games::city::codec::{decode_all, encode, Dialect, Message};
use tickswarm::transport::enet::{EnetConfig, EnetEvent, EnetHost};

use crate::common::summary::{assert_absent, run_text, stderr, u64_at};

const BOTS: u64 = 10;

/// A City server stuck after the handshake: ServerHello and Pong, never a ContentManifest.
struct StuckServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    hellos: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl StuckServer {
    fn start() -> StuckServer {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
        sock.set_read_timeout(Some(Duration::from_millis(2)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let hellos = Arc::new(AtomicU64::new(0));
        let (stop2, hellos2) = (stop.clone(), hellos.clone());
        let thread = std::thread::spawn(move || serve_stuck(sock, &stop2, &hellos2));
        StuckServer {
            addr,
            stop,
            hellos,
            thread: Some(thread),
        }
    }
}

impl Drop for StuckServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_stuck(sock: UdpSocket, stop: &AtomicBool, hellos: &AtomicU64) {
    let mut cfg = EnetConfig::with_peers(64);
    cfg.channel_limit = 255;
    let mut host = EnetHost::new(Instant::now(), &cfg).expect("an ENet host");
    let mut rx = vec![0u8; 65_536];
    let mut tx = vec![0u8; 65_536];
    let mut msg = vec![0u8; 1500];
    let mut session = 0u32;
    while !stop.load(Ordering::Relaxed) {
        if let Ok((n, from)) = sock.recv_from(&mut rx) {
            host.handle_datagram(Instant::now(), from, &rx[..n]);
        }
        let now = Instant::now();
        host.service(now);
        while let Some(ev) = host.poll_event() {
            let EnetEvent::Received { peer, packet, .. } = ev else {
                continue;
            };
            let Ok(msgs) = decode_all(packet.bytes(), Dialect::Spec) else {
                continue;
            };
            for (_, m) in msgs {
                let reply = match m {
                    Message::ClientHello { .. } => {
                        session += 1;
                        hellos.fetch_add(1, Ordering::Relaxed);
                        Message::ServerHello {
                            protocol_version: 1,
                            server_id: "stuck",
                            server_name: "answers the hello, never the content",
                            session_id: session,
                            player_entity: session,
                        }
                    }
                    Message::Ping => Message::Pong,
                    _ => continue,
                };
                if let Ok(len) = encode(&mut msg, 0, &reply) {
                    let _ = host.send(peer, 0, true, &msg[..len]);
                }
            }
        }
        host.flush(now);
        while let Some((to, len)) = host.poll_transmit(&mut tx) {
            let _ = sock.send_to(&tx[..len], to);
        }
    }
}

/// `BOTS` City bots for `secs` against `target`, written as the scenario's `target:`
/// (`embedded`, one address or a list).
fn scenario(target: &str, secs: u64) -> String {
    format!(
        "name: phases\nprotocol:\n  city: {{}}\ntarget: {target}\npopulation:\n  stages:\n    \
         - ramp_to: {BOTS}\n      over: 0s\nbehaviour:\n  ping_interval: 200ms\n  \
         handshake_timeout: 20s\nduration: {secs}s\n"
    )
}

/// The scenario run through the shared harness (any verdict that writes a summary: pass,
/// fail, or 3 when no bot got in): the summary and stderr.
fn run_phases(target: &str, secs: u64) -> (Value, String) {
    let (o, s) = run_text(&scenario(target, secs), &[], &[0, 1, 3]);
    (s, stderr(&o))
}

fn phase(p: &Value, name: &str) -> u64 {
    u64_at(p, &format!("phases.{name}"))
}

const PHASES: [&str; 8] = [
    "connecting",
    "transport_handshake",
    "protocol_handshake",
    "content",
    "in_game",
    "reconnecting",
    "failed",
    "closed",
];

#[test]
fn bots_stuck_in_content_are_counted_there_and_named_on_the_console() {
    let server = StuckServer::start();
    let (s, err) = run_phases(&server.addr.to_string(), 7);
    assert_eq!(
        server.hellos.load(Ordering::Relaxed),
        BOTS,
        "every bot got its ServerHello"
    );
    drop(server);
    let points = s["intervals"].as_array().expect("intervals");
    assert!(points.len() >= 6, "{} points", points.len());
    // Every bot is somewhere, every second.
    for p in points {
        let total: u64 = PHASES.iter().map(|n| phase(p, n)).sum();
        assert_eq!(total, BOTS, "phases of {p}");
    }
    // From the second second on (the handshakes take milliseconds), all are waiting for
    // content and none plays.
    for p in &points[1..] {
        assert_eq!(phase(p, "content"), BOTS, "{p}");
        assert_eq!(phase(p, "in_game"), 0, "{p}");
        let w = &p["waiting"][0];
        assert_eq!(w["phase"], "content", "{p}");
        assert_eq!(w["for"], "ContentManifest", "{p}");
        assert_eq!(w["bots"], BOTS, "{p}");
    }
    // The longest wait grows with the run (seen once a second: up to a second short).
    let last_whole = points.iter().rev().find(|p| p["partial"] != true).unwrap();
    let t = last_whole["t"].as_f64().unwrap();
    let longest = last_whole["waiting"][0]["longest_s"].as_f64().unwrap();
    assert!(
        longest <= t && longest >= t - 2.0,
        "longest wait {longest} s at t = {t} s"
    );
    assert_eq!(s["inputs_sent"], 0);
    // And the console says why nothing happens.
    let line = err
        .lines()
        .find(|l| l.contains("waiting for ContentManifest"))
        .unwrap_or_else(|| panic!("no waiting line on stderr:\n{err}"));
    assert!(
        line.starts_with(&format!(
            "waiting  {BOTS} bots waiting for ContentManifest for "
        )),
        "{line}"
    );
    // The result names them too, as the run ended.
    assert!(
        err.lines().any(|l| l.starts_with("waiting  ")
            && l.contains("waiting for ContentManifest")
            && l.ends_with("when the run ended")),
        "{err}"
    );
    // Not a TTY here: the progress lines are plain, one a line, and say none is in game.
    assert!(
        err.lines()
            .any(|l| l.contains(&format!("bots {BOTS}/{BOTS}, 0 in game"))),
        "{err}"
    );
}

#[test]
fn bots_on_a_working_server_are_counted_in_game() {
    let (s, err) = run_phases("embedded", 4);
    let points = s["intervals"].as_array().expect("intervals");
    for p in &points[1..] {
        if p["partial"] == true {
            continue;
        }
        assert_eq!(phase(p, "in_game"), BOTS, "{p}");
        assert_absent(p, "waiting");
    }
    assert!(!err.contains("waiting for"), "{err}");
    assert!(s["inputs_sent"].as_u64().unwrap() > 0);
}

/// The reference City server as its own process (`tickswarm serve city`), and its address.
fn serve_city() -> (std::process::Child, String) {
    crate::common::serve::serve("city", &[])
}

/// Two targets, one working and one stuck after the hello: the bots are spread over them
/// (five each), and the per-target points put the five playing on the working server and
/// the five waiting for content on the stuck one, with the stuck one's downstream bytes a
/// trickle (pongs) next to the working one's snapshots.
#[test]
fn per_target_points_tell_a_stuck_instance_from_a_working_one() {
    let stuck = StuckServer::start();
    let stuck_addr = stuck.addr.to_string();
    let (mut good, good_addr) = serve_city();
    let (s, err) = run_phases(&format!("{good_addr},{stuck_addr}"), 4);
    let _ = good.kill();
    let _ = good.wait();
    drop(stuck);
    let points = s["intervals"].as_array().expect("intervals");
    let mut seen = 0;
    for p in &points[1..] {
        if p["partial"] == true {
            continue;
        }
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("no targets in {p}\n{err}"));
        assert_eq!(targets.len(), 2, "{p}");
        let by = |addr: &str| {
            targets
                .iter()
                .find(|t| t["target"] == addr)
                .unwrap_or_else(|| panic!("no target {addr} in {p}"))
                .clone()
        };
        let (g, b) = (by(&good_addr), by(&stuck_addr));
        assert_eq!(g["phases"]["in_game"], BOTS / 2, "{p}");
        assert_eq!(b["phases"]["content"], BOTS / 2, "{p}");
        assert_eq!(b["phases"]["in_game"], 0, "{p}");
        let (gd, bd) = (
            g["bytes_down"].as_u64().unwrap(),
            b["bytes_down"].as_u64().unwrap(),
        );
        assert!(gd > 10 * bd, "working {gd} B vs stuck {bd} B in {p}");
        // The targets add up to the whole.
        assert_eq!(
            phase(p, "in_game"),
            g["phases"]["in_game"].as_u64().unwrap() + b["phases"]["in_game"].as_u64().unwrap()
        );
        assert_eq!(
            p["bytes_down"].as_u64().unwrap(),
            gd + bd,
            "per-target bytes add up to the second's: {p}"
        );
        seen += 1;
    }
    assert!(seen >= 2, "{seen} whole seconds checked");
}

/// A City target whose UDP port is open but never answers: ENet's CONNECT goes unanswered,
/// so every bot is counted in the transport handshake (not yet in the protocol's), and the
/// console says so once they have waited five seconds.
#[test]
fn bots_at_a_silent_port_are_counted_in_the_transport_handshake() {
    let silent = UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
    let (s, err) = run_phases(&silent.local_addr().unwrap().to_string(), 7);
    drop(silent);
    let points = s["intervals"].as_array().expect("intervals");
    for p in &points[1..] {
        assert_eq!(phase(p, "transport_handshake"), BOTS, "{p}");
        assert_eq!(phase(p, "protocol_handshake"), 0, "{p}");
    }
    assert!(
        err.lines().any(|l| l.starts_with(&format!(
            "waiting  {BOTS} bots in the transport handshake for "
        ))),
        "{err}"
    );
}
