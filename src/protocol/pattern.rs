//! What a bot presses, as a function of time: the scenario's input pattern.
//!
//! Patterns produce [`Keys`], a protocol-neutral set of buttons; each protocol maps them to
//! its own wire form (cafe's input mask, a city move axis, ...).

use std::time::Duration;

use rand::Rng;

/// Buttons held, one bit each. The bit order matches cafe's `input_mask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Keys(pub u8);

impl Keys {
    /// Up (a bit of [`Keys`]).
    pub const UP: u8 = 1 << 0;
    /// Down.
    pub const DOWN: u8 = 1 << 1;
    /// Left.
    pub const LEFT: u8 = 1 << 2;
    /// Right.
    pub const RIGHT: u8 = 1 << 3;
    /// Shoot.
    pub const SHOOT: u8 = 1 << 4;

    /// Movement axis in screen coordinates (y grows downwards), each component -1, 0 or 1.
    pub fn axis(self) -> (f32, f32) {
        let b = |bit: u8| if self.0 & bit != 0 { 1.0 } else { 0.0 };
        (b(Self::RIGHT) - b(Self::LEFT), b(Self::DOWN) - b(Self::UP))
    }

    /// Whether the shoot key is pressed.
    pub fn shoot(self) -> bool {
        self.0 & Self::SHOOT != 0
    }

    /// Each key's bit and its name in scenarios, in the order names are written.
    const NAMED: [(u8, &'static str); 5] = [
        (Self::UP, "up"),
        (Self::DOWN, "down"),
        (Self::LEFT, "left"),
        (Self::RIGHT, "right"),
        (Self::SHOOT, "shoot"),
    ];

    /// The key names as a scenario writes them (`[up, left, shoot]`), in that order.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMED
            .into_iter()
            .filter(|(bit, _)| self.0 & bit != 0)
            .map(|(_, n)| n)
            .collect()
    }

    /// Parse a key list as written in scenarios: `[up, left, shoot]`.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut k = 0;
        for n in names {
            let Some((bit, _)) = Self::NAMED.into_iter().find(|(_, name)| *name == n) else {
                return Err(format!(
                    "unknown key `{n}`, expected one of up, down, left, right, shoot"
                ));
            };
            k |= bit;
        }
        Ok(Keys(k))
    }
}

/// The eight compass directions, clockwise from up.
const COMPASS: [u8; 8] = [
    Keys::UP,
    Keys::UP | Keys::RIGHT,
    Keys::RIGHT,
    Keys::DOWN | Keys::RIGHT,
    Keys::DOWN,
    Keys::DOWN | Keys::LEFT,
    Keys::LEFT,
    Keys::UP | Keys::LEFT,
];

/// Which keys a bot presses when: the scenario's `behavior.input_pattern`.
#[derive(Debug, Clone, PartialEq)]
pub enum InputPattern {
    /// Nothing pressed: measures the server's idle cost per client.
    Idle,
    /// A new random direction (or standing still), and shooting one time in five, every
    /// `change_every`.
    RandomWalk {
        /// Time between two changes.
        change_every: Duration,
    },
    /// Walk the eight compass directions in turn, one full turn per `period`.
    Circle {
        /// Time for one full turn.
        period: Duration,
    },
    /// Hold each step's keys for its duration, then loop.
    Scripted {
        /// Keys and how long each is held, in order.
        steps: Vec<(Keys, Duration)>,
    },
    /// A captured client's key stream (`tickswarm inspect --write-scenario`), looped, each
    /// bot entering it at its own offset (drawn from the bot's seed) so a swarm does not
    /// press in lockstep.
    Replay {
        /// Keys and how long the captured client held each, in order.
        steps: Vec<(Keys, Duration)>,
    },
}

/// As a scenario writes it: `random_walk every 500ms`, `scripted (4 steps)`.
impl std::fmt::Display for InputPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = crate::duration::format_duration;
        match self {
            InputPattern::Idle => f.write_str("idle"),
            InputPattern::RandomWalk { change_every } => {
                write!(f, "random_walk, a new direction every {}", d(*change_every))
            }
            InputPattern::Circle { period } => write!(f, "circle, one turn per {}", d(*period)),
            InputPattern::Scripted { steps } => write!(f, "scripted, {} steps", steps.len()),
            InputPattern::Replay { steps } => {
                let total: Duration = steps.iter().map(|(_, d)| *d).sum();
                write!(
                    f,
                    "replay of a captured client, {} steps over {}, each bot from its own offset",
                    steps.len(),
                    d(total)
                )
            }
        }
    }
}

/// A bot's position in its pattern.
#[derive(Debug, Clone)]
pub struct PatternState {
    current: Keys,
    next_change: Duration,
    /// Where this bot entered a replayed stream (drawn at its first sample).
    replay_offset: Option<Duration>,
}

impl PatternState {
    /// A pattern state at the start of its pattern.
    pub fn new() -> Self {
        Self {
            current: Keys::default(),
            next_change: Duration::ZERO,
            replay_offset: None,
        }
    }

