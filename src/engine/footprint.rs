//! What the generator keeps per bot, pinned: `size_of` of every per-bot structure, checked
//! against a bound so that a field that makes a bot heavier fails here, not on a load machine
//! that runs out of memory at 10,000 bots (docs/measurements/memory-per-bot.md has the measured totals).
//! The engine's own parts are here; the bots' are in `games/footprint.rs`, beside the games.
//!
//! The bounds are the sizes measured when they were set plus a little room; raise one only
//! with the reason in the commit (and the capacity page's figures re-measured).

use std::mem::size_of;

use crate::engine::io::enet::EnetBots;
use crate::engine::io::sim_path::SimPath;
use crate::engine::io::udp::UdpBots;
use crate::transport::enet::STAMP_TABLE_BYTES;
use crate::transport::EnetHost;

/// The size of the future `f` returns, without running it (`f` is never called).
fn future_size<A, B, C, F>(_f: fn(A, B, C) -> F) -> usize {
    size_of::<F>()
}

fn sizes() -> Vec<(&'static str, usize, usize)> {
    vec![
        // Measured 200.
        (
            "engine slot (worker.rs Slot)",
            size_of::<super::worker::Slot>(),
            224,
        ),
        // One receive task per socket; measured 232 each.
        (
            "receive task future, udp",
            future_size(super::worker::recv_loop::<UdpBots>),
            256,
        ),
        (
            "receive task future, enet",
            future_size(super::worker::recv_loop::<EnetBots>),
            256,
        ),
        // One per ENet socket (rusty_enet's own host, about 11 KiB with its two 4 KiB
        // datagram buffers, is behind a pointer and not in this figure).
        ("ENet host (inline)", size_of::<EnetHost>(), 320),
        // Each ENet session's acknowledgement RTT stamps (64 of them): measured 768 (640
        // before each stamp kept its first transmission's sent time, which tells a
        // past-dated acknowledgement from an earlier transmission's; 1024 before packing).
        ("ENet RTT stamp table (per peer)", STAMP_TABLE_BYTES, 768),
        // Kept per bot by the UDP transport whether or not `network:` is set: a pointer.
        (
            "simulated path slot (Option<SimPath>)",
            size_of::<Option<SimPath>>(),
            8,
        ),
    ]
}

#[test]
fn per_bot_structures_stay_under_their_bounds() {
    let mut over = Vec::new();
    for (what, size, bound) in sizes() {
        eprintln!("{what:<40} {size:>6} bytes (bound {bound})");
        if size > bound {
            over.push(format!("{what}: {size} bytes > {bound}"));
        }
    }
    assert!(over.is_empty(), "per-bot state grew: {over:?}");
}
