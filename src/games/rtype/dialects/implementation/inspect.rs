//! Decode-only reading of the implementation dialect (the real R-Type server) for
//! `tickswarm inspect` (see `crate::protocol::inspect`): its UDP datagrams through
//! [`message`](Inspect::message), its TCP login through [`stream`](Inspect::stream), framed
//! here (`len u32` then the payload) in a buffer bounded by one largest frame.
//!
//! What each message is for the behaviour figures (docs/protocols/rtype.md, "The
//! implementation dialect"):
//! - INPUT's `flags` are the pattern's key bits, bit for bit (bit 0 up, 1 down, 2 left,
//!   3 right, 4 shoot), as the bot sends them; bits 5-7 name no key and are left out.
//! - No datagram carries a sequence or a tick: no `seq` is given.
//! - PING and PONG are both empty: as the bot does (one PING in flight, the next PONG is its
//!   answer), each PING gets the token of its count in the flow and a PONG the token of the
//!   newest PING. With several PINGs in flight this under-states all but the newest's RTT.
//! - The login's messages (HELLO, WELCOME, ERROR_MESSAGE, the room messages) are
//!   [`Role::Other`]. The room requests `0x03`-`0x07` and their answers `0x12`-`0x17` have no
//!   layout in the document: they read as "room request" and "room answer", any body.
//! - Every datagram must have the size its type states exactly (the document's table gives
//!   one size per type): a longer one fails where its type's size ends.

use super::codec::{
    self, decode, decode_tcp, Datagram, DecodeError, TcpMessage, ENTITY_LEN, HEADER_LEN, MAX_FRAME,
    SNAPSHOT_HEAD, TCP_HEAD, VERSION,
};
use crate::games::rtype::codec::{self as spec, FloatOrder};
use crate::protocol::prelude::inspect::{exact_len, Direction, Inspect, Mismatch, Role, Seen};
use crate::protocol::prelude::Keys;

/// The server → client type codes, in words.
const SERVER_TYPES: &str = "a server → client type 0x10-0x16 (ACCEPT, REJECT, SNAPSHOT, \
                            PONG, DAMAGE_EVENT, GAME_OVER, SCORE)";
/// The client → server type codes, in words.
const CLIENT_TYPES: &str = "a client → server type 0x01-0x04 (CONNECT, DISCONNECT, INPUT, PING)";

/// One direction of the login stream: bytes of a frame not whole yet.
#[derive(Default)]
struct Stream {
    /// At most one frame (`4 + MAX_FRAME` bytes) between calls.
    buf: Vec<u8>,
    /// A frame failed: the stream cannot be followed past it.
    broken: bool,
}

/// One flow read as the implementation dialect: a UDP flow of play or the TCP login.
#[derive(Default)]
pub struct ImplementationInspect {
    /// PINGs seen so far: the token of the newest.
    pings: u64,
    /// The login stream, to the server and to the client.
    tcp: [Stream; 2],
}

impl ImplementationInspect {
    /// A reader of a new flow.
    pub fn new() -> Self {
        Self::default()
    }
}

/// The datagram type's name as the document writes it.
fn name(t: u8) -> &'static str {
    codec::type_name(t)
}

impl Inspect for ImplementationInspect {
    fn message(&mut self, dir: Direction, data: &[u8]) -> Result<Seen, Mismatch> {
        let read = match dir {
            Direction::ToServer => self.client(data),
            Direction::ToClient => self.server(data),
        };
        read.map_err(|mut m| {
            if let Ok(p) = spec::decode(data, FloatOrder::Big) {
                m.expected.push_str(&format!(
                    " (it reads as the spec dialect's {})",
                    crate::games::rtype::codec::inspect::doc_name(p.packet_type())
                ));
            }
            m
        })
    }

    fn stream(
        &mut self,
        dir: Direction,
        data: &[u8],
        out: &mut dyn FnMut(Seen),
    ) -> Result<(), Mismatch> {
        let st = &mut self.tcp[dir as usize];
        if st.broken {
            return Err(Mismatch::at(
                0,
                "a login stream that can be followed: an earlier frame of it did not read",
            ));
        }
        // Bytes of this segment start at `held` in the buffer; offsets are the segment's.
        let held = st.buf.len();
        st.buf.extend_from_slice(data);
        let seg = |at: usize| at.saturating_sub(held);
        let mut pos = 0;
        let mut failed = None;
        while let Some(head) = st.buf.get(pos..pos + 4) {
            let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            let n = len as usize;
            if n == 0 || n > MAX_FRAME {
                failed = Some(Mismatch::at(
                    seg(pos),
                    format!(
                        "a frame length (len u32, big-endian) of 1-{MAX_FRAME} bytes, not {len}"
                    ),
                ));
                break;
            }
            let Some(payload) = st.buf.get(pos + 4..pos + 4 + n) else {
                break;
            };
            match login(dir, payload) {
                Ok(s) => out(s),
                Err(m) => {
                    failed = Some(Mismatch::at(seg(pos + 4 + m.offset), m.expected));
                    break;
                }
            }
            pos += 4 + n;
        }
        if let Some(m) = failed {
            st.broken = true;
            st.buf = Vec::new();
            return Err(m);
        }
        st.buf.drain(..pos);
        Ok(())
    }
}

