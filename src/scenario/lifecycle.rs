//! `lifecycle:` of a group: players arriving at a rate, sessions of a random length after
//! which the player leaves (and, optionally, a new one takes the place), and reconnect
//! storms. All of it is a schedule the plan computes before the run, from the seed, for the
//! whole population (then cut to the run's length and the shard, as the stages are): the
//! same seed gives the same arrivals, session lengths and storm victims in every run and
//! shard, and the engine never slows the schedule down.
//!
//! - **Arrivals** (open model, as k6's constant-arrival-rate and Gatling's `injectOpen`):
//!   `rate` new bots per second, evenly spaced, from `from` until `until`. An arrival is
//!   never delayed to make room: with `max_bots`, one that comes while that many of the
//!   group's sessions are in play is dropped and counted (`arrivals_dropped`); one the
//!   generator starts late (more than [`LATE_JOIN`] after its time, a saturated machine) is
//!   counted (`arrivals_late`); one that never completes its handshake is a failed bot of
//!   the group, as any other.
//! - **Sessions**: each session of the group lasts a length drawn from `session` (`fixed`,
//!   `uniform: [MIN, MAX]` or `exponential: MEAN`), from its start; then the bot leaves
//!   politely. With `replace: true` a new bot (a new index, its own seed) starts at once in
//!   its place.
//! - **Reconnect storm**: at `at`, `share` of the group's sessions in play drop at once (no
//!   goodbye: the server sees them go silent, as after a network hiccup) and reconnect as new
//!   sessions of the same bots, all at `at` or spread evenly over `over`. The number is
//!   `share` of the sessions in play, rounded to the nearest whole bot, picked by the seed.
//!   A reconnection is a new session (a new bot object and transport session) of the same
//!   bot index. Where the protocol has a reconnect token, it resumes the old session: the
//!   engine keeps the dropped bot's `Bot::resume_state` and gives it to the bot that comes
//!   back (`Bot::resume_from`), on the same worker, and counts and times each comeback
//!   (resumed, or refused and joined anew) in the group's recorder.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::share::Share;
use super::spawn::{mix_seed, SpawnEvent, SpawnKind, StopKind, MAX_BOTS};
use crate::duration::Dur;

/// An arrival the generator starts later than this after its time is counted late.
pub const LATE_JOIN: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Lifecycle {
    /// New bots at a rate instead of a share of the stages' population.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arrival: Option<Arrival>,
    /// How long a session lasts before the bot leaves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionLength>,
    /// A new bot takes the place of one whose session ended.
    pub replace: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconnect_storm: Option<Storm>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Arrival {
    /// New bots per second.
    pub rate: f64,
    /// First arrival (default: the run's start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Dur>,
    /// No arrival from then on (default: the run's end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Dur>,
    /// At most this many of the group's sessions in play: an arrival beyond is dropped and
    /// counted, never delayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bots: Option<u64>,
}

/// `session: { fixed: 30s }`, `{ uniform: [10s, 60s] }`, `{ exponential: 30s }` (the mean).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SessionLength {
    Fixed(Dur),
    Uniform(Vec<Dur>),
    Exponential(Dur),
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Storm {
    /// When the sessions drop.
    pub at: Dur,
    /// Of the group's sessions in play then (`30%` or `0.3`).
    pub share: Share,
    /// The reconnections spread evenly over this long (default 0: all at `at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<Dur>,
}

impl Lifecycle {
    /// The rules within one group's `lifecycle:`.
    pub fn check(&self) -> Result<(), String> {
        if let Some(a) = &self.arrival {
            if !(a.rate > 0.0 && a.rate.is_finite() && a.rate <= 100_000.0) {
                return Err(format!(
                    "lifecycle.arrival.rate must be above 0 and at most 100000 bots per second, \
                     got {}",
                    a.rate
                ));
            }
            if let (Some(f), Some(u)) = (a.from, a.until) {
                if u.0 <= f.0 {
                    return Err("lifecycle.arrival: `until` must be after `from`".into());
                }
            }
            if a.max_bots == Some(0) {
                return Err("lifecycle.arrival.max_bots must be at least 1".into());
            }
        }
        match &self.session {
            Some(SessionLength::Fixed(d) | SessionLength::Exponential(d)) if d.0.is_zero() => {
                return Err("lifecycle.session must be longer than 0".into())
            }
            Some(SessionLength::Uniform(v)) => match v.as_slice() {
                [a, b] if !a.0.is_zero() && a.0 <= b.0 => {}
                _ => {
                    return Err("lifecycle.session.uniform takes [MIN, MAX], 0 < MIN <= MAX".into())
                }
            },
            _ => {}
        }
        if self.replace && self.session.is_none() {
            return Err("lifecycle.replace needs a `session` length (what ends a session)".into());
        }
        Ok(())
    }

    /// Session length of the session of bot `index`, drawn from the seed.
    fn length(&self, seed: u64, index: u32) -> Option<Duration> {
        let u = (mix_seed(seed ^ 0x5E55_1011, u64::from(index)) >> 11) as f64 / (1u64 << 53) as f64;
        let d = match self.session.as_ref()? {
            SessionLength::Fixed(d) => d.0,
            SessionLength::Uniform(v) => {
                let (a, b) = (v.first()?.0, v.get(1)?.0);
                a + (b - a).mul_f64(u)
            }
            SessionLength::Exponential(mean) => mean.0.mul_f64(-(1.0 - u).ln()),
        };
        Some(d.max(Duration::from_millis(1)))
    }
}

pub use crate::metrics::groups::LifecyclePlan;

/// Most sessions one plan may schedule (bots, arrivals, replacements and reconnections).
const MAX_SESSIONS: usize = MAX_BOTS as usize;

/// New bot indices, handed out in schedule order after the stages' bots.
struct Bots<'a> {
    groups: &'a mut Vec<u16>,
    ranks: &'a mut Vec<u32>,
    next_rank: Vec<u32>,
}

