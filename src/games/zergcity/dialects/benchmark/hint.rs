//! Naming a wrong ZergCity dialect when the benchmark is involved.
//!
//! - [`name_other_dialect`]: bytes the benchmark bot refused that read as the game server's
//!   envelope (`dialect_hint.implementation`) or as a message of the spec
//!   (`dialect_hint.spec`).
//! - [`SpecWithHint`]: the spec dialect's bot, unchanged, with the benchmark named: a
//!   datagram the spec codec refuses that fits the benchmark's compressed snapshots counts
//!   `dialect_hint.benchmark`. A wrapper (the toolkit's `hint::WithHint`), so the spec bot
//!   itself is untouched.

use super::codec;
use crate::games::zergcity::codec as spec_codec;
use crate::games::zergcity::dialects::implementation::codec as impl_codec;
use crate::games::zergcity::ZergCityBot;
use crate::protocol::prelude::hint::{Hint, WithHint};
use crate::protocol::prelude::Recorder;

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
pub type SpecWithHint = WithHint<ZergCityBot, BenchmarkBytes>;

/// Names the benchmark server's bytes among what the spec dialect's bot gets.
pub struct BenchmarkBytes;

impl Hint for BenchmarkBytes {
    fn other_dialect(&self, data: &[u8]) -> Option<&'static str> {
        // `fits` first: it is cheap and false for every spec message the server sends.
        (codec::fits(data) && !spec_reads(data)).then_some("dialect_hint.benchmark")
    }
}
