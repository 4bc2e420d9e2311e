//! Decode-only reading of the implementation dialect (the public DarkAges server's own
//! plain-UDP protocol) for `tickswarm inspect` (see `crate::protocol::inspect`): the codec
//! decides, and its reasons are turned into the byte where a datagram stops reading as this
//! dialect.
//!
//! What each packet is for the behaviour figures (docs/protocols/darkages.md, "Dialect
//! `implementation`"):
//! - INPUT's `seq` grows by one per input (from 1, skipping 0 when it wraps): given as `seq`.
//!   Its `flags` map to keys as the spec dialect's
//!   ([`keys_of_flags`]: bits 0-3
//!   and 5); yaw and pitch are not keys.
//! - SNAPSHOT's `server_tick` steps by 3 (or 6 when the real server lowers its rate), not by
//!   one: not given as `seq`.
//! - PING's `u32` is echoed by PONG: the token that pairs them.
//! - CONNECT, the CONNECT reply, DISCONNECT, EVENT and the game messages 8-21 are
//!   [`Role::Other`]; a game message's kind is its name (`inventory_sync`, ...).
//! - A client's packets must have the sizes of the document's table exactly (the real
//!   server accepts longer ones and ignores the rest; its client sends exactly these), and
//!   the server's inventory sync (19) its 201 bytes. Type 6 is CONNECT from the client and
//!   DISCONNECT from the server; a client → server 5 (PONG) goes the wrong way.

use super::codec::{
    decode_client, decode_server, game_message_name, len, ty, ClientPacket, DecodeError,
    ServerPacket,
};
use crate::games::darkages::codec::inspect::keys_of_flags;
use crate::protocol::prelude::inspect::{exact_len, Direction, Inspect, Mismatch, Role, Seen};
use crate::protocol::prelude::MAX_TRACKED_ENTITIES;

/// The inventory sync message's whole length (docs: "inventory sync (19, 201 bytes)").
const INVENTORY_SYNC_LEN: usize = 201;

/// One flow read as the implementation dialect.
#[derive(Default)]
pub struct ImplementationInspect;

impl ImplementationInspect {
    /// A reader of a new flow.
    pub fn new() -> Self {
        Self
    }
}

impl Inspect for ImplementationInspect {
    fn message(&mut self, dir: Direction, data: &[u8]) -> Result<Seen, Mismatch> {
        let t = *data.first().ok_or_else(|| Mismatch::at(0, "a type byte"))?;
        match dir {
            Direction::ToServer => client(t, data),
            Direction::ToClient => server(t, data),
        }
    }
}

/// A datagram from the client.
fn client(t: u8, data: &[u8]) -> Result<Seen, Mismatch> {
    let (name, size) = match t {
        ty::INPUT => ("INPUT", Some(len::INPUT)),
        ty::PING => ("PING", Some(len::PING)),
        ty::CONNECT => ("CONNECT", Some(len::CONNECT)),
        ty::GAME_FIRST..=ty::GAME_LAST => (game_message_name(t), None),
        _ => {
            return Err(Mismatch::at(
                0,
                format!(
                    "a client → server type: 1 INPUT, 4 PING, 6 CONNECT or a game message \
                     8-21, not {t:#04x}"
                ),
            ))
        }
    };
    if let Some(n) = size {
        exact_len(data, n, name)?;
    }
    let p = decode_client(data).map_err(|_| Mismatch::at(1, format!("a {name} body")))?;
    Ok(match p {
        ClientPacket::Input(i) => Seen::new(name, Role::Input)
            .seq(u64::from(i.sequence))
            .keys(keys_of_flags(i.flags)),
        ClientPacket::Ping(token) => Seen::new(name, Role::Ping).ping(u64::from(token)),
        ClientPacket::Connect { .. } | ClientPacket::Other(_) => Seen::new(name, Role::Other),
    })
}

