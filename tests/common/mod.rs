//! Helpers shared by integration tests (`mod common;`). Each test binary uses a different
//! subset, so unused items are expected. `summary` is the harness every test that runs a
//! scenario goes through (the run, its exit code, and typed reads of summary.json).
#![allow(dead_code)]

pub mod c_peer;
pub mod city;
pub mod city_peer;
pub mod enet_forge;
pub mod kernel;
pub mod peer;
pub mod proxy;
pub mod scenario;
pub mod serve;
pub mod sim;
pub mod summary;
pub mod zergcity;
