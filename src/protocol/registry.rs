//! The protocol registry: the one seam through which the rest of the crate reaches a protocol.
//!
//! Each protocol implements [`Protocol`] for one marker type: its static description, its
//! options (the scenario's `protocol: { <name>: {...} }` section, typed, so a mistake is
//! reported at its own line and column), the transport it runs over, and how to build a bot
//! and a reference server. [`ProtocolName`] is a handle on one (the built-in ones are listed
//! in `games/mod.rs`, the catalogue, others added at run time with `tickswarm::api::register`,
//! which is what `tickswarm::main_with` does), and [`ProtocolSection`] holds one protocol's typed options;
//! scenario parsing, `serve`, `protocols`, the engine and the report use them without naming
//! any protocol.

use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::inspect::Inspect;
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
    /// arrive through [`Bot::handle_stream`]; datagrams as for
    /// [`TransportNeeds::Udp`]. The bot starts once the TCP connection is up, so a refused or
    /// unanswered connect is the transport's failure, with its reason.
    UdpTcpLogin {
        /// The UDP port's distance from the TCP port the target names.
        udp_port_offset: u16,
    },
}

/// A burst of datagrams a bot's socket must be able to hold ([`Protocol::receive_burst`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramBurst {
    /// The largest datagram, in bytes.
    pub largest: usize,
    /// How many of them.
    pub count: usize,
}

impl DatagramBurst {
    /// What a protocol that says nothing gets: 16 datagrams of 64 KiB, 1 MiB.
    pub const DEFAULT: DatagramBurst = DatagramBurst {
        largest: 64 * 1024,
        count: 16,
    };

    /// `largest × count`, in bytes.
    pub fn bytes(&self) -> usize {
        self.largest.saturating_mul(self.count)
    }
}

/// ENet settings a protocol fixes (both ends must agree on them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnetNeeds {
    /// ENet channels, the same count at both ends.
    pub channels: usize,
    /// ENet's own packet compression (not a protocol's payload compression, such as
    /// ZergCity's LZ4 inside its messages).
    pub compression: EnetCompression,
}

/// ENet-level compression of whole datagrams; both ends must use the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EnetCompression {
    /// No compression (ENet's default).
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

    /// Whether a reference server of this crate can speak it, so `serve` and an embedded
    /// target can start one: none speaks a TCP login (R-Type's implementation dialect loads
    /// the real server only). The reason, in words, when not.
    pub fn check_servable(&self) -> Result<(), String> {
        match self {
            TransportNeeds::UdpTcpLogin { .. } => Err(
                "it logs in over TCP before playing over UDP, and no reference server speaks \
                 that login: point a scenario's target at the real server"
                    .into(),
            ),
            _ => Ok(()),
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
    /// Most sessions one server instance keeps at once.
    pub max_clients: usize,
    /// Forget a session silent this long.
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
    /// How long a dropped player's session stays resumable (its reconnect token valid), for
    /// protocols whose servers hold one; default per protocol (ZergCity's implementation
    /// dialect: 30 s, as the real server). `0s`: the server forgets a session the moment its
    /// connection drops, so every resume is refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_grace: Option<Dur>,
    /// A test aid that burns CPU on purpose, never for production load: simulated work per
    /// player per tick, in wall time (`50us`, `1ms`). After each tick the server driver
    /// busy-spins until `tick_cost_per_player × sessions open` has passed since the tick
    /// began, so the tick time grows linearly with the players and the server's capacity at
    /// a tick budget is known (`docs/guide/tick-cost.md`). Unset: no added cost. At most
    /// 100ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick_cost_per_player: Option<Dur>,
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
    /// A generator's target rather than a game (`serve --sink`, protocols whose
    /// [`Protocol::has_sink`] says so): sessions are admitted, pings answered, inputs dropped,
    /// and no world is simulated or sent. Never set by a scenario.
    #[serde(skip)]
    pub sink: bool,
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
            session_grace: None,
            tick_cost_per_player: None,
            instance: 0,
            bind: None,
            sink: false,
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
        if let Some(Dur(cost)) = self.tick_cost_per_player {
            if cost > Duration::from_millis(100) {
                return Err(format!(
                    "server.tick_cost_per_player must be at most 100ms (it is simulated work \
                     a tick spends per player, a test aid), got {}",
                    crate::duration::format_duration(cost)
                ));
            }
        }
        Ok(())
    }
}

