//! What darkages measures and how: its entry in `tickswarm protocols` and the report's
//! protocol section, one row per metric it records.

use super::DEFAULT_PORT;
use crate::protocol::prelude::{Display, MetricDesc, ProtocolInfo};

pub const INFO: ProtocolInfo = ProtocolInfo {
    name: "darkages",
    spec: "docs/protocols/darkages.md",
    transport: "plain UDP, one packet per datagram, or GameNetworkingSockets (option \
                transport: udp | gns)",
    default_port: DEFAULT_PORT,
    rtt: "debug PING/PONG: the u32 timestamp is an opaque token echoed unchanged; the bot keeps \
          its own microsecond send time for each of up to 8 pings in flight",
    downstream_loss: "SNAPSHOT server_tick gaps (wrap-safe) in steps of the snapshot tick \
                      step, learned per zone session as the gcd of the first 8 tick gaps (3 \
                      for 60 Hz ticks and 20 Hz snapshots, 1 for one snapshot per tick); a \
                      configured snapshot_tick_step is kept unless the gaps contradict it; \
                      every client gets a snapshot, full or delta, every snapshot tick",
    upstream_loss: "not measurable: nothing acknowledges inputs (the reference server counts \
                    gaps in INPUT sequence as input_sequence_gaps); implementation dialect: \
                    last_input_seq acknowledges only the newest input applied (input_ack_us), \
                    never the ones before it",
    dialects: &[
        (
            "spec",
            "INPUT carries last_received_tick appended (26 bytes): deltas against \
             acknowledged baselines (default)",
        ),
        (
            "struct_as_printed",
            "INPUT exactly as §2.4 prints it (22 bytes): no ack, the server sends full snapshots",
        ),
        (
            "implementation",
            "the public server 11hideout11/DarkAges over plain UDP, byte for byte: type codes \
             1-7, 9-byte CONNECT and 10-byte reply (refusals unanswered), 19-byte INPUT (at \
             most 60 a second), always-full 20 Hz snapshots of 103-byte float entities with \
             last_input_seq, 19-byte combat events and the zone handoff event, PING/PONG, \
             2-byte DISCONNECT; admits 5 per ip:port and 20 per /24 for ever, so use \
             engine.source_addresses",
        ),
    ],
    metrics: &[
        MetricDesc::micros(
            "handoff_us",
            "Zone handoff",
            "ZONE_HANDOFF received to the new zone's CONNECT_ACK",
        ),
        MetricDesc::histogram(
            "delta_savings_pct",
            "Delta savings",
            "1 - delta bytes / bytes of the full snapshot of the same state",
            "%",
        )
        .display(Display::Card),
        MetricDesc::histogram(
            "snapshot_full_bytes",
            "Full snapshot size",
            "bytes of each full SNAPSHOT datagram",
            "bytes",
        ),
        MetricDesc::histogram(
            "snapshot_delta_bytes",
            "Delta snapshot size",
            "bytes of each delta SNAPSHOT datagram",
            "bytes",
        ),
        MetricDesc::histogram(
            "prediction_error",
            "Prediction error",
            "own entity: server position against the nearest predicted one",
            "m",
        )
        .unit("m", 1000),
        MetricDesc::histogram(
            "entities",
            "Entities in view",
            "entities in each applied snapshot",
            "entities",
        ),
        MetricDesc::count(
            "corrections",
            "Corrections",
            "predictions the server's state overruled",
        )
        .display(Display::Card)
        .per_bot_minute(),
        MetricDesc::count("handoffs", "Handoffs", "zone handoffs completed")
            .display(Display::Card)
            .per_bot_minute(),
        MetricDesc::count(
            "handoff_failed.timeout",
            "Handoff timeouts",
            "no CONNECT_ACK from the new zone in time",
        ),
        MetricDesc::count(
            "handoff_failed.refused",
            "Handoffs refused",
            "the new zone answered with a failure other than an expired token",
        ),
        MetricDesc::count(
            "handoff_failed.expired_token",
            "Handoff tokens expired",
            "the new zone said the token had expired",
        ),
        MetricDesc::count(
            "handoff_refused.not_allowed",
            "Handoffs not followed",
            "ZONE_HANDOFF to an address neither a target's host nor in handoff_allow: not \
             followed, nothing sent there",
        ),
        MetricDesc::count(
            "baseline_evicted",
            "Baselines dropped",
            "oldest baselines dropped to keep a bot's states within max_state_bytes",
        ),
        MetricDesc::count(
            "handoff_failed.bad_address",
            "Handoff bad address",
            "new_server_address is not an IP literal",
        ),
        MetricDesc::count(
            "baseline_miss",
            "Baseline misses",
            "deltas against a baseline the bot does not hold (dropped, full snapshot asked)",
        )
        .per_bot_minute(),
        MetricDesc::count(
            "full_fallback",
            "Full fallbacks",
            "full snapshots that answered a baseline miss",
        ),
        MetricDesc::count("event_damage", "Damage events", "EVENT type 0x01 received"),
        MetricDesc::count("event_death", "Death events", "EVENT type 0x02 received"),
        MetricDesc::count(
            "event_despawn",
            "Despawn events",
            "EVENT type 0x04 received",
        ),
        MetricDesc::count("event_system", "System events", "EVENT type 0x08 received"),
        MetricDesc::micros(
            "input_ack_us",
            "Input to ack",
            "implementation dialect: INPUT sent to the first snapshot whose last_input_seq is it",
        ),
        MetricDesc::count(
            "entities_gone",
            "Entities gone",
            "implementation dialect: entities missing from the snapshot after one that listed \
             them",
        ),
        MetricDesc::count(
            "dialect_hint.implementation",
            "Wrong dialect?",
            "datagrams the spec dialect could not read that read cleanly as dialect: \
             implementation",
        )
        .display(Display::Card),
        MetricDesc::count(
            "dialect_hint.spec",
            "Wrong dialect?",
            "datagrams the implementation dialect could not read that read cleanly as the spec \
             dialect",
        )
        .display(Display::Card),
        MetricDesc::count(
            "play_without_reply",
            "Play without reply",
            "implementation dialect: snapshots came before (or instead of) the CONNECT reply",
        ),
        MetricDesc::count(
            "invalid_input_sent",
            "Invalid inputs sent",
            "inputs broken on purpose (invalid_input_share)",
        ),
        MetricDesc::count(
            "invalid_input_ignored",
            "Invalid input ignored",
            "the server's state never showed the invalid input",
        ),
        MetricDesc::count(
            "invalid_input_applied",
            "Invalid input applied",
            "the server's state diverged after an invalid input",
        ),
        MetricDesc::count(
            "invalid_input_disconnected",
            "Invalid input kicked",
            "the server disconnected the bot while an invalid input was pending",
        ),
    ],
};
