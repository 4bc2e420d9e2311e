//! One direction of one bot's simulated path.

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

use super::config::{percentile_table, Conditions, Jitter};

/// Default lag of a duplicate behind the original.
const DUPLICATE_DELAY: Duration = Duration::from_millis(1);
/// Default hold-back of a reordered datagram.
const REORDER_DELAY: Duration = Duration::from_millis(10);
/// Default queue in front of a bandwidth cap.
const QUEUE_BYTES: u64 = 64 * 1024;

/// Why the link lost a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Sent while the link was down.
    Outage,
    /// The loss model's draw.
    Loss,
    /// The queue in front of the bandwidth cap was full.
    Queue,
}

impl DropReason {
    /// Counter name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Outage => "outage",
            DropReason::Loss => "loss",
            DropReason::Queue => "queue_full",
        }
    }
}

/// What happens to one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Dropped(DropReason),
    /// Delivered at `at`, and a second time at `copy_at` when duplicated.
    Deliver {
        at: Instant,
        copy_at: Option<Instant>,
    },
}

/// What a link did, for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub submitted: u64,
    pub lost_outage: u64,
    pub lost_loss: u64,
    pub lost_queue: u64,
    pub duplicated: u64,
    pub reordered: u64,
}

impl LinkStats {
    pub fn lost(&self) -> u64 {
        self.lost_outage + self.lost_loss + self.lost_queue
    }

    pub fn add(&mut self, o: &LinkStats) {
        self.submitted += o.submitted;
        self.lost_outage += o.lost_outage;
        self.lost_loss += o.lost_loss;
        self.lost_queue += o.lost_queue;
        self.duplicated += o.duplicated;
        self.reordered += o.reordered;
    }
}

enum JitterDraw {
    None,
    Uniform(Duration),
    Normal(Normal<f64>),
    /// `(quantile, delay)` points from `(0, 0)`, increasing.
    Table(Vec<(f64, Duration)>),
}

impl JitterDraw {
    fn new(j: Option<&Jitter>) -> JitterDraw {
        match j {
            None => JitterDraw::None,
            Some(Jitter::Uniform(d)) => JitterDraw::Uniform(d.0),
            Some(Jitter::Normal(sd)) => {
                Normal::new(0.0, sd.0.as_secs_f64()).map_or(JitterDraw::None, JitterDraw::Normal)
            }
            Some(Jitter::Percentiles(t)) => {
                percentile_table(t).map_or(JitterDraw::None, JitterDraw::Table)
            }
        }
    }

    fn draw(&self, rng: &mut ChaCha8Rng) -> Duration {
        match self {
            JitterDraw::None => Duration::ZERO,
            JitterDraw::Uniform(max) => max.mul_f64(rng.random::<f64>()),
            JitterDraw::Normal(n) => Duration::from_secs_f64(n.sample(rng).max(0.0)),
            JitterDraw::Table(points) => {
                let u: f64 = rng.random();
                interpolate(points, u)
            }
        }
    }
}

/// The delay at quantile `u` of a piecewise-linear distribution.
fn interpolate(points: &[(f64, Duration)], u: f64) -> Duration {
    for w in points.windows(2) {
        let ((q0, d0), (q1, d1)) = (w[0], w[1]);
        if u <= q1 {
            if q1 <= q0 {
                return d1;
            }
            let f = (u - q0) / (q1 - q0);
            return d0 + (d1.saturating_sub(d0)).mul_f64(f);
        }
    }
    points.last().map_or(Duration::ZERO, |p| p.1)
}

/// One direction of a bot's path; see the module docs of [`crate::netsim`] for the model.
pub struct Link {
    start: Instant,
    latency: Duration,
    jitter: JitterDraw,
    /// Gilbert–Elliott `(p, r, loss_good, loss_bad)` and the current state.
    loss: Option<(f64, f64, f64, f64)>,
    bad: bool,
    duplicate: f64,
    duplicate_delay: Duration,
    reorder: f64,
    reorder_delay: Duration,
    /// Bits per second and queue bytes.
    bandwidth: Option<(u64, u64)>,
    /// When the bandwidth cap has serialised everything submitted so far.
    free_at: Instant,
    outage: Option<(Duration, Duration)>,
    /// Delivery time of the last datagram that was not held back: jitter keeps order.
    last_delivery: Option<Instant>,
    rng: ChaCha8Rng,
    stats: LinkStats,
}