impl Bots<'_> {
    /// A new bot of group `g`.
    fn new_bot(&mut self, g: u16) -> Result<u32, String> {
        if self.groups.len() >= MAX_SESSIONS {
            return Err(too_many());
        }
        let index = u32::try_from(self.groups.len()).map_err(|_| too_many())?;
        let rank = self
            .next_rank
            .get_mut(usize::from(g))
            .ok_or_else(too_many)?;
        self.groups.push(g);
        self.ranks.push(*rank);
        *rank += 1;
        Ok(index)
    }
}

/// Add the groups' lifecycles to `spawns` (the stages' bots, indices `0..bot_groups.len()`,
/// their groups in `bot_groups`): arrivals and replacements get new indices (appended to
/// `bot_groups` and `bot_ranks`); session ends and storms set stops. Arrivals dropped by
/// `max_bots` get an index too, returned with their group, so a shard counts its own.
/// `duration` bounds the schedule.
pub fn expand(
    spawns: &mut Vec<SpawnEvent>,
    lifecycles: &[Option<&Lifecycle>],
    bot_groups: &mut Vec<u16>,
    bot_ranks: &mut Vec<u32>,
    seed: u64,
    duration: Duration,
) -> Result<Vec<(u16, u32)>, String> {
    let mut next_rank: Vec<u32> = vec![0; lifecycles.len()];
    for g in bot_groups.iter() {
        if let Some(r) = next_rank.get_mut(usize::from(*g)) {
            *r += 1;
        }
    }
    let mut bots = Bots {
        groups: bot_groups,
        ranks: bot_ranks,
        next_rank,
    };
    let mut dropped = Vec::new();
    let mut out: Vec<SpawnEvent> = Vec::with_capacity(spawns.len());
    for (gi, lc) in lifecycles.iter().enumerate() {
        let g = gi as u16;
        let mine = spawns.iter().filter(|e| e.group == g).copied();
        let Some(lc) = lc else {
            out.extend(mine);
            continue;
        };
        // The group's starts in time order: its share of the stages, then its arrivals.
        let mut starts: Vec<(Duration, Option<SpawnEvent>)> =
            mine.map(|e| (e.start, Some(e))).collect();
        if let Some(a) = &lc.arrival {
            let from = a.from.map_or(Duration::ZERO, |d| d.0);
            let until = a.until.map_or(duration, |d| d.0.min(duration));
            let gap = 1.0 / a.rate;
            for k in 0u64.. {
                let t = from + Duration::from_secs_f64(k as f64 * gap);
                if t >= until {
                    break;
                }
                if starts.len() + out.len() >= MAX_SESSIONS {
                    return Err(too_many());
                }
                starts.push((t, None));
            }
        }
        starts.sort_by_key(|s| s.0);
        // When the group's sessions in play end (one without an end: Duration::MAX).
        let mut in_play: BinaryHeap<Reverse<Duration>> = BinaryHeap::new();
        let mut group_out: Vec<SpawnEvent> = Vec::new();
        for (t, ev) in starts {
            while in_play.peek().is_some_and(|Reverse(e)| *e <= t) {
                in_play.pop();
            }
            let mut ev = match ev {
                Some(ev) => ev,
                None => {
                    let index = bots.new_bot(g)?;
                    let full = lc
                        .arrival
                        .as_ref()
                        .and_then(|a| a.max_bots)
                        .is_some_and(|m| in_play.len() as u64 >= m);
                    if full {
                        dropped.push((g, index));
                        continue;
                    }
                    SpawnEvent {
                        index,
                        start: t,
                        stop: None,
                        group: g,
                        kind: SpawnKind::Arrival,
                        stop_kind: StopKind::End,
                    }
                }
            };
            // The session, then the replacements that follow it, one after the other: one
            // place in play until the last of them ends.
            let mut chain_end;
            loop {
                let end = lc.length(seed, ev.index).map(|l| ev.start + l);
                if let Some(e) = end {
                    if ev.stop.is_none_or(|s| e < s) && e < duration {
                        ev.stop = Some(e);
                        ev.stop_kind = StopKind::SessionEnd;
                    }
                }
                chain_end = ev.stop.unwrap_or(Duration::MAX);
                let next = ev
                    .stop
                    .filter(|_| ev.stop_kind == StopKind::SessionEnd && lc.replace);
                group_out.push(ev);
                if group_out.len() + out.len() >= MAX_SESSIONS {
                    return Err(too_many());
                }
                let Some(at) = next else { break };
                ev = SpawnEvent {
                    index: bots.new_bot(g)?,
                    start: at,
                    stop: None,
                    group: g,
                    kind: SpawnKind::Replacement,
                    stop_kind: StopKind::End,
                };
            }
            in_play.push(Reverse(chain_end));
        }
        if let Some(s) = &lc.reconnect_storm {
            storm(&mut group_out, s, seed ^ u64::from(g));
        }
        out.extend(group_out);
    }
    out.sort_by_key(|e| (e.start, e.index));
    *spawns = out;
    Ok(dropped)
}

