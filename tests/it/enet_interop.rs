//! Interop with the C ENet library: tickswarm's sans-IO ENet transport against
//! `tests/peers/enet-peer/enet_peer.c` linked with Debian's libenet (ENet 1.3.x).
//!
//! The C peer is built here with `cc`; it needs libenet-dev, which
//! `scripts/install-test-deps.sh` installs. These tests fail (never skip) without it.
//!
//! Everything runs on 127.0.0.1 with ephemeral ports; the C peer exits on its own after a few
//! seconds and is killed when a test ends, so each test is bounded well under 10 s.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tickswarm::transport::{
    DisconnectReason, EnetClient, EnetConfig, EnetEvent, EnetHost, PeerId, MAX_ENET_DATAGRAM,
};

const INSTALL_HINT: &str = "run scripts/install-test-deps.sh (installs libenet-dev, \
                            build-essential, pkg-config) and try again";

/// Seconds the C peer lives at most.
const C_PEER_SECONDS: &str = "8";

fn c_peer() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(build_c_peer)
}

/// Build enet_peer.c into the test's temporary directory (a fresh binary per run, swapped in
/// atomically so concurrent runs never execute a half-written file).
fn build_c_peer() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("tests/peers/enet-peer/enet_peer.c");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(dir).expect("create the test temp dir");
    let bin = dir.join("enet_peer");
    let tmp = dir.join(format!("enet_peer.{}.tmp", std::process::id()));

    let header = Path::new("/usr/include/enet/enet.h");
    let libs = Command::new("pkg-config")
        .args(["--cflags", "--libs", "libenet"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "-lenet".to_string());
    let out = Command::new("cc")
        .arg("-O2")
        .arg("-Wall")
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .args(libs.split_whitespace())
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `cc` ({e}): {INSTALL_HINT}"));
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !header.exists() || stderr.contains("enet/enet.h") || stderr.contains("-lenet") {
            panic!("libenet-dev (C ENet) is not installed: {INSTALL_HINT}\n{stderr}");
        }
        panic!("building {} failed:\n{stderr}", src.display());
    }
    std::fs::rename(&tmp, &bin).expect("move the built C peer into place");
    bin
}

/// A running C peer whose stdout lines are collected as they come.
struct CPeer {
    child: Child,
    lines: Receiver<String>,
    log: Vec<String>,
}

