//! Decode-only reading of spec-dialect ZergCity messages for `tickswarm inspect` (see
//! `crate::protocol::inspect`): the codec decides, and its reasons are turned into the byte
//! where a message stops reading as this dialect. One message per ENet packet.
//!
//! - **seq**: the header's `sequence` counts every message one side sent on the connection
//!   (all channels, from 0), so every message carries it as its seq: a gap in a direction's
//!   sequence is a message lost that way (only channel 2 can lose one).
//! - **Ping / Pong** pair by `timestamp`, which the Pong echoes.
//! - **InputMessage** (and the opaque game actions 0x30-0x34) are [`Role::Input`] without
//!   keys: ZergCity's inputs are build actions (place a building, zone, demolish, ...), not
//!   held keys, so they do not map onto the scenario's key patterns.
//! - **FullSnapshot** and **DeltaSnapshot** are [`Role::Snapshot`].

use super::{
    decode, DecodeError, Decompressor, Header, Message, MsgType, ERROR_TEXT_LEN, HEADER_LEN,
    INPUT_CANCEL_ACTION, INPUT_DEMOLISH, INPUT_DESIGNATE_ZONE, INPUT_NONE, INPUT_PLACE_BUILDING,
    INPUT_PLACE_CONDUIT, INPUT_PLACE_PIPE, INPUT_PLACE_ROAD, INPUT_PURCHASE_TILE,
    INPUT_SET_TRIBUTE_RATE, MAGIC, MAX_CHAT_LEN, MAX_PAYLOAD, NAME_LEN,
};
use crate::protocol::prelude::inspect::{exact_len, Direction, Inspect, Mismatch, Role, Seen};

/// One flow read as the spec dialect.
pub struct SpecInspect {
    dec: Decompressor,
}

impl SpecInspect {
    /// A reader that decompresses bodies of at most `max_decompressed_bytes` (the bot's
    /// option; at most 16 MiB), into one buffer reused across the flow's messages.
    pub fn new(max_decompressed_bytes: usize) -> Self {
        Self {
            dec: Decompressor::new(max_decompressed_bytes),
        }
    }
}

impl Inspect for SpecInspect {
    fn message(&mut self, _dir: Direction, data: &[u8]) -> Result<Seen, Mismatch> {
        let d = decode(data, &mut self.dec).map_err(|e| mismatch(data, e))?;
        let Some(msg) = d.message else {
            return Err(Mismatch::at(
                5,
                format!(
                    "a message type (0x00-0x04, 0x10-0x12, 0x20-0x21, 0x30-0x34, 0x40-0x41, \
                     0xF0, 0xFE), not {:#04x}",
                    d.header.msg_type
                ),
            ));
        };
        let ty = msg.msg_type();
        let name = kind(ty);
        let seen = match msg {
            Message::Ping { timestamp, .. } => Seen::new(name, Role::Ping).ping(timestamp),
            Message::Pong { timestamp, .. } => Seen::new(name, Role::Pong).ping(timestamp),
            Message::FullSnapshot { .. } | Message::DeltaSnapshot(_) => {
                Seen::new(name, Role::Snapshot)
            }
            Message::InputMessage { .. } => Seen::new(name, Role::Input),
            Message::Opaque { msg_type, .. } if (0x30..=0x34).contains(&(msg_type as u8)) => {
                Seen::new(name, Role::Input)
            }
            _ => Seen::new(name, Role::Other),
        };
        Ok(seen.seq(u64::from(d.header.sequence)))
    }
}

/// The type's name in zergcity.md.
fn kind(ty: MsgType) -> &'static str {
    match ty {
        MsgType::ClientHello => "ClientHello",
        MsgType::ServerHello => "ServerHello",
        MsgType::Disconnect => "Disconnect",
        MsgType::Ping => "Ping",
        MsgType::Pong => "Pong",
        MsgType::FullSnapshot => "FullSnapshot",
        MsgType::DeltaSnapshot => "DeltaSnapshot",
        MsgType::SnapshotAck => "SnapshotAck",
        MsgType::InputMessage => "InputMessage",
        MsgType::InputAck => "InputAck",
        MsgType::PurchaseTile => "PurchaseTile",
        MsgType::PlaceBuilding => "PlaceBuilding",
        MsgType::DesignateZone => "DesignateZone",
        MsgType::Demolish => "Demolish",
        MsgType::SetTributeRate => "SetTributeRate",
        MsgType::ChatMessage => "ChatMessage",
        MsgType::ChatBroadcast => "ChatBroadcast",
        MsgType::ServerCommand => "ServerCommand",
        MsgType::ErrorMessage => "ErrorMessage",
    }
}

