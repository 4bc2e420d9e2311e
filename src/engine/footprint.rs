//! What the generator keeps per bot, pinned: `size_of` of every per-bot structure, checked
//! against a bound so that a field that makes a bot heavier fails here, not on a load machine
//! that runs out of memory at 10,000 bots (docs/guide/capacity.md has the measured totals).
//!
//! The bounds are the sizes measured when they were set plus a little room; raise one only
//! with the reason in the commit (and the capacity page's figures re-measured).

use std::mem::size_of;

use crate::engine::io::enet::EnetBots;
use crate::engine::io::sim_path::SimPath;
use crate::engine::io::udp::UdpBots;
use crate::protocol::cafe::CafeBot;
use crate::protocol::city::{CityBot, CityOptions};
use crate::protocol::BotParams;
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
        // Measured 1488 (7624 with the input history inline, which only the
        // implementation dialect uses: it is on the heap, for that dialect only).
        ("cafe bot (inline)", size_of::<CafeBot>(), 1536),
        // Measured 1056 (1360 with a 320-byte ChaCha8 generator instead of the 8-byte
        // SplitMix64; 1568 before the implementation dialect's 224-byte predictor went
        // behind a pointer).
        ("city bot (inline)", size_of::<CityBot>(), 1088),
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
        // The heap a City bot (spec dialect, 60 Hz) reserves when it is made, and keeps in
        // play: its 128-input prediction history (16 bytes an input: 2048) and room for the
        // inputs awaiting acknowledgement over one 2 s wait (127 of 12 bytes: 1524), plus its
        // name. Measured 3580. Before, a fresh bot held 3336 (20-byte history slots, 768
        // bytes of message and chat queues reserved) and its acknowledgement queue grew to
        // 128 inputs of 24 bytes in play: 6408 once playing.
        (
            "city bot heap once playing (spec dialect)",
            CityBot::new(BotParams::with_index(0, 1), CityOptions::default()).reserved_heap_bytes(),
            3648,
        ),
        // Each ENet session's acknowledgement RTT stamps (64 of them): measured 640 (was 1024).
        ("ENet RTT stamp table (per peer)", STAMP_TABLE_BYTES, 640),
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
