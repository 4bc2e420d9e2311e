//! Sans-IO protocol cores.
//!
//! Every protocol is a codec plus two state machines, a [`Bot`] (the simulated client) and a
//! [`Server`] (the reference server). Neither touches a socket, a clock or a runtime: the
//! caller pushes events in (`start`, `handle_datagram`, `handle_timeout`, `stop`) with the
//! current time as a value, and pulls actions out (`poll_transmit`, `poll_timeout`). Metrics
//! are recorded into the caller's [`Recorder`], which belongs to a worker, never to a bot.
//!
//! That contract (after quinn-proto) lets a test drive a thousand bots and a server in one
//! thread with a simulated clock and a simulated lossy link, deterministically.

pub mod prelude;
pub mod registry;

pub mod acks;
pub mod admission;
pub mod hint;
pub mod idmap;
pub mod input_grid;
pub mod inspect;
pub mod pattern;
pub mod ping;
pub mod predict;
pub mod seqwindow;
pub mod session;
pub mod sim;
pub mod tail;
pub mod timers;
pub mod wire;

// The built-in protocols (the games) live in `crate::games`, above this toolkit: they use
// only `crate::protocol::prelude`, as a protocol in a user's crate does.

pub use registry::{AnyProtocol, ProtocolName, ProtocolSection};

pub use registry::{
    DatagramBurst, EnetCompression, EnetNeeds, Protocol, ServerParams, TransportNeeds,
};

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::metrics::{MetricDesc, Recorder};
pub use crate::metrics::{Phase, ServerStats};
pub use pattern::{InputPattern, Keys, PatternState};

/// Most entities a bot tracks. A server that announces more (a hostile or broken one
/// inventing entities) is refused and counted (`entity_refused_table_full`), so a bot's memory
/// stays bounded whatever the server sends.
pub const MAX_TRACKED_ENTITIES: usize = 65_536;

/// Largest datagram any protocol here writes. Callers hand buffers of at least this size to
/// `poll_transmit`.
pub const MAX_DATAGRAM: usize = 1500;

/// Largest message a protocol hands a transport that fragments (ENet's reliable channels) in
/// one [`Transmit`]: the engine's transmit buffers hold this much. A snapshot that is "100 KB
/// to 5 MB uncompressed" (ZergCity's FullSnapshot) does not fit a datagram; ENet splits it.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// What a state machine wants sent. The bytes are already in the caller's buffer.
///
/// `channel` and `reliable` are delivery hints for transports that have them (ENet); raw UDP
/// ignores both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written at the start of the caller's buffer.
    pub len: usize,
    /// Delivery channel (ENet); 0 where the transport has none.
    pub channel: u8,
    /// Deliver reliably (ENet's reliable flag, GNS' reliable send); raw UDP ignores it.
    pub reliable: bool,
}

impl Transmit {
    /// An unreliable datagram on the default channel: all that raw UDP knows.
    pub fn datagram(len: usize) -> Self {
        Self {
            len,
            channel: 0,
            reliable: false,
        }
    }
}

/// Where a bot is in its life. The engine counts these; it never looks inside a protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BotPhase {
    /// Not started yet.
    Idle,
    /// Handshake in progress.
    Connecting,
    /// Handshake done; playing.
    Connected,
    /// Gave up (timeout, refusal); the reason was recorded as a failure counter.
    Failed,
    /// Left after `stop` or after the server closed the session.
    Closed,
}

impl BotPhase {
    /// Connecting or connected: a datagram from the server belongs to a session.
    pub fn in_session(self) -> bool {
        matches!(self, BotPhase::Connecting | BotPhase::Connected)
    }

    /// The phase after `Bot::stop`: closed, except that a bot that failed stays failed (its
    /// failure is what the run counts).
    pub fn after_stop(self) -> BotPhase {
        match self {
            BotPhase::Failed => BotPhase::Failed,
            _ => BotPhase::Closed,
        }
    }

    /// The first question of every bot's `handle_datagram`: does a datagram from the server
    /// belong to a session now? When not (before `start`, after failing or leaving), it is
    /// counted as `datagram_outside_session` and the bot should drop it.
    pub fn takes_datagram(self, rec: &mut Recorder) -> bool {
        let yes = self.in_session();
        if !yes {
            rec.event("datagram_outside_session");
        }
        yes
    }
}

