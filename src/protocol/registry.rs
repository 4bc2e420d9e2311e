//! The protocol registry: the one seam through which the rest of the crate reaches a protocol.
//!
//! Each protocol folder (`src/protocol/<name>/`) implements [`Protocol`] for one marker type:
//! its static description, its options (the scenario's `protocol: { <name>: {...} }` section,
//! typed, so a mistake is reported at its own line and column), the transport it runs over,
//! and how to build a bot and a reference server. The list in `protocol/mod.rs`
//! (`protocols! { ... }`) turns those into [`ProtocolSection`](super::ProtocolSection) and [`ProtocolName`](super::ProtocolName), which
//! scenario parsing, `serve`, `protocols`, the engine and the report use without naming any
//! protocol. Adding a protocol is its folder plus one line of that list.

use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{Bot, BotParams, ProtocolInfo, Server};
use crate::duration::Dur;
use crate::metrics::threshold::Metric;

/// What a protocol needs from the transport under it. Plain data: the engine maps it to a
/// transport implementation (the protocol layer knows no socket or ENet type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportNeeds {
    /// One protocol message per UDP datagram, one socket per bot; sessions keyed by source
    /// address at the server.
    Udp,
    /// ENet 1.3 sessions with this many channels; `Transmit::channel`/`reliable` pick the
    /// delivery. Bots may share a host (`engine.bots_per_socket`).
    Enet(EnetNeeds),
    /// GameNetworkingSockets (Valve's library, with its own sockets and I/O thread): one
    /// connection per bot, each message sent reliably or not as `Transmit::reliable` says;
    /// the server gives each connection a `ConnId`. Only in a build with the `gns` cargo
    /// feature ([`TransportNeeds::check_built`]).
    Gns,
    /// Raw UDP play after a login over TCP (R-Type's implementation dialect). The target is
    /// the server's TCP address; each bot also gets its own UDP socket to the same host at the
    /// TCP port + `udp_port_offset`. Stream bytes travel as `Transmit { reliable: true }` and
    /// arrive through [`Bot::handle_stream`](super::Bot::handle_stream); datagrams as for
    /// [`TransportNeeds::Udp`]. The bot starts once the TCP connection is up, so a refused or
    /// unanswered connect is the transport's failure, with its reason.
    UdpTcpLogin { udp_port_offset: u16 },
}

/// ENet settings a protocol fixes (both ends must agree on them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnetNeeds {
    pub channels: usize,
    /// ENet's own packet compression (not a protocol's payload compression, such as
    /// ZergCity's LZ4 inside its messages).
    pub compression: EnetCompression,
}

/// ENet-level compression of whole datagrams; both ends must use the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EnetCompression {
    #[default]
    None,
    /// `enet_host_compress_with_range_coder`.
    RangeCoder,
}

impl TransportNeeds {
    /// Short name for reports and errors.
    pub fn name(&self) -> &'static str {
        match self {
            TransportNeeds::Udp => "udp",
            TransportNeeds::Enet(_) => "enet",
            TransportNeeds::Gns => "gns",
            TransportNeeds::UdpTcpLogin { .. } => "udp_tcp_login",
        }
    }

    /// What the run actually speaks, for the console header and `summary.json`'s `transport`
    /// (a protocol's [`ProtocolInfo::transport`] describes every transport it can use).
    pub fn describe(&self) -> String {
        match self {
            TransportNeeds::Udp => "raw UDP".into(),
            TransportNeeds::Enet(e) => {
                let compression = match e.compression {
                    EnetCompression::None => "",
                    EnetCompression::RangeCoder => ", range-coder compression",
                };
                format!("ENet 1.3 ({} channels{compression})", e.channels)
            }
            TransportNeeds::Gns => "GameNetworkingSockets".into(),
            TransportNeeds::UdpTcpLogin { udp_port_offset } => {
                format!("raw UDP after a TCP login (UDP port = TCP port + {udp_port_offset})")
            }
        }
    }

    /// Whether this build can carry the transport: a scenario asking for GNS in a build
    /// without the `gns` feature is refused when it is validated, with how to get it.
    pub fn check_built(&self) -> Result<(), String> {
        match self {
            TransportNeeds::Gns if !cfg!(feature = "gns") => Err(
                "transport: gns needs GameNetworkingSockets, which this tickswarm was built \
                 without: rebuild with `cargo build --release --features gns` (see \
                 docs/guide/gns.md), or use transport: udp"
                    .into(),
            ),
            _ => Ok(()),
        }
    }
}

