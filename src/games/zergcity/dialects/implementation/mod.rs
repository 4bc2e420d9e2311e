//! `dialect: implementation`: the real ZergCity game server (`sims_3000 --server`), whose
//! wire format is its own (a 5-byte envelope, Join / JoinAccept with a player id and a session
//! token, Heartbeats both ways, a 30-byte Input, StateUpdates), not the spec's. The page
//! (docs/protocols/zergcity.md, "dialect: implementation") describes it byte for byte.
//!
//! - [`codec`]: the envelope and every message either side sends.
//! - [`bot`]: the player, and what it can and cannot measure against this server.
//! - [`server`]: a reference server with the real one's rules, for embedded runs and tests.

pub mod bot;
pub mod codec;
pub mod inspect;
pub mod server;

pub use bot::ImplementationBot;
pub use server::{ImplementationServer, ImplementationServerConfig};
