//! The integration tests, one binary (ripgrep's layout): each file of this folder is a
//! module, and the crate and the binary are linked once rather than once per file.
//!
//! Run one file's tests with its module name: `cargo test --test it e2e_city::`.
//!
//! A test that runs a scenario starts `tickswarm run` through `common::summary` (the one
//! harness: `run_scenario`, `run_file`, `run_text`, or `run_command` + `finish` when it must
//! spawn or signal the run), which checks the exit code against the codes the test expects,
//! and reads summary.json through its accessors (`u64_at`, `f64_at`, `opt_f64_at`,
//! `assert_absent`, ...), which fail on a missing, renamed, null or mistyped key: a summary
//! read never defaults to 0.
//! Kept apart, each its own binary: the simulation and fuzz tests (`tests/*_sim.rs`,
//! `tests/fuzz_*.rs`) and `tests/e2e_gns.rs` (built only with `--features gns`).

#[path = "../common/mod.rs"]
mod common;

mod abort;
mod amplification;
mod cafe_codec;
mod cafe_variant;
mod capacity;
mod city_admission;
mod city_codec;
mod cli_env;
mod cli_errors;
mod cli_generate;
mod cli_output;
mod compare;
mod darkages_codec;
mod dashboard;
mod dead_server;
mod docs_links;
mod e2e_cafe;
mod e2e_cafe_variant;
mod e2e_city;
mod e2e_city_variant;
mod e2e_darkages;
mod e2e_darkages_implementation;
mod e2e_impaired;
mod e2e_rtype;
mod e2e_rtype_implementation;
mod e2e_zergcity;
mod e2e_zergcity_benchmark;
mod e2e_zergcity_implementation;
mod enet_address_reuse;
mod enet_half_open;
mod enet_interop;
mod enet_rtt;
mod enet_send_batch;
mod faults;
mod generator_cpu;
mod group_truth;
mod groups;
mod init;
mod inspect;
mod layers;
mod limits;
mod merge_hostile;
mod netsim;
mod overload;
mod phases;
mod progress_tty;
mod prometheus;
mod relay;
mod report_browser;
mod rtype_codec;
mod run_files;
mod schema;
mod self_contained;
mod server_metrics;
mod server_metrics_hostile;
mod shard;
mod snapshot_rate;
mod socket_memory;
mod source_addresses;
mod stop;
mod test_peer;
mod threshold_percentiles;
mod tick_cost;
mod timer_coalesce;
mod trend;
mod zergcity_codec;
mod zergcity_resume;