/// Parameters every reference server understands (the scenario's `server:` section and the
/// flags of `tickswarm serve`); each protocol reads the ones that apply to it and checks them
/// in [`Protocol::validate`].
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerParams {
    /// Simulation ticks per second.
    pub tick_rate: u16,
    /// Snapshots per second where the protocol sends them slower than it ticks
    /// (rtype: 20-30, default 20); cafe snapshots every tick.
    pub snapshot_rate: Option<u32>,
    /// A full snapshot every this many ticks (deltas in between).
    pub full_every: u32,
    pub max_clients: usize,
    pub client_timeout: Dur,
    /// Players per room (a client's snapshots carry its room); default per protocol
    /// (cafe 32, rtype 8).
    pub room_size: Option<usize>,
    /// Players one server instance takes (city: MAX_PLAYERS, default 100).
    pub players_per_instance: Option<usize>,
    /// Server instances on consecutive ports. Default: as many as the population needs for
    /// protocols with a per-instance player cap, else one.
    pub instances: Option<usize>,
    /// ENet servers: keep ENet's unreliable-packet throttle, which drops unreliable packets
    /// at random while a peer's RTT is above its recent mean (C ENet's default). Off by
    /// default, so loss measured against the embedded server is the network's.
    pub enet_throttle: bool,
    /// Which of the instances started together this one is (0 for the first): set by
    /// whoever starts them (`serve --instances`, an embedded target), never by a scenario.
    /// A protocol whose instances are parts of one world (DarkAges' zones) reads it.
    #[serde(skip)]
    pub instance: usize,
    /// The address this instance's socket is bound to, once it is (the server driver fills it
    /// in before the server is made), so a server can name itself and its neighbours on
    /// consecutive ports. `None` where no socket exists (simulations).
    #[serde(skip)]
    pub bind: Option<std::net::SocketAddr>,
}

impl Default for ServerParams {
    fn default() -> Self {
        Self {
            tick_rate: 60,
            snapshot_rate: None,
            full_every: 60,
            max_clients: 10_000,
            client_timeout: Dur(Duration::from_secs(5)),
            room_size: None,
            players_per_instance: None,
            instances: None,
            enet_throttle: false,
            instance: 0,
            bind: None,
        }
    }
}

impl ServerParams {
    /// Ranges every reference server needs, checked before any protocol's own rules.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=1000).contains(&self.tick_rate) {
            return Err(format!(
                "server.tick_rate must be 1 to 1000 Hz, got {}",
                self.tick_rate
            ));
        }
        if self.full_every == 0 {
            return Err("server.full_every must be at least 1 tick".into());
        }
        if self.max_clients == 0 {
            return Err("server.max_clients must be at least 1".into());
        }
        if self.client_timeout.0.is_zero() {
            return Err("server.client_timeout must be longer than 0".into());
        }
        if self.instances == Some(0) || self.instances.is_some_and(|n| n > 10_000) {
            return Err("server.instances must be 1 to 10000".into());
        }
        if self.snapshot_rate == Some(0) {
            return Err("server.snapshot_rate must be above 0".into());
        }
        Ok(())
    }
}

