//! The cafe side of the simulation tests: [`tickswarm::protocol::sim::Sim`] (the crate's
//! deterministic harness: simulated clock, per-direction link with exact impairments, a log of
//! every datagram) over cafe bots and the cafe server, plus what only cafe knows: header
//! fields read by hand from the log (not by the codec under test), and the downstream window
//! that starts at the Welcome.

use std::time::Instant;

use tickswarm::games::cafe::{CafeBot, CafeOptions, CafeServer, CafeServerConfig};
#[allow(unused_imports)] // each test binary uses its own subset
pub use tickswarm::protocol::sim::{
    always, at_indices, bot_addr, every_kth, random, rule, Dir, Meta, Path, Record, Rule,
};
use tickswarm::protocol::BotParams;

/// Message type bytes, from cafe.md.
pub const HELLO: u8 = 0;
pub const WELCOME: u8 = 1;
pub const INPUT: u8 = 2;
pub const SNAPSHOT: u8 = 3;
pub const PING: u8 = 4;
pub const DISCONNECT: u8 = 5;

pub fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub fn le_f32(b: &[u8], at: usize) -> f32 {
    f32::from_bits(le_u32(b, at))
}

/// Read by hand from the header: type byte.
pub fn msg_type(b: &[u8]) -> u8 {
    b[3]
}

/// Read by hand from the header: seq.
pub fn seq(b: &[u8]) -> u32 {
    le_u32(b, 4)
}

/// The harness over cafe.
pub type Sim = tickswarm::protocol::sim::Sim<CafeBot, CafeServer>;

/// A cafe server and one bot per `(params, options)`, none started, no impairment.
pub fn new_sim(cfg: CafeServerConfig, bots: Vec<(BotParams, CafeOptions)>) -> Sim {
    let t0 = Instant::now();
    Sim::new(
        t0,
        CafeServer::new(cfg, t0),
        bots.into_iter().map(|(p, o)| CafeBot::new(p, o)).collect(),
    )
}

/// Cafe header fields of a datagram the rules see.
pub trait CafeMeta {
    fn msg_type(&self) -> u8;
}

impl CafeMeta for Meta<'_> {
    fn msg_type(&self) -> u8 {
        msg_type(self.bytes)
    }
}

/// Cafe fields of a logged datagram, read by hand.
pub trait CafeRecord {
    fn msg_type(&self) -> u8;
    fn seq(&self) -> u32;
    /// A u32 of the body (offset counted from the datagram's start).
    fn u32_at(&self, at: usize) -> u32;
    /// Snapshot: tick (bytes 8..12).
    fn tick(&self) -> u32;
    /// Snapshot: flags bit 0 (byte 12).
    fn is_full(&self) -> bool;
    /// Ping: the timestamp / token (bytes 8..12).
    fn token(&self) -> u32;
}

impl CafeRecord for Record {
    fn msg_type(&self) -> u8 {
        msg_type(&self.bytes)
    }
    fn seq(&self) -> u32 {
        seq(&self.bytes)
    }
    fn u32_at(&self, at: usize) -> u32 {
        le_u32(&self.bytes, at)
    }
    fn tick(&self) -> u32 {
        self.u32_at(8)
    }
    fn is_full(&self) -> bool {
        self.bytes[12] & 1 != 0
    }
    fn token(&self) -> u32 {
        self.u32_at(8)
    }
}

/// Ground truth of a bot's downstream session, which starts at the first Welcome it got.
pub trait CafeTruth {
    /// Where bot `i`'s downstream accounting can start and end, as positions in
    /// `down_to(i)`: from the first Welcome that reached it (datagrams before it belong to no
    /// session), to the last datagram that reached it (later ones could not be seen yet).
    fn session_window(&self, i: usize) -> Option<(usize, usize)>;
    /// Datagrams bot `i` could have noticed missing: inside the window, never delivered
    /// (dropped, or still held in flight).
    fn unseen_down(&self, i: usize) -> u64;
    /// Of those, the ones the link dropped.
    fn dropped_down_in_window(&self, i: usize) -> u64;
    /// Distinct datagrams of the window that reached bot `i`.
    fn received_down(&self, i: usize) -> u64;
    /// Extra copies of window datagrams that reached bot `i`.
    fn duplicate_deliveries(&self, i: usize) -> u64;
    /// First copies of window datagrams that reached bot `i` after a datagram sent later.
    fn reordered_deliveries(&self, i: usize) -> u64;
}

impl CafeTruth for Sim {
    fn session_window(&self, i: usize) -> Option<(usize, usize)> {
        self.down_window(i, |r| r.msg_type() == WELCOME)
    }
    fn unseen_down(&self, i: usize) -> u64 {
        let w = self.session_window(i);
        self.down_in_window(i, w)
            .filter(|r| r.delivered.is_empty())
            .count() as u64
    }
    fn dropped_down_in_window(&self, i: usize) -> u64 {
        let w = self.session_window(i);
        self.down_in_window(i, w).filter(|r| r.dropped).count() as u64
    }
    fn received_down(&self, i: usize) -> u64 {
        let w = self.session_window(i);
        self.down_in_window(i, w)
            .filter(|r| !r.delivered.is_empty())
            .count() as u64
    }
    fn duplicate_deliveries(&self, i: usize) -> u64 {
        match self.session_window(i) {
            Some((first, _)) => self.duplicate_deliveries_from(i, first),
            None => 0,
        }
    }
    fn reordered_deliveries(&self, i: usize) -> u64 {
        match self.session_window(i) {
            Some((first, _)) => self.reordered_deliveries_from(i, first),
            None => 0,
        }
    }
}