/// One protocol, as the registry sees it: implemented by a marker type (a unit struct), in
/// each built-in protocol's folder or in a user's crate. Every method is static; the
/// registry reaches them through [`AnyProtocol`] and [`ProtocolSection`], once per bot or
/// server made, never per packet.
///
/// ```
/// use std::time::Instant;
/// use tickswarm::api::*;
///
/// struct Silent;
/// impl Protocol for Silent {
///     type Options = ();
///     const INFO: ProtocolInfo = ProtocolInfo {
///         name: "silent",
///         spec: "a protocol that never speaks",
///         transport: "raw UDP",
///         default_port: 4999,
///         rtt: "not measured",
///         downstream_loss: "not measured",
///         upstream_loss: "not measured",
///         dialects: &[],
///         metrics: &[],
///     };
///     fn transport(_: &()) -> TransportNeeds {
///         TransportNeeds::Udp
///     }
///     fn validate(_: &(), _: &ServerParams) -> Result<(), String> {
///         Ok(())
///     }
///     fn dialect_name(_: &()) -> String {
///         "only".into()
///     }
///     fn make_bot(_: &(), _: BotParams) -> Box<dyn Bot> {
///         panic!("this example only registers; a real protocol returns its bot")
///     }
///     fn make_server(_: &(), _: &ServerParams, _: Instant) -> Box<dyn Server> {
///         panic!("this example only registers; a real protocol returns its server")
///     }
/// }
///
/// let name = register(&Silent).unwrap();
/// assert_eq!("silent".parse::<ProtocolName>(), Ok(name));
/// assert_eq!(name.default_section().dialect_name(), "only");
/// ```
pub trait Protocol: Send + Sync + 'static {
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

    /// A bot of this protocol, not yet started.
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

    /// Whether the reference server has a sink mode ([`ServerParams::sink`]).
    fn has_sink(_opts: &Self::Options) -> bool {
        false
    }

    /// What the server can send one bot in a burst: its largest datagram and how many of them
    /// may arrive while a worker is away for a moment (a snapshot burst). Bot sockets ask the
    /// kernel for `largest × count` bytes of buffer each way (ENet hosts shared by several
    /// bots: that many times more), unless the scenario sets `engine.socket_buffer`. The
    /// default, 16 datagrams of 64 KiB (1 MiB), fits a protocol that says nothing; a protocol
    /// whose datagrams are small says so and its bots commit far less kernel memory.
    fn receive_burst(_opts: &Self::Options) -> DatagramBurst {
        DatagramBurst::DEFAULT
    }

    /// Whether the bots measure round trips themselves (they send their own Ping every
    /// `ping_interval` and record `rtt_us` from the answers). A dialect whose server never
    /// answers says `false`: the run's `rtt_us` then comes from the transport where it can
    /// measure one (ENet's acknowledgements), and `summary.json`'s `rtt_source` says which.
    fn measures_rtt(_opts: &Self::Options) -> bool {
        true
    }

    /// Whether the bots send player input on the `behaviour.input_rate` grid. A dialect whose
    /// client sends none (ZergCity's POC-2 benchmark: its bots only acknowledge snapshots)
    /// says `false`, so `validate` does not promise an input rate the run will not send.
    fn sends_input(_opts: &Self::Options) -> bool {
        true
    }

    /// Whether `input_mode: on_change` applies: the bots send an input only when the
    /// pattern's keys change. A protocol whose every input is one tick of movement (City) or
    /// whose inputs are not held keys (ZergCity's actions) says `false`: its bots send every
    /// slot, and `validate` says so rather than promise the mode.
    fn input_on_change_applies(_opts: &Self::Options) -> bool {
        true
    }

    /// Check the scenario's `behaviour.input_rate` against what this configuration's server
    /// takes (DarkAges' public server kicks above 65 inputs a second); the message names the
    /// key and why.
    fn check_input_rate(_opts: &Self::Options, _hz: f64) -> Result<(), String> {
        Ok(())
    }

    /// The input rate a client of this configuration usually sends, in inputs a second: what
    /// `tickswarm init` writes into a first scenario's `behaviour.input_rate` (a shooter's 60,
    /// a city builder's few actions). It must pass [`Protocol::check_input_rate`].
    fn usual_input_rate(_opts: &Self::Options) -> f64 {
        60.0
    }

    /// A decode-only reader of this configuration's messages, for `tickswarm inspect` (a
    /// capture of a real client, each flow tried against every protocol and dialect). The
    /// default: this protocol cannot be inspected, which `inspect` says of it.
    fn inspector(_opts: &Self::Options) -> Option<Box<dyn Inspect>> {
        None
    }
}

