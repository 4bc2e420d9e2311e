#![doc = include_str!("../../../docs/protocols/zergcity.md")]
//!
//! # In the code
//!
//! - [`codec`]: the 16-byte header, every message, LZ4 block compression and §13.1's checks.
//! - [`world`]: entities and components, the FullSnapshot sections and the delta payload
//!   (layouts the spec leaves open are defined there).
//! - [`bot`]: the simulated player: handshake, baselines and deltas, actions, RTT and clock
//!   offset, chat, reconnection with the session token.
//! - [`server`]: the reference server: four-player games at 20 Hz.
//! - [`dialects::implementation`]: `dialect: implementation`, the real game server's own wire format
//!   (codec, bot, reference server); what its bots can and cannot measure is in
//!   [`dialects::implementation::bot`].
//! - [`dialects::benchmark`]: `dialect: benchmark`, the POC-2 benchmark server's wire format (codec,
//!   bot, reference server); what its bots measure is in [`dialects::benchmark::bot`].
//! - `info`: the metric table ([`INFO`]).
//!
//! The rest of this text is about the spec dialect.
//!
//! Each message goes out on the channel [`codec::MsgType::channel`] names (the page's
//! "Transport").
//!
//! ## How the bot measures
//! - **RTT**: Ping carries the bot's microsecond clock; the server echoes it in Pong with its
//!   tick. A Pong is paired with its Ping by that echoed timestamp (up to 8 pings in flight);
//!   a Pong for no Ping in flight is `pong_unmatched`, one older than the silence timeout
//!   `pong_late`. The Pong's `server_tick` gives a clock-offset estimate (`clock_offset_us`:
//!   the bot's tick clock against the server's, corrected by half the RTT).
//! - **Downstream loss**: the header `sequence` the server keeps per connection, over every
//!   message it sends (a 128-wide window handles reordering across channels). Only channel 2
//!   (deltas, Pongs) can lose messages, so every gap is one lost unreliable message; the
//!   denominator counts all messages. A new session (reconnection) starts a new count.
//! - **Delta loss** (`deltas_missing` / `deltas_expected`): §5.2 sends a delta every tick, so
//!   the target ticks skipped between consecutive deltas are lost state updates, whatever
//!   else the server sends (pongs, acks) on its sequence.
//! - **Another implementation's snapshot layout**: §5.1 frames the FullSnapshot sections
//!   but leaves their contents open. A snapshot whose section table is sound but whose
//!   contents are not in our layout is `full_snapshot.foreign_layout`, not a decode error: it
//!   is kept as an *opaque* baseline by its tick and acknowledged; deltas onto it are checked
//!   against §5.2 (a broken one is a decode error) and acknowledged, and play (inputs) goes
//!   on. The bot then aims its actions at its quadrant of the map, knowing no parcels.
//! - **Upstream loss**: every InputMessage gets an InputAck (the reference server acks all of
//!   them, rejected ones with their result code), so an input without its ack within
//!   `input_ack_timeout_ms` is lost. Inputs in flight when a bot drops its session on purpose
//!   are not counted (`inputs_abandoned`).

pub mod bot;
pub mod codec;
pub mod dialects;
mod info;
pub mod server;

pub use info::INFO;
pub mod world;

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use bot::ZergCityBot;
pub use server::{ZergCityServer, ZergCityServerConfig};

use crate::protocol::prelude::Metric;
use crate::protocol::prelude::{Bot, BotParams, ProtocolInfo, Server};
use crate::protocol::prelude::{
    EnetCompression, EnetNeeds, Protocol, ServerParams, TransportNeeds,
};

pub const DEFAULT_PORT: u16 = 7777;
/// Players one game holds (slots 0-3).
pub const MAX_PLAYERS: usize = 4;
/// The reference simulation's rate (ServerHello's `tick_rate`, "normally 20").
pub const TICK_RATE: u32 = 20;

/// The wire dialect: the spec, the real game server of the project the spec came from
/// ([`dialects::implementation`]), or that project's POC-2 benchmark server ([`dialects::benchmark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    #[default]
    Spec,
    /// The real game server (`sims_3000 --server`): 5-byte envelope, Join/JoinAccept,
    /// Heartbeats both ways, 30-byte Input, StateUpdate.
    Implementation,
    /// The POC-2 benchmark server: the spec's header with the tick as its sequence, no
    /// handshake, FullSnapshot then checksummed LZ4 deltas, bare-header acks.
    Benchmark,
}

