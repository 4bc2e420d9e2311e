//! DarkAges snapshot decode and apply, per entity (spec §7.4 asks < 50 µs per entity; the
//! target here is < 100 ns). Run with `cargo bench --bench darkages_decode`.
//!
//! Decode validates the whole datagram (every record's length) before handing out records;
//! apply builds the bot's state from a full snapshot, or from a baseline and a delta, exactly
//! as the bot does ([`apply_snapshot`]).

use std::hint::black_box;
use std::time::Instant;

use tickswarm::games::darkages::bot::apply_snapshot;
use tickswarm::games::darkages::codec::{self, decode, field, EntityState, Packet, SnapshotWriter};

const ENTITIES: u32 = 45;

fn state(id: u32, t: i16) -> EntityState {
    EntityState {
        id: 0x0100_0000 + id,
        kind: (id % 3) as u8,
        pos: [t.wrapping_add(id as i16 * 64), 0, -(id as i16) * 32],
        rot: codec::yaw_quat(id as f32 * 0.1),
        vel: [300, 0, -100],
        health: 100,
        anim: 1,
        team: 1,
    }
}

fn full(tick: u32) -> Vec<u8> {
    let mut buf = vec![0u8; codec::MTU];
    let mut w = SnapshotWriter::full(&mut buf, tick).expect("room");
    for id in 0..ENTITIES {
        w.record(&state(id, 0), field::ALL).expect("room");
    }
    let n = w.finish().expect("room");
    buf.truncate(n);
    buf
}

/// Every entity moved on x and z since the baseline: a walking crowd.
fn delta(tick: u32, base: u32) -> Vec<u8> {
    let mut buf = vec![0u8; codec::MTU];
    let mut w = SnapshotWriter::delta(&mut buf, tick, base).expect("room");
    for id in 0..ENTITIES {
        let mut s = state(id, 5);
        s.pos[2] += 3;
        w.record(&s, field::POS_X | field::POS_Z).expect("room");
    }
    let n = w.finish().expect("room");
    buf.truncate(n);
    buf
}

fn bench(name: &str, iters: u64, per: u64, mut f: impl FnMut()) {
    for _ in 0..iters / 10 {
        f();
    }
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    let ns = t.elapsed().as_nanos() as f64 / iters as f64;
    println!(
        "{name:<44} {ns:>9.1} ns/snapshot {:>7.2} ns/entity",
        ns / per as f64
    );
}

fn main() {
    let f = full(3);
    let d = delta(6, 3);
    let mut base = Vec::with_capacity(64);
    if let Ok(Packet::Snapshot(s)) = decode(&f) {
        apply_snapshot(&[], &s, &mut base);
    }
    let mut out = Vec::with_capacity(64);
    let n = u64::from(ENTITIES);
    bench("decode full snapshot (45 entities)", 1_000_000, n, || {
        if let Ok(Packet::Snapshot(s)) = decode(black_box(&f)) {
            black_box(s.records().map(|u| u.state.pos[0] as i64).sum::<i64>());
        }
    });
    bench("decode + apply full snapshot", 1_000_000, n, || {
        if let Ok(Packet::Snapshot(s)) = decode(black_box(&f)) {
            apply_snapshot(&[], &s, &mut out);
            black_box(out.len());
        }
    });
    bench("decode delta (45 changed: pos x, z)", 1_000_000, n, || {
        if let Ok(Packet::Snapshot(s)) = decode(black_box(&d)) {
            black_box(s.records().map(|u| u.state.pos[0] as i64).sum::<i64>());
        }
    });
    bench("decode + apply delta on its baseline", 1_000_000, n, || {
        if let Ok(Packet::Snapshot(s)) = decode(black_box(&d)) {
            apply_snapshot(black_box(&base), &s, &mut out);
            black_box(out.len());
        }
    });
    println!(
        "full {} bytes, delta {} bytes: delta saves {:.0} %",
        f.len(),
        d.len(),
        100.0 * (1.0 - d.len() as f64 / f.len() as f64)
    );
}
