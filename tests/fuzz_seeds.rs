//! The fuzz targets' seeds (fuzz/, scripts/fuzz.sh): real exchanges between two bots and the
//! reference server of every protocol (sans-IO, 2 s of simulated time). As a test it checks
//! that each exchange reaches the game (so the seeds carry every message of a session, not
//! only a handshake); with `FUZZ_SEEDS_DIR` set it also writes the corpora, in the three
//! shapes the harness reads (fuzz/src/lib.rs): single datagrams (mode 0, the decoders), the
//! server's datagrams to bot 0 (mode 1, the bot), both bots' datagrams (mode 2, the server).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tickswarm::metrics::Recorder;
use tickswarm::protocol::registry::{ServerParams, TransportNeeds};
use tickswarm::protocol::{Bot, BotParams, BotPhase, ConnId, ProtocolName};

/// The harness's framing: `[len u16 LE][bytes][dt u8]`.
fn push_frame(out: &mut Vec<u8>, datagram: &[u8], dt: u8) {
    let len = datagram.len().min(usize::from(u16::MAX));
    out.extend_from_slice(&(len as u16).to_le_bytes());
    out.extend_from_slice(&datagram[..len]);
    out.push(dt);
}

const SIM: Duration = Duration::from_secs(2);
const BOTS: usize = 2;

#[test]
fn every_protocol_exchange_reaches_the_game_and_seeds_are_written_on_request() {
    let dir = std::env::var_os("FUZZ_SEEDS_DIR").map(PathBuf::from);
    for &proto in ProtocolName::ALL {
        let (up, down, phases) = exchange(proto);
        assert!(
            phases.iter().all(|&p| p == BotPhase::Connected),
            "{proto}: {phases:?}"
        );
        assert!(
            up.len() > 50 && down.len() > 50,
            "{proto}: {} up, {} down",
            up.len(),
            down.len()
        );
        let Some(dir) = &dir else {
            continue;
        };
        let out = dir.join(proto.as_str());
        std::fs::create_dir_all(&out).expect("corpus dir");
        let mut n = 0;
        let mut write = |bytes: &[u8]| {
            std::fs::write(out.join(format!("seed-{n:04}")), bytes).expect("seed");
            n += 1;
        };
        // Decoders: every distinct first byte pattern, both directions (at most 200).
        let mut seen = std::collections::HashSet::new();
        for d in up.iter().map(|(_, d)| d).chain(down.iter().map(|(_, d)| d)) {
            let key: Vec<u8> = d.iter().take(8).copied().collect();
            if seen.len() < 64 && seen.insert((key, d.len() / 64)) {
                let mut s = vec![0u8];
                s.extend_from_slice(d);
                write(&s);
            }
        }
        // The bot: bot 0's downlink, in windows of 48 datagrams.
        let downs: Vec<&Vec<u8>> = down
            .iter()
            .filter(|(b, _)| *b == 0)
            .map(|(_, d)| d)
            .collect();
        for chunk in downs.chunks(32).take(4) {
            let mut s = vec![1u8];
            for d in chunk {
                push_frame(&mut s, d, 5);
            }
            write(&s);
        }
        // The server: both bots' uplinks interleaved, the connection in each frame's first byte.
        for chunk in up.chunks(32).take(4) {
            let mut s = vec![2u8];
            for (b, d) in chunk {
                let mut f = vec![*b as u8];
                f.extend_from_slice(d);
                push_frame(&mut s, &f, 5);
            }
            write(&s);
        }
        eprintln!(
            "{proto}: {n} seeds ({} up, {} down datagrams seen)",
            up.len(),
            down.len()
        );
    }
}

/// Datagrams (bot index, bytes) each way in a short bot-server exchange.
type Log = Vec<(usize, Vec<u8>)>;

fn exchange(proto: ProtocolName) -> (Log, Log, Vec<BotPhase>) {
    let section = proto.default_section();
    let t0 = Instant::now();
    let mut server = section.make_server(&ServerParams::default(), t0);
    let enet = matches!(section.transport(), TransportNeeds::Enet(_));
    let mut bots: Vec<Box<dyn Bot>> = (0..BOTS)
        .map(|i| section.make_bot(BotParams::with_index(i as u32, 11 + i as u64)))
        .collect();
    let mut recs: Vec<Recorder> = (0..BOTS).map(|_| Recorder::new()).collect();
    let mut buf = vec![0u8; 256 * 1024];
    let (mut up, mut down) = (Vec::new(), Vec::new());
    let mut to_server: VecDeque<(usize, Vec<u8>)> = VecDeque::new();
    for (i, b) in bots.iter_mut().enumerate() {
        if enet {
            server.handle_connect(t0, ConnId(i as u64));
        }
        b.start(t0, &mut recs[i]);
    }
    let mut at = Duration::ZERO;
    while at < SIM {
        let now = t0 + at;
        for (i, b) in bots.iter_mut().enumerate() {
            if b.poll_timeout().is_some_and(|t| t <= now) {
                b.handle_timeout(now, &mut recs[i]);
            }
            while let Some(t) = b.poll_transmit(&mut buf) {
                to_server.push_back((i, buf[..t.len].to_vec()));
            }
        }
        while let Some((i, d)) = to_server.pop_front() {
            server.handle_datagram(now, ConnId(i as u64), &d);
            if up.len() < 2000 {
                up.push((i, d));
            }
        }
        if server.poll_timeout().is_some_and(|t| t <= now) {
            server.handle_timeout(now);
        }
        while let Some((c, t)) = server.poll_transmit(&mut buf) {
            let i = c.0 as usize;
            let d = buf[..t.len].to_vec();
            if let Some(b) = bots.get_mut(i) {
                b.handle_datagram(now, &d, &mut recs[i]);
            }
            if down.len() < 4000 {
                down.push((i, d));
            }
        }
        while server.poll_close().is_some() {}
        at += Duration::from_millis(1);
    }
    (up, down, bots.iter().map(|b| b.phase()).collect())
}
