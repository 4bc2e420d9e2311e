//! Everything a protocol implements and uses, in one place: the public protocol API.
//!
//! A protocol is a marker type implementing [`Protocol`] (its [`ProtocolInfo`], its typed
//! scenario options, its [`TransportNeeds`], and how to make a [`Bot`] and a reference
//! [`Server`]). The bot and the server are sans-IO state machines: they are handed the time
//! and datagrams, and hand back [`Transmit`]s and timeouts; metrics go into the caller's
//! [`Recorder`]. [`sim`] drives them on a simulated clock and a lossy link in tests, and
//! `tickswarm::main_with` runs them under the whole command line.
//!
//! The five built-in protocols (`tickswarm::games::{cafe, rtype, city, zergcity,
//! darkages}`) are written against this module and nothing else of the crate (a test reads
//! their sources to keep it so); read them as larger examples. The toolkit modules re-exported
//! here ([`wire`], [`seqwindow`], [`acks`], [`ping`], [`timers`], [`session`], [`predict`],
//! [`hint`], ...) are the pieces they share; a protocol may use them or not.
//!
//! `tickswarm::api` re-exports this module and adds the entry point and `register`.
//!
//! ```
//! use tickswarm::protocol::prelude::*;
//! let t = Transmit::datagram(12);
//! assert_eq!((t.len, t.channel, t.reliable), (12, 0, false));
//! assert!(MAX_DATAGRAM >= 1200);
//! ```

pub use super::registry::{
    AnyProtocol, DatagramBurst, EnetCompression, EnetNeeds, Protocol, ProtocolName,
    ProtocolSection, ServerParams, TransportNeeds,
};
pub use super::{
    Bot, BotParams, BotPhase, ConnId, InputPattern, Keys, PatternState, Phase, ProtocolInfo,
    Relink, Server, ServerStats, Transmit, MAX_DATAGRAM, MAX_MESSAGE, MAX_TRACKED_ENTITIES,
};
pub use crate::duration::Dur;
pub use crate::metrics::describe::{Display, MetricDesc};
pub use crate::metrics::threshold::Metric;
pub use crate::metrics::{LossCounts, NamedCounters, Recorder, WireCounts};

pub use super::{
    acks, admission, hint, idmap, input_grid, inspect, pattern, ping, predict, seqwindow, session,
    sim, tail, timers, wire,
};

/// The seeded generator [`BotParams::seed`] is for ([`PatternState::sample`] takes one), and
/// the traits to seed it and draw from it, so a protocol crate needs no `rand` of its own.
pub use rand::{Rng, RngCore, SeedableRng};
pub use rand_chacha::ChaCha8Rng;
