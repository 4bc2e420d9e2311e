//! Inputs and the prediction of the bot's own entity (see the bot's module docs): the spec
//! dialect on the shared [`shared::Predictor`] with City's [`step`], the implementation
//! dialect on the variant's mover ([`super::super::predict`]).

use super::*;

/// City's movement (spec dialect): one PlayerInput is one tick of [`step`] at the entity's
/// speed, within the map's bounds (as known when it is stepped).
#[derive(Debug, Clone, Copy)]
pub(super) struct CityMotion {
    pub(super) speed: f32,
    pub(super) bounds: Option<(f32, f32)>,
}

/// One axis of a PlayerInput's movement as the prediction history keeps it: -1, 0 or 1,
/// which is all a bot sends ([`Keys::axis`](crate::protocol::pattern::Keys::axis)). An
/// enum rather than an `i8` so that the history's empty slots (`Option`) need no tag of
/// their own: a slot is 16 bytes instead of 20, 512 bytes less per bot over its 128 inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub(super) enum Axis {
    Neg = -1,
    Zero = 0,
    Pos = 1,
}

impl Axis {
    /// The axis of `v` (its sign: a bot's inputs are -1, 0 or 1 already).
    pub(super) fn of(v: i8) -> Self {
        debug_assert!(
            (-1..=1).contains(&v),
            "a movement axis is -1, 0 or 1, not {v}"
        );
        match v.signum() {
            -1 => Axis::Neg,
            0 => Axis::Zero,
            _ => Axis::Pos,
        }
    }
}

impl Motion for CityMotion {
    /// `(move_x, move_y)`.
    type Input = (Axis, Axis);
    type State = Vec2f;

    fn step(&self, at: Vec2f, &(x, y): &(Axis, Axis)) -> Vec2f {
        step(at, x as i8, y as i8, self.speed, self.bounds)
    }

    fn error(&self, predicted: &Vec2f, server: &Vec2f) -> f32 {
        predicted.distance(*server)
    }
}

impl CityBot {
    /// Implementation dialect: compare the server's record of the bot's own mover with the
    /// prediction for its tick ([`Predictor::on_record`]): timing slips and refused moves are
    /// counted on their own, anything else unexplained is a correction.
    pub(super) fn reconcile_grid(
        &mut self,
        now: Instant,
        tick: u32,
        u: &EntityUpdate,
        rec: &mut Recorder,
    ) {
        let threshold = self.opts.prediction_error_threshold;
        let (Some(pred), Some(server)) = (&mut self.grid_pred, Mover::from_record(u)) else {
            // No grid fields: nothing to predict against; take the server's word.
            if let Some(o) = &mut self.own {
                o.pos = u.position;
            }
            return;
        };
        let out = pred.on_record(now, tick, server, threshold);
        if let Some(err) = out.error {
            rec.record_extra("prediction_error", (f64::from(err) * 1000.0).round() as u64);
        }
        if out.refusal_started {
            rec.event("move_refused");
        }
        match out.verdict {
            Verdict::Corrected => {
                self.corrections += 1;
                rec.event("corrections");
            }
            Verdict::Timing => rec.event("prediction_timing_slips"),
            Verdict::First | Verdict::Stale | Verdict::Exact | Verdict::Refused => {}
        }
        let pos = pred.present().pos;
        if let Some(o) = &mut self.own {
            o.pos = pos;
        }
    }