/// A datagram from the server.
fn server(t: u8, data: &[u8]) -> Result<Seen, Mismatch> {
    let p = decode_server(data).map_err(|e| server_mismatch(t, data, e))?;
    Ok(match p {
        ServerPacket::Snapshot(_) => Seen::new("SNAPSHOT", Role::Snapshot),
        ServerPacket::Event(_) => Seen::new("EVENT", Role::Other),
        ServerPacket::Pong(token) => Seen::new("PONG", Role::Pong).ping(u64::from(token)),
        ServerPacket::ConnectReply { .. } => Seen::new("CONNECT reply", Role::Other),
        ServerPacket::Disconnect { .. } => Seen::new("DISCONNECT", Role::Other),
        ServerPacket::Game(g) => {
            if g == 19 {
                exact_len(data, INVENTORY_SYNC_LEN, "inventory_sync")?;
            }
            Seen::new(game_message_name(g), Role::Other)
        }
    })
}

/// Where a server datagram the codec refused stops reading.
fn server_mismatch(t: u8, data: &[u8], e: DecodeError) -> Mismatch {
    let n = data.len();
    match (t, e.message) {
        (_, "packet") => Mismatch::at(
            0,
            format!(
                "a server → client type: 2 SNAPSHOT, 3 EVENT, 5 PONG, 6 DISCONNECT, 7 CONNECT \
                 reply or a game message 8-21, not {t:#04x}"
            ),
        ),
        (ty::SNAPSHOT, _) => snapshot(data, e),
        (ty::EVENT, _) => event(data),
        (ty::PONG, _) => exact_len(data, len::PONG, "PONG")
            .err()
            .unwrap_or_else(|| Mismatch::at(1, "a PONG u32")),
        (ty::CONNECT_REPLY, _) => {
            let what = "a CONNECT reply of 6 bytes ([7][success u8][entity_id u32]) or 10 \
                        (zone_id u32 after)";
            if n > len::CONNECT_REPLY {
                Mismatch::at(len::CONNECT_REPLY, format!("the end of {what}"))
            } else {
                Mismatch::at(n, format!("{what} (it ends at {n})"))
            }
        }
        (ty::DISCONNECT, _) => exact_len(data, len::DISCONNECT, "DISCONNECT")
            .err()
            .unwrap_or_else(|| Mismatch::at(1, "a DISCONNECT reason length u8")),
        _ => Mismatch::at(1, format!("a body ({}.{})", e.message, e.reason)),
    }
}

/// Where a SNAPSHOT stops reading.
fn snapshot(data: &[u8], e: DecodeError) -> Mismatch {
    let n = data.len();
    let h = len::SNAPSHOT_HEADER;
    let Some(count) = data
        .get(9..13)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    else {
        return Mismatch::at(
            n,
            format!(
                "a {h}-byte SNAPSHOT header (server_tick u32, last_input_seq u32, count u32; it \
                 ends at {n})"
            ),
        );
    };
    if e.reason == "too_many_entities" {
        return Mismatch::at(
            9,
            format!("count u32 of at most {MAX_TRACKED_ENTITIES} entities, not {count}"),
        );
    }
    let want = h + len::ENTITY * count as usize;
    if want > n {
        Mismatch::at(
            n,
            format!(
                "count {count} (u32 at 9) × {}-byte entities: a SNAPSHOT of {want} bytes (it \
                 ends at {n})",
                len::ENTITY
            ),
        )
    } else {
        Mismatch::at(
            want,
            format!(
                "the end of the SNAPSHOT after count {count} (u32 at 9) entities ({} bytes \
                 more)",
                n - want
            ),
        )
    }
}