/// One protocol, as the registry sees it. Implemented by a marker type in each protocol
/// folder; every method is static so the registry's enum dispatch costs a `match`.
pub trait Protocol: 'static {
    /// The scenario's `protocol: { <name>: ... }` section. `Default` is what `serve` and a
    /// section written as `<name>: {}` get.
    type Options: Clone
        + std::fmt::Debug
        + PartialEq
        + Default
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static;

    /// Name, spec, measurement methods, dialects, metrics.
    const INFO: ProtocolInfo;

    /// The option key that selects the dialect (`serve --dialect X` sets it).
    const DIALECT_KEY: &'static str = "dialect";

    /// The transport this protocol (in this configuration) runs over.
    fn transport(opts: &Self::Options) -> TransportNeeds;

    /// Check option values and server parameters together; the message names the key
    /// (`server.room_size: ...`, or an option's name).
    fn validate(opts: &Self::Options, server: &ServerParams) -> Result<(), String>;

    /// The dialect as reports name it (`summary.json`'s `dialect`).
    fn dialect_name(opts: &Self::Options) -> String;

    fn make_bot(opts: &Self::Options, params: BotParams) -> Box<dyn Bot>;

    /// A reference server. Called after [`Protocol::validate`] passed.
    fn make_server(opts: &Self::Options, server: &ServerParams, now: Instant) -> Box<dyn Server>;

    /// Players one reference server instance takes, for protocols whose servers are capped
    /// (City: 100), so an embedded target starts as many instances as the population needs.
    fn players_per_instance(_opts: &Self::Options, _server: &ServerParams) -> Option<usize> {
        None
    }

    /// Why this configuration cannot take `metric` (a figure every run reports, such as
    /// upstream loss, which needs the server to acknowledge inputs), or `None` when it can.
    /// A threshold on such a metric says "not measurable against this server (why)" instead of
    /// a bare "no data", and `tickswarm validate` warns about it.
    fn cannot_measure(_opts: &Self::Options, _metric: Metric) -> Option<&'static str> {
        None
    }

    /// Whether the bots measure round trips themselves (they send their own Ping every
    /// `ping_interval` and record `rtt_us` from the answers). A dialect whose server never
    /// answers says `false`: the run's `rtt_us` then comes from the transport where it can
    /// measure one (ENet's acknowledgements), and `summary.json`'s `rtt_source` says which.
    fn measures_rtt(_opts: &Self::Options) -> bool {
        true
    }

    /// Check the scenario's `behaviour.input_rate` against what this configuration's server
    /// takes (DarkAges' public server kicks above 65 inputs a second); the message names the
    /// key and why.
    fn check_input_rate(_opts: &Self::Options, _hz: f64) -> Result<(), String> {
        Ok(())
    }
}

