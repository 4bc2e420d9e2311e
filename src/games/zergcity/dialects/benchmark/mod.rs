//! `dialect: benchmark`: the POC-2 benchmark server of the project the spec came from
//! (`poc/poc2-enet-snapshot-sync`), whose wire format is its own: the spec's 16-byte header
//! with the server tick in `sequence`, no handshake (it streams to any ENet peer), a
//! FullSnapshot of two flat arrays, LZ4 deltas with a world checksum, bare-header acks. The
//! page (docs/protocols/zergcity.md, "dialect: benchmark") describes it byte for byte.
//!
//! - [`codec`]: the header and the four messages.
//! - [`bot`]: the client, and what it can and cannot measure against this server.
//! - [`checksum`]: the world checksum the bot checks deltas against, at a bounded cost.
//! - [`server`]: a reference server with the benchmark's rules, for embedded runs and tests.
//! - [`hint`]: naming the benchmark to the spec dialect's bots, and the other dialects to
//!   the benchmark's.

pub mod bot;
pub mod checksum;
pub mod codec;
pub mod hint;
pub mod inspect;
pub mod server;

pub use bot::BenchmarkBot;
pub use server::{BenchmarkServer, BenchmarkServerConfig};