/// Relative weights of the actions a bot draws for its inputs.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ActionWeights {
    pub place_building: f64,
    pub designate_zone: f64,
    pub demolish: f64,
    pub purchase_tile: f64,
    pub set_tribute_rate: f64,
    pub place_road: f64,
    pub place_conduit: f64,
    pub place_pipe: f64,
}

impl Default for ActionWeights {
    fn default() -> Self {
        Self {
            place_building: 3.0,
            designate_zone: 2.0,
            demolish: 1.0,
            purchase_tile: 3.0,
            set_tribute_rate: 0.5,
            place_road: 1.5,
            place_conduit: 0.5,
            place_pipe: 0.5,
        }
    }
}

impl ActionWeights {
    pub fn as_array(&self) -> [f64; 8] {
        [
            self.place_building,
            self.designate_zone,
            self.demolish,
            self.purchase_tile,
            self.set_tribute_rate,
            self.place_road,
            self.place_conduit,
            self.place_pipe,
        ]
    }
}

/// The protocol section of a zergcity scenario.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ZergCityOptions {
    pub dialect: Dialect,
    /// Action mix of the inputs (sent at `behaviour.input_rate` per second, on the grid).
    pub actions: ActionWeights,
    /// Chat messages per minute per bot (0 = silent).
    pub chat_rate: f64,
    /// Share of bots (0..=1, chosen per bot from its seed) that drop their ENet session once
    /// and reconnect with their session token.
    pub reconnect_share: f64,
    /// When, after its first FullSnapshot, a chosen bot drops (plus up to the same again,
    /// per bot, so drops spread out).
    pub reconnect_after_ms: u64,
    /// An input without an InputAck after this long counts as lost upstream.
    pub input_ack_timeout_ms: u64,
    /// Largest decompressed size a bot accepts (at most 16 MiB, §13.1). The buffer grows to
    /// what a message needs and is given back after any message over 1 MiB.
    pub max_decompressed_bytes: usize,
    /// Bytes a bot may hold in world states: all its baselines, the spare world, the terrain
    /// and scratch together (at least 24 MiB). One world holds at most 65,536 entities
    /// (104 bytes each, 6.8 MB); a server whose worlds take more than this leaves its bots
    /// fewer than 16 baselines (the oldest are dropped, `baseline_evicted`), and a snapshot
    /// whose world would pass 65,536 entities is refused
    /// (`delta_snapshot.too_many_entities` / `full_snapshot.too_many_entities`, decode
    /// errors).
    pub max_state_bytes: usize,
    /// Header `protocol_version` the bot sends (another value exercises the rejection).
    pub protocol_version: u8,
    pub client_version: u32,
    /// Player names are `<prefix>-<bot index>`.
    pub name_prefix: String,
    /// Implementation dialect: a Heartbeat without its echo after this long counts as lost
    /// upstream.
    pub heartbeat_timeout_ms: u64,
    /// Implementation dialect: send Heartbeats on the reliable channel, as the real client
    /// does. Off by default: on the unreliable channel a lost Heartbeat is seen (no echo), so
    /// upstream loss is measurable; reliable, it is not.
    pub reliable_heartbeats: bool,
    /// Benchmark dialect: check deltas against the server's world checksum (FNV-1a over the
    /// whole world: 1.2 MB against the real server's 50,000 entities) and ask for a resync on
    /// a mismatch. Every delta that changed nothing is checked; of the others, as many as the
    /// hashing they pay for covers (every one up to 1,365 entities; see
    /// `dialects::benchmark::checksum`). Off, every delta is applied and acknowledged unchecked.
    pub verify_checksum: bool,
}

impl Default for ZergCityOptions {
    fn default() -> Self {
        Self {
            dialect: Dialect::Spec,
            actions: ActionWeights::default(),
            chat_rate: 0.0,
            reconnect_share: 0.0,
            reconnect_after_ms: 2000,
            input_ack_timeout_ms: 2000,
            max_decompressed_bytes: codec::MAX_PAYLOAD,
            max_state_bytes: 32 << 20,
            protocol_version: codec::PROTOCOL_VERSION,
            client_version: 1,
            name_prefix: "bot".to_string(),
            heartbeat_timeout_ms: 2000,
            reliable_heartbeats: false,
            verify_checksum: true,
        }
    }
}

