//! Client-side prediction of the bot's own player, reconciled against the implementation
//! dialect's `last_input` (the header seq of the newest Input the server had).
//!
//! The bot moves its player locally as each Input goes out: one server tick of movement at
//! the Input's keys (`player_speed` units a second, the world's bounds), as the server does
//! on its tick. A snapshot naming Input N carries the server's position of the player after
//! it applied N: the distance between that and the position predicted for N is the
//! prediction error (what a real client would have to correct), recorded in thousandths of a
//! world unit. The prediction then restarts from the server's position and replays the
//! Inputs sent after N (Gambetta's server reconciliation), so one misprediction is counted
//! once, not carried into every later snapshot.
//!
//! A server that applies exactly one Input per tick (inputs at the tick rate, no jitter)
//! gives 0. A tick that finds no new Input moves the player on the old keys once more, and
//! two Inputs in one tick leave one unapplied: at a change of keys, each shows as one tick of
//! movement. A server moving players at another speed shows its difference on every step.
//!
//! The history, the replay and the comparison are the shared [`Predictor`]; this module
//! gives it Cafe's movement rule ([`CafeMotion`]) and rebases on every snapshot
//! ([`Rebase::Always`]): with the server's position known exactly, it is always the better
//! base, and the implementation dialect counts no corrections.

use crate::games::cafe::server::step_position;
use crate::protocol::prelude::predict::{Motion, Predictor, Rebase};
use crate::protocol::prelude::Keys;

/// Inputs remembered for replay (at 60 Hz, about four seconds).
const HISTORY: usize = 256;

/// Cafe's movement: one server tick at an Input's keys.
#[derive(Debug, Clone, Copy)]
pub struct CafeMotion {
    /// Units one tick of movement covers on each axis.
    step: f32,
}

impl Motion for CafeMotion {
    type Input = u16;
    type State = (f32, f32);

    /// One tick of movement at `mask`'s keys: the server's own rule.
    fn step(&self, at: (f32, f32), mask: &u16) -> (f32, f32) {
        step_position(at, Keys((mask & 0x1f) as u8), self.step)
    }

    fn error(&self, p: &(f32, f32), s: &(f32, f32)) -> f32 {
        ((p.0 - s.0).powi(2) + (p.1 - s.1).powi(2)).sqrt()
    }
}

#[derive(Debug, Clone)]
pub struct Prediction {
    motion: CafeMotion,
    /// Inputs by header seq; the position unknown until the first snapshot shows the player.
    predictor: Predictor<CafeMotion>,
}

impl Prediction {
    /// `speed` in world units per second, at `tick_rate` ticks per second.
    pub fn new(speed: f32, tick_rate: u16) -> Self {
        Self {
            motion: CafeMotion {
                step: speed / f32::from(tick_rate.max(1)),
            },
            predictor: Predictor::new(HISTORY),
        }
    }

    /// Input `seq` with `mask` goes out: predict its effect.
    pub fn on_input(&mut self, seq: u32, mask: u16) {
        self.predictor.input(&self.motion, seq, mask);
    }

    /// The server's position of the player after it applied Input `last_input`, with the
    /// newest seq sent so far (`next_seq` is the seq the next Input will carry). Returns the
    /// prediction error in world units, when Input `last_input` had a prediction.
    pub fn reconcile(&mut self, last_input: u32, server: (f32, f32), next_seq: u32) -> Option<f32> {
        self.predictor
            .reconcile(&self.motion, last_input, server, next_seq, Rebase::Always)
            .and_then(|r| r.error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RIGHT: u16 = Keys::RIGHT as u16;

    #[test]
    fn a_server_applying_one_input_a_tick_gives_no_error() {
        // 240 units/s at 60 Hz: 4 units a tick.
        let mut p = Prediction::new(240.0, 60);
        assert_eq!(p.reconcile(0, (100.0, 100.0), 1), None, "no prediction yet");
        for seq in 1..=5 {
            p.on_input(seq, RIGHT);
        }
        // The server applied 1..=3: x = 112.
        assert_eq!(p.reconcile(3, (112.0, 100.0), 6), Some(0.0));
        // And 4, 5 are replayed from there: the next snapshot finds them right too.
        assert_eq!(p.reconcile(5, (120.0, 100.0), 6), Some(0.0));
    }

    #[test]
    fn a_tick_without_a_new_input_shows_as_one_step_once() {
        let mut p = Prediction::new(240.0, 60);
        p.reconcile(0, (100.0, 100.0), 1);
        p.on_input(1, RIGHT);
        p.on_input(2, RIGHT);
        // The server moved three ticks on inputs 1 and 2 (2 repeated once): 4 units ahead.
        assert_eq!(p.reconcile(2, (112.0, 100.0), 3), Some(4.0));
        // Rebased: the next input is predicted from the server's position.
        p.on_input(3, RIGHT);
        assert_eq!(p.reconcile(3, (116.0, 100.0), 4), Some(0.0));
    }

    #[test]
    fn an_older_snapshot_is_not_reconciled_again() {
        let mut p = Prediction::new(240.0, 60);
        p.reconcile(4, (0.0, 0.0), 5);
        p.on_input(5, RIGHT);
        assert_eq!(p.reconcile(3, (50.0, 0.0), 6), None);
        assert_eq!(p.reconcile(5, (4.0, 0.0), 6), Some(0.0));
    }

    #[test]
    fn the_world_edge_stops_the_prediction_as_it_stops_the_server() {
        let mut p = Prediction::new(240.0, 60);
        let edge = crate::games::cafe::server::WORLD_W;
        p.reconcile(0, (edge - 2.0, 10.0), 1);
        p.on_input(1, RIGHT);
        assert_eq!(p.reconcile(1, (edge, 10.0), 2), Some(0.0));
    }
}