impl CPeer {
    fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(c_peer())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the C ENet peer");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            log: Vec::new(),
        }
    }

    /// Collect whatever the peer printed so far.
    fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.log.push(line);
        }
    }

    /// Wait up to `limit` for a line starting with `word`, and return it.
    fn wait_line(&mut self, word: &str, limit: Duration) -> String {
        let end = Instant::now() + limit;
        if let Some(l) = self.log.iter().find(|l| l.starts_with(word)) {
            return l.clone();
        }
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.log.push(line.clone());
                    if line.starts_with(word) {
                        return line;
                    }
                }
                Err(_) => break,
            }
        }
        panic!(
            "the C peer printed no {word} line within {limit:?}; it printed {:#?}",
            self.log
        );
    }

    /// Lines starting with `word`, once `n` of them are printed or `limit` has passed: the
    /// C peer prints a line after it handles a packet, and its output reaches the test
    /// later than its echo reaches the client on a loaded machine.
    fn at_least(&mut self, word: &str, n: usize, limit: Duration) -> Vec<String> {
        let end = Instant::now() + limit;
        loop {
            let got = self.lines_of(word);
            match end.checked_duration_since(Instant::now()) {
                Some(left) if got.len() < n => match self.lines.recv_timeout(left) {
                    Ok(line) => self.log.push(line),
                    Err(_) => return got,
                },
                _ => return got,
            }
        }
    }

    /// Lines starting with `word` printed so far.
    fn lines_of(&mut self, word: &str) -> Vec<String> {
        self.drain();
        self.log
            .iter()
            .filter(|l| l.starts_with(word))
            .cloned()
            .collect()
    }

    fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("poll the C peer")
    }

    fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let end = Instant::now() + limit;
        loop {
            if let Some(status) = self.try_exit() {
                // The reader thread ends with the pipe; give it a moment to pass the last lines.
                std::thread::sleep(Duration::from_millis(20));
                self.drain();
                return status;
            }
            assert!(
                Instant::now() < end,
                "the C peer did not exit within {limit:?}; it printed {:#?}",
                self.log
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for CPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `key=value` from a C peer line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

fn udp_socket() -> UdpSocket {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    sock.set_nonblocking(true).unwrap();
    sock
}

/// Drive `host` over `sock` the way the engine does, until `step` says done or `limit` passes:
/// read every datagram waiting, service when [`EnetHost::poll_timeout`] is due, hand each event
/// to `step` (which may send), flush, write every datagram out. `step` is also called with
/// `None` once per round, for conditions that do not hang on an event.
fn drive(
    host: &mut EnetHost,
    sock: &UdpSocket,
    limit: Duration,
    mut step: impl FnMut(&mut EnetHost, Option<EnetEvent>) -> bool,
) -> bool {
    let end = Instant::now() + limit;
    let mut buf = [0u8; MAX_ENET_DATAGRAM];
    while Instant::now() < end {
        let now = Instant::now();
        loop {
            match sock.recv_from(&mut buf) {
                Ok((n, from)) => host.handle_datagram(now, from, &buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("recv_from: {e}"),
            }
        }
        if host.poll_timeout().is_some_and(|t| t <= now) {
            host.service(now);
        }
        let mut done = false;
        while let Some(ev) = host.poll_event() {
            done |= step(host, Some(ev));
        }
        done |= step(host, None);
        host.flush(now);
        while let Some((to, n)) = host.poll_transmit(&mut buf) {
            sock.send_to(&buf[..n], to).expect("send_to");
        }
        if done {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 7 + 3) & 0xff) as u8).collect()
}

fn start_c_server() -> (CPeer, SocketAddr) {
    let mut server = CPeer::spawn(&["server", "0", C_PEER_SECONDS]);
    let line = server.wait_line("LISTENING", Duration::from_secs(3));
    let port: u16 = field(&line, "port").unwrap().parse().unwrap();
    (server, SocketAddr::from(([127, 0, 0, 1], port)))
}

/// (a) A tickswarm ENet client completes the handshake with a C ENet server, exchanges a small
/// reliable packet, a 6000-byte reliable one (fragmented), and an unreliable one byte for byte,
/// measures RTT, and disconnects cleanly.
#[test]
fn tickswarm_client_talks_to_c_enet_server() {
    let started = Instant::now();
    let (mut server, addr) = start_c_server();
    let sock = udp_socket();
    let mut client =
        EnetClient::connect_with(Instant::now(), addr, 2, 1234, &EnetConfig::default()).unwrap();

    let small = b"hello from tickswarm, reliable".to_vec();
    let large = pattern(6000);
    let unreliable = b"hello from tickswarm, unreliable".to_vec();
    let mut connected_at = None;
    let mut datagrams_before_send = 0;
    let mut echoes: Vec<(u8, Vec<u8>)> = Vec::new();
    let ok = drive(
        client.host_mut(),
        &sock,
        Duration::from_secs(4),
        |host, ev| {
            match ev {
                Some(EnetEvent::Connected { peer, addr: a, .. }) => {
                    assert_eq!(a, addr);
                    connected_at = Some(started.elapsed());
                    datagrams_before_send = host.stats().datagrams_out;
                    host.send(peer, 0, true, &small).unwrap();
                    host.send(peer, 0, true, &large).unwrap();
                    host.send(peer, 1, false, &unreliable).unwrap();
                }
                Some(EnetEvent::Received {
                    channel, packet, ..
                }) => echoes.push((channel, packet.to_vec())),
                Some(other) => panic!("unexpected {other:?}"),
                None => {}
            }
            echoes.len() == 3
        },
    );
    assert!(
        ok,
        "no 3 echoes; got {echoes:?}, C server said {:#?}",
        server.log
    );
    let sent_datagrams = client.host_stats().datagrams_out - datagrams_before_send;

    // Byte-exact echoes; channel 0 in order, channel 1 on its own.
    let ch0: Vec<&Vec<u8>> = echoes.iter().filter(|e| e.0 == 0).map(|e| &e.1).collect();
    let ch1: Vec<&Vec<u8>> = echoes.iter().filter(|e| e.0 == 1).map(|e| &e.1).collect();
    assert_eq!(ch0, [&small, &large]);
    assert_eq!(ch1, [&unreliable]);

    // What the C side saw: the 6000 bytes reassembled from fragments, reliably; the channel-1
    // packet unreliably.
    let received = server.at_least("RECEIVE", 3, Duration::from_secs(5));
    let large_line = received
        .iter()
        .find(|l| field(l, "len") == Some("6000"))
        .unwrap_or_else(|| panic!("C server never got the large packet: {received:#?}"));
    assert_eq!(field(large_line, "reliable"), Some("1"));
    assert_eq!(field(large_line, "channel"), Some("0"));
    let unrel_line = received
        .iter()
        .find(|l| field(l, "channel") == Some("1"))
        .unwrap();
    assert_eq!(field(unrel_line, "reliable"), Some("0"));
    assert!(
        sent_datagrams >= 5,
        "6000 bytes over a 1392-byte MTU take at least 5 datagrams, sent {sent_datagrams}"
    );
    let connect_line = server.wait_line("CONNECT", Duration::from_secs(1));
    assert_eq!(field(&connect_line, "data"), Some("1234"));
    assert_eq!(field(&connect_line, "channels"), Some("2"));

    let rtt = client.rtt().expect("ENet measured an RTT");
    assert!(rtt > Duration::ZERO);
    let stats = client.stats();

    client.disconnect(Instant::now(), 5);
    let mut reason = None;
    let ok = drive(client.host_mut(), &sock, Duration::from_secs(3), |_, ev| {
        if let Some(EnetEvent::Disconnected { reason: r, .. }) = ev {
            reason = Some(r);
        }
        reason.is_some()
    });
    assert!(ok, "no Disconnected event");
    assert_eq!(reason, Some(DisconnectReason::Local));
    let line = server.wait_line("DISCONNECT", Duration::from_secs(2));
    assert_eq!(field(&line, "data"), Some("5"));
    eprintln!(
        "tickswarm client -> C server: connected after {:?}, ENet RTT {rtt:?} (variance {:?}), \
         loss {:.3}, {} datagrams for the 3 packets, {} bytes out / {} in, total {:?}",
        connected_at.unwrap(),
        stats.rtt_variance.unwrap(),
        stats.packet_loss,
        sent_datagrams,
        client.host_stats().bytes_out,
        client.host_stats().bytes_in,
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// (b) The C ENet client connects to a tickswarm ENet host, which echoes every packet (channel 0
/// reliable, channel 1 unreliable, as City lays channels out); the C client checks the echoes
/// byte for byte and disconnects.
#[test]
fn c_enet_client_talks_to_tickswarm_host() {
    let started = Instant::now();
    let sock = udp_socket();
    let port = sock.local_addr().unwrap().port().to_string();
    let mut host = EnetHost::new(Instant::now(), &EnetConfig::with_peers(4)).unwrap();
    let mut client = CPeer::spawn(&["client", "127.0.0.1", &port, C_PEER_SECONDS]);

    let mut connected: Option<(PeerId, u32)> = None;
    let mut disconnected = None;
    let mut echoed = 0;
    let mut rtt = None;
    let mut exit = None;
    let ok = drive(&mut host, &sock, Duration::from_secs(6), |host, ev| {
        match ev {
            Some(EnetEvent::Connected { peer, data, .. }) => connected = Some((peer, data)),
            Some(EnetEvent::Received {
                peer,
                channel,
                packet,
            }) => {
                host.send(peer, channel, channel == 0, &packet).unwrap();
                echoed += 1;
            }
            Some(EnetEvent::Disconnected { data, reason, .. }) => {
                disconnected = Some((data, reason))
            }
            None => {
                if let Some((peer, _)) = connected {
                    rtt = host.rtt(peer).or(rtt);
                }
                if exit.is_none() {
                    exit = client.try_exit();
                }
            }
        }
        exit.is_some() && disconnected.is_some()
    });
    client.drain();
    assert!(ok, "C client did not finish: {:#?}", client.log);
    let status = client.wait_exit(Duration::from_secs(1));
    assert!(status.success(), "C client failed: {:#?}", client.log);
    assert!(
        client.log.iter().any(|l| l.starts_with("RESULT ok")),
        "{:#?}",
        client.log
    );
    let echoes = client.lines_of("ECHO");
    assert_eq!(echoes.len(), 3, "{echoes:#?}");
    assert!(echoes.iter().all(|l| field(l, "match") == Some("1")));
    // The fragmented one came back whole and reliable; channel 1 came back unreliable.
    assert!(echoes
        .iter()
        .any(|l| field(l, "len") == Some("6000") && field(l, "reliable") == Some("1")));
    assert!(echoes
        .iter()
        .any(|l| field(l, "channel") == Some("1") && field(l, "reliable") == Some("0")));
    assert_eq!(
        connected.map(|c| c.1),
        Some(42),
        "connect data from the C client"
    );
    assert_eq!(echoed, 3);
    assert_eq!(disconnected, Some((7, DisconnectReason::Remote)));
    let rtt = rtt.expect("the host measured the C client's RTT");
    assert!(rtt > Duration::ZERO);
    let c_rtt = client.lines_of("RTT");
    eprintln!(
        "C client -> tickswarm host: host-side ENet RTT {rtt:?}, C side says {c_rtt:?}, \
         host {:?}, total {:?}",
        host.stats(),
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// (c) Several tickswarm peers share one socket (one ENet host): all connect to the C server,
/// which sees one address and several peers; each gets its own echoes; the server is stopped
/// with a QUIT packet.
#[test]
fn several_tickswarm_peers_share_one_socket() {
    const BOTS: usize = 6;
    let started = Instant::now();
    let (mut server, addr) = start_c_server();
    let sock = udp_socket();
    let local = sock.local_addr().unwrap();
    let mut host = EnetHost::new(Instant::now(), &EnetConfig::with_peers(BOTS)).unwrap();
    let now = Instant::now();
    let peers: Vec<PeerId> = (0..BOTS)
        .map(|i| host.connect(now, addr, 2, 100 + i as u32).unwrap())
        .collect();
    let bot_of = |p: PeerId| peers.iter().position(|q| *q == p).unwrap();
    let payload = |i: usize, ch: u8| format!("bot {i} channel {ch}").into_bytes();

    let mut connected = [false; BOTS];
    let mut echoes = vec![Vec::new(); BOTS];
    let ok = drive(&mut host, &sock, Duration::from_secs(4), |host, ev| {
        match ev {
            Some(EnetEvent::Connected { peer, .. }) => {
                let i = bot_of(peer);
                connected[i] = true;
                host.send(peer, 0, true, &payload(i, 0)).unwrap();
                host.send(peer, 1, false, &payload(i, 1)).unwrap();
            }
            Some(EnetEvent::Received {
                peer,
                channel,
                packet,
            }) => echoes[bot_of(peer)].push((channel, packet.to_vec())),
            Some(other) => panic!("unexpected {other:?}"),
            None => {}
        }
        echoes.iter().all(|e| e.len() == 2)
    });
    assert!(
        ok,
        "connected {connected:?}, echoes {echoes:?}; C server said {:#?}",
        server.lines_of("")
    );
    for (i, got) in echoes.iter().enumerate() {
        let mut got = got.clone();
        got.sort();
        assert_eq!(got, [(0, payload(i, 0)), (1, payload(i, 1))], "bot {i}");
    }
    // The server saw BOTS peers, all from the one socket.
    let connects = server.at_least("CONNECT", BOTS, Duration::from_secs(5));
    assert_eq!(connects.len(), BOTS, "{connects:#?}");
    let mut data: Vec<u32> = connects
        .iter()
        .map(|l| {
            assert_eq!(field(l, "addr"), Some(local.to_string().as_str()));
            field(l, "data").unwrap().parse().unwrap()
        })
        .collect();
    data.sort();
    assert_eq!(data, (100..100 + BOTS as u32).collect::<Vec<_>>());
    let rtts: Vec<Duration> = peers
        .iter()
        .map(|&p| host.rtt(p).expect("RTT measured for every peer"))
        .collect();
    assert!(rtts.iter().all(|r| *r > Duration::ZERO), "{rtts:?}");

    // All but the first leave politely; then the first one stops the server.
    let now = Instant::now();
    for &p in &peers[1..] {
        host.disconnect(now, p, 0).unwrap();
    }
    let mut gone = 0;
    let ok = drive(&mut host, &sock, Duration::from_secs(3), |_, ev| {
        if let Some(EnetEvent::Disconnected { reason, .. }) = ev {
            assert_eq!(reason, DisconnectReason::Local);
            gone += 1;
        }
        gone == BOTS - 1
    });
    assert!(ok, "only {gone} peers disconnected");
    host.send(peers[0], 0, true, b"QUIT").unwrap();
    let ok = drive(&mut host, &sock, Duration::from_secs(3), |_, _| {
        server.try_exit().is_some()
    });
    assert!(ok, "the C server did not stop on QUIT");
    assert!(server.wait_exit(Duration::from_secs(1)).success());
    let exit = server.at_least("EXIT reason=quit", 1, Duration::from_secs(5));
    assert_eq!(exit.len(), 1, "{exit:#?}");
    let gone = server.at_least("DISCONNECT", BOTS - 1, Duration::from_secs(5));
    assert_eq!(gone.len(), BOTS - 1, "{gone:#?}");
    host.disconnect_now(Instant::now(), peers[0], 0).unwrap();
    assert!(matches!(
        host.poll_event(),
        Some(EnetEvent::Disconnected {
            reason: DisconnectReason::Local,
            ..
        })
    ));
    eprintln!(
        "{BOTS} peers on one socket {local}: ENet RTTs {rtts:?}, host {:?}, total {:?}",
        host.stats(),
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// (d) A C ENet client (Debian's libenet) completes the City handshake with tickswarm's City
/// reference server: ENet connect, ClientHello written by hand in C, ServerHello back.
#[test]
fn c_client_speaks_city_to_the_reference_server() {
    use tickswarm::engine::spawn_reference_server;
    use tickswarm::games::city::CityOptions;
    use tickswarm::scenario::{ProtocolSection, ServerSection};

    let section = ProtocolSection::of(&tickswarm::games::city::City, CityOptions::default());
    let server_section = ServerSection::default();
    let server = spawn_reference_server("127.0.0.1:0".parse().unwrap(), &section, &server_section)
        .expect("start the City reference server");
    let port = server.addr.port().to_string();
    let mut c = CPeer::spawn(&["city", "127.0.0.1", &port, "5"]);
    let result = c.wait_line("RESULT", Duration::from_secs(8));
    assert!(result.starts_with("RESULT ok"), "{result}\n{:#?}", c.log);
    assert!(c.wait_exit(Duration::from_secs(2)).success());
    // Give the server a moment to publish its counters.
    std::thread::sleep(Duration::from_millis(250));
    let stats = server.stats();
    assert_eq!(stats.events.get("enet_connects"), 1, "{stats:?}");
}
