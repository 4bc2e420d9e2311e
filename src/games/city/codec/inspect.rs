//! Decode-only reading of City packets for `tickswarm inspect` (see
//! `crate::protocol::inspect`): the codec decides, and its reasons are turned into the byte
//! where a packet stops reading as this dialect.
//!
//! One ENet packet holds one or more City messages back to back (city.md, "Transport"), so
//! [`Inspect::messages`] hands each to its caller; [`Inspect::message`] reads a packet that
//! holds exactly one. What the figures come from:
//!
//! - **PlayerInput** is [`Role::Input`]; its `tick` (the bot counts it up by one per input
//!   from 1) is the seq, and `move_x`, `move_y`, `buttons` are the keys: the bot writes
//!   `move_x = right − left`, `move_y = down − up` and `buttons = interact` when shoot is
//!   held, so `-1`/`1` read back as left/right and up/down and `0x01` as shoot (the
//!   `0x02` secondary button has no key).
//! - **DeltaState** is [`Role::Snapshot`] with its `tick` as the seq: one per client per tick
//!   in both dialects. **FullState** is a snapshot too, without a seq (it is sent once, and its
//!   tick need not be one before the first DeltaState's).
//! - **Ping** and **Pong** are empty: there is no token on the wire. The bot keeps one Ping
//!   in flight, so both carry the constant token 0: a Pong pairs with the newest Ping not yet
//!   answered. The implementation's server never answers a Ping.
//! - The header's `sequence` counts every message of a sender (spec dialect) or is always 0
//!   (implementation): it is no per-role sequence, so it is not a seq.
//! - A type byte unknown in the dialect (which the bot skips and counts) is a mismatch here:
//!   a packet that is not City should not read as one.

use super::decode::{decode_inner, Reader};
use super::{
    fits_implementation, messages, Dialect, Message, MsgType, PlayerInput, RawMessage,
    BUTTON_INTERACT, DELTA_RECORD_LEN, DELTA_RECORD_LEN_IMPL, HEADER_LEN, PLAYER_INPUT_LEN,
};
use crate::protocol::prelude::inspect::{packed, Direction, Inspect, Mismatch, Role, Seen};
use crate::protocol::prelude::Keys;

/// The constant ping token of City's empty Ping and Pong (see the module docs).
pub const PING_TOKEN: u64 = 0;

/// One flow read as one City dialect.
pub struct CityInspect {
    dialect: Dialect,
}

