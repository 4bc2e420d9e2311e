//! The bot's own entity: inputs (valid or invalid on purpose) and their prediction,
//! reconciled with each snapshot on the shared [`Predictor`].

use super::*;

/// DarkAges' movement: one INPUT's flags and yaw through the server's [`step`], in a zone
/// `half` metres from centre to edge.
#[derive(Debug, Clone, Copy)]
pub(super) struct DarkAgesMotion {
    pub(super) half: f32,
}

impl Motion for DarkAgesMotion {
    type Input = (u8, f32);
    type State = [f32; 3];

    fn step(&self, at: [f32; 3], &(flags, yaw): &(u8, f32)) -> [f32; 3] {
        step(at, flags, yaw, self.half)
    }

    fn error(&self, a: &[f32; 3], b: &[f32; 3]) -> f32 {
        dist(*a, *b)
    }
}

/// Own-entity prediction: a known position, then the position after each input in flight,
/// matched by nearest ([`Predictor::reconcile_nearest`]: snapshots name no input).
#[derive(Debug, Clone)]
pub(super) struct Prediction {
    pub(super) predictor: Predictor<DarkAgesMotion>,
    /// The number the next predicted input is kept under (invalid inputs are left out, so
    /// not the wire's sequence).
    pub(super) next: u32,
}

impl Prediction {
    pub(super) fn new() -> Self {
        let mut predictor = Predictor::new(PREDICTION_HISTORY);
        predictor.reset([0.0; 3]);
        Self { predictor, next: 0 }
    }

    pub(super) fn current(&self) -> [f32; 3] {
        self.predictor.present().unwrap_or_default()
    }

    pub(super) fn reset(&mut self, p: [f32; 3]) {
        self.predictor.reset(p);
    }

    pub(super) fn push(&mut self, flags: u8, yaw: f32, half: f32) {
        self.predictor
            .input(&DarkAgesMotion { half }, self.next, (flags, yaw));
        self.next = self.next.wrapping_add(1);
    }

    /// Match the server's position against the predictions; drop what it has caught up
    /// with; snap and replay beyond `threshold`. `(error in metres, corrected)`.
    pub(super) fn reconcile(&mut self, server: [f32; 3], threshold: f32, half: f32) -> (f32, bool) {
        let r = self
            .predictor
            .reconcile_nearest(&DarkAgesMotion { half }, server, threshold);
        (r.error.unwrap_or_default(), r.corrected)
    }
}

pub(super) fn dist(a: [f32; 3], b: [f32; 3]) -> f32 {
    let (x, y, z) = (a[0] - b[0], a[1] - b[1], a[2] - b[2]);
    (x * x + y * y + z * z).sqrt()
}

impl DarkAgesBot {
    pub(super) fn reconcile(&mut self, now: Instant, rec: &mut Recorder) {
        let Some(id) = self.entity else {
            return;
        };
        let world = self.baselines.current();
        let Ok(i) = world.binary_search_by_key(&id, |e| e.id) else {
            return;
        };
        let q = world[i].pos;
        let p = [
            codec::dequantize_pos(q[0]),
            codec::dequantize_pos(q[1]),
            codec::dequantize_pos(q[2]),
        ];
        if !self.anchored {
            self.pred.reset(p);
            self.anchored = true;
            if self.heading.is_none() {
                // Face the nearer border along x, where the neighbouring zones lie.
                self.heading = Some(if p[0] >= 0.0 {
                    0.0
                } else {
                    std::f32::consts::PI
                });
                if self.opts.turn_every_ms > 0 {
                    self.turn_timer
                        .start_at(now + Duration::from_millis(self.opts.turn_every_ms));
                }
            }
            return;
        }
        let (err, corrected) = self.pred.reconcile(
            p,
            self.opts.prediction_error_threshold_m,
            self.opts.zone_half(),
        );
        rec.record_extra("prediction_error", (err * 1000.0).round() as u64);
        if corrected {
            rec.event("corrections");
            if let Some((kind, _)) = self.verdict.take() {
                rec.events.add2("invalid_input_applied", kind, 1);
                rec.event("invalid_input_applied");
            }
        }
    }

    pub(super) fn send_input_if_due(&mut self, now: Instant, rec: &mut Recorder) {
        let between_zones = self.handoff.is_some();
        let Some(keys) = self.session.keys_due(
            &mut self.keys,
            between_zones,
            now,
            &self.params,
            &mut self.rng,
            rec,
        ) else {
            return;
        };
        let mut flags = keys_to_flags(keys);
        if !self.anchored {
            flags &= !MOVE_FLAGS;
        }
        if self.opts.turn_every_ms > 0 && self.turn_timer.fire(now) {
            self.heading = self.heading.map(|h| {
                let t = h + std::f32::consts::PI;
                if t > std::f32::consts::PI {
                    t - 2.0 * std::f32::consts::PI
                } else {
                    t
                }
            });
        }
        let yaw = self.heading.unwrap_or(0.0);
        let ack = match self.opts.dialect {
            Dialect::Spec => Some(self.ack),
            Dialect::StructAsPrinted | Dialect::Implementation => None,
        };
        let timestamp = self.session.ms(now);
        let mut inp = codec::Input {
            sequence: 0,
            timestamp,
            flags,
            yaw,
            pitch: 0.0,
            target_entity: 0,
            last_received_tick: ack,
        };
        let break_one = self.misbehaves
            && self.anchored
            && self.verdict.is_none()
            && self.invalid_timer.fire(now);
        if break_one {
            let kind = INVALID_KINDS[self.invalid_next % INVALID_KINDS.len()];
            self.invalid_next += 1;
            match kind {
                "yaw_out_of_range" => {
                    self.seq += 1;
                    inp.sequence = self.seq;
                    inp.flags = input::FORWARD;
                    inp.yaw = 4.0;
                }
                "conflicting_flags" => {
                    self.seq += 1;
                    inp.sequence = self.seq;
                    inp.flags = input::FORWARD | input::BACKWARD | input::RIGHT;
                }
                _ => {
                    inp.sequence = self.seq.saturating_sub(2).max(1);
                    inp.flags = input::RIGHT | input::SPRINT;
                }
            }
            rec.events.add2("invalid_input_sent", kind, 1);
            rec.event("invalid_input_sent");
            self.verdict = Some((kind, now + VERDICT_WINDOW));
        } else {
            self.seq += 1;
            inp.sequence = self.seq;
            self.pred.push(flags, yaw, self.opts.zone_half());
        }
        rec.inputs_sent += 1;
        self.out.push_back(Out::Input(inp));
    }
}
