//! ENet 1.3.x transport, sans-IO, over the engine's own sockets.
//!
//! [rusty_enet] is a faithful port of the C ENet library (wire-compatible with C ENet 1.3.x;
//! `tests/enet_interop.rs` proves it against Debian's `libenet`). Its [`rusty_enet::Socket`]
//! trait lets the caller supply the socket, and that is all this module needs to make ENet
//! sans-IO: [`QueueSocket`] is a socket made of two datagram queues. The engine pushes the
//! datagrams it received on its real UDP socket into one ([`EnetHost::handle_datagram`]); ENet
//! pulls them out when serviced, and whatever ENet sends lands in the other queue, which the
//! engine drains ([`EnetHost::poll_transmit`]) and writes to its socket. Time is a value too:
//! the host's clock is a number that each call taking `now` sets, and ENet reads it instead of
//! the system clock. So an [`EnetHost`] never touches a socket or a clock, and a test can run two
//! of them back to back over a simulated link with delay and loss (see the tests below).
//!
//! # Shapes
//! - [`EnetHost`]: one ENet host = one UDP socket, any number of peers ([`EnetConfig::peer_limit`]).
//!   Servers accept peers with it; a bot generator connects several bots through one socket
//!   with it ("bots per socket" > 1: ENet multiplexes peers by the peer id in each datagram's
//!   header, so one socket carries many sessions and the generator goes past the
//!   one-socket-per-bot syscall ceiling).
//! - [`EnetClient`]: the one-peer case (one bot per socket, the default), with the peer implied.
//!
//! # How the engine drives a host
//! 1. Datagrams read from the host's socket go to [`EnetHost::handle_datagram`] (cheap: a copy
//!    into a pooled buffer).
//! 2. [`EnetHost::service`] (at `now`) runs ENet: reads the queued datagrams, dispatches
//!    connects, packets and disconnects as [`EnetEvent`]s, sends acknowledgements, pings,
//!    retransmissions, checks timeouts. Take the events with [`EnetHost::poll_event`] and hand
//!    `Received` payloads to the peer's protocol state machine.
//! 3. What the protocol wants sent goes to [`EnetHost::send`] (or [`EnetHost::send_transmit`]
//!    straight from a protocol's `Transmit`); it is only queued. Call [`EnetHost::flush`] once
//!    after a batch so ENet aggregates the batch into as few datagrams as it can.
//! 4. Drain [`EnetHost::poll_transmit`] into the socket.
//! 5. Sleep until the earlier of the next datagram and [`EnetHost::poll_timeout`], then repeat.
//!
//! `poll_timeout` is "now" while datagrams wait in the queue or sends wait for a flush,
//! otherwise the last service plus [`EnetConfig::service_interval`] while any peer is alive,
//! and `None` for an idle host. ENet keeps its own retransmission, ping and timeout deadlines
//! inside its peers and does not expose them (C ENet is meant to be serviced every frame), so
//! the interval is the resolution of those timers; ENet's clock ticks in milliseconds anyway.
//!
//! # Allocations
//! Datagram buffers are pooled in both queues, the event queue keeps its capacity, and received
//! payloads are handed out as the packet ENet reassembled ([`EnetPacket`], no copy). What
//! remains per packet is inside rusty_enet and mirrors C ENet: one allocation for a sent
//! packet's payload plus its packet header, one per queued command, and one contiguous buffer
//! per outgoing datagram.
//!
//! # Admission
//! A host that accepts connections must not be a reflector, nor let connects that never finish
//! take every peer slot (`crate::protocol::admission` has the rules every server follows):
//! - An address is *proven* once this host connected to it, or ENet's handshake with it
//!   completed (the peer acknowledged our VERIFY_CONNECT and reached Connected; only then does
//!   the game server hear of it).
//! - The acknowledgement is checked exactly, because ENet checks neither the sent time it
//!   echoes nor which transmission it names (a blind attacker echoing 0 completed a
//!   handshake with 16 guesses of peer id and session bits, and 4 such sessions carrying a
//!   blind ClientHello filled a ZergCity server). The host reads every VERIFY_CONNECT it
//!   sends to an unproven address (`enet/handshake.rs`): the address, our peer id, its
//!   sequence number, connect id and the sent time of each datagram that carried it. A
//!   datagram from an unproven address with an acknowledgement on the handshake channel
//!   (0xFF) must name that sequence number to that peer id and echo one of those sent times;
//!   otherwise ENet never sees it and the half-open connect it aimed at ends
//!   (`HostStats::forged_proofs`): one guess per CONNECT. A Connected event is believed only
//!   for a slot whose VERIFY_CONNECT was so acknowledged, for the connect id it carried. The
//!   host's clock starts at a random phase (`CLOCK_START_MS` + 0..65535 ms), so the sent
//!   time (16 bits) cannot be predicted from the server's age; a forger that has talked to
//!   the server can read the clock off its traffic, so this is a proof of reception against
//!   blind spoofing, not authentication.
//! - Until proven, the host sends an address at most the bytes it received
//!   from it, plus 16 once (range-coder output sizes differ slightly): one CONNECT (52 bytes)
//!   pays for one VERIFY_CONNECT (48), and ENet's retransmissions of it to a forged source are
//!   withheld (`HostStats::gated_out`). A real client that lost the VERIFY_CONNECT resends
//!   its CONNECT, which pays for the next one. The proof lapses 5 s after the last peer of
//!   that address is gone.
//! - A *half-open* connect (an incoming peer not yet Connected) is dropped silently after
//!   [`EnetConfig::half_open_timeout`] (2 s), and when CONNECTs arrive while no slot is free,
//!   the oldest half-open peers older than [`EnetConfig::half_open_evictable`] (200 ms, far
//!   above a round trip on which a real handshake finishes) give their slots up
//!   (`HostStats::half_open_expired`, `half_open_evicted`). A CONNECT is recognised without
//!   decoding it: its header carries the peer id 0xFFF (the sender has none yet).
//!
//! # Address reuse
//! ENet routes a datagram to a session by the receiver's peer id (0 at every one-peer client)
//! and a 2-bit session id, and a server slot's sessions cycle through those 4 ids (a fresh
//! slot's first is always 0); a client still connecting checks no session id at all. So when
//! a client process is gone and a new one gets the same ephemeral port (a reconnect storm
//! makes this common), whatever the server still sends the old session (a DISCONNECT it is
//! retransmitting, pings to a client that vanished) can reach the new session as its own, and
//! a DISCONNECT ends it. C ENet has the same weakness. Our host closes the gap on the side
//! that accepts: it reads the remote peer id and connect id from each CONNECT and from its own
//! VERIFY_CONNECT answers (`enet/handshake.rs`), and a CONNECT from an address and remote peer id
//! that one of its sessions already belongs to, with another connect id, means the remote
//! peer started over: the old session is dropped silently (`enet_peer_reset`, so nothing
//! more is sent to it) before the CONNECT is handled, and announced with a `Disconnected`
//! event (`HostStats::superseded`). Bots sharing a socket have distinct peer ids, so one
//! bot's reconnect never touches another's session.
//!
//! # Measurements
//! - Round trips, one per acknowledged reliable command, in microseconds
//!   ([`EnetHost::poll_rtt_sample`], on by default: [`EnetConfig::ack_rtt`]): every datagram
//!   passes through this host's socket, so each acknowledge-requesting command is stamped
//!   with the `now` it left at and paired with the ACKNOWLEDGE that echoes its datagram's
//!   sent time (`enet/ack_rtt.rs`; an acknowledgement of an earlier transmission of a
//!   retransmitted command is no sample). ENet's own PING is such a command, and ENet sends
//!   one to a peer it has had no acknowledgement from for [`EnetConfig::ping_interval`], so a
//!   session is measured at least that often even when its protocol sends nothing reliable.
//! - [`PeerStats`] carries ENet's own round-trip estimate (smoothed like TCP's SRTT from the
//!   same acknowledgements, in whole milliseconds) and ENet's packet-loss estimate (reliable
//!   commands that had to be retransmitted, smoothed over 10 s windows).

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusty_enet as enet;

use crate::protocol::Transmit;

mod ack_rtt;
mod handshake;
mod wire;
use ack_rtt::AckRtt;
pub use ack_rtt::AckRttStats;
use handshake::{Handshake, VerifySent};
use wire::{COMMAND_CONNECT, COMMAND_VERIFY_CONNECT};

/// The largest datagram ENet ever sends or accepts (`PROTOCOL_MAXIMUM_MTU`). Hosts send at most
/// their [`EnetConfig::mtu`] (1392 by default), so a
/// [`MAX_DATAGRAM`](crate::protocol::MAX_DATAGRAM)-sized buffer is enough for
/// [`EnetHost::poll_transmit`] unless the MTU is raised; receive buffers should be this big.
pub const MAX_ENET_DATAGRAM: usize = enet::MTU_MAX;

/// ENet's default MTU (`ENET_HOST_DEFAULT_MTU`).
pub const DEFAULT_MTU: u16 = 1392;

/// C ENet's throttle settings: (interval ms, acceleration, deceleration).
const DEFAULT_THROTTLE: (u32, u32, u32) = (
    enet::consts::PEER_PACKET_THROTTLE_INTERVAL,
    enet::consts::PEER_PACKET_THROTTLE_ACCELERATION,
    enet::consts::PEER_PACKET_THROTTLE_DECELERATION,
);

/// ENet reads 0 as "unset" in a few timestamps, so the host clock starts here rather than at 0.
const CLOCK_START_MS: u64 = 1_000;

