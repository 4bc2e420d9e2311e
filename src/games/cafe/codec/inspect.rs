//! Decode-only reading of cafe datagrams for `tickswarm inspect` (see
//! `crate::protocol::inspect`): the codec decides, and its reasons are turned into the byte
//! where a datagram stops reading as this dialect.

use super::{self as codec, Dialect, Message, HEADER_LEN, RECORD_LEN, STATS_LEN};
use crate::protocol::prelude::inspect::{exact_len, Direction, Inspect, Mismatch, Role, Seen};
use crate::protocol::prelude::Keys;

/// One flow read as one cafe dialect.
pub struct CafeInspect {
    dialect: Dialect,
}

impl CafeInspect {
    /// A reader of `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        Self { dialect }
    }
}

impl Inspect for CafeInspect {
    fn message(&mut self, dir: Direction, data: &[u8]) -> Result<Seen, Mismatch> {
        let (seq, msg) = codec::decode(data, self.dialect).map_err(|e| self.mismatch(data, e))?;
        let seen = match (msg, dir) {
            (Message::Hello { .. }, _) => Seen::new("hello", Role::Other),
            (Message::Welcome { .. }, _) => Seen::new("welcome", Role::Other),
            // The mask's low byte is the key bits in the scenario's order (cafe.md §3).
            (Message::Input { input_mask, .. }, _) => {
                Seen::new("input", Role::Input).keys(Keys(input_mask.to_le_bytes()[0]))
            }
            (Message::Snapshot(_), _) => Seen::new("snapshot", Role::Snapshot),
            // Ping works both ways and is echoed unchanged: the client's ping and the
            // server's echo pair up by the timestamp token.
            (Message::Ping { timestamp_ms }, Direction::ToServer) => {
                Seen::new("ping", Role::Ping).ping(u64::from(timestamp_ms))
            }
            (Message::Ping { timestamp_ms }, Direction::ToClient) => {
                Seen::new("ping", Role::Pong).ping(u64::from(timestamp_ms))
            }
            (Message::Disconnect, _) => Seen::new("disconnect", Role::Other),
        };
        Ok(seen.seq(u64::from(seq)))
    }
}

impl CafeInspect {
    /// Where `data` fails, from the codec's reason.
    fn mismatch(&self, data: &[u8], e: codec::DecodeError) -> Mismatch {
        let types = if self.dialect.has_disconnect() {
            "0-5"
        } else {
            "0-4 (this dialect has no Disconnect)"
        };
        match (e.message, e.reason) {
            ("header", "truncated") => Mismatch::at(
                data.len(),
                format!("an {HEADER_LEN}-byte header (magic, version, type, seq)"),
            ),
            ("header", "bad_magic") => Mismatch::at(0, "magic 0xCAFE (bytes FE CA)"),
            ("header", "bad_version") => Mismatch::at(2, "version 1"),
            ("header", "unknown_type") => Mismatch::at(3, format!("a message type {types}")),
            ("snapshot", reason) => self.snapshot_mismatch(data, reason),
            (kind, _) => {
                let body = match kind {
                    "hello" => 16,
                    "welcome" => 4,
                    "input" => 8,
                    "ping" => 4,
                    _ => 0,
                };
                exact_len(data, HEADER_LEN + body, kind)
                    .err()
                    .unwrap_or_else(|| Mismatch::at(HEADER_LEN, format!("a {kind} body")))
            }
        }
    }

    fn snapshot_mismatch(&self, data: &[u8], reason: &str) -> Mismatch {
        let fixed = match self.dialect {
            Dialect::Spec => codec::SNAPSHOT_FIXED_LEN,
            Dialect::Implementation => codec::SNAPSHOT_FIXED_LEN_IMPL,
        };
        let other = match reason {
            codec::FITS_IMPLEMENTATION => " (its length fits the implementation dialect)",
            codec::FITS_SPEC => " (its length fits the spec dialect)",
            _ => "",
        };
        let body = data.len().saturating_sub(HEADER_LEN);
        if reason == "count_mismatch" {
            return Mismatch::at(
                HEADER_LEN + 10,
                format!("count u16 agreeing with the records' bytes{other}"),
            );
        }
        Mismatch::at(
            HEADER_LEN + fixed,
            format!(
                "{RECORD_LEN}-byte records then a {STATS_LEN}-byte trailer: a body of {} + \
                 {RECORD_LEN}·n bytes, not {body}{other}",
                fixed + STATS_LEN
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Input as cafe.md §3 lays it out, by hand: FE CA, version 1, type 2, seq 7, player 3,
    /// keys 0x0005, client time 1000.
    const INPUT: [u8; 16] = [0xFE, 0xCA, 1, 2, 7, 0, 0, 0, 3, 0, 5, 0, 0xE8, 0x03, 0, 0];

    #[test]
    fn an_input_reads_with_its_seq_and_a_bad_magic_fails_at_byte_0() {
        let mut i = CafeInspect::new(Dialect::Spec);
        let s = i.message(Direction::ToServer, &INPUT).expect("reads");
        assert_eq!((s.kind, s.role, s.seq), ("input", Role::Input, Some(7)));
        assert_eq!(s.keys, Some(Keys(Keys::UP | Keys::LEFT)));
        let mut bad = INPUT;
        bad[0] = 0xFF;
        assert_eq!(i.message(Direction::ToServer, &bad).unwrap_err().offset, 0);
        assert_eq!(
            i.message(Direction::ToServer, &INPUT[..12])
                .unwrap_err()
                .offset,
            12
        );
    }

    #[test]
    fn an_implementation_snapshot_read_as_spec_names_the_other_dialect() {
        // tick 1, flags 1, paused 0, last_input 9, count 0, stats 14 zero bytes.
        let mut d = vec![0xFE, 0xCA, 1, 3, 1, 0, 0, 0];
        d.extend_from_slice(&[1, 0, 0, 0, 1, 0, 9, 0, 0, 0, 0, 0]);
        d.extend_from_slice(&[0; 14]);
        let mut imp = CafeInspect::new(Dialect::Implementation);
        assert_eq!(
            imp.message(Direction::ToClient, &d).map(|s| s.role),
            Ok(Role::Snapshot)
        );
        let e = CafeInspect::new(Dialect::Spec)
            .message(Direction::ToClient, &d)
            .unwrap_err();
        assert_eq!(e.offset, 14);
        assert!(e.expected.contains("implementation"), "{e}");
    }
}
