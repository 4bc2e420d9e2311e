//! Decode-only reading of the real game server's messages (`dialect: implementation`) for
//! `tickswarm inspect` (see `crate::protocol::inspect`).
//!
//! The codec decodes what the server sends; what a client sends (Heartbeat, Join,
//! Reconnect, Chat, Input) it only frames, so those layouts are checked here, by direction.
//! Messages are read back to back until the packet ends, as the bot reads them.
//!
//! - **Heartbeat** (client) is [`Role::Ping`] and **HeartbeatResponse** [`Role::Pong`],
//!   paired by the timestamp the response echoes; the server's own heartbeats (echo 0) answer
//!   nothing and are [`Role::Other`].
//! - **Input** is [`Role::Input`] with its `sequence` (one more per input) as the seq, and
//!   no keys: its inputs are build actions (PlaceBuilding, SetZone, ...), not held keys.
//! - **StateUpdate** is [`Role::Snapshot`] without a seq: the server sends one only on ticks
//!   with changes, so a tick gap is no loss.
//! - The Heartbeat's own `sequence` is not a seq: only one role a direction can carry one,
//!   and the client's Inputs do.

use super::codec::{
    self, ty, Decompressor, Message, HEADER_LEN, INPUT_LEN, MAX_NAME, MAX_PAYLOAD, TOKEN_LEN,
    VERSION,
};
use crate::protocol::prelude::inspect::{
    exact_len, packed, Direction, Inspect, Mismatch, Role, Seen,
};

/// One flow read as the implementation dialect.
pub struct ImplementationInspect {
    dec: Decompressor,
}

impl ImplementationInspect {
    /// A reader that decompresses StateUpdates of at most `max_decompressed_bytes` (the bot's
    /// option), into one buffer reused across the flow's messages.
    pub fn new(max_decompressed_bytes: usize) -> Self {
        let mut dec = Decompressor::default();
        dec.set_limit(max_decompressed_bytes);
        Self { dec }
    }

    /// The message at `at`: what it is and where the next one starts.
    fn one(&mut self, dir: Direction, packet: &[u8], at: usize) -> Result<(Seen, usize), Mismatch> {
        let b = packet.get(at..).unwrap_or(&[]);
        let shift = |m: Mismatch| Mismatch::at(at + m.offset, m.expected);
        if b.len() < HEADER_LEN {
            return Err(Mismatch::at(
                packet.len(),
                format!(
                    "a {HEADER_LEN}-byte envelope (version u8, type u16, length u16) at byte {at}"
                ),
            ));
        }
        if b[0] != VERSION {
            return Err(Mismatch::at(at, "envelope version 1"));
        }
        let t = u16::from_le_bytes([b[1], b[2]]);
        let len = usize::from(u16::from_le_bytes([b[3], b[4]]));
        if len > MAX_PAYLOAD {
            return Err(Mismatch::at(
                at + 3,
                format!("a length of at most {MAX_PAYLOAD}"),
            ));
        }
        let end = HEADER_LEN + len;
        if b.len() < end {
            return Err(Mismatch::at(
                packet.len(),
                format!("a payload of {len} bytes, as the envelope's length says"),
            ));
        }
        let msg = &b[..end];
        let seen = match dir {
            Direction::ToServer => client(t, msg).map_err(shift)?,
            Direction::ToClient => self.server(t, msg).map_err(shift)?,
        };
        Ok((seen, at + end))
    }

