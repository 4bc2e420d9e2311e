//! tickswarm: a headless load-test and bot-swarm tool for real-time multiplayer game servers.
//!
//! As a binary it is the `tickswarm` command line. As a library it lets a game team load-test
//! **its own protocol** without forking: implement [`api::Protocol`] for a marker type (a
//! codec, a sans-IO [`api::Bot`] and a reference [`api::Server`]), test it on the
//! deterministic simulated link of [`api::sim`], and call [`main_with`] from a binary crate
//! to get the whole command line (`run`, `validate`, `serve`, `protocols`, `merge`,
//! `compare`, reports, thresholds, Prometheus, shards) with that protocol beside the built-in
//! ones, read from the same scenario files. `docs/guide/custom-protocol.md` in the
//! repository walks through it; `examples/custom-protocol/` is a complete one.
//!
//! ```no_run
//! use tickswarm::api::*;
//! # struct MyGame;
//! # impl Protocol for MyGame {
//! #     type Options = ();
//! #     const INFO: ProtocolInfo = ProtocolInfo { name: "mygame", spec: "", transport: "udp",
//! #         default_port: 4000, rtt: "", downstream_loss: "", upstream_loss: "",
//! #         dialects: &[], metrics: &[] };
//! #     fn transport(_: &()) -> TransportNeeds { TransportNeeds::Udp }
//! #     fn validate(_: &(), _: &ServerParams) -> Result<(), String> { Ok(()) }
//! #     fn dialect_name(_: &()) -> String { "spec".into() }
//! #     fn make_bot(_: &(), _: BotParams) -> Box<dyn Bot> { panic!("elided") }
//! #     fn make_server(_: &(), _: &ServerParams, _: std::time::Instant) -> Box<dyn Server> {
//! #         panic!("elided")
//! #     }
//! # }
//! fn main() -> std::process::ExitCode {
//!     tickswarm::main_with(&[&MyGame])
//! }
//! ```
//!
//! # What is stable
//!
//! The public API is [`api`] (the same items as [`protocol::prelude`], plus [`main_with`]):
//! the traits a protocol implements ([`api::Protocol`], [`api::Bot`], [`api::Server`]), the
//! types they exchange ([`api::Transmit`], [`api::BotParams`], [`api::ServerParams`],
//! [`api::ConnId`], [`api::Recorder`], [`api::MetricDesc`], [`api::TransportNeeds`], phases),
//! the registry ([`api::register`]), the simulation harness ([`api::sim`]) and the toolkit
//! modules re-exported there. Within a 0.x series these follow semver as cargo reads it for
//! 0.x (a breaking change bumps the minor version); default methods may be added to the
//! traits and fields to non-exhaustive uses of them (build [`api::BotParams`] and
//! [`api::ServerParams`] from their defaults and set fields, never with a full literal).
//!
//! Not stable: everything marked `#[doc(hidden)]` (the engine, the transports, the scenario
//! model, metrics aggregation, the report writers, the CLI's internals). They are public only
//! so the project's own tests and tools reach them, and change without notice. The built-in
//! protocols' own types ([`games::cafe`] and the others) are shown for their wire-format
//! documentation and as examples; their codecs and options are not a stable API either.
//! The command line, scenario files and `summary.json` (with its schema) are the stable
//! interface of the binary, versioned with the crate.
//!
//! # Layers
//!
//! The layers; a module names (`crate::<module>`) only the modules it reaches along the
//! arrows, which `tests/it/layers.rs` enforces (its `ALLOWED` table is this picture, and
//! `docs/dev/architecture.md` draws it too):
//!
//! ```text
//!               api
//!                ▼
//!               cli
//!         ┌──────┼──────┐
//!         ▼      ▼      ▼
//!       engine capture report
//!     ┌───┴────┐ │      │
//!     ▼        ▼ ▼      │
//! scenario  transport   │
//!   │   ▼      │        │
//!   │ games    │        │
//!   │   └──┬───┘        │
//!   │      ▼            │
//!   │   protocol        │
//!   │      ▼            │
//!   │   metrics ◄───────┤
//!   ▼      │            │
//! netsim ◄─┼────────────┘
//!   └──┬───┘
//!      ▼
//!   duration
//! ```
//!
//! - [`api`]: the public protocol API and [`main_with`] (stable; see above).
//! - [`cli`]: the commands (`run`, `serve`, `compare`, ...).
//! - [`report`]: summary.json, report.html, JUnit XML.
//! - [`capture`]: captures of real clients (`tickswarm inspect`, `relay --record`): pcap and
//!   pcapng read in bounded memory, flows, each tried as every protocol and dialect (below
//!   `cli`; uses `transport` for ENet's framing, `games` for the catalogue, `protocol`).
//! - [`engine`]: workers that own sockets and timers and drive the bots, the embedded reference
//!   server, and per transport the I/O that carries datagrams on real sockets (`engine::io`).
//! - [`scenario`]: YAML to a validated plan.
//! - [`transport`]: sans-IO transports under a protocol (ENet).
//! - [`games`]: the five built-in protocols (codecs, sans-IO bots and reference servers), and
//!   the catalogue of protocols a process knows.
//! - [`protocol`]: the protocol toolkit: the traits a protocol implements, the registry entry,
//!   the shared sans-IO pieces and the simulation harness.
//! - [`metrics`]: per-worker histograms and counters, merged losslessly.
//! - [`netsim`]: simulated network conditions per bot (latency, jitter, loss, ...), sans-IO.
//! - [`duration`]: durations as scenarios write them.

#![warn(missing_docs)]

pub mod api;
#[doc(hidden)]
pub mod capture;
#[doc(hidden)]
pub mod cli;
#[doc(hidden)]
pub mod duration;
#[doc(hidden)]
pub mod engine;
pub mod games;
#[doc(hidden)]
pub mod metrics;
#[doc(hidden)]
pub mod netsim;
pub mod protocol;
#[doc(hidden)]
pub mod report;
#[doc(hidden)]
pub mod scenario;
#[doc(hidden)]
pub mod transport;

pub use cli::main_with;
