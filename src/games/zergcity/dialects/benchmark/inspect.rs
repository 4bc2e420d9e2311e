//! Decode-only reading of the POC-2 benchmark server's messages (`dialect: benchmark`) for
//! `tickswarm inspect` (see `crate::protocol::inspect`).
//!
//! The codec decodes what the server sends (FullSnapshot, DeltaSnapshot); what a client sends
//! (SnapshotAck, ResyncRequest: bare 16-byte headers) is checked here, by direction.
//!
//! - **FullSnapshot** and **DeltaSnapshot** are [`Role::Snapshot`], their header `sequence`
//!   (the server tick; one message a tick per client) the seq.
//! - **SnapshotAck** is [`Role::Input`] (no keys, no seq): the dialect has no player input,
//!   and the acks are the client's per-tick upstream load, which the bot counts as its
//!   `inputs_sent`; so the capture's input rate is the rate a scenario sets. No seq: an ack
//!   carries the tick it acknowledges, which skips what was lost.
//! - **ResyncRequest** is [`Role::Other`]. The dialect has no ping.

use super::codec::{self, ty, Decompressor, Message, HEADER_LEN, MAGIC, MAX_BODY, VERSION};
use crate::games::zergcity::codec::inspect::{length_mismatch, magic_mismatch, short_header};
use crate::protocol::prelude::inspect::{exact_len, Direction, Inspect, Mismatch, Role, Seen};

/// One flow read as the benchmark dialect.
pub struct BenchmarkInspect {
    dec: Decompressor,
}

impl BenchmarkInspect {
    /// A reader that decompresses snapshots of at most `max_decompressed_bytes` (the bot's
    /// option, never above the largest body the dialect allows), into one buffer reused
    /// across the flow's messages.
    pub fn new(max_decompressed_bytes: usize) -> Self {
        let mut dec = Decompressor::default();
        dec.set_limit(max_decompressed_bytes.min(MAX_BODY));
        Self { dec }
    }
}

impl Inspect for BenchmarkInspect {
    fn message(&mut self, dir: Direction, data: &[u8]) -> Result<Seen, Mismatch> {
        if data.len() < HEADER_LEN {
            return Err(short_header(data));
        }
        if data[..4] != MAGIC {
            return Err(magic_mismatch(data));
        }
        if data[4] != VERSION {
            return Err(Mismatch::at(4, "version 1"));
        }
        match dir {
            Direction::ToServer => {
                let name = match data[5] {
                    ty::SNAPSHOT_ACK => "SnapshotAck",
                    ty::RESYNC_REQUEST => "ResyncRequest",
                    t => {
                        return Err(Mismatch::at(
                            5,
                            format!(
                                "a client message type (3 SnapshotAck, 4 ResyncRequest), not {t}"
                            ),
                        ))
                    }
                };
                if data[8..12] != [0; 4] {
                    return Err(Mismatch::at(
                        8,
                        format!("payload_length 0 (a {name} is a bare header)"),
                    ));
                }
                exact_len(data, HEADER_LEN, &format!("bare {name} header"))?;
                let role = if data[5] == ty::SNAPSHOT_ACK {
                    Role::Input
                } else {
                    Role::Other
                };
                Ok(Seen::new(name, role))
            }
            Direction::ToClient => {
                if !matches!(data[5], ty::FULL_SNAPSHOT | ty::DELTA_SNAPSHOT) {
                    return Err(Mismatch::at(
                        5,
                        format!(
                            "a server message type (1 FullSnapshot, 2 DeltaSnapshot), not {}",
                            data[5]
                        ),
                    ));
                }
                let m = codec::decode(data, &mut self.dec).map_err(|e| mismatch(data, e))?;
                Ok(match m {
                    Message::Full(f) => {
                        Seen::new("FullSnapshot", Role::Snapshot).seq(u64::from(f.tick))
                    }
                    Message::Delta(d) => {
                        Seen::new("DeltaSnapshot", Role::Snapshot).seq(u64::from(d.tick))
                    }
                })
            }
        }
    }
}

/// Where a snapshot fails, from the codec's reason (header, magic, version and type are
/// checked before).
fn mismatch(data: &[u8], e: codec::DecodeError) -> Mismatch {
    let compressed = data
        .get(6)
        .is_some_and(|&f| f & codec::FLAG_COMPRESSED != 0);
    let body = if compressed {
        HEADER_LEN + 4
    } else {
        HEADER_LEN
    };
    let full = e.message == "full_snapshot";
    match e.reason {
        "truncated" | "trailing_bytes" if e.message == "header" || !length_fits(data) => {
            length_mismatch(data)
        }
        "truncated" if compressed && data.len() < HEADER_LEN + 4 => {
            Mismatch::at(data.len(), "an uncompressed size u32 then an LZ4 block")
        }
        "decompressed_too_large" => Mismatch::at(
            HEADER_LEN,
            "an uncompressed size within the decompression limit",
        ),
        "lz4_size_mismatch" => Mismatch::at(
            HEADER_LEN,
            "an uncompressed size equal to what the LZ4 block expands to",
        ),
        "lz4_corrupt" => Mismatch::at(HEADER_LEN + 4, "an LZ4 block"),
        r if compressed => Mismatch::at(
            body,
            format!("a {} body (decompressed, it fails: {r})", e.message),
        ),
        "too_many_entities" => Mismatch::at(body, "a count of at most 65,536 entities"),
        "bad_size" | "truncated" if full => Mismatch::at(
            body,
            format!(
                "count u32 then 24 bytes an entity: a body of 4 + 24·count bytes, not {}",
                data.len() - body
            ),
        ),
        r => delta_mismatch(data, body, r),
    }
}

