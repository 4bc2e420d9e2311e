//! Decode-only reading of R-Type datagrams (the spec dialects `big` and `little`) for
//! `tickswarm inspect` (see `crate::protocol::inspect`): the codec decides, and its reasons
//! are turned into the byte where a datagram stops reading as this dialect.
//!
//! What each packet is for the behaviour figures (docs/protocols/rtype.md):
//! - INPUT is the player's input; its keys are the inverse of the bot's `Keys::axis` (the
//!   nearest of the eight compass directions of `dx`, `dy`, see [`keys_of_axes`]) and
//!   `shooting`. No packet carries a sequence: no `seq` is given. The snapshot `tick` steps
//!   by `sim_hz / snapshot_hz` (3 at the reference server's 60 / 20 Hz), not by one, so it is
//!   not given as `seq` either.
//! - PING is empty and PONG's `timestamp` is one the client never sent, so nothing on the
//!   wire pairs them. As the bot does (one PING in flight, the next PONG is its answer), each
//!   PING gets the token of its count in the flow and a PONG the token of the newest PING:
//!   a PONG pairs with the PING sent last before it. With several PINGs in flight this
//!   under-states the round trip of all but the newest.
//! - The two dialects differ only in the byte order of floats. A float read in the wrong
//!   order is either a subnormal (round numbers such as `1.0`, `100.0`) or of a wild
//!   magnitude, so every float is checked to be 0 or of a magnitude within
//!   [`PLAUSIBLE_MIN`]..=[`PLAUSIBLE_MAX`]: that is where a capture of the other float order
//!   stops reading (an input with no direction, a snapshot of resting entities at 0, reads in
//!   both).

use super::{
    decode, decode_header, DecodeError, FloatOrder, Packet, PacketType, HEADER_LEN,
    SNAPSHOT_ENTITY_LEN, SNAPSHOT_FIXED_LEN,
};
use crate::games::rtype::dialects::implementation::codec as implementation;
use crate::protocol::prelude::inspect::{exact_len, Direction, Inspect, Mismatch, Role, Seen};
use crate::protocol::prelude::Keys;

/// The smallest magnitude (other than 0) a float of this protocol is read as: positions,
/// velocities and input axes of a game world never come this close to zero.
pub const PLAUSIBLE_MIN: f32 = 1e-9;
/// The largest magnitude a float of this protocol is read as.
pub const PLAUSIBLE_MAX: f32 = 1e9;

/// The packet types, in words, for a wrong type byte.
const TYPES: &str = "a packet type 1-4 (CONNECT, INPUT, PING, DISCONNECT), 10-13 (ACCEPT, \
                     REJECT, PONG, GAMEOVER) or 20-23 (ENTITY_CREATE, ENTITY_DESTROY, \
                     DAMAGE_EVENT, SNAPSHOT)";

/// One flow read as the spec dialect of one float order.
pub struct RtypeInspect {
    order: FloatOrder,
    /// PINGs seen so far: the token of the newest.
    pings: u64,
}

impl RtypeInspect {
    /// A reader of the spec dialect with floats in `order`.
    pub fn new(order: FloatOrder) -> Self {
        Self { order, pings: 0 }
    }
}

/// The packet's name as docs/protocols/rtype.md writes it.
pub fn doc_name(t: PacketType) -> &'static str {
    match t {
        PacketType::Connect => "CONNECT",
        PacketType::Input => "INPUT",
        PacketType::Ping => "PING",
        PacketType::Disconnect => "DISCONNECT",
        PacketType::Accept => "ACCEPT",
        PacketType::Reject => "REJECT",
        PacketType::Pong => "PONG",
        PacketType::GameOver => "GAMEOVER",
        PacketType::EntityCreate => "ENTITY_CREATE",
        PacketType::EntityDestroy => "ENTITY_DESTROY",
        PacketType::DamageEvent => "DAMAGE_EVENT",
        PacketType::Snapshot => "SNAPSHOT",
    }
}

