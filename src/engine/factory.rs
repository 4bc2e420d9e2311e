//! Where a protocol's transport needs meet the engine's transports.

use crate::protocol::{ProtocolSection, TransportNeeds};

/// The transport a protocol runs over; the engine, not the protocol, owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// One datagram per protocol message, one socket per bot.
    Udp,
    /// ENet sessions with this many channels, `bots_per_socket` peers per socket.
    Enet { channels: usize },
}

pub fn transport_for(protocol: &ProtocolSection) -> TransportKind {
    match protocol.transport() {
        TransportNeeds::Udp => TransportKind::Udp,
        TransportNeeds::Enet(e) => TransportKind::Enet {
            channels: e.channels,
        },
    }
}
