//! The implementation dialect: the plain-UDP protocol the public DarkAges server speaks
//! (docs/protocols/darkages.md, "Dialect `implementation`"), which shares nothing on the
//! wire with the spec dialect but the port.
//!
//! - [`codec`]: every wire rule.
//! - [`bot`]: the simulated client.
//! - [`server`]: a small reference server of the same wire.
//! - [`admission`]: how that server proves a source's address on a wire with no cookie.

pub mod admission;
pub mod bot;
pub mod codec;
pub mod inspect;
pub mod server;

pub use bot::ImplementationBot;
pub use server::ImplementationServer;

/// Inputs a second the public server takes: it kicks a client that sends more than 65 in
/// one second (60 and a burst of 5), so a scenario asking for more is refused.
pub const MAX_INPUT_RATE_HZ: f64 = 60.0;
