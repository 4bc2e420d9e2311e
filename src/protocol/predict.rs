//! Client-side prediction and server reconciliation of a bot's own player, for any movement
//! rule: the protocol supplies one step of its server's movement ([`Motion`]), this module
//! keeps the rest.
//!
//! A real client moves its own player at once, as each input goes out, with the server's own
//! rule, and remembers the inputs the server has not confirmed yet with where each one led
//! (the history ring). When the server's state arrives, the client compares it with its
//! prediction, measures the distance (the *prediction error*: what a player would see
//! corrected), and when the prediction is overruled it starts again from the server's state
//! and replays the inputs still in flight (Gambetta's server reconciliation), so one
//! misprediction is counted once, not carried into every later comparison.
//!
//! [`Predictor`] is that client. Two ways to find the prediction a server state is compared
//! with:
//! - [`Predictor::reconcile`]: the server names the newest input it applied (an ack, a
//!   `last_input` field); the prediction after that input is compared, and the client
//!   rebases either always or only beyond a threshold ([`Rebase`]).
//! - [`Predictor::reconcile_nearest`]: the server names no input; the state is compared
//!   with the nearest of the predictions still in flight (and the state before them), which
//!   is taken as the point the server reached.
//!
//! Inputs are numbered by the caller (`seq`, compared with wrap-around). The numbers need not
//! be consecutive (a protocol numbering every datagram leaves gaps where its pings went): an
//! input is kept in the slot `seq % capacity`, tagged with its number, so a slot reused by a
//! newer input is never mistaken for the old one.
//!
//! ```
//! use tickswarm::protocol::prelude::predict::{Motion, Predictor, Rebase};
//!
//! /// One unit along x per input, as the server moves players.
//! struct Walk;
//! impl Motion for Walk {
//!     type Input = i8;
//!     type State = f32;
//!     fn step(&self, at: f32, input: &i8) -> f32 {
//!         at + f32::from(*input)
//!     }
//!     fn error(&self, predicted: &f32, server: &f32) -> f32 {
//!         (predicted - server).abs()
//!     }
//! }
//!
//! let mut p = Predictor::new(64);
//! p.set_present(0.0);
//! for seq in 1..=3 {
//!     p.input(&Walk, seq, 1);
//! }
//! assert_eq!(p.present(), Some(3.0));
//! // The server applied input 2 but only reached 1.5 (a wall, a lost input...).
//! let r = p.reconcile(&Walk, 2, 1.5, 4, Rebase::Above(0.01)).unwrap();
//! assert_eq!((r.error, r.corrected), (Some(0.5), true));
//! // Input 3 was replayed from the server's state.
//! assert_eq!(p.present(), Some(2.5));
//! assert_eq!(p.corrections(), 1);
//! ```

/// One step of a protocol's movement rule: what its server does to a player's state with one
/// input, and how far apart two states are.
pub trait Motion {
    /// What one input carries (keys, a direction, flags and a yaw...).
    type Input: Copy + std::fmt::Debug;
    /// The part of a player's state the rule moves (a position, or the whole mover).
    /// `Default` stands for "not known yet" where an input arrives before any state.
    type State: Copy + Default + std::fmt::Debug;
    /// The state after the server applied `input` once, from `at`.
    fn step(&self, at: Self::State, input: &Self::Input) -> Self::State;
    /// The distance between a predicted and a server state, in the protocol's unit.
    fn error(&self, predicted: &Self::State, server: &Self::State) -> f32;
}

/// When [`Predictor::reconcile`] starts again from the server's state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rebase {
    /// After every comparison: the server's state is always the better base. Nothing counts
    /// as a correction.
    Always,
    /// Only when the error is above this (or the input is no longer remembered, so there is
    /// nothing to compare with): each such rebase is a correction.
    Above(f32),
}

/// What one comparison found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reconciled {
    /// Distance between the prediction and the server's state; `None` when there was no
    /// prediction to compare with (no state known when the input went out, or the input
    /// left the history).
    pub error: Option<f32>,
    /// The server overruled the prediction: the predictor rebased on the server's state and
    /// counted a correction.
    pub corrected: bool,
}

#[derive(Debug, Clone, Copy)]
struct Entry<I, S> {
    seq: u32,
    input: I,
    /// The state predicted once the server applied this input.
    after: S,
}

/// One slot of the history ring: the input numbered `seq % capacity` last recorded there.
type Slot<M> = Option<Entry<<M as Motion>::Input, <M as Motion>::State>>;

