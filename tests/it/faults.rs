//! The fault matrix: hostile or broken servers, each case a few seconds. Whatever the server
//! does, the swarm does not crash, counts the fault by its reason, writes the report, and
//! gives the right verdict; where a fault could grow memory, the swarm's peak RSS (VmHWM of
//! the `tickswarm run` process) stays bounded.
//!
//! A hostile server is the protocol's real reference server (sans-IO) behind the engine's
//! server transport, on a UDP socket of this test, with a [`Fault`] wrapped around it that
//! mutates, drops or adds to what it sends (tests/it/dead_server.rs kills real `serve`
//! processes too).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::summary::{
    at, declared_counter, emitted_counter, read_summary, run_command, u64_at,
};
use tickswarm::engine::io::server_transport;
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
    /// DarkAges: the reference server's snapshots replaced, every 50 ms to each client, by a
    /// delta onto the tick the client acknowledged that adds 9,356 entities never seen
    /// (as many as a 65,507-byte datagram holds). `low_ids`: each delta's ids sort below
    /// every id held so far, else above.
    DaFlood { low_ids: bool },
    /// ZergCity: the reference server's deltas replaced, every 50 ms to each client, by a
    /// DeltaSnapshot onto the tick the client acknowledged that creates 7,000 entities never
    /// seen. `low_ids` as for [`Fault::DaFlood`].
    ZcFlood { low_ids: bool },
    /// DarkAges: every 200 ms from 300 ms after a client's first datagram, a ZONE_HANDOFF
    /// naming this address (a third party nobody configured).
    HandoffTo(SocketAddr),
}

/// Entities one DarkAges delta adds: records of 7 bytes (no field present) after the
/// 13-byte header fill a 65,507-byte datagram.
const DA_FLOOD: u32 = 9_356;
/// Entities one ZergCity delta creates (9 bytes each: the message stays under 64 KB).
const ZC_FLOOD: u32 = 7_000;

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
    /// Per client: the newest tick it acknowledged (INPUT / SnapshotAck), when it first spoke,
    /// and whether it got a FullSnapshot through already (ZergCity).
    peers: Vec<Peer>,
    /// The flood's next entity id (counts down for `low_ids`).
    next_id: u32,
    tick: u64,
}