impl ZergCityOptions {
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.reconnect_share) {
            return Err(format!(
                "reconnect_share must be within 0..=1, got {}",
                self.reconnect_share
            ));
        }
        if !(self.chat_rate >= 0.0 && self.chat_rate.is_finite()) {
            return Err(format!("chat_rate must be >= 0, got {}", self.chat_rate));
        }
        let w = self.actions.as_array();
        if w.iter().any(|x| !(*x >= 0.0 && x.is_finite())) || w.iter().sum::<f64>() <= 0.0 {
            return Err("actions: weights must be >= 0 and not all 0".into());
        }
        if self.input_ack_timeout_ms == 0 {
            return Err("input_ack_timeout_ms must be > 0".into());
        }
        if self.max_decompressed_bytes == 0 || self.max_decompressed_bytes > codec::MAX_PAYLOAD {
            return Err(format!(
                "max_decompressed_bytes must be within 1..={}",
                codec::MAX_PAYLOAD
            ));
        }
        if self.max_state_bytes < MIN_STATE_BYTES {
            return Err(format!(
                "max_state_bytes must be at least {MIN_STATE_BYTES} (the world, the newest \
                 state and the spare one, of 65,536 entities each), got {}",
                self.max_state_bytes
            ));
        }
        if self.name_prefix.len() > 20 {
            return Err("name_prefix: at most 20 bytes (names are 32 bytes on the wire)".into());
        }
        if self.heartbeat_timeout_ms == 0 {
            return Err("heartbeat_timeout_ms must be > 0".into());
        }
        if self.dialect == Dialect::Benchmark {
            if self.chat_rate > 0.0 {
                return Err("chat_rate: the benchmark has no chat; set chat_rate: 0".into());
            }
            if self.reconnect_share > 0.0 {
                return Err(
                    "reconnect_share: the benchmark has no session to resume (no token); set \
                     reconnect_share: 0"
                        .into(),
                );
            }
        }
        if self.dialect == Dialect::Implementation {
            if self.chat_rate > 0.0 {
                return Err(
                    "chat_rate: the implementation dialect's bots do not chat (the real \
                            server's chat is not part of its load); set chat_rate: 0"
                        .into(),
                );
            }
            let w = &self.actions;
            if w.as_array().iter().sum::<f64>() - w.purchase_tile <= 0.0 {
                return Err(
                    "actions: the implementation dialect has no purchase_tile input; \
                            give another action a weight"
                        .into(),
                );
            }
        }
        Ok(())
    }
}

/// ENet peers the benchmark server's host takes (a ninth connect gets no reply).
pub const BENCHMARK_PEERS: usize = 8;

/// The least `max_state_bytes`: three worlds of 65,536 entities (6.8 MB each) and a map's
/// terrain.
pub const MIN_STATE_BYTES: usize = 24 << 20;

/// The registry entry.
pub struct ZergCity;

impl ZergCity {
    pub fn server_config(_o: &ZergCityOptions, s: &ServerParams) -> ZergCityServerConfig {
        ZergCityServerConfig {
            max_players: s
                .players_per_instance
                .unwrap_or(MAX_PLAYERS)
                .clamp(1, MAX_PLAYERS),
            client_timeout: s.client_timeout.0.max(Duration::from_secs(1)),
            ..ZergCityServerConfig::default()
        }
    }
}

impl Protocol for ZergCity {
    type Options = ZergCityOptions;
    const INFO: ProtocolInfo = INFO;

    fn transport(o: &ZergCityOptions) -> TransportNeeds {
        TransportNeeds::Enet(EnetNeeds {
            channels: match o.dialect {
                Dialect::Spec => codec::CHANNELS,
                Dialect::Implementation => dialects::implementation::codec::CHANNELS,
                Dialect::Benchmark => dialects::benchmark::codec::CHANNELS,
            },
            compression: EnetCompression::None,
        })
    }

