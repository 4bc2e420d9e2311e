//! The worker's timer queue: which `(target, generation)` entries are due at a wake-up.
//!
//! Without a timer step every deadline is served at its own instant, so the queue is a
//! binary heap ordered by deadline. With a step ([`TimerStep`]: a division of the bots' input
//! period, counted from the run's start) deadlines are served at the end of their step: a
//! deadline on a step (a bot's input slot, which the plan puts there) at its own instant, one
//! off the grid up to a step later, and every bot due in one step shares one wake-up and one
//! clock read: the order within a step changes nothing, only the step does.
//! Then the queue is a bucket wheel keyed by step index: arming an entry is a push onto its
//! step's bucket and a wake-up takes whole buckets, where the heap paid a sift of
//! `log2(entries)` levels (each a likely cache miss at thousands of bots) for both.
//! The wheel spans about [`SPAN`] (64 steps at 1 ms: four 60 Hz ticks, the deadlines nearly
//! every bot has next); entries beyond it (a 1 s ping that is a bot's earliest deadline, a
//! slow input rate) wait in an overflow heap until the wheel reaches them. The span is short on
//! purpose: a bucket keeps the capacity it once needed, so the wheel's memory is its steps
//! times the bots due in one step, and a span of a few ticks keeps that about what the heap
//! took (a few entries per bot).
//!
//! Cancellation stays lazy, as with the heap: an entry is never removed; the worker skips one
//! whose generation is no longer its target's current one.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use crate::scenario::timer_step::StepGrid;
use crate::scenario::TimerStep;

/// The time the wheel spans, rounded up to a power of two of steps, at least [`MIN_STEPS`]
/// and at most [`MAX_STEPS`].
const SPAN: Duration = Duration::from_millis(64);
const MIN_STEPS: u64 = 64;
const MAX_STEPS: u64 = 4096;

/// The steps a wheel of `step` spans: a power of two, a multiple of 64 (one bitmap word).
fn span_steps(step: Duration) -> u64 {
    let step_ns = u64::try_from(step.as_nanos()).unwrap_or(u64::MAX).max(1);
    let want = u64::try_from(SPAN.as_nanos())
        .unwrap_or(u64::MAX)
        .div_ceil(step_ns);
    want.clamp(MIN_STEPS, MAX_STEPS).next_power_of_two()
}

/// A timer entry: the target (bot slot or source) and the generation it was armed with.
pub type Entry = (u32, u32);

/// The timer queue of one worker.
pub enum TimerQueue {
    /// No step: each deadline at its own instant.
    Heap(BinaryHeap<Reverse<(Instant, u32, u32)>>),
    /// A step: deadlines at the end of their step.
    Wheel(Box<Wheel>),
}

impl TimerQueue {
    /// A queue for deadlines served on a grid of `step` from `epoch` (`None`: no grid),
    /// sized for about `capacity` entries.
    pub fn new(epoch: Instant, step: Option<TimerStep>, capacity: usize) -> Self {
        match step {
            None => Self::Heap(BinaryHeap::with_capacity(capacity)),
            Some(step) => Self::Wheel(Box::new(Wheel::new(epoch, step))),
        }
    }

    /// Arm `entry` for `at`; returns when it will be served (with a step: the end of its
    /// step).
    pub fn push(&mut self, at: Instant, entry: Entry) -> Instant {
        match self {
            Self::Heap(h) => {
                h.push(Reverse((at, entry.0, entry.1)));
                at
            }
            Self::Wheel(w) => w.push(at, entry),
        }
    }

    /// When the earliest entry is to be served (with a step: the end of its step).
    pub fn next_due(&self) -> Option<Instant> {
        match self {
            Self::Heap(h) => h.peek().map(|r| r.0 .0),
            Self::Wheel(w) => w.next_due(),
        }
    }

