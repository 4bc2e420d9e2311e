//! Where bots are in their lives, counted once a second per worker.
//!
//! A run where every bot "connected" but none ever sent an input says nothing about why until
//! the bots' phases are counted: 20 bots stuck in `content` waiting for a ContentManifest
//! read differently from 20 bots stuck in the transport handshake. The engine samples each
//! bot's [`Phase`] (and the message it waits for, when its protocol names one) once a second,
//! so the cost is one pass over the worker's bots per second, nothing per packet.

use serde::{Deserialize, Serialize};

/// A bot's phase, from the engine's view (transport) and the protocol's (everything after).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Spawned; its link is being opened (the bot has not started yet).
    Connecting,
    /// Waiting for the transport's own handshake (ENet CONNECT/VERIFY).
    TransportHandshake,
    /// Hello sent, waiting for the server's answer.
    ProtocolHandshake,
    /// Accepted; loading what it needs before play (content transfer, the first world state).
    Content,
    /// Playing: sending inputs, receiving snapshots.
    InGame,
    /// Its session is being replaced (a reconnection or a zone handoff).
    Reconnecting,
    /// Gave up (timeout, refusal) before or during play.
    Failed,
    /// Left: stopped by the engine or closed by the server.
    Closed,
}

impl Phase {
    /// Every phase, in life order (the stacking order of the report's chart).
    pub const ALL: [Phase; 8] = [
        Phase::Connecting,
        Phase::TransportHandshake,
        Phase::ProtocolHandshake,
        Phase::Content,
        Phase::InGame,
        Phase::Reconnecting,
        Phase::Failed,
        Phase::Closed,
    ];

    /// The name used in `summary.json` and the report.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Connecting => "connecting",
            Phase::TransportHandshake => "transport_handshake",
            Phase::ProtocolHandshake => "protocol_handshake",
            Phase::Content => "content",
            Phase::InGame => "in_game",
            Phase::Reconnecting => "reconnecting",
            Phase::Failed => "failed",
            Phase::Closed => "closed",
        }
    }

    /// Words for the console ("20 bots in the transport handshake for 3 s").
    pub fn label(self) -> &'static str {
        match self {
            Phase::Connecting => "connecting",
            Phase::TransportHandshake => "in the transport handshake",
            Phase::ProtocolHandshake => "in the protocol handshake",
            Phase::Content => "loading content",
            Phase::InGame => "in game",
            Phase::Reconnecting => "reconnecting",
            Phase::Failed => "failed",
            Phase::Closed => "closed",
        }
    }

    /// A bot here is on its way into the game (not playing, not finished).
    pub fn is_waiting(self) -> bool {
        matches!(
            self,
            Phase::Connecting
                | Phase::TransportHandshake
                | Phase::ProtocolHandshake
                | Phase::Content
                | Phase::Reconnecting
        )
    }
}

/// Bots per phase at one instant (a gauge: summed over workers, never over time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseCounts {
    #[serde(default)]
    pub connecting: u64,
    #[serde(default)]
    pub transport_handshake: u64,
    #[serde(default)]
    pub protocol_handshake: u64,
    #[serde(default)]
    pub content: u64,
    #[serde(default)]
    pub in_game: u64,
    #[serde(default)]
    pub reconnecting: u64,
    #[serde(default)]
    pub failed: u64,
    #[serde(default)]
    pub closed: u64,
}

impl PhaseCounts {
    pub fn get(&self, p: Phase) -> u64 {
        match p {
            Phase::Connecting => self.connecting,
            Phase::TransportHandshake => self.transport_handshake,
            Phase::ProtocolHandshake => self.protocol_handshake,
            Phase::Content => self.content,
            Phase::InGame => self.in_game,
            Phase::Reconnecting => self.reconnecting,
            Phase::Failed => self.failed,
            Phase::Closed => self.closed,
        }
    }

    fn slot(&mut self, p: Phase) -> &mut u64 {
        match p {
            Phase::Connecting => &mut self.connecting,
            Phase::TransportHandshake => &mut self.transport_handshake,
            Phase::ProtocolHandshake => &mut self.protocol_handshake,
            Phase::Content => &mut self.content,
            Phase::InGame => &mut self.in_game,
            Phase::Reconnecting => &mut self.reconnecting,
            Phase::Failed => &mut self.failed,
            Phase::Closed => &mut self.closed,
        }
    }

    pub fn add(&mut self, p: Phase, n: u64) {
        *self.slot(p) += n;
    }

