//! Decode-only reading of DarkAges datagrams in the spec dialects (`spec`,
//! `struct_as_printed`) for `tickswarm inspect` (see `crate::protocol::inspect`): the codec
//! decides, and where it refuses a datagram the layout is walked again to find the byte
//! where it stops reading as this dialect.
//!
//! What each packet is for the behaviour figures (docs/protocols/darkages.md):
//! - INPUT is the player's input; its `sequence` grows by one per input (the bot's and the
//!   reference server's replay window), given as `seq`. Its keys are the inverse of the
//!   bot's `keys_to_flags` ([`keys_of_flags`]); yaw and pitch are not keys.
//! - SNAPSHOT is world state; its `server_tick` steps by the snapshot tick step (3 at 60 Hz
//!   ticks and 20 Hz snapshots), not by one, so it is not given as `seq`.
//! - PING and PONG pair by their `timestamp`, echoed unchanged. HEARTBEAT is echoed too, but
//!   it keeps the session alive rather than measure it: [`Role::Other`].
//! - The dialects differ in INPUT's length: 26 bytes in `spec` (`last_received_tick`
//!   appended), 22 in `struct_as_printed`. Without that acknowledgement a server has no
//!   baseline, so `struct_as_printed` reads full snapshots only: a delta fails at its
//!   `baseline_tick`.
//! - A packet type must go the way the document's table says (DISCONNECT, HEARTBEAT and
//!   DEBUG_TEXT either way).

use super::{decode, field, len, record_len, ty, DecodeError, Dialect, Packet};
use crate::protocol::prelude::inspect::{exact_len, Direction, Inspect, Mismatch, Role, Seen};
use crate::protocol::prelude::Keys;

/// The packet types, in words, for a wrong type byte.
const TYPES: &str = "a packet type 0x10-0x14, 0x20-0x23, 0x30-0x32 or 0xF0-0xF2";

/// One flow read as `spec` or `struct_as_printed`.
pub struct DarkAgesInspect {
    dialect: Dialect,
}

impl DarkAgesInspect {
    /// A reader of `dialect` (`Spec` or `StructAsPrinted`; the implementation dialect has its
    /// own reader and is read as `Spec` here).
    pub fn new(dialect: Dialect) -> Self {
        Self { dialect }
    }

    /// INPUT's whole length in this dialect.
    fn input_len(&self) -> usize {
        match self.dialect {
            Dialect::StructAsPrinted => len::INPUT_PRINTED,
            Dialect::Spec | Dialect::Implementation => len::INPUT,
        }
    }
}

/// The keys an INPUT's (or the implementation dialect's) movement flags hold: the inverse of
/// the bot's `keys_to_flags`. Forward is up, backward down, left and right themselves,
/// attack is shoot; jump, block, sprint and interact name no key and are left out. Forward
/// and backward together (which the bot never sends) read as up and down, which a replay
/// sends as neither, as the bot cancels them.
pub fn keys_of_flags(flags: u16) -> Keys {
    const MAP: [(u16, u8); 5] = [
        (1 << 0, Keys::UP),
        (1 << 1, Keys::DOWN),
        (1 << 2, Keys::LEFT),
        (1 << 3, Keys::RIGHT),
        (1 << 5, Keys::SHOOT),
    ];
    Keys(
        MAP.iter()
            .filter(|(f, _)| flags & f != 0)
            .fold(0, |k, (_, key)| k | key),
    )
}

/// The packet's name as docs/protocols/darkages.md writes it, and which ways it may go
/// (to the server, to the client).
fn info(t: u8) -> Option<(&'static str, bool, bool)> {
    Some(match t {
        ty::CONNECT => ("CONNECT", true, false),
        ty::CONNECT_ACK => ("CONNECT_ACK", false, true),
        ty::CONNECTED => ("CONNECTED", true, false),
        ty::DISCONNECT => ("DISCONNECT", true, true),
        ty::HEARTBEAT => ("HEARTBEAT", true, true),
        ty::INPUT => ("INPUT", true, false),
        ty::SNAPSHOT => ("SNAPSHOT", false, true),
        ty::EVENT => ("EVENT", false, true),
        ty::COALESCED_EVENTS => ("COALESCED_EVENTS", false, true),
        ty::ZONE_HANDOFF => ("ZONE_HANDOFF", false, true),
        ty::ZONE_ENTER => ("ZONE_ENTER", false, true),
        ty::ZONE_LEAVE => ("ZONE_LEAVE", false, true),
        ty::DEBUG_TEXT => ("DEBUG_TEXT", true, true),
        ty::PING => ("PING", true, false),
        ty::PONG => ("PONG", false, true),
        _ => return None,
    })
}

