//! Naming a wrong ZergCity dialect when the benchmark is involved.
//!
//! - [`name_other_dialect`]: bytes the benchmark bot refused that read as the game server's
//!   envelope (`dialect_hint.implementation`) or as a message of the spec
//!   (`dialect_hint.spec`).
//! - [`SpecWithHint`]: the spec dialect's bot, unchanged, with the benchmark named: a
//!   datagram the spec codec refuses that fits the benchmark's compressed snapshots counts
//!   `dialect_hint.benchmark`. A wrapper, so the spec bot itself is untouched.

use std::time::Instant;

use super::codec;
use crate::protocol::prelude::Recorder;
use crate::protocol::prelude::{Bot, BotPhase, Phase, Relink, Transmit};
use crate::protocol::zergcity::codec as spec_codec;
use crate::protocol::zergcity::implementation::codec as impl_codec;
use crate::protocol::zergcity::ZergCityBot;

thread_local! {
    /// The spec codec's decompressor, for the rare datagram a hint needs to try (a wrong
    /// dialect's), one per worker thread.
    static SPEC_DECOMPRESSOR: std::cell::RefCell<spec_codec::Decompressor> =
        std::cell::RefCell::new(spec_codec::Decompressor::new(spec_codec::MAX_PAYLOAD));
}

/// Whether the spec codec reads `data` as a known message.
fn spec_reads(data: &[u8]) -> bool {
    SPEC_DECOMPRESSOR.with(|cell| {
        cell.try_borrow_mut().is_ok_and(
            |mut dec| matches!(spec_codec::decode(data, &mut dec), Ok(d) if d.message.is_some()),
        )
    })
}

/// A datagram the benchmark codec refused: count the dialect it fits, if any.
pub fn name_other_dialect(data: &[u8], rec: &mut Recorder) {
    if impl_codec::fits(data) {
        rec.event("dialect_hint.implementation");
    } else if data.starts_with(&codec::MAGIC) && spec_reads(data) {
        rec.event("dialect_hint.spec");
    }
}

/// The spec dialect's bot, with the benchmark server's bytes named.
pub struct SpecWithHint {
    bot: ZergCityBot,
}

impl SpecWithHint {
    pub fn new(bot: ZergCityBot) -> Self {
        Self { bot }
    }
}

impl Bot for SpecWithHint {
    fn start(&mut self, now: Instant, rec: &mut Recorder) {
        self.bot.start(now, rec)
    }
    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        // `fits` first: it is cheap and false for every spec message the server sends.
        if codec::fits(data) && !spec_reads(data) {
            rec.event("dialect_hint.benchmark");
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
}
