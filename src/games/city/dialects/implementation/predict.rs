//! The implementation dialect's movement and the bot's prediction of it.
//!
//! # The variant's mover ([`Mover`])
//! The public server moves players on a grid, in `f32`, once per 60 Hz fixed-step tick:
//! - A player stands on a tile centre (`grid + 0.5`) or moves toward the centre of its
//!   `target` tile at `1 / 0.15` tiles per second *of distance* (a diagonal is √2 tiles, about
//!   0.21 s), its velocity along that direction. Within one tick's step of the centre it snaps
//!   there: velocity 0, `grid = target`, standing.
//! - The tick's latest input (held until the next arrives) is the `input` direction. After the
//!   move under way advanced, a standing player with a nonzero input starts a move from
//!   `floor(position)` by the input, onto the target tile only if that tile is passable; the
//!   start tick sets the velocity but does not advance the position.
//! - A refused start leaves the player standing with its nonzero input: a DeltaState record
//!   with `is_moving = 0` and a nonzero `input_direction` is exactly a refused move.
//!
//! Every piece of that state is in the DeltaState record (`pos, vel, is_moving, grid_pos,
//! move_target, input_direction`), so a record *is* the server's mover, and [`Mover::tick`]
//! reproduces the server's next one bit for bit given the input it held.
//!
//! # Prediction without acks ([`Predictor`])
//! The bot cannot know which server tick an input lands in: it sends at its own rate, the
//! server ticks on its own clock (with catch-up bursts), and the variant sends no acks. The
//! predictor keeps the server's newest record as its base and a log of the inputs sent since,
//! and maps each input to a tick with a *lag*: an input sent at `s` is taken to be applied at
//! the first tick whose (estimated) arrival is at least `s + lag` after the stream's tick
//! clock. The lag is measured from the server's own `input_direction`: when it turns to a new
//! direction at tick `T`, the input that started that direction arrived between ticks `T - 1`
//! and `T`, which brackets the lag; the predictor takes the bracket's middle.
//!
//! Each record is compared with the prediction for its tick (`prediction_error`, once per
//! record). When they differ, the record's own fields are asked for an explanation before
//! anything counts as an error:
//! - **Timing**: the server held a different one of the bot's inputs at that tick than the
//!   lag guessed (an input landing just before or after a tick boundary). With consecutive
//!   records the record's `input_direction` *is* the input the server applied, so the
//!   prediction is redone with it; across a gap, lags one to three ticks either side are
//!   tried. If that reproduces the record, it is a timing slip (`prediction_timing_slips`),
//!   the error recorded is the explained prediction's, and nothing is corrected.
//! - **Refused move**: a standing record with a nonzero input was refused by an impassable
//!   tile the bot cannot know (the map is not sent). The tile is learnt (so the prediction
//!   stops walking into it) and the refusal is counted on its own (`move_refused`, once per
//!   refusal: the same refusal held over consecutive ticks counts once).
//! - Anything else (a server-side move, a lost input, a model error) is a **correction**: the
//!   prediction is overruled.
//!
//! Whatever the outcome, the record becomes the new base: the prediction restarts from the
//! server's exact state, and the inputs in flight are replayed from it.
//!
//! This is not the shared predictor (`protocol::predict`) that Cafe, City's spec dialect and
//! DarkAges use: that one matches a server state with an input by an ack or by nearest
//! position, and replays inputs one step each. Here no input is named, inputs map to server
//! ticks by a measured lag (a tick may hold an input for several steps, or skip one), a
//! record is explained by timing or a refusal before it counts, and walls are learnt: the
//! semantics differ, so the variant keeps its own.

use std::collections::{HashSet, VecDeque};
use std::time::Instant;

use crate::games::city::codec::{EntityUpdate, Vec2f, Vec2i};