impl Link {
    /// A link starting at `start` with `c` (already validated), its randomness from `seed`.
    pub fn new(c: &Conditions, seed: u64, start: Instant) -> Link {
        Link {
            start,
            latency: c.latency.map_or(Duration::ZERO, |d| d.0),
            jitter: JitterDraw::new(c.jitter.as_ref()),
            loss: c.loss.as_ref().map(|l| l.chain()),
            bad: false,
            duplicate: c.duplicate.map_or(0.0, |s| s.0),
            duplicate_delay: c.duplicate_delay.map_or(DUPLICATE_DELAY, |d| d.0),
            reorder: c.reorder.map_or(0.0, |s| s.0),
            reorder_delay: c.reorder_delay.map_or(REORDER_DELAY, |d| d.0),
            bandwidth: c
                .bandwidth_bps
                .filter(|&b| b > 0)
                .map(|b| (b, c.queue_bytes.unwrap_or(QUEUE_BYTES))),
            free_at: start,
            outage: c.outage.map(|o| (o.every.0, o.down_for.0)),
            last_delivery: None,
            rng: ChaCha8Rng::seed_from_u64(seed),
            stats: LinkStats::default(),
        }
    }

    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Whether the link is down at `now`.
    pub fn is_down(&self, now: Instant) -> bool {
        let Some((every, down_for)) = self.outage else {
            return false;
        };
        let t = now.saturating_duration_since(self.start);
        if t < every {
            return false;
        }
        let phase = t.as_nanos() % every.as_nanos().max(1);
        phase < down_for.as_nanos()
    }

    /// The fate of a datagram of `len` bytes sent at `now`.
    pub fn submit(&mut self, now: Instant, len: usize) -> Fate {
        self.stats.submitted += 1;
        if self.is_down(now) {
            self.stats.lost_outage += 1;
            return Fate::Dropped(DropReason::Outage);
        }
        if self.lost() {
            self.stats.lost_loss += 1;
            return Fate::Dropped(DropReason::Loss);
        }
        let mut depart = now;
        if let Some((bps, queue)) = self.bandwidth {
            let busy_until = self.free_at.max(now);
            let waiting = busy_until.saturating_duration_since(now);
            let queued_bytes = (waiting.as_secs_f64() * bps as f64 / 8.0) as u64;
            if queued_bytes > 0 && queued_bytes + len as u64 > queue {
                self.stats.lost_queue += 1;
                return Fate::Dropped(DropReason::Queue);
            }
            let tx = Duration::from_secs_f64(len as f64 * 8.0 / bps as f64);
            self.free_at = busy_until + tx;
            depart = self.free_at;
        }
        let mut at = depart + self.latency + self.jitter.draw(&mut self.rng);
        if let Some(last) = self.last_delivery {
            at = at.max(last);
        }
        if self.reorder > 0.0 && self.rng.random::<f64>() < self.reorder {
            self.stats.reordered += 1;
            at += self.reorder_delay;
        } else {
            self.last_delivery = Some(at);
        }
        let copy_at = (self.duplicate > 0.0 && self.rng.random::<f64>() < self.duplicate)
            .then(|| at + self.duplicate_delay);
        if copy_at.is_some() {
            self.stats.duplicated += 1;
        }
        Fate::Deliver { at, copy_at }
    }

    /// One step of the loss chain: move between states, then draw the loss of this state.
    fn lost(&mut self) -> bool {
        let Some((p, r, loss_good, loss_bad)) = self.loss else {
            return false;
        };
        let u: f64 = self.rng.random();
        self.bad = if self.bad { u >= r } else { u < p };
        let loss = if self.bad { loss_bad } else { loss_good };
        loss >= 1.0 || (loss > 0.0 && self.rng.random::<f64>() < loss)
    }
}
