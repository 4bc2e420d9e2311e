#![doc = include_str!("../../../docs/protocols/rtype.md")]
//!
//! # In the code
//!
//! - [`codec`]: every wire rule, and the spec gaps of the format.
//! - [`bot`]: the simulated client.
//! - [`server`]: the reference server, and the spec gaps of its behaviour.

pub mod bot;
pub mod codec;
pub mod server;

use crate::protocol::prelude::Metric;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use bot::RtypeBot;
pub use codec::FloatOrder;
pub use server::{RtypeServer, RtypeServerConfig};

use std::time::Instant;

use crate::protocol::prelude::{Bot, BotParams, ProtocolInfo, Server};
use crate::protocol::prelude::{Display, MetricDesc};
use crate::protocol::prelude::{Protocol, ServerParams, TransportNeeds};

/// The spec names no port. 4243 sits next to cafe's 4242 so both reference servers can run
/// on one host; point the swarm elsewhere with `--target`.
pub const DEFAULT_PORT: u16 = 4243;

pub const INFO: ProtocolInfo = ProtocolInfo {
    name: "rtype",
    spec: "docs/protocols/rtype.md",
    transport: "raw UDP",
    default_port: DEFAULT_PORT,
    rtt: "PING has no payload: one PING in flight, matched to the next PONG (µs clock kept by the bot); \
          a PONG after the timeout is counted late (pong_late), not sampled",
    downstream_loss: "snapshot tick differences (wrap-safe) in units of the server's tick step (learned from the first \
                      snapshots, or snapshot_tick_step): gaps, reordering, duplicates; no other packet \
                      carries a sequence",
    upstream_loss: "not measurable: no packet carries a client sequence and the server acknowledges no input",
    dialects: &[
        (
            "big",
            "float_order: big — floats in network order, as §7's hex example and the real implementation (default)",
        ),
        (
            "little",
            "float_order: little — floats copied natively (x86), as §2's \"no endian conversion\" reads",
        ),
    ],
    metrics: &[
        MetricDesc::micros(
            "snapshot_jitter_us",
            "Snapshot jitter",
            "arrival against the delivered tick rate",
        ),
        MetricDesc::micros(
            "interp_delay_us",
            "Interpolation delay",
            "buffer needed to stay smooth",
        ),
        MetricDesc::micros(
            "extrapolation_us",
            "Extrapolation",
            "each stretch a client rendering render_delay_ms behind ran past its newest snapshot",
        ),
        MetricDesc::count(
            "render_extrapolating_us",
            "Time extrapolating",
            "µs in all that clients rendered past their newest snapshot (of render_us)",
        ),
        MetricDesc::count(
            "render_us",
            "Time rendered",
            "µs from each bot's first snapshot to its last, summed",
        ),
        MetricDesc::micros("rejoin_us", "Rejoin time", "GAMEOVER to the next ACCEPT")
            .display(Display::Table),
        MetricDesc::histogram(
            "snapshot_age_ticks",
            "Snapshot age",
            "ticks behind the newest seen",
            "ticks",
        ),
        MetricDesc::histogram(
            "entities",
            "Entities",
            "entities in a bot's table per snapshot",
            "entities",
        ),
        MetricDesc::histogram(
            "snapshot_tick_step",
            "Snapshot tick step",
            "server ticks between snapshots, as learned",
            "ticks",
        ),
    ],
};

/// Which `clientId` a bot puts in CONNECT (and in INPUT until it learns its entity).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientIdMode {
    /// `client_id_base + bot index`: distinct per bot, so the bot can recognise its own ship
    /// as the ENTITY_CREATE (or snapshot entity) whose id equals its clientId.
    #[default]
    Index,
    /// 0, "auto-assignment" (§4.1). The bot then never learns its entity and keeps sending 0
    /// in INPUT; servers that find the player by source address (the reference server does)
    /// do not care.
    Zero,
}

/// The protocol section of an R-Type scenario.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RtypeOptions {
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

    fn transport(_: &RtypeOptions) -> TransportNeeds {
        TransportNeeds::Udp
    }

    fn validate(o: &RtypeOptions, s: &ServerParams) -> Result<(), String> {
        o.validate()?;
        Self::server_config(o, s)
            .validate()
            .map_err(|m| format!("server: {m}"))
    }

    fn dialect_name(o: &RtypeOptions) -> String {
        format!("float_order={}", o.dialect_name())
    }

    fn make_bot(o: &RtypeOptions, params: BotParams) -> Box<dyn Bot> {
        Box::new(RtypeBot::new(params, o.clone()))
    }

    fn make_server(o: &RtypeOptions, s: &ServerParams, now: Instant) -> Box<dyn Server> {
        Box::new(RtypeServer::new(Self::server_config(o, s), now))
    }

    fn cannot_measure(_: &RtypeOptions, metric: Metric) -> Option<&'static str> {
        (metric == Metric::UpstreamLoss)
            .then_some("no packet carries a client sequence and the server acknowledges no input")
    }
}
