//! The server's snapshot rate over a run, and the moments it changed.
//!
//! A server may lower its snapshot rate on purpose (QoS degradation at a tick overrun, a
//! bandwidth budget, interest management) and raise it again. The bots tell such a change from
//! loss (`seqwindow::TickStep`) and count the snapshots the server sent them, received or lost
//! (`Recorder::snapshots_sent`); the engine sums those over whole seconds in play
//! ([`SnapshotRateCounts`]). From the per-second rates this finds the run's figures (the
//! slowest, median and fastest second, the mean over every bot-second) and each sustained
//! change of level, with when it began and how many bots were in game then.
//!
//! A change is a second whose rate departs from the current level by more than
//! [`CHANGE_SHARE`] (and [`CHANGE_MIN_HZ`]) followed by a second that departs the same way and
//! agrees with it within [`CHANGE_SHARE`]: one odd second (a stall, a burst) is no change, and
//! the second in which the change happened (half at each rate) is counted to it, so the change
//! is dated from the first second that left the old level.

use serde::{Deserialize, Serialize};

use super::{IntervalPoint, SnapshotRateCounts};

/// How far (as a share of the current level) a second must depart to start a change.
pub const CHANGE_SHARE: f64 = 0.15;
/// And by at least this much: a 2 Hz stream losing one snapshot in a second is no change.
pub const CHANGE_MIN_HZ: f64 = 0.5;

/// The run's snapshot rate per bot (summary.json `snapshot_rate`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SnapshotRate {
    /// Whole seconds with at least one bot in play all through them.
    pub seconds: u64,
    /// Snapshots per bot per second over every whole bot-second of the run.
    pub mean_hz: f64,
    /// The slowest second's rate (each second's rate is its bots' average).
    pub min_hz: f64,
    /// The median second's rate.
    pub p50_hz: f64,
    /// The fastest second's rate.
    pub max_hz: f64,
    /// Each sustained change of the rate, in the order they happened.
    #[serde(default)]
    pub changes: Vec<RateChangeAt>,
}

/// One sustained change of the snapshot rate (in words: `report::format::rate_change`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RateChangeAt {
    /// Seconds since the run started: the start of the first second that left the old rate.
    pub t: f64,
    /// The rate before (the average of the seconds at the old level).
    pub from_hz: f64,
    /// The rate after (the average of the first two seconds at the new level).
    pub to_hz: f64,
    /// Bots in game at the end of that first second.
    pub bots_in_game: u64,
}

impl SnapshotRate {
    /// From the run's per-second points (the last, partial one left out); `None` when no
    /// second has a sample (no bot in play for a whole second, or a protocol that counts no
    /// snapshots).
    pub fn of(points: &[IntervalPoint]) -> Option<SnapshotRate> {
        let seconds: Vec<(&IntervalPoint, f64)> = points
            .iter()
            .filter(|p| !p.partial)
            .filter_map(|p| Some((p, p.snapshot_rate.hz()?)))
            .collect();
        if seconds.is_empty() {
            return None;
        }
        let mut total = SnapshotRateCounts::default();
        for (p, _) in &seconds {
            total.merge(&p.snapshot_rate);
        }
        let mut rates: Vec<f64> = seconds.iter().map(|(_, r)| *r).collect();
        let changes = changes(&seconds);
        rates.sort_by(f64::total_cmp);
        Some(SnapshotRate {
            seconds: rates.len() as u64,
            mean_hz: total.hz().unwrap_or(0.0),
            min_hz: rates[0],
            p50_hz: rates[(rates.len() - 1) / 2],
            max_hz: rates[rates.len() - 1],
            changes,
        })
    }
}

/// Whether `r` departs from `level` by enough to start a change, and which way.
fn departs(r: f64, level: f64) -> Option<bool> {
    let d = r - level;
    (d.abs() > CHANGE_SHARE * level && d.abs() > CHANGE_MIN_HZ).then_some(d > 0.0)
}

/// Whether two rates agree within [`CHANGE_SHARE`] of the larger.
fn agree(a: f64, b: f64) -> bool {
    (a - b).abs() <= CHANGE_SHARE * a.max(b)
}