/// The first byte of the magic that is not `ZCNT` (shared with the benchmark dialect, whose
/// header starts the same way).
pub(crate) fn magic_mismatch(data: &[u8]) -> Mismatch {
    let at = (0..4).find(|&i| data.get(i) != MAGIC.get(i)).unwrap_or(0);
    Mismatch::at(at, "magic ZCNT (bytes 5A 43 4E 54)")
}

/// A header cut short (shared with the benchmark dialect).
pub(crate) fn short_header(data: &[u8]) -> Mismatch {
    Mismatch::at(
        data.len(),
        format!(
            "a {HEADER_LEN}-byte header (magic ZCNT, version, type, flags, reserved, \
             payload_length u32, sequence u32)"
        ),
    )
}

/// `payload_length` (at byte 8) against the message's bytes (shared with the benchmark).
pub(crate) fn length_mismatch(data: &[u8]) -> Mismatch {
    let len = data
        .get(8..12)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .unwrap_or(0);
    let have = data.len().saturating_sub(HEADER_LEN);
    if len > have {
        Mismatch::at(
            data.len(),
            format!(
                "a payload of {len} bytes, as payload_length says (the message ends {have} \
                 bytes after the header)"
            ),
        )
    } else {
        Mismatch::at(
            HEADER_LEN + len,
            format!(
                "the end of the message after payload_length's {len} bytes ({} more)",
                have - len
            ),
        )
    }
}

/// Where `data` fails, from the codec's reason.
fn mismatch(data: &[u8], e: DecodeError) -> Mismatch {
    match (e.message, e.reason) {
        ("header", "truncated") if data.len() < HEADER_LEN => return short_header(data),
        ("header", "bad_magic") => return magic_mismatch(data),
        ("header", "bad_version") => return Mismatch::at(4, "protocol_version 1"),
        ("header", "oversized") => {
            return Mismatch::at(
                8,
                format!("a payload_length of at most {MAX_PAYLOAD} bytes"),
            )
        }
        ("header", _) => return length_mismatch(data),
        _ => {}
    }
    let (Ok(h), Some(ty)) = (
        Header::parse(data),
        data.get(5).and_then(|&t| MsgType::from_u8(t)),
    ) else {
        return Mismatch::at(0, format!("a {} message ({})", e.message, e.reason));
    };
    let name = kind(ty);
    let full = ty == MsgType::FullSnapshot;
    // Where the LZ4 block starts: after uncompressed_size (and FullSnapshot's tick).
    let block = if full {
        HEADER_LEN + 12
    } else {
        HEADER_LEN + 4
    };
    match e.reason {
        "bad_size" => match ty.fixed_len() {
            Some(n) => exact_len(data, n, &format!("{name} message")).err(),
            None => None,
        }
        .unwrap_or_else(|| Mismatch::at(HEADER_LEN, format!("a {name} body"))),
        "unexpected_compression" => Mismatch::at(
            6,
            format!("flags without 0x01 compressed (a {name} is never compressed)"),
        ),
        "not_compressed" => {
            Mismatch::at(6, "flags with 0x01 compressed (a FullSnapshot always is)")
        }
        "decompressed_too_large" => Mismatch::at(
            HEADER_LEN,
            "an uncompressed_size within the reader's decompression limit",
        ),
        "impossible_size" => Mismatch::at(
            HEADER_LEN,
            format!(
                "an uncompressed_size an LZ4 block of {} bytes can produce (at most 255 per \
                 byte)",
                data.len().saturating_sub(block)
            ),
        ),
        "size_mismatch" => Mismatch::at(
            HEADER_LEN,
            "an uncompressed_size equal to what the LZ4 block expands to",
        ),
        "lz4_corrupt" => Mismatch::at(block, "an LZ4 block"),
        "truncated" if full || h.compressed() => Mismatch::at(
            data.len(),
            format!(
                "uncompressed_size u32{} then an LZ4 block",
                if full { " and snapshot_tick u64" } else { "" }
            ),
        ),
        reason if h.compressed() => Mismatch::at(
            block,
            format!("a {name} body (decompressed, it fails: {reason})"),
        ),
        "text_too_long" => Mismatch::at(
            if ty == MsgType::ChatBroadcast { 17 } else { 16 },
            format!("a text_len of at most {MAX_CHAT_LEN}"),
        ),
        "bad_utf8" => utf8_mismatch(data, ty),
        _ if ty == MsgType::InputMessage => input_mismatch(data),
        "trailing_bytes" | "truncated"
            if matches!(ty, MsgType::ChatMessage | MsgType::ChatBroadcast) =>
        {
            let at = if ty == MsgType::ChatBroadcast { 17 } else { 16 };
            let n = data
                .get(at..at + 2)
                .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))
                .unwrap_or(0);
            exact_len(data, at + 2 + n, &format!("{name} of text_len {n}"))
                .err()
                .unwrap_or_else(|| Mismatch::at(at, "text_len agreeing with the text"))
        }
        reason => Mismatch::at(data.len(), format!("the rest of a {name} ({reason})")),
    }
}