    /// Move every entry to be served at or before `now` into `due` (stale ones included).
    pub fn take_due(&mut self, now: Instant, due: &mut Vec<Entry>) {
        match self {
            Self::Heap(h) => {
                while let Some(&Reverse((at, target, generation))) = h.peek() {
                    if at > now {
                        break;
                    }
                    h.pop();
                    due.push((target, generation));
                }
            }
            Self::Wheel(w) => w.take_due(now, due),
        }
    }
}

/// Buckets of entries by step index `k` (served at `epoch + grid.instant_ns(k)`), for the steps
/// `cursor .. cursor + steps`; earlier ones (armed for a step already served) in
/// `ready`, later ones in `overflow`.
pub struct Wheel {
    epoch: Instant,
    /// The step's arithmetic, its ratio taken once (every timer armed asks it).
    grid: StepGrid,
    /// The first step not yet served.
    cursor: u64,
    /// The steps the wheel spans (a power of two, at least 64).
    steps: u64,
    /// Bucket `k % steps` holds the entries of step `k`, for `k` in the span.
    buckets: Vec<Vec<Entry>>,
    /// Bit `k % steps`: that bucket is not empty.
    occupied: Vec<u64>,
    /// Entries whose step was already served when they were armed: due at the next take.
    ready: Vec<Entry>,
    /// The earliest step among `ready`.
    ready_step: u64,
    /// Entries beyond the span, by step.
    overflow: BinaryHeap<Reverse<(u64, u32, u32)>>,
}

impl Wheel {
    fn new(epoch: Instant, step: TimerStep) -> Self {
        let steps = span_steps(step.duration());
        Self {
            epoch,
            grid: step.grid(),
            cursor: 0,
            steps,
            buckets: vec![Vec::new(); steps as usize],
            occupied: vec![0; (steps / 64) as usize],
            ready: Vec::new(),
            ready_step: u64::MAX,
            overflow: BinaryHeap::new(),
        }
    }

    /// The step `at` is served at: the first whose end is at or after it (step 0, the epoch,
    /// for anything before the epoch). The rounding of the tests' `coalesced`.
    fn step_of(&self, at: Instant) -> u64 {
        self.grid
            .step_at_or_after(at.saturating_duration_since(self.epoch))
    }

    /// The last step whose end is at or before `now` (0 before the epoch: the caller checks).
    fn steps_until(&self, now: Instant) -> u64 {
        self.grid
            .step_at_or_before(now.saturating_duration_since(self.epoch))
    }

    /// When step `k` is served.
    fn instant_of(&self, k: u64) -> Instant {
        self.epoch
            .checked_add(self.grid.instant_ns(k))
            .unwrap_or_else(|| self.epoch + Duration::from_secs(86_400 * 365 * 100))
    }

    fn push(&mut self, at: Instant, entry: Entry) -> Instant {
        let k = self.step_of(at);
        self.place(k, entry);
        if at <= self.epoch {
            // As `coalesced`: a deadline before the epoch is its own (it is served at the
            // epoch, the first wake-up the wheel has).
            return at;
        }
        self.instant_of(k)
    }

    fn place(&mut self, k: u64, entry: Entry) {
        if k < self.cursor {
            self.ready.push(entry);
            self.ready_step = self.ready_step.min(k);
        } else if k - self.cursor < self.steps {
            let b = (k % self.steps) as usize;
            self.buckets[b].push(entry);
            self.occupied[b / 64] |= 1 << (b % 64);
        } else {
            self.overflow.push(Reverse((k, entry.0, entry.1)));
        }
    }