impl ImplementationInspect {
    /// A datagram from the client.
    fn client(&mut self, data: &[u8]) -> Result<Seen, Mismatch> {
        let t = header(data)?;
        match t {
            codec::CONNECT | codec::DISCONNECT => {
                exact_len(data, HEADER_LEN, name(t))?;
                Ok(Seen::new(name(t), Role::Other))
            }
            codec::PING => {
                exact_len(data, HEADER_LEN, "PING")?;
                self.pings += 1;
                Ok(Seen::new("PING", Role::Ping).ping(self.pings))
            }
            codec::INPUT => {
                exact_len(data, HEADER_LEN + 1, "INPUT")?;
                let flags = data.get(HEADER_LEN).copied().unwrap_or(0);
                Ok(Seen::new("INPUT", Role::Input).keys(Keys(flags & 0x1F)))
            }
            _ => Err(Mismatch::at(0, format!("{CLIENT_TYPES}, not {t:#04x}"))),
        }
    }

    /// A datagram from the server.
    fn server(&mut self, data: &[u8]) -> Result<Seen, Mismatch> {
        let t = header(data)?;
        let d = match decode(data) {
            Ok(Some(d)) => d,
            Ok(None) => return Err(Mismatch::at(0, format!("{SERVER_TYPES}, not {t:#04x}"))),
            Err(e) => return Err(server_mismatch(data, t, e)),
        };
        let n = name(t);
        Ok(match d {
            Datagram::Snapshot(_) => Seen::new(n, Role::Snapshot),
            Datagram::Pong if self.pings > 0 => Seen::new(n, Role::Pong).ping(self.pings),
            Datagram::Pong => Seen::new(n, Role::Pong),
            Datagram::Accept
            | Datagram::Reject
            | Datagram::Damage { .. }
            | Datagram::GameOver
            | Datagram::Score(_) => Seen::new(n, Role::Other),
        })
    }
}

/// The 4-byte header of either direction: its type, or where it fails (the server's rules:
/// version 1, `size` the whole datagram).
fn header(data: &[u8]) -> Result<u8, Mismatch> {
    let len = data.len();
    let (Some(&t), Some(&version), Some(size)) = (
        data.first(),
        data.get(1),
        data.get(2..4)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]]))),
    ) else {
        return Err(Mismatch::at(
            len,
            format!("a {HEADER_LEN}-byte header (type u8, version u8 = 1, size u16)"),
        ));
    };
    if version != VERSION {
        return Err(Mismatch::at(1, format!("version {VERSION}, not {version}")));
    }
    let le = if usize::from((size as u16).swap_bytes()) == len {
        " (read little-endian it is the length: integers here are big-endian)"
    } else {
        ""
    };
    if size > len {
        return Err(Mismatch::at(
            len,
            format!("the {size} bytes the header's size u16 at 2 states (it ends at {len}){le}"),
        ));
    }
    if size < len {
        return Err(if size >= HEADER_LEN {
            Mismatch::at(
                size,
                format!(
                    "the end of the datagram at the {size} bytes its size u16 at 2 states ({} \
                     bytes more){le}",
                    len - size
                ),
            )
        } else {
            Mismatch::at(
                2,
                format!("size u16, the whole datagram ({len}), not {size}{le}"),
            )
        });
    }
    Ok(t)
}

