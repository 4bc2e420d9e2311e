//! A host's settings, with C ENet's defaults, and the limits they are checked against.

use std::time::Duration;

use rusty_enet as enet;

/// The largest datagram ENet ever sends or accepts (`PROTOCOL_MAXIMUM_MTU`). Hosts send at most
/// their [`EnetConfig::mtu`] (1392 by default), so a
/// [`MAX_DATAGRAM`](crate::protocol::MAX_DATAGRAM)-sized buffer is enough for
/// [`EnetHost::poll_transmit`](super::EnetHost::poll_transmit) unless the MTU is raised; receive buffers should be this big.
pub const MAX_ENET_DATAGRAM: usize = enet::MTU_MAX;

/// ENet's default MTU (`ENET_HOST_DEFAULT_MTU`).
pub const DEFAULT_MTU: u16 = 1392;

/// C ENet's throttle settings: (interval ms, acceleration, deceleration).
pub(super) const DEFAULT_THROTTLE: (u32, u32, u32) = (
    enet::consts::PEER_PACKET_THROTTLE_INTERVAL,
    enet::consts::PEER_PACKET_THROTTLE_ACCELERATION,
    enet::consts::PEER_PACKET_THROTTLE_DECELERATION,
);

/// Settings of one ENet host. The defaults are C ENet's, except the peer limit (one: the
/// one-bot-per-socket case) and the channel limit (two, as City uses).
#[derive(Debug, Clone)]
pub struct EnetConfig {
    /// Peer slots of the host: bots sharing this socket, or players a server accepts.
    pub peer_limit: usize,
    /// Most channels an incoming connection may open (outgoing connections ask for their own
    /// count in [`EnetHost::connect`](super::EnetHost::connect)). 1..=255.
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
    /// queue the round trips for [`EnetHost::poll_rtt_sample`](super::EnetHost::poll_rtt_sample). Costs a read of every datagram
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