    /// Keys held at `elapsed` since the bot connected.
    pub fn sample(
        &mut self,
        pattern: &InputPattern,
        elapsed: Duration,
        rng: &mut (impl Rng + ?Sized),
    ) -> Keys {
        match pattern {
            InputPattern::Idle => Keys::default(),
            InputPattern::RandomWalk { change_every } => {
                if elapsed >= self.next_change {
                    let dir = rng.random_range(0..9usize);
                    let mut k = COMPASS.get(dir).copied().unwrap_or(0);
                    if rng.random_range(0..5u8) == 0 {
                        k |= Keys::SHOOT;
                    }
                    self.current = Keys(k);
                    self.next_change = elapsed + (*change_every).max(Duration::from_millis(1));
                }
                self.current
            }
            InputPattern::Circle { period } => {
                let p = period.as_secs_f64().max(1e-3);
                let turn = (elapsed.as_secs_f64() / p).fract();
                Keys(COMPASS[((turn * 8.0) as usize).min(7)])
            }
            InputPattern::Scripted { steps } => step_at(steps, elapsed),
            InputPattern::Replay { steps } => {
                let total: Duration = steps.iter().map(|(_, d)| *d).sum();
                let offset = *self.replay_offset.get_or_insert_with(|| {
                    let nanos = u64::try_from(total.as_nanos()).unwrap_or(u64::MAX);
                    Duration::from_nanos(rng.random_range(0..nanos.max(1)))
                });
                step_at(steps, elapsed + offset)
            }
        }
    }
}

/// The keys of the step that `at` falls in, the steps looped; none when they have no length.
fn step_at(steps: &[(Keys, Duration)], at: Duration) -> Keys {
    let total: Duration = steps.iter().map(|(_, d)| *d).sum();
    if total.is_zero() {
        return Keys::default();
    }
    let mut t = Duration::from_nanos((at.as_nanos() % total.as_nanos()) as u64);
    for (keys, d) in steps {
        if t < *d {
            return *keys;
        }
        t -= *d;
    }
    Keys::default()
}

impl Default for PatternState {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn axis_follows_keys() {
        assert_eq!(Keys(Keys::UP | Keys::RIGHT).axis(), (1.0, -1.0));
        assert_eq!(Keys(Keys::LEFT | Keys::RIGHT).axis(), (0.0, 0.0));
    }

    #[test]
    fn circle_visits_every_direction_in_order() {
        let mut s = PatternState::new();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let p = InputPattern::Circle {
            period: Duration::from_secs(8),
        };
        let seen: Vec<u8> = (0..8)
            .map(|i| {
                s.sample(&p, Duration::from_millis(i * 1000 + 500), &mut rng)
                    .0
            })
            .collect();
        assert_eq!(seen, COMPASS.to_vec());
    }

    #[test]
    fn scripted_loops() {
        let mut s = PatternState::new();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let p = InputPattern::Scripted {
            steps: vec![
                (Keys(Keys::UP), Duration::from_secs(1)),
                (Keys(Keys::SHOOT), Duration::from_secs(2)),
            ],
        };
        assert_eq!(
            s.sample(&p, Duration::from_millis(500), &mut rng),
            Keys(Keys::UP)
        );
        assert_eq!(
            s.sample(&p, Duration::from_millis(2500), &mut rng),
            Keys(Keys::SHOOT)
        );
        assert_eq!(
            s.sample(&p, Duration::from_millis(3500), &mut rng),
            Keys(Keys::UP)
        );
    }

    #[test]
    fn a_replay_loops_the_stream_from_an_offset_of_the_bots_own() {
        let steps = vec![
            (Keys(Keys::UP), Duration::from_millis(100)),
            (Keys(Keys::LEFT), Duration::from_millis(200)),
            (Keys(Keys::SHOOT), Duration::from_millis(300)),
        ];
        let p = InputPattern::Replay { steps };
        // Sampled every 10 ms for two loops, each bot sees the stream rotated: the same
        // 60 samples per loop, 10 of UP, 20 of LEFT, 30 of SHOOT, in that cyclic order.
        let run = |seed| {
            let mut s = PatternState::new();
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..120)
                .map(|i| s.sample(&p, Duration::from_millis(i * 10), &mut rng).0)
                .collect::<Vec<_>>()
        };
        let (a, b) = (run(1), run(2));
        assert_ne!(a, b, "two seeds enter the stream at different offsets");
        for bot in [a, b] {
            assert_eq!(bot[..60], bot[60..], "one loop is 600 ms");
            for (key, n) in [(Keys::UP, 10), (Keys::LEFT, 20), (Keys::SHOOT, 30)] {
                assert_eq!(bot[..60].iter().filter(|&&k| k == key).count(), n);
            }
            let changes: Vec<u8> = bot
                .windows(2)
                .filter(|w| w[0] != w[1])
                .map(|w| w[1])
                .collect();
            let order = [Keys::UP, Keys::LEFT, Keys::SHOOT];
            let start = order
                .iter()
                .position(|&k| k == changes[0])
                .expect("a key of the stream");
            for (i, k) in changes.iter().enumerate() {
                assert_eq!(*k, order[(start + i) % 3], "the captured order, rotated");
            }
        }
    }

    #[test]
    fn random_walk_is_deterministic_per_seed() {
        let p = InputPattern::RandomWalk {
            change_every: Duration::from_millis(100),
        };
        let run = |seed| {
            let mut s = PatternState::new();
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..50)
                .map(|i| s.sample(&p, Duration::from_millis(i * 37), &mut rng).0)
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }
}