/// Where a server datagram with a sound header fails.
fn server_mismatch(data: &[u8], t: u8, e: DecodeError) -> Mismatch {
    let len = data.len();
    match (t, e.reason) {
        (codec::CONNECT | codec::DISCONNECT | codec::INPUT | codec::PING, _) => Mismatch::at(
            0,
            format!("{SERVER_TYPES}, not the client's {t:#04x} ({})", name(t)),
        ),
        (codec::SNAPSHOT, "count_mismatch") => {
            let count = data
                .get(4..6)
                .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
                .unwrap_or(0);
            let want = SNAPSHOT_HEAD + ENTITY_LEN * count;
            if want > len {
                Mismatch::at(
                    len,
                    format!(
                        "count {count} (u16 at 4) × {ENTITY_LEN}-byte records: a SNAPSHOT of \
                         {want} bytes (it ends at {len})"
                    ),
                )
            } else {
                Mismatch::at(
                    want,
                    format!(
                        "the end of the SNAPSHOT after count {count} (u16 at 4) records ({} \
                         bytes more)",
                        len - want
                    ),
                )
            }
        }
        (codec::SNAPSHOT, _) => Mismatch::at(
            len,
            format!("a SNAPSHOT's {SNAPSHOT_HEAD} fixed bytes (header, count u16)"),
        ),
        (_, _) => {
            let size = match t {
                codec::SCORE => HEADER_LEN + 4,
                codec::DAMAGE_EVENT => HEADER_LEN + 6,
                _ => HEADER_LEN,
            };
            exact_len(data, size, name(t))
                .err()
                .unwrap_or_else(|| Mismatch::at(HEADER_LEN, format!("a {} body", name(t))))
        }
    }
}

