//! Naming a wrong dialect: a run pointed at a server that speaks another dialect of the
//! protocol than the scenario says should say which one to set, not only count decode errors.
//!
//! [`WithHint`] wraps a bot, unchanged: every datagram is shown to a [`Hint`] first, which
//! names the dialect it reads as (a counter such as `dialect_hint.implementation`), then
//! handed to the bot as it came. Everything else goes straight to the bot. rtype and
//! ZergCity wrap their spec dialect's bot in it.
//!
//! ```
//! use tickswarm::api::hint::{Hint, WithHint};
//! struct Legacy;
//! impl Hint for Legacy {
//!     fn other_dialect(&self, data: &[u8]) -> Option<&'static str> {
//!         data.starts_with(b"OLD").then_some("dialect_hint.legacy")
//!     }
//! }
//! # fn wrap(bot: Box<dyn tickswarm::api::Bot>) -> WithHint<Box<dyn tickswarm::api::Bot>, Legacy> {
//! WithHint::new(bot, Legacy)
//! # }
//! ```

use std::time::Instant;

use super::prelude::{Bot, BotPhase, Phase, Recorder, Relink, Transmit};

/// Tells whether a datagram reads as another dialect's.
pub trait Hint: Send {
    /// The counter to add for `data` (`dialect_hint.<dialect>`), or `None`. Called for every
    /// datagram the bot gets: cheap checks first.
    fn other_dialect(&self, data: &[u8]) -> Option<&'static str>;
}

/// A bot with its wrong-dialect datagrams named (see the module docs).
pub struct WithHint<B, H> {
    bot: B,
    hint: H,
}

impl<B, H> WithHint<B, H> {
    /// `bot`, its datagrams shown to `hint` first.
    pub fn new(bot: B, hint: H) -> Self {
        Self { bot, hint }
    }

    /// The bot inside.
    pub fn bot(&self) -> &B {
        &self.bot
    }
}

impl<B: Bot, H: Hint> Bot for WithHint<B, H> {
    fn start(&mut self, now: Instant, rec: &mut Recorder) {
        self.bot.start(now, rec)
    }
    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        if let Some(hint) = self.hint.other_dialect(data) {
            rec.event(hint);
        }
        self.bot.handle_datagram(now, data, rec)
    }
    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        self.bot.handle_timeout(now, rec)
    }
    fn stop(&mut self, now: Instant, rec: &mut Recorder) {
        self.bot.stop(now, rec)
    }
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        self.bot.poll_transmit(buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.bot.poll_timeout()
    }
    fn phase(&self) -> BotPhase {
        self.bot.phase()
    }
    fn life_phase(&self) -> Phase {
        self.bot.life_phase()
    }
    fn waiting_for(&self) -> Option<&'static str> {
        self.bot.waiting_for()
    }
    fn handle_stream(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        self.bot.handle_stream(now, data, rec)
    }
    fn handle_transport_closed(&mut self, now: Instant, rec: &mut Recorder) {
        self.bot.handle_transport_closed(now, rec)
    }
    fn poll_relink(&mut self) -> Option<Relink> {
        self.bot.poll_relink()
    }
    fn handle_relinked(&mut self, now: Instant, rec: &mut Recorder) {
        self.bot.handle_relinked(now, rec)
    }
    fn resume_state(&self) -> Option<Vec<u8>> {
        self.bot.resume_state()
    }
    fn resume_from(&mut self, state: &[u8]) {
        self.bot.resume_from(state)
    }
    fn resumed(&self) -> Option<bool> {
        self.bot.resumed()
    }
}