/// A [`Protocol`] seen through a trait object, so the list of protocols can grow at run time
/// (a user's crate registers its own with `tickswarm::api::register` or `tickswarm::main_with`).
///
/// Implemented for every [`Protocol`] whose marker is a value (a unit struct); sealed, so
/// it cannot be implemented any other way. Users never call its methods: they pass `&MyGame`
/// where a `&'static dyn AnyProtocol` is asked for.
pub trait AnyProtocol: sealed::Sealed + Send + Sync + 'static {
    /// The protocol's [`Protocol::INFO`].
    fn info(&self) -> &'static ProtocolInfo;
    /// The protocol's [`Protocol::DIALECT_KEY`].
    fn dialect_key(&self) -> &'static str;
    /// The marker's type, which tells the same protocol registered twice from two with one
    /// name.
    #[doc(hidden)]
    fn marker(&self) -> std::any::TypeId;
    /// Every option at its default, with `me` naming this protocol.
    #[doc(hidden)]
    fn default_section(&self, me: ProtocolName) -> ProtocolSection;
    /// The options read from `d`, with `me` naming this protocol.
    #[doc(hidden)]
    fn deserialize_section(
        &self,
        me: ProtocolName,
        d: &mut dyn erased_serde::Deserializer<'_>,
    ) -> Result<ProtocolSection, erased_serde::Error>;
}

mod sealed {
    pub trait Sealed {}
    impl<P: super::Protocol> Sealed for P {}
}

impl<P: Protocol> AnyProtocol for P {
    fn info(&self) -> &'static ProtocolInfo {
        &P::INFO
    }
    fn dialect_key(&self) -> &'static str {
        P::DIALECT_KEY
    }
    fn marker(&self) -> std::any::TypeId {
        std::any::TypeId::of::<P>()
    }
    fn default_section(&self, me: ProtocolName) -> ProtocolSection {
        ProtocolSection(std::sync::Arc::new(Section::<P> {
            me,
            opts: P::Options::default(),
        }))
    }
    fn deserialize_section(
        &self,
        me: ProtocolName,
        d: &mut dyn erased_serde::Deserializer<'_>,
    ) -> Result<ProtocolSection, erased_serde::Error> {
        let opts: P::Options = erased_serde::deserialize(d)?;
        Ok(ProtocolSection(std::sync::Arc::new(Section::<P> {
            me,
            opts,
        })))
    }
}

/// A protocol tickswarm knows: one of the built-in ones or one registered at run time.
///
/// A copyable handle; two handles are equal when they name the same protocol (its
/// [`ProtocolInfo::name`], which `tickswarm::api::register` keeps unique).
#[derive(Clone, Copy)]
pub struct ProtocolName(&'static dyn AnyProtocol);

impl PartialEq for ProtocolName {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}
impl Eq for ProtocolName {}
impl std::hash::Hash for ProtocolName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}
impl std::fmt::Debug for ProtocolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
impl std::fmt::Display for ProtocolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ProtocolName {
    /// The handle of a protocol marker (not registered by this: see `tickswarm::api::register`).
    pub const fn new(p: &'static dyn AnyProtocol) -> Self {
        Self(p)
    }

    /// Its name, as scenarios write it.
    pub fn as_str(self) -> &'static str {
        self.info().name
    }

    /// Its static description.
    pub fn info(self) -> &'static ProtocolInfo {
        self.0.info()
    }

    /// The option key `serve --dialect` sets.
    pub fn dialect_key(self) -> &'static str {
        self.0.dialect_key()
    }

    /// The section with every option at its default.
    pub fn default_section(self) -> ProtocolSection {
        self.0.default_section(self)
    }

    /// The marker's type: two handles with one name and different markers are two protocols.
    #[doc(hidden)]
    pub fn marker(self) -> std::any::TypeId {
        self.0.marker()
    }

    /// This protocol's options read from `d` (a scenario's `protocol: { <name>: ... }`).
    #[doc(hidden)]
    pub fn deserialize_section(
        self,
        d: &mut dyn erased_serde::Deserializer<'_>,
    ) -> Result<ProtocolSection, erased_serde::Error> {
        self.0.deserialize_section(self, d)
    }
}

