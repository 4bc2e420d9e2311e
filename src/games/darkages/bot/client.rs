//! What the bots of both dialects share: the session clock and connect handshake, pings
//! matched by token, the downstream-loss counts from snapshot ticks, and held keys as
//! movement flags.
//!
//! The dialects differ in their packets, not in these: both send a PING carrying a token
//! the server echoes, both learn the snapshot tick step the same way, and both number the
//! movement flags alike (forward, backward, left, right in bits 0 to 3, attack in bit 5).
//! Keeping them here keeps the two bots' figures taken the same way.

use std::time::{Duration, Instant};

use crate::protocol::prelude::input_grid::KeyInputs;
use crate::protocol::prelude::timers::{Handshake, Periodic};
use crate::protocol::prelude::{BotParams, BotPhase, Keys, Recorder};

/// Pings in flight at most.
pub const PINGS: usize = 8;

/// The session's clock and its connect handshake: when the bot started (INPUT timestamps
/// count from it), when its connect attempt began (the handshake time) and when play began
/// (the input pattern's clock).
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// CONNECT resends and the handshake deadline (a first connect or a handoff's).
    pub(crate) handshake: Handshake,
    epoch: Option<Instant>,
    attempt_started: Option<Instant>,
    connected_at: Option<Instant>,
}

impl Session {
    pub(crate) fn new() -> Self {
        Self {
            handshake: Handshake::new(),
            epoch: None,
            attempt_started: None,
            connected_at: None,
        }
    }

    /// The first CONNECT goes out at `now`: the clock starts and the handshake runs; the
    /// bot is then [`BotPhase::Connecting`], which this returns for its phase.
    pub(crate) fn begin(&mut self, now: Instant, params: &BotParams) -> BotPhase {
        self.epoch = Some(now);
        self.attempt_started = Some(now);
        self.connect_again(now, params);
        BotPhase::Connecting
    }

    /// A CONNECT to another zone goes out: resent and timed like the first one.
    pub(crate) fn connect_again(&mut self, now: Instant, params: &BotParams) {
        self.handshake
            .begin(now, Some(params.handshake_retry), params.handshake_timeout);
    }

    /// The server admitted the bot at `now`: the handshake ends and its time is recorded.
    pub(crate) fn established(&mut self, now: Instant, rec: &mut Recorder) {
        self.connected_at = Some(now);
        self.handshake.end();
        if let Some(s) = self.attempt_started {
            rec.record_handshake(now.saturating_duration_since(s).as_micros() as u64);
        }
    }

    /// Milliseconds since the bot started (INPUT and HEARTBEAT timestamps).
    pub(crate) fn ms(&self, now: Instant) -> u32 {
        self.epoch
            .map_or(0, |e| now.saturating_duration_since(e).as_millis() as u32)
    }

    /// The keys for the input slot due at `now`, in either dialect: none while the bot is
    /// between zones (the slot goes by unsent, as the server it left no longer hears it and
    /// the next one has not accepted it yet), else the pattern at the time played.
    pub(crate) fn keys_due(
        &self,
        keys: &mut KeyInputs,
        between_zones: bool,
        now: Instant,
        params: &BotParams,
        rng: &mut rand_chacha::ChaCha8Rng,
        rec: &mut Recorder,
    ) -> Option<Keys> {
        if between_zones {
            keys.pass(now, rec);
            return None;
        }
        keys.take(now, self.played(now), params, rng, rec)
    }

    /// How long the bot has played (zero before it was admitted).
    pub(crate) fn played(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.connected_at.unwrap_or(now))
    }
}

/// Pings matched by the token the server echoes: up to [`PINGS`] in flight, each slot
/// reused by the token [`PINGS`] later (a ping still unanswered then is `ping_lost`).
#[derive(Debug, Clone)]
pub(crate) struct Pings {
    timer: Periodic,
    sent: [Option<(u32, Instant)>; PINGS],
    next: u32,
}

impl Pings {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            timer: Periodic::new(interval),
            sent: [None; PINGS],
            next: 1,
        }
    }

    /// Start the schedule (the first ping is due at `at`).
    pub(crate) fn start_at(&mut self, at: Instant) {
        self.timer.start_at(at);
    }

    /// When the next ping is due.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.timer.next()
    }

    /// Whether a ping is due at `now`; the schedule moves on whether or not one is sent.
    pub(crate) fn due(&mut self, now: Instant) -> bool {
        self.timer.fire(now)
    }

    /// A ping goes out at `now`: its token (never 0).
    pub(crate) fn send(&mut self, now: Instant, rec: &mut Recorder) -> u32 {
        let token = self.next;
        self.next = self.next.wrapping_add(1).max(1);
        let slot = (token as usize) % PINGS;
        if self.sent[slot].is_some() {
            rec.event("ping_lost");
        }
        self.sent[slot] = Some((token, now));
        token
    }

    /// A PONG with `token`: an RTT sample if it answers a ping in flight.
    pub(crate) fn on_pong(&mut self, now: Instant, token: u32, rec: &mut Recorder) {
        let slot = (token as usize) % PINGS;
        match self.sent[slot] {
            Some((t, sent)) if t == token => {
                rec.record_rtt(now.saturating_duration_since(sent).as_micros() as u64);
                self.sent[slot] = None;
            }
            _ => rec.event("pong_unknown"),
        }
    }

    /// Forget the pings in flight (they went to a server the bot has left).
    pub(crate) fn forget(&mut self) {
        self.sent = [None; PINGS];
    }
}