/// One login frame's payload (offsets from the payload's start).
fn login(dir: Direction, p: &[u8]) -> Result<Seen, Mismatch> {
    let head = || {
        Mismatch::at(
            p.len(),
            format!("a payload head of {TCP_HEAD} bytes (type u8, requestId u32)"),
        )
    };
    let t = *p.first().ok_or_else(head)?;
    if p.len() < TCP_HEAD {
        return Err(head());
    }
    match dir {
        Direction::ToServer => match t {
            codec::HELLO => {
                exact_len(
                    p,
                    TCP_HEAD + 2,
                    "HELLO payload (type, requestId, version u16)",
                )?;
                Ok(Seen::new("HELLO", Role::Other))
            }
            0x03..=0x07 => Ok(Seen::new("room request", Role::Other)),
            _ => Err(Mismatch::at(
                0,
                format!(
                    "a client login type: 0x01 HELLO or a room request 0x03-0x07, not {t:#04x}"
                ),
            )),
        },
        Direction::ToClient => match decode_tcp(p) {
            Ok(TcpMessage::Welcome { .. }) => Ok(Seen::new("WELCOME", Role::Other)),
            Ok(TcpMessage::Error { .. }) => Ok(Seen::new("ERROR_MESSAGE", Role::Other)),
            Ok(TcpMessage::Other { .. }) => Ok(Seen::new("room answer", Role::Other)),
            Err(e) => Err(match (e.message, e.reason) {
                ("WELCOME", _) => exact_len(
                    p,
                    TCP_HEAD + 8,
                    "WELCOME payload (type, requestId, version u16, sessionId u32, udpPort u16)",
                )
                .err()
                .unwrap_or_else(|| Mismatch::at(TCP_HEAD, "a WELCOME body")),
                ("ERROR_MESSAGE", _) => {
                    let n = p
                        .get(TCP_HEAD + 2..TCP_HEAD + 4)
                        .map(|b| u16::from_be_bytes([b[0], b[1]]));
                    let want = match n {
                        Some(n) => format!("a {n}-byte text (len u16 at {})", TCP_HEAD + 2),
                        None => "code u16 and a text (len u16, bytes)".to_string(),
                    };
                    Mismatch::at(p.len(), want)
                }
                _ => Mismatch::at(
                    0,
                    format!(
                        "a server login type: 0x10 WELCOME, 0x11 ERROR_MESSAGE or a room \
                         answer 0x12-0x17, not {t:#04x}"
                    ),
                ),
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// INPUT by hand from rtype.md: type 0x03, version 1, size 5, flags up | right | shoot.
    const INPUT: [u8; 5] = [0x03, 1, 0, 5, 0b1_1001];

    #[test]
    fn an_input_reads_its_flags_as_keys() {
        let s = ImplementationInspect::new()
            .message(Direction::ToServer, &INPUT)
            .expect("reads");
        assert_eq!((s.kind, s.role, s.seq), ("INPUT", Role::Input, None));
        assert_eq!(s.keys, Some(Keys(Keys::UP | Keys::RIGHT | Keys::SHOOT)));
        let e = ImplementationInspect::new()
            .message(Direction::ToServer, &INPUT[..3])
            .unwrap_err();
        assert_eq!(e.offset, 3, "{e}");
    }

    #[test]
    fn a_ping_pairs_with_the_next_pong_and_a_snapshot_reads() {
        let mut i = ImplementationInspect::new();
        let ping = i
            .message(Direction::ToServer, &[0x04, 1, 0, 4])
            .expect("ping");
        let pong = i
            .message(Direction::ToClient, &[0x13, 1, 0, 4])
            .expect("pong");
        assert_eq!((ping.kind, ping.role), ("PING", Role::Ping));
        assert_eq!((pong.kind, pong.role), ("PONG", Role::Pong));
        assert!(ping.ping.is_some());
        assert_eq!(ping.ping, pong.ping);
        // SNAPSHOT 0x12, size 26 (6 + 20), count 1: id 7 (u64), x 100.0, y 2.0, sprite 3.
        let mut d = vec![0x12, 1, 0, 26, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7];
        d.extend_from_slice(&[0x42, 0xC8, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 3]);
        let s = i.message(Direction::ToClient, &d).expect("snapshot");
        assert_eq!((s.kind, s.role, s.seq), ("SNAPSHOT", Role::Snapshot, None));
    }

    #[test]
    fn the_spec_dialects_input_fails_at_the_end_of_a_disconnect_and_is_named() {
        // Spec INPUT: type 2 (here DISCONNECT, 4 bytes), size 17.
        let spec = [2, 1, 0, 0x11, 0, 0, 0, 1, 0x3F, 0x80, 0, 0, 0, 0, 0, 0, 0];
        let e = ImplementationInspect::new()
            .message(Direction::ToServer, &spec)
            .unwrap_err();
        assert_eq!(e.offset, 4, "{e}");
        assert!(e.expected.contains("spec dialect's INPUT"), "{e}");
        // Spec SNAPSHOT type 23 (0x17): no type of this dialect.
        let e = ImplementationInspect::new()
            .message(Direction::ToClient, &[23, 1, 0, 10, 0, 0, 0, 3, 0, 0])
            .unwrap_err();
        assert_eq!(e.offset, 0, "{e}");
        assert!(e.expected.contains("0x10-0x16"), "{e}");
    }

    #[test]
    fn the_login_is_framed_across_segments() {
        let mut i = ImplementationInspect::new();
        let mut seen = Vec::new();
        // HELLO: len 7, type 0x01, requestId 9, version 1; cut after 6 bytes.
        let hello = [0, 0, 0, 7, 0x01, 0, 0, 0, 9, 0, 1];
        i.stream(Direction::ToServer, &hello[..6], &mut |s| seen.push(s))
            .expect("a piece");
        assert!(seen.is_empty());
        i.stream(Direction::ToServer, &hello[6..], &mut |s| seen.push(s))
            .expect("the rest");
        // WELCOME (len 13: type 0x10, requestId 9, version 1, sessionId 42, udpPort 0) and a
        // room answer (len 5, type 0x12, requestId 0) in one segment.
        let mut d = vec![0, 0, 0, 13, 0x10, 0, 0, 0, 9, 0, 1, 0, 0, 0, 42, 0, 0];
        d.extend_from_slice(&[0, 0, 0, 5, 0x12, 0, 0, 0, 0]);
        i.stream(Direction::ToClient, &d, &mut |s| seen.push(s))
            .expect("two frames");
        let kinds: Vec<_> = seen.iter().map(|s| (s.kind, s.role)).collect();
        assert_eq!(
            kinds,
            [
                ("HELLO", Role::Other),
                ("WELCOME", Role::Other),
                ("room answer", Role::Other)
            ]
        );
    }

    #[test]
    fn a_frame_claiming_too_much_or_a_bad_payload_fails_where_it_says_so() {
        let mut i = ImplementationInspect::new();
        // len 65537 (00 01 00 01), after a whole HELLO of 11 bytes.
        let mut d = vec![0, 0, 0, 7, 0x01, 0, 0, 0, 9, 0, 1];
        d.extend_from_slice(&[0, 1, 0, 1, 0xAA]);
        let e = i.stream(Direction::ToServer, &d, &mut |_| {}).unwrap_err();
        assert_eq!(e.offset, 11, "{e}");
        assert!(e.expected.contains("65536"), "{e}");
        assert!(i.stream(Direction::ToServer, &[0], &mut |_| {}).is_err());
        // A WELCOME one byte short: its payload ends at 12, byte 16 of the segment.
        let mut j = ImplementationInspect::new();
        let w = [0, 0, 0, 12, 0x10, 0, 0, 0, 9, 0, 1, 0, 0, 0, 42, 0];
        let e = j.stream(Direction::ToClient, &w, &mut |_| {}).unwrap_err();
        assert_eq!(e.offset, 16, "{e}");
    }
}