/// Seconds to move one tile (the variant's `MOVE_DURATION`).
pub const MOVE_DURATION: f32 = 0.15;
/// The variant's fixed tick rate.
pub const TICK_HZ: u32 = 60;
/// The variant's fixed step, `1 / 60` in `f32` as the server computes it.
pub const TICK_DT: f32 = 1.0 / 60.0;
/// Inputs remembered at most (at 60 Hz, four seconds).
const INPUT_LOG: usize = 256;
/// Inputs are kept at least this long after they were sent, whatever the lag says: the lag
/// is measured from them (a round trip up to this long).
const INPUT_KEEP_S: f64 = 1.0;
/// Impassable tiles remembered; past that the oldest learnt is forgotten.
const MAX_WALLS: usize = 4096;
/// Ticks a prediction replays at most (beyond, the base is too old to replay from).
const MAX_REPLAY: i64 = 600;
/// Lag shifts tried, in ticks, to explain a record across a gap.
const LAG_SHIFTS: [f64; 6] = [1.0, -1.0, 2.0, -2.0, 3.0, -3.0];

/// What starting a move did this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// No move was started (moving, or no input).
    None,
    Started,
    /// The target tile is impassable.
    Refused(Vec2i),
}

/// The variant's per-player mover, as its server ticks it (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Mover {
    pub pos: Vec2f,
    pub vel: Vec2f,
    pub moving: bool,
    pub grid: Vec2i,
    pub target: Vec2i,
    /// The input held (the latest applied).
    pub input: Vec2i,
}

/// The centre of a tile, as the server computes it.
pub fn centre(t: Vec2i) -> Vec2f {
    Vec2f::new(t.x as f32 + 0.5, t.y as f32 + 0.5)
}

/// The tile a position is on (`floor`).
pub fn tile_of(p: Vec2f) -> Vec2i {
    Vec2i {
        x: p.x.floor() as i32,
        y: p.y.floor() as i32,
    }
}

impl Mover {
    /// Standing on `tile`'s centre.
    pub fn standing(tile: Vec2i) -> Self {
        Self {
            pos: centre(tile),
            grid: tile,
            target: tile,
            ..Self::default()
        }
    }

    /// The mover a DeltaState record describes (`None` without the grid fields).
    pub fn from_record(u: &EntityUpdate) -> Option<Self> {
        let g = u.grid?;
        Some(Self {
            pos: u.position,
            vel: u.velocity,
            moving: g.is_moving,
            grid: g.grid_pos,
            target: g.move_target,
            input: g.input_direction,
        })
    }

    /// The record shows a refused move: standing with a nonzero input (the server tried to
    /// start a move this tick and the target tile was impassable). `(tile, direction)`.
    pub fn refusal(&self) -> Option<(Vec2i, Vec2i)> {
        (!self.moving && self.input != Vec2i::default()).then_some((self.grid, self.input))
    }

    /// One server tick of `dt` seconds with the input already held in `self.input`.
    pub fn tick(&mut self, dt: f32, passable: impl Fn(Vec2i) -> bool) -> Start {
        let speed = 1.0f32 / MOVE_DURATION;
        if self.moving {
            let tp = centre(self.target);
            let (tx, ty) = (tp.x - self.pos.x, tp.y - self.pos.y);
            let dist = (tx * tx + ty * ty).sqrt();
            if dist <= speed * dt || dist < 0.001 {
                self.pos = tp;
                self.vel = Vec2f::ZERO;
                self.grid = self.target;
                self.moving = false;
            } else {
                self.vel = Vec2f::new((tx / dist) * speed, (ty / dist) * speed);
                self.pos.x += self.vel.x * dt;
                self.pos.y += self.vel.y * dt;
            }
        }
        if self.moving || self.input == Vec2i::default() {
            return Start::None;
        }
        self.grid = tile_of(self.pos);
        let target = Vec2i {
            x: self.grid.x.saturating_add(self.input.x),
            y: self.grid.y.saturating_add(self.input.y),
        };
        if !passable(target) {
            return Start::Refused(target);
        }
        self.target = target;
        self.moving = true;
        let tp = centre(target);
        let (tx, ty) = (tp.x - self.pos.x, tp.y - self.pos.y);
        let dist = (tx * tx + ty * ty).sqrt();
        if dist > 0.001 {
            self.vel = Vec2f::new((tx / dist) * speed, (ty / dist) * speed);
        }
        Start::Started
    }

    /// Same mover state within `threshold` tiles of position (the input held is not part
    /// of it: it shows only in what the mover does next).
    fn agrees(&self, o: &Mover, threshold: f32) -> bool {
        self.moving == o.moving
            && self.grid == o.grid
            && self.target == o.target
            && self.pos.distance(o.pos) <= threshold
    }
}