/// Movement flag bits, the same in both dialects' INPUT.
pub(crate) mod flags {
    pub const FORWARD: u8 = 1 << 0;
    pub const BACKWARD: u8 = 1 << 1;
    pub const LEFT: u8 = 1 << 2;
    pub const RIGHT: u8 = 1 << 3;
    pub const ATTACK: u8 = 1 << 5;
}

/// Held keys as INPUT flags; opposite keys together cancel, so no conflicting flags go out
/// by accident.
pub(crate) fn keys_to_flags(k: Keys) -> u8 {
    let mut f = 0;
    let up = k.0 & Keys::UP != 0;
    let down = k.0 & Keys::DOWN != 0;
    let left = k.0 & Keys::LEFT != 0;
    let right = k.0 & Keys::RIGHT != 0;
    if up != down {
        f |= if up { flags::FORWARD } else { flags::BACKWARD };
    }
    if left != right {
        f |= if left { flags::LEFT } else { flags::RIGHT };
    }
    if k.shoot() {
        f |= flags::ATTACK;
    }
    f
}

// Each dialect's codec names the same bits.
const _: () = {
    use super::codec::input;
    use crate::games::darkages::dialects::implementation::codec::flag;
    assert!(input::FORWARD == flags::FORWARD && flag::FORWARD == flags::FORWARD as u16);
    assert!(input::BACKWARD == flags::BACKWARD && flag::BACKWARD == flags::BACKWARD as u16);
    assert!(input::LEFT == flags::LEFT && flag::LEFT == flags::LEFT as u16);
    assert!(input::RIGHT == flags::RIGHT && flag::RIGHT == flags::RIGHT as u16);
    assert!(input::ATTACK == flags::ATTACK && flag::ATTACK == flags::ATTACK as u16);
};

#[cfg(test)]
mod tests {
    use super::*;

    /// A pong answers the ping whose token it echoes; one nothing sent is `pong_unknown`; a
    /// slot reused while its ping is unanswered is `ping_lost`.
    #[test]
    fn pongs_are_matched_by_token_and_a_reused_slot_is_a_lost_ping() {
        let t0 = Instant::now();
        let mut rec = Recorder::new();
        let mut p = Pings::new(Duration::from_millis(100));
        let first = p.send(t0, &mut rec);
        assert_eq!(first, 1);
        p.on_pong(t0 + Duration::from_millis(7), first, &mut rec);
        p.on_pong(t0 + Duration::from_millis(8), first, &mut rec);
        assert_eq!(rec.events.get("pong_unknown"), 1);
        // Tokens 2 to 10: token 9 takes answered token 1's slot, token 10 unanswered 2's.
        for _ in 0..=PINGS {
            p.send(t0, &mut rec);
        }
        assert_eq!(rec.events.get("ping_lost"), 1);
    }

    /// The handshake time runs from the first CONNECT; the play clock from admission.
    #[test]
    fn the_session_clock_times_the_handshake_and_play() {
        let t0 = Instant::now();
        let mut rec = Recorder::new();
        let mut s = Session::new();
        s.begin(t0, &BotParams::with_index(0, 1));
        assert_eq!(s.played(t0 + Duration::from_secs(1)), Duration::ZERO);
        s.established(t0 + Duration::from_millis(30), &mut rec);
        assert_eq!(s.ms(t0 + Duration::from_millis(1500)), 1500);
        assert_eq!(
            s.played(t0 + Duration::from_millis(1030)),
            Duration::from_secs(1)
        );
        assert_eq!(rec.connects_ok, 1);
    }

    #[test]
    fn opposite_keys_cancel_and_shooting_is_attack() {
        assert_eq!(keys_to_flags(Keys(Keys::UP | Keys::DOWN)), 0);
        assert_eq!(keys_to_flags(Keys(Keys::UP | Keys::LEFT)), 0b101);
        assert_eq!(keys_to_flags(Keys(Keys::RIGHT)), flags::RIGHT);
    }
}
