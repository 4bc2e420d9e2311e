//! What city measures and how: its entry in `tickswarm protocols` and the report's
//! protocol section, one row per metric it records.

use super::DEFAULT_PORT;
use crate::protocol::prelude::{Display, MetricDesc, ProtocolInfo};

pub const INFO: ProtocolInfo = ProtocolInfo {
    name: "city",
    spec: "docs/protocols/city.md",
    transport: "ENet 1.3 (channel 0 reliable ordered, channel 1 unreliable sequenced)",
    default_port: DEFAULT_PORT,
    rtt: "spec dialect: Ping/Pong (empty) on the unreliable channel, one in flight; a Pong \
          after the timeout is counted late (pong_late), never paired with a newer Ping. \
          Implementation dialect (the server answers no Ping): every acknowledged ENet \
          reliable command, timed in µs (rtt_source enet_acks). Both: the ENet ack samples as \
          enet_ack_rtt_us, and ENet's own smoothed estimate (whole ms) as enet_rtt_us",
    downstream_loss: "DeltaState tick gaps on the unreliable channel (one DeltaState per client \
                      per server tick), counted from the first DeltaState received",
    upstream_loss: "PlayerInput ticks without an InputAck within input_ack_timeout_ms (the \
                    reference server acks every accepted input on the reliable channel)",
    dialects: &[
        ("spec", "city.md as written (default)"),
        (
            "implementation",
            "the public server mints-fishtank/city, byte for byte: no content transfer or \
             FullState (play starts at the bot's own EntitySpawn: id, pos, name, is_player), \
             DeltaState tick + count + 46-byte grid records, four-field ChatMessage, one \
             message per ENet packet, header sequence 0, no Ping (it never answers: RTT comes \
             from ENet's acknowledgements), no InputAck (upstream loss not measurable)",
        ),
    ],
    metrics: &[
        MetricDesc::micros(
            "prediction_error",
            "Prediction error",
            "tiles between prediction and server",
        )
        .unit("tiles", 1000),
        MetricDesc::micros(
            "input_ack_latency_us",
            "Input to ack",
            "PlayerInput to its InputAck",
        ),
        MetricDesc::micros(
            "content_time_us",
            "Content download",
            "ServerHello to ContentComplete",
        ),
        MetricDesc::micros(
            "snapshot_jitter_us",
            "Snapshot jitter",
            "arrival against the delivered tick rate",
        ),
        MetricDesc::micros(
            "interp_delay_us",
            "Interpolation delay",
            "buffer needed to stay smooth",
        ),
        MetricDesc::micros(
            "chat_echo_us",
            "Chat echo",
            "ChatMessage to its relayed copy",
        )
        .display(Display::Table),
        MetricDesc::count(
            "dialect_hint.implementation",
            "Wrong dialect?",
            "messages the spec dialect rejected that read cleanly as dialect: implementation",
        )
        .display(Display::Card),
        MetricDesc::count(
            "delta_state_reliable",
            "DeltaStates sent reliably",
            "longer than ENet's fragment, so ENet sent them reliably (large worlds)",
        )
        .display(Display::Card),
        MetricDesc::count(
            "corrections",
            "Corrections",
            "predictions the server's state overruled",
        )
        .display(Display::Card)
        .per_bot_minute(),
        MetricDesc::count(
            "move_refused",
            "Moves refused",
            "implementation dialect: moves the server refused onto a tile the bot cannot know \
             is impassable (once per refusal; not corrections)",
        )
        .display(Display::Card),
        MetricDesc::count(
            "prediction_timing_slips",
            "Prediction timing slips",
            "implementation dialect: an input landed a tick earlier or later than the bot \
             guessed; the server's record explains it (not corrections)",
        ),
    ],
};