/// The first byte of a text field that is not UTF-8.
fn utf8_mismatch(data: &[u8], ty: MsgType) -> Mismatch {
    let (start, len) = match ty {
        MsgType::ClientHello => (HEADER_LEN + 4, NAME_LEN),
        MsgType::Disconnect => (HEADER_LEN + 1, 127),
        MsgType::ErrorMessage => (HEADER_LEN + 8, ERROR_TEXT_LEN),
        MsgType::ChatMessage => (HEADER_LEN + 2, data.len()),
        MsgType::ChatBroadcast => (HEADER_LEN + 3, data.len()),
        _ => (HEADER_LEN, 0),
    };
    let field = data
        .get(start..(start + len).min(data.len()))
        .unwrap_or(&[]);
    let field = &field[..field.iter().position(|&b| b == 0).unwrap_or(field.len())];
    let bad = std::str::from_utf8(field)
        .err()
        .map_or(0, |e| e.valid_up_to());
    Mismatch::at(start + bad, "UTF-8 text")
}

/// Where an uncompressed InputMessage's input data fails: the type at byte 28, its data from
/// byte 29 (zergcity.md, "Input data").
fn input_mismatch(data: &[u8]) -> Mismatch {
    const TYPE_AT: usize = HEADER_LEN + 12;
    const DATA: usize = TYPE_AT + 1;
    let Some(&t) = data.get(TYPE_AT) else {
        return Mismatch::at(
            data.len(),
            "input_sequence u32, client_tick u64 and input_type u8",
        );
    };
    let u8_at = |i: usize| data.get(i).copied();
    let u16_at = |i: usize| {
        data.get(i..i + 2)
            .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))
    };
    let value = |at: usize, max: u8, what: &str| match u8_at(at) {
        Some(v) if v > max => Some(Mismatch::at(at, format!("{what} 0-{max}"))),
        _ => None,
    };
    let (len, what, bad) = match t {
        INPUT_NONE => (0, "None input (no data)".to_string(), None),
        INPUT_PLACE_BUILDING => (
            13,
            "PlaceBuilding data of 13 bytes".into(),
            value(DATA + 12, 3, "a rotation"),
        ),
        INPUT_DESIGNATE_ZONE => {
            let n = u16_at(DATA + 2).unwrap_or(0);
            (
                4 + 16 * n,
                format!("DesignateZone data of {n} rectangles"),
                value(DATA, 3, "a zone_type").or_else(|| value(DATA + 1, 1, "a density")),
            )
        }
        INPUT_DEMOLISH | INPUT_PLACE_ROAD | INPUT_PLACE_CONDUIT | INPUT_PLACE_PIPE => {
            let n = u16_at(DATA).unwrap_or(0);
            (2 + 8 * n, format!("a tile list of {n} tiles"), None)
        }
        INPUT_PURCHASE_TILE => (8, "PurchaseTile data of 8 bytes".into(), None),
        INPUT_SET_TRIBUTE_RATE => (
            2,
            "SetTributeRate data of 2 bytes".into(),
            value(DATA, 3, "a zone_type"),
        ),
        INPUT_CANCEL_ACTION => (4, "CancelAction data of 4 bytes".into(), None),
        _ => {
            return Mismatch::at(TYPE_AT, format!("an input_type 0x00-0x09, not {t:#04x}"));
        }
    };
    if let Some(m) = bad {
        return m;
    }
    exact_len(data, DATA + len, &format!("InputMessage with {what}"))
        .err()
        .unwrap_or_else(|| Mismatch::at(DATA, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 16-byte header of zergcity.md, by hand: ZCNT, version 1, `ty`, flags 0, reserved 0,
    /// payload_length `len`, sequence `seq`.
    fn header(ty: u8, len: u32, seq: u32) -> Vec<u8> {
        let mut h = vec![0x5A, 0x43, 0x4E, 0x54, 1, ty, 0, 0];
        h.extend_from_slice(&len.to_le_bytes());
        h.extend_from_slice(&seq.to_le_bytes());
        h
    }

    /// An InputMessage: input_sequence 3, client_tick 100, PurchaseTile (0x04) at (5, -1).
    fn input() -> Vec<u8> {
        let mut m = header(0x20, 21, 7);
        m.extend_from_slice(&[3, 0, 0, 0]);
        m.extend_from_slice(&[100, 0, 0, 0, 0, 0, 0, 0]);
        m.push(0x04);
        m.extend_from_slice(&[5, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF]);
        m
    }

    #[test]
    fn an_input_reads_with_the_header_sequence_and_no_keys() {
        let mut i = SpecInspect::new(MAX_PAYLOAD);
        let s = i.message(Direction::ToServer, &input()).expect("reads");
        assert_eq!(
            (s.kind, s.role, s.seq),
            ("InputMessage", Role::Input, Some(7))
        );
        assert_eq!(s.keys, None);
    }

    #[test]
    fn ping_and_pong_pair_by_the_timestamp() {
        let mut i = SpecInspect::new(MAX_PAYLOAD);
        let mut ping = header(0x03, 16, 8);
        ping.extend_from_slice(&0x1234_5678u64.to_le_bytes());
        ping.extend_from_slice(&[0; 8]);
        let mut pong = header(0x04, 16, 20);
        pong.extend_from_slice(&0x1234_5678u64.to_le_bytes());
        pong.extend_from_slice(&55u64.to_le_bytes());
        let a = i.message(Direction::ToServer, &ping).expect("ping");
        let b = i.message(Direction::ToClient, &pong).expect("pong");
        assert_eq!((a.role, b.role), (Role::Ping, Role::Pong));
        assert_eq!((a.ping, b.ping), (Some(0x1234_5678), Some(0x1234_5678)));
        assert_eq!(b.seq, Some(20));
    }

    #[test]
    fn a_delta_snapshot_reads_as_a_snapshot() {
        // base_tick 9, target_tick 10, no entity or component updates.
        let mut d = header(0x11, 20, 30);
        d.extend_from_slice(&9u64.to_le_bytes());
        d.extend_from_slice(&10u64.to_le_bytes());
        d.extend_from_slice(&[0, 0, 0, 0]);
        let s = SpecInspect::new(MAX_PAYLOAD)
            .message(Direction::ToClient, &d)
            .expect("reads");
        assert_eq!(
            (s.kind, s.role, s.seq),
            ("DeltaSnapshot", Role::Snapshot, Some(30))
        );
    }

    #[test]
    fn other_dialects_fail_at_the_first_byte_that_differs() {
        let mut i = SpecInspect::new(MAX_PAYLOAD);
        // The implementation's Heartbeat: version 1, type 1, length 12, ...
        let hb = [1, 1, 0, 12, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0];
        let e = i.message(Direction::ToServer, &hb).unwrap_err();
        assert_eq!(e.offset, 0, "{e}");
        assert!(e.expected.contains("ZCNT"), "{e}");
        // The benchmark's SnapshotAck: type 3 with no body, where the spec's type 3 is a
        // 32-byte Ping.
        let ack = header(0x03, 0, 41);
        let e = i.message(Direction::ToServer, &ack).unwrap_err();
        assert_eq!(e.offset, 16, "{e}");
        assert!(e.expected.contains("32"), "{e}");
        // A PurchaseTile with a bad input type 0x0A.
        let mut bad = input();
        bad[28] = 0x0A;
        assert_eq!(i.message(Direction::ToServer, &bad).unwrap_err().offset, 28);
    }

    #[test]
    fn a_truncated_message_fails_at_its_end() {
        let mut i = SpecInspect::new(MAX_PAYLOAD);
        let m = input();
        let e = i.message(Direction::ToServer, &m[..30]).unwrap_err();
        assert_eq!(e.offset, 30, "{e}");
        assert_eq!(
            i.message(Direction::ToServer, &m[..10]).unwrap_err().offset,
            10
        );
    }
}
