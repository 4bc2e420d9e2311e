//! The spec dialect's bot, with the wrong dialect named: a datagram the spec dialect cannot
//! use that reads cleanly as the real server's counts `dialect_hint.implementation`, so a
//! run pointed at the real server with the spec dialect says what to set.
//!
//! A wrapper (the toolkit's `hint::WithHint`), so the spec bot itself is untouched: it checks only datagrams the spec codec
//! refuses (unknown type or malformed), then hands every datagram on unchanged.

use super::codec;
use crate::games::rtype::{codec as spec_codec, RtypeBot};
use crate::protocol::prelude::hint::{Hint, WithHint};

/// The spec dialect's bot, with the real server's bytes named.
pub type SpecWithHint = WithHint<RtypeBot, ImplementationBytes>;

/// Names the real server's bytes among what the spec dialect's bot gets: only datagrams the
/// spec codec refuses (unknown type or malformed) are looked at.
pub struct ImplementationBytes {
    pub float_order: spec_codec::FloatOrder,
}

impl Hint for ImplementationBytes {
    fn other_dialect(&self, data: &[u8]) -> Option<&'static str> {
        (spec_codec::decode(data, self.float_order).is_err() && codec::fits(data))
            .then_some("dialect_hint.implementation")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::games::rtype::RtypeOptions;
    use crate::protocol::prelude::{Bot, BotParams, BotPhase, Recorder};

    /// The real server's ACCEPT (0x10) is an unknown type to the spec dialect: named.
    #[test]
    fn the_real_servers_accept_is_named() {
        let o = RtypeOptions::default();
        let mut b = SpecWithHint::new(
            RtypeBot::new(BotParams::with_index(0, 1), o.clone()),
            ImplementationBytes {
                float_order: o.float_order,
            },
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