    /// Add another worker's counts taken at the same second.
    pub fn merge(&mut self, o: &PhaseCounts) {
        for p in Phase::ALL {
            self.add(p, o.get(p));
        }
    }

    pub fn total(&self) -> u64 {
        Phase::ALL.iter().map(|&p| self.get(p)).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }
}

/// Bots that share a phase and the thing they wait for, and how long the longest-waiting of
/// them has been there (from its spawn, or from the once-a-second census that first saw it
/// in this phase: to about a second).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    pub phase: Phase,
    /// What they wait for: the protocol's message name ("ContentManifest"), or `None` when
    /// the protocol does not say.
    #[serde(default, rename = "for", skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
    pub bots: u64,
    /// Seconds the longest-waiting bot of the group has been in this phase.
    pub longest_s: u64,
}

impl Waiting {
    /// "20 bots waiting for ContentManifest for 15 s" or "3 bots in the transport handshake
    /// for 2 s".
    pub fn sentence(&self) -> String {
        let bots = if self.bots == 1 { "bot" } else { "bots" };
        match &self.what {
            Some(w) => format!(
                "{} {bots} waiting for {w} for {} s ({})",
                self.bots,
                self.longest_s,
                self.phase.name()
            ),
            None => format!(
                "{} {bots} {} for {} s",
                self.bots,
                self.phase.label(),
                self.longest_s
            ),
        }
    }
}

/// Most targets tracked one by one: past this many (a large fleet), per-target points are
/// left out rather than growing every second's point without bound.
pub const MAX_TARGETS: usize = 32;

/// One target's (one game instance's) bots and traffic over one second.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetPoint {
    /// The server address the bots play on.
    pub target: String,
    /// Its bots per phase at the end of the second.
    pub phases: PhaseCounts,
    /// Application payload its bots sent and received during the second.
    pub bytes_up: u64,
    pub bytes_down: u64,
}

/// Fold `points` into `into` by target (bots and bytes add up), keeping targets sorted.
pub fn merge_targets(into: &mut Vec<TargetPoint>, points: &[TargetPoint]) {
    for p in points {
        match into.iter_mut().find(|t| t.target == p.target) {
            Some(t) => {
                t.phases.merge(&p.phases);
                t.bytes_up += p.bytes_up;
                t.bytes_down += p.bytes_down;
            }
            None => into.push(p.clone()),
        }
    }
    into.sort_by(|a, b| a.target.cmp(&b.target));
}

/// Fold `groups` into `into` by (phase, what): bot counts add, the longest wait is the max.
/// The result is ordered by bots, most first.
pub fn merge_waiting(into: &mut Vec<Waiting>, groups: &[Waiting]) {
    for g in groups {
        match into
            .iter_mut()
            .find(|w| w.phase == g.phase && w.what == g.what)
        {
            Some(w) => {
                w.bots += g.bots;
                w.longest_s = w.longest_s.max(g.longest_s);
            }
            None => into.push(g.clone()),
        }
    }
    into.sort_by(|a, b| b.bots.cmp(&a.bots).then(a.phase.cmp(&b.phase)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_serialize_by_phase_name() {
        let mut c = PhaseCounts::default();
        c.add(Phase::Content, 20);
        c.add(Phase::InGame, 3);
        let j = serde_json::to_value(c).unwrap();
        assert_eq!(j["content"], 20);
        assert_eq!(j["in_game"], 3);
        assert_eq!(j["transport_handshake"], 0);
        for p in Phase::ALL {
            assert!(j.get(p.name()).is_some(), "{} missing", p.name());
        }
        let back: PhaseCounts = serde_json::from_value(j).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.total(), 23);
    }

    #[test]
    fn waiting_groups_merge_by_phase_and_message() {
        let w = |phase, what: Option<&str>, bots, longest_s| Waiting {
            phase,
            what: what.map(str::to_string),
            bots,
            longest_s,
        };
        let mut all = vec![w(Phase::Content, Some("ContentManifest"), 12, 15)];
        merge_waiting(
            &mut all,
            &[
                w(Phase::Content, Some("ContentManifest"), 8, 14),
                w(Phase::TransportHandshake, None, 30, 2),
            ],
        );
        assert_eq!(
            all,
            vec![
                w(Phase::TransportHandshake, None, 30, 2),
                w(Phase::Content, Some("ContentManifest"), 20, 15),
            ]
        );
        assert_eq!(
            all[1].sentence(),
            "20 bots waiting for ContentManifest for 15 s (content)"
        );
        assert_eq!(
            all[0].sentence(),
            "30 bots in the transport handshake for 2 s"
        );
    }
}