impl CityInspect {
    /// A reader of `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        Self { dialect }
    }

    /// The message starting at `at` in `packet`: what it is and where the next one starts.
    fn one(&self, packet: &[u8], at: usize) -> Result<(Seen, usize), Mismatch> {
        let rest = packet.get(at..).unwrap_or(&[]);
        let raw = match messages(rest).next() {
            Some(Ok(raw)) => raw,
            Some(Err(e)) if e.reason == "length_overrun" => {
                let len = rest
                    .get(3..5)
                    .map(|b| u16::from_be_bytes([b[0], b[1]]))
                    .unwrap_or(0);
                return Err(Mismatch::at(
                    packet.len(),
                    format!(
                        "a payload of {len} bytes, as the header's length at byte {} says \
                         (the packet ends {} bytes after the header)",
                        at + 3,
                        rest.len().saturating_sub(HEADER_LEN)
                    ),
                ));
            }
            _ => {
                return Err(Mismatch::at(
                    packet.len(),
                    format!(
                        "a {HEADER_LEN}-byte message header (type u8, sequence u16, length u16) \
                         at byte {at}"
                    ),
                ))
            }
        };
        let end = at + HEADER_LEN + raw.payload.len();
        let Some(ty) = MsgType::from_u8(raw.type_byte, self.dialect) else {
            return Err(self.unknown_type(at, raw.type_byte));
        };
        let msg = match raw.decode(self.dialect) {
            Ok(Some(m)) => m,
            _ => return Err(self.payload_mismatch(&raw, ty, at + HEADER_LEN)),
        };
        Ok((seen(ty, &msg), end))
    }

    fn unknown_type(&self, at: usize, t: u8) -> Mismatch {
        let (types, other) = match self.dialect {
            Dialect::Spec => (
                "0x01-0x05, 0x10-0x13, 0x20-0x23, 0x30-0x31, 0x40-0x41",
                MsgType::from_u8(t, Dialect::Implementation)
                    .map(|ty| format!("; {t:#04x} is the implementation dialect's {}", kind(ty)))
                    .unwrap_or_default(),
            ),
            Dialect::Implementation => (
                "0x01-0x06, 0x10-0x13, 0x20-0x25, 0x30-0x31, 0x40-0x41",
                String::new(),
            ),
        };
        Mismatch::at(
            at,
            format!(
                "a message type of the {} dialect ({types}), not {t:#04x}{other}",
                dialect_name(self.dialect)
            ),
        )
    }

    /// Where the payload of `raw` (at `base` in the packet) stops reading as this dialect.
    fn payload_mismatch(&self, raw: &RawMessage<'_>, ty: MsgType, base: usize) -> Mismatch {
        let payload = raw.payload;
        let name = kind(ty);
        let end = payload.len();
        let mut r = Reader::new(payload);
        let reason = match decode_inner(ty, &mut r, self.dialect) {
            Ok(_) => match r.expect_end() {
                Ok(()) => "",
                Err(_) => "trailing_bytes",
            },
            Err(reason) => reason,
        };
        let pos = r.position();
        let fixed = match ty {
            MsgType::Ping | MsgType::Pong | MsgType::ContentComplete => Some(0),
            MsgType::InputAck | MsgType::EntityDespawn => Some(4),
            MsgType::PlayerInput => Some(PLAYER_INPUT_LEN),
            _ => None,
        };
        let (off, expected) = match (reason, fixed) {
            ("truncated" | "trailing_bytes", Some(n)) => (
                n.min(end),
                format!("a {name} payload of {n} bytes (the header's length says {end})"),
            ),
            ("truncated" | "length_overrun", None) => (
                end,
                format!(
                    "more of the {name} payload: its fields run past the {end} bytes the \
                     header's length gives it"
                ),
            ),
            ("trailing_bytes", None) => (
                pos,
                format!("the end of the {name} payload ({} bytes more)", end - pos),
            ),
            ("varint_overlong" | "varint_overflow", _) => (
                pos.saturating_sub(1),
                "a varint of at most 10 bytes, its 10th byte 0 or 1".to_string(),
            ),
            ("bad_utf8", _) => (bad_utf8_at(payload, pos), "UTF-8 text in a string".into()),
            ("bad_axis", _) => {
                let off = if matches!(payload.get(8), Some(&b) if (b as i8).abs() > 1) {
                    8
                } else {
                    9
                };
                (off, "a movement axis of -1, 0 or 1".into())
            }
            ("count_mismatch", _) if ty == MsgType::ContentRequest => (
                0,
                format!(
                    "a count u32 agreeing with the 8-byte ids after it ({} bytes)",
                    end.saturating_sub(4)
                ),
            ),
            ("count_mismatch", _) => (
                4,
                format!(
                    "a count u32 then that many {DELTA_RECORD_LEN_IMPL}-byte records (the \
                     payload is 8 + {DELTA_RECORD_LEN_IMPL}·count bytes, not {end})"
                ),
            ),
            ("implementation_layout", _) => (
                4,
                format!(
                    "last_acked_input u32 then {DELTA_RECORD_LEN}-byte records, not the \
                     implementation dialect's count u32 and {DELTA_RECORD_LEN_IMPL}-byte records"
                ),
            ),
            ("bad_record_size", _) => (
                end,
                format!(
                    "{DELTA_RECORD_LEN}-byte EntityUpdate records after tick and \
                     last_acked_input: {} bytes do not make whole records",
                    end.saturating_sub(8)
                ),
            ),
            ("bad_bool", _) if ty == MsgType::DeltaState => (
                first_bad_record_bool(payload),
                "has_player and is_moving bytes of 0 or 1".into(),
            ),
            ("bad_bool", _) => (pos.saturating_sub(1), "is_player 0 or 1".into()),
            ("unknown_component", _) => (
                pos.saturating_sub(1),
                "component flags of bits 0x01-0x20 only".into(),
            ),
            ("bad_dimensions", _) => (
                pos.saturating_sub(4),
                "a map of 0 × 0 or with both sides at least 1".into(),
            ),
            ("repeat_first_row", _) => (
                pos.saturating_sub(1),
                "a first map row with runs (0 repeats the previous row)".into(),
            ),
            ("row_width_mismatch", _) => (
                pos.saturating_sub(1),
                "map row runs summing to exactly the map's width".into(),
            ),
            ("zero_run", _) => (pos.saturating_sub(1), "a run length of at least 1".into()),
            ("chunk_index_out_of_range", _) => (8, "a chunk_index below total_chunks".into()),
            (other, _) => (pos, format!("a {name} payload ({other})")),
        };
        let hint = match self.dialect {
            Dialect::Spec if fits_implementation(raw) => {
                " (it reads as the implementation dialect)"
            }
            Dialect::Implementation if matches!(raw.decode(Dialect::Spec), Ok(Some(_))) => {
                " (it reads as the spec dialect)"
            }
            _ => "",
        };
        Mismatch::at(base + off, format!("{expected}{hint}"))
    }
}

