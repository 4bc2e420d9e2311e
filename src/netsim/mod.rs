//! Simulated network conditions per bot: what a mobile player's link does to its datagrams.
//!
//! A [`Link`] is one direction of one bot's path (up: bot to server; down: server to bot).
//! The engine hands it each datagram as it is sent (`submit`) and gets back its fate: dropped
//! (and why), or delivered after a delay, sometimes twice. The engine then holds the bytes
//! until then. Nothing here touches a socket or a clock: time comes in as `now`, randomness
//! from a seed, so a link's behaviour replays exactly and is tested with simulated time.
//!
//! The model, applied in this order to each datagram:
//! 1. **Outage**: the link is down for `down_for` every `every` (first outage one `every`
//!    after the link starts); a datagram sent while it is down is lost.
//! 2. **Loss**: uniform (each datagram lost with probability `rate`) or bursty
//!    (Gilbert–Elliott: a good and a bad state; see [`LossModel`]).
//! 3. **Bandwidth**: a cap in bits per second with a queue of `queue` bytes in front of it.
//!    A datagram waits for the ones before it to be serialised; one that would overflow the
//!    queue is dropped (tail drop, as a router does).
//! 4. **Delay**: fixed `latency` plus a `jitter` draw. Jitter never reorders by itself (a
//!    datagram is never delivered before the one sent before it on the same link, as on one
//!    path); `reorder` holds a share of datagrams back by `reorder_delay`, which lets later
//!    ones pass.
//! 5. **Duplication**: a share of datagrams arrive twice, the copy `duplicate_delay` later.
//!
//! This is what engines' packet simulators offer per connection (GameNetworkingSockets'
//! fake loss, lag, reorder and duplication; Unreal's and Unity's network emulation), applied
//! per bot inside the swarm, so ENet's and GNS's own retransmission and RTT estimates see the
//! link as a real one.

mod config;
mod delay_line;
mod link;

pub use config::{
    describe_written, Conditions, ConfigError, Jitter, LossModel, NetworkConditions, Share,
    REAL_LINK,
};
pub use delay_line::{DelayLine, HeldBound, POOL_BUFFER};
pub use link::{DropReason, Fate, Link, LinkStats};

#[cfg(test)]
mod tests;
