#![doc = include_str!("../../../docs/protocols/city.md")]
//!
//! # In the code
//!
//! - [`codec`]: every wire rule, and the TileMap / ComponentData layouts the reference server
//!   defines.
//! - [`bot`]: the simulated client, with client-side prediction and server reconciliation.
//! - [`server`]: the reference server.
//! - [`dialects::implementation`]: what the public server does differently;
//!   [`dialects::implementation::predict`] is its grid mover and the bot's prediction of it.
//! - `info`: the metric table ([`INFO`]).
//!
//! Both state machines exchange *ENet packet payloads* (several City messages back to back)
//! and mark each [`Transmit`](crate::protocol::prelude::Transmit) with its channel: 0 reliable ordered,
//! 1 unreliable sequenced. The engine owns the ENet host; the bot's life starts with
//! `start(now)` once ENet connected and ends with `handle_transport_closed` or a Disconnect.
//!
//! ## How the bot measures
//! - **RTT**: Ping/Pong on the unreliable channel. Both are empty, so the bot keeps one Ping
//!   in flight ([`OneInFlight`](crate::protocol::prelude::ping::OneInFlight)): a Ping due while one is
//!   in flight is skipped, one unanswered after the timeout is given up (`ping_timeout`) and
//!   the next waits one more interval, so a late Pong is counted `pong_late` and never paired
//!   with a newer Ping. ENet's own smoothed RTT (from its reliable acks) is the second source;
//!   the engine reads it from the transport.
//! - **Downstream loss**: DeltaState ticks. The server sends each client in game one DeltaState
//!   per simulation tick on the unreliable channel, so a tick gap is a lost packet. Counted
//!   from the first DeltaState received; the header `sequence` is not used (the spec does not
//!   say what it counts).
//! - **Upstream loss**: PlayerInput ticks against InputAcks. The reference server acknowledges
//!   every input it accepts with an InputAck on the reliable channel; an input not acknowledged
//!   within `input_ack_timeout_ms` counts as lost. Exact against the reference server; against a
//!   server that acks unreliably, acks only some inputs or rate-limits, it errs high.
//! - **Prediction**: see [`bot`]. The spec dialect predicts with [`step`] and compares at
//!   `last_acked_input`; the implementation dialect predicts with the variant's own mover
//!   ([`dialects::implementation::predict::Mover`]) and, without acks, compares each DeltaState record with the
//!   prediction for its tick, explaining from the record's own fields what a bot cannot know
//!   (`prediction_timing_slips`, `move_refused`). `prediction_error` is a histogram in
//!   milli-tiles (1/1000 of a tile; an exact prediction records 1, the histogram's floor),
//!   `corrections` counts predictions the server overruled,
//!   `input_ack_latency_us` is input send to InputAck, `extrapolation_gaps` counts remote
//!   entities whose interpolation buffer ran dry while they were moving,
//!   `content_time_us` is ServerHello to ContentComplete.

pub mod bot;
pub mod codec;
pub mod dialects;
mod info;
pub mod server;

pub use info::INFO;

use crate::protocol::prelude::Metric;
use serde::{Deserialize, Serialize};

pub use bot::CityBot;
pub use codec::{Dialect, Vec2f};
pub use server::{CityServer, CityServerConfig};

use std::time::Instant;

use crate::protocol::prelude::{Bot, BotParams, ProtocolInfo, Server};
use crate::protocol::prelude::{
    DatagramBurst, EnetCompression, EnetNeeds, Protocol, ServerParams, TransportNeeds,
};

pub const DEFAULT_PORT: u16 = 7777;
/// City's ENet channel count (0 reliable, 1 unreliable sequenced).
pub const CHANNELS: usize = 2;
/// Players per server instance (city.md's MAX_PLAYERS).
pub const MAX_PLAYERS: usize = 100;

/// Chat channel the bots talk on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatChannel {
    #[default]
    Global,
    Local,
    Team,
    /// To one other bot: bots are paired by index (0 and 1, 2 and 3, ...) and whisper to
    /// their partner by name; the server delivers to the target and back to the sender.
    Whisper,
}