/// Where an EVENT stops reading: a 19-byte combat event, or a zone handoff whose lengths
/// account for every byte and whose host and token are printable.
fn event(data: &[u8]) -> Mismatch {
    let n = data.len();
    let combat = len::COMBAT_EVENT;
    let Some(&sub) = data.get(1) else {
        return Mismatch::at(n, "an EVENT subtype u8");
    };
    match sub {
        2 | 3 => {
            return exact_len(data, combat, "combat EVENT")
                .err()
                .unwrap_or_else(|| Mismatch::at(1, "a combat EVENT"))
        }
        1 => {}
        _ => {
            return Mismatch::at(
                1,
                format!(
                    "an EVENT subtype 1-3 (1 damage or zone handoff, 2 death, 3 heal), not {sub}"
                ),
            )
        }
    }
    let either = format!("a {combat}-byte damage EVENT or a zone handoff");
    let Some(&host_len) = data.get(6) else {
        return Mismatch::at(
            n,
            format!("{either}: zone u32 at 2, host_len u8 at 6 (it ends at {n})"),
        );
    };
    let h = usize::from(host_len);
    if h == 0 {
        return Mismatch::at(6, format!("{either} with a host: host_len above 0"));
    }
    let Some(&tok_len) = data.get(9 + h) else {
        return Mismatch::at(
            n,
            format!("{either}: a {h}-byte host (host_len u8 at 6), port u16, tok_len u8 (it ends at {n})"),
        );
    };
    let end = 10 + h + usize::from(tok_len);
    if end > n {
        return Mismatch::at(
            n,
            format!(
                "{either}: a {tok_len}-byte token (tok_len u8 at {}; it ends at {n})",
                9 + h
            ),
        );
    }
    if end < n {
        return Mismatch::at(
            end,
            format!(
                "the end of a zone handoff after its {tok_len}-byte token ({} bytes more)",
                n - end
            ),
        );
    }
    let bad = |from: usize, to: usize| {
        data.get(from..to)
            .and_then(|b| b.iter().position(|c| !c.is_ascii_graphic()))
            .map(|i| from + i)
    };
    if let Some(at) = bad(7, 7 + h) {
        return Mismatch::at(at, format!("{either}: a printable ASCII host"));
    }
    if let Some(at) = bad(10 + h, end) {
        return Mismatch::at(at, format!("{either}: a printable ASCII token"));
    }
    Mismatch::at(1, either)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::prelude::Keys;

    /// INPUT by hand from darkages.md, little-endian: type 1, seq 3, timestamp 1000, flags
    /// backward | right | attack | interact (0x012A), yaw 15000 (1.5 rad), pitch 0, target 0.
    const INPUT: [u8; 19] = [
        1, 3, 0, 0, 0, 0xE8, 0x03, 0, 0, 0x2A, 0x01, 0x98, 0x3A, 0, 0, 0, 0, 0, 0,
    ];

    #[test]
    fn an_input_reads_with_its_seq_and_keys() {
        let s = ImplementationInspect::new()
            .message(Direction::ToServer, &INPUT)
            .expect("reads");
        assert_eq!((s.kind, s.role, s.seq), ("INPUT", Role::Input, Some(3)));
        assert_eq!(s.keys, Some(Keys(Keys::DOWN | Keys::RIGHT | Keys::SHOOT)));
        let e = ImplementationInspect::new()
            .message(Direction::ToServer, &INPUT[..10])
            .unwrap_err();
        assert_eq!(e.offset, 10, "{e}");
    }

    #[test]
    fn a_ping_and_its_pong_share_the_token() {
        let mut i = ImplementationInspect::new();
        let ping = i
            .message(Direction::ToServer, &[4, 0xEF, 0xBE, 0xAD, 0xDE])
            .expect("ping");
        let pong = i
            .message(Direction::ToClient, &[5, 0xEF, 0xBE, 0xAD, 0xDE])
            .expect("pong");
        assert_eq!(
            (ping.kind, ping.role, ping.ping),
            ("PING", Role::Ping, Some(0xDEAD_BEEF))
        );
        assert_eq!(
            (pong.kind, pong.role, pong.ping),
            ("PONG", Role::Pong, Some(0xDEAD_BEEF))
        );
    }

    #[test]
    fn a_snapshot_reads_and_a_short_one_fails_where_it_ends() {
        // SNAPSHOT: tick 300 (2C 01), last_input_seq 41, count 1, one 103-byte entity.
        let mut d = vec![2, 0x2C, 0x01, 0, 0, 41, 0, 0, 0, 1, 0, 0, 0];
        d.extend_from_slice(&[0; 103]);
        let mut i = ImplementationInspect::new();
        let s = i.message(Direction::ToClient, &d).expect("snapshot");
        assert_eq!((s.kind, s.role, s.seq), ("SNAPSHOT", Role::Snapshot, None));
        let e = i.message(Direction::ToClient, &d[..100]).unwrap_err();
        assert_eq!(e.offset, 100, "{e}");
        assert!(e.expected.contains("116 bytes"), "{e}");
    }

    #[test]
    fn the_spec_dialects_packets_fail_at_their_type_byte() {
        // The spec INPUT (0x20, 26 bytes) and SNAPSHOT (0x21).
        let mut input = [0u8; 26];
        input[0] = 0x20;
        let e = ImplementationInspect::new()
            .message(Direction::ToServer, &input)
            .unwrap_err();
        assert_eq!(e.offset, 0, "{e}");
        assert!(e.expected.contains("1 INPUT"), "{e}");
        let e = ImplementationInspect::new()
            .message(Direction::ToClient, &[0x21, 30, 0, 0, 0, 30, 0, 0, 0, 0, 0])
            .unwrap_err();
        assert_eq!(e.offset, 0, "{e}");
        // The spec PING (0xF1) too.
        let e = ImplementationInspect::new()
            .message(Direction::ToServer, &[0xF1, 1, 2, 3, 4])
            .unwrap_err();
        assert_eq!(e.offset, 0, "{e}");
    }

    #[test]
    fn events_are_damage_at_19_bytes_or_a_handoff_that_adds_up() {
        let mut i = ImplementationInspect::new();
        let mut damage = vec![3, 1];
        damage.extend_from_slice(&[7, 0, 0, 0, 8, 0, 0, 0, 0xF4, 0xFF, 0xFF, 0xFF, 55]);
        damage.extend_from_slice(&[0xD2, 0x04, 0, 0]);
        assert_eq!(
            i.message(Direction::ToClient, &damage).map(|s| s.kind),
            Ok("EVENT")
        );
        // Handoff: zone 2, host "h1" (2), port 7001, token "ab" (2): 10 + 4 bytes; cut
        // the token's last byte.
        let h = [3, 1, 2, 0, 0, 0, 2, b'h', b'1', 0x59, 0x1B, 2, b'a', b'b'];
        assert_eq!(
            i.message(Direction::ToClient, &h).map(|s| s.kind),
            Ok("EVENT")
        );
        let e = i.message(Direction::ToClient, &h[..13]).unwrap_err();
        assert_eq!(e.offset, 13, "{e}");
        let mut nul = h;
        nul[8] = 0;
        let e = i.message(Direction::ToClient, &nul).unwrap_err();
        assert_eq!(e.offset, 8, "{e}");
    }

    #[test]
    fn type_6_is_connect_one_way_and_disconnect_the_other() {
        let mut i = ImplementationInspect::new();
        let c = i
            .message(Direction::ToServer, &[6, 1, 0, 0, 0, 0x0B, 0x0A, 0, 0])
            .expect("connect");
        assert_eq!((c.kind, c.role), ("CONNECT", Role::Other));
        let d = i
            .message(Direction::ToClient, &[6, 19])
            .expect("disconnect");
        assert_eq!(d.kind, "DISCONNECT");
        let e = i.message(Direction::ToClient, &[6, 19, 0]).unwrap_err();
        assert_eq!(e.offset, 2, "{e}");
    }
}
