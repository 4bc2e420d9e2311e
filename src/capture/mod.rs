//! Captures of real clients (`tickswarm inspect`): a pcap or pcapng file read in bounded
//! memory ([`read`]), split into flows (client address ↔ server address; the client is the
//! side that sent first), and each flow tried against every protocol and dialect the process
//! knows ([`analyse`]), ENet framing included, through each protocol's decode-only
//! [`Inspect`](crate::protocol::inspect::Inspect).
//!
//! Below `cli`, above `games` (the catalogue of protocols) and `transport` (ENet's framing).

pub mod analyse;
pub mod read;
pub mod write;

pub use analyse::{inspect, Inspection};
pub use read::CaptureError;
