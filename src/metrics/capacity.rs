//! What a capacity search found (summary.json `capacity`): the answer, the interval it
//! carries, what limited it, and every step with its window's figures and verdict.

use serde::{Deserialize, Serialize};

/// What ended the search, and so how to read `players`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacityLimit {
    /// A step broke an objective: the server holds `players` and not `interval[1] + 1`.
    Server,
    /// The load machine was saturated before the server broke anything: the server holds at
    /// least `players`; its own capacity was not reached.
    LoadMachine,
    /// `max_players` held: the server holds at least that many.
    MaxPlayers,
    /// The time budget (or an interruption) ended the search before it narrowed: the answer
    /// is the bracket so far.
    Unfinished,
    /// Even the smallest population tried broke an objective.
    BelowStart,
}

/// One step of the search.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CapacityStep {
    /// Players asked for.
    pub players: u64,
    /// Bots in game during the window (the least of its seconds).
    pub in_game: u64,
    /// Seconds since the search started, at the window's start and end.
    pub window_s: [f64; 2],
    /// `held`, `broke`, `load_machine` (the generator was the limit in the window) or
    /// `inconclusive` (too few samples to judge).
    pub verdict: String,
    /// Every objective's figure in the window.
    pub objectives: Vec<ObjectiveResult>,
    /// Why the verdict is what it is, in words.
    pub why: String,
}

/// One objective (a scenario threshold) judged on one step's window.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ObjectiveResult {
    /// As the scenario wrote it.
    pub condition: String,
    /// The figure's path in summary.json (`rtt_us.p99`, `server_metrics.figures...`).
    pub metric: String,
    /// `null` when the window had no sample.
    pub observed: Option<f64>,
    pub ok: bool,
}

/// summary.json's `capacity` block.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Capacity {
    /// The answer: the most players a step held (twice, near the edge). `null` when no step
    /// held.
    pub players: Option<u64>,
    /// The bracket the answer lies in: `[last held, first broken - 1]`; with no broken step,
    /// `[players, null]`.
    pub interval: [Option<u64>; 2],
    /// How to read the answer.
    pub limit: Option<CapacityLimit>,
    /// The objectives the first broken step near the edge failed, as written.
    pub limiting: Vec<String>,
    /// The resolution asked for (a share: 0.05 for 5 %).
    pub resolution: f64,
    /// The whole search, in seconds.
    pub elapsed_s: f64,
    /// Every step in the order they ran.
    pub steps: Vec<CapacityStep>,
    /// The one line the console prints.
    pub answer: String,
}
