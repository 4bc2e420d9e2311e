//! The spec dialect's bot, with the wrong dialect named: a datagram the spec dialect cannot
//! use that reads cleanly as the real server's counts `dialect_hint.implementation`, so a
//! run pointed at the real server with the spec dialect says what to set.
//!
//! A wrapper, so the spec bot itself is untouched: it checks only datagrams the spec codec
//! refuses (unknown type or malformed), then hands every datagram on unchanged.

use std::time::Instant;

use super::codec;
use crate::protocol::prelude::Recorder;
use crate::protocol::prelude::{Bot, BotPhase, Phase, Relink, Transmit};
use crate::protocol::rtype::{codec as spec_codec, RtypeBot};

pub struct SpecWithHint {
    bot: RtypeBot,
    float_order: spec_codec::FloatOrder,
}

impl SpecWithHint {
    pub fn new(bot: RtypeBot, float_order: spec_codec::FloatOrder) -> Self {
        Self { bot, float_order }
    }
}

impl Bot for SpecWithHint {
    fn start(&mut self, now: Instant, rec: &mut Recorder) {
        self.bot.start(now, rec)
    }
    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        if spec_codec::decode(data, self.float_order).is_err() && codec::fits(data) {
            rec.event("dialect_hint.implementation");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::prelude::BotParams;
    use crate::protocol::rtype::RtypeOptions;

    /// The real server's ACCEPT (0x10) is an unknown type to the spec dialect: named.
    #[test]
    fn the_real_servers_accept_is_named() {
        let o = RtypeOptions::default();
        let mut b = SpecWithHint::new(
            RtypeBot::new(BotParams::with_index(0, 1), o.clone()),
            o.float_order,
        );
        let mut rec = Recorder::new();
        b.start(Instant::now(), &mut rec);
        b.handle_datagram(Instant::now(), &[codec::ACCEPT, 1, 0, 4], &mut rec);
        assert_eq!(rec.events.get("dialect_hint.implementation"), 1);
        // The spec's own ACCEPT (10) is not.
        b.handle_datagram(Instant::now(), &[10, 1, 0, 4], &mut rec);
        assert_eq!(rec.events.get("dialect_hint.implementation"), 1);
        assert_eq!(b.phase(), BotPhase::Connected);
    }
}