impl Inspect for CityInspect {
    /// A packet of exactly one message; [`Inspect::messages`] reads packets of several.
    fn message(&mut self, _dir: Direction, data: &[u8]) -> Result<Seen, Mismatch> {
        let (seen, end) = self.one(data, 0)?;
        if end < data.len() {
            return Err(Mismatch::at(
                end,
                format!(
                    "the end of a packet of one message ({} bytes more: a packet of several \
                     is read message by message)",
                    data.len() - end
                ),
            ));
        }
        Ok(seen)
    }

    fn messages(
        &mut self,
        _dir: Direction,
        data: &[u8],
        out: &mut dyn FnMut(Seen),
    ) -> Result<(), Mismatch> {
        packed(data, "a City message", |at| self.one(data, at), out)
    }
}

/// The message as city.md names it, with its role and figures.
fn seen(ty: MsgType, msg: &Message<'_>) -> Seen {
    let name = kind(ty);
    match msg {
        Message::PlayerInput(i) => Seen::new(name, Role::Input)
            .seq(u64::from(i.tick))
            .keys(keys(i)),
        Message::DeltaState(d) => Seen::new(name, Role::Snapshot).seq(u64::from(d.tick)),
        Message::FullState(_) => Seen::new(name, Role::Snapshot),
        Message::Ping => Seen::new(name, Role::Ping).ping(PING_TOKEN),
        Message::Pong => Seen::new(name, Role::Pong).ping(PING_TOKEN),
        _ => Seen::new(name, Role::Other),
    }
}

/// The keys the bot turned into `i` (the inverse of its `Keys::axis` and shoot mapping).
fn keys(i: &PlayerInput) -> Keys {
    let mut k = 0;
    k |= match i.move_x {
        1 => Keys::RIGHT,
        -1 => Keys::LEFT,
        _ => 0,
    };
    k |= match i.move_y {
        1 => Keys::DOWN,
        -1 => Keys::UP,
        _ => 0,
    };
    if i.buttons & BUTTON_INTERACT != 0 {
        k |= Keys::SHOOT;
    }
    Keys(k)
}

/// The type's name in city.md.
fn kind(ty: MsgType) -> &'static str {
    match ty {
        MsgType::ClientHello => "ClientHello",
        MsgType::ServerHello => "ServerHello",
        MsgType::Disconnect => "Disconnect",
        MsgType::Ping => "Ping",
        MsgType::Pong => "Pong",
        MsgType::Kick => "Kick",
        MsgType::ContentRequest => "ContentRequest",
        MsgType::ContentManifest => "ContentManifest",
        MsgType::ContentChunk => "ContentChunk",
        MsgType::ContentComplete => "ContentComplete",
        MsgType::FullState => "FullState",
        MsgType::DeltaState => "DeltaState",
        MsgType::EntitySpawn => "EntitySpawn",
        MsgType::EntityDespawn => "EntityDespawn",
        MsgType::EntityUpdate => "EntityUpdate",
        MsgType::ChunkData => "ChunkData",
        MsgType::PlayerInput => "PlayerInput",
        MsgType::InputAck => "InputAck",
        MsgType::ChatMessage => "ChatMessage",
        MsgType::ChatBroadcast => "ChatBroadcast",
    }
}

fn dialect_name(d: Dialect) -> &'static str {
    match d {
        Dialect::Spec => "spec",
        Dialect::Implementation => "implementation",
    }
}

