#![doc = include_str!("../../../docs/protocols/cafe.md")]
//!
//! # In the code
//!
//! - [`codec`]: every wire rule.
//! - [`bot`]: the simulated client.
//! - [`server`]: the reference server.
//! - [`dialects`]: one folder per reading of the protocol other than the spec's;
//!   [`dialects::implementation`] holds the public server's prediction rule.
//! - `info`: the metric table ([`INFO`]).

pub mod bot;
pub mod codec;
pub mod dialects;
mod info;
pub mod server;

pub use info::INFO;

use crate::protocol::prelude::Metric;
use serde::{Deserialize, Serialize};

pub use bot::CafeBot;
pub use codec::Dialect;
pub use server::{CafeServer, CafeServerConfig};

use std::time::Instant;

use crate::protocol::prelude::{Bot, BotParams, ProtocolInfo, Server};
use crate::protocol::prelude::{DatagramBurst, Protocol, ServerParams, TransportNeeds};

pub const DEFAULT_PORT: u16 = 4242;

/// Where downstream loss is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LossSource {
    /// `sequence` in the spec dialect, `tick` in the implementation dialect (whose server
    /// numbers datagrams with one counter shared by all clients).
    #[default]
    Auto,
    /// The header's per-connection `seq` (the project's reading), checked against the snapshot
    /// ticks before it is counted: a counter shared by all clients (gaps the ticks do not
    /// explain, whenever they appear) makes the bot count snapshot ticks instead, for good,
    /// and say so (`shared_sequence_detected`). See [`bot::loss`].
    Sequence,
    /// Snapshot ticks, for servers whose `seq` is global across clients: the bot expects one
    /// snapshot every `snapshot_tick_step` ticks (learned from the first ticks when unset).
    Tick,
}

impl LossSource {
    /// `Auto` resolved for a dialect.
    pub fn resolve(self, dialect: Dialect) -> LossSource {
        match (self, dialect) {
            (LossSource::Auto, Dialect::Spec) => LossSource::Sequence,
            (LossSource::Auto, Dialect::Implementation) => LossSource::Tick,
            (s, _) => s,
        }
    }
}

/// The protocol section of a cafe scenario.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CafeOptions {
    pub dialect: Dialect,
    pub loss_source: LossSource,
    /// With snapshot-tick loss: ticks between two snapshots the server sends. Unset: the gcd
    /// of the tick differences of the first 8 snapshots.
    pub snapshot_tick_step: Option<u32>,
    /// World units a second the server moves a player whose keys are held: the bot's own
    /// prediction, reconciled against `last_input` in the implementation dialect
    /// (`prediction_error`). The default is the reference server's.
    pub player_speed: f32,
}

impl Default for CafeOptions {
    fn default() -> Self {
        Self {
            dialect: Dialect::Spec,
            loss_source: LossSource::Auto,
            snapshot_tick_step: None,
            player_speed: server::PLAYER_SPEED,
        }
    }
}

/// The registry entry.
pub struct Cafe;

impl Protocol for Cafe {
    type Options = CafeOptions;
    const INFO: ProtocolInfo = INFO;

    fn transport(_: &CafeOptions) -> TransportNeeds {
        TransportNeeds::Udp
    }

    /// Snapshots fill at most one 1500-byte datagram (44 records); 32 of them is half a
    /// second of a 60 Hz server's snapshots waiting for a descheduled worker.
    fn receive_burst(_: &CafeOptions) -> DatagramBurst {
        DatagramBurst {
            largest: crate::protocol::prelude::MAX_DATAGRAM,
            count: 32,
        }
    }

    fn validate(o: &CafeOptions, s: &ServerParams) -> Result<(), String> {
        if o.snapshot_tick_step == Some(0) {
            return Err("snapshot_tick_step must be at least 1".into());
        }
        if !(o.player_speed.is_finite() && o.player_speed >= 0.0) {
            return Err("player_speed must be a finite number of units a second, 0 or more".into());
        }
        // Every member of a room rides in each snapshot: 44 records fill a datagram.
        if s.room_size.is_some_and(|r| !(1..=44).contains(&r)) {
            return Err(
                "server.room_size: cafe rooms hold 1 to 44 players (44 records fill a datagram)"
                    .into(),
            );
        }
        if s.max_clients > 65_535 {
            return Err("server.max_clients: cafe player ids are 16-bit (at most 65535)".into());
        }
        Ok(())
    }

    fn dialect_name(o: &CafeOptions) -> String {
        format!("{:?}", o.dialect).to_lowercase()
    }

    fn make_bot(o: &CafeOptions, params: BotParams) -> Box<dyn Bot> {
        Box::new(CafeBot::new(params, o.clone()))
    }

    fn make_server(o: &CafeOptions, s: &ServerParams, now: Instant) -> Box<dyn Server> {
        let mut cfg = CafeServerConfig::for_dialect(o.dialect);
        cfg.tick_rate = s.tick_rate;
        cfg.full_every = s.full_every;
        cfg.max_clients = s.max_clients;
        cfg.client_timeout = s.client_timeout.0;
        if let Some(r) = s.room_size {
            cfg.room_size = r;
        }
        Box::new(CafeServer::new(cfg, now))
    }

    fn inspector(o: &CafeOptions) -> Option<Box<dyn crate::protocol::prelude::inspect::Inspect>> {
        Some(Box::new(codec::inspect::CafeInspect::new(o.dialect)))
    }

    fn cannot_measure(_: &CafeOptions, metric: Metric) -> Option<&'static str> {
        // Neither dialect's server says anything back about the inputs it received.
        (metric == Metric::UpstreamLoss).then_some("a cafe server acknowledges no input")
    }
}