/// `a` is after `b` in wrap-around sequence space.
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// A bot's prediction of its own player (see the module docs).
#[derive(Debug, Clone)]
pub struct Predictor<M: Motion> {
    history: Box<[Slot<M>]>,
    /// The predicted present: the state once the server applied every input sent. `None`
    /// until a state is known.
    present: Option<M::State>,
    /// The state before the oldest input in flight (what [`Self::reconcile_nearest`]
    /// compares first).
    base: M::State,
    /// Newest input recorded.
    newest: Option<u32>,
    /// Inputs up to this one are no longer in flight (confirmed, matched, or pushed out).
    settled: Option<u32>,
    /// Newest input [`Self::reconcile`] compared, so an older state (reordered) is not used.
    reconciled: Option<u32>,
    corrections: u64,
}

impl<M: Motion> Predictor<M> {
    /// A predictor remembering up to `capacity` inputs (at least one). No state is known yet.
    pub fn new(capacity: usize) -> Self {
        Self {
            history: vec![None; capacity.max(1)].into_boxed_slice(),
            present: None,
            base: M::State::default(),
            newest: None,
            settled: None,
            reconciled: None,
            corrections: 0,
        }
    }

    /// Heap bytes of the history ring (what a bot's footprint counts).
    pub fn history_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.history)
    }

    /// The predicted present, once a state is known.
    pub fn present(&self) -> Option<M::State> {
        self.present
    }

    /// The newest input recorded.
    pub fn newest(&self) -> Option<u32> {
        self.newest
    }

    /// Predictions the server overruled so far ([`Reconciled::corrected`]).
    pub fn corrections(&self) -> u64 {
        self.corrections
    }

    /// Take `state` as the present (the server announced the player there), keeping the
    /// inputs in flight as they are.
    pub fn set_present(&mut self, state: M::State) {
        self.present = Some(state);
    }

    /// Start again from `state` with nothing in flight (a new zone, a respawn).
    pub fn reset(&mut self, state: M::State) {
        self.present = Some(state);
        self.base = state;
        if self.newest.is_some() {
            self.settled = self.newest;
        }
    }

    fn slot(&self, seq: u32) -> usize {
        seq as usize % self.history.len()
    }

    fn entry(&self, seq: u32) -> Option<&Entry<M::Input, M::State>> {
        self.history[self.slot(seq)]
            .as_ref()
            .filter(|e| e.seq == seq)
    }

    fn in_flight(&self, seq: u32) -> bool {
        self.settled.is_none_or(|s| after(seq, s))
    }

    /// Input `seq` goes out: step the present by it (when a state is known) and remember it.
    /// Returns the new present and whether an input still in flight had to make room
    /// (the history is full).
    pub fn input(&mut self, motion: &M, seq: u32, input: M::Input) -> (Option<M::State>, bool) {
        let next = self.present.map(|at| motion.step(at, &input));
        if next.is_some() {
            self.present = next;
        }
        let slot = self.slot(seq);
        let overflow = match self.history[slot] {
            Some(old) if self.in_flight(old.seq) => {
                // Pushed out: the server is taken to have reached it.
                self.base = old.after;
                self.settled = Some(old.seq);
                true
            }
            _ => false,
        };
        self.history[slot] = Some(Entry {
            seq,
            input,
            // Not known yet: replayed from the first server state.
            after: next.unwrap_or_default(),
        });
        self.newest = Some(seq);
        (next, overflow)
    }

    /// The server's state after it applied input `ack`. `next_seq` is the number the next
    /// input will carry: the inputs between `ack` and it are still in flight. Compares the
    /// prediction after `ack` with `server`, rebases as `rebase` says (replaying those
    /// inputs from `server`), and settles every input up to `ack`. `None` when `ack` is not
    /// newer than the last one compared (a reordered state): nothing is done.
    pub fn reconcile(
        &mut self,
        motion: &M,
        ack: u32,
        server: M::State,
        next_seq: u32,
        rebase: Rebase,
    ) -> Option<Reconciled> {
        if self.reconciled.is_some_and(|r| !after(ack, r)) {
            return None;
        }
        self.reconciled = Some(ack);
        let predicted = self.present.and(self.entry(ack).map(|e| e.after));
        let error = predicted.map(|p| motion.error(&p, &server));
        let corrected = match rebase {
            Rebase::Always => false,
            Rebase::Above(threshold) => error.is_none_or(|e| e > threshold),
        };
        if corrected || rebase == Rebase::Always {
            // Replay what the server has not applied yet, from its state.
            let pending = next_seq.wrapping_sub(ack.wrapping_add(1));
            let from = next_seq.wrapping_sub(pending.min(self.history.len() as u32));
            self.present = Some(self.replay(motion, from, next_seq, server));
        }
        if corrected {
            self.corrections += 1;
        }
        if self.settled.is_none_or(|s| after(ack, s)) {
            self.settled = Some(ack);
        }
        Some(Reconciled { error, corrected })
    }

    /// The server's state, naming no input: compared with the state before the inputs in
    /// flight and the prediction after each (the nearest wins, ties to the newest); inputs
    /// up to the nearest are settled. Beyond `threshold` the predictor rebases on `server`
    /// and replays the rest (a correction).
    pub fn reconcile_nearest(
        &mut self,
        motion: &M,
        server: M::State,
        threshold: f32,
    ) -> Reconciled {
        let mut best = (motion.error(&self.base, &server), None);
        if let Some(newest) = self.newest.filter(|&n| self.in_flight(n)) {
            let mut seq = self.first_in_flight(newest);
            loop {
                if let Some(e) = self.entry(seq) {
                    let d = motion.error(&e.after, &server);
                    if d <= best.0 {
                        best = (d, Some((seq, e.after)));
                    }
                }
                if seq == newest {
                    break;
                }
                seq = seq.wrapping_add(1);
            }
        }
        if let Some((seq, at)) = best.1 {
            self.settled = Some(seq);
            self.base = at;
        }
        // Written so that a NaN distance (or threshold) is a correction, never exact.
        let corrected = !matches!(
            best.0.partial_cmp(&threshold),
            Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
        );
        if corrected {
            self.base = server;
            let present = match self.newest {
                Some(newest) if self.in_flight(newest) => {
                    let from = self.first_in_flight(newest);
                    self.replay(motion, from, newest.wrapping_add(1), server)
                }
                _ => server,
            };
            self.present = Some(present);
            self.corrections += 1;
        }
        Reconciled {
            error: Some(best.0),
            corrected,
        }
    }

    /// The oldest number that may hold an input in flight (`newest` must be in flight).
    fn first_in_flight(&self, newest: u32) -> u32 {
        let cap = self.history.len() as u32;
        let oldest_kept = newest.wrapping_sub(cap - 1);
        match self.settled {
            Some(s) if after(s.wrapping_add(1), oldest_kept) => s.wrapping_add(1),
            _ => oldest_kept,
        }
    }

    /// Step every remembered input numbered `from..to` from `at`, rewriting where each led.
    fn replay(&mut self, motion: &M, from: u32, to: u32, mut at: M::State) -> M::State {
        let mut seq = from;
        while seq != to {
            let slot = self.slot(seq);
            if let Some(e) = self.history[slot].as_mut() {
                if e.seq == seq {
                    at = motion.step(at, &e.input);
                    e.after = at;
                }
            }
            seq = seq.wrapping_add(1);
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One unit along x per unit of input, stopped at a wall at `wall`.
    struct Line {
        wall: f32,
    }

    impl Motion for Line {
        type Input = f32;
        type State = f32;
        fn step(&self, at: f32, input: &f32) -> f32 {
            (at + input).min(self.wall)
        }
        fn error(&self, predicted: &f32, server: &f32) -> f32 {
            (predicted - server).abs()
        }
    }

    const OPEN: Line = Line { wall: f32::MAX };

    #[test]
    fn a_server_that_agrees_is_never_a_correction_and_nothing_is_replayed() {
        let mut p = Predictor::new(8);
        p.set_present(0.0);
        for seq in 1..=4 {
            p.input(&OPEN, seq, 1.0);
        }
        let r = p.reconcile(&OPEN, 2, 2.0, 5, Rebase::Above(0.0));
        assert_eq!(
            r,
            Some(Reconciled {
                error: Some(0.0),
                corrected: false
            })
        );
        assert_eq!(p.present(), Some(4.0));
        assert_eq!(p.corrections(), 0);
    }

    #[test]
    fn a_rebase_replays_the_inputs_in_flight_with_the_servers_rule() {
        let mut p = Predictor::new(8);
        p.set_present(0.0);
        for seq in 1..=4 {
            p.input(&OPEN, seq, 1.0);
        }
        // The server knows a wall at 1.5: it stopped there after input 2.
        let wall = Line { wall: 1.5 };
        let r = p.reconcile(&wall, 2, 1.5, 5, Rebase::Above(0.0)).unwrap();
        assert_eq!((r.error, r.corrected), (Some(0.5), true));
        assert_eq!(
            p.present(),
            Some(1.5),
            "inputs 3 and 4 replayed into the wall"
        );
        // The replay rewrote the predictions: the next state agrees.
        let r = p.reconcile(&wall, 4, 1.5, 5, Rebase::Above(0.0)).unwrap();
        assert_eq!((r.error, r.corrected), (Some(0.0), false));
        assert_eq!(p.corrections(), 1);
    }

    #[test]
    fn an_older_state_is_not_compared_and_wraparound_is_newer() {
        let mut p = Predictor::new(8);
        p.set_present(0.0);
        p.input(&OPEN, u32::MAX, 1.0);
        p.input(&OPEN, 0, 1.0);
        assert!(p
            .reconcile(&OPEN, u32::MAX, 1.0, 1, Rebase::Always)
            .is_some());
        assert_eq!(
            p.reconcile(&OPEN, u32::MAX - 1, 9.0, 1, Rebase::Always),
            None
        );
        let r = p.reconcile(&OPEN, 0, 2.0, 1, Rebase::Always).unwrap();
        assert_eq!((r.error, r.corrected), (Some(0.0), false));
    }

    #[test]
    fn an_input_out_of_the_history_is_a_correction_without_an_error() {
        let mut p = Predictor::new(4);
        p.set_present(0.0);
        let mut overflows = 0;
        for seq in 1..=6 {
            overflows += usize::from(p.input(&OPEN, seq, 1.0).1);
        }
        assert_eq!(overflows, 2, "inputs 1 and 2 made room for 5 and 6");
        let r = p.reconcile(&OPEN, 1, 1.0, 7, Rebase::Above(0.5)).unwrap();
        assert_eq!((r.error, r.corrected), (None, true));
        // Replayed from 1: inputs 3..=6 are remembered (2 is gone).
        assert_eq!(p.present(), Some(5.0));
    }

    #[test]
    fn before_any_state_inputs_are_remembered_and_replayed_from_the_first() {
        let mut p = Predictor::new(8);
        assert_eq!(p.input(&OPEN, 1, 2.0), (None, false));
        p.input(&OPEN, 3, 2.0); // 2 was another message
        let r = p.reconcile(&OPEN, 0, 10.0, 4, Rebase::Always).unwrap();
        assert_eq!(r.error, None, "nothing was predicted");
        assert_eq!(p.present(), Some(14.0));
    }

    #[test]
    fn the_nearest_prediction_is_taken_as_where_the_server_is() {
        let mut p = Predictor::new(8);
        p.reset(0.0);
        for seq in 1..=4 {
            p.input(&OPEN, seq, 1.0);
        }
        // 2.0 is the prediction after input 2: exact, inputs 1 and 2 settled.
        let r = p.reconcile_nearest(&OPEN, 2.0, 0.1);
        assert_eq!((r.error, r.corrected), (Some(0.0), false));
        // The base moved to 2.0: a server still there matches it, not input 3.
        let r = p.reconcile_nearest(&OPEN, 2.0, 0.1);
        assert_eq!(r.error, Some(0.0));
        // Nearest to the base, but not at it: a correction, inputs 3 and 4 replayed from 1.
        let r = p.reconcile_nearest(&OPEN, 1.0, 0.1);
        assert_eq!((r.error, r.corrected), (Some(1.0), true));
        assert_eq!(p.present(), Some(3.0));
        // Nearest to the newest: everything settled, nothing left to replay.
        let r = p.reconcile_nearest(&OPEN, 10.0, 0.1);
        assert_eq!((r.error, r.corrected), (Some(7.0), true));
        assert_eq!(p.present(), Some(10.0));
        assert_eq!(p.corrections(), 2);
    }

    #[test]
    fn a_reset_leaves_nothing_in_flight() {
        let mut p = Predictor::new(8);
        p.reset(0.0);
        p.input(&OPEN, 1, 1.0);
        p.reset(5.0);
        let r = p.reconcile_nearest(&OPEN, 9.0, 0.1);
        assert_eq!((r.error, r.corrected), (Some(4.0), true));
        assert_eq!(p.present(), Some(9.0));
    }
}