    fn validate(o: &ZergCityOptions, s: &ServerParams) -> Result<(), String> {
        o.validate()?;
        match s.players_per_instance {
            Some(n) if o.dialect == Dialect::Benchmark && (n == 0 || n > BENCHMARK_PEERS) => {
                Err(format!(
                    "server.players_per_instance must be within 1..={BENCHMARK_PEERS} (the \
                     benchmark's ENet host takes 8 peers)"
                ))
            }
            Some(_) if o.dialect == Dialect::Benchmark => Ok(()),
            Some(n) if n == 0 || n > MAX_PLAYERS => Err(format!(
                "server.players_per_instance must be within 1..={MAX_PLAYERS} (slots 0-3)"
            )),
            _ => Ok(()),
        }
    }

    fn dialect_name(o: &ZergCityOptions) -> String {
        format!("{:?}", o.dialect).to_lowercase()
    }

    /// The reader of the options' dialect, decompressing at most `max_decompressed_bytes`.
    fn inspector(
        o: &ZergCityOptions,
    ) -> Option<Box<dyn crate::protocol::prelude::inspect::Inspect>> {
        let limit = o.max_decompressed_bytes;
        Some(match o.dialect {
            Dialect::Spec => Box::new(codec::inspect::SpecInspect::new(limit)),
            Dialect::Implementation => {
                Box::new(dialects::implementation::inspect::ImplementationInspect::new(limit))
            }
            Dialect::Benchmark => {
                Box::new(dialects::benchmark::inspect::BenchmarkInspect::new(limit))
            }
        })
    }

    fn make_bot(o: &ZergCityOptions, params: BotParams) -> Box<dyn Bot> {
        match o.dialect {
            Dialect::Spec => Box::new(dialects::benchmark::hint::SpecWithHint::new(
                ZergCityBot::new(params, o.clone()),
                dialects::benchmark::hint::BenchmarkBytes,
            )),
            Dialect::Implementation => Box::new(dialects::implementation::ImplementationBot::new(
                params,
                o.clone(),
            )),
            Dialect::Benchmark => {
                Box::new(dialects::benchmark::BenchmarkBot::new(params, o.clone()))
            }
        }
    }

    fn make_server(o: &ZergCityOptions, s: &ServerParams, now: Instant) -> Box<dyn Server> {
        match o.dialect {
            Dialect::Spec => Box::new(ZergCityServer::new(Self::server_config(o, s), now)),
            Dialect::Implementation => {
                let cfg = dialects::implementation::ImplementationServerConfig {
                    max_players: s
                        .players_per_instance
                        .unwrap_or(MAX_PLAYERS)
                        .clamp(1, MAX_PLAYERS) as u8,
                    grace: s.session_grace.map_or(
                        dialects::implementation::ImplementationServerConfig::default().grace,
                        |d| d.0,
                    ),
                    ..Default::default()
                };
                Box::new(dialects::implementation::ImplementationServer::new(
                    cfg, now,
                ))
            }
            Dialect::Benchmark => Box::new(dialects::benchmark::BenchmarkServer::new(
                dialects::benchmark::BenchmarkServerConfig {
                    max_clients: Self::players_per_instance(o, s).unwrap_or(BENCHMARK_PEERS),
                    ..Default::default()
                },
                now,
            )),
        }
    }

    fn players_per_instance(o: &ZergCityOptions, s: &ServerParams) -> Option<usize> {
        if o.dialect == Dialect::Benchmark {
            return Some(
                s.players_per_instance
                    .unwrap_or(BENCHMARK_PEERS)
                    .clamp(1, BENCHMARK_PEERS),
            );
        }
        Some(
            s.players_per_instance
                .unwrap_or(MAX_PLAYERS)
                .clamp(1, MAX_PLAYERS),
        )
    }

    /// The benchmark answers nothing the bot sends: its round trips are ENet's
    /// acknowledgements.
    fn measures_rtt(o: &ZergCityOptions) -> bool {
        o.dialect != Dialect::Benchmark
    }

    /// The benchmark's client sends no input, only acknowledgements of the snapshots.
    fn sends_input(o: &ZergCityOptions) -> bool {
        o.dialect != Dialect::Benchmark
    }

    /// Its inputs are actions drawn at random, not held keys: there is no "unchanged".
    fn input_on_change_applies(_: &ZergCityOptions) -> bool {
        false
    }

    /// A city builder's few actions a second (the spec's server takes 60, the implementation
    /// dialect's drops Building inputs above 10).
    fn usual_input_rate(_: &ZergCityOptions) -> f64 {
        5.0
    }