    /// Compare the prediction after input `ack` with the server's position; snap and replay
    /// beyond the threshold.
    pub(super) fn reconcile(&mut self, ack: u32, server_pos: Vec2f, rec: &mut Recorder) {
        let Some(own) = self.own else { return };
        if ack < self.first_input_tick {
            // The server has applied none of this session's inputs yet.
            return;
        }
        if self.inputs.newest().is_none_or(|l| ack > l) {
            rec.event("ack_ahead_of_inputs");
            return;
        }
        let motion = CityMotion {
            speed: own.speed,
            bounds: self.bounds,
        };
        let threshold = Rebase::Above(self.opts.prediction_error_threshold);
        // Inputs are numbered by tick, `next_input_tick` the next one's: the inputs after
        // `ack` are replayed on a correction. An ack not newer than the last compared is
        // ignored.
        let Some(r) =
            self.inputs
                .reconcile(&motion, ack, server_pos, self.next_input_tick, threshold)
        else {
            return;
        };
        match r.error {
            Some(err) => {
                rec.record_extra("prediction_error", (f64::from(err) * 1000.0).round() as u64)
            }
            // Older than the buffer holds: nothing to compare with, so resync.
            None => rec.event("ack_outside_buffer"),
        }
        if r.corrected {
            self.corrections += 1;
            rec.event("corrections");
            if let (Some(o), Some(p)) = (&mut self.own, self.inputs.present()) {
                o.pos = p;
            }
        }
    }

    pub(super) fn on_input_ack(&mut self, now: Instant, tick: u32, rec: &mut Recorder) {
        if self.newest_input_ack.is_none_or(|a| tick > a) {
            self.newest_input_ack = Some(tick);
        }
        self.acks.ack(tick, now, rec);
    }

    /// City sends one input per grid slot: each PlayerInput is one tick of movement, so
    /// `input_on_change` does not apply, and a rate of 0 falls back to the tick rate.
    pub(super) fn input_period(params: &BotParams) -> Duration {
        params
            .input_period()
            .unwrap_or(Duration::from_secs(1) / codec::TICK_RATE)
    }

    pub(super) fn send_inputs_due(&mut self, now: Instant, rec: &mut Recorder) {
        let Some(due) = self.grid.take_due(now, rec) else {
            return;
        };
        rec.record_lateness(now.saturating_duration_since(due).as_micros() as u64);
        let Some(own) = self.own else { return };
        let elapsed = now.saturating_duration_since(self.play_started.unwrap_or(now));
        let keys = self
            .pattern
            .sample(&self.params.pattern, elapsed, &mut self.rng);
        let (ax, ay) = keys.axis();
        let (move_x, move_y) = (ax as i8, ay as i8);
        let tick = self.next_input_tick;
        self.next_input_tick = tick.wrapping_add(1);
        let predicting = self.dialect() == Dialect::Spec;
        let pos = if predicting {
            let motion = CityMotion {
                speed: own.speed,
                bounds: self.bounds,
            };
            // From the position the bot holds (the server's word at a spawn, or the last
            // prediction).
            self.inputs.set_present(own.pos);
            let (pos, overflow) =
                self.inputs
                    .input(&motion, tick, (Axis::of(move_x), Axis::of(move_y)));
            if overflow {
                rec.event("input_buffer_overflow");
            }
            pos.unwrap_or(own.pos)
        } else {
            match &mut self.grid_pred {
                Some(p) => {
                    p.input_sent(
                        now,
                        Vec2i {
                            x: i32::from(move_x),
                            y: i32::from(move_y),
                        },
                    );
                    p.present().pos
                }
                None => own.pos,
            }
        };
        if let Some(o) = &mut self.own {
            o.pos = pos;
        }
        // Interact with the tile ahead (adjacent, so the server's validation accepts it).
        let tile = Vec2i {
            x: pos.x.floor() as i32 + i32::from(move_x),
            y: pos.y.floor() as i32 + i32::from(move_y),
        };
        let input = PlayerInput {
            tick,
            last_received_tick: self.newest_tick.map(|(t, _)| t).unwrap_or(0),
            move_x,
            move_y,
            buttons: if keys.shoot() { BUTTON_INTERACT } else { 0 },
            target_tile: tile,
        };
        self.out.push_back(Out::Input(input));
        if predicting {
            // The implementation's server sends no InputAck: upstream loss is not measurable.
            self.acks.sent(tick, now);
        }
        rec.inputs_sent += 1;
        self.render_frame(now, rec);
    }

    /// Count inputs whose ack had its time: expected one each, received when acked.
    pub(super) fn age_acks(&mut self, now: Instant, rec: &mut Recorder) {
        self.acks.age(now, rec);
    }
}
