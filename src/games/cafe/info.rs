//! What cafe measures and how: its entry in `tickswarm protocols` and the report's
//! protocol section, one row per metric it records.

use super::DEFAULT_PORT;
use crate::protocol::prelude::{Display, MetricDesc, ProtocolInfo};

pub const INFO: ProtocolInfo = ProtocolInfo {
    name: "cafe",
    spec: "docs/protocols/cafe.md",
    transport: "raw UDP",
    default_port: DEFAULT_PORT,
    rtt: "Ping with an opaque token the bot issues; the server echoes it unchanged (µs clock kept by the bot)",
    downstream_loss: "per-connection header seq (gaps, reordering, duplicates, wrap-around), \
        committed each half second only when the snapshot ticks and the pongs and heartbeats \
        that may have been lost explain its gaps; otherwise the sequence is shared by all \
        clients (shared_sequence_detected) and snapshot ticks count instead; implementation \
        dialect: snapshot ticks (step learned from the first ticks)",
    upstream_loss: "not measurable: the server reports nothing back about inputs",
    dialects: &[
        ("spec", "cafe.md as written (default)"),
        (
            "implementation",
            "the documented implementation: snapshot carries last_input u32 + count u16, no Disconnect, 2 s timeout",
        ),
    ],
    metrics: &[
        MetricDesc::micros(
            "stale_us",
            "Stale entity table",
            "a gap until the next full snapshot",
        ),
        MetricDesc::micros(
            "input_to_snapshot_us",
            "Input to snapshot",
            "an Input sent until the first snapshot whose last_input names it (implementation dialect)",
        ),
        MetricDesc::micros(
            "prediction_error",
            "Prediction error",
            "units between the bot's predicted position and the server's for the Input last_input names (implementation dialect)",
        )
        .unit("units", 1000),
        MetricDesc::count(
            "shared_sequence_detected",
            "Shared sequence counter",
            "bots whose server numbers datagrams with one counter for all clients: loss read from snapshot ticks instead",
        )
        .display(Display::Card),
        MetricDesc::count(
            "dialect_hint.implementation",
            "Snapshots fit the implementation dialect",
            "snapshots dropped as malformed that fit the implementation dialect exactly: set dialect: implementation",
        )
        .display(Display::Card),
        MetricDesc::count(
            "dialect_hint.spec",
            "Snapshots fit the spec dialect",
            "snapshots dropped as malformed that fit the spec dialect exactly: set dialect: spec",
        )
        .display(Display::Card),
        MetricDesc::histogram(
            "snapshot_bytes",
            "Snapshot size",
            "datagram bytes of each snapshot applied (no size cap)",
            "bytes",
        ),
        MetricDesc::count(
            "pings_sent",
            "Pings sent",
            "RTT probes sent; rtt_us.count is the ones answered",
        ),
    ],
};
