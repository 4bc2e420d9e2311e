#![doc = include_str!("../../../docs/protocols/rtype.md")]
//!
//! # In the code
//!
//! - [`codec`]: every wire rule, and the spec gaps of the format.
//! - [`bot`]: the simulated client.
//! - [`server`]: the reference server, and the spec gaps of its behaviour.
//! - [`dialects::implementation`]: `dialect: implementation`, the real server's TCP login and
//!   UDP format.
//! - `info`: the metric table ([`INFO`]).

pub mod bot;
pub mod codec;
pub mod dialects;
mod info;
pub mod server;

pub use info::INFO;

use crate::protocol::prelude::Metric;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use bot::RtypeBot;
pub use codec::FloatOrder;
pub use server::{RtypeServer, RtypeServerConfig};

use std::time::Instant;

use crate::protocol::prelude::{Bot, BotParams, ProtocolInfo, Server};
use crate::protocol::prelude::{Protocol, ServerParams, TransportNeeds};

/// The spec names no port. 4243 sits next to cafe's 4242 so both reference servers can run
/// on one host; point the swarm elsewhere with `--target`.
pub const DEFAULT_PORT: u16 = 4243;

/// Which `clientId` a bot puts in CONNECT (and in INPUT until it learns its entity).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientIdMode {
    /// `client_id_base + bot index`: distinct per bot, so the bot can recognise its own ship
    /// as the ENTITY_CREATE (or snapshot entity) whose id equals its clientId.
    #[default]
    Index,
    /// 0, "auto-assignment" (§4.1). The bot learns its entity only from the order rule (the
    /// first ENTITY_CREATE after ACCEPT, as the reference server sends it) and sends 0 in
    /// INPUT until then.
    Zero,
}

/// Which server the bots speak to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RtypeDialect {
    /// docs/protocols/rtype.md as written (the reference server's).
    #[default]
    Spec,
    /// The real server the spec documents: a TCP login, then UDP (module [`dialects::implementation`]).
    Implementation,
}

/// The protocol section of an R-Type scenario.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RtypeOptions {
    /// `spec` (default) or `implementation`.
    pub dialect: RtypeDialect,
    /// Implementation dialect: the target is the server's TCP port (its `--port`, 8080 by
    /// default); play goes to the TCP port + this (the server binds UDP on port + 1).
    pub udp_port_offset: u16,
    /// Byte order of float fields (docs/protocols/rtype.md, "Dialects"): `big` (default) or
    /// `little`.
    pub float_order: FloatOrder,
    /// Ticks between two snapshots the server sends; unset: learned from the first snapshots
    /// (the greatest common divisor of their tick differences).
    pub snapshot_tick_step: Option<u32>,
    /// After GAMEOVER, send CONNECT again and play on with a new ship. Off: the bot stays in
    /// the session as a spectator (snapshots, pings, no inputs).
    pub rejoin_on_gameover: bool,
    /// After REJECT, try again later instead of failing.
    pub retry_on_reject: bool,
    /// First wait after a REJECT; doubled after each further one, up to `retry_backoff_max_ms`,
    /// with seeded jitter (a random point in the upper half of the wait).
    pub retry_backoff_ms: u64,
    pub retry_backoff_max_ms: u64,
    /// CONNECT attempts rejected before the bot gives up (counted as `rejected`).
    pub retry_limit: u32,
    pub client_id: ClientIdMode,
    /// With `client_id: index`, the id of bot 0 (clientId 0 means auto-assignment, so 1).
    pub client_id_base: u32,
    /// How far behind its newest snapshot the simulated client renders (§9's interpolation,
    /// with snapshots at 20-30 Hz): 100 ms is two snapshots at 20 Hz. When a gap between
    /// snapshots is longer, the client runs out of snapshots to interpolate towards and
    /// extrapolates; the bot measures that time (`extrapolation_us`, `render_extrapolating_us`).
    pub render_delay_ms: u64,
}

impl Default for RtypeOptions {
    fn default() -> Self {
        Self {
            dialect: RtypeDialect::Spec,
            udp_port_offset: 1,
            float_order: FloatOrder::Big,
            snapshot_tick_step: None,
            rejoin_on_gameover: false,
            retry_on_reject: false,
            retry_backoff_ms: 500,
            retry_backoff_max_ms: 8_000,
            retry_limit: 5,
            client_id: ClientIdMode::Index,
            client_id_base: 1,
            render_delay_ms: 100,
        }
    }
}

