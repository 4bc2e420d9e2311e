//! The POC-2 benchmark server's wire format (`dialect: benchmark`).
//!
//! Every message starts with a 16-byte header, little-endian: magic `ZCNT`, `version u8` (1),
//! `type u8`, `flags u8` (`0x01` compressed), a padding byte, `payload_length u32`, and
//! `sequence u32`, which carries the **server tick** the message belongs to (an ack carries
//! the tick it acknowledges). Four types: FullSnapshot (1), DeltaSnapshot (2), SnapshotAck
//! (3) and ResyncRequest (4); the last two are bare headers a client sends.
//!
//! A compressed payload is `u32 uncompressed size` + one LZ4 *block*. The server compresses
//! every snapshot; the decoder also takes an uncompressed one (flag clear), as the real
//! client does.
//!
//! - FullSnapshot body: `count u32`, then `count` positions (`x, y, z f32`), then `count`
//!   data components (`type_id u32, flags u32, value f32`): the world's two arrays, 24 bytes
//!   an entity.
//! - DeltaSnapshot body: `checksum u64` (FNV-1a over those two arrays after the tick),
//!   `count u16`, then per changed entity `id u16 · mask u8` and the fields the mask names,
//!   4 bytes each in the order x, y, z, type_id, flags, value.
//!
//! Checks are stricter than the real client's (which trusts `payload_length` and ignores
//! trailing bytes): a message must be exactly as long as its header says, a body exactly as
//! long as its count says, and a mask may name only the six fields. Decoding borrows from the
//! packet or the caller's decompression buffer: nothing is allocated per message.

use thiserror::Error;

pub const HEADER_LEN: usize = 16;
pub const MAGIC: [u8; 4] = *b"ZCNT";
/// The version the server writes (the real client does not check it; this one does).
pub const VERSION: u8 = 1;
pub const FLAG_COMPRESSED: u8 = 0x01;
/// ENet channels of the server's host: 0 acks (reliable), 1 FullSnapshot (reliable),
/// 2 DeltaSnapshot (unsequenced).
pub const CHANNELS: usize = 3;
pub const CHANNEL_ACK: u8 = 0;
pub const CHANNEL_FULL: u8 = 1;
pub const CHANNEL_DELTA: u8 = 2;
/// Bytes of one entity in a FullSnapshot (a position and a data component).
pub const ENTITY_BYTES: usize = 24;
/// Entities a world may hold: deltas name entities by a `u16`, so no more can be kept up
/// to date.
pub const MAX_ENTITIES: usize = 1 << 16;
/// Largest FullSnapshot body: `count` and 65,536 entities.
pub const MAX_FULL_BODY: usize = 4 + MAX_ENTITIES * ENTITY_BYTES;
/// Largest DeltaSnapshot body: checksum, count, 65,535 entries of every field.
pub const MAX_DELTA_BODY: usize = 10 + 0xFFFF * (3 + 6 * 4);
/// The largest body either message may decompress to.
pub const MAX_BODY: usize = if MAX_FULL_BODY > MAX_DELTA_BODY {
    MAX_FULL_BODY
} else {
    MAX_DELTA_BODY
};
/// The six fields a delta mask may name (x, y, z, type_id, flags, value).
pub const FIELD_ALL: u8 = 0x3F;

/// Message types.
pub mod ty {
    pub const FULL_SNAPSHOT: u8 = 1;
    pub const DELTA_SNAPSHOT: u8 = 2;
    pub const SNAPSHOT_ACK: u8 = 3;
    pub const RESYNC_REQUEST: u8 = 4;
}

/// A malformed message, counted as `message.reason`: the one type of every ZergCity dialect.
pub use crate::games::zergcity::codec::DecodeError;
use crate::games::zergcity::dialects::lz4_sized::Lz4Sized;