/// Settings of one ENet host. The defaults are C ENet's, except the peer limit (one: the
/// one-bot-per-socket case) and the channel limit (two, as City uses).
#[derive(Debug, Clone)]
pub struct EnetConfig {
    /// Peer slots of the host: bots sharing this socket, or players a server accepts.
    pub peer_limit: usize,
    /// Most channels an incoming connection may open (outgoing connections ask for their own
    /// count in [`EnetHost::connect`]). 1..=255.
    pub channel_limit: usize,
    /// Bandwidth the host announces, bytes per second; `None` is unlimited. ENet sizes its
    /// reliable window and throttles from these.
    pub incoming_bandwidth: Option<u32>,
    pub outgoing_bandwidth: Option<u32>,
    /// Largest datagram the host sends (576..=4096); peers settle on the smaller of both MTUs.
    pub mtu: u16,
    /// How often a host with live peers wants servicing when nothing else happens: the
    /// resolution of ENet's retransmission, ping and timeout timers. See the module docs.
    pub service_interval: Duration,
    /// ENet pings an otherwise quiet peer this often (`enet_peer_ping_interval`, default 500 ms);
    /// the pings keep the RTT estimate fresh.
    pub ping_interval: Duration,
    /// `enet_peer_timeout`: give up on a peer when a reliable command has been retransmitted
    /// `timeout_limit` times and `timeout_minimum` has passed, or after `timeout_maximum` in any
    /// case. This is also how long a connection attempt to a silent server lasts.
    pub timeout_limit: u32,
    pub timeout_minimum: Duration,
    pub timeout_maximum: Duration,
    /// CRC32 checksums in every datagram, as `host->checksum = enet_crc32` does in C. Both ends
    /// must agree.
    pub checksum: bool,
    /// ENet's range-coder compression, as `enet_host_compress_with_range_coder` in C. Both ends
    /// must agree.
    pub range_coder: bool,
    /// Seed of ENet's generator (connect ids); `None` draws a fresh random seed per host.
    pub seed: Option<u32>,
    /// Most datagrams each queue (in and out) holds; beyond it datagrams are dropped and
    /// counted, as a full socket buffer would.
    pub queue_limit: usize,
    /// ENet's unreliable-packet throttle (`enet_peer_throttle_configure`): `(interval ms,
    /// acceleration, deceleration)`. ENet drops outgoing *unreliable* packets at random when a
    /// peer's RTT rises above its recent mean; C ENet's defaults are (5000, 2, 2). A
    /// deceleration of 0 keeps every unreliable packet.
    pub throttle: (u32, u32, u32),
    /// Time each acknowledged reliable command (see "Measurements" in the module docs) and
    /// queue the round trips for [`EnetHost::poll_rtt_sample`]. Costs a read of every datagram
    /// and a small table per peer; a host whose owner never takes the samples turns it off.
    pub ack_rtt: bool,
    /// A peer that sent CONNECT and has not acknowledged our VERIFY_CONNECT (a *half-open*
    /// connect) is dropped this long after its CONNECT; see "Admission" in the module docs.
    pub half_open_timeout: Duration,
    /// A half-open peer at least this old gives its slot to a new CONNECT when the host has
    /// no free slot (younger ones are real clients within a round trip of finishing).
    pub half_open_evictable: Duration,
}

impl Default for EnetConfig {
    fn default() -> Self {
        Self {
            peer_limit: 1,
            channel_limit: 2,
            incoming_bandwidth: None,
            outgoing_bandwidth: None,
            mtu: DEFAULT_MTU,
            service_interval: Duration::from_millis(10),
            ping_interval: Duration::from_millis(u64::from(enet::consts::PEER_PING_INTERVAL)),
            timeout_limit: enet::consts::PEER_TIMEOUT_LIMIT,
            timeout_minimum: Duration::from_millis(u64::from(enet::consts::PEER_TIMEOUT_MINIMUM)),
            timeout_maximum: Duration::from_millis(u64::from(enet::consts::PEER_TIMEOUT_MAXIMUM)),
            checksum: false,
            range_coder: false,
            seed: None,
            queue_limit: 4096,
            throttle: DEFAULT_THROTTLE,
            ack_rtt: true,
            half_open_timeout: Duration::from_secs(2),
            half_open_evictable: Duration::from_millis(200),
        }
    }
}

impl EnetConfig {
    /// Defaults with room for `peer_limit` peers.
    pub fn with_peers(peer_limit: usize) -> Self {
        Self {
            peer_limit,
            ..Self::default()
        }
    }
}

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

/// A peer slot of an [`EnetHost`]. Slots are reused after a peer's `Disconnected` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerId(usize);

impl PeerId {
    /// The slot number, `0..peer_limit`: an index for the caller's per-peer tables.
    pub fn index(self) -> usize {
        self.0
    }
}

/// Why a peer's session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisconnectReason {
    /// This side asked ([`EnetHost::disconnect`] or [`EnetHost::disconnect_now`]).
    Local,
    /// The remote side closed the session or stopped answering. ENet 1.3 reports both the same
    /// way (a timeout is a disconnect with data 0).
    Remote,
    /// The connection never completed: refused, no free slot at the server, or no answer within
    /// the peer timeout.
    ConnectFailed,
}

/// Something that happened on an ENet host, from [`EnetHost::poll_event`].
///
/// Every peer that [`EnetHost::connect`] returned, or that a `Connected` event announced, ends
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
pub struct EnetPacket(enet::Packet);

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
    /// Packets (payloads) handed to [`EnetHost::send`] and accepted, and their bytes.
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
    /// Half-open connects dropped after [`EnetConfig::half_open_timeout`], and those that
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
    /// What the acknowledgement timing saw ([`EnetConfig::ack_rtt`]).
    pub ack_rtt: AckRttStats,
}

/// FIFO of datagrams stored back to back in one byte buffer: no allocation per datagram.
///
/// One block that grows with a burst and, once drained, keeps [`QUEUE_KEEP_BYTES`], rather
/// than a recycled `Vec` per datagram: such a free list kept as many blocks as the deepest burst ever queued (up to the limit),
/// each as large as the largest datagram it ever held (up to twice that, by `Vec`'s
/// doubling), and hundreds of small long-lived blocks scattered through the heap among the
/// short-lived ones keep the allocator from returning pages (README's "Server memory under
/// reconnect storms" has the figures).
#[derive(Debug, Default)]
struct DatagramQueue {
    /// Sender or destination, start in `bytes`, length.
    queue: VecDeque<(SocketAddr, usize, usize)>,
    bytes: Vec<u8>,
    /// `bytes[..head]` were popped already.
    head: usize,
    limit: usize,
}

/// Popped bytes a never-empty queue may hold before it moves the rest to the front.
const QUEUE_COMPACT_BYTES: usize = 64 * 1024;
/// Bytes a drained queue keeps for the next burst: a City storm's usual burst (about 700
/// datagrams, 1 MB) grows past it and gives the rest back once it drains.
const QUEUE_KEEP_BYTES: usize = 256 * 1024;

impl DatagramQueue {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            ..Self::default()
        }
    }

    /// False when the queue is full (the datagram is dropped).
    fn push(&mut self, addr: SocketAddr, data: &[u8]) -> bool {
        if self.queue.len() >= self.limit {
            return false;
        }
        if self.head >= QUEUE_COMPACT_BYTES && self.head * 2 >= self.bytes.len() {
            // Only when the queue never drains: amortised, as every byte moves at most once
            // per doubling of what was popped.
            let head = self.head;
            self.bytes.drain(..head);
            for (_, start, _) in &mut self.queue {
                *start -= head;
            }
            self.head = 0;
        }
        self.queue.push_back((addr, self.bytes.len(), data.len()));
        self.bytes.extend_from_slice(data);
        true
    }

    /// Copy the oldest datagram into `out`; `None` when empty. Panics when `out` is too small.
    fn pop_into(&mut self, out: &mut [u8]) -> Option<(SocketAddr, usize)> {
        let (addr, start, len) = self.queue.pop_front()?;
        assert!(
            out.len() >= len,
            "buffer of {} bytes is too small for a {len}-byte ENet datagram",
            out.len()
        );
        out[..len].copy_from_slice(&self.bytes[start..start + len]);
        self.head = start + len;
        if self.queue.is_empty() {
            self.bytes.clear();
            self.head = 0;
            // A burst deeper than usual (a server falling behind) does not pin its block
            // for the rest of the process: a few reallocations per such burst, none per
            // datagram.
            self.bytes.shrink_to(QUEUE_KEEP_BYTES);
        }
        Some((addr, len))
    }

    fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Bytes held for queued datagrams and kept for the next burst.
    #[cfg(test)]
    fn capacity_bytes(&self) -> usize {
        self.bytes.capacity()
    }
}

/// The [`rusty_enet::Socket`] ENet is given: two queues instead of a file descriptor.
///
/// `receive` hands ENet what the engine pushed; `send` queues what ENet writes. ENet never
/// blocks on it and it never fails.
#[derive(Debug)]
pub struct QueueSocket {
    inbound: DatagramQueue,
    outbound: DatagramQueue,
    stats: HostStats,
    gate: AddressGate,
    /// Reads the datagrams' headers and commands (see "Address reuse" and "Measurements").
    reader: wire::Reader,
    /// Times acknowledged commands ([`EnetConfig::ack_rtt`]).
    acks: Option<AckRtt>,
    /// CONNECTs are being handled: look for our VERIFY_CONNECT answers in what ENet sends.
    watch_verify: bool,
    /// The VERIFY_CONNECTs seen since the last service: to whom, and what they say.
    verified: Vec<(SocketAddr, Handshake)>,
    /// VERIFY_CONNECTs sent to unproven addresses, by address and our peer id: what the
    /// acknowledgement completing the handshake must name and echo (see "Admission").
    verifies: HashMap<(SocketAddr, u16), PendingVerify>,
    /// Half-open connects (address, our peer id) that sent a forged proof, to end at the
    /// next service.
    condemned: Vec<(SocketAddr, u16)>,
    /// Scratch for the handshake acknowledgements of one datagram.
    acks_seen: Vec<(u16, u16)>,
}

/// Sent times remembered per VERIFY_CONNECT: its first transmission and retransmissions
/// (ENet gives up on a handshake after a few).
const VERIFY_SENT_TIMES: usize = 8;

/// A VERIFY_CONNECT this host sent to an unproven address.
#[derive(Debug, Clone, Copy)]
struct PendingVerify {
    seq: u16,
    connect_id: u32,
    /// The sent times of the datagrams that carried it (ring of the latest).
    sent_times: [u16; VERIFY_SENT_TIMES],
    count: usize,
    /// An acknowledgement echoed one of them: the address received it.
    acked: bool,
}

impl PendingVerify {
    fn new(v: &VerifySent) -> Self {
        Self {
            seq: v.seq,
            connect_id: v.handshake.connect_id,
            sent_times: [0; VERIFY_SENT_TIMES],
            count: 0,
            acked: false,
        }
    }

    fn sent_at(&mut self, t: u16) {
        self.sent_times[self.count % VERIFY_SENT_TIMES] = t;
        self.count += 1;
    }

