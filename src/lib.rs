//! tickswarm: a headless load-test and bot-swarm tool for real-time multiplayer game servers.
//!
//! The layers; a module names (`crate::<module>`) only the modules it reaches along the
//! arrows, which `tests/it/layers.rs` enforces (its `ALLOWED` table is this picture, and
//! `docs/dev/architecture.md` draws it too):
//!
//! ```text
//!               cli
//!         ┌──────┴──────┐
//!         ▼             ▼
//!       engine        report
//!     ┌───┴────┐        │
//!     ▼        ▼        │
//! scenario  transport   │
//!   │   └──┬───┘        │
//!   │      ▼            │
//!   │   protocol        │
//!   │      ▼            │
//!   │   metrics ◄───────┘
//!   ▼      │
//! netsim   │
//!   └──┬───┘
//!      ▼
//!   duration
//! ```
//!
//! - [`cli`]: the commands (`run`, `serve`, `compare`, ...).
//! - [`report`]: summary.json, report.html, JUnit XML.
//! - [`engine`]: workers that own sockets and timers and drive the bots, the embedded reference
//!   server, and per transport the I/O that carries datagrams on real sockets (`engine::io`).
//! - [`scenario`]: YAML to a validated plan.
//! - [`transport`]: sans-IO transports under a protocol (ENet).
//! - [`protocol`]: sans-IO codecs, bots and reference servers.
//! - [`metrics`]: per-worker histograms and counters, merged losslessly.
//! - [`netsim`]: simulated network conditions per bot (latency, jitter, loss, ...), sans-IO.
//! - [`duration`]: durations as scenarios write them.

pub mod cli;
pub mod duration;
pub mod engine;
pub mod metrics;
pub mod netsim;
pub mod protocol;
pub mod report;
pub mod scenario;
pub mod transport;