/// The keys an INPUT's axes and `shooting` hold: the inverse of the bot's [`Keys::axis`]
/// (`dx` = right − left, `dy` = down − up). An analogue direction is taken to the nearest of
/// the eight compass directions (a component under tan 22.5° of the other holds no key); NaN
/// counts as 0, as the reference server reads it.
pub fn keys_of_axes(dx: f32, dy: f32, shooting: bool) -> Keys {
    const TAN_22_5: f32 = 0.414_213_57;
    let clean = |v: f32| if v.is_nan() { 0.0 } else { v };
    let (dx, dy) = (clean(dx), clean(dy));
    let mut k = 0;
    if dx != 0.0 && dx.abs() >= dy.abs() * TAN_22_5 {
        k |= if dx > 0.0 { Keys::RIGHT } else { Keys::LEFT };
    }
    if dy != 0.0 && dy.abs() >= dx.abs() * TAN_22_5 {
        k |= if dy > 0.0 { Keys::DOWN } else { Keys::UP };
    }
    if shooting {
        k |= Keys::SHOOT;
    }
    Keys(k)
}

/// Whether `v` can be a float of this protocol (see the module docs).
pub fn plausible(v: f32) -> bool {
    v == 0.0 || (v.is_finite() && (PLAUSIBLE_MIN..=PLAUSIBLE_MAX).contains(&v.abs()))
}

impl Inspect for RtypeInspect {
    fn message(&mut self, dir: Direction, data: &[u8]) -> Result<Seen, Mismatch> {
        let ty = decode_header(data).map_err(|e| self.hinted(data, header_mismatch(data, e)))?;
        if ty.is_client_to_server() != (dir == Direction::ToServer) {
            let want = match dir {
                Direction::ToServer => {
                    "a client → server type: 1-4 (CONNECT, INPUT, PING, DISCONNECT)"
                }
                Direction::ToClient => "a server → client type: 10-13 or 20-23",
            };
            return Err(self.hinted(
                data,
                Mismatch::at(0, format!("{want}, not {} ({})", ty as u8, doc_name(ty))),
            ));
        }
        let packet =
            decode(data, self.order).map_err(|e| self.hinted(data, body_mismatch(data, ty, e)))?;
        self.floats(&packet)?;
        let name = doc_name(ty);
        Ok(match packet {
            Packet::Input {
                dx, dy, shooting, ..
            } => Seen::new(name, Role::Input).keys(keys_of_axes(dx, dy, shooting)),
            Packet::Ping => {
                self.pings += 1;
                Seen::new(name, Role::Ping).ping(self.pings)
            }
            Packet::Pong { .. } if self.pings > 0 => Seen::new(name, Role::Pong).ping(self.pings),
            Packet::Pong { .. } => Seen::new(name, Role::Pong),
            Packet::Snapshot(_) => Seen::new(name, Role::Snapshot),
            _ => Seen::new(name, Role::Other),
        })
    }
}