impl Inspect for DarkAgesInspect {
    fn message(&mut self, dir: Direction, data: &[u8]) -> Result<Seen, Mismatch> {
        let t = *data.first().ok_or_else(|| Mismatch::at(0, "a type byte"))?;
        let Some((name, to_server, to_client)) = info(t) else {
            return Err(Mismatch::at(0, format!("{TYPES}, not {t:#04x}")));
        };
        let allowed = match dir {
            Direction::ToServer => to_server,
            Direction::ToClient => to_client,
        };
        if !allowed {
            let want = match dir {
                Direction::ToServer => {
                    "a client → server type (CONNECT 0x10, CONNECTED 0x12, \
                                        DISCONNECT 0x13, HEARTBEAT 0x14, INPUT 0x20, \
                                        DEBUG_TEXT 0xF0, PING 0xF1)"
                }
                Direction::ToClient => {
                    "a server → client type (0x11, 0x13, 0x14, 0x21-0x23, \
                                        0x30-0x32, 0xF0, 0xF2)"
                }
            };
            return Err(Mismatch::at(0, format!("{want}, not {name}")));
        }
        if t == ty::INPUT {
            self.input_length(data)?;
        }
        let packet = decode(data).map_err(|e| mismatch(data, t, name, e))?;
        Ok(match packet {
            Packet::Input(i) => Seen::new(name, Role::Input)
                .seq(u64::from(i.sequence))
                .keys(keys_of_flags(u16::from(i.flags))),
            Packet::Snapshot(s) => {
                if self.dialect == Dialect::StructAsPrinted && !s.is_full() {
                    return Err(Mismatch::at(
                        5,
                        format!(
                            "baseline_tick equal to server_tick {} (a full snapshot): a 22-byte \
                             INPUT acknowledges no tick, so this dialect gets no deltas (a delta \
                             is the spec dialect's)",
                            s.server_tick
                        ),
                    ));
                }
                Seen::new(name, Role::Snapshot)
            }
            Packet::Ping { timestamp } => Seen::new(name, Role::Ping).ping(u64::from(timestamp)),
            Packet::Pong { timestamp } => Seen::new(name, Role::Pong).ping(u64::from(timestamp)),
            _ => Seen::new(name, Role::Other),
        })
    }
}

impl DarkAgesInspect {
    /// INPUT has this dialect's length, or the mismatch says where and names the other one.
    fn input_length(&self, data: &[u8]) -> Result<(), Mismatch> {
        let want = self.input_len();
        exact_len(data, want, "INPUT").map_err(|mut m| {
            let other = match (self.dialect, data.len()) {
                (Dialect::StructAsPrinted, len::INPUT) => {
                    " (26 bytes is the spec dialect's INPUT, last_received_tick appended)"
                }
                (Dialect::Spec | Dialect::Implementation, len::INPUT_PRINTED) => {
                    " (22 bytes is the INPUT as printed: dialect struct_as_printed)"
                }
                _ => "",
            };
            m.expected.push_str(other);
            m
        })
    }
}

/// Where a datagram the codec refused stops reading, from its layout.
fn mismatch(data: &[u8], t: u8, name: &str, e: DecodeError) -> Mismatch {
    let fixed = match t {
        ty::CONNECT => Some(len::CONNECT),
        ty::CONNECT_ACK => Some(len::CONNECT_ACK),
        ty::CONNECTED => Some(len::CONNECTED),
        ty::HEARTBEAT | ty::PING | ty::PONG => Some(len::PING),
        ty::ZONE_HANDOFF => Some(len::ZONE_HANDOFF),
        ty::ZONE_ENTER | ty::ZONE_LEAVE => Some(len::ZONE_ENTER),
        _ => None,
    };
    let found = match (fixed, t) {
        (Some(n), _) => exact_len(data, n, name).err(),
        (None, ty::DISCONNECT) if data.len() < 2 => {
            Some(Mismatch::at(data.len(), "a DISCONNECT reason u8"))
        }
        (None, ty::DISCONNECT) => text(data, 2, name),
        (None, ty::DEBUG_TEXT) => text(data, 1, name),
        (None, ty::SNAPSHOT) => snapshot(data),
        (None, ty::EVENT) => event(data),
        (None, ty::COALESCED_EVENTS) => coalesced(data),
        _ => None,
    };
    found.unwrap_or_else(|| Mismatch::at(1, format!("a {name} body ({})", e.reason)))
}

