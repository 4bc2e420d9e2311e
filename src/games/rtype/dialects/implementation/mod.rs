//! R-Type's implementation dialect: the public server the rtype spec documents, as its
//! released source speaks (docs/protocols/rtype.md, "The implementation dialect").
//!
//! A TCP login (length-framed HELLO / WELCOME) before play over UDP on the TCP port + 1, a
//! 4-byte UDP header with its own type codes, bare-header CONNECT / PING / DISCONNECT, a
//! 5-byte INPUT of key flags, and snapshots of 20-byte records with no tick. The engine
//! carries the login ([`TransportNeeds::UdpTcpLogin`](crate::protocol::prelude::TransportNeeds)).
//!
//! - [`codec`]: every wire rule of the dialect.
//! - [`bot`]: the simulated client.
//! - [`hint`]: the spec dialect's bot naming this dialect when it meets its bytes.

pub mod bot;
pub mod codec;
pub mod hint;
pub mod inspect;

pub use bot::ImplementationBot;
pub use hint::SpecWithHint;
