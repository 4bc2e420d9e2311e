//! Hot-path micro-benchmarks (no external harness): decoding a full 32-entity snapshot, and a
//! bot applying one. Run with `cargo bench --bench cafe_hot_path`.
//!
//! Whole-swarm throughput is measured by `scripts/bench_swarm.sh`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tickswarm::games::cafe::codec::{
    self, Dialect, EntityRecord, GameStats, Message, SnapshotEncoder,
};
use tickswarm::games::cafe::{CafeBot, CafeOptions};
use tickswarm::metrics::Recorder;
use tickswarm::protocol::{Bot, BotParams, MAX_DATAGRAM};

fn snapshot(seq: u32, tick: u32) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut e = SnapshotEncoder::begin(&mut buf, seq, tick, true, false, None).expect("room");
    for id in 1..=32u16 {
        e.record(&EntityRecord {
            entity_id: id,
            x: f32::from(id) * 10.0,
            y: 5.0,
            ..EntityRecord::default()
        })
        .expect("room");
    }
    let len = e.finish(&GameStats::default()).expect("room");
    buf.truncate(len);
    buf
}

fn bench(name: &str, iters: u64, mut f: impl FnMut(u64)) {
    for i in 0..iters / 10 {
        f(i);
    }
    let t = Instant::now();
    for i in 0..iters {
        f(i);
    }
    let per = t.elapsed().as_nanos() as f64 / iters as f64;
    println!("{name:<40} {per:>10.1} ns/iter  ({iters} iterations)");
}

fn main() {
    let snap = snapshot(0, 0);
    bench("decode full snapshot (32 entities)", 1_000_000, |_| {
        let (_, m) = codec::decode(black_box(&snap), Dialect::Spec).expect("valid");
        if let Message::Snapshot(s) = m {
            black_box(s.records().map(|r| r.x).sum::<f32>());
        }
    });

    // A connected bot applying snapshots with fresh sequence numbers.
    let mut bot = CafeBot::new(BotParams::with_index(0, 1), CafeOptions::default());
    let mut rec = Recorder::new();
    let t0 = Instant::now();
    bot.start(t0, &mut rec);
    let mut buf = vec![0u8; MAX_DATAGRAM];
    while bot.poll_transmit(&mut buf).is_some() {}
    let mut welcome = vec![0u8; 64];
    let n = codec::encode(
        &mut welcome,
        0,
        &Message::Welcome {
            player_id: 1,
            tick_rate: 60,
        },
    )
    .expect("room");
    bot.handle_datagram(t0, &welcome[..n], &mut rec);
    let mut snaps: Vec<Vec<u8>> = (1..=64).map(|i| snapshot(i, i)).collect();
    let mut calls = 0u64;
    bench("bot applies full snapshot (32 entities)", 1_000_000, |_| {
        let i = calls;
        calls += 1;
        let k = (i % 64) as usize;
        let seq = 65 + i as u32;
        codec::patch_seq(&mut snaps[k], seq);
        // A newer tick each time, so every snapshot is applied (older ones are skipped).
        snaps[k][codec::HEADER_LEN..codec::HEADER_LEN + 4].copy_from_slice(&seq.to_le_bytes());
        bot.handle_datagram(t0 + Duration::from_micros(i * 16_667), &snaps[k], &mut rec);
        while bot.poll_transmit(&mut buf).is_some() {}
    });
    assert_eq!(rec.snapshots_applied, 1_100_000, "every snapshot applied");
}