impl ChatChannel {
    pub fn wire(self) -> u8 {
        match self {
            ChatChannel::Global => codec::CHAT_GLOBAL,
            ChatChannel::Local => codec::CHAT_LOCAL,
            ChatChannel::Team => codec::CHAT_TEAM,
            ChatChannel::Whisper => codec::CHAT_WHISPER,
        }
    }
}

/// The protocol section of a city scenario.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CityOptions {
    pub dialect: Dialect,
    /// Share of the manifest's assets each bot already has cached (0..=1); the bot requests
    /// the rest. Which assets are cached is decided per bot from its seed.
    pub cached_content_share: f64,
    /// Chat messages per minute per bot (0 = silent). The reference server allows 30.
    pub chat_rate: f64,
    pub chat_channel: ChatChannel,
    /// Distance in tiles between the predicted and the server position (at
    /// `last_acked_input`) above which the bot snaps to the server and replays.
    pub prediction_error_threshold: f32,
    /// Remote entities are drawn this far behind the newest server tick (city.md: 100 ms).
    pub interpolation_delay_ms: u64,
    /// `protocol_version` sent in ClientHello; set it to something other than 1 to exercise
    /// the VersionMismatch path.
    pub protocol_version: u32,
    /// `client_version` sent in ClientHello.
    pub client_version: String,
    /// Player names are `<prefix>-<bot index>`.
    pub name_prefix: String,
    /// An input without an InputAck after this long counts as lost upstream.
    pub input_ack_timeout_ms: u64,
}

impl Default for CityOptions {
    fn default() -> Self {
        Self {
            dialect: Dialect::Spec,
            cached_content_share: 0.0,
            chat_rate: 0.0,
            chat_channel: ChatChannel::Global,
            prediction_error_threshold: 0.01,
            interpolation_delay_ms: 100,
            protocol_version: codec::PROTOCOL_VERSION,
            client_version: concat!("tickswarm/", env!("CARGO_PKG_VERSION")).to_string(),
            name_prefix: "bot".to_string(),
            input_ack_timeout_ms: 2000,
        }
    }
}

impl CityOptions {
    /// Range checks the scenario validator should run.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.cached_content_share) {
            return Err(format!(
                "cached_content_share must be within 0..=1, got {}",
                self.cached_content_share
            ));
        }
        if !(self.chat_rate >= 0.0 && self.chat_rate.is_finite()) {
            return Err(format!(
                "chat_rate must be >= 0 messages per minute, got {}",
                self.chat_rate
            ));
        }
        if !(self.prediction_error_threshold >= 0.0 && self.prediction_error_threshold.is_finite())
        {
            return Err(format!(
                "prediction_error_threshold must be >= 0 tiles, got {}",
                self.prediction_error_threshold
            ));
        }
        if self.input_ack_timeout_ms == 0 {
            return Err("input_ack_timeout_ms must be > 0".to_string());
        }
        Ok(())
    }
}

/// The movement model, shared by the server and the bot's prediction so both compute the
/// same bits: `position + move_axis × speed × TICK_INTERVAL` per input, each axis clamped to
/// `0..=bound` when the map is known (`bounds` = map width and height in tiles).
pub fn step(pos: Vec2f, move_x: i8, move_y: i8, speed: f32, bounds: Option<(f32, f32)>) -> Vec2f {
    let dt = codec::TICK_INTERVAL;
    let mut x = pos.x + f32::from(move_x) * speed * dt;
    let mut y = pos.y + f32::from(move_y) * speed * dt;
    if let Some((w, h)) = bounds {
        x = x.clamp(0.0, w);
        y = y.clamp(0.0, h);
    }
    Vec2f { x, y }
}

/// The registry entry.
pub struct City;

impl City {
    /// The reference server's configuration from the options and the server parameters.
    pub fn server_config(o: &CityOptions, s: &ServerParams) -> CityServerConfig {
        let mut cfg = CityServerConfig::for_dialect(o.dialect);
        cfg.max_players = s.players_per_instance.unwrap_or(MAX_PLAYERS).max(1);
        if s.sink {
            cfg = cfg.into_sink();
        }
        cfg
    }
}

impl Protocol for City {
    type Options = CityOptions;
    const INFO: ProtocolInfo = INFO;

    fn transport(_: &CityOptions) -> TransportNeeds {
        TransportNeeds::Enet(EnetNeeds {
            channels: CHANNELS,
            compression: EnetCompression::None,
        })
    }

