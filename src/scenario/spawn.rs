//! A bot's session on the schedule ([`SpawnEvent`]: when it starts and stops, why, in which
//! group) and the seed each bot draws from the scenario's ([`mix_seed`]): what the plan, a
//! group's lifecycle and the engine share, so it sits below all three.

use std::time::Duration;

/// Most bots one load machine runs (one socket, or ENet peer, and timers each); larger
/// populations are sharded over machines and merged.
pub const MAX_BOTS: u64 = 1_000_000;

/// When one bot starts and (on a ramp down) stops, relative to the run start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpawnEvent {
    pub index: u32,
    pub start: Duration,
    pub stop: Option<Duration>,
    /// The bot's group: an index into the plan's groups (`Plan::groups`).
    pub group: u16,
    /// Why this session starts: a bot of the stages, or its group's lifecycle.
    pub kind: SpawnKind,
    /// How it stops at `stop`.
    pub stop_kind: StopKind,
}

/// Why a session starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnKind {
    /// A bot of the population the stages ramp.
    Stage,
    /// A bot arriving at its group's rate (open model).
    Arrival,
    /// A new bot in the place of one whose session ended.
    Replacement,
    /// A bot the reconnect storm dropped, back with a new session.
    Reconnect,
}

/// How a session stops at its `stop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopKind {
    /// Politely (the protocol's goodbye): a ramp down, or the run's end.
    End,
    /// Politely, at the end of the session length its group drew.
    SessionEnd,
    /// At once, without a goodbye (the reconnect storm): the server sees it go silent.
    Drop,
}

/// SplitMix64: decorrelates per-bot seeds derived from one scenario seed.
pub fn mix_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
