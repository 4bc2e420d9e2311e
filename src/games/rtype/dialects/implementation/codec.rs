//! The implementation dialect's wire format: the TCP login frames and the UDP datagrams.
//!
//! Every integer is big-endian; floats are IEEE 754 in network order (their bits through
//! `htonl`). See the dialect's section of docs/protocols/rtype.md for where each rule was
//! read.

use crate::protocol::prelude::wire::{Be, Reader, WireError};

/// `version` every UDP header carries; the server drops any other.
pub const VERSION: u8 = 1;
/// UDP header: type u8, version u8, size u16 (the whole datagram).
pub const HEADER_LEN: usize = 4;
/// Snapshot: header, then `count u16`, then `count` records.
pub const SNAPSHOT_HEAD: usize = HEADER_LEN + 2;
/// Snapshot record: id u64, x f32, y f32, sprite u32.
pub const ENTITY_LEN: usize = 20;

// UDP, client to server.
pub const CONNECT: u8 = 0x01;
pub const DISCONNECT: u8 = 0x02;
pub const INPUT: u8 = 0x03;
pub const PING: u8 = 0x04;
// UDP, server to client.
pub const ACCEPT: u8 = 0x10;
pub const REJECT: u8 = 0x11;
pub const SNAPSHOT: u8 = 0x12;
pub const PONG: u8 = 0x13;
pub const DAMAGE_EVENT: u8 = 0x14;
pub const GAME_OVER: u8 = 0x15;
pub const SCORE: u8 = 0x16;

/// TCP frame: `len u32` then `len` payload bytes; the server drops a connection whose frame
/// says 0 or more than this.
pub const MAX_FRAME: usize = 64 * 1024;
/// TCP payload head: type u8, request id u32.
pub const TCP_HEAD: usize = 5;
// TCP, client to server.
pub const HELLO: u8 = 0x01;
// TCP, server to client (the room messages are known so they are not counted unknown).
pub const WELCOME: u8 = 0x10;
pub const ERROR_MESSAGE: u8 = 0x11;
/// ROOMS_LIST 0x12 to GAME_START 0x17.
const TCP_ROOM_MIN: u8 = 0x12;
const TCP_SERVER_MAX: u8 = 0x17;

/// The `version u16` a bot says in HELLO (the server echoes whatever it gets).
pub const HELLO_VERSION: u16 = 1;

/// A snapshot, borrowed from the datagram.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    count: u16,
    records: &'a [u8],
}

/// One snapshot record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SnapEntity {
    pub id: u64,
    pub x: f32,
    pub y: f32,
    pub sprite: u32,
}

impl<'a> Snapshot<'a> {
    pub fn count(&self) -> u16 {
        self.count
    }

    pub fn entities(&self) -> impl Iterator<Item = SnapEntity> + 'a {
        self.records.chunks_exact(ENTITY_LEN).map(|r| {
            let u64_at = |i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&r[i..i + 8]);
                u64::from_be_bytes(b)
            };
            let u32_at = |i: usize| u32::from_be_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
            SnapEntity {
                id: u64_at(0),
                x: f32::from_bits(u32_at(8)),
                y: f32::from_bits(u32_at(12)),
                sprite: u32_at(16),
            }
        })
    }
}

/// A datagram from the server.
#[derive(Debug, Clone, Copy)]
pub enum Datagram<'a> {
    Accept,
    Reject,
    Snapshot(Snapshot<'a>),
    Pong,
    Damage { id: u32, amount: u16 },
    GameOver,
    Score(u32),
}

/// Why a datagram was dropped: `(message, reason)` for the decode-error counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError {
    pub message: &'static str,
    pub reason: &'static str,
}

fn err(message: &'static str, reason: &'static str) -> DecodeError {
    DecodeError { message, reason }
}

/// The name of a type code, for counters.
pub fn type_name(ty: u8) -> &'static str {
    match ty {
        CONNECT => "CONNECT",
        DISCONNECT => "DISCONNECT",
        INPUT => "INPUT",
        PING => "PING",
        ACCEPT => "ACCEPT",
        REJECT => "REJECT",
        SNAPSHOT => "SNAPSHOT",
        PONG => "PONG",
        DAMAGE_EVENT => "DAMAGE_EVENT",
        GAME_OVER => "GAME_OVER",
        SCORE => "SCORE",
        _ => "unknown",
    }
}