    /// Each PlayerInput is one tick of movement: a bot sends every slot.
    fn input_on_change_applies(_: &CityOptions) -> bool {
        false
    }

    fn validate(o: &CityOptions, s: &ServerParams) -> Result<(), String> {
        o.validate()?;
        if s.players_per_instance == Some(0) {
            return Err("server.players_per_instance must be at least 1".into());
        }
        // ENet's peer id is 12 bits (0xFFF is reserved): a host takes at most 4095 peers.
        if s.players_per_instance.is_some_and(|n| n > 4095) {
            return Err(
                "server.players_per_instance: an ENet host takes at most 4095 peers; \
                 run more instances (serve --instances N) instead"
                    .into(),
            );
        }
        Ok(())
    }

    fn dialect_name(o: &CityOptions) -> String {
        format!("{:?}", o.dialect).to_lowercase()
    }

    fn make_bot(o: &CityOptions, params: BotParams) -> Box<dyn Bot> {
        Box::new(CityBot::new(params, o.clone()))
    }

    fn make_server(o: &CityOptions, s: &ServerParams, now: Instant) -> Box<dyn Server> {
        Box::new(CityServer::new(Self::server_config(o, s), now))
    }

    fn has_sink(_: &CityOptions) -> bool {
        true
    }

    /// City packets are at most 1400 bytes ([`codec::MAX_PACKET_SIZE`]), in ENet datagrams
    /// of at most the 1500-byte Ethernet payload; 32 of them is half a second of DeltaStates
    /// plus the content download's 4 chunks a tick, waiting for a descheduled worker.
    fn receive_burst(_: &CityOptions) -> DatagramBurst {
        DatagramBurst {
            largest: crate::protocol::prelude::MAX_DATAGRAM,
            count: 32,
        }
    }

    fn players_per_instance(_: &CityOptions, s: &ServerParams) -> Option<usize> {
        Some(s.players_per_instance.unwrap_or(MAX_PLAYERS).max(1))
    }

    fn cannot_measure(o: &CityOptions, metric: Metric) -> Option<&'static str> {
        // The real server (implementation dialect) sends no InputAck; the spec's does.
        (o.dialect == Dialect::Implementation && metric == Metric::UpstreamLoss).then_some(
            "the implementation dialect's server sends no InputAck, so no input is known lost",
        )
    }

    /// The implementation's server ignores Ping and never sends Pong: its bots' round trips
    /// are ENet's acknowledgements.
    fn measures_rtt(o: &CityOptions) -> bool {
        o.dialect != Dialect::Implementation
    }

    fn inspector(o: &CityOptions) -> Option<Box<dyn crate::protocol::prelude::inspect::Inspect>> {
        Some(Box::new(codec::inspect::CityInspect::new(o.dialect)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_with_defaults_and_reject_unknown_keys() {
        let o: CityOptions = serde_saphyr::from_str(
            "dialect: implementation\ncached_content_share: 0.5\nchat_rate: 2\nchat_channel: local\n",
        )
        .unwrap();
        assert_eq!(o.dialect, Dialect::Implementation);
        assert_eq!(o.cached_content_share, 0.5);
        assert_eq!(o.chat_channel, ChatChannel::Local);
        assert_eq!(o.protocol_version, 1);
        assert_eq!(o.interpolation_delay_ms, 100);
        assert!(o.validate().is_ok());
        assert!(serde_saphyr::from_str::<CityOptions>("chat_rat: 2\n").is_err());
        let bad = CityOptions {
            cached_content_share: 1.5,
            ..CityOptions::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn movement_model_steps_one_tick_and_clamps() {
        let p = step(Vec2f::new(1.0, 1.0), 1, -1, 6.0, Some((10.0, 10.0)));
        assert_eq!(p, Vec2f::new(1.0 + 6.0 / 60.0, 1.0 - 6.0 / 60.0));
        let p = step(Vec2f::new(0.05, 9.99), -1, 1, 6.0, Some((10.0, 10.0)));
        assert_eq!(p, Vec2f::new(0.0, 10.0));
        let p = step(Vec2f::new(0.05, 0.0), -1, 0, 6.0, None);
        assert!(p.x < 0.0);
    }
}
