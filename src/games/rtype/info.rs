//! What rtype measures and how: its entry in `tickswarm protocols` and the report's
//! protocol section, one row per metric it records.

use super::DEFAULT_PORT;
use crate::protocol::prelude::{Display, MetricDesc, ProtocolInfo};

pub const INFO: ProtocolInfo = ProtocolInfo {
    name: "rtype",
    spec: "docs/protocols/rtype.md",
    transport: "raw UDP",
    default_port: DEFAULT_PORT,
    rtt: "PING has no payload: one PING in flight, matched to the next PONG (µs clock kept by the bot); \
          a PONG after the timeout is counted late (pong_late), not sampled",
    downstream_loss: "spec dialect: snapshot tick differences (wrap-safe) in units of the server's tick step (learned from the first \
                      snapshots, or snapshot_tick_step): gaps, reordering, duplicates; no other packet \
                      carries a sequence. Implementation dialect: not measurable, no datagram \
                      carries a tick or sequence",
    upstream_loss: "not measurable: no packet carries a client sequence and the server acknowledges no input",
    dialects: &[
        (
            "big",
            "float_order: big — floats in network order, as §7's hex example and the real implementation (default)",
        ),
        (
            "little",
            "float_order: little — floats copied natively (x86), as §2's \"no endian conversion\" reads",
        ),
        (
            "implementation",
            "dialect: implementation — the server the spec documents (MIAOU-TYPE/rtype v1.49.0): \
             a length-framed TCP login (HELLO, WELCOME) before UDP play on the TCP port + 1, \
             its own type codes, bare-header CONNECT/PING/DISCONNECT, a 5-byte INPUT of key \
             flags, snapshots of 20-byte records with no tick (loss not measurable)",
        ),
    ],
    metrics: &[
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
            "extrapolation_us",
            "Extrapolation",
            "each stretch a client rendering render_delay_ms behind ran past its newest snapshot",
        ),
        MetricDesc::count(
            "render_extrapolating_us",
            "Time extrapolating",
            "µs in all that clients rendered past their newest snapshot (of render_us)",
        ),
        MetricDesc::count(
            "render_us",
            "Time rendered",
            "µs from each bot's first snapshot to its last, summed",
        ),
        MetricDesc::micros("rejoin_us", "Rejoin time", "GAMEOVER to the next ACCEPT")
            .display(Display::Table),
        MetricDesc::histogram(
            "snapshot_age_ticks",
            "Snapshot age",
            "ticks behind the newest seen",
            "ticks",
        ),
        MetricDesc::histogram(
            "entities",
            "Entities",
            "entities in a bot's table per snapshot",
            "entities",
        ),
        MetricDesc::micros(
            "login_us",
            "Login",
            "implementation dialect: TCP up to WELCOME",
        ),
        MetricDesc::count(
            "dialect_hint.implementation",
            "Datagrams fit the implementation dialect",
            "datagrams the spec dialect could not use that read cleanly as the real server's: \
             set dialect: implementation",
        )
        .display(Display::Card),
        MetricDesc::count(
            "dialect_hint.spec",
            "Datagrams fit the spec dialect",
            "datagrams the implementation dialect could not use that read cleanly as the \
             spec's: set dialect: spec",
        )
        .display(Display::Card),
        MetricDesc::histogram(
            "snapshot_tick_step",
            "Snapshot tick step",
            "server ticks between snapshots, as learned",
            "ticks",
        ),
    ],
};