/// Whether `payload_length` agrees with the message's bytes.
fn length_fits(data: &[u8]) -> bool {
    data.get(8..12)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        == Some(data.len().saturating_sub(HEADER_LEN))
}

/// Walk an uncompressed delta body (`checksum u64 · count u16 · entries`) to where it fails.
fn delta_mismatch(data: &[u8], body: usize, reason: &str) -> Mismatch {
    let Some(c) = data.get(body + 8..body + 10) else {
        return Mismatch::at(data.len(), "checksum u64 and count u16");
    };
    let count = u16::from_le_bytes([c[0], c[1]]);
    let mut at = body + 10;
    for _ in 0..count {
        let Some(&mask) = data.get(at + 2) else {
            return Mismatch::at(data.len(), "a delta entry: id u16, mask u8");
        };
        if mask & !codec::FIELD_ALL != 0 {
            return Mismatch::at(at + 2, "a field mask of bits 0x01-0x20 only");
        }
        at += 3 + 4 * mask.count_ones() as usize;
        if at > data.len() {
            return Mismatch::at(
                data.len(),
                "the fields the entry's mask names, 4 bytes each",
            );
        }
    }
    if at < data.len() {
        return Mismatch::at(
            at,
            format!(
                "the end of the delta after its {count} entries ({} bytes more)",
                data.len() - at
            ),
        );
    }
    Mismatch::at(body, format!("a DeltaSnapshot body ({reason})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The benchmark's header by hand (zergcity.md): ZCNT, version 1, `ty`, `flags`, padding,
    /// payload_length `len`, sequence `seq`.
    fn header(ty: u8, flags: u8, len: u32, seq: u32) -> Vec<u8> {
        let mut h = vec![0x5A, 0x43, 0x4E, 0x54, 1, ty, flags, 0];
        h.extend_from_slice(&len.to_le_bytes());
        h.extend_from_slice(&seq.to_le_bytes());
        h
    }

    /// A DeltaSnapshot of tick 77, uncompressed (the decoder takes it, as the real client
    /// does): checksum 0, one entry, id 3, mask 0x01 (x), x = 1.0.
    fn delta() -> Vec<u8> {
        let mut m = header(2, 0, 17, 77);
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(&[1, 0, 3, 0, 0x01, 0x00, 0x00, 0x80, 0x3F]);
        m
    }

    #[test]
    fn a_delta_reads_as_a_snapshot_with_its_tick() {
        let s = BenchmarkInspect::new(1 << 20)
            .message(Direction::ToClient, &delta())
            .expect("reads");
        assert_eq!(
            (s.kind, s.role, s.seq),
            ("DeltaSnapshot", Role::Snapshot, Some(77))
        );
    }

    #[test]
    fn a_compressed_full_snapshot_reads_with_its_tick() {
        // Body: count 0 (4 zero bytes), as one LZ4 literal run: token 0x40, 4 bytes.
        let mut m = header(1, 1, 9, 5);
        m.extend_from_slice(&[4, 0, 0, 0, 0x40, 0, 0, 0, 0]);
        let s = BenchmarkInspect::new(1 << 20)
            .message(Direction::ToClient, &m)
            .expect("reads");
        assert_eq!(
            (s.kind, s.role, s.seq),
            ("FullSnapshot", Role::Snapshot, Some(5))
        );
    }

    #[test]
    fn an_ack_is_a_bare_header_and_the_spec_ping_fails_at_its_type() {
        let mut i = BenchmarkInspect::new(1 << 20);
        let ack = header(3, 0, 0, 77);
        let s = i.message(Direction::ToServer, &ack).expect("ack");
        assert_eq!((s.kind, s.role, s.seq), ("SnapshotAck", Role::Input, None));
        // The spec's Ping is type 3 too, with a 16-byte body: payload_length at byte 8.
        let mut ping = header(3, 0, 16, 0);
        ping.extend_from_slice(&[0; 16]);
        let e = i.message(Direction::ToServer, &ping).unwrap_err();
        assert_eq!(e.offset, 8, "{e}");
        // The spec's InputMessage (0x20) is no client type here.
        let e = i
            .message(Direction::ToServer, &header(0x20, 0, 0, 0))
            .unwrap_err();
        assert_eq!(e.offset, 5, "{e}");
        // The implementation's envelope fails at byte 0.
        let hb = [1, 1, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(i.message(Direction::ToServer, &hb).unwrap_err().offset, 0);
    }

    #[test]
    fn a_truncated_or_bad_delta_fails_where_it_stops_fitting() {
        let mut i = BenchmarkInspect::new(1 << 20);
        let d = delta();
        let e = i.message(Direction::ToClient, &d[..30]).unwrap_err();
        assert_eq!(e.offset, 30, "{e}");
        // A mask naming a seventh field: byte 16 + 10 + 2.
        let mut bad = d.clone();
        bad[28] = 0x41;
        assert_eq!(i.message(Direction::ToClient, &bad).unwrap_err().offset, 28);
    }
}