/// The 16-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    pub ty: u8,
    pub flags: u8,
    pub payload_length: u32,
    /// The server tick (or, in an ack, the acknowledged tick).
    pub sequence: u32,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl Header {
    /// Magic and length checked; the version and type are the caller's to judge.
    pub fn parse(b: &[u8]) -> Result<Header, DecodeError> {
        if b.len() < HEADER_LEN {
            return Err(DecodeError::new("header", "truncated"));
        }
        if b[..4] != MAGIC {
            return Err(DecodeError::new("header", "bad_magic"));
        }
        Ok(Header {
            version: b[4],
            ty: b[5],
            flags: b[6],
            payload_length: u32_at(b, 8),
            sequence: u32_at(b, 12),
        })
    }

    pub fn compressed(&self) -> bool {
        self.flags & FLAG_COMPRESSED != 0
    }
}

/// A server message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    Full(Full<'a>),
    Delta(Delta<'a>),
}

/// A FullSnapshot: the world's two arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full<'a> {
    pub tick: u32,
    pub count: u32,
    /// `count × 12` bytes of positions, then `count × 12` bytes of data components.
    pub world: &'a [u8],
}

/// A DeltaSnapshot, checked to hold `count` sound entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delta<'a> {
    pub tick: u32,
    pub checksum: u64,
    pub count: u16,
    /// Highest entity id named (to check against the world the bot holds).
    pub max_id: Option<u16>,
    entries: &'a [u8],
}

/// One changed entity: the fields its mask names, as raw 4-byte values in field order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub id: u16,
    pub mask: u8,
    pub values: [[u8; 4]; 6],
}

impl<'a> Delta<'a> {
    pub fn entries(&self) -> impl Iterator<Item = Entry> + 'a {
        let mut b = self.entries;
        (0..self.count).map_while(move |_| {
            let (&[i0, i1, mask], rest) = b.split_first_chunk::<3>()?;
            b = rest;
            let mut values = [[0u8; 4]; 6];
            for (bit, v) in values.iter_mut().enumerate() {
                if mask & (1 << bit) != 0 {
                    let (x, rest) = b.split_first_chunk::<4>()?;
                    *v = *x;
                    b = rest;
                }
            }
            Some(Entry {
                id: u16::from_le_bytes([i0, i1]),
                mask,
                values,
            })
        })
    }
}

/// Decompresses snapshot bodies into a buffer kept between messages.
#[derive(Debug, Default)]
pub struct Decompressor(Lz4Sized);

impl Decompressor {
    /// Largest stated size accepted (never above [`MAX_BODY`]).
    pub fn set_limit(&mut self, limit: usize) {
        self.0.set_limit(limit.min(MAX_BODY));
    }

    fn inflate(&mut self, msg: &'static str, data: &[u8]) -> Result<&[u8], DecodeError> {
        self.0.inflate(msg, data)
    }

    /// Give a buffer grown past 1 MiB back.
    pub fn shrink(&mut self) {
        self.0.shrink()
    }
}

/// Decode one server message (one ENet packet).
pub fn decode<'a>(packet: &'a [u8], dec: &'a mut Decompressor) -> Result<Message<'a>, DecodeError> {
    let h = Header::parse(packet)?;
    if h.version != VERSION {
        return Err(DecodeError::new("header", "bad_version"));
    }
    let msg = match h.ty {
        ty::FULL_SNAPSHOT => "full_snapshot",
        ty::DELTA_SNAPSHOT => "delta_snapshot",
        _ => return Err(DecodeError::new("header", "unknown_type")),
    };
    let payload = &packet[HEADER_LEN..];
    match (h.payload_length as usize).cmp(&payload.len()) {
        std::cmp::Ordering::Greater => return Err(DecodeError::new(msg, "truncated")),
        std::cmp::Ordering::Less => return Err(DecodeError::new(msg, "trailing_bytes")),
        std::cmp::Ordering::Equal => {}
    }
    let body = if h.compressed() {
        dec.inflate(msg, payload)?
    } else {
        payload
    };
    if h.ty == ty::FULL_SNAPSHOT {
        parse_full(h.sequence, body).map(Message::Full)
    } else {
        parse_delta(h.sequence, body).map(Message::Delta)
    }
}