    fn server(&mut self, t: u16, msg: &[u8]) -> Result<Seen, Mismatch> {
        let fixed = match t {
            ty::HEARTBEAT_RESPONSE => Some((24, "HeartbeatResponse")),
            ty::JOIN_ACCEPT => Some((25, "JoinAccept")),
            ty::HEARTBEAT | ty::JOIN | ty::RECONNECT | ty::INPUT => {
                return Err(Mismatch::at(
                    1,
                    format!(
                        "a type the server sends (2, 4, 5, 8-11, 102-104), not the client's {t}"
                    ),
                ))
            }
            _ => None,
        };
        if let Some((n, name)) = fixed {
            exact_len(msg, HEADER_LEN + n, &format!("{name} message"))?;
        }
        let m = codec::decode(msg, &mut self.dec)
            .map_err(|e| server_mismatch(t, msg, e))?
            .0;
        Ok(match m {
            Message::HeartbeatResponse { client_ts: 0, .. } => {
                Seen::new("HeartbeatResponse", Role::Other)
            }
            Message::HeartbeatResponse { client_ts, .. } => {
                Seen::new("HeartbeatResponse", Role::Pong).ping(client_ts)
            }
            Message::JoinAccept { .. } => Seen::new("JoinAccept", Role::Other),
            Message::JoinReject { .. } => Seen::new("JoinReject", Role::Other),
            Message::Kick => Seen::new("Kick", Role::Other),
            Message::ServerStatus { .. } => Seen::new("ServerStatus", Role::Other),
            Message::PlayerList(_) => Seen::new("PlayerList", Role::Other),
            Message::Chat { .. } => Seen::new("Chat", Role::Other),
            Message::StateUpdate { .. } => Seen::new("StateUpdate", Role::Snapshot),
            Message::Rejection { .. } => Seen::new("Rejection", Role::Other),
            Message::Event => Seen::new("Event", Role::Other),
            Message::Other(t) => Seen::new(declared(t), Role::Other),
        })
    }
}

impl Inspect for ImplementationInspect {
    /// A packet of exactly one message (the server sends one a packet).
    fn message(&mut self, dir: Direction, data: &[u8]) -> Result<Seen, Mismatch> {
        let (seen, end) = self.one(dir, data, 0)?;
        if end < data.len() {
            return Err(Mismatch::at(
                end,
                format!(
                    "the end of a one-message packet ({} bytes more)",
                    data.len() - end
                ),
            ));
        }
        Ok(seen)
    }

    fn messages(
        &mut self,
        dir: Direction,
        data: &[u8],
        out: &mut dyn FnMut(Seen),
    ) -> Result<(), Mismatch> {
        packed(
            data,
            "a message envelope",
            |at| self.one(dir, data, at),
            out,
        )
    }
}

/// The name of a declared type the codec hands out as `Other`.
fn declared(t: u16) -> &'static str {
    match t {
        ty::DISCONNECT => "Disconnect",
        ty::SNAPSHOT_START => "SnapshotStart",
        ty::SNAPSHOT_CHUNK => "SnapshotChunk",
        ty::SNAPSHOT_END => "SnapshotEnd",
        ty::INPUT_ACK => "InputAck",
        110..=113 => "Trade",
        120..=125 => "Terrain",
        _ => "Other",
    }
}

