//! What each group of the population measured (`groups:` in a scenario).
//!
//! Metrics stay per worker, not per bot: a worker keeps one [`Recorder`] per group (at most
//! [`MAX_GROUPS`](crate::scenario::groups::MAX_GROUPS)), a bot's figures go to its group's,
//! and the whole run's are the groups' added up (exact: histograms add). The engine hands
//! the groups over in [`RunOutcome::groups`](super::RunOutcome).

use super::Recorder;

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
