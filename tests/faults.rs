//! The fault matrix: hostile or broken servers, each case a few seconds. Whatever the server
//! does, the swarm does not crash, counts the fault by its reason, writes the report, and
//! gives the right verdict; where a fault could grow memory, the swarm's peak RSS (VmHWM of
//! the `tickswarm run` process) stays bounded.
//!
//! A hostile server is the protocol's real reference server (sans-IO) behind the engine's
//! server transport, on a UDP socket of this test, with a [`Fault`] wrapped around it that
//! mutates, drops or adds to what it sends (tests/dead_server.rs kills real `serve`
//! processes too).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tickswarm::engine::transports::server_transport;
use tickswarm::protocol::registry::ServerParams;
use tickswarm::protocol::{ConnId, ProtocolName, Server, ServerStats, Transmit};

/// What the hostile server does to its own output.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Nothing: a healthy server (the control case).
    None,
    /// Stops sending anything after this long.
    SilentAfter(Duration),
    /// Every 4th datagram after the handshake replaced by bytes that are no message.
    Garbage,
    /// cafe: every datagram after Welcome carries protocol version 9.
    WrongVersion,
    /// rtype: every snapshot's `size` field claims 10 bytes more than the datagram has.
    LyingLength,
    /// An extra 65,000-byte datagram to each client every 50 ms.
    Oversize,
    /// rtype: 200 ENTITY_CREATEs with ids never seen before, to each client, every tick.
    EntityFlood,
    /// ZergCity: every 100 ms a FullSnapshot claiming 4 GiB from 16 bytes, and one whose
    /// LZ4 block (33 KB) really expands to 8 MiB of zeros (the largest that fits a 64 KB
    /// message expands to 16 MiB, the bot's limit, at 255:1).
    Lz4Bomb,
}

/// The reference server with a fault wrapped around it.
struct Hostile {
    inner: Box<dyn Server>,
    fault: Fault,
    start: Instant,
    now: Instant,
    conns: Vec<ConnId>,
    sent: u64,
    next_inject: Instant,
    /// Extra datagrams waiting: (to, bytes).
    extra: Vec<(ConnId, Vec<u8>)>,
    bomb: Vec<u8>,
}

impl Hostile {
    fn new(inner: Box<dyn Server>, fault: Fault, now: Instant) -> Self {
        let bomb = if matches!(fault, Fault::Lz4Bomb) {
            lz4_flex::block::compress(&vec![0u8; BOMB])
        } else {
            Vec::new()
        };
        Self {
            inner,
            fault,
            start: now,
            now,
            conns: Vec::new(),
            sent: 0,
            next_inject: now,
            extra: Vec::new(),
            bomb,
        }
    }

    fn inject(&mut self) {
        let every = match self.fault {
            Fault::Oversize => Duration::from_millis(50),
            Fault::EntityFlood => Duration::from_millis(16),
            Fault::Lz4Bomb => Duration::from_millis(100),
            _ => return,
        };
        if self.now < self.next_inject {
            return;
        }
        self.next_inject = self.now + every;
        for &c in &self.conns {
            match self.fault {
                Fault::Oversize => self.extra.push((c, vec![0x5A; 65_000])),
                Fault::EntityFlood => {
                    for _ in 0..200 {
                        self.sent += 1;
                        // ENTITY_CREATE: type 20, version 1, size 18, id, x, y, sprite.
                        let id = 0x4000_0000u32 + self.sent as u32;
                        let mut d = vec![20, 1, 0, 18];
                        d.extend_from_slice(&id.to_be_bytes());
                        d.extend_from_slice(&100f32.to_be_bytes());
                        d.extend_from_slice(&100f32.to_be_bytes());
                        d.extend_from_slice(&2u16.to_be_bytes());
                        self.extra.push((c, d));
                    }
                }
                Fault::Lz4Bomb => {
                    self.extra
                        .push((c, zc_full_snapshot(u32::MAX, &[0x1F; 16])));
                    let bomb = zc_full_snapshot(BOMB as u32, &self.bomb);
                    self.extra.push((c, bomb));
                }
                _ => {}
            }
        }
    }
}