    fn carried(&self, t: u16) -> bool {
        self.sent_times[..self.count.min(VERIFY_SENT_TIMES)].contains(&t)
    }
}

/// What a datagram from an unproven address says about its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proof {
    /// No acknowledgement on the handshake channel: nothing to check.
    None,
    /// It acknowledges our VERIFY_CONNECT with the right sequence number and sent time.
    Valid,
    /// It acknowledges something we did not send it, or echoes a sent time we did not use.
    Forged,
}

impl QueueSocket {
    fn new(limit: usize, checksum: bool, range_coder: bool, acks: Option<AckRtt>) -> Self {
        Self {
            inbound: DatagramQueue::new(limit),
            outbound: DatagramQueue::new(limit),
            stats: HostStats::default(),
            gate: AddressGate::default(),
            reader: wire::Reader::new(checksum, range_coder),
            acks,
            watch_verify: false,
            verified: Vec::new(),
            verifies: HashMap::new(),
            condemned: Vec::new(),
            acks_seen: Vec::new(),
        }
    }

    /// Check the handshake acknowledgements of `data` from the unproven address `from`
    /// against the VERIFY_CONNECTs sent to it (see "Admission").
    fn check_proof(&mut self, from: SocketAddr, data: &[u8]) -> Proof {
        let mut acks = std::mem::take(&mut self.acks_seen);
        let to_peer = self.reader.handshake_acks(data, &mut acks);
        let mut proof = Proof::None;
        if let Some(to_peer) = to_peer {
            for &(seq, echo) in &acks {
                match self.verifies.get_mut(&(from, to_peer)) {
                    Some(v) if v.seq == seq && v.carried(echo) => {
                        v.acked = true;
                        proof = Proof::Valid;
                    }
                    _ => {
                        proof = Proof::Forged;
                        self.condemned.push((from, to_peer));
                        break;
                    }
                }
            }
        }
        self.acks_seen = acks;
        proof
    }
}

/// Bytes an unproven address may receive beyond what it sent: one datagram's worth of the
/// size difference range-coder compression can make between a CONNECT and its
/// VERIFY_CONNECT, so a compressed handshake is never blocked by a few bytes.
const GATE_SLACK: u64 = 16;
/// Most credit an unproven address can bank.
const GATE_CREDIT_CAP: u64 = 4096;
/// Most unproven addresses tracked; beyond it the table is cleared (which only withholds).
const GATE_TABLE_LIMIT: usize = 16_384;
/// A closed peer's address stays proven this long, for the last acknowledgements.
const GATE_LINGER: Duration = Duration::from_secs(5);
/// ENet's peer id of a datagram whose sender has no id yet: a CONNECT.
const CONNECT_PEER_ID: u16 = 0x0FFF;

/// Admission at the socket: an address is *proven* once this host connected to it or ENet's
/// handshake with it completed. Until then it receives at most the bytes it sent (plus
/// [`GATE_SLACK`] once), so VERIFY_CONNECT retransmissions to a forged source stop.
#[derive(Debug, Default)]
struct AddressGate {
    /// Proven addresses: how many peers hold the proof (several bots on one host share the
    /// server's address), and once none does, the instant the proof lapses.
    proven: HashMap<SocketAddr, (u32, Option<Instant>)>,
    /// What each unproven address may still receive.
    credit: HashMap<SocketAddr, u64>,
}

impl AddressGate {
    fn received(&mut self, from: SocketAddr, len: usize) {
        if self.proven.contains_key(&from) {
            return;
        }
        if self.credit.len() >= GATE_TABLE_LIMIT && !self.credit.contains_key(&from) {
            self.credit.clear();
        }
        let c = self.credit.entry(from).or_insert(GATE_SLACK);
        *c = (*c + len as u64).min(GATE_CREDIT_CAP);
    }

    /// May `len` bytes go to `to`? Spends the credit when they may.
    fn allow(&mut self, to: SocketAddr, len: usize) -> bool {
        if self.proven.contains_key(&to) {
            return true;
        }
        match self.credit.get_mut(&to) {
            Some(c) if *c >= len as u64 => {
                *c -= len as u64;
                true
            }
            _ => false,
        }
    }

    fn is_proven(&self, addr: SocketAddr) -> bool {
        self.proven.contains_key(&addr)
    }

    fn prove(&mut self, addr: SocketAddr) {
        self.credit.remove(&addr);
        let e = self.proven.entry(addr).or_insert((0, None));
        e.0 += 1;
        e.1 = None;
    }

    fn release(&mut self, addr: SocketAddr, now: Instant) {
        if let Some(e) = self.proven.get_mut(&addr) {
            e.0 = e.0.saturating_sub(1);
            if e.0 == 0 {
                e.1 = Some(now + GATE_LINGER);
            }
        }
    }

    fn prune(&mut self, now: Instant) {
        self.proven
            .retain(|_, (live, until)| *live > 0 || until.is_none_or(|t| t > now));
    }
}

impl enet::Socket for QueueSocket {
    type Address = SocketAddr;
    type Error = Infallible;

    fn send(&mut self, address: SocketAddr, buffer: &[u8]) -> Result<usize, Infallible> {
        if self.watch_verify {
            // ENet answers a CONNECT in the same service that handles it.
            if let Some(v) = self.reader.find(buffer, COMMAND_VERIFY_CONNECT) {
                self.verified.push((address, v));
            }
        }
        if !self.gate.allow(address, buffer.len()) {
            // Withheld like a lost datagram: ENet retransmits when the peer speaks again.
            self.stats.gated_out += 1;
            self.stats.gated_bytes_out += buffer.len() as u64;
            return Ok(buffer.len());
        }
        if !self.gate.is_proven(address) {
            // A VERIFY_CONNECT (or its retransmission) that really leaves: its sent time is
            // what the proof must echo.
            if let Some(v) = self.reader.verify_sent(buffer) {
                let key = (address, v.handshake.from_peer);
                let p = self
                    .verifies
                    .entry(key)
                    .or_insert_with(|| PendingVerify::new(&v));
                if p.seq != v.seq || p.connect_id != v.handshake.connect_id {
                    // The slot answers a new CONNECT from that address.
                    *p = PendingVerify::new(&v);
                }
                if let Some(t) = v.sent_time {
                    p.sent_at(t);
                }
            }
        }
        if self.outbound.push(address, buffer) {
            self.stats.datagrams_out += 1;
            self.stats.bytes_out += buffer.len() as u64;
            if let Some(acks) = self.acks.as_mut() {
                if let Some(d) = self.reader.open(buffer) {
                    acks.outbound(address, d);
                }
            }
        } else {
            self.stats.dropped_out += 1;
        }
        // A full queue behaves like a full socket buffer: the datagram is gone and ENet's
        // retransmission deals with it.
        Ok(buffer.len())
    }

    fn receive(
        &mut self,
        buffer: &mut [u8; enet::MTU_MAX],
    ) -> Result<Option<(SocketAddr, enet::PacketReceived)>, Infallible> {
        Ok(self
            .inbound
            .pop_into(buffer)
            .map(|(addr, len)| (addr, enet::PacketReceived::Complete(len))))
    }
}

/// The host's clock: milliseconds that the caller's `now` sets and ENet reads.
#[derive(Debug)]
struct Clock {
    epoch: Instant,
    /// The reading at `epoch`: [`CLOCK_START_MS`] plus a random phase, so the 16-bit sent
    /// times in ENet's headers (which the handshake's proof echoes) are not predictable
    /// from the host's age (see "Admission").
    start: u64,
    ms: Arc<AtomicU64>,
}

impl Clock {
    /// A clock reading `CLOCK_START_MS + phase` at `now`.
    fn new(now: Instant, phase: u16) -> Self {
        let start = CLOCK_START_MS + u64::from(phase);
        Self {
            epoch: now,
            start,
            ms: Arc::new(AtomicU64::new(start)),
        }
    }

    /// Never goes backwards, whatever order the caller's instants come in.
    fn set(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.epoch).as_millis() as u64 + self.start;
        self.ms.fetch_max(ms, Ordering::Relaxed);
    }

    fn reader(&self) -> Box<dyn Fn() -> Duration> {
        let ms = Arc::clone(&self.ms);
        Box::new(move || Duration::from_millis(ms.load(Ordering::Relaxed)))
    }
}

/// What this host knows of a peer slot beyond ENet's own state.
#[derive(Debug, Default, Clone, Copy)]
struct PeerMeta {
    /// `connect` returned it or a `Connected` event announced it: it owes a `Disconnected`.
    announced: bool,
    /// The session reached Connected.
    connected: bool,
    /// This side asked to disconnect.
    local_close: bool,
    packets_sent: u64,
    bytes_sent: u64,
    packets_received: u64,
    bytes_received: u64,
    /// An incoming connect not finished yet: since when (see "Admission").
    half_open_since: Option<Instant>,
    /// This slot holds a proof of its address in the gate (released when the slot ends).
    proof: Option<SocketAddr>,
    /// An accepted session: the remote's address, its peer id and the connect id, read from
    /// our VERIFY_CONNECT (see "Address reuse").
    remote: Option<(SocketAddr, u16, u32)>,
}

/// A seed for ENet's connect ids when [`EnetConfig::seed`] gives none. ENet would seed from
/// the host's memory address plus its clock, and a host's clock here always starts at
/// [`CLOCK_START_MS`]: a host allocated where a freed one was, or the same allocation in the
/// next process (without address randomisation), would draw the same connect ids, and a
/// server takes a CONNECT whose address and connect id match a session it still holds for a
/// duplicate (and "Address reuse" needs the ids to differ). std's `RandomState` is keyed from
/// the operating system's generator; the counter and clock make each call differ.
fn fresh_seed() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    let x = h.finish();
    (x ^ (x >> 32)) as u32
}