/// One protocol's options, typed, behind [`ProtocolSection`].
struct Section<P: Protocol> {
    me: ProtocolName,
    opts: P::Options,
}

/// What [`ProtocolSection`] asks of its options (dispatch to the protocol's static methods).
trait AnySection: Send + Sync {
    fn name(&self) -> ProtocolName;
    fn options(&self) -> &dyn std::any::Any;
    fn eq_options(&self, other: &dyn std::any::Any) -> bool;
    fn serialize_options(&self) -> &dyn erased_serde::Serialize;
    fn debug(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result;
    fn transport(&self) -> TransportNeeds;
    fn validate(&self, server: &ServerParams) -> Result<(), String>;
    fn dialect_name(&self) -> String;
    fn make_bot(&self, params: BotParams) -> Box<dyn Bot>;
    fn make_server(&self, server: &ServerParams, now: Instant) -> Box<dyn Server>;
    fn measures_rtt(&self) -> bool;
    fn sends_input(&self) -> bool;
    fn input_on_change_applies(&self) -> bool;
    fn players_per_instance(&self, server: &ServerParams) -> Option<usize>;
    fn receive_burst(&self) -> DatagramBurst;
    fn has_sink(&self) -> bool;
    fn cannot_measure(&self, metric: Metric) -> Option<&'static str>;
    fn check_input_rate(&self, hz: f64) -> Result<(), String>;
    fn usual_input_rate(&self) -> f64;
    fn inspector(&self) -> Option<Box<dyn Inspect>>;
}

impl<P: Protocol> AnySection for Section<P> {
    fn name(&self) -> ProtocolName {
        self.me
    }
    fn options(&self) -> &dyn std::any::Any {
        &self.opts
    }
    fn eq_options(&self, other: &dyn std::any::Any) -> bool {
        other
            .downcast_ref::<P::Options>()
            .is_some_and(|o| *o == self.opts)
    }
    fn serialize_options(&self) -> &dyn erased_serde::Serialize {
        &self.opts
    }
    fn debug(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {:?}", self.me, self.opts)
    }
    fn transport(&self) -> TransportNeeds {
        P::transport(&self.opts)
    }
    fn validate(&self, server: &ServerParams) -> Result<(), String> {
        P::validate(&self.opts, server)
    }
    fn dialect_name(&self) -> String {
        P::dialect_name(&self.opts)
    }
    fn make_bot(&self, params: BotParams) -> Box<dyn Bot> {
        P::make_bot(&self.opts, params)
    }
    fn make_server(&self, server: &ServerParams, now: Instant) -> Box<dyn Server> {
        P::make_server(&self.opts, server, now)
    }
    fn measures_rtt(&self) -> bool {
        P::measures_rtt(&self.opts)
    }
    fn sends_input(&self) -> bool {
        P::sends_input(&self.opts)
    }
    fn input_on_change_applies(&self) -> bool {
        P::input_on_change_applies(&self.opts)
    }
    fn players_per_instance(&self, server: &ServerParams) -> Option<usize> {
        P::players_per_instance(&self.opts, server)
    }
    fn receive_burst(&self) -> DatagramBurst {
        P::receive_burst(&self.opts)
    }
    fn has_sink(&self) -> bool {
        P::has_sink(&self.opts)
    }
    fn cannot_measure(&self, metric: Metric) -> Option<&'static str> {
        P::cannot_measure(&self.opts, metric)
    }
    fn check_input_rate(&self, hz: f64) -> Result<(), String> {
        P::check_input_rate(&self.opts, hz)
    }
    fn usual_input_rate(&self) -> f64 {
        P::usual_input_rate(&self.opts)
    }
    fn inspector(&self) -> Option<Box<dyn Inspect>> {
        P::inspector(&self.opts)
    }
}

