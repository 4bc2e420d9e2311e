//! tickswarm: a headless load-test and bot-swarm tool for real-time multiplayer game servers.
//!
//! Layers, top to bottom: [`scenario`] (YAML to a validated plan), [`engine`] (workers that
//! own sockets and timers and drive the bots), [`transport`], [`protocol`] (sans-IO codecs,
//! bots and reference servers), [`metrics`] (per-worker histograms, merged losslessly) and
//! [`report`] (summary.json, report.html, JUnit XML).

pub mod cli;
pub mod duration;
pub mod engine;
pub mod metrics;
pub mod netsim;
pub mod protocol;
pub mod report;
pub mod scenario;
pub mod transport;