/// Builds [`ProtocolSection`], [`ProtocolName`] and their dispatch from the list of protocol
/// folders and marker types. Used once, in `protocol/mod.rs`. The marker type's name in
/// lower case is the protocol's name in scenarios (`Cafe` → `cafe`), and must equal its
/// folder's name and `INFO.name`.
macro_rules! protocols {
    ($($module:ident :: $ty:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// The scenario's `protocol:` section: `{ <name>: { ...options } }`, externally
        /// tagged so a mistake inside the options is reported at its own line and column.
        #[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
        #[serde(deny_unknown_fields, rename_all = "lowercase")]
        pub enum ProtocolSection {
            $($ty(<$module::$ty as $crate::protocol::registry::Protocol>::Options),)*
        }

        /// The protocols tickswarm speaks.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ProtocolName {
            $($ty,)*
        }

        impl ProtocolName {
            pub const ALL: &'static [ProtocolName] = &[$(ProtocolName::$ty,)*];

            pub fn info(self) -> &'static ProtocolInfo {
                match self {
                    $(ProtocolName::$ty => {
                        &<$module::$ty as $crate::protocol::registry::Protocol>::INFO
                    })*
                }
            }

            /// The option key `serve --dialect` sets.
            pub fn dialect_key(self) -> &'static str {
                match self {
                    $(ProtocolName::$ty => {
                        <$module::$ty as $crate::protocol::registry::Protocol>::DIALECT_KEY
                    })*
                }
            }

            /// The section with every option at its default.
            pub fn default_section(self) -> ProtocolSection {
                match self {
                    $(ProtocolName::$ty => ProtocolSection::$ty(Default::default()),)*
                }
            }
        }

        impl ProtocolSection {
            pub fn name(&self) -> ProtocolName {
                match self {
                    $(ProtocolSection::$ty(_) => ProtocolName::$ty,)*
                }
            }

            pub fn info(&self) -> &'static ProtocolInfo {
                self.name().info()
            }

            pub fn transport(&self) -> $crate::protocol::registry::TransportNeeds {
                match self {
                    $(ProtocolSection::$ty(o) => {
                        <$module::$ty as $crate::protocol::registry::Protocol>::transport(o)
                    })*
                }
            }

            /// Options and server parameters checked together; the message names the key.
            pub fn validate(
                &self,
                server: &$crate::protocol::registry::ServerParams,
            ) -> Result<(), String> {
                server.validate()?;
                // A transport this build lacks (GNS without the `gns` feature) is refused
                // here, before anything binds or connects.
                self.transport().check_built()?;
                match self {
                    $(ProtocolSection::$ty(o) => {
                        <$module::$ty as $crate::protocol::registry::Protocol>::validate(o, server)
                    })*
                }
            }

            pub fn dialect_name(&self) -> String {
                match self {
                    $(ProtocolSection::$ty(o) => {
                        <$module::$ty as $crate::protocol::registry::Protocol>::dialect_name(o)
                    })*
                }
            }

            pub fn make_bot(&self, params: BotParams) -> Box<dyn Bot> {
                match self {
                    $(ProtocolSection::$ty(o) => {
                        <$module::$ty as $crate::protocol::registry::Protocol>::make_bot(o, params)
                    })*
                }
            }

            pub fn make_server(
                &self,
                server: &$crate::protocol::registry::ServerParams,
                now: std::time::Instant,
            ) -> Box<dyn Server> {
                match self {
                    $(ProtocolSection::$ty(o) => {
                        <$module::$ty as $crate::protocol::registry::Protocol>::make_server(
                            o, server, now,
                        )
                    })*
                }
            }

            /// See [`Protocol::measures_rtt`](crate::protocol::registry::Protocol::measures_rtt).
            pub fn measures_rtt(&self) -> bool {
                match self {
                    $(ProtocolSection::$ty(o) => {
                        <$module::$ty as $crate::protocol::registry::Protocol>::measures_rtt(o)
                    })*
                }
            }

            pub fn players_per_instance(
                &self,
                server: &$crate::protocol::registry::ServerParams,
            ) -> Option<usize> {
                match self {
                    $(ProtocolSection::$ty(o) => {
                        <$module::$ty as $crate::protocol::registry::Protocol>::players_per_instance(
                            o, server,
                        )
                    })*
                }
            }

            /// See [`Protocol::check_input_rate`](crate::protocol::registry::Protocol::check_input_rate).
            pub fn check_input_rate(&self, hz: f64) -> Result<(), String> {
                match self {
                    $(ProtocolSection::$ty(o) => {
                        <$module::$ty as $crate::protocol::registry::Protocol>::check_input_rate(
                            o, hz,
                        )
                    })*
                }
            }

            /// Why this configuration cannot take `metric`, or `None` when it can.
            pub fn cannot_measure(
                &self,
                metric: $crate::metrics::threshold::Metric,
            ) -> Option<&'static str> {
                match self {
                    $(ProtocolSection::$ty(o) => {
                        <$module::$ty as $crate::protocol::registry::Protocol>::cannot_measure(
                            o, metric,
                        )
                    })*
                }
            }
        }
    };
}

pub(crate) use protocols;