    /// The first occupied bucket at or after the cursor, as a step index.
    fn first_occupied(&self) -> Option<u64> {
        let start = (self.cursor % self.steps) as usize;
        let words = self.occupied.len();
        // Scan the words from the cursor's, wrapping once; the cursor's word is looked at
        // twice: first its bits from the cursor on, last those before it.
        let (w0, b0) = (start / 64, start % 64);
        let first = self.occupied[w0] & (!0u64 << b0);
        if first != 0 {
            return Some(self.step_at(w0 * 64 + first.trailing_zeros() as usize, start));
        }
        for i in 1..=words {
            let w = (w0 + i) % words;
            let mut bits = self.occupied[w];
            if i == words {
                bits &= !(!0u64 << b0);
            }
            if bits != 0 {
                return Some(self.step_at(w * 64 + bits.trailing_zeros() as usize, start));
            }
        }
        None
    }

    /// The step index of bucket `b`, the cursor's bucket being `start`.
    fn step_at(&self, b: usize, start: usize) -> u64 {
        let steps = self.steps as usize;
        let ahead = (b + steps - start) % steps;
        self.cursor + ahead as u64
    }

    fn next_due(&self) -> Option<Instant> {
        let mut k = self.ready_step;
        if let Some(b) = self.first_occupied() {
            k = k.min(b);
        }
        if let Some(Reverse((o, _, _))) = self.overflow.peek() {
            k = k.min(*o);
        }
        (k != u64::MAX).then(|| self.instant_of(k))
    }

