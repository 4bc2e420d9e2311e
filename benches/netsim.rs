//! The network model's cost per datagram (`src/netsim`), and the memory a held datagram
//! takes. Run with `cargo bench --bench netsim`; `scripts/bench_netsim.sh` measures the
//! whole swarm (the largest population on its 60 Hz grid with and without impairment).
//!
//! Each figure is the mean over a million datagrams after a warm-up, in simulated time (one
//! datagram every 16.7 µs of a link's clock, as 1,000 bots at 60 Hz would give one socket
//! each): the model's own cost, not the socket's.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tickswarm::netsim::{Conditions, DelayLine, Fate, HeldBound, Link, NetworkConditions};

fn conditions(yaml: &str) -> Conditions {
    let n: NetworkConditions = serde_saphyr::from_str(yaml).expect("valid network section");
    n.validate().expect("valid values");
    n.both
}

const N: u32 = 1_000_000;
const GAP: Duration = Duration::from_nanos(16_667);

fn bench(name: &str, mut f: impl FnMut(u32)) {
    for i in 0..N / 10 {
        f(i);
    }
    let t = Instant::now();
    for i in 0..N {
        f(i);
    }
    let ns = t.elapsed().as_nanos() as f64 / f64::from(N);
    println!("{name:<52} {ns:>8.1} ns/datagram");
}

fn main() {
    let profiles = [
        ("perfect (skipped by the engine)", "{}"),
        ("latency 60ms", "latency: 60ms"),
        (
            "latency + normal jitter",
            "{ latency: 60ms, jitter: { normal: 8ms } }",
        ),
        (
            "latency + percentile jitter",
            "{ latency: 60ms, jitter: { percentiles: { p50: 2ms, p90: 10ms, p99: 40ms } } }",
        ),
        ("bursty loss", "loss: { rate: 2%, mean_burst: 4 }"),
        (
            "everything (mobile)",
            "{ latency: 60ms, jitter: { normal: 8ms }, loss: { rate: 2%, mean_burst: 4 }, \
             duplicate: 0.5%, reorder: 1%, bandwidth_bps: 100000000, \
             outage: { every: 30s, down_for: 1s } }",
        ),
    ];
    for (name, yaml) in profiles {
        let c = conditions(yaml);
        let t0 = Instant::now();
        let mut link = Link::new(&c, 1, t0);
        let mut k = 0u32;
        bench(&format!("Link::submit, {name}"), |_| {
            k += 1;
            black_box(link.submit(t0 + GAP * k, black_box(60)));
        });
    }
    // Submit, hold, deliver: the engine's whole path per datagram (100 bytes), 6 held at a
    // time as at 60 Hz behind 100 ms.
    let c = conditions("{ latency: 100ms, jitter: { normal: 8ms }, loss: 1% }");
    let t0 = Instant::now();
    let mut link = Link::new(&c, 1, t0);
    let mut line: DelayLine<()> = DelayLine::new(HeldBound {
        datagrams: 16_384,
        bytes: 4 << 20,
    });
    let payload = [7u8; 100];
    let gap = Duration::from_micros(16_667);
    let mut delivered = 0u64;
    // Its own clock: the warm-up and the timed loop are one stream of datagrams.
    let mut k = 0u32;
    bench("submit + hold + deliver (100 B, ~6 held)", |_| {
        let now = t0 + gap * k;
        k += 1;
        if let Fate::Deliver { at, copy_at } = link.submit(now, payload.len()) {
            line.push(at, (), &payload);
            if let Some(c) = copy_at {
                line.push(c, (), &payload);
            }
        }
        while line.pop_due(now, |_, b| delivered += b.len() as u64) {}
    });
    black_box(delivered);
    println!(
        "held at the end: {} datagrams, peak {} bytes held (buffers and bookkeeping)",
        line.len(),
        line.peak_memory()
    );
    // A held datagram: its heap entry (due time, order, slot), its slot (key and buffer
    // header), its place in the free list when delivered, and the buffer's capacity (its
    // payload; a pooled buffer keeps at most POOL_BUFFER).
    let overhead = DelayLine::<()>::SLOT_BYTES;
    println!("memory per held datagram: {overhead} bytes + its payload");
    for (bots, bytes) in [(4_000u64, 100u64), (4_000, 1_200)] {
        let total = bots * 6 * (overhead as u64 + bytes);
        println!(
            "{bots} bots x 6 held x ({overhead} + {bytes} B) = {:.1} MiB",
            total as f64 / (1 << 20) as f64
        );
    }
}
