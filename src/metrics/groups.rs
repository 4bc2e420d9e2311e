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
    /// summary.json writes it (the metrics cannot name the link's type, which is
    /// [`crate::netsim`]'s); `None`: the real link only.
    pub network: Option<serde_json::Value>,
    /// What the group's `lifecycle:` scheduled, if it has one.
    pub lifecycle: Option<LifecyclePlan>,
    /// The group's seconds, as the whole run's points (the last one partial).
    pub intervals: Vec<GroupPoint>,
    /// The group's RTT after the last whole second (the log's last entry).
    pub tail_rtt: hdrhistogram::Histogram<u64>,
    /// The group's bots per source address, when its bots bind to a pool (its own
    /// `source_addresses`, or the scenario's).
    pub sources: Option<super::SourceCounts>,
}

/// The tag of a group's per-second RTT histograms in `histograms.hlog`:
/// `rtt_us{group=NAME}`, as a threshold names the group (group names are letters, digits,
/// `_` and `-`, so the tag has no comma or space the log format forbids). `merge` reads the
/// groups' per-second percentiles again from them.
pub fn rtt_tag(group: &str) -> String {
    format!("rtt_us{{group={group}}}")
}

/// Whether an hlog tag is a group's (see [`rtt_tag`]) rather than the whole run's.
pub fn is_group_tag(tag: &str) -> bool {
    tag.contains("{group=")
}

/// One second of one group (`groups.NAME.intervals` in summary.json), on the whole run's
/// time axis: what report.html draws per group, beside the conditions it was given.
///
/// Loss and the simulated link's work are kept as counts, so `merge` adds shards exactly;
/// the percentiles are read again from the group's per-second histograms in the log.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct GroupPoint {
    /// Seconds since the run started (end of the interval), as the whole run's points.
    pub t: f64,
    /// The run's last, shorter interval (see the whole run's points).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    /// The group's bots in play at the end of the second.
    pub bots_connected: u64,
    /// RTT percentiles of the group's pongs in the second; `null` when none arrived.
    pub rtt_p50_us: Option<u64>,
    pub rtt_p99_us: Option<u64>,
    /// Loss the group's bots measured in the second, each way.
    pub loss_down: SecondLoss,
    pub loss_up: SecondLoss,
    pub packets_up: u64,
    pub packets_down: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// What the group's simulated link did in the second (all 0 on the real link).
    pub link: LinkSecond,
}

/// One second's loss in one direction: what should have arrived, what did, and the share
/// lost (`null` when nothing was expected: no data, never 0 %).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct SecondLoss {
    pub expected: u64,
    pub received: u64,
    pub rate: Option<f64>,
}

impl SecondLoss {
    pub fn of(c: &super::LossCounts) -> Self {
        SecondLoss {
            expected: c.expected,
            received: c.received,
            rate: (c.expected > 0).then(|| c.rate()),
        }
    }

    /// Two counts added (`None` on overflow).
    pub fn checked_add(&self, o: &SecondLoss) -> Option<SecondLoss> {
        let c = super::LossCounts {
            expected: self.expected.checked_add(o.expected)?,
            received: self.received.checked_add(o.received)?,
        };
        Some(SecondLoss::of(&c))
    }
}

/// The simulated link in one second: datagrams given to it and dropped by it (loss, outage
/// or a full queue), each way.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LinkSecond {
    pub up_offered: u64,
    pub up_dropped: u64,
    pub down_offered: u64,
    pub down_dropped: u64,
}

impl LinkSecond {
    /// From a recorder's `netsim_*` events.
    pub fn of(rec: &Recorder) -> Self {
        let e = |k: &str| rec.events.get(k);
        let dropped = |dir: &str| -> u64 {
            ["loss", "outage", "queue"]
                .iter()
                .map(|w| e(&format!("netsim_{dir}_lost_{w}")))
                .sum()
        };
        LinkSecond {
            up_offered: e("netsim_up_offered"),
            up_dropped: dropped("up"),
            down_offered: e("netsim_down_offered"),
            down_dropped: dropped("down"),
        }
    }

    /// Two seconds' counts added (`None` on overflow).
    pub fn checked_add(&self, o: &LinkSecond) -> Option<LinkSecond> {
        Some(LinkSecond {
            up_offered: self.up_offered.checked_add(o.up_offered)?,
            up_dropped: self.up_dropped.checked_add(o.up_dropped)?,
            down_offered: self.down_offered.checked_add(o.down_offered)?,
            down_dropped: self.down_dropped.checked_add(o.down_dropped)?,
        })
    }
}

