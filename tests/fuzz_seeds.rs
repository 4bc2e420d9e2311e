//! The fuzz targets' seeds (fuzz/, scripts/fuzz.sh): real exchanges between two bots and the
//! reference server of every protocol (sans-IO, 2 s of simulated time). As a test it checks
//! that each exchange reaches the game (so the seeds carry every message of a session, not
//! only a handshake); with `FUZZ_SEEDS_DIR` set it also writes the corpora, in the three
//! shapes the harness reads (fuzz/src/lib.rs): single datagrams (mode 0, the decoders), the
//! server's datagrams to bot 0 (mode 1, the bot), both bots' datagrams (mode 2, the server).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant, UNIX_EPOCH};

use tickswarm::capture::write::PcapngWriter;

use tickswarm::api::sim::{Dir, Link, Sim};
use tickswarm::api::{Bot, BotParams, BotPhase, ProtocolName, ServerParams, TransportNeeds};

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
        // The capture reader: the exchange as a pcapng file, the bots 127.0.0.1:4000+i and
        // the server 127.0.0.1:7000, a millisecond apart.
        let caps = dir.join("capture");
        std::fs::create_dir_all(&caps).expect("corpus dir");
        let file = std::fs::File::create(caps.join(format!("seed-{proto}"))).expect("seed");
        let mut w = PcapngWriter::new(file, 1 << 20).expect("pcapng");
        let server: SocketAddr = ([127, 0, 0, 1], 7000).into();
        let bot = |b: usize| SocketAddr::from(([127, 0, 0, 1], 4000 + b as u16));
        let at = |i: usize| UNIX_EPOCH + Duration::from_millis(i as u64);
        for (i, ((bu, u), (bd, d))) in up.iter().zip(&down).take(200).enumerate() {
            w.datagram(at(2 * i), bot(*bu), server, u).expect("write");
            w.datagram(at(2 * i + 1), server, bot(*bd), d)
                .expect("write");
        }
        w.flush().expect("flush");
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
    let server = section.make_server(&ServerParams::default(), t0);
    let bots = (0..BOTS)
        .map(|i| section.make_bot(BotParams::with_index(i as u32, 11 + i as u64)))
        .collect();
    // The crate's harness, on a perfect link (no delay, no loss), with ENet's channels for
    // the protocols that run over it.
    let mut sim = Sim::new(t0, server, bots);
    if matches!(section.transport(), TransportNeeds::Enet(_)) {
        sim.link = Link::Enet;
        for i in 0..BOTS {
            sim.transport_connect(i);
        }
    }
    sim.start_all();
    sim.run_for(SIM);
    let log = |dir: Dir, cap: usize| -> Log {
        sim.log
            .iter()
            .filter(|r| r.dir == dir)
            .take(cap)
            .map(|r| (r.bot, r.bytes.clone()))
            .collect()
    };
    let phases = sim.bots.iter().map(|b| b.phase()).collect();
    (log(Dir::Up, 2000), log(Dir::Down, 4000), phases)
}