fn too_many() -> String {
    format!(
        "the groups' lifecycles schedule more than {MAX_SESSIONS} sessions: lower the arrival \
         rate or lengthen the sessions, or shard the run"
    )
}

/// Drop `share` of the sessions in play at `at` (rounded to the nearest whole session,
/// picked by the seed) and reconnect each as a new session of the same bot.
fn storm(sessions: &mut Vec<SpawnEvent>, s: &Storm, seed: u64) {
    let at = s.at.0;
    let over = s.over.map_or(Duration::ZERO, |d| d.0);
    let mut candidates: Vec<usize> = (0..sessions.len())
        .filter(|&i| {
            let e = &sessions[i];
            e.start <= at && e.stop.is_none_or(|stop| stop > at + over)
        })
        .collect();
    let k = (s.share.0 * candidates.len() as f64).round() as usize;
    candidates.sort_by_key(|&i| {
        (
            mix_seed(seed ^ 0x0057_012A, u64::from(sessions[i].index)),
            i,
        )
    });
    candidates.truncate(k);
    candidates.sort_unstable();
    for (j, i) in candidates.into_iter().enumerate() {
        let old = sessions[i];
        let delay = if k > 0 {
            over.mul_f64(j as f64 / k as f64)
        } else {
            Duration::ZERO
        };
        sessions.push(SpawnEvent {
            start: at + delay,
            kind: SpawnKind::Reconnect,
            ..old
        });
        let e = &mut sessions[i];
        e.stop = Some(at);
        e.stop_kind = StopKind::Drop;
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use crate::scenario::{parse, Overrides, Plan, Shard, SpawnKind, StopKind};

    fn plan_with(groups: &str, ov: &Overrides) -> Result<Plan, String> {
        let text = format!(
            "name: l\nprotocol:\n  cafe: {{}}\npopulation:\n  stages:\n    - ramp_to: 20\n      over: 0s\n    - hold: 4s\nseed: 7\n{groups}"
        );
        let p = Path::new("s.yaml");
        let f = parse(&text, p).map_err(|e| e.to_string())?;
        Plan::build(f, p, ov).map_err(|e| e.to_string())
    }

    fn plan(groups: &str) -> Plan {
        plan_with(groups, &Overrides::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    /// 4 arrivals a second from 1 s to 3 s: 8, evenly spaced, new indices after the 20 bots
    /// of the stages, in the group; the stages' bots are all in the other group.
    #[test]
    fn arrivals_come_at_their_rate_with_new_indices() {
        let p = plan("groups:\n  - name: base\n    share: 1\n  - name: walkin\n    lifecycle:\n      arrival:\n        rate: 4\n        from: 1s\n        until: 3s\n");
        let arrivals: Vec<_> = p
            .spawns
            .iter()
            .filter(|e| e.kind == SpawnKind::Arrival)
            .collect();
        let starts: Vec<u128> = arrivals.iter().map(|e| ms(e.start)).collect();
        assert_eq!(starts, [1000, 1250, 1500, 1750, 2000, 2250, 2500, 2750]);
        assert!(arrivals.iter().all(|e| e.group == 1 && e.index >= 20));
        assert_eq!(p.groups[0].planned, 20);
        assert_eq!(p.groups[1].planned, 8);
        assert_eq!(p.planned, 28);
        let l = p.groups[1].lifecycle.unwrap();
        assert_eq!((l.arrivals, l.arrivals_dropped), (8, 0));
        assert!(p.describe().contains("walkin"), "{}", p.describe());
    }

    /// 4 a second, each staying 1 s, at most 2 in play: the third and fourth arrival of every
    /// second find two in play and are dropped, counted; none is delayed.
    #[test]
    fn an_arrival_beyond_max_bots_is_dropped_and_counted_never_delayed() {
        let p = plan("groups:\n  - name: base\n    share: 1\n  - name: walkin\n    lifecycle:\n      arrival:\n        rate: 4\n        max_bots: 2\n      session:\n        fixed: 1s\n");
        let starts: Vec<u128> = (p.spawns.iter())
            .filter(|e| e.kind == SpawnKind::Arrival)
            .map(|e| ms(e.start))
            .collect();
        assert_eq!(starts, [0, 250, 1000, 1250, 2000, 2250, 3000, 3250]);
        let l = p.groups[1].lifecycle.unwrap();
        assert_eq!((l.arrivals, l.arrivals_dropped), (8, 8));
        // Every arrival leaves after exactly 1 s, unless that is past the 4 s run.
        for e in p.spawns.iter().filter(|e| e.kind == SpawnKind::Arrival) {
            let end = e.start + Duration::from_secs(1);
            if end < Duration::from_secs(4) {
                assert_eq!((e.stop, e.stop_kind), (Some(end), StopKind::SessionEnd));
            } else {
                assert_eq!((e.stop, e.stop_kind), (None, StopKind::End));
            }
        }
        assert_eq!(l.session_ends, 6);
    }

    /// Sessions of 1.5 s with replacement, over a 4 s run: each of the 20 bots is replaced
    /// at 1.5 s and at 3 s (the next end, 4.5 s, is past the run).
    #[test]
    fn replacements_take_the_place_of_bots_whose_session_ended() {
        let p = plan("groups:\n  - name: all\n    share: 1\n    lifecycle:\n      session:\n        fixed: 1500ms\n      replace: true\n");
        let l = p.groups[0].lifecycle.unwrap();
        assert_eq!((l.session_ends, l.replacements), (40, 40));
        assert_eq!(p.planned, 60);
        let repl: Vec<_> = p
            .spawns
            .iter()
            .filter(|e| e.kind == SpawnKind::Replacement)
            .collect();
        assert!(repl.iter().all(|e| e.index >= 20));
        assert_eq!(repl.iter().filter(|e| ms(e.start) == 1500).count(), 20);
        assert_eq!(repl.iter().filter(|e| ms(e.start) == 3000).count(), 20);
    }

    #[test]
    fn session_lengths_are_drawn_from_the_seed_within_their_bounds() {
        let p = plan("groups:\n  - name: all\n    share: 1\n    lifecycle:\n      session:\n        uniform: [1s, 2s]\n");
        let lens: Vec<Duration> = p
            .spawns
            .iter()
            .filter_map(|e| e.stop.map(|s| s - e.start))
            .collect();
        assert_eq!(lens.len(), 20);
        assert!(lens
            .iter()
            .all(|l| *l >= Duration::from_secs(1) && *l <= Duration::from_secs(2)));
        assert!(lens.windows(2).any(|w| w[0] != w[1]), "not all the same");
        assert_eq!(p.spawns, plan("groups:\n  - name: all\n    share: 1\n    lifecycle:\n      session:\n        uniform: [1s, 2s]\n").spawns);
        let e = plan("groups:\n  - name: all\n    share: 1\n    lifecycle:\n      session:\n        exponential: 1s\n");
        assert!(e.spawns.iter().any(|e| e.stop.is_some()));
    }

    /// 30 % of the 20 bots in play at 2 s drop and come back: exactly 6, the same bots
    /// (indices) as new sessions, spread over 600 ms; the same in every shard.
    #[test]
    fn a_reconnect_storm_drops_and_reconnects_an_exact_share() {
        let text = "groups:\n  - name: all\n    share: 1\n    lifecycle:\n      reconnect_storm:\n        at: 2s\n        share: 30%\n        over: 600ms\n";
        let p = plan(text);
        let dropped: Vec<_> = p
            .spawns
            .iter()
            .filter(|e| e.stop_kind == StopKind::Drop)
            .collect();
        let back: Vec<_> = p
            .spawns
            .iter()
            .filter(|e| e.kind == SpawnKind::Reconnect)
            .collect();
        assert_eq!((dropped.len(), back.len()), (6, 6));
        assert!(dropped
            .iter()
            .all(|e| e.stop == Some(Duration::from_secs(2))));
        let mut a: Vec<u32> = dropped.iter().map(|e| e.index).collect();
        let mut b: Vec<u32> = back.iter().map(|e| e.index).collect();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "the dropped bots come back");
        let starts: Vec<u128> = back.iter().map(|e| ms(e.start)).collect();
        assert_eq!(starts, [2000, 2100, 2200, 2300, 2400, 2500]);
        assert_eq!(p.groups[0].lifecycle.unwrap().storm_drops, 6);
        assert_eq!(p.planned, 26);
        let mut from_shards = 0;
        for index in 0..3 {
            let ov = Overrides {
                shard: Some(Shard { index, count: 3 }),
                ..Overrides::default()
            };
            let part = plan_with(text, &ov).unwrap();
            for e in &part.spawns {
                assert!(p.spawns.contains(e));
            }
            from_shards += part.groups[0].lifecycle.unwrap().storm_drops;
        }
        assert_eq!(from_shards, 6);
    }

    #[test]
    fn bad_lifecycles_are_refused_at_their_line() {
        let e = plan_with(
            "groups:\n  - name: a\n    share: 1\n    lifecycle:\n      replace: true\n",
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(
            e.contains("s.yaml:") && e.contains("needs a `session`"),
            "{e}"
        );
        let e = plan_with("groups:\n  - name: a\n    share: 1\n  - name: b\n    share: 10%\n    lifecycle:\n      arrival:\n        rate: 2\n", &Overrides::default()).unwrap_err();
        assert!(
            e.contains("s.yaml:") && e.contains("takes no `share`"),
            "{e}"
        );
        let e = plan_with("groups:\n  - name: a\n    share: 1\n    lifecycle:\n      session:\n        uniform: [2s, 1s]\n", &Overrides::default()).unwrap_err();
        assert!(e.contains("s.yaml:") && e.contains("MIN <= MAX"), "{e}");
    }
}
