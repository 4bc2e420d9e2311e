//! What zergcity measures and how: its entry in `tickswarm protocols` and the report's
//! protocol section, one row per metric it records.

use super::DEFAULT_PORT;
use crate::protocol::prelude::{Display, MetricDesc, ProtocolInfo};

pub const INFO: ProtocolInfo = ProtocolInfo {
    name: "zergcity",
    spec: "docs/protocols/zergcity.md",
    transport: "ENet 1.3; spec: channel 0 reliable ordered, 1 reliable for full snapshots, 2 \
                unreliable; implementation: channel 0 reliable ordered, 1 unsequenced; benchmark: 0 \
                acks (reliable), 1 FullSnapshot (reliable), 2 DeltaSnapshot (unsequenced)",
    default_port: DEFAULT_PORT,
    rtt: "spec: Ping/Pong on the unreliable channel, paired by the echoed microsecond \
          timestamp (several in flight); implementation: Heartbeat and the HeartbeatResponse \
          that echoes its timestamp (several in flight; the server's own heartbeats, echoing \
          0, are not paired); benchmark: none of its own (nothing answers the bot), ENet's \
          acknowledgements of the bot's reliable acks; all: ENet's own smoothed RTT",
    downstream_loss: "spec: gaps in the server's per-connection header sequence (every \
                      message it sends; only unreliable ones can be lost), from the first \
                      ServerHello of each session; implementation: not measurable (the server \
                      sends everything reliably and StateUpdates only for ticks with changes); benchmark: \
                      ticks missing between the snapshots that arrived (the header's \
                      sequence is the server tick, one message a tick per peer)",
    upstream_loss: "spec: InputMessages without an InputAck within input_ack_timeout_ms (the \
                    reference server acks every input, rejected ones with their result); \
                    implementation: Heartbeats (sent unreliably) without their echo within \
                    heartbeat_timeout_ms; benchmark: not measurable (its acks are \
                    reliable and nothing acknowledges them)",
    dialects: &[
        ("spec", "docs/protocols/zergcity.md (default)"),
        (
            "implementation",
            "the real game server of Blubagoo/sims_3000 (`sims_3000 --server`): 5-byte \
             envelope, Join/JoinAccept (player id 1-4, session token), Heartbeats both ways, \
             30-byte Input, StateUpdate (LZ4 above 1024 bytes), Reconnect with the token, 4 \
             ENet peers (a fifth connect gets no reply)",
        ),
        (
            "benchmark",
            "the POC-2 benchmark server of Blubagoo/sims_3000 (poc/poc2-enet-snapshot-sync): \
             16-byte ZCNT header carrying the server tick, no handshake (streams to any ENet \
             peer), FullSnapshot then LZ4 DeltaSnapshots with an FNV-1a world checksum, \
             bare-header SnapshotAck and ResyncRequest, 8 ENet peers",
        ),
    ],
    metrics: &[
        MetricDesc::micros(
            "input_ack_latency_us",
            "Input to ack",
            "InputMessage to its InputAck",
        ),
        MetricDesc::micros(
            "resync_us",
            "Reconnect resync",
            "session dropped to the FullSnapshot applied on the new one (benchmark dialect: \
             desync seen to the FullSnapshot applied)",
        ),
        MetricDesc::micros(
            "clock_offset_us",
            "Clock offset",
            "bot's tick clock against the server's (Pong tick + RTT/2)",
        )
        .display(Display::Table),
        MetricDesc::histogram(
            "full_snapshot_compressed_bytes",
            "Full snapshot (wire)",
            "FullSnapshot message size on the wire",
            "bytes",
        ),
        MetricDesc::histogram(
            "full_snapshot_uncompressed_bytes",
            "Full snapshot (decompressed)",
            "FullSnapshot payload after LZ4",
            "bytes",
        ),
        MetricDesc::histogram(
            "delta_compressed_bytes",
            "Delta (wire)",
            "DeltaSnapshot message size on the wire",
            "bytes",
        ),
        MetricDesc::histogram(
            "delta_uncompressed_bytes",
            "Delta (decompressed)",
            "DeltaSnapshot body after LZ4 (equal to the wire body when sent plain)",
            "bytes",
        ),
        MetricDesc::histogram(
            "compression_ratio",
            "Compression ratio",
            "uncompressed / compressed bytes of each compressed message",
            "x",
        )
        .unit("x", 100),
        MetricDesc::count(
            "baseline_evicted",
            "Baselines dropped",
            "oldest baselines dropped to keep a bot's worlds within max_state_bytes",
        ),
        MetricDesc::count(
            "baseline_misses",
            "Baseline misses",
            "deltas whose base tick the bot did not hold (not acked)",
        )
        .display(Display::Card)
        .per_bot_minute(),
        MetricDesc::count(
            "deltas_expected",
            "Deltas expected",
            "DeltaSnapshots the target ticks say were sent (one per tick, counted from the \
             first delta after each FullSnapshot)",
        ),
        MetricDesc::count(
            "deltas_missing",
            "Deltas missing",
            "target ticks skipped between consecutive deltas: deltas lost on the way \
             (deltas_missing / deltas_expected is the state-update loss)",
        )
        .display(Display::Card),
        MetricDesc::count(
            "full_snapshot.foreign_layout",
            "Foreign snapshot layout",
            "FullSnapshots whose sections (undefined in the spec) are not in this build's \
             layout: kept as opaque baselines by tick, acknowledged, not a decode error",
        )
        .display(Display::Card),
        MetricDesc::count(
            "delta_applied_opaque",
            "Deltas onto opaque baselines",
            "deltas checked against §5.2 and acknowledged onto an opaque baseline (contents \
             not applied)",
        ),
        MetricDesc::count(
            "full_snapshot_fallbacks",
            "Full-snapshot fallbacks",
            "FullSnapshots after the first of a session (the server found the ack too old)",
        )
        .per_bot_minute(),
        MetricDesc::count(
            "reconnect_attempts",
            "Reconnections",
            "sessions dropped on purpose and reopened with the token",
        ),
        MetricDesc::count(
            "reconnect_slot_restored",
            "Slot restored",
            "reconnections that got their slot back",
        )
        .display(Display::Card),
        MetricDesc::count(
            "reconnect_new_slot",
            "New slot",
            "reconnections accepted in another slot",
        ),
        MetricDesc::count(
            "reconnect_failed",
            "Reconnect failed",
            "reconnections refused or timed out",
        )
        .per_bot_minute(),
        MetricDesc::count(
            "resume_refused",
            "Resume refused",
            "implementation dialect: reconnect-storm victims whose Reconnect the server refused \
             (they joined anew)",
        ),
        MetricDesc::count(
            "input_result.accepted",
            "Inputs accepted",
            "InputAck result 0",
        ),
        MetricDesc::count(
            "input_result.rate_limited",
            "Inputs rate limited",
            "InputAck result 6",
        ),
        MetricDesc::micros(
            "reconnect_us",
            "Reconnection",
            "implementation dialect: session dropped to the JoinAccept of the Reconnect",
        ),
        MetricDesc::histogram(
            "state_update_bytes",
            "StateUpdate (wire)",
            "implementation dialect: StateUpdate payload on the wire",
            "bytes",
        ),
        MetricDesc::count(
            "state_update_compressed",
            "StateUpdates compressed",
            "implementation dialect: StateUpdates sent LZ4-compressed (bodies over 1024 bytes)",
        ),
        MetricDesc::count(
            "heartbeat_lost",
            "Heartbeats lost",
            "implementation dialect: Heartbeats without their echo within heartbeat_timeout_ms",
        )
        .display(Display::Card),
        MetricDesc::count(
            "server_heartbeats",
            "Server heartbeats",
            "implementation dialect: HeartbeatResponses the server sent unasked (about 1 a second)",
        ),
        MetricDesc::count(
            "checksum_mismatch",
            "Desyncs",
            "benchmark dialect: deltas after which the world's checksum differed from the \
             server's (a ResyncRequest follows)",
        )
        .display(Display::Card),
        MetricDesc::count(
            "checksum_unverified",
            "Deltas not checked",
            "benchmark dialect: deltas that changed the world when the hashing they paid for \
             did not yet cover a checksum pass over it (a large world is checked every few \
             deltas, not every one)",
        ),
        MetricDesc::count(
            "delta_while_resyncing",
            "Deltas while resyncing",
            "benchmark dialect: deltas ignored while waiting for the FullSnapshot of a resync",
        ),
        MetricDesc::count(
            "delta_before_full",
            "Deltas before a snapshot",
            "benchmark dialect: deltas that arrived before the first FullSnapshot",
        ),
        MetricDesc::count(
            "dialect_hint.benchmark",
            "Wrong dialect?",
            "messages another dialect rejected that read as the POC-2 benchmark's compressed \
             snapshots",
        )
        .display(Display::Card),
        MetricDesc::count(
            "dialect_hint.implementation",
            "Wrong dialect?",
            "messages the spec or benchmark dialect rejected that read cleanly as dialect: \
             implementation",
        )
        .display(Display::Card),
        MetricDesc::count(
            "dialect_hint.spec",
            "Wrong dialect?",
            "messages the implementation dialect rejected that start with the ZCNT magic and \
             do not fit the benchmark, or that the benchmark dialect rejected and the spec reads",

        )
        .display(Display::Card),
    ],
};