fn millis_u32(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// An ENet host over the caller's socket: sans-IO, any number of peers. See the module docs.
pub struct EnetHost {
    host: enet::Host<QueueSocket>,
    clock: Clock,
    meta: Vec<PeerMeta>,
    events: VecDeque<EnetEvent>,
    last_service: Instant,
    service_interval: Duration,
    ping_interval: u32,
    timeout: (u32, u32, u32),
    throttle: (u32, u32, u32),
    /// Some peer slot is not Disconnected: ENet has timers running.
    busy: bool,
    /// Packets were queued since the last flush or service.
    unflushed: bool,
    half_open_timeout: Duration,
    half_open_evictable: Duration,
    /// CONNECT datagrams queued since the last service.
    pending_connects: usize,
    /// The `now` of the current service.
    now: Instant,
    /// CONNECTs queued since the last service: from where, remote peer id and connect id.
    connects: Vec<(SocketAddr, Handshake)>,
    /// Scratch: each slot's address while it is in use (kept so a service allocates nothing).
    slot_addrs: Vec<Option<SocketAddr>>,
}

impl fmt::Debug for EnetHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnetHost")
            .field("peer_limit", &self.meta.len())
            .field("busy", &self.busy)
            .field("events", &self.events.len())
            .field("stats", &self.host.socket().stats)
            .finish_non_exhaustive()
    }
}

impl EnetHost {
    /// A host with no peers yet. `now` starts its clock.
    pub fn new(now: Instant, config: &EnetConfig) -> Result<Self, EnetError> {
        if config.peer_limit == 0 || config.peer_limit > enet::PeerID::MAX {
            return Err(EnetError::BadParameter("peer_limit"));
        }
        if config.channel_limit == 0
            || config.channel_limit > enet::consts::PROTOCOL_MAXIMUM_CHANNEL_COUNT as usize
        {
            return Err(EnetError::BadParameter("channel_limit"));
        }
        if config.queue_limit == 0 {
            return Err(EnetError::BadParameter("queue_limit"));
        }
        // The clock's phase is drawn apart from the connect-id seed (a CONNECT shows those).
        let phase = match config.seed {
            Some(seed) => (seed.wrapping_mul(0x9E37_79B9) >> 16) as u16,
            None => fresh_seed() as u16,
        };
        let clock = Clock::new(now, phase);
        let settings = enet::HostSettings {
            peer_limit: config.peer_limit,
            channel_limit: config.channel_limit,
            incoming_bandwidth_limit: config.incoming_bandwidth,
            outgoing_bandwidth_limit: config.outgoing_bandwidth,
            compressor: if config.range_coder {
                Some(Box::new(enet::RangeCoder::new()))
            } else {
                None
            },
            checksum: if config.checksum {
                Some(Box::new(enet::crc32))
            } else {
                None
            },
            time: clock.reader(),
            seed: Some(config.seed.unwrap_or_else(fresh_seed)),
        };
        let acks = config.ack_rtt.then(|| AckRtt::new(now, config.peer_limit));
        let socket = QueueSocket::new(
            config.queue_limit,
            config.checksum,
            config.range_coder,
            acks,
        );
        let mut host = enet::Host::new(socket, settings).map_err(|e| match e {
            enet::error::HostNewError::BadParameter(b) => EnetError::BadParameter(b.parameter),
            enet::error::HostNewError::FailedToInitializeSocket(never) => match never {},
        })?;
        host.set_mtu(config.mtu)
            .map_err(|_| EnetError::BadParameter("mtu"))?;
        Ok(Self {
            host,
            clock,
            meta: vec![PeerMeta::default(); config.peer_limit],
            events: VecDeque::new(),
            last_service: now,
            service_interval: config.service_interval.max(Duration::from_millis(1)),
            ping_interval: millis_u32(config.ping_interval).max(1),
            timeout: (
                config.timeout_limit,
                millis_u32(config.timeout_minimum),
                millis_u32(config.timeout_maximum),
            ),
            throttle: config.throttle,
            busy: false,
            unflushed: false,
            half_open_timeout: config.half_open_timeout,
            half_open_evictable: config.half_open_evictable,
            pending_connects: 0,
            now,
            connects: Vec::new(),
            slot_addrs: Vec::with_capacity(config.peer_limit),
        })
    }

    /// Set the host's clock (ENet's milliseconds, and the instant sends are stamped with).
    fn set_now(&mut self, now: Instant) {
        self.clock.set(now);
        if let Some(acks) = self.host.socket_mut().acks.as_mut() {
            acks.set_now(now);
        }
    }

    /// Slot `i`'s session is over: its acknowledgement timing goes with it.
    fn forget_rtt(&mut self, i: usize) {
        if let Some(acks) = self.host.socket_mut().acks.as_mut() {
            acks.forget(i);
        }
    }

    /// Start connecting to `addr` with `channels` channels (1..=255); `data` reaches the other
    /// side's `Connected` event. The handshake goes out on the next flush or service; a
    /// `Connected` or `Disconnected { reason: ConnectFailed }` event ends it.
    pub fn connect(
        &mut self,
        now: Instant,
        addr: SocketAddr,
        channels: usize,
        data: u32,
    ) -> Result<PeerId, EnetError> {
        if channels == 0 || channels > enet::consts::PROTOCOL_MAXIMUM_CHANNEL_COUNT as usize {
            return Err(EnetError::BadParameter("channels"));
        }
        self.set_now(now);
        let limit = self.meta.len();
        let (ping, (tl, tmin, tmax)) = (self.ping_interval, self.timeout);
        let peer = self
            .host
            .connect(addr, channels, data)
            .map_err(|_| EnetError::NoFreePeer(limit))?;
        peer.set_ping_interval(ping);
        peer.set_timeout(tl, tmin, tmax);
        // The throttle is configured once connected: ENet's VERIFY_CONNECT must echo the
        // throttle settings the CONNECT carried, and a change in between fails the handshake.
        let id = PeerId(peer.id().0);
        self.meta[id.0] = PeerMeta {
            announced: true,
            ..PeerMeta::default()
        };
        // We chose to talk to it: the address needs no proof.
        self.hold_proof(id.0, addr);
        self.busy = true;
        self.unflushed = true;
        Ok(id)
    }

    /// Queue `bytes` for `peer` on `channel`. Reliable packets are acknowledged, retransmitted
    /// and delivered in order within their channel; unreliable ones are sequenced (a late one is
    /// dropped) and, like C ENet's default, sent reliably in fragments when larger than the MTU.
    /// Nothing leaves before the next [`flush`](Self::flush) or [`service`](Self::service).
    pub fn send(
        &mut self,
        peer: PeerId,
        channel: u8,
        reliable: bool,
        bytes: &[u8],
    ) -> Result<(), EnetError> {
        let p = self
            .host
            .get_peer_mut(enet::PeerID(peer.0))
            .ok_or(EnetError::UnknownPeer(peer))?;
        let packet = if reliable {
            enet::Packet::reliable(bytes)
        } else {
            enet::Packet::unreliable(bytes)
        };
        p.send(channel, &packet).map_err(|e| match e {
            enet::error::PeerSendError::NotConnected => EnetError::NotConnected,
            enet::error::PeerSendError::InvalidChannel => EnetError::InvalidChannel(channel),
            enet::error::PeerSendError::PacketTooLarge
            | enet::error::PeerSendError::FragmentsExceeded => {
                EnetError::PacketTooLarge(bytes.len())
            }
            enet::error::PeerSendError::FailedToQueue => EnetError::FailedToQueue,
        })?;
        let m = &mut self.meta[peer.0];
        m.packets_sent += 1;
        m.bytes_sent += bytes.len() as u64;
        self.unflushed = true;
        Ok(())
    }

    /// [`send`](Self::send) what a protocol state machine wrote: `buf[..t.len]` with its
    /// channel and reliability hints.
    pub fn send_transmit(
        &mut self,
        peer: PeerId,
        t: &Transmit,
        buf: &[u8],
    ) -> Result<(), EnetError> {
        self.send(peer, t.channel, t.reliable, &buf[..t.len])
    }

    /// End `peer`'s session politely: packets already queued go first, then ENet's disconnect,
    /// and a `Disconnected { reason: Local }` event follows once the other side acknowledged (or
    /// the peer timeout passed). A peer still connecting is dropped at once (with its event).
    pub fn disconnect(&mut self, now: Instant, peer: PeerId, data: u32) -> Result<(), EnetError> {
        self.close(now, peer, data, false)
    }

    /// End `peer`'s session at once: one unacknowledged disconnect datagram is queued, the slot
    /// is freed and the `Disconnected { reason: Local }` event is queued immediately.
    pub fn disconnect_now(
        &mut self,
        now: Instant,
        peer: PeerId,
        data: u32,
    ) -> Result<(), EnetError> {
        self.close(now, peer, data, true)
    }

    fn close(
        &mut self,
        now: Instant,
        peer: PeerId,
        data: u32,
        immediate: bool,
    ) -> Result<(), EnetError> {
        self.set_now(now);
        let p = self
            .host
            .get_peer_mut(enet::PeerID(peer.0))
            .ok_or(EnetError::UnknownPeer(peer))?;
        if immediate {
            p.disconnect_now(data);
        } else {
            p.disconnect_later(data);
        }
        let gone = p.state() == enet::PeerState::Disconnected;
        let m = &mut self.meta[peer.0];
        m.local_close = true;
        if gone && m.announced {
            // ENet resets a slot it was not connected on without an event; keep the promise of
            // one `Disconnected` per announced peer.
            let proof = m.proof.take();
            *m = PeerMeta::default();
            if let Some(addr) = proof {
                self.host.socket_mut().gate.release(addr, now);
            }
            self.forget_rtt(peer.0);
            self.events.push_back(EnetEvent::Disconnected {
                peer,
                data,
                reason: DisconnectReason::Local,
            });
        }
        self.unflushed = true;
        self.refresh_busy();
        Ok(())
    }