    fn take_due(&mut self, now: Instant, due: &mut Vec<Entry>) {
        due.append(&mut self.ready);
        self.ready_step = u64::MAX;
        if now < self.epoch {
            return;
        }
        let last = self.steps_until(now);
        while self.cursor <= last {
            // The buckets of steps cursor..=end, in step order.
            let end = last.min(self.cursor + self.steps - 1);
            while let Some(k) = self.first_occupied().filter(|&k| k <= end) {
                let b = (k % self.steps) as usize;
                due.append(&mut self.buckets[b]);
                self.occupied[b / 64] &= !(1 << (b % 64));
            }
            // Nothing occupied up to `end`: the cursor may jump past it (with no entry in
            // the wheel at all, straight to the overflow's first step or to `last`).
            self.cursor = end + 1;
            if self.occupied.iter().all(|&w| w == 0) {
                let to = self.overflow.peek().map_or(last + 1, |r| r.0 .0);
                self.cursor = self.cursor.max(to.min(last + 1));
            }
            // Overflow entries now within the span move into their buckets (or, if their
            // step was passed, straight out).
            while let Some(&Reverse((k, target, generation))) = self.overflow.peek() {
                if k - self.cursor.min(k) >= self.steps {
                    break;
                }
                self.overflow.pop();
                if k < self.cursor {
                    due.push((target, generation));
                } else {
                    self.place(k, (target, generation));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEP: Duration = Duration::from_millis(1);

    /// The specification of the grid, as the heap served it before the wheel (the wheel is
    /// checked against it below):
    /// `deadline` rounded up to the next step of `step` counted from `epoch`: every deadline
    /// within one step fires at the same instant, never before its own. A deadline before
    /// `epoch` is left as it is.
    fn coalesced(deadline: Instant, epoch: Instant, step: TimerStep) -> Instant {
        if deadline <= epoch {
            return deadline;
        }
        let k = step.grid().step_at_or_after(deadline - epoch);
        epoch
            .checked_add(step.grid().instant_ns(k))
            .unwrap_or(deadline)
    }

    fn ms(epoch: Instant, n: u64) -> Instant {
        epoch + Duration::from_millis(n)
    }

    fn us(epoch: Instant, n: u64) -> Instant {
        epoch + Duration::from_micros(n)
    }

    /// Take what is due at `now`, sorted (the order within a step is not specified).
    fn take(q: &mut TimerQueue, now: Instant) -> Vec<Entry> {
        let mut due = Vec::new();
        q.take_due(now, &mut due);
        due.sort();
        due
    }

    #[test]
    fn each_deadline_is_served_at_the_end_of_its_step_never_before_it() {
        let e = Instant::now();
        let mut q = TimerQueue::new(e, TimerStep::every(STEP), 16);
        assert_eq!(q.push(us(e, 200), (1, 0)), ms(e, 1));
        q.push(us(e, 1000), (2, 0)); // exactly on a step: that step
        assert_eq!(q.push(us(e, 1001), (3, 0)), ms(e, 2));
        q.push(us(e, 1999), (4, 0));
        assert_eq!(q.next_due(), Some(ms(e, 1)));
        assert_eq!(take(&mut q, us(e, 999)), vec![]);
        assert_eq!(take(&mut q, ms(e, 1)), vec![(1, 0), (2, 0)]);
        assert_eq!(q.next_due(), Some(ms(e, 2)));
        // A late wake-up inside step 2 does not serve step 2's deadlines early, even those
        // already past.
        assert_eq!(take(&mut q, us(e, 1500)), vec![]);
        assert_eq!(take(&mut q, ms(e, 2)), vec![(3, 0), (4, 0)]);
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn a_late_wake_up_serves_every_step_it_passed_at_once() {
        let e = Instant::now();
        let mut q = TimerQueue::new(e, TimerStep::every(STEP), 16);
        for k in 1..=5u32 {
            q.push(ms(e, u64::from(k)), (k, 7));
        }
        assert_eq!(
            take(&mut q, us(e, 4200)),
            vec![(1, 7), (2, 7), (3, 7), (4, 7)]
        );
        assert_eq!(q.next_due(), Some(ms(e, 5)));
        assert_eq!(take(&mut q, ms(e, 5)), vec![(5, 7)]);
    }

    #[test]
    fn an_entry_armed_for_a_step_already_served_is_due_at_once() {
        let e = Instant::now();
        let mut q = TimerQueue::new(e, TimerStep::every(STEP), 16);
        q.push(ms(e, 3), (1, 0));
        assert_eq!(take(&mut q, ms(e, 3)), vec![(1, 0)]);
        // Serving it armed another for a deadline already past (as a bot that is behind).
        q.push(us(e, 2500), (2, 0));
        assert_eq!(q.next_due(), Some(ms(e, 3)));
        assert_eq!(take(&mut q, ms(e, 3)), vec![(2, 0)]);
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn re_armed_and_cancelled_entries_come_out_with_their_old_generation_only() {
        // Lazy cancellation: the queue returns every entry armed; the worker drops those
        // whose generation is stale. A re-arm is a new entry with a new generation.
        let e = Instant::now();
        let mut q = TimerQueue::new(e, TimerStep::every(STEP), 16);
        q.push(ms(e, 2), (1, 0));
        q.push(ms(e, 5), (1, 1)); // re-armed later
        assert_eq!(take(&mut q, ms(e, 2)), vec![(1, 0)]);
        assert_eq!(take(&mut q, ms(e, 4)), vec![]);
        assert_eq!(take(&mut q, ms(e, 5)), vec![(1, 1)]);
    }

    #[test]
    fn far_deadlines_wait_in_the_overflow_and_fire_at_their_step() {
        let e = Instant::now();
        let mut q = TimerQueue::new(e, TimerStep::every(STEP), 16);
        let far = span_steps(STEP) * 3 + 17;
        q.push(ms(e, far), (9, 0));
        q.push(us(e, far * 1000 - 1), (8, 0)); // same step, just before its end
        q.push(ms(e, 10), (1, 0));
        assert_eq!(q.next_due(), Some(ms(e, 10)));
        assert_eq!(take(&mut q, ms(e, 10)), vec![(1, 0)]);
        assert_eq!(q.next_due(), Some(ms(e, far)));
        assert_eq!(take(&mut q, ms(e, far - 1)), vec![]);
        assert_eq!(take(&mut q, ms(e, far)), vec![(8, 0), (9, 0)]);
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn overflow_entries_move_into_the_wheel_as_it_turns() {
        let e = Instant::now();
        let mut q = TimerQueue::new(e, TimerStep::every(STEP), 16);
        let span = span_steps(STEP);
        // Beyond the span when armed, within it after the first wake-ups.
        q.push(ms(e, span + 5), (2, 0));
        q.push(ms(e, 6), (1, 0));
        assert_eq!(take(&mut q, ms(e, 6)), vec![(1, 0)]);
        // Armed now, in the same step as the overflow's entry: both at that step.
        q.push(ms(e, span + 5), (3, 0));
        assert_eq!(take(&mut q, ms(e, span + 4)), vec![]);
        assert_eq!(take(&mut q, ms(e, span + 5)), vec![(2, 0), (3, 0)]);
    }

    #[test]
    fn the_wheel_spans_about_64_ms_in_a_power_of_two_of_steps() {
        assert_eq!(span_steps(Duration::from_millis(1)), 64);
        assert_eq!(span_steps(Duration::from_micros(250)), 256);
        assert_eq!(span_steps(Duration::from_micros(700)), 128);
        // At least one bitmap word, at most 4096 buckets.
        assert_eq!(span_steps(Duration::from_millis(5)), 64);
        assert_eq!(span_steps(Duration::from_micros(10)), 4096);
        assert_eq!(span_steps(Duration::from_nanos(1)), 4096);
    }

    #[test]
    fn the_wheel_wraps_around_many_times_in_a_periodic_schedule() {
        // A 60 Hz bot on a 1 ms grid for 20 s: every tick at its step, over 300 turns.
        let e = Instant::now();
        let mut q = TimerQueue::new(e, TimerStep::every(STEP), 16);
        let tick = Duration::from_nanos(16_666_667);
        let mut at = e + tick;
        q.push(at, (0, 0));
        let mut served = 0;
        let mut now_ms = 0u64;
        while now_ms < 20_000 {
            now_ms += 1;
            let now = ms(e, now_ms);
            let due = take(&mut q, now);
            if at <= now {
                // Due: at the first step at or after its deadline, not one later.
                assert_eq!(due, vec![(0, served)], "at {now_ms} ms");
                assert!(now - at < STEP);
                served += 1;
                at += tick;
                q.push(at, (0, served));
            } else {
                assert_eq!(due, vec![], "at {now_ms} ms");
            }
        }
        assert_eq!(served, 1199);
    }

    #[test]
    fn slots_on_a_division_of_the_period_are_served_at_their_own_instant() {
        // The plan's grid: 60 Hz in 3 steps, a bot whose phase is the second step. Its slots
        // are never rounded (they are steps), for an hour of them; a ping off the grid waits
        // for the end of its step.
        let e = Instant::now();
        let period = Duration::from_nanos(16_666_666);
        let step = TimerStep {
            period,
            per_period: 3,
            phases: 3,
        };
        let mut q = TimerQueue::new(e, Some(step), 16);
        let phase = TimerStep::phase(Some(step), period, 0.4);
        assert_eq!(phase, Duration::from_nanos(5_555_555));
        for k in [0u32, 1, 2, 59, 216_000] {
            let slot = e + phase + period * k;
            assert_eq!(q.push(slot, (1, k)), slot, "slot {k}");
            assert_eq!(take(&mut q, slot - Duration::from_nanos(1)), vec![]);
            assert_eq!(take(&mut q, slot), vec![(1, k)]);
        }
        let ping = e + period * 216_001 + Duration::from_millis(1);
        let end = e + period * 216_001 + step.grid().instant_ns(1);
        assert_eq!(q.push(ping, (2, 0)), end);
        assert_eq!(take(&mut q, end - Duration::from_nanos(1)), vec![]);
        assert_eq!(take(&mut q, end), vec![(2, 0)]);
    }

    #[test]
    fn a_long_idle_gap_jumps_the_cursor_without_losing_anything() {
        let e = Instant::now();
        let mut q = TimerQueue::new(e, TimerStep::every(STEP), 16);
        q.push(ms(e, 1), (1, 0));
        assert_eq!(take(&mut q, ms(e, 1)), vec![(1, 0)]);
        // An hour with nothing armed, then a wake-up: the cursor moves in one jump.
        let later = 3_600_000;
        assert_eq!(take(&mut q, ms(e, later)), vec![]);
        q.push(ms(e, later - 5), (2, 0)); // already past: at once
        q.push(us(e, later * 1000 + 1), (3, 0)); // the next step
                                                 // Its own step, already over: the timer fires at once.
        assert_eq!(q.next_due(), Some(ms(e, later - 5)));
        assert_eq!(take(&mut q, ms(e, later)), vec![(2, 0)]);
        assert_eq!(q.next_due(), Some(ms(e, later + 1)));
        assert_eq!(take(&mut q, ms(e, later + 1)), vec![(3, 0)]);
    }

    #[test]
    fn a_deadline_before_the_epoch_is_served_at_the_epoch() {
        let now = Instant::now();
        let e = now + Duration::from_millis(10);
        let mut q = TimerQueue::new(e, TimerStep::every(STEP), 16);
        q.push(now, (1, 0));
        assert_eq!(q.next_due(), Some(e));
        assert_eq!(take(&mut q, now), vec![]);
        assert_eq!(take(&mut q, e), vec![(1, 0)]);
    }

    #[test]
    fn without_a_step_each_deadline_is_served_at_its_own_instant() {
        let e = Instant::now();
        let mut q = TimerQueue::new(e, None, 16);
        q.push(us(e, 1500), (2, 0));
        q.push(us(e, 200), (1, 0));
        assert_eq!(q.next_due(), Some(us(e, 200)));
        assert_eq!(take(&mut q, us(e, 1499)), vec![(1, 0)]);
        assert_eq!(q.next_due(), Some(us(e, 1500)));
        assert_eq!(take(&mut q, us(e, 1500)), vec![(2, 0)]);
    }

    #[test]
    fn the_wheel_serves_exactly_what_the_coalesced_heap_serves() {
        // The specification by example: a pseudo-random mix of deadlines (near, far, past,
        // re-armed) served by the wheel at each wake-up equals a heap of coalesced
        // deadlines served at the same instants.
        let e = Instant::now();
        // A step that is not a whole number of nanoseconds (a 60 Hz period in 7 steps).
        let step = TimerStep {
            period: Duration::from_nanos(16_666_666),
            per_period: 7,
            phases: 7,
        };
        let mut wheel = TimerQueue::new(e, Some(step), 16);
        let mut heap: BinaryHeap<Reverse<(Instant, u32, u32)>> = BinaryHeap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut now = e;
        for round in 0..20_000u32 {
            for _ in 0..rnd(4) {
                let ahead = match rnd(10) {
                    0 => Duration::from_millis(rnd(10_000)),
                    1 => Duration::ZERO,
                    _ => Duration::from_micros(rnd(40_000)),
                };
                // Never before the epoch (where `coalesced` leaves a deadline as it is).
                let at = (now + ahead)
                    .checked_sub(Duration::from_micros(rnd(300)))
                    .map_or(now, |at| at.max(e));
                let entry = (rnd(50) as u32, round);
                let served = coalesced(at, e, step);
                assert_eq!(wheel.push(at, entry), served);
                heap.push(Reverse((served, entry.0, entry.1)));
            }
            now += Duration::from_micros(rnd(3_000));
            let mut want = Vec::new();
            while heap.peek().is_some_and(|r| r.0 .0 <= now) {
                let Reverse((_, t, g)) = heap.pop().unwrap_or(Reverse((now, 0, 0)));
                want.push((t, g));
            }
            want.sort();
            assert_eq!(take(&mut wheel, now), want, "round {round}");
            assert_eq!(
                wheel.next_due(),
                heap.peek().map(|r| r.0 .0),
                "round {round}"
            );
        }
    }
}