/// Behaviour every protocol's bot shares, taken from the scenario.
#[derive(Debug, Clone)]
pub struct BotParams {
    /// Index of this bot in the whole swarm (stable across runs with the same scenario).
    pub index: u32,
    /// Inputs per second on the fixed grid; 0 schedules none (scenarios require more than 0).
    pub input_rate_hz: f64,
    /// Send inputs only when the pattern changes (as some specs describe) instead of at the rate.
    pub input_on_change: bool,
    /// Where on the input grid this bot sits, so bots spread across the tick.
    pub phase_offset: Duration,
    /// When set, the instant the bot's input grid is counted from: its slots fall on
    /// `input_epoch + phase_offset + k × period`, whenever its play starts, so bots of one
    /// phase share their send instants (the engine sets it to the run's start when its
    /// workers serve timers in steps, and draws the phases from the steps). `None`: the grid
    /// starts where play starts (plus `phase_offset`).
    pub input_epoch: Option<Instant>,
    /// The input pattern (which keys, when).
    pub pattern: InputPattern,
    /// Interval between RTT probes.
    pub ping_interval: Duration,
    /// Handshake: resend the hello this often until answered...
    pub handshake_retry: Duration,
    /// ...and give up after this long.
    pub handshake_timeout: Duration,
    /// Declare the session dead when the server stays silent this long.
    pub server_silence_timeout: Duration,
    /// Seed of this bot's own generator (derived from the scenario seed and the index).
    pub seed: u64,
    /// Every server address of the run (the scenario's targets, or the embedded servers the
    /// engine started), for a protocol whose servers can send a bot elsewhere (DarkAges'
    /// zone handoff) to check where it is sent. Empty: not known (hand-built bots in tests).
    pub targets: std::sync::Arc<[std::net::SocketAddr]>,
}

impl BotParams {
    /// Defaults for tests and for scenarios that leave behaviour unset.
    pub fn with_index(index: u32, seed: u64) -> Self {
        Self {
            index,
            input_rate_hz: 60.0,
            input_on_change: false,
            phase_offset: Duration::ZERO,
            input_epoch: None,
            pattern: InputPattern::RandomWalk {
                change_every: Duration::from_millis(500),
            },
            ping_interval: Duration::from_secs(1),
            handshake_retry: Duration::from_millis(500),
            handshake_timeout: Duration::from_secs(5),
            server_silence_timeout: Duration::from_secs(5),
            seed,
            targets: std::sync::Arc::from(Vec::new()),
        }
    }

    /// Time between two inputs on the grid, or `None` when input is sent on change only.
    pub fn input_period(&self) -> Option<Duration> {
        if self.input_rate_hz > 0.0 {
            Some(Duration::from_secs_f64(1.0 / self.input_rate_hz))
        } else {
            None
        }
    }
}