    /// A datagram that arrived on this host's socket from `from`. Queued until the next
    /// [`service`](Self::service).
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        let sock = self.host.socket_mut();
        if !sock.gate.is_proven(from) && sock.check_proof(from, data) == Proof::Forged {
            // A blind guess at the proof: ENet never sees it, and the half-open connect it
            // tried to complete ends (one guess per CONNECT).
            sock.stats.forged_proofs += 1;
            sock.stats.bytes_in += data.len() as u64;
            sock.stats.datagrams_in += 1;
            sock.gate.received(from, data.len());
            return;
        }
        if data.len() > MAX_ENET_DATAGRAM || !sock.inbound.push(from, data) {
            sock.stats.dropped_in += 1;
            return;
        }
        if let Some(acks) = sock.acks.as_mut() {
            // Acknowledgements are timed at arrival (`now`), not when ENet reads them.
            if let Some(d) = sock.reader.open(data) {
                acks.inbound(now, from, d);
            }
        }
        sock.stats.datagrams_in += 1;
        sock.stats.bytes_in += data.len() as u64;
        sock.gate.received(from, data.len());
        // The header's peer id (low 12 bits of the first two bytes, never compressed) is
        // 0xFFF only in a CONNECT: the sender has no id at this host yet.
        if data.len() >= 2 && u16::from_be_bytes([data[0], data[1]]) & 0x0FFF == CONNECT_PEER_ID {
            self.pending_connects += 1;
            sock.watch_verify = true;
            if let Some(c) = sock.reader.find(data, COMMAND_CONNECT) {
                self.connects.push((from, c));
            }
        }
    }

    /// Record that slot `i` proves `addr` (once per slot).
    fn hold_proof(&mut self, i: usize, addr: SocketAddr) {
        let m = &mut self.meta[i];
        if m.proof.is_none() {
            m.proof = Some(addr);
            self.host.socket_mut().gate.prove(addr);
        }
    }

    /// Slot `i` ended: its proof lapses after [`GATE_LINGER`] unless another peer holds one.
    fn release_proof(&mut self, i: usize) {
        if let Some(addr) = self.meta[i].proof.take() {
            let now = self.now;
            self.host.socket_mut().gate.release(addr, now);
        }
    }

    /// Bound half-open connects (see "Admission"): make room for queued CONNECTs by
    /// dropping the oldest evictable half-open peers when no slot is free, and drop those
    /// older than the timeout. Silent (`enet_peer_reset`): nothing is sent to them.
    fn bound_half_open(&mut self, now: Instant, make_room: usize) {
        let mut half_open: Vec<(Instant, usize)> = Vec::new();
        let mut free = 0usize;
        for (i, p) in self.host.peers().enumerate() {
            let m = &mut self.meta[i];
            match p.state() {
                enet::PeerState::Disconnected => {
                    free += 1;
                    m.half_open_since = None;
                }
                enet::PeerState::AcknowledgingConnect | enet::PeerState::ConnectionPending
                    if !m.announced =>
                {
                    let since = *m.half_open_since.get_or_insert(now);
                    half_open.push((since, i));
                }
                _ => m.half_open_since = None,
            }
        }
        if half_open.is_empty() {
            return;
        }
        half_open.sort_unstable();
        let mut evict = make_room.saturating_sub(free);
        let (timeout, evictable) = (self.half_open_timeout, self.half_open_evictable);
        let stats = &mut self.host.socket_mut().stats;
        let mut drop = Vec::new();
        for &(since, i) in &half_open {
            let age = now.saturating_duration_since(since);
            if age >= timeout {
                stats.half_open_expired += 1;
                drop.push(i);
            } else if evict > 0 && age >= evictable {
                evict -= 1;
                stats.half_open_evicted += 1;
                drop.push(i);
            }
        }
        for i in drop {
            self.host.peer_mut(enet::PeerID(i)).reset();
            self.meta[i] = PeerMeta::default();
            self.forget_rtt(i);
        }
    }

    /// Run ENet at `now`: process queued datagrams, run its timers, send what is due. Returns
    /// the number of events it queued for [`poll_event`](Self::poll_event).
    pub fn service(&mut self, now: Instant) -> usize {
        self.set_now(now);
        self.now = now;
        let connects = std::mem::take(&mut self.pending_connects);
        self.supersede();
        self.end_condemned();
        self.bound_half_open(now, connects);
        self.host.socket_mut().gate.prune(now);
        let before = self.events.len();
        loop {
            let ev = match self.host.service() {
                Ok(Some(ev)) => ev.no_ref(),
                Ok(None) => {
                    // ENet reads at most 256 datagrams per pass.
                    if self.host.socket().inbound.is_empty() {
                        break;
                    }
                    continue;
                }
                Err(never) => match never {},
            };
            self.on_event(ev);
        }
        self.record_verified();
        self.last_service = now;
        self.unflushed = false;
        self.refresh_busy();
        self.events.len() - before
    }

    /// An incoming handshake with `addr` completed in slot `i`: did the address acknowledge
    /// our VERIFY_CONNECT, echoing the sent time of a datagram that carried it, for this
    /// session's connect id? An address already proven needs no new proof (its datagrams
    /// are not checked).
    fn proof_holds(&mut self, addr: SocketAddr, i: usize) -> bool {
        let remote = self.meta[i].remote;
        let sock = self.host.socket_mut();
        if sock.gate.is_proven(addr) {
            return true;
        }
        let Some(v) = u16::try_from(i)
            .ok()
            .and_then(|slot| sock.verifies.remove(&(addr, slot)))
        else {
            return false;
        };
        v.acked && remote.is_none_or(|(a, _, id)| a == addr && id == v.connect_id)
    }

    /// End the half-open connects that sent a forged proof, silently (as an expired one),
    /// and forget the VERIFY_CONNECTs of slots no longer half-open with their address.
    fn end_condemned(&mut self) {
        let mut condemned = std::mem::take(&mut self.host.socket_mut().condemned);
        for &(addr, slot) in &condemned {
            let i = usize::from(slot);
            let Some(p) = self.host.get_peer(enet::PeerID(i)) else {
                continue;
            };
            let half_open = matches!(
                p.state(),
                enet::PeerState::AcknowledgingConnect | enet::PeerState::ConnectionPending
            );
            if p.address() == Some(addr) && half_open && !self.meta[i].announced {
                self.host.peer_mut(enet::PeerID(i)).reset();
                self.meta[i] = PeerMeta::default();
                self.forget_rtt(i);
            }
        }
        condemned.clear();
        self.host.socket_mut().condemned = condemned;
        if self.host.socket().verifies.is_empty() {
            return;
        }
        let mut addrs = std::mem::take(&mut self.slot_addrs);
        addrs.clear();
        addrs.extend(self.host.peers().map(|p| {
            (p.state() != enet::PeerState::Disconnected)
                .then(|| p.address())
                .flatten()
        }));
        self.host
            .socket_mut()
            .verifies
            .retain(|&(addr, slot), _| addrs.get(usize::from(slot)) == Some(&Some(addr)));
        self.slot_addrs = addrs;
    }

    /// Drop the sessions whose remote peer connected anew (see "Address reuse"), before ENet
    /// handles the CONNECTs: nothing more of the old session reaches the new one.
    fn supersede(&mut self) {
        let mut connects = std::mem::take(&mut self.connects);
        for &(addr, c) in &connects {
            for i in 0..self.meta.len() {
                let Some((a, peer, id)) = self.meta[i].remote else {
                    continue;
                };
                if a != addr || peer != c.from_peer || id == c.connect_id {
                    continue;
                }
                let p = self.host.peer_mut(enet::PeerID(i));
                if p.state() == enet::PeerState::Disconnected {
                    self.meta[i].remote = None;
                    continue;
                }
                p.reset();
                self.host.socket_mut().stats.superseded += 1;
                self.slot_ended(i, 0);
            }
        }
        connects.clear();
        self.connects = connects;
    }

    /// Note which slot answered which CONNECT, from the VERIFY_CONNECTs ENet just sent.
    fn record_verified(&mut self) {
        let sock = self.host.socket_mut();
        sock.watch_verify = false;
        let mut verified = std::mem::take(&mut sock.verified);
        for &(addr, v) in &verified {
            let i = usize::from(v.from_peer);
            let Some(p) = self.host.get_peer(enet::PeerID(i)) else {
                continue;
            };
            if p.address() == Some(addr) && p.state() != enet::PeerState::Disconnected {
                self.meta[i].remote = Some((addr, v.to_peer, v.connect_id));
            }
        }
        verified.clear();
        self.host.socket_mut().verified = verified;
    }

    /// Slot `i`'s session is over: release its proof, forget it, and owe the caller the
    /// `Disconnected` event if the session was announced.
    fn slot_ended(&mut self, i: usize, data: u32) {
        self.release_proof(i);
        self.forget_rtt(i);
        let m = std::mem::take(&mut self.meta[i]);
        if !m.announced {
            return;
        }
        let reason = if m.local_close {
            DisconnectReason::Local
        } else if m.connected {
            DisconnectReason::Remote
        } else {
            DisconnectReason::ConnectFailed
        };
        self.events.push_back(EnetEvent::Disconnected {
            peer: PeerId(i),
            data,
            reason,
        });
    }

    fn on_event(&mut self, ev: enet::EventNoRef) {
        match ev {
            enet::EventNoRef::Connect { peer, data } => {
                let (ping, (tl, tmin, tmax)) = (self.ping_interval, self.timeout);
                let p = self.host.peer_mut(peer);
                let Some(addr) = p.address() else {
                    return;
                };
                if !self.meta[peer.0].announced && !self.proof_holds(addr, peer.0) {
                    // ENet completed a handshake whose proof this host did not see checked:
                    // no session (see "Admission").
                    self.host.peer_mut(peer).reset();
                    self.meta[peer.0] = PeerMeta::default();
                    self.forget_rtt(peer.0);
                    self.host.socket_mut().stats.forged_proofs += 1;
                    return;
                }
                let p = self.host.peer_mut(peer);
                if !self.meta[peer.0].announced {
                    // Accepted by this host: apply the same ping and timeout settings.
                    p.set_ping_interval(ping);
                    p.set_timeout(tl, tmin, tmax);
                }
                // ENet sends this to the other side (THROTTLE_CONFIGURE): it sets how the
                // *remote* throttles unreliable packets to us. Only when not ENet's default.
                let (ti, ta, td) = self.throttle;
                if (ti, ta, td) != DEFAULT_THROTTLE {
                    p.set_throttle(ti, ta, td);
                }
                let PeerMeta { proof, remote, .. } = self.meta[peer.0];
                self.meta[peer.0] = PeerMeta {
                    announced: true,
                    connected: true,
                    proof,
                    remote,
                    ..PeerMeta::default()
                };
                // ENet's handshake completed: the address acknowledged our VERIFY_CONNECT.
                self.hold_proof(peer.0, addr);
                self.events.push_back(EnetEvent::Connected {
                    peer: PeerId(peer.0),
                    addr,
                    data,
                });
            }
            enet::EventNoRef::Receive {
                peer,
                channel_id,
                packet,
            } => {
                let m = &mut self.meta[peer.0];
                m.packets_received += 1;
                m.bytes_received += packet.data().len() as u64;
                self.events.push_back(EnetEvent::Received {
                    peer: PeerId(peer.0),
                    channel: channel_id,
                    packet: EnetPacket(packet),
                });
            }
            enet::EventNoRef::Disconnect { peer, data } => self.slot_ended(peer.0, data),
        }
    }

    fn refresh_busy(&mut self) {
        self.busy = self
            .host
            .peers()
            .any(|p| p.state() != enet::PeerState::Disconnected);
    }

    /// Send what [`send`](Self::send), [`connect`](Self::connect) and
    /// [`disconnect`](Self::disconnect) queued, without reading datagrams or running timeouts.
    pub fn flush(&mut self, now: Instant) {
        self.set_now(now);
        self.host.flush();
        self.unflushed = false;
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<EnetEvent> {
        self.events.pop_front()
    }

    /// The next round trip measured from an acknowledgement ([`EnetConfig::ack_rtt`]): the
    /// peer and the time from sending a reliable command to its acknowledgement's arrival,
    /// in the caller's `now`s, with microsecond resolution. Samples of a session that ended
    /// are dropped with it.
    pub fn poll_rtt_sample(&mut self) -> Option<(PeerId, Duration)> {
        let (peer, rtt) = self.host.socket_mut().acks.as_mut()?.pop()?;
        Some((PeerId(peer), rtt))
    }

    /// The next datagram to write to the socket: copied into `buf`, returns its destination and
    /// length. `buf` must hold the host's MTU (see [`MAX_ENET_DATAGRAM`]).
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(SocketAddr, usize)> {
        self.host.socket_mut().outbound.pop_into(buf)
    }

    /// When this host next wants [`service`](Self::service) (or [`flush`](Self::flush) when
    /// only sends are pending); `None` when it has nothing alive. An instant not after the last
    /// call's `now` means "now".
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.host.socket().inbound.is_empty() || self.unflushed {
            Some(self.last_service)
        } else if self.busy || !self.events.is_empty() {
            Some(self.last_service + self.service_interval)
        } else {
            None
        }
    }

    /// The peer's state and ENet's measurements of its link; `None` for a slot out of range.
    pub fn peer_stats(&self, peer: PeerId) -> Option<PeerStats> {
        let p = self.host.get_peer(enet::PeerID(peer.0))?;
        let m = self.meta.get(peer.0)?;
        let scale = f64::from(enet::consts::PEER_PACKET_LOSS_SCALE);
        // ENet's first RTT sample sets the variance to (rtt + 1) / 2 >= 1 and later updates
        // keep it >= 1; before any sample it is 0 and the RTT is a 500 ms placeholder.
        let sampled = p.round_trip_time_variance() > Duration::ZERO;
        Some(PeerStats {
            state: p.state().into(),
            rtt: sampled.then(|| p.round_trip_time()),
            rtt_variance: sampled.then(|| p.round_trip_time_variance()),
            packet_loss: f64::from(p.packet_loss()) / scale,
            packet_loss_variance: f64::from(p.packet_loss_variance()) / scale,
            packets_sent: m.packets_sent,
            bytes_sent: m.bytes_sent,
            packets_received: m.packets_received,
            bytes_received: m.bytes_received,
            mtu: p.mtu(),
        })
    }

    /// ENet's round-trip estimate for `peer`, once it has measured one.
    pub fn rtt(&self, peer: PeerId) -> Option<Duration> {
        self.peer_stats(peer)?.rtt
    }

    /// ENet's packet-loss estimate for `peer`, 0.0..=1.0.
    pub fn packet_loss(&self, peer: PeerId) -> Option<f64> {
        Some(self.peer_stats(peer)?.packet_loss)
    }

    pub fn peer_state(&self, peer: PeerId) -> Option<PeerState> {
        Some(self.host.get_peer(enet::PeerID(peer.0))?.state().into())
    }

    /// The remote address of `peer` (kept after it disconnected, until the slot is reused).
    pub fn peer_addr(&self, peer: PeerId) -> Option<SocketAddr> {
        self.host.get_peer(enet::PeerID(peer.0))?.address()
    }

    /// Peer slots not Disconnected (connecting, connected or disconnecting).
    pub fn peers_in_use(&self) -> usize {
        self.meta
            .iter()
            .enumerate()
            .filter(|&(i, _)| {
                self.host
                    .get_peer(enet::PeerID(i))
                    .is_some_and(|p| p.state() != enet::PeerState::Disconnected)
            })
            .count()
    }

    /// Peers currently connected.
    pub fn connected_peers(&mut self) -> usize {
        self.host.connected_peers().count()
    }

    pub fn peer_limit(&self) -> usize {
        self.meta.len()
    }

    /// The largest datagram this host sends.
    pub fn mtu(&self) -> u16 {
        self.host.mtu()
    }

    pub fn stats(&self) -> HostStats {
        let sock = self.host.socket();
        HostStats {
            ack_rtt: sock.acks.as_ref().map(|a| a.stats).unwrap_or_default(),
            ..sock.stats
        }
    }
}

