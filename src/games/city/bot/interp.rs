//! Interpolation of the remote entities: the last samples of each, rendered
//! `interpolation_delay_ms` behind the newest server tick (see the bot's module docs).

use super::*;

#[derive(Debug, Clone)]
pub(super) struct Remote {
    pub(super) samples: [(u32, Vec2f); INTERP_SAMPLES],
    pub(super) len: usize,
    /// Index of the newest sample.
    pub(super) head: usize,
    pub(super) velocity: Vec2f,
    pub(super) in_gap: bool,
    pub(super) rendered: Vec2f,
}

impl Remote {
    pub(super) fn new(tick: u32, pos: Vec2f, velocity: Vec2f) -> Self {
        let mut r = Self {
            samples: [(0, Vec2f::ZERO); INTERP_SAMPLES],
            len: 0,
            head: 0,
            velocity,
            in_gap: false,
            rendered: pos,
        };
        r.push(tick, pos);
        r
    }

    pub(super) fn newest(&self) -> (u32, Vec2f) {
        self.samples[self.head]
    }

    pub(super) fn push(&mut self, tick: u32, pos: Vec2f) {
        if self.len > 0 {
            let (t, _) = self.newest();
            if tick < t {
                return;
            }
            if tick == t {
                self.samples[self.head] = (tick, pos);
                return;
            }
        }
        self.head = (self.head + 1) % INTERP_SAMPLES;
        self.samples[self.head] = (tick, pos);
        self.len = (self.len + 1).min(INTERP_SAMPLES);
    }

    /// Position at `render_tick` (fractional), interpolated between the samples around it;
    /// the oldest or newest sample when outside them.
    pub(super) fn interpolate(&self, render_tick: f64) -> Vec2f {
        let mut newer = self.newest();
        if render_tick >= f64::from(newer.0) {
            return newer.1;
        }
        for k in 1..self.len {
            let older = self.samples[(self.head + INTERP_SAMPLES - k) % INTERP_SAMPLES];
            if f64::from(older.0) <= render_tick {
                let span = f64::from(newer.0 - older.0).max(1.0);
                let f = ((render_tick - f64::from(older.0)) / span) as f32;
                return Vec2f {
                    x: older.1.x + (newer.1.x - older.1.x) * f,
                    y: older.1.y + (newer.1.y - older.1.y) * f,
                };
            }
            newer = older;
        }
        newer.1
    }
}

impl CityBot {
    /// Draw the remote entities `interpolation_delay_ms` behind the newest server tick.
    pub(super) fn render_frame(&mut self, now: Instant, rec: &mut Recorder) {
        let Some((tick, at)) = self.newest_tick else {
            return;
        };
        let since = now.saturating_duration_since(at).as_secs_f64();
        let delay = self.opts.interpolation_delay_ms as f64 / 1000.0;
        let dt = f64::from(TICK_INTERVAL);
        let render_tick = f64::from(tick) + (since - delay) / dt;
        for r in self.remotes.values_mut() {
            let newest = r.newest();
            let moving = r.velocity != Vec2f::ZERO;
            if render_tick > f64::from(newest.0) && moving {
                if !r.in_gap {
                    r.in_gap = true;
                    rec.event("extrapolation_gaps");
                }
            } else {
                r.in_gap = false;
            }
            r.rendered = r.interpolate(render_tick);
        }
    }
}