/// Read a server datagram. `Ok(None)`: a valid header of a type this dialect does not know
/// (counted, ignored).
pub fn decode(data: &[u8]) -> Result<Option<Datagram<'_>>, DecodeError> {
    if data.len() < HEADER_LEN {
        return Err(err("header", "short"));
    }
    let ty = data[0];
    if data[1] != VERSION {
        return Err(err("header", "version"));
    }
    let size = usize::from(u16::from_be_bytes([data[2], data[3]]));
    if size != data.len() {
        return Err(err("header", "size_mismatch"));
    }
    let name = type_name(ty);
    let exact = |n: usize| {
        if data.len() == n {
            Ok(())
        } else {
            Err(err(name, "length"))
        }
    };
    let u32_at = |i: usize| u32::from_be_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
    Ok(Some(match ty {
        ACCEPT => exact(HEADER_LEN).map(|_| Datagram::Accept)?,
        REJECT => exact(HEADER_LEN).map(|_| Datagram::Reject)?,
        PONG => exact(HEADER_LEN).map(|_| Datagram::Pong)?,
        GAME_OVER => exact(HEADER_LEN).map(|_| Datagram::GameOver)?,
        SCORE => {
            exact(HEADER_LEN + 4)?;
            Datagram::Score(u32_at(4))
        }
        DAMAGE_EVENT => {
            exact(HEADER_LEN + 6)?;
            Datagram::Damage {
                id: u32_at(4),
                amount: u16::from_be_bytes([data[8], data[9]]),
            }
        }
        SNAPSHOT => {
            if data.len() < SNAPSHOT_HEAD {
                return Err(err(name, "short"));
            }
            let count = u16::from_be_bytes([data[4], data[5]]);
            let records = &data[SNAPSHOT_HEAD..];
            if records.len() != usize::from(count) * ENTITY_LEN {
                return Err(err(name, "count_mismatch"));
            }
            Datagram::Snapshot(Snapshot { count, records })
        }
        CONNECT | DISCONNECT | INPUT | PING => return Err(err(name, "wrong_direction")),
        _ => return Ok(None),
    }))
}

/// Whether `data` is a well-formed server datagram of this dialect (for the spec dialect's
/// `dialect_hint.implementation`).
pub fn fits(data: &[u8]) -> bool {
    matches!(decode(data), Ok(Some(_)))
}

/// Write a bare client datagram (CONNECT, DISCONNECT, PING: the header alone) into `buf`.
pub fn encode_bare(buf: &mut [u8], ty: u8) -> Option<usize> {
    let b = buf.get_mut(..HEADER_LEN)?;
    b.copy_from_slice(&[ty, VERSION, 0, HEADER_LEN as u8]);
    Some(HEADER_LEN)
}

/// Write an INPUT (header and the key flags: bit 0 up, 1 down, 2 left, 3 right, 4 shoot).
pub fn encode_input(buf: &mut [u8], flags: u8) -> Option<usize> {
    let b = buf.get_mut(..HEADER_LEN + 1)?;
    b.copy_from_slice(&[INPUT, VERSION, 0, 5, flags & 0x1F]);
    Some(HEADER_LEN + 1)
}

/// Write the framed HELLO (`len u32`, type, request id, `version u16`) into `buf`.
pub fn encode_hello(buf: &mut [u8], request_id: u32, version: u16) -> Option<usize> {
    const PAYLOAD: usize = TCP_HEAD + 2;
    let b = buf.get_mut(..4 + PAYLOAD)?;
    b[..4].copy_from_slice(&(PAYLOAD as u32).to_be_bytes());
    b[4] = HELLO;
    b[5..9].copy_from_slice(&request_id.to_be_bytes());
    b[9..11].copy_from_slice(&version.to_be_bytes());
    Some(4 + PAYLOAD)
}

/// A message of the login stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpMessage {
    Welcome {
        request_id: u32,
        version: u16,
        session_id: u32,
        udp_port: u16,
    },
    /// ERROR_MESSAGE: `code u16`, then a `str16` text (checked, not kept).
    Error { request_id: u32, code: u16 },
    /// A room message (ROOMS_LIST ... GAME_START): the bot asks for none; counted.
    Other { ty: u8 },
}