fn parse_full(tick: u32, body: &[u8]) -> Result<Full<'_>, DecodeError> {
    let Some((count, world)) = body.split_first_chunk::<4>() else {
        return Err(DecodeError::new("full_snapshot", "truncated"));
    };
    let count = u32::from_le_bytes(*count);
    if count as usize > MAX_ENTITIES {
        return Err(DecodeError::new("full_snapshot", "too_many_entities"));
    }
    if world.len() != count as usize * ENTITY_BYTES {
        return Err(DecodeError::new("full_snapshot", "bad_size"));
    }
    Ok(Full { tick, count, world })
}

fn parse_delta(tick: u32, body: &[u8]) -> Result<Delta<'_>, DecodeError> {
    if body.len() < 10 {
        return Err(DecodeError::new("delta_snapshot", "truncated"));
    }
    let checksum = u64::from_le_bytes(body[..8].try_into().unwrap_or([0; 8]));
    let count = u16::from_le_bytes([body[8], body[9]]);
    let entries = &body[10..];
    let mut at = 0usize;
    let mut max_id: Option<u16> = None;
    for _ in 0..count {
        let Some(e) = entries.get(at..at + 3) else {
            return Err(DecodeError::new("delta_snapshot", "truncated"));
        };
        let id = u16::from_le_bytes([e[0], e[1]]);
        let mask = e[2];
        if mask & !FIELD_ALL != 0 {
            return Err(DecodeError::new("delta_snapshot", "bad_field_mask"));
        }
        at += 3 + 4 * mask.count_ones() as usize;
        if at > entries.len() {
            return Err(DecodeError::new("delta_snapshot", "truncated"));
        }
        max_id = Some(max_id.map_or(id, |m| m.max(id)));
    }
    if at != entries.len() {
        return Err(DecodeError::new("delta_snapshot", "trailing_bytes"));
    }
    Ok(Delta {
        tick,
        checksum,
        count,
        max_id,
        entries,
    })
}