/// One ENet connection on its own host: the one-bot-per-socket case. The same contract as
/// [`EnetHost`], with the peer implied.
#[derive(Debug)]
pub struct EnetClient {
    host: EnetHost,
    peer: PeerId,
    server: SocketAddr,
}

impl EnetClient {
    /// Start connecting to `server` with `channels` channels and ENet's default settings.
    pub fn connect(now: Instant, server: SocketAddr, channels: usize) -> Result<Self, EnetError> {
        Self::connect_with(now, server, channels, 0, &EnetConfig::default())
    }

    /// [`connect`](Self::connect) with settings and the connect data. `config.peer_limit` is
    /// ignored (one peer).
    pub fn connect_with(
        now: Instant,
        server: SocketAddr,
        channels: usize,
        data: u32,
        config: &EnetConfig,
    ) -> Result<Self, EnetError> {
        let config = EnetConfig {
            peer_limit: 1,
            channel_limit: channels.max(1),
            ..config.clone()
        };
        let mut host = EnetHost::new(now, &config)?;
        let peer = host.connect(now, server, channels, data)?;
        Ok(Self { host, peer, server })
    }

    pub fn server(&self) -> SocketAddr {
        self.server
    }

    pub fn send(&mut self, channel: u8, reliable: bool, bytes: &[u8]) -> Result<(), EnetError> {
        self.host.send(self.peer, channel, reliable, bytes)
    }

    pub fn send_transmit(&mut self, t: &Transmit, buf: &[u8]) -> Result<(), EnetError> {
        self.host.send_transmit(self.peer, t, buf)
    }

    pub fn disconnect(&mut self, now: Instant, data: u32) {
        // The peer id is the host's own, so this cannot fail.
        let _ = self.host.disconnect(now, self.peer, data);
    }

    pub fn disconnect_now(&mut self, now: Instant, data: u32) {
        let _ = self.host.disconnect_now(now, self.peer, data);
    }