/// A `u16`-length-prefixed UTF-8 text at `at` running to the end.
fn text(data: &[u8], at: usize, name: &str) -> Option<Mismatch> {
    let len = data.len();
    let Some(b) = data.get(at..at + 2) else {
        return Some(Mismatch::at(
            len,
            format!("a {name} text's length u16 at {at}"),
        ));
    };
    let n = usize::from(u16::from_le_bytes([b[0], b[1]]));
    let end = at + 2 + n;
    if end > len {
        return Some(Mismatch::at(
            len,
            format!("a {n}-byte {name} text (length u16 at {at}; it ends at {len})"),
        ));
    }
    if end < len {
        return Some(Mismatch::at(
            end,
            format!(
                "the end of the {name} after its {n}-byte text ({} bytes more)",
                len - end
            ),
        ));
    }
    let body = data.get(at + 2..end)?;
    std::str::from_utf8(body)
        .err()
        .map(|u| Mismatch::at(at + 2 + u.valid_up_to(), "UTF-8 text"))
}

/// Where a SNAPSHOT stops reading: its header, each record's present fields, the removed ids.
fn snapshot(data: &[u8]) -> Option<Mismatch> {
    let len = data.len();
    let u16_at = |i: usize| {
        data.get(i..i + 2)
            .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))
    };
    let u32_at = |i: usize| {
        data.get(i..i + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let (Some(tick), Some(base), Some(count)) = (u32_at(1), u32_at(5), u16_at(9)) else {
        return Some(Mismatch::at(
            len,
            format!(
                "server_tick u32, baseline_tick u32 and entity_count u16 ({} bytes)",
                len::FULL_HEADER
            ),
        ));
    };
    let (removed, mut pos) = if tick == base {
        (0, len::FULL_HEADER)
    } else {
        let Some(removed) = u16_at(11) else {
            return Some(Mismatch::at(
                len,
                format!(
                    "a delta's changed_count u16 and removed_count u16 ({} bytes; baseline_tick \
                     differs from server_tick)",
                    len::DELTA_HEADER
                ),
            ));
        };
        (removed, len::DELTA_HEADER)
    };
    for i in 0..count {
        let Some(mask) = u16_at(pos + 5) else {
            return Some(Mismatch::at(
                len,
                format!(
                    "record {i} of {count}: entity_id u32, entity_type u8, present_mask u16 \
                     (it ends at {len})"
                ),
            ));
        };
        // `mask` came from a u16.
        let mask = mask as u16;
        if mask & !field::ALL != 0 {
            return Some(Mismatch::at(
                pos + 6,
                format!(
                    "record {i}'s present_mask with bits 0-12 only (13-15 name no field), not \
                     {mask:#06x}"
                ),
            ));
        }
        let rlen = record_len(mask);
        if pos + rlen > len {
            return Some(Mismatch::at(
                len,
                format!(
                    "record {i}'s {rlen} bytes for present_mask {mask:#06x} (it ends at {len})"
                ),
            ));
        }
        pos += rlen;
    }
    let end = pos + 4 * removed;
    if end > len {
        return Some(Mismatch::at(
            len,
            format!("{removed} removed entity ids (removed_count u16 at 11; it ends at {len})"),
        ));
    }
    (end < len).then(|| {
        Mismatch::at(
            end,
            format!(
                "the end of the SNAPSHOT after its {count} records{} ({} bytes more)",
                if tick == base { "" } else { " and removed ids" },
                len - end
            ),
        )
    })
}

/// An event type's payload name and length, when the document gives one.
fn payload_len(event_type: u8) -> Option<(&'static str, usize)> {
    use super::event;
    Some(match event_type {
        event::DAMAGE => ("DAMAGE", len::DAMAGE_PAYLOAD),
        event::DEATH => ("DEATH", len::DEATH_PAYLOAD),
        event::SPAWN => ("SPAWN", len::SPAWN_PAYLOAD),
        event::DESPAWN => ("DESPAWN", len::SPAWN_PAYLOAD),
        event::ZONE_HANDOFF => ("ZONE_HANDOFF", len::ZONE_HANDOFF_PAYLOAD),
        _ => return None,
    })
}

/// A payload of `n` bytes of `event_type` starting at `at`, in a datagram of `len` bytes
/// (which holds it whole): its length is the event's, or where it differs.
fn payload(event_type: u8, at: usize, n: usize, len: usize) -> Option<Mismatch> {
    let (name, want) = payload_len(event_type)?;
    (n != want).then(|| {
        if n < want {
            Mismatch::at(
                at + n,
                format!("a {name} payload of {want} bytes (it ends at {})", at + n),
            )
        } else {
            Mismatch::at(
                at + want,
                format!(
                    "the end of a {want}-byte {name} payload ({} bytes more; the datagram is \
                     {len})",
                    n - want
                ),
            )
        }
    })
}

/// Where an EVENT stops reading.
fn event(data: &[u8]) -> Option<Mismatch> {
    let len = data.len();
    let h = len::EVENT_HEADER;
    let (Some(&et), Some(b)) = (data.get(9), data.get(10..12)) else {
        return Some(Mismatch::at(
            len,
            format!(
                "a {h}-byte EVENT header (event_id u32, timestamp u32, event_type u8, \
                 payload_length u16)"
            ),
        ));
    };
    let n = usize::from(u16::from_le_bytes([b[0], b[1]]));
    if h + n > len {
        return Some(Mismatch::at(
            len,
            format!(
                "payload_length {n} (u16 at 10): an EVENT of {} bytes (it ends at {len})",
                h + n
            ),
        ));
    }
    if h + n < len {
        return Some(Mismatch::at(
            h + n,
            format!(
                "the end of the EVENT after its {n}-byte payload (payload_length u16 at 10; {} \
                 bytes more)",
                len - h - n
            ),
        ));
    }
    payload(et, h, n, len)
}

/// Where COALESCED_EVENTS stops reading.
fn coalesced(data: &[u8]) -> Option<Mismatch> {
    let len = data.len();
    let Some(&count) = data.get(1) else {
        return Some(Mismatch::at(len, "event_count u8"));
    };
    let mut pos = 2;
    for i in 0..count {
        let (Some(&et), Some(b)) = (data.get(pos), data.get(pos + 1..pos + 3)) else {
            return Some(Mismatch::at(
                len,
                format!(
                    "event {i} of {count} (event_count u8 at 1): event_type u8, \
                     payload_length u16 (it ends at {len})"
                ),
            ));
        };
        let n = usize::from(u16::from_le_bytes([b[0], b[1]]));
        if pos + 3 + n > len {
            return Some(Mismatch::at(
                len,
                format!(
                    "event {i}'s {n}-byte payload (payload_length u16 at {}; it ends at {len})",
                    pos + 1
                ),
            ));
        }
        if let Some(m) = payload(et, pos + 3, n, len) {
            return Some(m);
        }
        pos += 3 + n;
    }
    (pos < len).then(|| {
        Mismatch::at(
            pos,
            format!(
                "the end of COALESCED_EVENTS after its {count} events (event_count u8 at 1; {} \
                 bytes more)",
                len - pos
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// INPUT as darkages.md lays it out, by hand, little-endian: type 0x20, sequence 7,
    /// timestamp 1000 (E8 03), flags forward | left | attack (0x25), yaw 0.0, pitch 0.0,
    /// target_entity 0, then last_received_tick 30 (the spec dialect's 4 more bytes).
    const INPUT: [u8; 26] = [
        0x20, 7, 0, 0, 0, 0xE8, 0x03, 0, 0, 0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 30, 0, 0, 0,
    ];

    #[test]
    fn an_input_reads_with_its_sequence_and_keys_in_its_dialect() {
        let want = Some(Keys(Keys::UP | Keys::LEFT | Keys::SHOOT));
        let s = DarkAgesInspect::new(Dialect::Spec)
            .message(Direction::ToServer, &INPUT)
            .expect("reads");
        assert_eq!(
            (s.kind, s.role, s.seq, s.keys),
            ("INPUT", Role::Input, Some(7), want)
        );
        let s = DarkAgesInspect::new(Dialect::StructAsPrinted)
            .message(Direction::ToServer, &INPUT[..22])
            .expect("reads");
        assert_eq!((s.seq, s.keys), (Some(7), want));
    }

    #[test]
    fn the_other_dialects_input_fails_at_byte_22_and_names_it() {
        let e = DarkAgesInspect::new(Dialect::StructAsPrinted)
            .message(Direction::ToServer, &INPUT)
            .unwrap_err();
        assert_eq!(e.offset, 22, "{e}");
        assert!(e.expected.contains("spec dialect"), "{e}");
        let e = DarkAgesInspect::new(Dialect::Spec)
            .message(Direction::ToServer, &INPUT[..22])
            .unwrap_err();
        assert_eq!(e.offset, 22, "{e}");
        assert!(e.expected.contains("struct_as_printed"), "{e}");
        // Truncated mid-field: where it ends.
        let e = DarkAgesInspect::new(Dialect::Spec)
            .message(Direction::ToServer, &INPUT[..13])
            .unwrap_err();
        assert_eq!(e.offset, 13, "{e}");
    }

    #[test]
    fn a_ping_and_its_pong_share_the_timestamp() {
        let mut i = DarkAgesInspect::new(Dialect::Spec);
        let ping = i
            .message(Direction::ToServer, &[0xF1, 0x78, 0x56, 0x34, 0x12])
            .expect("ping");
        let pong = i
            .message(Direction::ToClient, &[0xF2, 0x78, 0x56, 0x34, 0x12])
            .expect("pong");
        assert_eq!(
            (ping.kind, ping.role, ping.ping),
            ("PING", Role::Ping, Some(0x1234_5678))
        );
        assert_eq!(
            (pong.kind, pong.role, pong.ping),
            ("PONG", Role::Pong, Some(0x1234_5678))
        );
        // A PONG from the client goes the wrong way.
        let e = i
            .message(Direction::ToServer, &[0xF2, 0, 0, 0, 0])
            .unwrap_err();
        assert_eq!(e.offset, 0, "{e}");
        let e = i.message(Direction::ToServer, &[0xF1, 0, 0]).unwrap_err();
        assert_eq!(e.offset, 3, "{e}");
    }

    /// A full snapshot by hand: tick 30 twice, one record of entity 5, type 0 (player),
    /// present_mask 0x0007 (position x, y, z), x 64 (1 m), y 0, z -64.
    fn full() -> Vec<u8> {
        let mut d = vec![0x21, 30, 0, 0, 0, 30, 0, 0, 0, 1, 0];
        d.extend_from_slice(&[5, 0, 0, 0, 0, 0x07, 0x00, 64, 0, 0, 0, 0xC0, 0xFF]);
        d
    }

    #[test]
    fn a_snapshot_reads_as_snapshot_and_a_delta_only_in_the_spec_dialect() {
        let s = DarkAgesInspect::new(Dialect::StructAsPrinted)
            .message(Direction::ToClient, &full())
            .expect("full");
        assert_eq!((s.kind, s.role, s.seq), ("SNAPSHOT", Role::Snapshot, None));
        // Delta: tick 33 against 30, one changed record (mask 0x0400 health 90), one removed
        // id 9.
        let mut d = vec![0x21, 33, 0, 0, 0, 30, 0, 0, 0, 1, 0, 1, 0];
        d.extend_from_slice(&[5, 0, 0, 0, 0, 0x00, 0x04, 90, 9, 0, 0, 0]);
        let s = DarkAgesInspect::new(Dialect::Spec)
            .message(Direction::ToClient, &d)
            .expect("delta");
        assert_eq!(s.role, Role::Snapshot);
        let e = DarkAgesInspect::new(Dialect::StructAsPrinted)
            .message(Direction::ToClient, &d)
            .unwrap_err();
        assert_eq!(e.offset, 5, "{e}");
        assert!(e.expected.contains("spec dialect"), "{e}");
    }

    #[test]
    fn a_broken_snapshot_fails_at_the_byte_that_breaks_it() {
        let mut i = DarkAgesInspect::new(Dialect::Spec);
        let d = full();
        // Cut inside the record's fields: where it ends.
        let e = i.message(Direction::ToClient, &d[..20]).unwrap_err();
        assert_eq!(e.offset, 20, "{e}");
        // Mask bit 15: the mask's high byte, at 11 + 6.
        let mut bad = d.clone();
        bad[17] = 0x80;
        let e = i.message(Direction::ToClient, &bad).unwrap_err();
        assert_eq!(e.offset, 17, "{e}");
        // A byte too many: after the last record.
        let mut long = d.clone();
        long.push(0);
        let e = i.message(Direction::ToClient, &long).unwrap_err();
        assert_eq!(e.offset, d.len(), "{e}");
    }

    #[test]
    fn an_implementation_input_fails_at_its_type_byte() {
        // The implementation dialect's 19-byte INPUT: type 1.
        let mut d = [0u8; 19];
        d[0] = 1;
        let e = DarkAgesInspect::new(Dialect::Spec)
            .message(Direction::ToServer, &d)
            .unwrap_err();
        assert_eq!(e.offset, 0, "{e}");
        assert!(e.expected.contains("0x10-0x14"), "{e}");
    }

    #[test]
    fn an_event_with_a_short_damage_payload_fails_where_it_ends() {
        // EVENT id 1, timestamp 2, DAMAGE (1) with a 13-byte payload (a DEATH's length).
        let mut d = vec![0x22, 1, 0, 0, 0, 2, 0, 0, 0, 1, 13, 0];
        d.extend_from_slice(&[0; 13]);
        let e = DarkAgesInspect::new(Dialect::Spec)
            .message(Direction::ToClient, &d)
            .unwrap_err();
        assert_eq!(e.offset, 25, "{e}");
        assert!(e.expected.contains("DAMAGE payload of 30"), "{e}");
    }
}
