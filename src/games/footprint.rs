//! What a game's bot keeps, pinned: `size_of` of the bots the engine holds most of, checked
//! against a bound so that a field that makes a bot heavier fails here, not on a load machine
//! that runs out of memory at 10,000 bots (docs/measurements/memory-per-bot.md has the measured totals;
//! the engine's own per-bot parts are pinned in `engine/footprint.rs`).
//!
//! The bounds are the sizes measured when they were set plus a little room; raise one only
//! with the reason in the commit (and the capacity page's figures re-measured).

use std::mem::size_of;

use super::cafe::CafeBot;
use super::city::{CityBot, CityOptions};
use crate::protocol::prelude::BotParams;

fn sizes() -> Vec<(&'static str, usize, usize)> {
    vec![
        // Measured 1488 (7624 with the input history inline, which only the
        // implementation dialect uses: it is on the heap, for that dialect only).
        ("cafe bot (inline)", size_of::<CafeBot>(), 1536),
        // Measured 1120 (1360 with a 320-byte ChaCha8 generator instead of the 8-byte
        // SplitMix64; 1568 before the implementation dialect's 224-byte predictor went
        // behind a pointer). 1056 before its delta ticks were counted by the toolkit's
        // TickStep (96 bytes) instead of a bare SeqWindow (32): the step it holds, and the
        // gaps it holds back, tell a server that lowers its snapshot rate from loss.
        ("city bot (inline)", size_of::<CityBot>(), 1152),
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
    ]
}

#[test]
fn bots_stay_under_their_bounds() {
    let mut over = Vec::new();
    for (what, size, bound) in sizes() {
        eprintln!("{what:<40} {size:>6} bytes (bound {bound})");
        if size > bound {
            over.push(format!("{what}: {size} bytes > {bound}"));
        }
    }
    assert!(over.is_empty(), "per-bot state grew: {over:?}");
}