/// How one record compared with the prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The first record: nothing to compare with yet.
    First,
    /// A record older than the base (reordered): ignored.
    Stale,
    /// The prediction held.
    Exact,
    /// The server applied the bot's inputs a tick (or a few) earlier or later than guessed.
    Timing,
    /// The server refused a move onto a tile the bot did not know was impassable.
    Refused,
    /// Nothing the record shows explains it: the prediction was overruled.
    Corrected,
}

/// The outcome of [`Predictor::on_record`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    pub verdict: Verdict,
    /// Distance in tiles between the (explained) prediction and the record.
    pub error: Option<f32>,
    /// The record starts a refusal (not the same refusal as the record before).
    pub refusal_started: bool,
}

/// The bot's prediction of its own mover (see the module docs).
#[derive(Debug, Clone)]
pub struct Predictor {
    origin: Instant,
    base: Mover,
    base_tick: Option<u32>,
    /// Inputs sent, oldest first: (seconds since `origin`, direction).
    inputs: VecDeque<(f64, Vec2i)>,
    /// Seconds since `origin` at which tick 0 would have arrived: the earliest
    /// `arrival - tick × interval` seen (the least delayed record). A delay that grows later
    /// (a server falling behind and dropping time) shows in the lag, which is measured
    /// against it.
    epoch: Option<f64>,
    /// Input send time to applying tick, seconds (see the module docs).
    lag: f64,
    walls: HashSet<(i32, i32)>,
    walls_order: VecDeque<(i32, i32)>,
    /// The refusal the newest record showed.
    refusing: Option<(Vec2i, Vec2i)>,
}

impl Predictor {
    /// A player standing at its spawn position, as of `now`.
    pub fn new(now: Instant, spawn: Vec2f) -> Self {
        Self {
            origin: now,
            base: Mover::standing(tile_of(spawn)),
            base_tick: None,
            // Grows to what a session keeps (about a second of inputs against a server that
            // sends records; the whole log against one that does not), not 4 KiB up front.
            inputs: VecDeque::new(),
            epoch: None,
            lag: 0.0,
            walls: HashSet::new(),
            walls_order: VecDeque::new(),
            refusing: None,
        }
    }

    fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.origin).as_secs_f64()
    }

    fn interval() -> f64 {
        1.0 / f64::from(TICK_HZ)
    }

    /// Heap bytes of the input log and the learnt walls (a bot's footprint).
    pub fn reserved_heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.inputs.capacity() * size_of::<(f64, Vec2i)>()
            + self.walls.capacity() * size_of::<(i32, i32)>()
            + self.walls_order.capacity() * size_of::<(i32, i32)>()
    }

    /// The lag in use, seconds.
    pub fn lag(&self) -> f64 {
        self.lag
    }

    /// Impassable tiles learnt from refusals.
    pub fn walls_known(&self) -> usize {
        self.walls.len()
    }

    /// The server's newest record (or the spawn).
    pub fn base(&self) -> Mover {
        self.base
    }

    /// The tick an input sent at `s` is applied at, with `lag`.
    fn tick_of(&self, s: f64, lag: f64) -> i64 {
        let epoch = self.epoch.unwrap_or(0.0);
        ((s + lag - epoch) / Self::interval()).ceil() as i64
    }

    /// An input was sent.
    pub fn input_sent(&mut self, now: Instant, dir: Vec2i) {
        if self.inputs.len() == INPUT_LOG {
            self.inputs.pop_front();
        }
        let s = self.secs(now);
        self.inputs.push_back((s, dir));
    }

    /// The mover at tick `to`, from the base, with the inputs mapped to ticks by `lag`.
    fn predict(&self, to: i64, lag: f64, start_input: Vec2i) -> Mover {
        let mut m = self.base;
        let Some(bt) = self.base_tick.map(i64::from) else {
            return m;
        };
        let to = to.min(bt + MAX_REPLAY);
        let passable = |t: Vec2i| !self.walls.contains(&(t.x, t.y));
        let mut k = 0;
        for t in bt + 1..=to {
            while let Some(&(s, d)) = self.inputs.get(k) {
                let at = self.tick_of(s, lag);
                if at > t {
                    break;
                }
                if at > bt {
                    m.input = d;
                }
                k += 1;
            }
            if t == bt + 1 && start_input != NO_OVERRIDE {
                m.input = start_input;
            }
            m.tick(TICK_DT, passable);
        }
        m
    }

    /// The predicted present: the mover once the server has applied every input sent.
    pub fn present(&self) -> Mover {
        let Some(bt) = self.base_tick.map(i64::from) else {
            return self.base;
        };
        let to = self
            .inputs
            .back()
            .map_or(bt, |&(s, _)| self.tick_of(s, self.lag).max(bt));
        self.predict(to, self.lag, NO_OVERRIDE)
    }

    fn learn_wall(&mut self, t: Vec2i) {
        if self.walls.insert((t.x, t.y)) {
            self.walls_order.push_back((t.x, t.y));
            if self.walls_order.len() > MAX_WALLS {
                if let Some(old) = self.walls_order.pop_front() {
                    self.walls.remove(&old);
                }
            }
        }
    }

    /// The bot sent `dir` recently (or the server held it at the base).
    fn sent(&self, dir: Vec2i) -> bool {
        self.base.input == dir || self.inputs.iter().any(|&(_, d)| d == dir)
    }

    /// The server's record `s` of the bot's own mover at `tick`, arrived at `now`.
    pub fn on_record(&mut self, now: Instant, tick: u32, s: Mover, threshold: f32) -> Outcome {
        let at = self.secs(now);
        let e = at - f64::from(tick) * Self::interval();
        self.epoch = Some(self.epoch.map_or(e, |old| old.min(e)));
        let refusal = s.refusal();
        let refusal_started = refusal.is_some() && refusal != self.refusing;
        let Some(bt) = self.base_tick else {
            self.adopt(tick, s, refusal);
            return Outcome {
                verdict: Verdict::First,
                error: None,
                refusal_started,
            };
        };
        if tick <= bt && bt - tick > MAX_REPLAY as u32 {
            // Far behind the base: the server restarted its tick count. Start again from it.
            self.adopt(tick, s, refusal);
            return Outcome {
                verdict: Verdict::First,
                error: None,
                refusal_started,
            };
        }
        if tick <= bt {
            return Outcome {
                verdict: Verdict::Stale,
                error: None,
                refusal_started: false,
            };
        }
        let consecutive = tick == bt.wrapping_add(1);
        let t = i64::from(tick);
        let p = self.predict(t, self.lag, NO_OVERRIDE);
        let (verdict, error) = if p.agrees(&s, threshold) {
            (Verdict::Exact, p.pos.distance(s.pos))
        } else if let Some(q) = self.explain_timing(t, consecutive, &s, threshold) {
            (Verdict::Timing, q.pos.distance(s.pos))
        } else if let Some((tile, dir)) = refusal {
            // The server tried to start a move onto an impassable tile: learn it and see
            // whether that (with the input the server held) is the whole difference.
            self.learn_wall(Vec2i {
                x: tile.x.saturating_add(dir.x),
                y: tile.y.saturating_add(dir.y),
            });
            let q = if consecutive {
                self.predict(t, self.lag, s.input)
            } else {
                self.predict(t, self.lag, NO_OVERRIDE)
            };
            if q.agrees(&s, threshold) {
                (Verdict::Refused, q.pos.distance(s.pos))
            } else {
                (Verdict::Corrected, p.pos.distance(s.pos))
            }
        } else {
            (Verdict::Corrected, p.pos.distance(s.pos))
        };
        if consecutive && s.input != self.base.input {
            self.measure_lag(t, s.input);
        }
        self.adopt(tick, s, refusal);
        Outcome {
            verdict,
            error: Some(error),
            refusal_started,
        }
    }

    /// The prediction redone with the timing the record shows: with consecutive records the
    /// input the server held; across a gap, the lag shifted a few ticks either way (the
    /// shift that explains it is kept).
    fn explain_timing(
        &mut self,
        t: i64,
        consecutive: bool,
        s: &Mover,
        threshold: f32,
    ) -> Option<Mover> {
        if consecutive {
            if !self.sent(s.input) {
                return None;
            }
            let q = self.predict(t, self.lag, s.input);
            return q.agrees(s, threshold).then_some(q);
        }
        for k in LAG_SHIFTS {
            let lag = self.lag + k * Self::interval();
            let q = self.predict(t, lag, NO_OVERRIDE);
            if q.agrees(s, threshold) {
                self.lag = lag;
                return Some(q);
            }
        }
        None
    }

    /// The server's held input turned to `dir` at tick `t`: the input that started `dir`
    /// (the newest run of `dir` in the log) arrived between ticks `t - 1` and `t`; the lag
    /// is the middle of what that allows.
    fn measure_lag(&mut self, t: i64, dir: Vec2i) {
        let Some(epoch) = self.epoch else { return };
        let mut start = None;
        for k in (1..self.inputs.len()).rev() {
            if self.inputs[k].1 == dir && self.inputs[k - 1].1 != dir {
                start = Some(self.inputs[k].0);
                break;
            }
        }
        let Some(s) = start else { return };
        let iv = Self::interval();
        self.lag = epoch + (t as f64 - 0.5) * iv - s;
    }

    fn adopt(&mut self, tick: u32, s: Mover, refusal: Option<(Vec2i, Vec2i)>) {
        if let Some((tile, dir)) = refusal {
            self.learn_wall(Vec2i {
                x: tile.x.saturating_add(dir.x),
                y: tile.y.saturating_add(dir.y),
            });
        }
        self.refusing = refusal;
        self.base = s;
        self.base_tick = Some(tick);
        // Keep a few ticks of inputs already applied (the lag search may shift them back
        // into flight) and the last second's (the lag is measured from them).
        let keep_after = i64::from(tick) - 4;
        let newest = self.inputs.back().map_or(0.0, |&(st, _)| st);
        while self.inputs.len() > 1
            && self.inputs.front().is_some_and(|&(st, _)| {
                self.tick_of(st, self.lag) < keep_after && st < newest - INPUT_KEEP_S
            })
        {
            self.inputs.pop_front();
        }
    }
}