/// Read one frame's payload.
pub fn decode_tcp(payload: &[u8]) -> Result<TcpMessage, DecodeError> {
    let mut r = Reader::<Be>::new(payload);
    let head = |e: WireError| err("tcp", e.reason());
    let ty = r.u8().map_err(head)?;
    let request_id = r.u32().map_err(head)?;
    match ty {
        WELCOME => {
            let bad = |e: WireError| err("WELCOME", e.reason());
            let version = r.u16().map_err(bad)?;
            let session_id = r.u32().map_err(bad)?;
            let udp_port = r.u16().map_err(bad)?;
            if r.remaining() != 0 {
                return Err(err("WELCOME", "trailing_bytes"));
            }
            Ok(TcpMessage::Welcome {
                request_id,
                version,
                session_id,
                udp_port,
            })
        }
        ERROR_MESSAGE => {
            let bad = |e: WireError| err("ERROR_MESSAGE", e.reason());
            let code = r.u16().map_err(bad)?;
            let len = usize::from(r.u16().map_err(bad)?);
            r.take(len).map_err(bad)?;
            Ok(TcpMessage::Error { request_id, code })
        }
        TCP_ROOM_MIN..=TCP_SERVER_MAX => Ok(TcpMessage::Other { ty }),
        _ => Err(err("tcp", "unknown_type")),
    }
}

/// Reassembles the login stream into frames, in a buffer bounded by one largest frame.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
}

/// What [`FrameReader::next_frame`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A whole frame's payload.
    Payload(&'a [u8]),
    /// Not a whole frame yet.
    Partial,
    /// A length of 0 or above [`MAX_FRAME`]: the stream cannot be followed past it.
    BadLength(u32),
}

impl FrameReader {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held: the frame returned last included, until the next call consumes it.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Drop the frame [`FrameReader::next_frame`] returned last (call after using it).
    fn consume(&mut self, n: usize) {
        self.buf.drain(..n.min(self.buf.len()));
    }