/// What the real LZ4 bomb expands to.
const BOMB: usize = 8 << 20;

/// A ZergCity FullSnapshot (type 0x10, COMPRESSED|RELIABLE) claiming `size` bytes.
fn zc_full_snapshot(size: u32, block: &[u8]) -> Vec<u8> {
    let body_len = 4 + 8 + block.len();
    let mut d = b"ZCNT".to_vec();
    d.extend_from_slice(&[1, 0x10, 0x01 | 0x02, 0]);
    d.extend_from_slice(&(body_len as u32).to_le_bytes());
    d.extend_from_slice(&7u32.to_le_bytes());
    d.extend_from_slice(&size.to_le_bytes());
    d.extend_from_slice(&1u64.to_le_bytes());
    d.extend_from_slice(block);
    d
}

impl Server for Hostile {
    fn handle_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) {
        self.now = now;
        if !self.conns.contains(&from) {
            self.conns.push(from);
        }
        self.inner.handle_datagram(now, from, data);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        self.inner.handle_timeout(now);
        self.inject();
    }
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
        loop {
            if let Some((to, d)) = self.extra.pop() {
                if let Fault::SilentAfter(after) = self.fault {
                    if self.now.duration_since(self.start) >= after {
                        continue;
                    }
                }
                let n = d.len().min(buf.len());
                buf[..n].copy_from_slice(&d[..n]);
                return Some((
                    to,
                    Transmit {
                        len: n,
                        channel: 0,
                        reliable: true,
                    },
                ));
            }
            let (to, t) = self.inner.poll_transmit(buf)?;
            self.sent += 1;
            let d = &mut buf[..t.len];
            match self.fault {
                Fault::SilentAfter(after) if self.now.duration_since(self.start) >= after => {
                    continue
                }
                Fault::Garbage if self.sent % 4 == 0 => {
                    for (i, b) in d.iter_mut().enumerate() {
                        *b = (i as u8).wrapping_mul(37).wrapping_add(self.sent as u8);
                    }
                }
                // cafe's header: magic u16, version u8 (Welcome, the first, stays valid).
                Fault::WrongVersion if self.sent > 1 && d.len() > 2 => d[2] = 9,
                // rtype's header: type u8, version u8, size u16 BE; 23 is SNAPSHOT.
                Fault::LyingLength if d.len() > 4 && d[0] == 23 => {
                    let claimed = (t.len as u16).wrapping_add(10);
                    d[2..4].copy_from_slice(&claimed.to_be_bytes());
                }
                _ => {}
            }
            return Some((to, t));
        }
    }
    fn poll_timeout(&self) -> Option<Instant> {
        let inner = self.inner.poll_timeout();
        Some(inner.map_or(self.next_inject, |t| {
            t.min(self.next_inject + Duration::from_millis(1))
        }))
    }
    fn stats(&self) -> &ServerStats {
        self.inner.stats()
    }
    fn handle_connect(&mut self, now: Instant, from: ConnId) {
        self.now = now;
        if !self.conns.contains(&from) {
            self.conns.push(from);
        }
        self.inner.handle_connect(now, from);
    }
    fn handle_disconnect(&mut self, now: Instant, from: ConnId) {
        self.conns.retain(|&c| c != from);
        self.inner.handle_disconnect(now, from);
    }
    fn poll_close(&mut self) -> Option<ConnId> {
        self.inner.poll_close()
    }
}

/// A hostile server on 127.0.0.1 in a thread, serving for `life` (or until dropped). With
/// `restart_at`, the server's state is thrown away at that moment and a fresh one takes over
/// on the same socket (a restart that lost every session).
struct HostileServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HostileServer {
    fn start(proto: ProtocolName, fault: Fault, restart_at: Option<Duration>) -> Self {
        Self::start_with(proto, fault, restart_at, None)
    }

