//! The worker's timer step: how a worker groups its bots' deadlines into wake-ups.
//!
//! A wake-up has a fixed cost (the timer re-armed, an epoll round, a clock read, a submit):
//! measured on a 2-core VM about 45 µs, where a `send()` costs 5–7 µs. With one wake-up per
//! bot's input the fixed cost dominated below 1,000 bots (6.5× a bare `send()` loop's CPU per
//! datagram at 500 bots); with 1 ms steps and free phases it still did at 100 (3.3×, three
//! datagrams per wake-up), and every input was rounded up to the end of its step.
//!
//! So a worker serves its deadlines on a grid of steps of about [`FINEST_STEP`], a division
//! of the input period of most bots (`period / per_period`, counted from the run's start),
//! and the bots' phases are dealt out over only `phases` of those steps, as many as keep
//! about [`DATAGRAMS_PER_WAKE_UP`] inputs per worker in each (at least 2 per period). Each
//! bot's input grid is counted from the run's start ([`TimerStep::phase`], the bots'
//! `input_epoch`), so its slots fall exactly on its phase's step: an input leaves at its own
//! slot (late only by the wake-up's own delay), and the bots of one phase share a wake-up.
//! What it costs is the load's shape: a worker's inputs leave in `phases` bursts per period,
//! evenly filled, instead of spread over it.
//!
//! Other deadlines (pings, retries, a transport's timers, bots of another input rate) are
//! served at the end of their fine step, up to about 1 ms late, and so mostly on steps
//! without a burst: a ping sent in the same instant as a worker's burst of inputs would
//! measure the server's queue behind that burst, which real clients, spread over the tick,
//! do not build. (Measured: with pings served on 8.3 ms steps beside the bursts, the
//! quickstart's RTT median read 577 µs against 121-139 µs with 1 ms steps.)

use std::time::Duration;

/// Inputs a phase's step should hold per worker before the phases get more: 32 datagrams
/// spread a wake-up's fixed cost to about a sixth of a `send()`'s (measured, see the module
/// docs).
pub const DATAGRAMS_PER_WAKE_UP: u64 = 32;

/// The default step: at most about a thousand wake-ups a second, and a deadline off the
/// phases' steps waits at most about this long.
pub const FINEST_STEP: Duration = Duration::from_millis(1);

/// The widest default spacing of the phases: half a 60 Hz tick, so a 60 Hz swarm's inputs
/// leave in at least two bursts per tick, never one.
pub const WIDEST_PHASES: Duration = Duration::from_nanos(8_333_333);

/// Bots per worker from which a run with simulated links gets a step by default. Below it
/// the links keep exact timers: a link's delayed datagrams are released by the worker's
/// timers, so a step would hold each delayed direction up to a step longer than the link's
/// configured delay and bias the RTT ground truth.
pub const STEPS_WITH_LINKS_FROM_BOTS_PER_WORKER: u64 = 1_000;

/// A worker's timer step: `period / per_period`, counted from the run's start, and the
/// `phases` of those steps the bots' inputs are dealt out over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerStep {
    /// The input period the steps divide (or the step itself, with `per_period` 1, when no
    /// bot sends on a period).
    pub period: Duration,
    /// Steps per period, at least 1.
    pub per_period: u32,
    /// Steps per period that hold bots' phases (evenly spaced), 1 to `per_period`.
    pub phases: u32,
}

impl TimerStep {
    /// Steps of `step` each (no input period to divide).
    pub fn every(step: Duration) -> Option<Self> {
        (!step.is_zero()).then_some(Self {
            period: step,
            per_period: 1,
            phases: 1,
        })
    }

    /// One step, in whole nanoseconds (rounded down; the grid itself is exact).
    pub fn duration(&self) -> Duration {
        self.period / self.per_period.max(1)
    }

    /// `engine.timer_coalesce: step` as written: the division of `period` nearest to `step`
    /// (at least one step per period), each step a phase, so the bots' slots still fall on
    /// steps; `step` itself without a period. Zero: no step.
    pub fn nearest(step: Duration, period: Option<Duration>) -> Option<Self> {
        if step.is_zero() {
            return None;
        }
        match period.filter(|p| !p.is_zero()) {
            Some(period) => {
                let n = period.div_duration_f64(step).round();
                let n = n.clamp(1.0, f64::from(u32::MAX)) as u32;
                Some(Self {
                    period,
                    per_period: n,
                    phases: n,
                })
            }
            None => Self::every(step),
        }
    }

