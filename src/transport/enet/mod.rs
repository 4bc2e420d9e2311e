//! ENet 1.3.x transport, sans-IO, over the engine's own sockets.
//!
//! [rusty_enet] is a faithful port of the C ENet library (wire-compatible with C ENet 1.3.x;
//! `tests/it/enet_interop.rs` proves it against Debian's `libenet`). Its [`rusty_enet::Socket`]
//! trait lets the caller supply the socket, and that is all this module needs to make ENet
//! sans-IO: [`QueueSocket`] is a socket made of two datagram queues. The engine pushes the
//! datagrams it received on its real UDP socket into one ([`EnetHost::handle_datagram`]); ENet
//! pulls them out when serviced, and whatever ENet sends lands in the other queue, which the
//! engine drains ([`EnetHost::poll_transmit`]) and writes to its socket. Time is a value too:
//! the host's clock is a number that each call taking `now` sets, and ENet reads it instead of
//! the system clock. So an [`EnetHost`] never touches a socket or a clock, and a test can run two
//! of them back to back over a simulated link with delay and loss (`enet/tests.rs`).
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

mod ack_rtt;
mod admission;
mod client;
mod clock;
mod config;
mod first_map;
mod handshake;
mod host;
mod queue;
mod socket;
mod types;
pub mod unframe;
mod wire;

#[cfg(test)]
mod tests;

pub use ack_rtt::AckRttStats;
#[cfg(test)]
pub(crate) use ack_rtt::STAMP_TABLE_BYTES;
pub use client::EnetClient;
pub use config::{EnetConfig, DEFAULT_MTU, MAX_ENET_DATAGRAM};
pub use host::EnetHost;
pub use socket::QueueSocket;
pub use types::{
    DisconnectReason, EnetError, EnetEvent, EnetPacket, HostStats, PeerId, PeerState, PeerStats,
};