/// A group's second while the collector adds the workers' parts: only what its point and
/// its line in the log need (the RTT histogram and the counts), not a whole recorder.
#[derive(Debug, Clone)]
pub struct GroupSecond {
    pub rtt_us: hdrhistogram::Histogram<u64>,
    bots_connected: u64,
    loss_down: super::LossCounts,
    loss_up: super::LossCounts,
    packets_up: u64,
    packets_down: u64,
    bytes_up: u64,
    bytes_down: u64,
    link: LinkSecond,
}

impl Default for GroupSecond {
    fn default() -> Self {
        Self::new()
    }
}

impl GroupSecond {
    pub fn new() -> Self {
        GroupSecond {
            rtt_us: super::new_histogram(),
            bots_connected: 0,
            loss_down: Default::default(),
            loss_up: Default::default(),
            packets_up: 0,
            packets_down: 0,
            bytes_up: 0,
            bytes_down: 0,
            link: LinkSecond::default(),
        }
    }

    /// Add one worker's part of the second: its recorder of the group and the group's bots
    /// it had in play at the end.
    pub fn add(&mut self, rec: &Recorder, connected: u64) {
        // Same bounds on both sides: the add cannot fail.
        let _ = self.rtt_us.add(&rec.rtt_us);
        self.bots_connected += connected;
        self.loss_down.merge(&rec.loss_down);
        self.loss_up.merge(&rec.loss_up);
        self.packets_up += rec.packets_up;
        self.packets_down += rec.packets_down;
        self.bytes_up += rec.bytes_up;
        self.bytes_down += rec.bytes_down;
        let l = LinkSecond::of(rec);
        self.link = self.link.checked_add(&l).unwrap_or(self.link);
    }

    /// Add another part of the same second (the bots in play are left as they are: a
    /// worker's unfinished second has none to add).
    pub fn merge(&mut self, o: &GroupSecond) {
        let _ = self.rtt_us.add(&o.rtt_us);
        self.loss_down.merge(&o.loss_down);
        self.loss_up.merge(&o.loss_up);
        self.packets_up += o.packets_up;
        self.packets_down += o.packets_down;
        self.bytes_up += o.bytes_up;
        self.bytes_down += o.bytes_down;
        self.link = self.link.checked_add(&o.link).unwrap_or(self.link);
    }

    /// The second's point, ending at `index + 1` s.
    pub fn point(&self, index: u64) -> GroupPoint {
        let rtt = (!self.rtt_us.is_empty()).then(|| super::HistSummary::of(&self.rtt_us));
        GroupPoint {
            t: (index + 1) as f64,
            partial: false,
            bots_connected: self.bots_connected,
            rtt_p50_us: rtt.map(|h| h.p50),
            rtt_p99_us: rtt.map(|h| h.p99),
            loss_down: SecondLoss::of(&self.loss_down),
            loss_up: SecondLoss::of(&self.loss_up),
            packets_up: self.packets_up,
            packets_down: self.packets_down,
            bytes_up: self.bytes_up,
            bytes_down: self.bytes_down,
            link: self.link,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two workers' parts of one second make one point: counts added, the link's drops per
    /// direction summed over their reasons, percentiles of both parts' samples together, and
    /// `null` (not 0) where nothing was measured.
    #[test]
    fn a_groups_second_adds_the_workers_parts() {
        let mut a = Recorder::new();
        a.record_rtt(1_000);
        a.loss_down.add(100, 97);
        a.events.add("netsim_down_offered", 100);
        a.events.add("netsim_down_lost_loss", 2);
        a.events.add("netsim_down_lost_queue", 1);
        let mut b = Recorder::new();
        for _ in 0..99 {
            b.record_rtt(50_000);
        }
        b.loss_down.add(100, 100);
        b.events.add("netsim_up_offered", 40);
        b.events.add("netsim_up_lost_outage", 4);
        let mut s = GroupSecond::new();
        s.add(&a, 3);
        s.add(&b, 2);
        let p = s.point(4);
        assert_eq!(p.t, 5.0);
        assert_eq!(p.bots_connected, 5);
        assert_eq!((p.loss_down.expected, p.loss_down.received), (200, 197));
        assert_eq!(p.loss_down.rate, Some(0.015));
        assert_eq!(p.loss_up.rate, None, "nothing expected upstream: no data");
        assert_eq!(
            p.link,
            LinkSecond {
                up_offered: 40,
                up_dropped: 4,
                down_offered: 100,
                down_dropped: 3,
            }
        );
        assert_eq!(p.rtt_p50_us, Some(s.rtt_us.value_at_quantile(0.5)));
        assert!(
            p.rtt_p50_us.unwrap() >= 50_000,
            "99 of 100 samples are 50 ms"
        );
        assert_eq!(GroupSecond::new().point(0).rtt_p99_us, None);
    }
}