    /// [`HostileServer::start`], and with `kill_at` the thread closes its socket at that
    /// moment (a killed process: the kernel answers further datagrams with port unreachable).
    fn start_with(
        proto: ProtocolName,
        fault: Fault,
        restart_at: Option<Duration>,
        kill_at: Option<Duration>,
    ) -> Self {
        let sock = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(1)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let section = proto.default_section();
            let make = |now| {
                let params = ServerParams {
                    bind: Some(addr),
                    ..ServerParams::default()
                };
                let tr = server_transport(section.transport(), addr, 64, false, now).unwrap();
                (
                    Hostile::new(section.make_server(&params, now), fault, now),
                    tr,
                )
            };
            let t0 = Instant::now();
            let (mut server, mut tr) = make(t0);
            let mut restarted = false;
            let mut buf = vec![0u8; 70_000];
            let mut out = vec![0u8; 70_000];
            let life = Duration::from_secs(30);
            while !flag.load(Ordering::Relaxed)
                && t0.elapsed() < life
                && kill_at.is_none_or(|k| t0.elapsed() < k)
            {
                if let Some(at) = restart_at {
                    if !restarted && t0.elapsed() >= at {
                        restarted = true;
                        (server, tr) = make(Instant::now());
                    }
                }
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    tr.on_datagram(Instant::now(), from, &buf[..n], &mut server);
                }
                let now = Instant::now();
                if server.poll_timeout().is_some_and(|t| t <= now) {
                    server.handle_timeout(now);
                }
                tr.service(now, &mut server);
                while let Some((to, n)) = tr.poll_datagram(now, &mut server, &mut out) {
                    let _ = sock.send_to(&out[..n], to);
                }
            }
        });
        Self {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A UDP socket that reads everything and answers nothing.
struct Silent {
    addr: SocketAddr,
    _sock: UdpSocket,
}

impl Silent {
    fn start() -> Self {
        let sock = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        Self {
            addr: sock.local_addr().unwrap(),
            _sock: sock,
        }
    }
}

struct Outcome {
    code: Option<i32>,
    s: Value,
    /// Peak resident set of the `tickswarm run` process, KiB.
    hwm_kib: u64,
    stderr: String,
}

/// `tickswarm run` with `bots` bots for `duration` against `addr`.
fn run(proto: &str, addr: SocketAddr, bots: u32, duration: &str, behaviour: &str) -> Outcome {
    run_with(proto, addr, bots, duration, behaviour, "")
}

/// [`run`] with scenario `thresholds` (YAML list items).
fn run_with(
    proto: &str,
    addr: SocketAddr,
    bots: u32,
    duration: &str,
    behaviour: &str,
    thresholds: &str,
) -> Outcome {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("s.yaml");
    std::fs::write(
        &scenario,
        format!(
            "name: fault\nprotocol:\n  {proto}: {{}}\npopulation:\n  stages:\n    - ramp_to: {bots}\n      over: 0s\nbehaviour:\n  ping_interval: 200ms\n  handshake_timeout: 2s\n{behaviour}duration: {duration}\n{thresholds}"
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("run")
        .arg(&scenario)
        .args(["--target", &addr.to_string()])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut hwm_kib = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    let code = loop {
        if let Ok(text) = std::fs::read_to_string(&status) {
            if let Some(v) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            {
                hwm_kib = hwm_kib.max(v);
            }
        }
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        assert!(Instant::now() < deadline, "the run did not end");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    let summary = Path::new(&out).join("summary.json");
    let s: Value = serde_json::from_str(
        &std::fs::read_to_string(&summary)
            .unwrap_or_else(|e| panic!("the report is always written ({e}): {stderr}")),
    )
    .unwrap();
    assert!(out.join("report.html").exists(), "report.html");
    assert_ne!(code, Some(101), "a panic: {stderr}");
    eprintln!(
        "{proto}: exit {code:?}, verdict {}, VmHWM {} KiB, bots {}, errors {}",
        s["verdict"], hwm_kib, s["bots"], s["errors"]
    );
    Outcome {
        code,
        s,
        hwm_kib,
        stderr,
    }
}

fn decode_errors(s: &Value) -> u64 {
    s["errors"]["decode"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

fn decode_reason(s: &Value, needle: &str) -> u64 {
    s["errors"]["decode"].as_object().map_or(0, |m| {
        m.iter()
            .filter(|(k, _)| k.contains(needle))
            .filter_map(|(_, v)| v.as_u64())
            .sum()
    })
}

/// Peak RSS allowed for a few bots: far above the ~10-30 MB a healthy run takes, far below
/// what an unbounded table or buffer would reach.
const RSS_BOUND_KIB: u64 = 150 * 1024;

#[test]
fn control_a_healthy_hostile_harness_passes() {
    let srv = HostileServer::start(ProtocolName::Cafe, Fault::None, None);
    let o = run("cafe", srv.addr, 5, "2s", "");
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert_eq!(o.s["verdict"], "pass");
    assert_eq!(decode_errors(&o.s), 0);
}

#[test]
fn silent_from_the_start_is_unreachable() {
    let srv = Silent::start();
    let o = run("cafe", srv.addr, 5, "3s", "");
    assert_eq!(
        o.code,
        Some(3),
        "exit 3: no bot completed the handshake; {}",
        o.stderr
    );
    assert_eq!(o.s["verdict"], "fail");
    assert_eq!(o.s["bots"]["connected"], 0);
    assert_eq!(o.s["errors"]["connect"]["timeout"], 5, "{}", o.s["errors"]);
}

#[test]
fn silent_mid_run_fails() {
    let srv = HostileServer::start(
        ProtocolName::Rtype,
        Fault::SilentAfter(Duration::from_secs(1)),
        None,
    );
    let o = run("rtype", srv.addr, 5, "3s", "  silence_timeout: 1s\n");
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert_eq!(o.s["verdict"], "fail");
    assert_eq!(o.s["bots"]["connected"], 5);
    assert_eq!(o.s["bots"]["lost"], 5, "{}", o.s["bots"]);
}

#[test]
fn killed_mid_run_fails_and_send_errors_are_counted() {
    let srv = HostileServer::start_with(
        ProtocolName::Cafe,
        Fault::None,
        None,
        Some(Duration::from_millis(1200)),
    );
    let o = run("cafe", srv.addr, 5, "3s", "  silence_timeout: 1s\n");
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert_eq!(o.s["verdict"], "fail");
    assert_eq!(o.s["bots"]["connected"], 5);
    assert_eq!(o.s["bots"]["lost"], 5, "{}", o.s["bots"]);
    // Datagrams to the closed port come back as ICMP port unreachable.
    let refused = o.s["generator"]["send_errors"]["connection_refused"]
        .as_u64()
        .unwrap_or(0);
    assert!(refused > 0, "{}", o.s["generator"]);
}

#[test]
fn restarted_mid_run_losing_every_session_fails() {
    let srv = HostileServer::start(
        ProtocolName::Cafe,
        Fault::None,
        Some(Duration::from_millis(1200)),
    );
    let o = run("cafe", srv.addr, 5, "3s", "  silence_timeout: 1s\n");
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert_eq!(o.s["verdict"], "fail");
    assert_eq!(o.s["bots"]["connected"], 5);
}

/// Garbage in place of every 4th datagram: counted by reason (no cafe magic), the rest of the
/// stream plays on, and the run fails by the default `decode_errors <= 0` check with no
/// threshold in the scenario; a scenario gating on loss fails it too.
#[test]
fn garbage_is_counted_and_fails_the_default_decode_check() {
    let srv = HostileServer::start(ProtocolName::Cafe, Fault::Garbage, None);
    let o = run("cafe", srv.addr, 5, "2s", "");
    assert!(decode_reason(&o.s, "bad_magic") > 50, "{}", o.s["errors"]);
    assert!(o.s["snapshots_applied"].as_u64().unwrap_or(0) > 100);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert_eq!(o.s["verdict"], "fail");
    assert_eq!(failed_default_checks(&o.s), ["errors.decode_total"]);
    drop(srv);

    let srv = HostileServer::start(ProtocolName::Cafe, Fault::Garbage, None);
    let gates = "thresholds:\n  - decode_errors < 100000\n  - downstream_loss < 1%\n";
    let o = run_with("cafe", srv.addr, 5, "2s", "", gates);
    assert_eq!(o.code, Some(1), "the loss gate: {}", o.stderr);
}

/// The default checks that failed, by metric path.
fn failed_default_checks(s: &Value) -> Vec<String> {
    s["thresholds"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter(|c| c["default"] == true && c["ok"] == false)
                .filter_map(|c| c["metric"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn wrong_protocol_version_is_counted_by_reason() {
    let srv = HostileServer::start(ProtocolName::Cafe, Fault::WrongVersion, None);
    let o = run("cafe", srv.addr, 3, "2s", "");
    assert!(decode_reason(&o.s, "version") > 50, "{}", o.s["errors"]);
    assert_eq!(
        o.code,
        Some(1),
        "no snapshot applied fails the run: {}",
        o.stderr
    );
    assert_eq!(o.s["verdict"], "fail");
}

#[test]
fn lying_lengths_are_counted_by_reason() {
    let srv = HostileServer::start(ProtocolName::Rtype, Fault::LyingLength, None);
    let o = run("rtype", srv.addr, 3, "2s", "");
    assert!(decode_errors(&o.s) > 20, "{}", o.s["errors"]);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
}

#[test]
fn datagrams_of_64_kb_are_counted_and_memory_stays_bounded() {
    let srv = HostileServer::start(ProtocolName::Cafe, Fault::Oversize, None);
    let o = run("cafe", srv.addr, 5, "2s", "");
    // 65,000 bytes of 0x5A are no cafe datagram: counted, and the stream plays on.
    assert!(decode_reason(&o.s, "bad_magic") > 50, "{}", o.s["errors"]);
    assert_eq!(o.s["bots"]["connected"], 5);
    assert!(o.hwm_kib < RSS_BOUND_KIB, "VmHWM {} KiB", o.hwm_kib);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert_eq!(failed_default_checks(&o.s), ["errors.decode_total"]);
}

#[test]
fn entity_floods_are_capped_and_memory_stays_bounded() {
    let srv = HostileServer::start(ProtocolName::Rtype, Fault::EntityFlood, None);
    let o = run("rtype", srv.addr, 3, "4s", "");
    assert!(o.hwm_kib < RSS_BOUND_KIB, "VmHWM {} KiB", o.hwm_kib);
    // Each snapshot (the room's whole world) culls what it did not carry; between two
    // snapshots the table stops at MAX_TRACKED_ENTITIES (65,536). Both are counted.
    let pm = &o.s["protocol_metrics"];
    let n = |k: &str| pm[k].as_u64().unwrap_or(0);
    assert!(
        n("snapshot_stale_removed") + n("entity_refused_table_full") > 10_000,
        "the flood is counted: {pm}"
    );
    assert!(o.code == Some(0) || o.code == Some(1), "{}", o.stderr);
}

#[test]
fn zergcity_lz4_bombs_are_refused_or_bounded() {
    let srv = HostileServer::start(ProtocolName::ZergCity, Fault::Lz4Bomb, None);
    let o = run("zergcity", srv.addr, 2, "3s", "");
    assert!(o.hwm_kib < RSS_BOUND_KIB, "VmHWM {} KiB", o.hwm_kib);
    assert!(
        decode_reason(&o.s, "decompressed_too_large") > 5,
        "the 4 GiB claims are refused before allocating: {}",
        o.s["errors"]
    );
    assert!(o.code == Some(0) || o.code == Some(1), "{}", o.stderr);
}
