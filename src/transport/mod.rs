//! Transports: what carries a protocol's messages between the engine's sockets and a
//! protocol's sans-IO state machine.
//!
//! Raw UDP needs no layer of its own: a protocol's [`Transmit`](crate::protocol::Transmit) is one
//! datagram. ENet ([`enet`]) is a connection-oriented state machine in its own right (handshake,
//! acknowledgements, retransmission, fragmentation, pings, timeouts), so it sits here, between
//! the engine and the protocol, under the same sans-IO contract as the protocols: the caller
//! pushes datagrams and the time in, and pulls datagrams, events and the next wake-up out. The
//! engine owns the real sockets; protocols only ever see payload bytes, a channel number and a
//! reliability bit (the delivery hints of `Transmit`), never an ENet type.

pub mod enet;

pub use enet::{
    AckRttStats, DisconnectReason, EnetClient, EnetConfig, EnetError, EnetEvent, EnetHost,
    EnetPacket, HostStats, PeerId, PeerState, PeerStats, MAX_ENET_DATAGRAM,
};