    /// The step a scenario gets without `engine.timer_coalesce`, for `bots_per_worker` (the
    /// population over the workers, rounded down) whose input period is mostly `period`;
    /// `None`: every deadline at its own instant. See the module docs.
    pub fn default_for(
        bots_per_worker: u64,
        period: Option<Duration>,
        simulated_links: bool,
    ) -> Option<Self> {
        if simulated_links && bots_per_worker < STEPS_WITH_LINKS_FROM_BOTS_PER_WORKER {
            return None;
        }
        let Some(period) = period.filter(|p| !p.is_zero()) else {
            return Self::every(FINEST_STEP);
        };
        let steps = |step: Duration| period.div_duration_f64(step).round() as u64;
        let finest = u32::try_from(steps(FINEST_STEP).max(1)).unwrap_or(u32::MAX);
        let widest = u32::try_from(steps(WIDEST_PHASES)).unwrap_or(u32::MAX);
        // With simulated links (from 1,000 bots per worker on) every step a phase, as with
        // 1 ms steps before: the links' delays are released on the same grid.
        let phases = if simulated_links {
            finest
        } else {
            let wanted = u32::try_from(bots_per_worker / DATAGRAMS_PER_WAKE_UP).unwrap_or(u32::MAX);
            wanted.clamp(widest.clamp(1, finest), finest)
        };
        Some(Self {
            period,
            per_period: finest,
            phases,
        })
    }

    /// The phase offset of a bot at `frac` (0 ≤ frac < 1) of a period `bot_period`: on one
    /// of this grid's phase steps when the bot's period is the one the grid divides (phase
    /// `floor(frac × phases)`, at step `floor(phase × per_period / phases)`, in the grid's
    /// own nanosecond arithmetic), else `frac` of its period.
    pub fn phase(this: Option<Self>, bot_period: Duration, frac: f64) -> Duration {
        match this {
            Some(s) if s.period == bot_period => {
                let n = u64::from(s.per_period.max(1));
                let m = u64::from(s.phases.clamp(1, s.per_period.max(1)));
                let q = ((frac * m as f64) as u64).min(m - 1);
                s.grid().instant_ns(q * n / m)
            }
            _ => bot_period.mul_f64(frac),
        }
    }

    /// The step's arithmetic, its ratio taken once (what the worker's timer wheel keeps).
    pub fn grid(&self) -> StepGrid {
        StepGrid {
            num: u64::try_from(self.period.as_nanos())
                .unwrap_or(u64::MAX)
                .max(1),
            den: u64::from(self.per_period.max(1)),
        }
    }
}

/// A step of `num / den` nanoseconds, exact: step `k` is at `floor(k × num / den)`. In u64
/// (a u128 product only where u64 would overflow, centuries out), since the timer wheel asks
/// for every timer armed and a u128 division is a library call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepGrid {
    num: u64,
    den: u64,
}

impl StepGrid {
    /// Where step `k` is, from the grid's start (saturating past 584 years).
    pub fn instant_ns(&self, k: u64) -> Duration {
        let ns = match k.checked_mul(self.num) {
            Some(x) => x / self.den,
            None => u64::try_from(u128::from(k) * u128::from(self.num) / u128::from(self.den))
                .unwrap_or(u64::MAX),
        };
        Duration::from_nanos(ns)
    }

    /// The first step at or after `since`: the smallest `k` with `k × num / den >= since`.
    pub fn step_at_or_after(&self, since: Duration) -> u64 {
        let since = u64::try_from(since.as_nanos()).unwrap_or(u64::MAX);
        match since.checked_mul(self.den) {
            Some(x) => x.div_ceil(self.num),
            None => u64::try_from(
                (u128::from(since) * u128::from(self.den)).div_ceil(u128::from(self.num)),
            )
            .unwrap_or(u64::MAX),
        }
    }

