//! The wire constants and the world both ends keep (the message layouts are in the crate's
//! documentation).

/// A decode failure's reason, counted as `datagram.<reason>` (wire errors convert with `?`).
pub(crate) type Decoded = Result<(), &'static str>;

/// Wire version in the Hello.
pub const VERSION: u8 = 1;
/// Players one server takes: a full snapshot (22 + 200 × 6 bytes) fits one datagram.
pub const MAX_PLAYERS: usize = 200;
/// Worlds kept by both ends, so a delta's baseline is at most this many ticks old.
pub const HISTORY: usize = 32;
#[allow(missing_docs)]
pub mod msg {
    pub const HELLO: u8 = 1;
    pub const INPUT: u8 = 2;
    pub const PING: u8 = 3;
    pub const BYE: u8 = 4;
    pub const WELCOME: u8 = 0x81;
    pub const SNAPSHOT: u8 = 0x82;
    pub const PONG: u8 = 0x83;
}
pub(crate) const GONE: i16 = i16::MIN;

/// One world: every player slot's position, or `None` for an empty slot.
pub(crate) type World = [Option<(i16, i16)>; MAX_PLAYERS];
pub(crate) const EMPTY: World = [None; MAX_PLAYERS];

/// `tickswarm inspect` reads a capture of Skirmish traffic through this: what each datagram
/// is (its role in the client's behaviour, an Input's seq and keys, a Ping's token) or the
/// byte where it stops being Skirmish. Decode-only; both dialects share the layouts.
pub struct SkirmishInspect;

impl tickswarm::api::inspect::Inspect for SkirmishInspect {
    fn message(
        &mut self,
        dir: tickswarm::api::inspect::Direction,
        data: &[u8],
    ) -> Result<tickswarm::api::inspect::Seen, tickswarm::api::inspect::Mismatch> {
        use tickswarm::api::inspect::{exact_len, field, Direction, Mismatch, Role, Seen};
        use tickswarm::api::Keys;
        let u32_at = |at: usize| field::<4>(data, at, "a u32").map(u32::from_le_bytes);
        let seen = match (data.first().copied(), dir) {
            (Some(msg::HELLO), Direction::ToServer) => {
                exact_len(data, 6, "Hello")?;
                Seen::new("Hello", Role::Other)
            }
            (Some(msg::INPUT), Direction::ToServer) => {
                exact_len(data, 10, "Input")?;
                Seen::new("Input", Role::Input).seq(u64::from(u32_at(1)?)).keys(Keys(data[9]))
            }
            (Some(msg::PING), Direction::ToServer) => {
                exact_len(data, 5, "Ping")?;
                Seen::new("Ping", Role::Ping).ping(u64::from(u32_at(1)?))
            }
            (Some(msg::BYE), Direction::ToServer) => {
                exact_len(data, 1, "Bye")?;
                Seen::new("Bye", Role::Other)
            }
            (Some(msg::WELCOME), Direction::ToClient) => {
                exact_len(data, 7, "Welcome")?;
                Seen::new("Welcome", Role::Other)
            }
            (Some(msg::PONG), Direction::ToClient) => {
                exact_len(data, 5, "Pong")?;
                Seen::new("Pong", Role::Pong).ping(u64::from(u32_at(1)?))
            }
            (Some(msg::SNAPSHOT), Direction::ToClient) => {
                let n = field::<1>(data, 21, "the player count n")?[0];
                exact_len(data, 22 + 6 * usize::from(n), "Snapshot")?;
                Seen::new("Snapshot", Role::Snapshot).seq(u64::from(u32_at(1)?))
            }
            (Some(t), Direction::ToServer) => {
                return Err(Mismatch::at(0, format!("a bot message type 1-4, not {t}")))
            }
            (Some(t), Direction::ToClient) => {
                return Err(Mismatch::at(0, format!("a server message type 0x81-0x83, not {t:#x}")))
            }
            (None, _) => return Err(Mismatch::at(0, "a message type")),
        };
        Ok(seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickswarm::api::inspect::{Direction, Inspect, Role};
    use tickswarm::api::Keys;

    #[test]
    fn an_input_reads_with_its_seq_and_keys_and_a_short_snapshot_fails_at_its_end() {
        // Input: type 2, seq 7, acked tick 40, keys up + shoot (bits 0 and 4).
        let input = [2, 7, 0, 0, 0, 40, 0, 0, 0, 0x11];
        let s = SkirmishInspect.message(Direction::ToServer, &input).expect("an Input");
        assert_eq!((s.role, s.seq), (Role::Input, Some(7)));
        assert_eq!(s.keys, Some(Keys(Keys::UP | Keys::SHOOT)));
        // A snapshot saying n = 1 with no record after its 22 fixed bytes.
        let mut snap = vec![0x82];
        snap.extend_from_slice(&[0; 20]);
        snap.push(1);
        let e = SkirmishInspect.message(Direction::ToClient, &snap).expect_err("short");
        assert_eq!(e.offset, 22);
        // A server type from the bot fails at byte 0.
        assert_eq!(SkirmishInspect.message(Direction::ToServer, &[0x82]).unwrap_err().offset, 0);
    }
}