    fn cannot_measure(o: &ZergCityOptions, metric: Metric) -> Option<&'static str> {
        if o.dialect == Dialect::Benchmark {
            return (metric == Metric::UpstreamLoss).then_some(
                "the benchmark dialect's only client messages are reliable acks, and nothing \
                 acknowledges them at this level, so nothing is known lost upstream",
            );
        }
        if o.dialect != Dialect::Implementation {
            return None;
        }
        match metric {
            Metric::DownstreamLoss => Some(
                "the implementation dialect's server sends everything reliably and a \
                 StateUpdate only for ticks with changes, so nothing is known lost downstream",
            ),
            Metric::UpstreamLoss if o.reliable_heartbeats => Some(
                "with reliable_heartbeats every Heartbeat is delivered (ENet retransmits) and \
                 the server acknowledges no input, so nothing is known lost upstream",
            ),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_with_defaults_and_reject_unknown_keys() {
        let o: ZergCityOptions = serde_saphyr::from_str(
            "reconnect_share: 0.25\nactions:\n  demolish: 4\nchat_rate: 2\n",
        )
        .unwrap();
        assert_eq!(o.reconnect_share, 0.25);
        assert_eq!(o.actions.demolish, 4.0);
        assert_eq!(o.actions.place_building, 3.0);
        assert!(o.validate().is_ok());
        assert!(serde_saphyr::from_str::<ZergCityOptions>("reconect_share: 1\n").is_err());
        let bad = ZergCityOptions {
            reconnect_share: 2.0,
            ..Default::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn the_implementation_dialect_says_what_it_cannot_measure() {
        let o: ZergCityOptions =
            serde_saphyr::from_str("dialect: implementation\nheartbeat_timeout_ms: 500\n").unwrap();
        assert_eq!(o.dialect, Dialect::Implementation);
        assert!(o.validate().is_ok());
        assert!(ZergCity::cannot_measure(&o, Metric::DownstreamLoss).is_some());
        assert!(ZergCity::cannot_measure(&o, Metric::UpstreamLoss).is_none());
        let reliable = ZergCityOptions {
            reliable_heartbeats: true,
            ..o.clone()
        };
        assert!(ZergCity::cannot_measure(&reliable, Metric::UpstreamLoss).is_some());
        assert!(
            ZergCity::cannot_measure(&ZergCityOptions::default(), Metric::DownstreamLoss).is_none()
        );
        let chatty = ZergCityOptions {
            chat_rate: 2.0,
            ..o.clone()
        };
        assert!(chatty.validate().unwrap_err().contains("chat_rate"));
        assert_eq!(
            ZergCity::transport(&o),
            TransportNeeds::Enet(EnetNeeds {
                channels: 2,
                compression: EnetCompression::None
            })
        );
    }

    #[test]
    fn the_benchmark_dialect_takes_8_peers_and_measures_loss_but_not_rtt_or_upstream() {
        let o: ZergCityOptions = serde_saphyr::from_str("dialect: benchmark\n").unwrap();
        assert_eq!(o.dialect, Dialect::Benchmark);
        assert!(o.verify_checksum);
        assert!(ZergCity::validate(&o, &ServerParams::default()).is_ok());
        assert_eq!(
            ZergCity::transport(&o),
            TransportNeeds::Enet(EnetNeeds {
                channels: 3,
                compression: EnetCompression::None
            })
        );
        assert!(!ZergCity::measures_rtt(&o), "RTT comes from ENet's acks");
        assert!(
            !ZergCity::sends_input(&o),
            "its bots only acknowledge snapshots"
        );
        assert!(ZergCity::cannot_measure(&o, Metric::UpstreamLoss).is_some());
        assert!(ZergCity::cannot_measure(&o, Metric::DownstreamLoss).is_none());
        assert_eq!(
            ZergCity::players_per_instance(&o, &ServerParams::default()),
            Some(8)
        );
        let s = ServerParams {
            players_per_instance: Some(9),
            ..ServerParams::default()
        };
        assert!(ZergCity::validate(&o, &s).unwrap_err().contains("1..=8"));
        let reconnecting = ZergCityOptions {
            reconnect_share: 0.5,
            ..o.clone()
        };
        assert!(reconnecting
            .validate()
            .unwrap_err()
            .contains("reconnect_share"));
        assert_eq!(ZergCity::dialect_name(&o), "benchmark");
    }
}
