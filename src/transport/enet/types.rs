//! What a host hands its caller: peer ids, events, delivered packets, peer states, the
//! link's and the socket's counters, and errors.

use std::fmt;
use std::net::SocketAddr;
use std::ops::Deref;
use std::time::Duration;

use rusty_enet as enet;

use super::ack_rtt::AckRttStats;

/// Why an ENet operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnetError {
    #[error("invalid ENet setting: {0}")]
    BadParameter(&'static str),
    #[error("no free ENet peer slot (the host has {0})")]
    NoFreePeer(usize),
    #[error("no ENet peer {0:?} on this host")]
    UnknownPeer(PeerId),
    #[error("ENet peer is not connected")]
    NotConnected,
    #[error("ENet channel {0} is not open on this connection")]
    InvalidChannel(u8),
    #[error("packet of {0} bytes is larger than ENet accepts")]
    PacketTooLarge(usize),
    #[error("ENet could not queue the packet")]
    FailedToQueue,
}

/// A peer slot of an [`EnetHost`](super::EnetHost). Slots are reused after a peer's `Disconnected` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerId(pub(super) usize);

impl PeerId {
    /// The slot number, `0..peer_limit`: an index for the caller's per-peer tables.
    pub fn index(self) -> usize {
        self.0
    }
}

/// Why a peer's session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisconnectReason {
    /// This side asked ([`EnetHost::disconnect`](super::EnetHost::disconnect) or [`EnetHost::disconnect_now`](super::EnetHost::disconnect_now)).
    Local,
    /// The remote side closed the session or stopped answering. ENet 1.3 reports both the same
    /// way (a timeout is a disconnect with data 0).
    Remote,
    /// The connection never completed: refused, no free slot at the server, or no answer within
    /// the peer timeout.
    ConnectFailed,
}

/// Something that happened on an ENet host, from [`EnetHost::poll_event`](super::EnetHost::poll_event).
///
/// Every peer that [`EnetHost::connect`](super::EnetHost::connect) returned, or that a `Connected` event announced, ends
/// with exactly one `Disconnected` event.
#[derive(Debug)]
pub enum EnetEvent {
    Connected {
        peer: PeerId,
        addr: SocketAddr,
        /// The 32-bit value the connecting side passed to `connect`.
        data: u32,
    },
    Received {
        peer: PeerId,
        channel: u8,
        packet: EnetPacket,
    },
    Disconnected {
        peer: PeerId,
        /// The value the remote side passed to its disconnect (0 on a timeout).
        data: u32,
        reason: DisconnectReason,
    },
}

/// A packet ENet delivered: its payload, reassembled if it was fragmented, without a copy.
///
/// Whether it came reliably is not reported: rusty_enet 0.4's `Packet::kind` misreads the
/// flags of received packets (it reports every packet as reliable). Protocols know their channel
/// layout (City: 0 reliable, 1 unreliable), which is what they act on.
pub struct EnetPacket(pub(super) enet::Packet);

impl EnetPacket {
    pub fn bytes(&self) -> &[u8] {
        self.0.data()
    }
}

impl Deref for EnetPacket {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0.data()
    }
}

impl AsRef<[u8]> for EnetPacket {
    fn as_ref(&self) -> &[u8] {
        self.0.data()
    }
}

impl fmt::Debug for EnetPacket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EnetPacket({} bytes)", self.0.data().len())
    }
}

/// Where a peer is in its session, simplified from ENet's ten states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Free slot, or the session is over.
    Disconnected,
    /// Handshake in progress (either direction).
    Connecting,
    Connected,
    /// A disconnect is under way.
    Disconnecting,
}

impl From<enet::PeerState> for PeerState {
    fn from(s: enet::PeerState) -> Self {
        use enet::PeerState as S;
        match s {
            S::Disconnected | S::Zombie => PeerState::Disconnected,
            S::Connecting
            | S::AcknowledgingConnect
            | S::ConnectionPending
            | S::ConnectionSucceeded => PeerState::Connecting,
            S::Connected => PeerState::Connected,
            S::DisconnectLater | S::Disconnecting | S::AcknowledgingDisconnect => {
                PeerState::Disconnecting
            }
        }
    }
}

/// One peer's link, as ENet measures it, plus payload counters kept by this host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeerStats {
    pub state: PeerState,
    /// ENet's smoothed round-trip time, or `None` until the first acknowledgement measured one
    /// (before that ENet holds a 500 ms placeholder, which must not be reported as a sample).
    pub rtt: Option<Duration>,
    /// ENet's round-trip variance (mean deviation), alongside `rtt`.
    pub rtt_variance: Option<Duration>,
    /// ENet's smoothed loss estimate of reliable commands, 0.0..=1.0. ENet updates it once per
    /// 10 s window in which something was sent, so it stays 0 during the first 10 s.
    pub packet_loss: f64,
    /// Variance of that estimate, same scale.
    pub packet_loss_variance: f64,
    /// Packets (payloads) handed to [`EnetHost::send`](super::EnetHost::send) and accepted, and their bytes.
    pub packets_sent: u64,
    pub bytes_sent: u64,
    /// Packets ENet delivered from this peer, and their bytes.
    pub packets_received: u64,
    pub bytes_received: u64,
    /// The MTU the two sides settled on.
    pub mtu: u16,
}

/// Datagram counters of one host's socket queues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostStats {
    pub datagrams_in: u64,
    pub bytes_in: u64,
    pub datagrams_out: u64,
    pub bytes_out: u64,
    /// Datagrams dropped on the way in: too large for ENet, or the queue was full.
    pub dropped_in: u64,
    /// Datagrams dropped on the way out because nobody drained the queue.
    pub dropped_out: u64,
    /// Datagrams not sent to an unproven address because they would have exceeded what it
    /// sent us (see "Admission" in the module docs), and their bytes.
    pub gated_out: u64,
    pub gated_bytes_out: u64,
    /// Half-open connects dropped after [`EnetConfig::half_open_timeout`](super::EnetConfig::half_open_timeout), and those that
    /// gave their slot to a newer CONNECT.
    pub half_open_expired: u64,
    pub half_open_evicted: u64,
    /// Sessions dropped because their remote peer (same address, same peer id) connected
    /// anew: see "Address reuse" in the module docs.
    pub superseded: u64,
    /// Datagrams from an unproven address dropped because an acknowledgement in them on
    /// the handshake channel named no VERIFY_CONNECT we sent it, or echoed a sent time no
    /// datagram carrying it had (a blind guess); each ends that half-open connect.
    pub forged_proofs: u64,
    /// What the acknowledgement timing saw ([`EnetConfig::ack_rtt`](super::EnetConfig::ack_rtt)).
    pub ack_rtt: AckRttStats,
}