/// The scenario's `protocol:` section: `{ <name>: { ...options } }`, one key, the protocol's
/// name, whose value is that protocol's typed [`Protocol::Options`] (so a mistake inside the
/// options is reported at its own line and column). Cheap to clone (shared).
#[derive(Clone)]
pub struct ProtocolSection(std::sync::Arc<dyn AnySection>);

impl ProtocolSection {
    /// A section of protocol `p` with these options.
    ///
    /// ```
    /// use tickswarm::games::cafe::{Cafe, CafeOptions};
    /// use tickswarm::protocol::ProtocolSection;
    /// let s = ProtocolSection::of(&Cafe, CafeOptions::default());
    /// assert_eq!(s.name().as_str(), "cafe");
    /// assert_eq!(s.options::<Cafe>(), Some(&CafeOptions::default()));
    /// ```
    pub fn of<P: Protocol>(p: &'static P, opts: P::Options) -> Self {
        Self(std::sync::Arc::new(Section::<P> {
            me: ProtocolName(p),
            opts,
        }))
    }

    /// Which protocol.
    pub fn name(&self) -> ProtocolName {
        self.0.name()
    }

    /// The options, when the section is protocol `P`'s.
    pub fn options<P: Protocol>(&self) -> Option<&P::Options> {
        if self.name().as_str() != P::INFO.name {
            return None;
        }
        self.0.options().downcast_ref::<P::Options>()
    }

    /// The protocol's static description.
    pub fn info(&self) -> &'static ProtocolInfo {
        self.name().info()
    }

    /// See [`Protocol::transport`].
    pub fn transport(&self) -> TransportNeeds {
        self.0.transport()
    }

    /// Options and server parameters checked together; the message names the key.
    pub fn validate(&self, server: &ServerParams) -> Result<(), String> {
        server.validate()?;
        // A transport this build lacks (GNS without the `gns` feature) is refused here,
        // before anything binds or connects.
        self.transport().check_built()?;
        self.0.validate(server)
    }

    /// See [`Protocol::dialect_name`].
    pub fn dialect_name(&self) -> String {
        self.0.dialect_name()
    }

    /// See [`Protocol::make_bot`].
    pub fn make_bot(&self, params: BotParams) -> Box<dyn Bot> {
        self.0.make_bot(params)
    }

    /// See [`Protocol::make_server`].
    pub fn make_server(&self, server: &ServerParams, now: Instant) -> Box<dyn Server> {
        self.0.make_server(server, now)
    }

    /// See [`Protocol::measures_rtt`].
    pub fn measures_rtt(&self) -> bool {
        self.0.measures_rtt()
    }

    /// See [`Protocol::sends_input`].
    pub fn sends_input(&self) -> bool {
        self.0.sends_input()
    }

    /// See [`Protocol::input_on_change_applies`].
    pub fn input_on_change_applies(&self) -> bool {
        self.0.input_on_change_applies()
    }

    /// See [`Protocol::has_sink`].
    pub fn has_sink(&self) -> bool {
        self.0.has_sink()
    }

    /// See [`Protocol::receive_burst`].
    pub fn receive_burst(&self) -> DatagramBurst {
        self.0.receive_burst()
    }

    /// See [`Protocol::players_per_instance`].
    pub fn players_per_instance(&self, server: &ServerParams) -> Option<usize> {
        self.0.players_per_instance(server)
    }

    /// Why this configuration cannot take `metric`, or `None` when it can.
    pub fn cannot_measure(&self, metric: Metric) -> Option<&'static str> {
        self.0.cannot_measure(metric)
    }

    /// See [`Protocol::check_input_rate`].
    pub fn check_input_rate(&self, hz: f64) -> Result<(), String> {
        self.0.check_input_rate(hz)
    }

    /// See [`Protocol::usual_input_rate`].
    pub fn usual_input_rate(&self) -> f64 {
        self.0.usual_input_rate()
    }

    /// See [`Protocol::inspector`].
    pub fn inspector(&self) -> Option<Box<dyn Inspect>> {
        self.0.inspector()
    }
}

impl std::fmt::Debug for ProtocolSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.debug(f)
    }
}

impl PartialEq for ProtocolSection {
    /// Same protocol and equal options.
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name() && self.0.eq_options(other.0.options())
    }
}

impl Serialize for ProtocolSection {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry(self.name().as_str(), self.0.serialize_options())?;
        map.end()
    }
}