/// A simulated client. See the module docs for the contract.
pub trait Bot: Send {
    /// Begin the session (send the hello).
    fn start(&mut self, now: Instant, rec: &mut Recorder);
    /// One datagram (or transport packet) from the server. The caller counts it
    /// (`Recorder::datagram_down`), as it counts what the bot sends.
    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder);
    /// The time from [`Bot::poll_timeout`] has come (or passed).
    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder);
    /// End the session politely (send the protocol's disconnect, if it has one).
    fn stop(&mut self, now: Instant, rec: &mut Recorder);
    /// Write the next datagram to send into `buf`; `None` when nothing is pending.
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit>;
    /// When the bot next wants [`Bot::handle_timeout`].
    fn poll_timeout(&self) -> Option<Instant>;
    /// Where the bot is in its session (the engine counts bots per phase).
    fn phase(&self) -> BotPhase;
    /// Where the bot is, in the words the report counts per second ([`Phase`]). The default
    /// reads [`Bot::phase`]: `Connecting` is the protocol handshake and `Connected` is in
    /// game. A protocol with a stage between the hello and play (City's content transfer)
    /// says so here. The engine adds the phases only it sees (transport handshake,
    /// reconnecting) and calls this once a second per bot, never per packet.
    fn life_phase(&self) -> Phase {
        match self.phase() {
            BotPhase::Idle => Phase::Connecting,
            BotPhase::Connecting => Phase::ProtocolHandshake,
            BotPhase::Connected => Phase::InGame,
            BotPhase::Failed => Phase::Failed,
            BotPhase::Closed => Phase::Closed,
        }
    }
    /// The message a bot that is not yet playing waits for ("ServerHello",
    /// "ContentManifest"), for the console's "20 bots waiting for ContentManifest for 15 s".
    /// `None` when the protocol does not name one.
    fn waiting_for(&self) -> Option<&'static str> {
        None
    }
    /// Bytes from the transport's stream, for a protocol that logs in over TCP before it
    /// plays over UDP ([`TransportNeeds::UdpTcpLogin`]); a bot sends on the stream with
    /// `Transmit { reliable: true }`. The bytes are a piece of a byte stream, not a message:
    /// the protocol frames them. Other transports never call it.
    fn handle_stream(&mut self, _now: Instant, _data: &[u8], rec: &mut Recorder) {
        rec.event("stream_bytes_unexpected");
    }
    /// The transport's session under the bot ended (ENet disconnect or timeout; the login
    /// stream of [`TransportNeeds::UdpTcpLogin`] closed). Raw UDP never calls it.
    /// The bot should record why and move to `Closed` or `Failed`.
    fn handle_transport_closed(&mut self, _now: Instant, _rec: &mut Recorder) {}
    /// The bot wants its transport session replaced: the current one dropped at once (as a
    /// lost connection would be) and a new one opened, to `to` or to the same server
    /// (ZergCity's reconnection, DarkAges' zone handoff). The engine asks after every call.
    fn poll_relink(&mut self) -> Option<Relink> {
        None
    }
    /// The session asked for with [`Bot::poll_relink`] is up: the bot may send on it.
    fn handle_relinked(&mut self, _now: Instant, _rec: &mut Recorder) {}
    /// What this bot would need to take its session up again after its connection is lost
    /// without a goodbye (a scenario's reconnect storm drops it): for a protocol with a
    /// reconnect token, the token and whatever else its resume message carries (ZergCity:
    /// player id and token, 17 bytes). The engine asks at the drop, keeps the bytes opaque and
    /// hands them to the bot that comes back ([`Bot::resume_from`]). `None`, the default: the
    /// bot comes back as a new session with a new handshake.
    fn resume_state(&self) -> Option<Vec<u8>> {
        None
    }
    /// Called on a new bot before [`Bot::start`]: it is a dropped bot coming back, with what
    /// the dropped one's [`Bot::resume_state`] returned. Its handshake should resume the old
    /// session (ZergCity's Reconnect with the token) and, if the server refuses, join anew.
    /// The default ignores it (a new session).
    fn resume_from(&mut self, _state: &[u8]) {}
    /// Once in play after [`Bot::resume_from`]: `Some(true)` when the server took the old
    /// session back, `Some(false)` when it refused the token and the bot joined anew. `None`
    /// (the default): no resumption was tried. The engine counts each (`lifecycle_storm_resumed`,
    /// `lifecycle_storm_resume_refused`) and times the way back from the drop.
    fn resumed(&self) -> Option<bool> {
        None
    }
}

/// A new transport session for a bot that is already playing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relink {
    /// Another server (a zone handoff), or `None` for the same one (a reconnection).
    pub to: Option<SocketAddr>,
}

/// Who a reference server is talking to: an opaque id the transport under the server hands
/// out (one per source address for raw UDP, one per ENet peer, one per GNS connection).
///
/// Servers key their sessions by it and never see addresses, so several bots behind one
/// socket (ENet's `bots_per_socket`) are distinct players, and a transport whose connections
/// are handles rather than addresses (GNS) fits the same trait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "conn#{}", self.0)
    }
}