#[derive(Clone, Copy)]
struct Peer {
    conn: ConnId,
    acked: u64,
    /// The last snapshot tick sent to it (DarkAges).
    sent: u64,
    since: Instant,
    full_passed: bool,
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
            peers: Vec::new(),
            next_id: match fault {
                Fault::DaFlood { low_ids: true } | Fault::ZcFlood { low_ids: true } => 0xF000_0000,
                _ => 0x1000_0000,
            },
            tick: 1_000_000,
        }
    }

    fn peer(&mut self, conn: ConnId) -> &mut Peer {
        let i = match self.peers.iter().position(|p| p.conn == conn) {
            Some(i) => i,
            None => {
                self.peers.push(Peer {
                    conn,
                    acked: 0,
                    sent: 0,
                    since: self.now,
                    full_passed: false,
                });
                self.peers.len() - 1
            }
        };
        &mut self.peers[i]
    }

    /// Note the tick a client acknowledged.
    fn note_ack(&mut self, from: ConnId, data: &[u8]) {
        let acked = match self.fault {
            // INPUT with last_received_tick (26 bytes).
            Fault::DaFlood { .. } if data.len() == 26 && data[0] == 0x20 => {
                u64::from(u32::from_le_bytes([data[22], data[23], data[24], data[25]]))
            }
            // SnapshotAck: header (16), acked_tick u64.
            Fault::ZcFlood { .. } if data.len() >= 24 && data[5] == 0x12 => {
                u64::from_le_bytes(data[16..24].try_into().unwrap())
            }
            _ => return,
        };
        let zc = matches!(self.fault, Fault::ZcFlood { .. });
        let p = self.peer(from);
        // A DarkAges bot acknowledges 0 to ask for a full snapshot; ZergCity acks only grow.
        p.acked = if zc { p.acked.max(acked) } else { acked };
    }

    /// The next `n` flood ids.
    fn flood_ids(&mut self, n: u32) -> Vec<u32> {
        let low = matches!(
            self.fault,
            Fault::DaFlood { low_ids: true } | Fault::ZcFlood { low_ids: true }
        );
        if low {
            // Sorted ascending inside the delta, every one below all ids sent before.
            self.next_id -= n;
            (self.next_id..self.next_id + n).collect()
        } else {
            let first = self.next_id;
            self.next_id += n;
            (first..first + n).collect()
        }
    }

    /// A DarkAges SNAPSHOT: full (empty) while the client acknowledges nothing (it asks for
    /// one with 0), else a delta onto the last snapshot sent to it adding [`DA_FLOOD`] new
    /// entities (a server that streams without waiting for acks).
    fn da_flood(&mut self, conn: ConnId) -> Vec<u8> {
        self.tick += 1;
        let tick = self.tick as u32;
        let p = self.peer(conn);
        let acked = if p.acked == 0 { 0 } else { p.sent };
        p.sent = u64::from(tick);
        let mut d = vec![0x21];
        d.extend_from_slice(&tick.to_le_bytes());
        if acked == 0 {
            d.extend_from_slice(&tick.to_le_bytes());
            d.extend_from_slice(&0u16.to_le_bytes());
            return d;
        }
        d.extend_from_slice(&(acked as u32).to_le_bytes());
        d.extend_from_slice(&(DA_FLOOD as u16).to_le_bytes());
        d.extend_from_slice(&0u16.to_le_bytes());
        for id in self.flood_ids(DA_FLOOD) {
            d.extend_from_slice(&id.to_le_bytes());
            d.extend_from_slice(&[2, 0, 0]);
        }
        d
    }

    /// A ZergCity DeltaSnapshot onto `acked` creating [`ZC_FLOOD`] new entities, to a target
    /// tick above every one sent before.
    fn zc_flood(&mut self, acked: u64) -> Vec<u8> {
        use tickswarm::games::zergcity::codec::{encode_body, MsgType};
        let mut body = Vec::with_capacity(20 + 9 * ZC_FLOOD as usize);
        // Target ticks keep rising whatever the client acknowledged: none is stale.
        self.tick = self.tick.max(acked) + 1;
        body.extend_from_slice(&acked.to_le_bytes());
        body.extend_from_slice(&self.tick.to_le_bytes());
        body.extend_from_slice(&(ZC_FLOOD as u16).to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        for id in self.flood_ids(ZC_FLOOD) {
            body.extend_from_slice(&id.to_le_bytes());
            body.push(0);
            body.extend_from_slice(&7u32.to_le_bytes());
        }
        let mut buf = vec![0u8; 80_000];
        let n = encode_body(&mut buf, self.tick as u32, MsgType::DeltaSnapshot, &body).unwrap();
        buf.truncate(n);
        assert!(n <= 64 * 1024, "the flood fits one message: {n}");
        buf
    }

    fn inject(&mut self) {
        let every = match self.fault {
            Fault::Oversize => Duration::from_millis(50),
            Fault::EntityFlood => Duration::from_millis(16),
            Fault::Lz4Bomb => Duration::from_millis(100),
            Fault::DaFlood { .. } | Fault::ZcFlood { .. } => Duration::from_millis(50),
            Fault::HandoffTo(_) => Duration::from_millis(200),
            _ => return,
        };
        if self.now < self.next_inject {
            return;
        }
        self.next_inject = self.now + every;
        for c in self.conns.clone() {
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
                Fault::DaFlood { .. } => {
                    let d = self.da_flood(c);
                    self.extra.push((c, d));
                }
                Fault::ZcFlood { .. } => {
                    let acked = self.peer(c).acked;
                    if acked > 0 {
                        let d = self.zc_flood(acked);
                        self.extra.push((c, d));
                    }
                }
                Fault::HandoffTo(to) => {
                    let since = self.peer(c).since;
                    if self.now.duration_since(since) >= Duration::from_millis(300) {
                        self.extra.push((c, da_zone_handoff(to)));
                    }
                }
                _ => {}
            }
        }
    }
}