    /// The next whole frame, consumed by the following call.
    pub fn next_frame(&mut self, consumed: &mut usize) -> Frame<'_> {
        self.consume(std::mem::take(consumed));
        if self.buf.len() < 4 {
            return Frame::Partial;
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        let n = len as usize;
        if n == 0 || n > MAX_FRAME {
            return Frame::BadLength(len);
        }
        if self.buf.len() < 4 + n {
            return Frame::Partial;
        }
        *consumed = 4 + n;
        Frame::Payload(&self.buf[4..4 + n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(entities: &[(u64, f32, f32, u32)]) -> Vec<u8> {
        let len = SNAPSHOT_HEAD + entities.len() * ENTITY_LEN;
        let mut d = vec![SNAPSHOT, VERSION];
        d.extend_from_slice(&(len as u16).to_be_bytes());
        d.extend_from_slice(&(entities.len() as u16).to_be_bytes());
        for (id, x, y, s) in entities {
            d.extend_from_slice(&id.to_be_bytes());
            d.extend_from_slice(&x.to_bits().to_be_bytes());
            d.extend_from_slice(&y.to_bits().to_be_bytes());
            d.extend_from_slice(&s.to_be_bytes());
        }
        d
    }

    #[test]
    fn a_snapshot_reads_its_records_in_network_order() {
        let d = snapshot(&[(7, 100.0, -2.5, 3), (1 << 40, 0.0, 1.0, 0)]);
        let Ok(Some(Datagram::Snapshot(s))) = decode(&d) else {
            panic!("a snapshot");
        };
        assert_eq!(s.count(), 2);
        let e: Vec<_> = s.entities().collect();
        assert_eq!(
            e[0],
            SnapEntity {
                id: 7,
                x: 100.0,
                y: -2.5,
                sprite: 3
            }
        );
        assert_eq!(e[1].id, 1 << 40);
        // 100.0 is 42 C8 00 00 on the wire.
        assert_eq!(&d[14..18], &[0x42, 0xC8, 0, 0]);
    }

    #[test]
    fn header_rules_are_the_servers() {
        assert_eq!(decode(&[ACCEPT, 1, 0]).unwrap_err().reason, "short");
        assert_eq!(decode(&[ACCEPT, 2, 0, 4]).unwrap_err().reason, "version");
        assert_eq!(
            decode(&[ACCEPT, 1, 0, 6, 0]).unwrap_err().reason,
            "size_mismatch"
        );
        assert_eq!(decode(&[ACCEPT, 1, 0, 5, 0]).unwrap_err().reason, "length");
        assert!(matches!(
            decode(&[ACCEPT, 1, 0, 4]),
            Ok(Some(Datagram::Accept))
        ));
        assert!(matches!(decode(&[PONG, 1, 0, 4]), Ok(Some(Datagram::Pong))));
        assert!(matches!(decode(&[0x7F, 1, 0, 4]), Ok(None)));
        assert_eq!(
            decode(&[PING, 1, 0, 4]).unwrap_err().reason,
            "wrong_direction"
        );
        let mut d = snapshot(&[(1, 0.0, 0.0, 0)]);
        d[5] = 2; // count 2, one record
        assert_eq!(decode(&d).unwrap_err().reason, "count_mismatch");
        assert!(matches!(
            decode(&[SCORE, 1, 0, 8, 0, 0, 1, 0]),
            Ok(Some(Datagram::Score(256)))
        ));
    }

    #[test]
    fn client_datagrams_are_bare_headers_and_a_five_byte_input() {
        let mut b = [0u8; 16];
        assert_eq!(encode_bare(&mut b, CONNECT), Some(4));
        assert_eq!(&b[..4], &[1, 1, 0, 4]);
        assert_eq!(encode_input(&mut b, 0b1_0101), Some(5));
        assert_eq!(&b[..5], &[3, 1, 0, 5, 0b1_0101]);
    }

    #[test]
    fn hello_is_framed_and_welcome_reads_back() {
        let mut b = [0u8; 32];
        let n = encode_hello(&mut b, 9, 1).expect("fits");
        assert_eq!(&b[..n], &[0, 0, 0, 7, HELLO, 0, 0, 0, 9, 0, 1]);
        let welcome = [WELCOME, 0, 0, 0, 9, 0, 1, 0, 0, 0, 42, 0, 0];
        assert_eq!(
            decode_tcp(&welcome),
            Ok(TcpMessage::Welcome {
                request_id: 9,
                version: 1,
                session_id: 42,
                udp_port: 0
            })
        );
        assert_eq!(
            decode_tcp(&welcome[..12]).unwrap_err(),
            err("WELCOME", "truncated")
        );
        let error = [ERROR_MESSAGE, 0, 0, 0, 9, 0, 3, 0, 2, b'n', b'o'];
        assert_eq!(
            decode_tcp(&error),
            Ok(TcpMessage::Error {
                request_id: 9,
                code: 3
            })
        );
    }

    #[test]
    fn frames_are_reassembled_across_reads_and_bad_lengths_named() {
        let mut f = FrameReader::default();
        let mut used = 0;
        f.push(&[0, 0, 0, 2, 0xAA]);
        assert_eq!(f.next_frame(&mut used), Frame::Partial);
        f.push(&[0xBB, 0, 0, 0, 1, 0xCC]);
        assert_eq!(f.next_frame(&mut used), Frame::Payload(&[0xAA, 0xBB]));
        assert_eq!(f.next_frame(&mut used), Frame::Payload(&[0xCC]));
        assert_eq!(f.next_frame(&mut used), Frame::Partial);
        f.push(&[0, 1, 0, 1]);
        assert_eq!(f.next_frame(&mut used), Frame::BadLength(65537));
    }

    /// The spec dialect's datagrams do not pass as this dialect's, and this dialect's do.
    #[test]
    fn fits_tells_the_dialects_apart() {
        assert!(fits(&[ACCEPT, 1, 0, 4]));
        assert!(fits(&snapshot(&[(1, 0.0, 0.0, 0)])));
        // Spec ACCEPT (10), PONG (12), ENTITY_DESTROY (21, 8 bytes).
        assert!(!fits(&[10, 1, 0, 4]));
        assert!(!fits(&[12, 1, 0, 4]));
        assert!(!fits(&[21, 1, 0, 8, 0, 0, 0, 1]));
    }
}