    /// A datagram from the socket. Datagrams from anyone but the server are dropped by ENet.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        self.host.handle_datagram(now, from, data);
    }

    pub fn service(&mut self, now: Instant) -> usize {
        self.host.service(now)
    }

    pub fn flush(&mut self, now: Instant) {
        self.host.flush(now);
    }

    pub fn poll_event(&mut self) -> Option<EnetEvent> {
        self.host.poll_event()
    }

    /// The next datagram for the server, copied into `buf`.
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(SocketAddr, usize)> {
        self.host.poll_transmit(buf)
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.host.poll_timeout()
    }

    pub fn state(&self) -> PeerState {
        self.host
            .peer_state(self.peer)
            .unwrap_or(PeerState::Disconnected)
    }

    pub fn is_connected(&self) -> bool {
        self.state() == PeerState::Connected
    }

    pub fn stats(&self) -> PeerStats {
        self.host
            .peer_stats(self.peer)
            .expect("the client's own peer slot exists")
    }

    /// ENet's round-trip estimate, once measured.
    pub fn rtt(&self) -> Option<Duration> {
        self.stats().rtt
    }

    /// ENet's packet-loss estimate, 0.0..=1.0.
    pub fn packet_loss(&self) -> f64 {
        self.stats().packet_loss
    }

    pub fn host_stats(&self) -> HostStats {
        self.host.stats()
    }

    /// The host underneath, for what the client does not wrap.
    pub fn host_mut(&mut self) -> &mut EnetHost {
        &mut self.host
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const A: &str = "10.0.0.1:5000";
    const B: &str = "10.0.0.2:7777";

    /// Datagram `i` of a queue test: its length (1..=1400) and bytes both follow from `i`.
    fn numbered(i: usize) -> Vec<u8> {
        let len = 1 + (i * 7919) % 1400;
        (0..len).map(|k| (i + k) as u8).collect()
    }

    #[test]
    fn datagram_queue_is_fifo_and_refuses_beyond_its_limit() {
        let (a, b): (SocketAddr, SocketAddr) = (A.parse().unwrap(), B.parse().unwrap());
        let mut q = DatagramQueue::new(2);
        assert!(q.push(a, &[1, 2, 3]));
        assert!(q.push(b, &[4]));
        assert!(!q.push(a, &[5]), "a third datagram is over the limit of 2");
        let mut out = [0u8; 8];
        assert_eq!(q.pop_into(&mut out), Some((a, 3)));
        assert_eq!(out[..3], [1, 2, 3]);
        assert!(q.push(a, &[6, 7]), "popping one made room");
        assert_eq!(q.pop_into(&mut out), Some((b, 1)));
        assert_eq!(out[..1], [4]);
        assert_eq!(q.pop_into(&mut out), Some((a, 2)));
        assert_eq!(out[..2], [6, 7]);
        assert_eq!(q.pop_into(&mut out), None);
        assert!(q.is_empty());
    }

    /// A queue that never empties (three datagrams always waiting) moves its bytes to the
    /// front now and then: 10,000 datagrams (about 7 MB) pass through, in order and intact,
    /// and the queue never holds more than a small multiple of the compaction threshold.
    #[test]
    fn datagram_queue_that_never_drains_stays_bounded() {
        let a: SocketAddr = A.parse().unwrap();
        let mut q = DatagramQueue::new(16);
        let mut out = [0u8; MAX_ENET_DATAGRAM];
        let (mut pushed, mut popped, mut most) = (0usize, 0usize, 0usize);
        while popped < 10_000 {
            while pushed - popped < 4 {
                assert!(q.push(a, &numbered(pushed)));
                pushed += 1;
            }
            let (from, len) = q.pop_into(&mut out).expect("four are queued");
            assert_eq!(
                (from, &out[..len]),
                (a, &numbered(popped)[..]),
                "datagram {popped}"
            );
            popped += 1;
            most = most.max(q.capacity_bytes());
        }
        assert!(
            most <= 4 * QUEUE_COMPACT_BYTES,
            "held {most} bytes for at most 4 datagrams of at most 1400"
        );
    }

    /// Bursts of different depths and sizes, each drained: a queue that held a burst of
    /// megabytes keeps at most [`QUEUE_KEEP_BYTES`] once it drains, not the burst's block
    /// (nor, as a free list of per-datagram buffers would, one buffer per datagram).
    #[test]
    fn datagram_queue_gives_back_a_deep_burst_once_drained() {
        let a: SocketAddr = A.parse().unwrap();
        let mut q = DatagramQueue::new(4096);
        let mut out = [0u8; MAX_ENET_DATAGRAM];
        let mut largest = 0usize;
        for (round, depth) in [(0usize, 700usize), (1, 50), (2, 4000), (3, 300)] {
            let burst: Vec<Vec<u8>> = (0..depth).map(|i| numbered(round * 10_000 + i)).collect();
            largest = largest.max(burst.iter().map(Vec::len).sum());
            for d in &burst {
                assert!(q.push(a, d));
            }
            for d in &burst {
                let (_, len) = q.pop_into(&mut out).expect("queued");
                assert_eq!(&out[..len], &d[..]);
            }
            assert!(q.is_empty());
            assert!(
                q.capacity_bytes() <= QUEUE_KEEP_BYTES,
                "round {round}: {} bytes kept after a burst of up to {largest}",
                q.capacity_bytes()
            );
        }
        assert!(
            largest > 4 * QUEUE_KEEP_BYTES,
            "the bursts exceed what is kept"
        );
    }

    /// Two hosts joined by a simulated link with one-way delay and random loss, on a simulated
    /// clock advancing 1 ms per step.
    struct Sim {
        now: Instant,
        hosts: [EnetHost; 2],
        addrs: [SocketAddr; 2],
        /// (deliver at, to host index, from, bytes)
        wire: Vec<(Instant, usize, SocketAddr, Vec<u8>)>,
        delay: Duration,
        loss: f64,
        rng: ChaCha8Rng,
        events: [Vec<EnetEvent>; 2],
        sent: u64,
        lost: u64,
    }

    impl Sim {
        fn new(a: EnetConfig, b: EnetConfig, delay: Duration, loss: f64) -> Self {
            let now = Instant::now();
            Self {
                now,
                hosts: [
                    EnetHost::new(now, &a).unwrap(),
                    EnetHost::new(now, &b).unwrap(),
                ],
                addrs: [A.parse().unwrap(), B.parse().unwrap()],
                wire: Vec::new(),
                delay,
                loss,
                rng: ChaCha8Rng::seed_from_u64(7),
                events: [Vec::new(), Vec::new()],
                sent: 0,
                lost: 0,
            }
        }

        fn step(&mut self) {
            self.now += Duration::from_millis(1);
            let now = self.now;
            let mut i = 0;
            while i < self.wire.len() {
                if self.wire[i].0 <= now {
                    let (_, to, from, bytes) = self.wire.swap_remove(i);
                    self.hosts[to].handle_datagram(now, from, &bytes);
                } else {
                    i += 1;
                }
            }
            let mut buf = [0u8; MAX_ENET_DATAGRAM];
            for h in 0..2 {
                if self.hosts[h].poll_timeout().is_some_and(|t| t <= now) {
                    self.hosts[h].service(now);
                }
                while let Some(ev) = self.hosts[h].poll_event() {
                    self.events[h].push(ev);
                }
                self.hosts[h].flush(now);
                while let Some((to, len)) = self.hosts[h].poll_transmit(&mut buf) {
                    let to_idx = self.addrs.iter().position(|a| *a == to).unwrap();
                    self.sent += 1;
                    if self.rng.random_bool(self.loss) {
                        self.lost += 1;
                        continue;
                    }
                    self.wire
                        .push((now + self.delay, to_idx, self.addrs[h], buf[..len].to_vec()));
                }
            }
        }

        fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Self) -> bool) -> bool {
            let end = self.now + limit;
            while self.now < end {
                self.step();
                if done(self) {
                    return true;
                }
            }
            false
        }

        fn connect(&mut self, peers: usize, channels: usize) -> Vec<PeerId> {
            let (now, b) = (self.now, self.addrs[1]);
            let ids: Vec<PeerId> = (0..peers)
                .map(|i| self.hosts[0].connect(now, b, channels, i as u32).unwrap())
                .collect();
            let n = peers;
            assert!(self.run_until(Duration::from_secs(5), |s| {
                s.events[0]
                    .iter()
                    .filter(|e| matches!(e, EnetEvent::Connected { .. }))
                    .count()
                    == n
            }));
            ids
        }
    }

    fn received(events: &[EnetEvent]) -> Vec<(PeerId, u8, Vec<u8>)> {
        events
            .iter()
            .filter_map(|e| match e {
                EnetEvent::Received {
                    peer,
                    channel,
                    packet,
                } => Some((*peer, *channel, packet.to_vec())),
                _ => None,
            })
            .collect()
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + 3) as u8).collect()
    }

    #[test]
    fn connect_exchange_fragmented_and_disconnect() {
        let mut sim = Sim::new(
            EnetConfig::default(),
            EnetConfig::with_peers(4),
            Duration::from_millis(5),
            0.0,
        );
        let ids = sim.connect(1, 2);
        let p = ids[0];
        // The server announces the peer once the client acknowledged its verify.
        assert!(sim.run_until(Duration::from_secs(1), |s| !s.events[1].is_empty()));
        assert!(matches!(
            sim.events[1][0],
            EnetEvent::Connected { data: 0, addr, .. } if addr == sim.addrs[0]
        ));
        let big = pattern(10_000);
        sim.hosts[0].send(p, 0, true, b"hello").unwrap();
        sim.hosts[0].send(p, 0, true, &big).unwrap();
        sim.hosts[0].send(p, 1, false, b"input").unwrap();
        let before = sim.hosts[0].stats().datagrams_out;
        assert!(
            sim.run_until(Duration::from_secs(2), |s| received(&s.events[1]).len()
                == 3)
        );
        // 10 000 bytes over a 1392-byte MTU: at least 8 datagrams of fragments.
        assert!(sim.hosts[0].stats().datagrams_out - before >= 8);
        // Channels are sequenced independently: channel 1 may overtake the fragments.
        let got = received(&sim.events[1]);
        let ch0: Vec<_> = got.iter().filter(|r| r.1 == 0).map(|r| &r.2).collect();
        let ch1: Vec<_> = got.iter().filter(|r| r.1 == 1).map(|r| &r.2).collect();
        assert_eq!(ch0, [&b"hello".to_vec(), &big]);
        assert_eq!(ch1, [&b"input".to_vec()]);
        let stats = sim.hosts[0].peer_stats(p).unwrap();
        assert_eq!(stats.packets_sent, 3);
        assert_eq!(stats.bytes_sent, 10_010);
        let rtt = stats.rtt.expect("acks measured the RTT");
        assert!(
            rtt >= Duration::from_millis(8) && rtt <= Duration::from_millis(20),
            "{rtt:?}"
        );

        sim.hosts[0].disconnect(sim.now, p, 99).unwrap();
        assert!(sim.run_until(Duration::from_secs(2), |s| s.events[1]
            .iter()
            .any(|e| matches!(e, EnetEvent::Disconnected { .. }))));
        assert!(matches!(
            sim.events[1].last(),
            Some(EnetEvent::Disconnected {
                data: 99,
                reason: DisconnectReason::Remote,
                ..
            })
        ));
        assert!(sim.run_until(Duration::from_secs(1), |s| s.events[0]
            .iter()
            .any(|e| matches!(e, EnetEvent::Disconnected { .. }))));
        assert!(matches!(
            sim.events[0].last(),
            Some(EnetEvent::Disconnected {
                reason: DisconnectReason::Local,
                ..
            })
        ));
        // Both idle now: nothing to wake up for.
        sim.step();
        assert_eq!(sim.hosts[0].poll_timeout(), None);
        assert_eq!(sim.hosts[1].poll_timeout(), None);
    }

    #[test]
    fn several_peers_share_one_host() {
        let mut sim = Sim::new(
            EnetConfig::with_peers(8),
            EnetConfig::with_peers(8),
            Duration::from_millis(2),
            0.0,
        );
        let ids = sim.connect(8, 2);
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), 8);
        for (i, &p) in ids.iter().enumerate() {
            sim.hosts[0].send(p, 0, true, &[i as u8; 3]).unwrap();
        }
        assert!(
            sim.run_until(Duration::from_secs(2), |s| received(&s.events[1]).len()
                == 8)
        );
        // Server side: 8 distinct peers, all from the one client address.
        let mut from = std::collections::HashSet::new();
        for (peer, _, bytes) in received(&sim.events[1]) {
            from.insert(peer);
            assert_eq!(sim.hosts[1].peer_addr(peer), Some(sim.addrs[0]));
            // Echo back; the client must route each echo to the bot that sent it.
            sim.hosts[1].send(peer, 0, true, &bytes).unwrap();
        }
        assert_eq!(from.len(), 8);
        assert!(
            sim.run_until(Duration::from_secs(2), |s| received(&s.events[0]).len()
                == 8)
        );
        for (peer, _, bytes) in received(&sim.events[0]) {
            let i = ids.iter().position(|p| *p == peer).unwrap();
            assert_eq!(bytes, vec![i as u8; 3]);
        }
        // Each peer's acknowledgements are its own: every one of the 8 sessions was measured,
        // each sample at the link's 4 ms round trip.
        let got = rtt_samples(&mut sim.hosts[0]);
        for id in &ids {
            assert!(got.iter().any(|(p, _)| p == id), "{id:?} has no sample");
        }
        assert!(got.iter().all(|&(_, rtt)| rtt == Duration::from_millis(4)));
        // A ninth connection has no slot.
        assert_eq!(
            sim.hosts[0].connect(sim.now, sim.addrs[1], 2, 0),
            Err(EnetError::NoFreePeer(8))
        );
    }

    #[test]
    fn injected_delay_moves_enet_rtt() {
        for one_way_ms in [10u64, 60] {
            let mut sim = Sim::new(
                EnetConfig::default(),
                EnetConfig::default(),
                Duration::from_millis(one_way_ms),
                0.0,
            );
            let p = sim.connect(1, 2)[0];
            // A few seconds of reliable traffic and pings.
            for _ in 0..30 {
                sim.hosts[0].send(p, 0, true, b"tick").unwrap();
                sim.run_until(Duration::from_millis(100), |_| false);
            }
            let rtt = sim.hosts[0].rtt(p).unwrap().as_millis() as u64;
            let want = 2 * one_way_ms;
            eprintln!("simulated one-way delay {one_way_ms} ms: ENet RTT {rtt} ms");
            assert!(
                rtt.abs_diff(want) <= 3,
                "one-way {one_way_ms} ms: rtt {rtt} ms"
            );
        }
    }

    fn rtt_samples(host: &mut EnetHost) -> Vec<(PeerId, Duration)> {
        std::iter::from_fn(|| host.poll_rtt_sample()).collect()
    }

    /// Every acknowledged reliable command is one sample, equal to the simulated round trip
    /// to the microsecond: sent at one step, acknowledged by the other host in the step it
    /// arrives, and the acknowledgement arrives one delay later.
    #[test]
    fn ack_samples_equal_the_simulated_round_trip_in_microseconds() {
        for one_way_ms in [10u64, 60] {
            let mut sim = Sim::new(
                EnetConfig::default(),
                EnetConfig::default(),
                Duration::from_millis(one_way_ms),
                0.0,
            );
            let p = sim.connect(1, 2)[0];
            rtt_samples(&mut sim.hosts[0]);
            for _ in 0..30 {
                sim.hosts[0].send(p, 0, true, b"tick").unwrap();
                sim.run_until(Duration::from_millis(100), |_| false);
            }
            let got = rtt_samples(&mut sim.hosts[0]);
            let want = Duration::from_millis(2 * one_way_ms);
            // 30 reliable packets, and ENet's own pings while the other side is silent.
            assert!(got.len() >= 30, "{} samples", got.len());
            assert!(
                got.iter().all(|&(peer, rtt)| peer == p && rtt == want),
                "{got:?}"
            );
            let stats = sim.hosts[0].stats().ack_rtt;
            assert_eq!(stats.samples, got.len() as u64);
            assert_eq!(stats.earlier_transmission + stats.dropped, 0, "{stats:?}");
        }
    }

    /// Under 10 % loss in both directions, commands are retransmitted and acknowledgements
    /// lost, yet every sample is still exactly the round trip: an acknowledgement is paired
    /// only with the transmission whose sent time it echoes.
    #[test]
    fn retransmitted_commands_are_measured_from_the_transmission_acknowledged() {
        let mut sim = Sim::new(
            EnetConfig::default(),
            EnetConfig::default(),
            Duration::from_millis(15),
            0.1,
        );
        let p = sim.connect(1, 2)[0];
        rtt_samples(&mut sim.hosts[0]);
        for i in 0..200u32 {
            sim.hosts[0].send(p, 0, true, &i.to_be_bytes()).unwrap();
            sim.run_until(Duration::from_millis(50), |_| false);
        }
        let got = rtt_samples(&mut sim.hosts[0]);
        assert!(got.len() > 150, "{} samples", got.len());
        assert!(
            got.iter().all(|&(_, rtt)| rtt == Duration::from_millis(30)),
            "{got:?}"
        );
        assert!(sim.lost > 0);
    }

    /// A peer that sends nothing reliable, talking to a remote that streams unreliable
    /// data, is still measured: ENet pings a peer it has had no acknowledgement from for its
    /// ping interval, and each PING's acknowledgement is a sample.
    #[test]
    fn enet_pings_measure_a_link_carrying_only_unreliable_traffic() {
        let pinging = EnetConfig {
            ping_interval: Duration::from_millis(250),
            ..EnetConfig::default()
        };
        let mut sim = Sim::new(
            pinging,
            EnetConfig::default(),
            Duration::from_millis(5),
            0.0,
        );
        let p = sim.connect(1, 2)[0];
        assert!(sim.run_until(Duration::from_secs(1), |s| !s.events[1].is_empty()));
        let server_peer = match sim.events[1][0] {
            EnetEvent::Connected { peer, .. } => peer,
            ref e => panic!("{e:?}"),
        };
        rtt_samples(&mut sim.hosts[0]);
        // 4 s of the server streaming unreliable state at 50 Hz.
        for _ in 0..200 {
            sim.hosts[1].send(server_peer, 1, false, b"state").unwrap();
            sim.run_until(Duration::from_millis(20), |_| false);
        }
        let got = rtt_samples(&mut sim.hosts[0]);
        // A PING every 250 ms plus the round trip before the next one may leave.
        assert!(
            (14..=16).contains(&got.len()),
            "one PING per 250-260 ms over 4 s: {} samples",
            got.len()
        );
        assert!(got
            .iter()
            .all(|&(peer, rtt)| peer == p && rtt == Duration::from_millis(10)));
    }

    #[test]
    fn injected_loss_is_repaired_and_estimated() {
        let mut sim = Sim::new(
            EnetConfig::default(),
            EnetConfig::default(),
            Duration::from_millis(10),
            0.1,
        );
        let p = sim.connect(1, 2)[0];
        // 45 simulated seconds of 20 Hz reliable traffic: four of ENet's 10 s loss windows (its
        // estimate moves 1/8 of the way to each window's loss rate).
        let n = 900;
        for i in 0..n {
            sim.hosts[0]
                .send(p, 0, true, &(i as u32).to_be_bytes())
                .unwrap();
            sim.run_until(Duration::from_millis(50), |_| false);
        }
        assert!(
            sim.run_until(Duration::from_secs(5), |s| received(&s.events[1]).len()
                == n)
        );
        let got = received(&sim.events[1]);
        for (i, (_, _, bytes)) in got.iter().enumerate() {
            assert_eq!(bytes, &(i as u32).to_be_bytes(), "reliable order");
        }
        let loss = sim.hosts[0].packet_loss(p).unwrap();
        eprintln!(
            "simulated 10% datagram loss: {} of {} datagrams dropped, all {n} reliable packets \
             delivered in order, ENet loss estimate {loss:.3}",
            sim.lost, sim.sent
        );
        assert!(sim.lost > 0);
        assert!(loss > 0.03 && loss < 0.3, "ENet loss estimate {loss}");
    }

    #[test]
    fn connect_to_silence_fails_within_the_timeout() {
        let cfg = EnetConfig {
            timeout_minimum: Duration::from_millis(500),
            timeout_maximum: Duration::from_secs(1),
            ..EnetConfig::default()
        };
        let mut sim = Sim::new(cfg, EnetConfig::default(), Duration::from_millis(5), 1.0);
        let (now, b) = (sim.now, sim.addrs[1]);
        let p = sim.hosts[0].connect(now, b, 2, 0).unwrap();
        assert!(sim.hosts[0].poll_timeout().is_some());
        assert!(sim.run_until(Duration::from_secs(3), |s| !s.events[0].is_empty()));
        assert!(matches!(
            sim.events[0][0],
            EnetEvent::Disconnected { peer, reason: DisconnectReason::ConnectFailed, .. } if peer == p
        ));
        assert!(sim.now - now <= Duration::from_secs(2));
    }

    #[test]
    fn disconnect_while_connecting_reports_once() {
        let mut sim = Sim::new(
            EnetConfig::default(),
            EnetConfig::default(),
            Duration::from_millis(5),
            0.0,
        );
        let (now, b) = (sim.now, sim.addrs[1]);
        let p = sim.hosts[0].connect(now, b, 2, 0).unwrap();
        sim.hosts[0].disconnect(now, p, 0).unwrap();
        sim.run_until(Duration::from_secs(1), |_| false);
        let ends = sim.events[0]
            .iter()
            .filter(|e| matches!(e, EnetEvent::Disconnected { .. }))
            .count();
        assert_eq!(ends, 1);
        assert_eq!(sim.hosts[0].peer_state(p), Some(PeerState::Disconnected));
    }

    #[test]
    fn checksum_and_range_coder_interoperate() {
        let cfg = EnetConfig {
            checksum: true,
            range_coder: true,
            ..EnetConfig::default()
        };
        let mut sim = Sim::new(cfg.clone(), cfg, Duration::from_millis(1), 0.0);
        let p = sim.connect(1, 2)[0];
        let text =
            b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        sim.hosts[0].send(p, 0, true, text).unwrap();
        assert!(
            sim.run_until(Duration::from_secs(1), |s| received(&s.events[1]).len()
                == 1)
        );
        assert_eq!(received(&sim.events[1])[0].2, text);
        // The acknowledgements are read through the checksum and the range coder too.
        let got = rtt_samples(&mut sim.hosts[0]);
        assert!(!got.is_empty());
        assert!(
            got.iter().all(|&(_, rtt)| rtt == Duration::from_millis(2)),
            "{got:?}"
        );
    }

    #[test]
    fn client_wrapper_and_wakeups() {
        let now = Instant::now();
        let server: SocketAddr = B.parse().unwrap();
        let mut c = EnetClient::connect(now, server, 2).unwrap();
        assert_eq!(c.state(), PeerState::Connecting);
        // The connect is queued: due now.
        assert_eq!(c.poll_timeout(), Some(now));
        assert!(matches!(
            c.send(0, true, b"x"),
            Err(EnetError::NotConnected)
        ));
        c.service(now);
        let mut buf = [0u8; crate::protocol::MAX_DATAGRAM];
        let (to, len) = c.poll_transmit(&mut buf).expect("the CONNECT datagram");
        assert_eq!(to, server);
        assert!(len > 0);
        // Waiting on the server: wake up at the service interval.
        assert_eq!(c.poll_timeout(), Some(now + Duration::from_millis(10)));
        assert_eq!(c.rtt(), None);
    }

    #[test]
    fn bad_settings_are_refused() {
        let now = Instant::now();
        for cfg in [
            EnetConfig::with_peers(0),
            EnetConfig {
                mtu: 100,
                ..EnetConfig::default()
            },
            EnetConfig {
                channel_limit: 0,
                ..EnetConfig::default()
            },
        ] {
            assert!(matches!(
                EnetHost::new(now, &cfg),
                Err(EnetError::BadParameter(_))
            ));
        }
    }
}