    /// The last step at or before `since`: the largest `k` with `floor(k × num / den) <=
    /// since`, that is `k × num < (since + 1) × den` (a step's own instant, rounded down, is
    /// at its step).
    pub fn step_at_or_before(&self, since: Duration) -> u64 {
        let since = u64::try_from(since.as_nanos()).unwrap_or(u64::MAX);
        match since.checked_add(1).and_then(|s| s.checked_mul(self.den)) {
            Some(x) => (x - 1) / self.num,
            None => u64::try_from(
                ((u128::from(since) + 1) * u128::from(self.den) - 1) / u128::from(self.num),
            )
            .unwrap_or(u64::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_nanos(16_666_666);

    #[test]
    fn the_default_is_1ms_steps_with_phases_for_32_inputs_each_from_two_a_tick_to_every_step() {
        let d = |bots| {
            TimerStep::default_for(bots, Some(TICK), false).map(|s| (s.per_period, s.phases))
        };
        // 60 Hz: a 1 ms step is 17 per period; half a tick (2 phases) the widest spacing.
        assert_eq!(d(10), Some((17, 2)));
        assert_eq!(d(50), Some((17, 2)));
        assert_eq!(d(96), Some((17, 3)));
        assert_eq!(d(250), Some((17, 7)));
        assert_eq!(d(544), Some((17, 17)));
        assert_eq!(d(3_000), Some((17, 17)));
    }

    #[test]
    fn phases_are_spread_evenly_over_the_steps() {
        let s = TimerStep::default_for(50, Some(TICK), false);
        let steps: Vec<u64> = [0.0, 0.3, 0.5, 0.9]
            .iter()
            .map(|&f| {
                let phase = TimerStep::phase(s, TICK, f);
                s.expect("step").grid().step_at_or_after(phase)
            })
            .collect();
        // Two phases of 17 steps: steps 0 and 8.
        assert_eq!(steps, vec![0, 0, 8, 8]);
    }

    #[test]
    fn simulated_links_keep_exact_timers_below_1000_bots_per_worker_then_the_finest_step() {
        assert_eq!(TimerStep::default_for(999, Some(TICK), true), None);
        assert_eq!(
            TimerStep::default_for(1_000, Some(TICK), true),
            Some(TimerStep {
                period: TICK,
                per_period: 17,
                phases: 17,
            })
        );
    }

    #[test]
    fn without_an_input_period_the_default_is_a_plain_millisecond() {
        let s = TimerStep::default_for(10, None, false).expect("a step");
        assert_eq!(s.duration(), Duration::from_millis(1));
    }

    #[test]
    fn a_written_step_becomes_the_nearest_division_of_the_period() {
        let s = TimerStep::nearest(Duration::from_millis(10), Some(TICK)).expect("step");
        assert_eq!((s.per_period, s.phases), (2, 2));
        assert_eq!(s.duration(), Duration::from_nanos(8_333_333));
        let s = TimerStep::nearest(Duration::from_millis(50), Some(TICK)).expect("step");
        assert_eq!(s.per_period, 1);
        assert_eq!(TimerStep::nearest(Duration::ZERO, Some(TICK)), None);
        let s = TimerStep::nearest(Duration::from_millis(3), None).expect("step");
        assert_eq!(s.duration(), Duration::from_millis(3));
    }

    #[test]
    fn a_bots_slots_fall_exactly_on_steps_for_hours() {
        // 17 steps per 16,666,666 ns: a step is not a whole number of nanoseconds, yet phase +
        // k periods is a step's instant for every k, because both are computed from the
        // same ratio (k periods are k × 17 steps).
        let s = TimerStep {
            period: TICK,
            per_period: 17,
            phases: 17,
        };
        for frac in [0.0, 0.05, 0.5, 0.999_999] {
            let phase = TimerStep::phase(Some(s), TICK, frac);
            let q = s.grid().step_at_or_after(phase);
            assert_eq!(s.grid().instant_ns(q), phase, "frac {frac}");
            for k in [1u64, 60, 216_000, 216_000 * 24] {
                let slot = phase + TICK * u32::try_from(k).expect("k");
                let step = s.grid().step_at_or_after(slot);
                assert_eq!(s.grid().instant_ns(step), slot, "frac {frac}, slot {k}");
                assert_eq!(s.grid().step_at_or_before(slot), step);
            }
        }
    }

    #[test]
    fn an_instant_off_the_grid_is_served_at_the_end_of_its_step() {
        let s = TimerStep {
            period: TICK,
            per_period: 2,
            phases: 2,
        };
        let half = s.grid().instant_ns(1);
        assert_eq!(half, Duration::from_nanos(8_333_333));
        let k = s.grid().step_at_or_after(Duration::from_millis(1));
        assert_eq!(s.grid().instant_ns(k), half);
        assert_eq!(s.grid().step_at_or_before(Duration::from_millis(9)), 1);
    }

    #[test]
    fn a_bot_of_another_period_keeps_its_own_phase() {
        let s = TimerStep::default_for(5_000, Some(TICK), false);
        let p = Duration::from_millis(50);
        assert_eq!(TimerStep::phase(s, p, 0.5), Duration::from_millis(25));
        assert_eq!(TimerStep::phase(None, TICK, 0.5), TICK / 2);
    }
}