/// A DarkAges ZONE_HANDOFF (75 bytes) to `to`, zone 9.
fn da_zone_handoff(to: SocketAddr) -> Vec<u8> {
    let mut d = vec![0x30];
    d.extend_from_slice(&9u32.to_le_bytes());
    let mut host = [0u8; 32];
    let text = to.ip().to_string();
    host[..text.len()].copy_from_slice(text.as_bytes());
    d.extend_from_slice(&host);
    d.extend_from_slice(&to.port().to_le_bytes());
    d.extend_from_slice(&[0xAB; 32]);
    d.extend_from_slice(&3_000u32.to_le_bytes());
    d
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
        self.peer(from);
        self.note_ack(from, data);
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
                // The flood replaces the reference server's snapshots.
                Fault::DaFlood { .. } if d.first() == Some(&0x21) => continue,
                Fault::ZcFlood { .. } if d.len() > 5 && d[5] == 0x11 => continue,
                Fault::ZcFlood { .. } if d.len() > 5 && d[5] == 0x10 => {
                    let p = self.peer(to);
                    if p.full_passed {
                        continue;
                    }
                    p.full_passed = true;
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
    /// Wall time of the run process, start to exit.
    elapsed: Duration,
    s: Value,
    /// Peak resident set of the `tickswarm run` process, KiB.
    hwm_kib: u64,
    stderr: String,
}

/// A fault scenario (`tickswarm run` through the shared harness's [`run_command`], its peak
/// RSS watched) with `bots` bots for `duration` against `addr`.
fn swarm(proto: &str, addr: SocketAddr, bots: u32, duration: &str, behaviour: &str) -> Outcome {
    swarm_with(proto, addr, bots, duration, behaviour, "")
}

/// [`swarm`] with scenario `thresholds` (YAML list items).
fn swarm_with(
    proto: &str,
    addr: SocketAddr,
    bots: u32,
    duration: &str,
    behaviour: &str,
    thresholds: &str,
) -> Outcome {
    swarm_opts(
        proto,
        "{}",
        &addr.to_string(),
        bots,
        duration,
        behaviour,
        thresholds,
    )
}

/// Peak RSS at which the harness kills a run (a fault that is not bounded must not take the
/// machine down with it): the test then fails on its RSS bound.
const RSS_KILL_KIB: u64 = 2 * 1024 * 1024;

/// [`swarm_with`] with the protocol's options (a YAML flow mapping).
fn swarm_opts(
    proto: &str,
    options: &str,
    target: &str,
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
            "name: fault\nprotocol:\n  {proto}: {options}\npopulation:\n  stages:\n    - ramp_to: {bots}\n      over: 0s\nbehaviour:\n  ping_interval: 200ms\n  handshake_timeout: 2s\n{behaviour}duration: {duration}\n{thresholds}"
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let mut child = run_command(&scenario, &["--target", target], &out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut hwm_kib = 0;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
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
        if hwm_kib > RSS_KILL_KIB || Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "killed after {:?}: VmHWM {hwm_kib} KiB (the run did not end or grew past {RSS_KILL_KIB} KiB)",
                started.elapsed()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let elapsed = started.elapsed();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    let s = read_summary(&out)
        .unwrap_or_else(|e| panic!("the report is always written ({e}): {stderr}"));
    assert!(out.join("report.html").exists(), "report.html");
    assert_ne!(code, Some(101), "a panic: {stderr}");
    // A verdict (0 pass, 1 fail) or 3 (no bot got in): whatever each test then expects.
    assert!(matches!(code, Some(0 | 1 | 3)), "exit {code:?}: {stderr}");
    eprintln!(
        "{proto}: exit {code:?} after {elapsed:?}, verdict {}, VmHWM {} KiB, bots {}, errors {}",
        s["verdict"], hwm_kib, s["bots"], s["errors"]
    );
    eprintln!(
        "snapshots_applied {}, protocol_metrics {}",
        s["snapshots_applied"], s["protocol_metrics"]
    );
    Outcome {
        code,
        elapsed,
        s,
        hwm_kib,
        stderr,
    }
}

/// `errors.decode`, the decode errors by reason (always written, empty when there were none).
fn decode_counts(s: &Value) -> &serde_json::Map<String, Value> {
    at(s, "errors.decode")
        .as_object()
        .expect("errors.decode is an object")
}

fn decode_errors(s: &Value) -> u64 {
    decode_counts(s)
        .values()
        .map(|v| v.as_u64().expect("a count"))
        .sum()
}

fn decode_reason(s: &Value, needle: &str) -> u64 {
    decode_counts(s)
        .iter()
        .filter(|(k, _)| k.contains(needle))
        .map(|(_, v)| v.as_u64().expect("a count"))
        .sum()
}

/// Peak RSS allowed for a few bots: far above the ~10-30 MB a healthy run takes, far below
/// what an unbounded table or buffer would reach.
const RSS_BOUND_KIB: u64 = 150 * 1024;

#[test]
fn control_a_healthy_hostile_harness_passes() {
    let srv = HostileServer::start(ProtocolName::Cafe, Fault::None, None);
    let o = swarm("cafe", srv.addr, 5, "2s", "");
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert_eq!(o.s["verdict"], "pass");
    assert_eq!(decode_errors(&o.s), 0);
}

#[test]
fn silent_from_the_start_is_unreachable() {
    let srv = Silent::start();
    let o = swarm("cafe", srv.addr, 5, "3s", "");
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
    let o = swarm("rtype", srv.addr, 5, "3s", "  silence_timeout: 1s\n");
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
    let o = swarm("cafe", srv.addr, 5, "3s", "  silence_timeout: 1s\n");
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert_eq!(o.s["verdict"], "fail");
    assert_eq!(o.s["bots"]["connected"], 5);
    assert_eq!(o.s["bots"]["lost"], 5, "{}", o.s["bots"]);
    // Datagrams to the closed port come back as ICMP port unreachable.
    // Present: the test's closed port guarantees the reason was counted.
    let refused = at(&o.s, "generator.send_errors")
        .get("connection_refused")
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no connection_refused count: {}", o.s["generator"]));
    assert!(refused > 0, "{}", o.s["generator"]);
}

#[test]
fn restarted_mid_run_losing_every_session_fails() {
    let srv = HostileServer::start(
        ProtocolName::Cafe,
        Fault::None,
        Some(Duration::from_millis(1200)),
    );
    let o = swarm("cafe", srv.addr, 5, "3s", "  silence_timeout: 1s\n");
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
    let o = swarm("cafe", srv.addr, 5, "2s", "");
    assert!(decode_reason(&o.s, "bad_magic") > 50, "{}", o.s["errors"]);
    assert!(u64_at(&o.s, "snapshots_applied") > 100);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert_eq!(o.s["verdict"], "fail");
    assert_eq!(failed_default_checks(&o.s), ["errors.decode_total"]);
    drop(srv);

    let srv = HostileServer::start(ProtocolName::Cafe, Fault::Garbage, None);
    let gates = "thresholds:\n  - decode_errors < 100000\n  - downstream_loss < 1%\n";
    let o = swarm_with("cafe", srv.addr, 5, "2s", "", gates);
    assert_eq!(o.code, Some(1), "the loss gate: {}", o.stderr);
}

/// The default checks that failed, by metric path.
fn failed_default_checks(s: &Value) -> Vec<String> {
    at(s, "thresholds")
        .as_array()
        .expect("thresholds is a list")
        .iter()
        .filter(|c| c["default"] == true && at(c, "ok") == false)
        .map(|c| at(c, "metric").as_str().expect("metric").to_string())
        .collect()
}

#[test]
fn wrong_protocol_version_is_counted_by_reason() {
    let srv = HostileServer::start(ProtocolName::Cafe, Fault::WrongVersion, None);
    let o = swarm("cafe", srv.addr, 3, "2s", "");
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
    let o = swarm("rtype", srv.addr, 3, "2s", "");
    assert!(decode_errors(&o.s) > 20, "{}", o.s["errors"]);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
}

#[test]
fn datagrams_of_64_kb_are_counted_and_memory_stays_bounded() {
    let srv = HostileServer::start(ProtocolName::Cafe, Fault::Oversize, None);
    let o = swarm("cafe", srv.addr, 5, "2s", "");
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
    let o = swarm("rtype", srv.addr, 3, "4s", "");
    assert!(o.hwm_kib < RSS_BOUND_KIB, "VmHWM {} KiB", o.hwm_kib);
    // Each snapshot (the room's whole world) culls what it did not carry; between two
    // snapshots the table stops at MAX_TRACKED_ENTITIES (65,536). Both are counted.
    let pm = &o.s["protocol_metrics"];
    let n = |k: &str| emitted_counter(&o.s, k);
    assert!(
        n("snapshot_stale_removed") + n("entity_refused_table_full") > 10_000,
        "the flood is counted: {pm}"
    );
    assert!(o.code == Some(0) || o.code == Some(1), "{}", o.stderr);
}

#[test]
fn zergcity_lz4_bombs_are_refused_or_bounded() {
    let srv = HostileServer::start(ProtocolName::ZergCity, Fault::Lz4Bomb, None);
    let o = swarm("zergcity", srv.addr, 2, "3s", "");
    assert!(o.hwm_kib < RSS_BOUND_KIB, "VmHWM {} KiB", o.hwm_kib);
    assert!(
        decode_reason(&o.s, "decompressed_too_large") > 5,
        "the 4 GiB claims are refused before allocating: {}",
        o.s["errors"]
    );
    assert!(o.code == Some(0) || o.code == Some(1), "{}", o.stderr);
}

/// Peak RSS allowed for a flood of new entities: each bot's state (every kept baseline and
/// buffer) is held to its protocol's `max_state_bytes` (8 MiB DarkAges, 32 MiB ZergCity), so
/// a few bots stay far below what unbounded baselines reach (GBs within seconds).
const FLOOD_RSS_BOUND_KIB: u64 = 200 * 1024;

/// How far past its duration a run may end on a saturated debug build (start-up, the stop,
/// the report). A stalled worker overruns it by far: it never ends.
const END_SLACK: Duration = Duration::from_secs(8);

/// A flood of new entities from a hostile server: the run ends on time (a stalled worker never
/// ends), within [`FLOOD_RSS_BOUND_KIB`], with the flood refused by reason.
fn flood(proto: ProtocolName, name: &str, fault: Fault, bots: u32, secs: u64) -> Outcome {
    let srv = HostileServer::start(proto, fault, None);
    let o = swarm(name, srv.addr, bots, &format!("{secs}s"), "");
    assert!(o.hwm_kib < FLOOD_RSS_BOUND_KIB, "VmHWM {} KiB", o.hwm_kib);
    assert!(
        o.elapsed < Duration::from_secs(secs) + END_SLACK,
        "{:?}",
        o.elapsed
    );
    // Refused by reason (how many depends on how many floods arrive in the run's seconds).
    assert!(
        decode_reason(&o.s, "too_many_entities") >= 1,
        "the flood is refused by reason: {}",
        o.s["errors"]
    );
    o
}

#[test]
fn darkages_baseline_floods_are_refused_and_memory_stays_bounded() {
    // 7 deltas of 9,356 fit the 65,536 entities of one state; every later one is refused.
    let o = flood(
        ProtocolName::DarkAges,
        "darkages",
        Fault::DaFlood { low_ids: false },
        5,
        5,
    );
    assert_eq!(o.code, Some(1), "decode errors fail the run: {}", o.stderr);
}

#[test]
fn darkages_deltas_below_every_held_id_do_not_stall_the_run() {
    let o = flood(
        ProtocolName::DarkAges,
        "darkages",
        Fault::DaFlood { low_ids: true },
        5,
        4,
    );
    let applied = o.s["snapshots_applied"]
        .as_u64()
        .expect("snapshots_applied in the summary");
    assert!(applied >= 5 * 7, "{applied}");
}

#[test]
fn zergcity_baseline_floods_are_refused_and_memory_stays_bounded() {
    // 9 deltas of 7,000 fit the 65,536 entities of one world; every later one is refused.
    let o = flood(
        ProtocolName::ZergCity,
        "zergcity",
        Fault::ZcFlood { low_ids: false },
        2,
        5,
    );
    assert_eq!(o.code, Some(1), "decode errors fail the run: {}", o.stderr);
}

#[test]
fn zergcity_deltas_below_every_held_id_do_not_stall_the_run() {
    flood(
        ProtocolName::ZergCity,
        "zergcity",
        Fault::ZcFlood { low_ids: true },
        2,
        4,
    );
}

/// 50 bots each sent an LZ4 bomb (8 MiB of zeros from 33 KB) every 100 ms: a bot's
/// decompression buffer grows to what a message needs and is given back after it, so the
/// swarm never holds 50 of them.
#[test]
fn zergcity_lz4_bombs_leave_no_buffer_behind_per_bot() {
    // A game seats 4 players: 13 servers seat the 50 bots.
    let servers: Vec<_> = (0..13)
        .map(|_| HostileServer::start(ProtocolName::ZergCity, Fault::Lz4Bomb, None))
        .collect();
    let targets: Vec<String> = servers.iter().map(|s| s.addr.to_string()).collect();
    let o = swarm_opts("zergcity", "{}", &targets.join(","), 50, "3s", "", "");
    // Every bot connects, but a handshake may time out on a loaded machine (the servers and
    // bots decompress 8 MiB bombs meanwhile): at least 45 of them take bombs, far more than
    // the memory bound leaves room for if buffers were kept.
    let bots = &o.s["bots"];
    assert_eq!(
        bots["connected"].as_u64().unwrap() + bots["never_connected"].as_u64().unwrap(),
        50,
        "{bots}"
    );
    assert!(bots["connected"].as_u64().unwrap() >= 45, "{bots}");
    assert!(o.hwm_kib < RSS_BOUND_KIB, "VmHWM {} KiB", o.hwm_kib);
    assert!(
        o.elapsed < Duration::from_secs(3) + END_SLACK,
        "{:?}",
        o.elapsed
    );
    assert!(
        decode_reason(&o.s, "decompressed_too_large") > 50,
        "{}",
        o.s["errors"]
    );
    assert!(o.code == Some(0) || o.code == Some(1), "{}", o.stderr);
}

/// A UDP socket that counts the bytes it receives (a third party nobody configured).
struct Witness {
    addr: SocketAddr,
    bytes: Arc<std::sync::atomic::AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Witness {
    /// On 127.0.0.2: loopback, but another host than the hostile server's 127.0.0.1.
    fn start() -> Self {
        let sock = UdpSocket::bind((Ipv4Addr::new(127, 0, 0, 2), 0)).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (b, flag) = (bytes.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 70_000];
            while !flag.load(Ordering::Relaxed) {
                if let Ok((n, _)) = sock.recv_from(&mut buf) {
                    b.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
        });
        Self {
            addr,
            bytes,
            stop,
            thread: Some(thread),
        }
    }

    fn received(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The refused handoffs, by reason (`handoff_refused.*`): the run must declare them, so a
/// renamed counter fails instead of reading 0.
fn handoffs_refused(s: &Value) -> u64 {
    let declared: Vec<&String> = at(s, "protocol_metric_info")
        .as_object()
        .expect("protocol_metric_info is an object")
        .keys()
        .filter(|k| k.starts_with("handoff_refused."))
        .collect();
    assert!(
        !declared.is_empty(),
        "no handoff_refused.* counter declared"
    );
    declared.iter().map(|k| declared_counter(s, k)).sum()
}

/// A hostile zone hands every bot to an address on another host that the scenario never
/// named: no bot follows, nothing reaches that address, each refusal is counted.
#[test]
fn darkages_handoffs_to_an_unlisted_address_send_it_nothing() {
    let third = Witness::start();
    let srv = HostileServer::start(ProtocolName::DarkAges, Fault::HandoffTo(third.addr), None);
    let o = swarm("darkages", srv.addr, 20, "3s", "");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(third.received(), 0, "bytes sent to the third party");
    assert!(handoffs_refused(&o.s) >= 20, "{}", o.s["protocol_metrics"]);
    assert_eq!(o.s["bots"]["connected"], 20);
    assert_eq!(
        declared_counter(&o.s, "handoffs"),
        0,
        "{}",
        o.s["protocol_metrics"]
    );
}

/// The control: an address the scenario's `handoff_allow` names is followed.
#[test]
fn darkages_handoffs_to_a_listed_address_are_followed() {
    let third = Witness::start();
    let srv = HostileServer::start(ProtocolName::DarkAges, Fault::HandoffTo(third.addr), None);
    let o = swarm_opts(
        "darkages",
        "{ handoff_allow: [\"127.0.0.2/32\"] }",
        &srv.addr.to_string(),
        5,
        "2s",
        "",
        "",
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(third.received() > 0, "the listed zone gets the CONNECTs");
    assert_eq!(handoffs_refused(&o.s), 0, "{}", o.s["protocol_metrics"]);
}
