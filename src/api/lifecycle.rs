//! The life of a bot over a datagram protocol, once: the handshake resent until it is
//! answered or times out, the server-silence watchdog, inputs on the scenario's fixed grid with
//! the scenario's input pattern and mode (`on_change`: only changed keys), and one ping in
//! flight. What is left to a protocol's bot is its messages: what its hello, input and ping
//! look like, and what an answer means.
//!
//! A bot keeps a [`Lifecycle`] and calls it from each of its [`Bot`] methods:
//!
//! | `Bot` method | call |
//! |---|---|
//! | `start` | [`Lifecycle::start`], then queue the hello |
//! | `handle_datagram` | [`Lifecycle::heard`]; on the handshake's answer [`Lifecycle::accepted`]; on a pong [`Lifecycle::on_pong`] |
//! | `handle_timeout` | [`Lifecycle::poll`] until `None`, queueing what each [`Due`] asks for |
//! | `stop` | [`Lifecycle::stop`] (queue a goodbye when it returns `true`) |
//! | `poll_timeout`, `phase` | [`Lifecycle::next_timeout`], [`Lifecycle::phase`] |
//!
//! It records what every bot records the same way: the handshake time, `connect_failures`
//! `timeout`, `server_silence_timeout`, send lateness against the input grid, skipped input
//! slots, `inputs_sent`, RTT and the ping counters of [`OneInFlight`].
//!
//! [`Bot`]: crate::protocol::prelude::Bot

use std::time::Instant;

use crate::protocol::prelude::input_grid::KeyInputs;
use crate::protocol::prelude::ping::OneInFlight;
use crate::protocol::prelude::timers::{earliest, Handshake, Silence};
use crate::protocol::prelude::{BotParams, BotPhase, ChaCha8Rng, Keys, Recorder, SeedableRng};

/// What a bot should send now, from [`Lifecycle::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Resend the hello: the handshake is unanswered.
    Hello,
    /// An input slot of the grid: send these keys (the scenario's pattern, sampled now).
    Input(Keys),
    /// A ping.
    Ping,
}

/// A bot's phase, timers and input pattern (see the module docs).
///
/// ```
/// use std::time::{Duration, Instant};
/// use tickswarm::api::lifecycle::{Due, Lifecycle};
/// use tickswarm::api::{BotParams, BotPhase, Recorder};
/// let (t0, mut rec) = (Instant::now(), Recorder::new());
/// let mut life = Lifecycle::new(BotParams::with_index(0, 7));
/// life.start(t0); // and send the hello
/// assert_eq!(life.phase(), BotPhase::Connecting);
/// life.heard(t0 + Duration::from_millis(30));
/// life.accepted(t0 + Duration::from_millis(30), &mut rec); // the server's answer
/// assert_eq!(rec.handshake_us.len(), 1);
/// let next = life.next_timeout().unwrap();
/// let mut due = Vec::new();
/// while let Some(d) = life.poll(next, &mut rec) {
///     due.push(d);
/// }
/// assert!(due.iter().any(|d| matches!(d, Due::Input(_))));
/// assert!(life.stop(), "connected: say goodbye");
/// assert_eq!(life.phase(), BotPhase::Closed);
/// ```
#[derive(Debug, Clone)]
pub struct Lifecycle {
    params: BotParams,
    phase: BotPhase,
    started: Option<Instant>,
    handshake: Handshake,
    silence: Silence,
    keys: KeyInputs,
    ping: OneInFlight,
    rng: ChaCha8Rng,
}

impl Lifecycle {
    /// An idle bot with these parameters; its generator is seeded with `params.seed`.
    pub fn new(params: BotParams) -> Self {
        Self {
            phase: BotPhase::Idle,
            started: None,
            handshake: Handshake::new(),
            silence: Silence::new(params.server_silence_timeout),
            keys: KeyInputs::new(&params),
            ping: OneInFlight::new(params.ping_interval),
            rng: ChaCha8Rng::seed_from_u64(params.seed),
            params,
        }
    }

    /// The parameters it was made with.
    pub fn params(&self) -> &BotParams {
        &self.params
    }

    /// The bot's seeded generator (for a nonce, say), the one the input pattern draws from.
    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.rng
    }

    /// Where the bot is.
    pub fn phase(&self) -> BotPhase {
        self.phase
    }

    /// `Bot::start`: connecting from `now`, the handshake's resends and deadline armed.
    pub fn start(&mut self, now: Instant) {
        self.phase = BotPhase::Connecting;
        self.started = Some(now);
        let p = &self.params;
        self.handshake
            .begin(now, Some(p.handshake_retry), p.handshake_timeout);
        self.silence.arm(now);
    }

    /// A datagram came from the server (any, valid or not): the watchdog is fed.
    pub fn heard(&mut self, now: Instant) {
        self.silence.heard(now);
    }

    /// The server accepted the bot: connected; the handshake time is recorded, and inputs
    /// (at the bot's phase offset) and pings start.
    pub fn accepted(&mut self, now: Instant, rec: &mut Recorder) {
        self.handshake.end();
        self.phase = BotPhase::Connected;
        if let Some(s) = self.started {
            rec.record_handshake(now.saturating_duration_since(s).as_micros() as u64);
        }
        self.keys.begin(now, &self.params);
        self.ping.start_at(now);
    }

    /// The pong of the ping in flight came: its RTT is recorded.
    pub fn on_pong(&mut self, now: Instant, rec: &mut Recorder) {
        self.ping.on_pong(now, rec);
    }

    /// What is due at `now`, one at a time (call until `None`). A handshake past its deadline
    /// ends in `Failed` (`connect_failures.timeout`), a server silent too long in `Closed`
    /// (`server_silence_timeout`); both return `None`.
    pub fn poll(&mut self, now: Instant, rec: &mut Recorder) -> Option<Due> {
        match self.phase {
            BotPhase::Connecting if self.handshake.timed_out(now) => {
                self.phase = BotPhase::Failed;
                rec.connect_failures.add("timeout", 1);
                None
            }
            BotPhase::Connecting => self.handshake.retry_due(now).then_some(Due::Hello),
            BotPhase::Connected if self.silence.expired(now) => {
                self.phase = BotPhase::Closed;
                rec.event("server_silence_timeout");
                None
            }
            BotPhase::Connected => {
                let played = now.saturating_duration_since(self.started.unwrap_or(now));
                if let Some(keys) = self
                    .keys
                    .take(now, played, &self.params, &mut self.rng, rec)
                {
                    rec.inputs_sent += 1;
                    return Some(Due::Input(keys));
                }
                self.ping.poll(now, rec).then_some(Due::Ping)
            }
            _ => None,
        }
    }

    /// When [`Lifecycle::poll`] has something next (`Bot::poll_timeout`).
    pub fn next_timeout(&self) -> Option<Instant> {
        match self.phase {
            BotPhase::Connecting => {
                earliest([self.handshake.next_deadline(), self.silence.deadline()])
            }
            BotPhase::Connected => earliest([
                self.keys.next_due(),
                self.ping.next(),
                self.silence.deadline(),
            ]),
            _ => None,
        }
    }

    /// `Bot::stop`: closed (a failed bot stays failed), no more pings. `true` when the bot
    /// was connected, so it should tell the server it leaves.
    pub fn stop(&mut self) -> bool {
        let was_connected = self.phase == BotPhase::Connected;
        if self.phase != BotPhase::Failed {
            self.phase = BotPhase::Closed;
        }
        self.ping.stop();
        was_connected
    }
}