fn changes(seconds: &[(&IntervalPoint, f64)]) -> Vec<RateChangeAt> {
    let mut out = Vec::new();
    // The current level: the sum and count of the seconds at it.
    let (mut sum, mut n) = (seconds[0].1, 1.0);
    let mut i = 1;
    while i < seconds.len() {
        let level = sum / n;
        let r = seconds[i].1;
        let Some(up) = departs(r, level) else {
            sum += r;
            n += 1.0;
            i += 1;
            continue;
        };
        // Confirmed by the next second departing the same way and agreeing with this one;
        // a transition second (between the two levels) is skipped to the one after it.
        let confirm = |j: usize| {
            seconds.get(j + 1).is_some_and(|&(_, next)| {
                departs(next, level) == Some(up) && agree(seconds[j].1, next)
            })
        };
        let at = if confirm(i) {
            Some(i)
        } else if seconds
            .get(i + 1)
            .is_some_and(|&(_, next)| departs(next, level) == Some(up))
            && confirm(i + 1)
        {
            Some(i + 1)
        } else {
            None
        };
        let Some(j) = at else {
            // One odd second: not a change, and not the level either.
            i += 1;
            continue;
        };
        let (first, _) = seconds[i];
        let to = (seconds[j].1 + seconds[j + 1].1) / 2.0;
        out.push(RateChangeAt {
            t: (first.t - 1.0).max(0.0),
            from_hz: level,
            to_hz: to,
            bots_in_game: first.phases.in_game,
        });
        sum = seconds[j].1 + seconds[j + 1].1;
        n = 2.0;
        i = j + 2;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One whole second ending at `t` with `bots` in play all through it at `hz` each.
    fn second(t: u64, bots: u64, hz: f64) -> IntervalPoint {
        let mut p = IntervalPoint {
            t: t as f64,
            ..IntervalPoint::default()
        };
        p.snapshot_rate = SnapshotRateCounts {
            bot_seconds: bots,
            snapshots: (hz * bots as f64).round() as u64,
        };
        p.phases.in_game = bots;
        p
    }

    #[test]
    fn a_steady_rate_has_no_change_and_exact_figures() {
        let points: Vec<_> = (1..=10).map(|t| second(t, 100, 20.0)).collect();
        let r = SnapshotRate::of(&points).expect("samples");
        assert_eq!(
            (r.seconds, r.mean_hz, r.min_hz, r.p50_hz, r.max_hz),
            (10, 20.0, 20.0, 20.0, 20.0)
        );
        assert!(r.changes.is_empty());
    }

    #[test]
    fn a_halving_and_a_restore_are_dated_from_the_first_second_that_left_the_level() {
        // 20 Hz for 5 s, a transition second at 14 Hz, 10 Hz for 4 s, then 20 Hz again.
        let mut points: Vec<_> = (1..=5).map(|t| second(t, 196, 20.0)).collect();
        points.push(second(6, 196, 14.0));
        points.extend((7..=10).map(|t| second(t, 196, 10.0)));
        points.extend((11..=13).map(|t| second(t, 196, 20.0)));
        let r = SnapshotRate::of(&points).expect("samples");
        assert_eq!(r.changes.len(), 2, "{:?}", r.changes);
        assert_eq!(
            r.changes[0],
            RateChangeAt {
                t: 5.0,
                from_hz: 20.0,
                to_hz: 10.0,
                bots_in_game: 196
            }
        );
        assert_eq!((r.changes[1].t, r.changes[1].to_hz), (10.0, 20.0));
        assert_eq!((r.min_hz, r.max_hz), (10.0, 20.0));
    }

    #[test]
    fn one_odd_second_is_no_change() {
        let mut points: Vec<_> = (1..=5).map(|t| second(t, 50, 20.0)).collect();
        points.push(second(6, 50, 12.0));
        points.extend((7..=10).map(|t| second(t, 50, 20.0)));
        let r = SnapshotRate::of(&points).expect("samples");
        assert!(r.changes.is_empty(), "{:?}", r.changes);
        assert_eq!(r.min_hz, 12.0);
    }

    #[test]
    fn the_partial_last_point_and_seconds_without_bots_are_left_out() {
        let mut points = vec![IntervalPoint {
            t: 1.0,
            ..IntervalPoint::default()
        }];
        points.push(second(2, 10, 20.0));
        let mut last = second(3, 10, 5.0);
        last.partial = true;
        points.push(last);
        let r = SnapshotRate::of(&points).expect("samples");
        assert_eq!((r.seconds, r.min_hz), (1, 20.0));
        assert!(SnapshotRate::of(&points[..1]).is_none());
    }

    #[test]
    fn the_mean_weighs_each_bot_second() {
        let points = vec![second(1, 10, 20.0), second(2, 30, 10.0)];
        let r = SnapshotRate::of(&points).expect("samples");
        assert_eq!(r.mean_hz, 500.0 / 40.0);
        assert_eq!(r.p50_hz, 10.0);
    }
}