/// `predict`'s marker for "no override of the first tick's input".
const NO_OVERRIDE: Vec2i = Vec2i {
    x: i32::MIN,
    y: i32::MIN,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn v(x: i32, y: i32) -> Vec2i {
        Vec2i { x, y }
    }

    fn ticks_to_arrive(dir: Vec2i) -> u32 {
        let mut m = Mover::standing(v(10, 10));
        m.input = dir;
        assert_eq!(m.tick(TICK_DT, |_| true), Start::Started);
        assert_eq!(m.pos, centre(v(10, 10)), "the start tick does not advance");
        m.input = Vec2i::default();
        let mut n = 1;
        while m.moving {
            m.tick(TICK_DT, |_| true);
            n += 1;
            assert!(n < 100);
        }
        assert_eq!(m.pos, centre(v(10 + dir.x, 10 + dir.y)));
        assert_eq!(m.vel, Vec2f::ZERO);
        n
    }

    #[test]
    fn a_straight_move_arrives_on_the_10th_tick_and_a_diagonal_on_the_13th() {
        let straight = ticks_to_arrive(v(1, 0));
        let diagonal = ticks_to_arrive(v(-1, 1));
        // Counting the start tick. One tile is exactly 9 steps of 1/60 s at 1/0.15 tiles/s,
        // but in f32 what is left after 8 steps is a hair over one step, so a 9th step is
        // taken and the snap comes on the 10th tick (1/6 s); a diagonal is √2 tiles, 12.7
        // steps, so it snaps on the 13th (0.217 s).
        assert_eq!(straight, 1 + 10);
        assert_eq!(diagonal, 1 + 13);
        assert_eq!(ticks_to_arrive(v(0, -1)), straight);
    }

    #[test]
    fn velocity_points_at_the_target_centre_at_tile_speed() {
        let mut m = Mover::standing(v(3, 3));
        m.input = v(1, 1);
        m.tick(TICK_DT, |_| true);
        let speed = (m.vel.x * m.vel.x + m.vel.y * m.vel.y).sqrt();
        assert!((speed - 1.0 / 0.15).abs() < 1e-4, "{speed}");
        assert_eq!(m.vel.x, m.vel.y);
    }

    #[test]
    fn a_held_input_chains_moves_and_an_impassable_tile_refuses() {
        let mut m = Mover::standing(v(5, 5));
        m.input = v(1, 0);
        let wall = v(7, 5);
        let passable = |t: Vec2i| t != wall;
        let mut started = 0;
        let mut refused = 0;
        for _ in 0..40 {
            match m.tick(TICK_DT, passable) {
                Start::Started => started += 1,
                Start::Refused(t) => {
                    assert_eq!(t, wall);
                    refused += 1;
                }
                Start::None => {}
            }
        }
        assert_eq!(started, 1, "onto 6; onto 7 refused");
        assert!(refused > 10, "tried again every tick");
        assert_eq!(m.grid, v(6, 5));
        assert_eq!(m.refusal(), Some((v(6, 5), v(1, 0))));
    }

    fn record(m: &Mover) -> Mover {
        *m
    }

    /// A server that ticks every 1/60 s and a bot whose inputs arrive `lag` seconds after
    /// they are sent, the bot's inputs at `input_hz`: the predictor matches every record.
    fn run(input_hz: f64, lag: f64, phase: f64, walls: &[Vec2i]) -> (Vec<Verdict>, usize) {
        let base = Instant::now();
        let at = |s: f64| base + std::time::Duration::from_secs_f64(s);
        let mut server = Mover::standing(v(20, 20));
        let mut pred = Predictor::new(base, centre(v(20, 20)));
        let mut sent: Vec<(f64, Vec2i)> = Vec::new();
        let dirs = [
            v(1, 0),
            v(1, 1),
            v(0, 0),
            v(-1, 0),
            v(0, -1),
            v(-1, 1),
            v(0, 1),
        ];
        let mut verdicts = Vec::new();
        let mut refusals = 0;
        let mut next_input = 0.0;
        let mut k = 0usize;
        let passable = |t: Vec2i| !walls.contains(&t);
        for tick in 1..(60 * 20) {
            let tt = f64::from(tick) / 60.0 + phase;
            while next_input < tt {
                let dir = dirs[(next_input / 0.5) as usize % dirs.len()];
                pred.input_sent(at(next_input), dir);
                sent.push((next_input, dir));
                next_input += 1.0 / input_hz;
                k += 1;
            }
            if let Some(&(_, d)) = sent.iter().rev().find(|(s, _)| s + lag <= tt) {
                server.input = d;
            }
            if let Start::Refused(_) = server.tick(TICK_DT, passable) {
                refusals += 1;
            }
            let o = pred.on_record(at(tt + 0.0005), tick, record(&server), 0.01);
            verdicts.push(o.verdict);
        }
        assert!(k > 100);
        (verdicts, refusals)
    }

    #[test]
    fn the_predictor_follows_the_server_at_any_input_rate_and_lag() {
        for (hz, lag, phase) in [
            (60.0, 0.001, 0.0),
            (60.0, 0.0, 0.0083),
            (60.0, 0.045, 0.003),
            (20.0, 0.002, 0.0),
            (144.0, 0.020, 0.001),
        ] {
            let (verdicts, _) = run(hz, lag, phase, &[]);
            let count = |x: Verdict| verdicts.iter().filter(|&&y| y == x).count();
            assert_eq!(
                count(Verdict::Corrected),
                0,
                "{hz} Hz lag {lag}: {verdicts:?}"
            );
            assert_eq!(count(Verdict::Refused), 0);
            assert!(count(Verdict::Exact) > 1000, "{hz} Hz lag {lag}");
        }
    }

    #[test]
    fn refused_moves_are_their_own_verdict_and_then_learnt() {
        let walls: Vec<Vec2i> = (0..60)
            .map(|i| v(23, i))
            .chain((0..60).map(|i| v(i, 23)))
            .collect();
        let (verdicts, refusals) = run(60.0, 0.001, 0.0, &walls);
        let count = |x: Verdict| verdicts.iter().filter(|&&y| y == x).count();
        assert!(refusals > 0, "the walk reaches the walls");
        assert_eq!(count(Verdict::Corrected), 0, "{verdicts:?}");
        assert!(count(Verdict::Refused) >= 1);
    }
}
