//! What Skirmish measures and how: its entry in `tickswarm protocols` and the report's
//! protocol section.

use tickswarm::api::*;

pub const INFO: ProtocolInfo = ProtocolInfo {
    name: "skirmish",
    spec: "examples/custom-protocol/src/lib.rs",
    transport: "raw UDP",
    default_port: 4600,
    rtt: "Ping with a token the server echoes in a Pong",
    downstream_loss: "per-player snapshot seq (gaps, reordering, duplicates)",
    upstream_loss: "the server's last input seq and inputs seen, in each snapshot",
    dialects: &[("delta", "deltas on acked baselines (default)"), ("full", "full snapshots")],
    metrics: &[
        MetricDesc::histogram("baseline_age_ticks", "Baseline age", "delta tick - baseline", "ticks"),
        MetricDesc::count("full_snapshots", "Full snapshots", "snapshots without a baseline"),
    ],
};