impl RtypeInspect {
    /// Every float of `packet` read in this dialect's order is plausible, or the mismatch
    /// names the first that is not (and what it reads as in the other order).
    fn floats(&self, packet: &Packet<'_>) -> Result<(), Mismatch> {
        match packet {
            Packet::Input { dx, dy, .. } => {
                self.float(8, *dx, "INPUT dx")?;
                self.float(12, *dy, "INPUT dy")
            }
            Packet::EntityCreate { x, y, .. } => {
                self.float(8, *x, "ENTITY_CREATE x")?;
                self.float(12, *y, "ENTITY_CREATE y")
            }
            Packet::Snapshot(s) => {
                for (i, e) in s.entities().enumerate() {
                    let at = SNAPSHOT_FIXED_LEN + SNAPSHOT_ENTITY_LEN * i;
                    for (off, v, what) in [
                        (4, e.x, "x"),
                        (8, e.y, "y"),
                        (12, e.vx, "vx"),
                        (16, e.vy, "vy"),
                    ] {
                        self.float(at + off, v, &format!("SNAPSHOT entity {i}'s {what}"))?;
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn float(&self, at: usize, v: f32, what: &str) -> Result<(), Mismatch> {
        if plausible(v) {
            return Ok(());
        }
        let (order, other) = match self.order {
            FloatOrder::Big => ("big", FloatOrder::Little),
            FloatOrder::Little => ("little", FloatOrder::Big),
        };
        let swapped = f32::from_bits(v.to_bits().swap_bytes());
        let hint = if plausible(swapped) {
            format!(
                "; in {}-endian order it reads {swapped}: float_order {}",
                other.as_str(),
                other.as_str()
            )
        } else {
            String::new()
        };
        Err(Mismatch::at(
            at,
            format!(
                "{what} as a {order}-endian f32: 0 or a magnitude within \
                 {PLAUSIBLE_MIN:e}..{PLAUSIBLE_MAX:e}, not {v:e}{hint}"
            ),
        ))
    }

    /// `m`, saying so when the datagram reads as the implementation dialect's.
    fn hinted(&self, data: &[u8], mut m: Mismatch) -> Mismatch {
        if implementation::fits(data) || implementation_client(data) {
            m.expected
                .push_str(" (it reads as dialect: implementation, the real server's)");
        }
        m
    }
}

/// Whether `data` is one of the implementation dialect's client datagrams (bare CONNECT,
/// DISCONNECT, PING; a 5-byte INPUT).
fn implementation_client(data: &[u8]) -> bool {
    let len_ok = |n: usize| data.len() == n && data.get(2..4) == Some(&[0, n as u8][..]);
    match (data.first(), data.get(1)) {
        (Some(&t), Some(&implementation::VERSION)) => match t {
            implementation::CONNECT | implementation::DISCONNECT | implementation::PING => {
                len_ok(HEADER_LEN)
            }
            implementation::INPUT => len_ok(HEADER_LEN + 1),
            _ => false,
        },
        _ => false,
    }
}

/// The declared `size` (bytes 2-3, big-endian), if the header has it.
fn declared(data: &[u8]) -> Option<usize> {
    Some(usize::from(u16::from_be_bytes([
        *data.get(2)?,
        *data.get(3)?,
    ])))
}

/// Where a header fails (steps 1-4 of the validation).
fn header_mismatch(data: &[u8], e: DecodeError) -> Mismatch {
    let len = data.len();
    let size = declared(data).unwrap_or(0);
    // A size that reads as the length with its bytes swapped is a little-endian one.
    let le = if size != len && usize::from((size as u16).swap_bytes()) == len {
        " (read little-endian it is the length: integers here are big-endian)"
    } else {
        ""
    };
    match (e.message, e.reason) {
        ("header", "truncated") => Mismatch::at(
            len,
            format!("a {HEADER_LEN}-byte header (type u8, version u8 = 1, size u16)"),
        ),
        ("header", "bad_version") => Mismatch::at(
            1,
            format!("version 1, not {}", data.get(1).copied().unwrap_or(0)),
        ),
        ("header", "unknown_type") => Mismatch::at(
            0,
            format!("{TYPES}, not {}", data.first().copied().unwrap_or(0)),
        ),
        (kind, "truncated") => Mismatch::at(
            len,
            format!(
                "the {size} bytes the {} header's size u16 at 2 states (it ends at {len}){le}",
                kind.to_uppercase()
            ),
        ),
        (kind, "oversized") if size >= HEADER_LEN => Mismatch::at(
            size,
            format!(
                "the end of the {} at the {size} bytes its size u16 at 2 states ({} bytes \
                 more){le}",
                kind.to_uppercase(),
                len - size
            ),
        ),
        (_, _) => Mismatch::at(
            2,
            format!("size u16, the datagram's whole length ({len}), not {size}{le}"),
        ),
    }
}

/// Where a packet whose header reads fails (step 5).
fn body_mismatch(data: &[u8], ty: PacketType, e: DecodeError) -> Mismatch {
    let name = doc_name(ty);
    let len = data.len();
    match (ty.fixed_len(), e.reason) {
        (Some(n), _) => exact_len(data, n, name)
            .err()
            .unwrap_or_else(|| Mismatch::at(HEADER_LEN, format!("a {name} body"))),
        (None, "count_mismatch") => {
            let count = data
                .get(8..10)
                .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
                .unwrap_or(0);
            let want = SNAPSHOT_FIXED_LEN + SNAPSHOT_ENTITY_LEN * count;
            if want > len {
                Mismatch::at(
                    len,
                    format!(
                        "entityCount {count} (u16 at 8) × {SNAPSHOT_ENTITY_LEN}-byte records: a \
                         SNAPSHOT of {want} bytes (it ends at {len})"
                    ),
                )
            } else {
                Mismatch::at(
                    want,
                    format!(
                        "the end of the SNAPSHOT after entityCount {count} (u16 at 8) records \
                         ({} bytes more)",
                        len - want
                    ),
                )
            }
        }
        (None, _) => Mismatch::at(
            len,
            format!(
                "a SNAPSHOT's {SNAPSHOT_FIXED_LEN} fixed bytes (header, tick u32, entityCount u16)"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// INPUT as rtype.md lays it out, by hand: type 2, version 1, size 17 (00 11), entity
    /// 0x80000001, dx 1.0 (3F 80 00 00 big-endian), dy -1.0 (BF 80 00 00), shooting 1.
    const INPUT_BIG: [u8; 17] = [
        2, 1, 0x00, 0x11, 0x80, 0, 0, 1, 0x3F, 0x80, 0, 0, 0xBF, 0x80, 0, 0, 1,
    ];
    /// The same INPUT with little-endian floats.
    const INPUT_LITTLE: [u8; 17] = [
        2, 1, 0x00, 0x11, 0x80, 0, 0, 1, 0, 0, 0x80, 0x3F, 0, 0, 0x80, 0xBF, 1,
    ];

    #[test]
    fn an_input_reads_with_its_keys_in_either_float_order() {
        let want = Some(Keys(Keys::RIGHT | Keys::UP | Keys::SHOOT));
        for (order, bytes) in [
            (FloatOrder::Big, INPUT_BIG),
            (FloatOrder::Little, INPUT_LITTLE),
        ] {
            let s = RtypeInspect::new(order)
                .message(Direction::ToServer, &bytes)
                .expect("reads");
            assert_eq!((s.kind, s.role, s.seq), ("INPUT", Role::Input, None));
            assert_eq!(s.keys, want, "{order:?}");
        }
    }

    #[test]
    fn the_other_float_order_fails_at_dx_and_names_the_right_one() {
        let e = RtypeInspect::new(FloatOrder::Little)
            .message(Direction::ToServer, &INPUT_BIG)
            .unwrap_err();
        assert_eq!(e.offset, 8, "{e}");
        assert!(e.expected.contains("float_order big"), "{e}");
        let e = RtypeInspect::new(FloatOrder::Big)
            .message(Direction::ToServer, &INPUT_LITTLE)
            .unwrap_err();
        assert_eq!(e.offset, 8, "{e}");
        assert!(e.expected.contains("float_order little"), "{e}");
    }

    #[test]
    fn a_truncated_input_fails_where_it_ends() {
        let e = RtypeInspect::new(FloatOrder::Big)
            .message(Direction::ToServer, &INPUT_BIG[..11])
            .unwrap_err();
        assert_eq!(e.offset, 11, "{e}");
        assert!(e.expected.contains("17 bytes"), "{e}");
    }

    #[test]
    fn a_ping_pairs_with_the_next_pong() {
        let mut i = RtypeInspect::new(FloatOrder::Big);
        // PING: type 3, version 1, size 4. PONG: type 12, size 8, timestamp 0x01020304.
        let ping = i.message(Direction::ToServer, &[3, 1, 0, 4]).expect("ping");
        let pong = i
            .message(Direction::ToClient, &[12, 1, 0, 8, 1, 2, 3, 4])
            .expect("pong");
        assert_eq!((ping.kind, ping.role), ("PING", Role::Ping));
        assert_eq!((pong.kind, pong.role), ("PONG", Role::Pong));
        assert!(ping.ping.is_some());
        assert_eq!(ping.ping, pong.ping);
        let next = i.message(Direction::ToServer, &[3, 1, 0, 4]).expect("ping");
        assert_ne!(next.ping, ping.ping);
    }

    #[test]
    fn a_snapshot_reads_as_snapshot_without_seq() {
        // SNAPSHOT: type 23, size 32 (10 + 22), tick 3, one entity: id 0x80000001,
        // x 100.0 (42 C8 00 00), y 50.0 (42 48 00 00), vx 0, vy 0, sprite 1.
        let mut d = vec![23, 1, 0, 32, 0, 0, 0, 3, 0, 1];
        d.extend_from_slice(&[0x80, 0, 0, 1, 0x42, 0xC8, 0, 0, 0x42, 0x48, 0, 0]);
        d.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        let s = RtypeInspect::new(FloatOrder::Big)
            .message(Direction::ToClient, &d)
            .expect("snapshot");
        assert_eq!((s.kind, s.role, s.seq), ("SNAPSHOT", Role::Snapshot, None));
        // Read little-endian, x is a subnormal: entity 0's x, at 14.
        let e = RtypeInspect::new(FloatOrder::Little)
            .message(Direction::ToClient, &d)
            .unwrap_err();
        assert_eq!(e.offset, 14, "{e}");
        // One record fewer than entityCount says: the header's size still says 32.
        let mut short = d.clone();
        short[9] = 2;
        let e = RtypeInspect::new(FloatOrder::Big)
            .message(Direction::ToClient, &short)
            .unwrap_err();
        assert_eq!(e.offset, 32, "{e}");
        assert!(e.expected.contains("entityCount 2"), "{e}");
    }

    #[test]
    fn the_implementation_dialects_bytes_fail_at_their_first_misfit_and_are_named() {
        // The real server's ACCEPT: 0x10 is no spec type.
        let e = RtypeInspect::new(FloatOrder::Big)
            .message(Direction::ToClient, &[0x10, 1, 0, 4])
            .unwrap_err();
        assert_eq!(e.offset, 0, "{e}");
        assert!(e.expected.contains("implementation"), "{e}");
        // Its INPUT (type 3, 5 bytes) is a spec PING of the wrong size: the end of 4 bytes.
        let e = RtypeInspect::new(FloatOrder::Big)
            .message(Direction::ToServer, &[3, 1, 0, 5, 0b1_0001])
            .unwrap_err();
        assert_eq!(e.offset, 4, "{e}");
        // A little-endian size is named.
        let e = RtypeInspect::new(FloatOrder::Big)
            .message(Direction::ToServer, &[3, 1, 4, 0])
            .unwrap_err();
        assert_eq!(e.offset, 4, "{e}");
        assert!(e.expected.contains("little-endian"), "{e}");
    }

    #[test]
    fn analogue_axes_take_the_nearest_compass_direction() {
        assert_eq!(keys_of_axes(1.0, 0.1, false), Keys(Keys::RIGHT));
        assert_eq!(
            keys_of_axes(0.7, 0.7, false),
            Keys(Keys::RIGHT | Keys::DOWN)
        );
        assert_eq!(keys_of_axes(-0.2, -1.0, true), Keys(Keys::UP | Keys::SHOOT));
        assert_eq!(keys_of_axes(f32::NAN, 0.0, false), Keys(0));
        for k in 0..16u8 {
            let (dx, dy) = Keys(k).axis();
            let back = keys_of_axes(dx, dy, false);
            assert_eq!(back.axis(), (dx, dy), "keys {k:#06b}");
        }
    }
}