/// A client message (`msg`: envelope and payload), checked against its layout.
fn client(t: u16, msg: &[u8]) -> Result<Seen, Mismatch> {
    let p = HEADER_LEN;
    let u32_at = |i: usize| {
        msg.get(i..i + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let u64_at = |i: usize| {
        msg.get(i..i + 8).map(|b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        })
    };
    // A `u32 length` + bytes string at `i`, at most `max` bytes: where it ends.
    let string = |i: usize, max: usize, what: &str| -> Result<usize, Mismatch> {
        let n = u32_at(i).ok_or_else(|| Mismatch::at(msg.len(), format!("{what}'s u32 length")))?;
        if n > max {
            return Err(Mismatch::at(
                i,
                format!("{what} of at most {max} bytes, not {n}"),
            ));
        }
        let end = i + 4 + n;
        if end > msg.len() {
            return Err(Mismatch::at(msg.len(), format!("{what} of {n} bytes")));
        }
        Ok(end)
    };
    match t {
        ty::HEARTBEAT => {
            exact_len(msg, p + 12, "Heartbeat message")?;
            Ok(Seen::new("Heartbeat", Role::Ping).ping(u64_at(p).unwrap_or(0)))
        }
        ty::INPUT => {
            exact_len(msg, p + INPUT_LEN, "Input message")?;
            if msg.get(p + 9).is_some_and(|&k| k >= codec::input::COUNT) {
                return Err(Mismatch::at(p + 9, "an input type 0-15"));
            }
            let seq = u32_at(p + 10).unwrap_or(0) as u64;
            Ok(Seen::new("Input", Role::Input).seq(seq))
        }
        ty::JOIN => {
            let end = string(p, MAX_NAME, "a name")?;
            let len = match msg.get(end) {
                Some(0) => end + 1,
                Some(1) => end + 1 + TOKEN_LEN,
                Some(_) => return Err(Mismatch::at(end, "has_token 0 or 1")),
                None => return Err(Mismatch::at(msg.len(), "has_token u8 after the name")),
            };
            exact_len(msg, len, "Join message")?;
            Ok(Seen::new("Join", Role::Other))
        }
        ty::RECONNECT => {
            if msg.len() < p + TOKEN_LEN {
                return Err(Mismatch::at(msg.len(), "a 16-byte session token"));
            }
            let end = string(p + TOKEN_LEN, MAX_NAME, "a name")?;
            exact_len(msg, end, "Reconnect message")?;
            Ok(Seen::new("Reconnect", Role::Other))
        }
        ty::CHAT => {
            if msg.len() < p + 1 {
                return Err(Mismatch::at(msg.len(), "a sender u8"));
            }
            let end = string(p + 1, 500, "a text")?;
            exact_len(msg, end + 8, "Chat message")?;
            Ok(Seen::new("Chat", Role::Other))
        }
        ty::DISCONNECT => Ok(Seen::new("Disconnect", Role::Other)),
        _ => Err(Mismatch::at(
            1,
            format!("a type a client sends (1 Heartbeat, 3 Join, 6 Reconnect, 7 Disconnect, 11 Chat, 100 Input), not {t}"),
        )),
    }
}

/// Where a server message fails, from the codec's reason.
fn server_mismatch(t: u16, msg: &[u8], e: codec::DecodeError) -> Mismatch {
    let p = HEADER_LEN;
    match (e.message, e.reason) {
        ("envelope", "unknown_type") => Mismatch::at(
            1,
            format!("a message type the server sends (2, 4, 5, 8-11, 102-104), not {t}"),
        ),
        ("join_accept", "player_zero") => Mismatch::at(p, "a player id 1-4"),
        ("state_update", reason) => state_update_mismatch(msg, reason),
        (m, "string_too_long") => Mismatch::at(p, format!("a {m} string of sane length")),
        (m, "truncated") => Mismatch::at(
            msg.len(),
            format!("more of the {m} payload: its fields run past the envelope's length"),
        ),
        (m, reason) => Mismatch::at(p, format!("a {m} payload ({reason})")),
    }
}

/// Where a StateUpdate fails: `compressed u8` at 5, then the body (or `u32 size` + LZ4).
fn state_update_mismatch(msg: &[u8], reason: &str) -> Mismatch {
    let body = HEADER_LEN + 1;
    let compressed = msg.get(HEADER_LEN).is_some_and(|&c| c != 0);
    match reason {
        "decompressed_too_large" => {
            Mismatch::at(body, "a body size within the decompression limit")
        }
        "lz4_size_mismatch" => {
            Mismatch::at(body, "a body size equal to what the LZ4 block expands to")
        }
        "lz4_corrupt" => Mismatch::at(body + 4, "an LZ4 block"),
        "truncated" if compressed && msg.len() < body + 4 => {
            Mismatch::at(msg.len(), "a u32 body size then an LZ4 block")
        }
        r if compressed => Mismatch::at(
            body + 4,
            format!("a StateUpdate body (decompressed, it fails: {r})"),
        ),
        "too_many_deltas" => Mismatch::at(
            body + 8,
            format!("a count of at most {}", codec::MAX_DELTAS),
        ),
        "truncated" if msg.len() < body + 12 => Mismatch::at(msg.len(), "tick u64 and count u32"),
        r => {
            // Walk the deltas to the one that fails.
            let mut at = body + 12;
            let count = msg
                .get(body + 8..body + 12)
                .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            for _ in 0..count {
                let Some(h) = msg.get(at..at + 9) else {
                    return Mismatch::at(msg.len(), "a delta: entity u32, kind u8, size u32");
                };
                if h[4] > codec::DELTA_DESTROY {
                    return Mismatch::at(at + 4, "a delta kind 0-2");
                }
                let n = u32::from_le_bytes([h[5], h[6], h[7], h[8]]) as usize;
                if n > MAX_PAYLOAD || at + 9 + n > msg.len() {
                    return Mismatch::at(msg.len(), format!("{n} bytes of component data"));
                }
                at += 9 + n;
            }
            Mismatch::at(at, format!("a StateUpdate delta ({r})"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Heartbeat by hand (zergcity.md): version 1, type 1, length 12; timestamp 1000,
    /// sequence 4.
    const HEARTBEAT: [u8; 17] = [1, 1, 0, 12, 0, 0xE8, 0x03, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0];

    #[test]
    fn an_input_reads_with_its_sequence_and_no_keys() {
        // Input: tick 50, player 2, type 6 (PlaceRoad), sequence 9, x 3, y -1, the rest 0.
        let mut m = vec![1, 100, 0, 30, 0];
        m.extend_from_slice(&[50, 0, 0, 0, 0, 0, 0, 0, 2, 6, 9, 0, 0, 0, 3, 0, 0xFF, 0xFF]);
        m.extend_from_slice(&[0; 12]);
        let s = ImplementationInspect::new(1 << 20)
            .message(Direction::ToServer, &m)
            .expect("reads");
        assert_eq!(
            (s.kind, s.role, s.seq, s.keys),
            ("Input", Role::Input, Some(9), None)
        );
        // Cut short: the envelope promises 30 bytes.
        let e = ImplementationInspect::new(1 << 20)
            .message(Direction::ToServer, &m[..20])
            .unwrap_err();
        assert_eq!(e.offset, 20, "{e}");
    }

    #[test]
    fn a_heartbeat_pairs_with_its_echo_and_the_servers_own_is_no_pong() {
        let mut i = ImplementationInspect::new(1 << 20);
        let hb = i
            .message(Direction::ToServer, &HEARTBEAT)
            .expect("heartbeat");
        // HeartbeatResponse: echoed 1000, server ms 7, tick 3.
        let mut r = vec![1, 2, 0, 24, 0, 0xE8, 0x03, 0, 0, 0, 0, 0, 0];
        r.extend_from_slice(&[7, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0]);
        let pong = i.message(Direction::ToClient, &r).expect("response");
        assert_eq!((hb.role, pong.role), (Role::Ping, Role::Pong));
        assert_eq!((hb.ping, pong.ping), (Some(1000), Some(1000)));
        r[5] = 0;
        r[6] = 0;
        assert_eq!(
            i.message(Direction::ToClient, &r).map(|s| s.role),
            Ok(Role::Other)
        );
    }

    #[test]
    fn a_state_update_reads_as_a_snapshot() {
        // Not compressed; tick 12, one delta: entity 5, update, 2 bytes of data.
        let mut m = vec![1, 102, 0, 24, 0, 0];
        m.extend_from_slice(&[12, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
        m.extend_from_slice(&[5, 0, 0, 0, 1, 2, 0, 0, 0, 0xAA, 0xBB]);
        let s = ImplementationInspect::new(1 << 20)
            .message(Direction::ToClient, &m)
            .expect("reads");
        assert_eq!(
            (s.kind, s.role, s.seq),
            ("StateUpdate", Role::Snapshot, None)
        );
        // A delta kind 3 fails at its byte: 5 + 1 + 12 + 4.
        m[22] = 3;
        let e = ImplementationInspect::new(1 << 20)
            .message(Direction::ToClient, &m)
            .unwrap_err();
        assert_eq!(e.offset, 22, "{e}");
    }

    #[test]
    fn a_spec_message_fails_at_byte_0() {
        // The spec's header: ZCNT, version 1, ... ('Z' is no envelope version).
        let spec = [0x5A, 0x43, 0x4E, 0x54, 1, 3, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0];
        let e = ImplementationInspect::new(1 << 20)
            .message(Direction::ToServer, &spec)
            .unwrap_err();
        assert_eq!(e.offset, 0, "{e}");
        assert!(e.expected.contains("version 1"), "{e}");
        // A server type sent by the client is no client message: the type at byte 1.
        let mut bad = HEARTBEAT;
        bad[1] = 2;
        assert_eq!(
            ImplementationInspect::new(1 << 20)
                .message(Direction::ToServer, &bad)
                .unwrap_err()
                .offset,
            1
        );
    }
}