/// FNV-1a (64-bit) over `bytes`: the server's world checksum, over its position array then
/// its data array (the bytes of a FullSnapshot after `count`).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Whether `packet` reads as this dialect's server speaking: a version-1 header of a
/// compressed FullSnapshot or DeltaSnapshot (the server compresses every one), its length
/// exact, with room for the size prefix. Used to name a wrong dialect
/// (`dialect_hint.benchmark`) when another dialect's decoder refused the bytes.
pub fn fits(packet: &[u8]) -> bool {
    let Ok(h) = Header::parse(packet) else {
        return false;
    };
    h.version == VERSION
        && matches!(h.ty, ty::FULL_SNAPSHOT | ty::DELTA_SNAPSHOT)
        && h.flags == FLAG_COMPRESSED
        && packet[7] == 0
        && h.payload_length as usize == packet.len() - HEADER_LEN
        && h.payload_length >= 5
        && (u32_at(packet, HEADER_LEN) as usize) <= MAX_BODY
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum EncodeError {
    #[error("buffer too small")]
    BufferTooSmall,
    #[error("body over the largest size")]
    TooLarge,
}

fn write_header(buf: &mut [u8], t: u8, flags: u8, len: usize, seq: u32) -> Result<(), EncodeError> {
    let h = buf
        .get_mut(..HEADER_LEN)
        .ok_or(EncodeError::BufferTooSmall)?;
    let len = u32::try_from(len).map_err(|_| EncodeError::TooLarge)?;
    h[..4].copy_from_slice(&MAGIC);
    h[4] = VERSION;
    h[5] = t;
    h[6] = flags;
    h[7] = 0;
    h[8..12].copy_from_slice(&len.to_le_bytes());
    h[12..16].copy_from_slice(&seq.to_le_bytes());
    Ok(())
}

/// SnapshotAck: a bare header, type 3, the acknowledged tick in `sequence`.
pub fn encode_ack(buf: &mut [u8], tick: u32) -> Result<usize, EncodeError> {
    write_header(buf, ty::SNAPSHOT_ACK, 0, 0, tick)?;
    Ok(HEADER_LEN)
}

/// ResyncRequest: a bare header, type 4, `sequence` 0 (as the real client sends it).
pub fn encode_resync(buf: &mut [u8]) -> Result<usize, EncodeError> {
    write_header(buf, ty::RESYNC_REQUEST, 0, 0, 0)?;
    Ok(HEADER_LEN)
}

/// A compressed snapshot message (the server's side: reference server and tests):
/// header, `u32 size`, LZ4 block of `body`.
pub fn encode_compressed(
    buf: &mut [u8],
    t: u8,
    tick: u32,
    body: &[u8],
) -> Result<usize, EncodeError> {
    if body.len() > MAX_BODY {
        return Err(EncodeError::TooLarge);
    }
    let out = buf
        .get_mut(HEADER_LEN + 4..)
        .ok_or(EncodeError::BufferTooSmall)?;
    let n = lz4_flex::block::compress_into(body, out).map_err(|_| EncodeError::BufferTooSmall)?;
    buf[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&(body.len() as u32).to_le_bytes());
    write_header(buf, t, FLAG_COMPRESSED, 4 + n, tick)?;
    Ok(HEADER_LEN + 4 + n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec() -> Decompressor {
        let mut d = Decompressor::default();
        d.set_limit(MAX_BODY);
        d
    }

    /// An ack, byte for byte: magic, version 1, type 3, flags 0, padding, length 0, tick.
    #[test]
    fn an_ack_is_a_bare_header_carrying_the_tick() {
        let mut b = [0u8; 32];
        assert_eq!(encode_ack(&mut b, 0x0102_0304), Ok(16));
        assert_eq!(
            b[..16],
            [
                0x5A, 0x43, 0x4E, 0x54, 0x01, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x03,
                0x02, 0x01
            ]
        );
        assert_eq!(encode_resync(&mut b), Ok(16));
        assert_eq!(
            b[..16],
            [0x5A, 0x43, 0x4E, 0x54, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    /// A FullSnapshot of two entities, written by hand: LZ4 block of literals only
    /// (token 0xF0, length extension 52 - 15 = 37, the 52 bytes).
    #[test]
    fn a_hand_written_full_snapshot_decodes() {
        let mut body = vec![2, 0, 0, 0];
        for f in [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0] {
            body.extend_from_slice(&f.to_le_bytes());
        }
        body.extend_from_slice(&[7, 0, 0, 0, 8, 0, 0, 0]);
        body.extend_from_slice(&9.5f32.to_le_bytes());
        body.extend_from_slice(&[10, 0, 0, 0, 11, 0, 0, 0]);
        body.extend_from_slice(&12.5f32.to_le_bytes());
        assert_eq!(body.len(), 52);
        let mut block = vec![0xF0, 37];
        block.extend_from_slice(&body);
        let mut pkt = vec![0x5A, 0x43, 0x4E, 0x54, 1, 1, 1, 0];
        pkt.extend_from_slice(&(4u32 + block.len() as u32).to_le_bytes());
        pkt.extend_from_slice(&77u32.to_le_bytes());
        pkt.extend_from_slice(&52u32.to_le_bytes());
        pkt.extend_from_slice(&block);
        assert!(fits(&pkt));
        let mut d = dec();
        let Ok(Message::Full(f)) = decode(&pkt, &mut d) else {
            panic!("{:?}", decode(&pkt, &mut dec()))
        };
        assert_eq!((f.tick, f.count), (77, 2));
        assert_eq!(&f.world[..4], &1.0f32.to_le_bytes());
        assert_eq!(&f.world[24..28], &[7, 0, 0, 0]);
        assert_eq!(fnv1a(f.world), fnv1a(&body[4..]));
    }

    /// A DeltaSnapshot sent uncompressed (flag clear): checksum, count 2, entity 5 with x and
    /// value, entity 300 with flags.
    #[test]
    fn a_hand_written_delta_decodes_field_by_field() {
        let mut pkt = vec![0x5A, 0x43, 0x4E, 0x54, 1, 2, 0, 0];
        let body: Vec<u8> = [
            &0x1122_3344_5566_7788u64.to_le_bytes()[..],
            &[2, 0],
            &[5, 0, 0x21],
            &1.5f32.to_le_bytes(),
            &2.5f32.to_le_bytes(),
            &[0x2C, 0x01, 0x10],
            &[0xAA, 0, 0, 0],
        ]
        .concat();
        pkt.extend_from_slice(&(body.len() as u32).to_le_bytes());
        pkt.extend_from_slice(&9u32.to_le_bytes());
        pkt.extend_from_slice(&body);
        assert!(!fits(&pkt), "the server compresses every delta");
        let mut d = dec();
        let Ok(Message::Delta(delta)) = decode(&pkt, &mut d) else {
            panic!()
        };
        assert_eq!(delta.tick, 9);
        assert_eq!(delta.checksum, 0x1122_3344_5566_7788);
        assert_eq!(delta.max_id, Some(300));
        let e: Vec<Entry> = delta.entries().collect();
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].id, e[0].mask), (5, 0x21));
        assert_eq!(e[0].values[0], 1.5f32.to_le_bytes());
        assert_eq!(e[0].values[5], 2.5f32.to_le_bytes());
        assert_eq!((e[1].id, e[1].values[4]), (300, [0xAA, 0, 0, 0]));
    }

    #[test]
    fn broken_messages_are_named() {
        let mut d = dec();
        let reason = |p: &[u8], d: &mut Decompressor| decode(p, d).unwrap_err().reason;
        assert_eq!(reason(b"ZCNT\x01\x02", &mut d), "truncated");
        assert_eq!(
            reason(b"ZCNX\x01\x02\0\0\0\0\0\0\0\0\0\0", &mut d),
            "bad_magic"
        );
        assert_eq!(
            reason(b"ZCNT\x02\x02\0\0\0\0\0\0\0\0\0\0", &mut d),
            "bad_version"
        );
        assert_eq!(
            reason(b"ZCNT\x01\x03\0\0\0\0\0\0\0\0\0\0", &mut d),
            "unknown_type"
        );
        assert_eq!(
            reason(b"ZCNT\x01\x02\0\0\x05\0\0\0\0\0\0\0", &mut d),
            "truncated"
        );
        // A delta whose mask names a seventh field.
        let mut p = b"ZCNT\x01\x02\0\0\x0d\0\0\0\0\0\0\0".to_vec();
        p.extend_from_slice(&[0; 8]);
        p.extend_from_slice(&[1, 0, 0, 0, 0x40]);
        assert_eq!(reason(&p, &mut d), "bad_field_mask");
        // A full snapshot whose count says 3 entities but carries 2.
        let mut body = vec![3, 0, 0, 0];
        body.extend_from_slice(&[0; 48]);
        let mut b = vec![0u8; 256];
        let n = encode_compressed(&mut b, ty::FULL_SNAPSHOT, 1, &body).unwrap();
        assert_eq!(reason(&b[..n], &mut d), "bad_size");
        // A stated size over the limit is refused before any work.
        let mut small = Decompressor::default();
        small.set_limit(16);
        assert_eq!(reason(&b[..n], &mut small), "decompressed_too_large");
        // Corrupt LZ4.
        let mut p = b"ZCNT\x01\x02\x01\0\x08\0\0\0\0\0\0\0".to_vec();
        p.extend_from_slice(&[100, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF]);
        assert_eq!(reason(&p, &mut d), "lz4_corrupt");
    }

    #[test]
    fn fnv1a_matches_its_published_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