/// A reference server, keyed by connection.
pub trait Server: Send {
    /// One datagram (or transport message) from connection `from`.
    fn handle_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]);
    /// The time from [`Server::poll_timeout`] has come (or passed).
    fn handle_timeout(&mut self, now: Instant);
    /// Next datagram to send and its destination.
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)>;
    /// When the server next wants [`Server::handle_timeout`] (its next tick).
    fn poll_timeout(&self) -> Option<Instant>;
    /// What the server counted so far (sessions, refusals, decode errors, ...).
    fn stats(&self) -> &ServerStats;
    /// A transport session from `from` was established (ENet connect). Raw UDP never calls it.
    fn handle_connect(&mut self, _now: Instant, _from: ConnId) {}
    /// The transport session from `from` ended (ENet disconnect or timeout).
    fn handle_disconnect(&mut self, _now: Instant, _from: ConnId) {}
    /// A session the server is done with: the transport closes it (ENet, after what was
    /// queued for it) or forgets the connection id (raw UDP), e.g. a refused player or one
    /// that timed out.
    fn poll_close(&mut self) -> Option<ConnId> {
        None
    }
}

/// Static description of a protocol, shown by `tickswarm protocols` and in reports.
#[derive(Debug, Clone, Copy)]
pub struct ProtocolInfo {
    /// Name as scenarios write it (`protocol: { <name>: {...} }`): lower case, unique.
    pub name: &'static str,
    /// Which specification (and version) the protocol implements, in one line.
    pub spec: &'static str,
    /// The transports it can run over, in words (`tickswarm protocols` shows it).
    pub transport: &'static str,
    /// The port a server of this protocol listens on unless told otherwise.
    pub default_port: u16,
    /// How RTT is measured.
    pub rtt: &'static str,
    /// How downstream (server to bot) loss is measured.
    pub downstream_loss: &'static str,
    /// How upstream loss is measured, or why it cannot be.
    pub upstream_loss: &'static str,
    /// Each dialect's option value and one line on what it is.
    pub dialects: &'static [(&'static str, &'static str)],
    /// The protocol's own metrics (under `protocol_metrics`) and how the report shows them.
    pub metrics: &'static [MetricDesc],
}

/// A boxed bot is a bot: `Sim<Box<dyn Bot>, Box<dyn Server>>` drives any registered
/// protocol through [`ProtocolSection::make_bot`] and [`ProtocolSection::make_server`].
impl<B: Bot + ?Sized> Bot for Box<B> {
    fn start(&mut self, now: Instant, rec: &mut Recorder) {
        (**self).start(now, rec)
    }
    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        (**self).handle_datagram(now, data, rec)
    }
    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        (**self).handle_timeout(now, rec)
    }
    fn stop(&mut self, now: Instant, rec: &mut Recorder) {
        (**self).stop(now, rec)
    }
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        (**self).poll_transmit(buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (**self).poll_timeout()
    }
    fn phase(&self) -> BotPhase {
        (**self).phase()
    }
    fn life_phase(&self) -> Phase {
        (**self).life_phase()
    }
    fn waiting_for(&self) -> Option<&'static str> {
        (**self).waiting_for()
    }
    fn handle_transport_closed(&mut self, now: Instant, rec: &mut Recorder) {
        (**self).handle_transport_closed(now, rec)
    }
    fn poll_relink(&mut self) -> Option<Relink> {
        (**self).poll_relink()
    }
    fn handle_relinked(&mut self, now: Instant, rec: &mut Recorder) {
        (**self).handle_relinked(now, rec)
    }
    fn handle_stream(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        (**self).handle_stream(now, data, rec)
    }
    fn resume_state(&self) -> Option<Vec<u8>> {
        (**self).resume_state()
    }
    fn resume_from(&mut self, state: &[u8]) {
        (**self).resume_from(state)
    }
    fn resumed(&self) -> Option<bool> {
        (**self).resumed()
    }
}

/// A boxed server is a server (see the `Bot` impl for `Box`).
impl<S: Server + ?Sized> Server for Box<S> {
    fn handle_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) {
        (**self).handle_datagram(now, from, data)
    }
    fn handle_timeout(&mut self, now: Instant) {
        (**self).handle_timeout(now)
    }
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
        (**self).poll_transmit(buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (**self).poll_timeout()
    }
    fn stats(&self) -> &ServerStats {
        (**self).stats()
    }
    fn handle_connect(&mut self, now: Instant, from: ConnId) {
        (**self).handle_connect(now, from)
    }
    fn handle_disconnect(&mut self, now: Instant, from: ConnId) {
        (**self).handle_disconnect(now, from)
    }
    fn poll_close(&mut self) -> Option<ConnId> {
        (**self).poll_close()
    }
}