/// The first `has_player` / `is_moving` byte that is not 0 or 1 in an implementation
/// DeltaState payload (`tick · count · records`).
fn first_bad_record_bool(payload: &[u8]) -> usize {
    payload
        .get(8..)
        .unwrap_or(&[])
        .chunks_exact(DELTA_RECORD_LEN_IMPL)
        .enumerate()
        .find_map(|(i, rec)| {
            (20..22)
                .find(|&j| rec.get(j).is_some_and(|&b| b > 1))
                .map(|j| 8 + i * DELTA_RECORD_LEN_IMPL + j)
        })
        .unwrap_or(8)
}

/// The first byte that is not UTF-8 in the string that ends at `end` (the reader stops after
/// a string it cannot read): the string's start is where a varint length ends that reaches
/// exactly to `end`.
fn bad_utf8_at(payload: &[u8], end: usize) -> usize {
    for start in (0..end).rev() {
        let len = (end - start) as u64;
        let mut prefix = [0u8; 10];
        let mut n = 0;
        let mut v = len;
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            prefix[n] = if v == 0 { b } else { b | 0x80 };
            n += 1;
            if v == 0 || n == prefix.len() {
                break;
            }
        }
        if start >= n && payload.get(start - n..start) == Some(&prefix[..n]) {
            if let Some(s) = payload.get(start..end) {
                if let Err(e) = std::str::from_utf8(s) {
                    return start + e.valid_up_to();
                }
            }
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PlayerInput as city.md lays it out, by hand: type 0x30, sequence 7, length 19; tick 42,
    /// last_received_tick 41, move_x -1, move_y 1, buttons 0x01 (interact), target (3, 4).
    const INPUT: [u8; 24] = [
        0x30, 0x00, 0x07, 0x00, 0x13, // header
        0x00, 0x00, 0x00, 0x2A, // tick
        0x00, 0x00, 0x00, 0x29, // last_received_tick
        0xFF, 0x01, 0x01, // move_x, move_y, buttons
        0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x04, // target_tile
    ];

    /// An implementation DeltaState: tick 5, count 1, one 46-byte record (id 9, has_player 1,
    /// is_moving 0, the rest 0).
    fn impl_delta() -> Vec<u8> {
        let mut d = vec![0x21, 0x00, 0x00, 0x00, 8 + 46];
        d.extend_from_slice(&[0, 0, 0, 5, 0, 0, 0, 1]);
        let mut rec = [0u8; 46];
        rec[3] = 9;
        rec[20] = 1;
        d.extend_from_slice(&rec);
        d
    }

    #[test]
    fn an_input_reads_with_its_tick_and_keys_in_both_dialects() {
        for dialect in [Dialect::Spec, Dialect::Implementation] {
            let s = CityInspect::new(dialect)
                .message(Direction::ToServer, &INPUT)
                .expect("reads");
            assert_eq!(
                (s.kind, s.role, s.seq),
                ("PlayerInput", Role::Input, Some(42))
            );
            assert_eq!(s.keys, Some(Keys(Keys::LEFT | Keys::DOWN | Keys::SHOOT)));
        }
    }

    #[test]
    fn ping_and_pong_pair_by_the_constant_token() {
        let mut i = CityInspect::new(Dialect::Spec);
        let ping = i
            .message(Direction::ToServer, &[0x04, 0x00, 0x01, 0x00, 0x00])
            .expect("ping");
        let pong = i
            .message(Direction::ToClient, &[0x05, 0x00, 0x03, 0x00, 0x00])
            .expect("pong");
        assert_eq!((ping.role, pong.role), (Role::Ping, Role::Pong));
        assert_eq!(ping.ping, pong.ping);
        assert!(ping.ping.is_some());
        // A Ping with a payload is not the empty Ping: it fails where the payload starts.
        let e = i
            .message(Direction::ToServer, &[0x04, 0x00, 0x01, 0x00, 0x01, 0xAA])
            .unwrap_err();
        assert_eq!(e.offset, 5, "{e}");
    }

    #[test]
    fn a_packet_of_several_messages_hands_out_each_and_the_delta_tick_is_its_seq() {
        // InputAck tick 42, then a spec DeltaState: tick 43, last_acked_input 42, one
        // 20-byte record.
        let mut p = vec![0x31, 0x00, 0x02, 0x00, 0x04, 0x00, 0x00, 0x00, 0x2A];
        p.extend_from_slice(&[0x21, 0x00, 0x03, 0x00, 0x1C]);
        p.extend_from_slice(&[0, 0, 0, 0x2B, 0, 0, 0, 0x2A]);
        p.extend_from_slice(&[0; 20]);
        let mut got = Vec::new();
        CityInspect::new(Dialect::Spec)
            .messages(Direction::ToClient, &p, &mut |s| got.push(s))
            .expect("reads");
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].kind, got[0].role), ("InputAck", Role::Other));
        assert_eq!(
            (got[1].kind, got[1].role, got[1].seq),
            ("DeltaState", Role::Snapshot, Some(43))
        );
        // `message` reads one message: the second is a mismatch where it starts.
        let e = CityInspect::new(Dialect::Spec)
            .message(Direction::ToClient, &p)
            .unwrap_err();
        assert_eq!(e.offset, 9, "{e}");
    }

    #[test]
    fn an_implementation_delta_reads_there_and_fails_as_spec_at_last_acked_input() {
        let d = impl_delta();
        let s = CityInspect::new(Dialect::Implementation)
            .message(Direction::ToClient, &d)
            .expect("reads");
        assert_eq!((s.role, s.seq), (Role::Snapshot, Some(5)));
        let e = CityInspect::new(Dialect::Spec)
            .message(Direction::ToClient, &d)
            .unwrap_err();
        // Header 5 + tick 4: where last_acked_input stands.
        assert_eq!(e.offset, 9, "{e}");
        assert!(e.expected.contains("implementation"), "{e}");
        // A bad bool in the record: has_player at 5 + 8 + 20.
        let mut bad = d.clone();
        bad[33] = 2;
        let e = CityInspect::new(Dialect::Implementation)
            .message(Direction::ToClient, &bad)
            .unwrap_err();
        assert_eq!(e.offset, 33, "{e}");
    }

    #[test]
    fn a_spec_delta_read_as_implementation_fails_at_its_count() {
        // tick 1, last_acked_input 3, no records: read as the implementation, 3 is the count.
        let d = [0x21, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 3];
        let e = CityInspect::new(Dialect::Implementation)
            .message(Direction::ToClient, &d)
            .unwrap_err();
        assert_eq!(e.offset, 9, "{e}");
        assert!(e.expected.contains("spec dialect"), "{e}");
    }

    #[test]
    fn truncated_messages_fail_at_their_end_and_bad_fields_where_they_stand() {
        let mut i = CityInspect::new(Dialect::Spec);
        // The header promises 19 bytes, the packet ends after 10.
        let e = i.message(Direction::ToServer, &INPUT[..15]).unwrap_err();
        assert_eq!(e.offset, 15, "{e}");
        // The header says 10: the input's fields run past the message's end.
        let mut short = INPUT[..15].to_vec();
        short[4] = 10;
        let e = i.message(Direction::ToServer, &short).unwrap_err();
        assert_eq!(e.offset, 15, "{e}");
        // A header cut short.
        assert_eq!(
            i.message(Direction::ToServer, &[0x30, 0])
                .unwrap_err()
                .offset,
            2
        );
        // move_x 2 is no axis: byte 5 + 8.
        let mut axis = INPUT;
        axis[13] = 2;
        assert_eq!(
            i.message(Direction::ToServer, &axis).unwrap_err().offset,
            13
        );
        // Kick (0x06) exists only in the implementation dialect.
        let e = i
            .message(Direction::ToClient, &[0x06, 0, 0, 0, 0])
            .unwrap_err();
        assert_eq!(e.offset, 0);
        assert!(e.expected.contains("Kick"), "{e}");
    }

    #[test]
    fn a_bad_string_fails_at_its_first_non_utf8_byte() {
        // Disconnect: reason 1, message "ab\xFF" (length 3).
        let d = [0x03, 0, 0, 0, 5, 1, 3, b'a', b'b', 0xFF];
        let e = CityInspect::new(Dialect::Spec)
            .message(Direction::ToClient, &d)
            .unwrap_err();
        assert_eq!(e.offset, 9, "{e}");
    }
}
