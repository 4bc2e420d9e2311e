//! Skirmish: the protocol of a made-up top-down arena game, load-tested with tickswarm.
//!
//! Raw UDP, little-endian, one message per datagram, the type in the first byte:
//!
//! | message | bytes |
//! |---|---|
//! | Hello (bot) | `1, version u8, nonce u32` |
//! | Welcome (server) | `0x81, nonce u32, player id u16` |
//! | Input (bot, 60 Hz) | `2, seq u32, acked tick u32, keys u8` |
//! | Snapshot (server, every tick) | `0x82, seq u32, tick u32, baseline u32, last input seq u32, inputs seen u32, n u8, n × (id u16, x i16, y i16)` |
//! | Ping / Pong | `3 / 0x83, token u32` |
//! | Bye (bot) | `4` |
//!
//! A snapshot lists the players that changed since `baseline`, the last tick the bot
//! acknowledged in an Input (0: a full snapshot); `x = i16::MIN` says a player left. Both
//! ends keep the last [`HISTORY`] worlds. Measured: RTT (Ping/Pong), downstream loss (the
//! snapshot `seq` per player), upstream loss (the server's `last input seq` and `inputs
//! seen`), and the protocol's own `baseline_age_ticks` and `full_snapshots`.
//!
//! Laid out as tickswarm's own games are: this file holds the protocol's marker and options,
//! `info` what it measures, `codec` the wire constants both ends share, `bot` the simulated
//! player and `server` the reference server.

mod bot;
mod codec;
mod info;
mod server;

use serde::{Deserialize, Serialize};
use std::time::Instant;
use tickswarm::api::*;

pub use bot::SkirmishBot;
pub use codec::{msg, SkirmishInspect, HISTORY, MAX_PLAYERS, VERSION};
pub use server::SkirmishServer;

/// The scenario's `protocol: { skirmish: { dialect: delta } }` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    /// How the server sends snapshots.
    pub dialect: Dialect,
}
/// `delta`: deltas on the baseline each player acknowledged; `full`: every player each tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum Dialect {
    #[default]
    Delta,
    Full,
}

/// The protocol's marker: what `tickswarm::main_with(&[&Skirmish])` registers.
pub struct Skirmish;

impl Protocol for Skirmish {
    type Options = Options;
    const INFO: ProtocolInfo = info::INFO;
    fn transport(_: &Options) -> TransportNeeds {
        TransportNeeds::Udp
    }
    fn validate(_: &Options, _: &ServerParams) -> Result<(), String> {
        Ok(()) // players_per_instance caps each server; nothing else to check
    }
    fn dialect_name(o: &Options) -> String {
        format!("{:?}", o.dialect).to_lowercase()
    }
    fn make_bot(_: &Options, params: BotParams) -> Box<dyn Bot> {
        Box::new(SkirmishBot::new(params))
    }
    fn make_server(o: &Options, server: &ServerParams, now: Instant) -> Box<dyn Server> {
        Box::new(SkirmishServer::new(o.clone(), server, now))
    }
    fn players_per_instance(_: &Options, _: &ServerParams) -> Option<usize> {
        Some(MAX_PLAYERS)
    }
    fn inspector(_: &Options) -> Option<Box<dyn inspect::Inspect>> {
        Some(Box::new(codec::SkirmishInspect))
    }
}
