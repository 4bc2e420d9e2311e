//! What each group of the population measured (`groups:` in a scenario).
//!
//! Metrics stay per worker, not per bot: a worker keeps one [`Recorder`] per group (at most
//! [`MAX_GROUPS`]), a bot's figures go to its group's,
//! and the whole run's are the groups' added up (exact: histograms add). The engine hands
//! the groups over in [`RunOutcome::groups`](super::RunOutcome).

use serde::{Deserialize, Serialize};

use super::Recorder;

/// The most groups a scenario may have: a worker keeps a set of histograms per group, so
/// groups are a handful of player kinds, not per-bot settings.
pub const MAX_GROUPS: usize = 16;

/// What a group's `lifecycle:` schedules within the run (and the shard's part of it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecyclePlan {
    /// Arrivals started (open model).
    pub arrivals: u64,
    /// Arrivals dropped, never delayed: `max_bots` of the group's sessions were in play.
    pub arrivals_dropped: u64,
    /// Sessions that end at their drawn length within the run.
    pub session_ends: u64,
    /// New bots in the place of those.
    pub replacements: u64,
    /// Sessions the reconnect storm drops (each reconnects: resuming its session where the
    /// protocol can, else as a new one).
    pub storm_drops: u64,
}

/// What the engine did of a group's lifecycle, counted as it happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleDone {
    pub arrivals: u64,
    /// Arrivals the generator started more than 100 ms after their time (a busy machine):
    /// the open model's rate was not held for them.
    pub arrivals_late: u64,
    pub session_ends: u64,
    pub replacements: u64,
    pub storm_drops: u64,
    pub storm_reconnects: u64,
    /// Storm reconnections back in play on their old session (the server took the token).
    #[serde(default)]
    pub storm_resumed: u64,
    /// Storm reconnections whose token the server refused, back in play as a new session.
    #[serde(default)]
    pub storm_resume_refused: u64,
}

impl LifecycleDone {
    /// From a group's recorder (its `lifecycle_*` events).
    pub fn of(rec: &Recorder) -> Self {
        let e = |k: &str| rec.events.get(k);
        LifecycleDone {
            arrivals: e("lifecycle_arrivals"),
            arrivals_late: e("lifecycle_arrivals_late"),
            session_ends: e("lifecycle_session_ends"),
            replacements: e("lifecycle_replacements"),
            storm_drops: e("lifecycle_storm_drops"),
            storm_reconnects: e("lifecycle_storm_reconnects"),
            storm_resumed: e("lifecycle_storm_resumed"),
            storm_resume_refused: e("lifecycle_storm_resume_refused"),
        }
    }
}

/// A group's bots (sessions), as the workers counted them at the end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupBots {
    /// Sessions started (one per bot, plus one per reconnection or replacement the
    /// group's lifecycle asked for), socket failures included.
    pub sessions: u64,
    /// Sessions that completed the handshake.
    pub connected: u64,
    /// Sessions whose handshake failed (or that got no socket).
    pub failed: u64,
    /// Sessions in play that ended before the run without the engine ending them.
    pub lost: u64,
    /// In play at the end.
    pub connected_now: u64,
    /// In play at the end and silent for a second or more.
    pub silent_at_end: u64,
}

impl GroupBots {
    /// Add another worker's counts.
    pub fn add(&mut self, o: &GroupBots) {
        self.sessions += o.sessions;
        self.connected += o.connected;
        self.failed += o.failed;
        self.lost += o.lost;
        self.connected_now += o.connected_now;
        self.silent_at_end += o.silent_at_end;
    }

    /// Counts added over groups.
    pub fn sum(all: &[GroupBots]) -> GroupBots {
        let mut t = GroupBots::default();
        for g in all {
            t.add(g);
        }
        t
    }
}

/// One group's run.
#[derive(Debug, Clone)]
pub struct GroupOutcome {
    pub name: String,
    /// The size as the scenario wrote it (`share 70%`, `count 5`, `arrival rate`).
    pub size: String,
    /// Bots (sessions) of the group the plan starts within the run.
    pub planned: u64,
    /// Everything the group's bots measured, over the whole run.
    pub total: Recorder,
    pub bots: GroupBots,
    /// The simulated link the group's bots had (its `network:` or the scenario's), as
    /// written; `None`: the real link only.
    pub network: Option<serde_json::Value>,
    /// What the group's `lifecycle:` scheduled, if it has one.
    pub lifecycle: Option<LifecyclePlan>,
}

/// Conditions as written (`network:` serialized), on one line without the unset keys:
/// `latency: 75ms, down: {loss: 5%}`; `real link` when nothing is set.
pub fn describe_network(network: Option<&serde_json::Value>) -> String {
    use serde_json::Value;
    fn one(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Object(o) => format!("{{{}}}", entries(o)),
            other => other.to_string(),
        }
    }
    fn entries(o: &serde_json::Map<String, Value>) -> String {
        o.iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("{k}: {}", one(v)))
            .collect::<Vec<_>>()
            .join(", ")
    }
    match network {
        Some(Value::Object(o)) if o.values().any(|v| !v.is_null()) => entries(o),
        _ => "real link".into(),
    }
}