impl RtypeOptions {
    /// The dialect name for reports (`summary.json`'s `dialect`).
    pub fn dialect_name(&self) -> &'static str {
        self.float_order.as_str()
    }

    /// Check values a scenario may get wrong; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.dialect == RtypeDialect::Implementation {
            if self.float_order != FloatOrder::Big {
                return Err(
                    "float_order: the implementation dialect's floats are big-endian \
                            (its server byte-swaps them); leave float_order unset"
                        .into(),
                );
            }
            if self.udp_port_offset == 0 {
                return Err(
                    "udp_port_offset must be at least 1: the server's UDP port is its \
                            TCP port + 1"
                        .into(),
                );
            }
        }
        if self.snapshot_tick_step == Some(0) {
            return Err("snapshot_tick_step must be at least 1 (or left unset to learn it)".into());
        }
        if self.retry_on_reject && self.retry_backoff_ms == 0 {
            return Err("retry_backoff_ms must be above 0 when retry_on_reject is set".into());
        }
        if self.retry_backoff_max_ms < self.retry_backoff_ms {
            return Err("retry_backoff_max_ms must be at least retry_backoff_ms".into());
        }
        Ok(())
    }

    /// The clientId bot `index` sends.
    pub fn client_id_for(&self, index: u32) -> u32 {
        match self.client_id {
            ClientIdMode::Index => self.client_id_base.wrapping_add(index),
            ClientIdMode::Zero => 0,
        }
    }

    pub(crate) fn backoff(&self, rejections: u32) -> Duration {
        let base = self.retry_backoff_ms.max(1);
        let shift = rejections.saturating_sub(1).min(20);
        let ms = base
            .saturating_mul(1u64 << shift)
            .min(self.retry_backoff_max_ms.max(base));
        Duration::from_millis(ms)
    }
}

/// The registry entry.
pub struct Rtype;

impl Rtype {
    /// The reference server's configuration from the options and the server parameters.
    pub fn server_config(o: &RtypeOptions, s: &ServerParams) -> RtypeServerConfig {
        let mut cfg = RtypeServerConfig {
            sim_hz: u32::from(s.tick_rate),
            max_clients: s.max_clients,
            client_timeout: s.client_timeout.0,
            float_order: o.float_order,
            ..RtypeServerConfig::default()
        };
        if let Some(r) = s.snapshot_rate {
            cfg.snapshot_hz = r;
        }
        if let Some(r) = s.room_size {
            cfg.room_size = r;
        }
        cfg
    }
}

impl Protocol for Rtype {
    type Options = RtypeOptions;
    const INFO: ProtocolInfo = INFO;
    const DIALECT_KEY: &'static str = "float_order";

    fn transport(o: &RtypeOptions) -> TransportNeeds {
        match o.dialect {
            RtypeDialect::Spec => TransportNeeds::Udp,
            RtypeDialect::Implementation => TransportNeeds::UdpTcpLogin {
                udp_port_offset: o.udp_port_offset,
            },
        }
    }

    fn validate(o: &RtypeOptions, s: &ServerParams) -> Result<(), String> {
        o.validate()?;
        Self::server_config(o, s)
            .validate()
            .map_err(|m| format!("server: {m}"))
    }

    fn dialect_name(o: &RtypeOptions) -> String {
        match o.dialect {
            RtypeDialect::Spec => format!("float_order={}", o.dialect_name()),
            RtypeDialect::Implementation => "implementation".into(),
        }
    }

    fn make_bot(o: &RtypeOptions, params: BotParams) -> Box<dyn Bot> {
        match o.dialect {
            RtypeDialect::Spec => Box::new(dialects::implementation::SpecWithHint::new(
                RtypeBot::new(params, o.clone()),
                dialects::implementation::hint::ImplementationBytes {
                    float_order: o.float_order,
                },
            )),
            RtypeDialect::Implementation => {
                Box::new(dialects::implementation::ImplementationBot::new(params))
            }
        }
    }

    fn make_server(o: &RtypeOptions, s: &ServerParams, now: Instant) -> Box<dyn Server> {
        Box::new(RtypeServer::new(Self::server_config(o, s), now))
    }

    /// The spec reader of the options' float order, or the implementation dialect's (its UDP
    /// play and its TCP login).
    fn inspector(o: &RtypeOptions) -> Option<Box<dyn crate::protocol::prelude::inspect::Inspect>> {
        Some(match o.dialect {
            RtypeDialect::Spec => Box::new(codec::inspect::RtypeInspect::new(o.float_order)),
            RtypeDialect::Implementation => {
                Box::new(dialects::implementation::inspect::ImplementationInspect::new())
            }
        })
    }

    fn cannot_measure(o: &RtypeOptions, metric: Metric) -> Option<&'static str> {
        match (o.dialect, metric) {
            (_, Metric::UpstreamLoss) => {
                Some("no packet carries a client sequence and the server acknowledges no input")
            }
            (RtypeDialect::Implementation, Metric::DownstreamLoss) => Some(
                "the real server's snapshots carry no tick or sequence number, and no other \
                 datagram does: a lost one leaves no trace",
            ),
            _ => None,
        }
    }
}
