//! Every wire rule of the implementation dialect (docs/protocols/darkages.md, "Dialect
//! `implementation`"): little-endian, one packet per datagram, the first byte its type.
//!
//! Decoding borrows the datagram and allocates nothing: a snapshot is a view whose entity
//! records are read one by one ([`Snapshot::entities`]).

use crate::protocol::prelude::wire::{Le, Reader, WireError, Writer};
use crate::protocol::prelude::MAX_TRACKED_ENTITIES;

/// Type bytes. `6` means CONNECT from a client and DISCONNECT from the server.
pub mod ty {
    pub const INPUT: u8 = 1;
    pub const SNAPSHOT: u8 = 2;
    pub const EVENT: u8 = 3;
    pub const PING: u8 = 4;
    pub const PONG: u8 = 5;
    pub const CONNECT: u8 = 6;
    pub const DISCONNECT: u8 = 6;
    pub const CONNECT_REPLY: u8 = 7;
    /// Game messages the bot counts by name and otherwise ignores.
    pub const GAME_FIRST: u8 = 8;
    pub const GAME_LAST: u8 = 21;
}

/// Whole packet sizes, type byte included.
pub mod len {
    pub const CONNECT: usize = 9;
    pub const CONNECT_REPLY: usize = 10;
    /// The CONNECT reply cut to what the public client reads (type, success, entity id):
    /// what the reference server sends, so the reply is smaller than the 9-byte CONNECT.
    pub const CONNECT_REPLY_SHORT: usize = 6;
    pub const INPUT: usize = 19;
    pub const PING: usize = 5;
    pub const PONG: usize = 5;
    pub const DISCONNECT: usize = 2;
    pub const SNAPSHOT_HEADER: usize = 13;
    pub const ENTITY: usize = 103;
    /// A combat event (damage, death, heal).
    pub const COMBAT_EVENT: usize = 19;
    /// A zone handoff without its host and token: type, subtype, zone, host_len, port,
    /// tok_len.
    pub const HANDOFF_FIXED: usize = 10;
}

/// INPUT `flags` bits (a u16; bit 8 is "interact").
pub mod flag {
    pub const FORWARD: u16 = 1 << 0;
    pub const BACKWARD: u16 = 1 << 1;
    pub const LEFT: u16 = 1 << 2;
    pub const RIGHT: u16 = 1 << 3;
    pub const JUMP: u16 = 1 << 4;
    pub const ATTACK: u16 = 1 << 5;
    pub const BLOCK: u16 = 1 << 6;
    pub const SPRINT: u16 = 1 << 7;
    pub const INTERACT: u16 = 1 << 8;
}

/// Combat event subtypes.
pub mod subtype {
    pub const DAMAGE: u8 = 1;
    pub const DEATH: u8 = 2;
    pub const HEAL: u8 = 3;
    /// A zone handoff shares DAMAGE's subtype; its length tells it apart.
    pub const HANDOFF: u8 = 1;
}

/// Yaw and pitch travel as radians × 10,000 in an `i16`.
pub const ANGLE_SCALE: f32 = 10_000.0;

/// Names of the game messages 8-21, for their counters (`game_message.<name>`).
pub fn game_message_name(t: u8) -> &'static str {
    match t {
        8 => "correction",
        9 => "respawn",
        10 => "combat_action",
        11 => "combat_result",
        12 => "lock_on_confirmed",
        13 => "lock_on_failed",
        14 => "chat",
        15 => "quest_update",
        16 => "quest_action",
        17 => "dialogue_start",
        18 => "zone_objective_update",
        19 => "inventory_sync",
        20 => "inventory_update",
        21 => "daily_challenge_update",
        _ => "other",
    }
}

/// A datagram that failed validation: counted as `message.reason` and dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{message}: {reason}")]
pub struct DecodeError {
    pub message: &'static str,
    pub reason: &'static str,
}

fn err(message: &'static str, reason: &'static str) -> DecodeError {
    DecodeError { message, reason }
}

fn short(message: &'static str) -> impl Fn(WireError) -> DecodeError {
    move |_| err(message, "truncated")
}

/// One INPUT.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Input {
    pub sequence: u32,
    pub timestamp: u32,
    pub flags: u16,
    /// Radians; written as `(yaw × 10000) as i16`, so within about ±3.2767.
    pub yaw: f32,
    pub pitch: f32,
    pub target: u32,
}

/// One entity record of a snapshot (103 bytes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Entity {
    pub id: u32,
    pub pos: [f32; 3],
    pub vel: [f32; 3],
    pub health: u8,
    pub anim: u8,
    pub kind: u8,
    pub interaction_range: f32,
    pub prompt: [u8; 64],
    pub dialogue: u32,
}

/// A snapshot: header and the borrowed entity records.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    pub server_tick: u32,
    pub last_input_seq: u32,
    pub count: u32,
    records: &'a [u8],
}

impl<'a> Snapshot<'a> {
    /// The entity records, in wire order.
    pub fn entities(&self) -> impl Iterator<Item = Entity> + 'a {
        self.records.chunks_exact(len::ENTITY).map(read_entity)
    }
}

fn read_entity(b: &[u8]) -> Entity {
    // `chunks_exact` hands 103-byte records: every read below is in bounds.
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let f32_at = |i: usize| f32::from_bits(u32_at(i));
    let mut prompt = [0u8; 64];
    prompt.copy_from_slice(&b[35..99]);
    Entity {
        id: u32_at(0),
        pos: [f32_at(4), f32_at(8), f32_at(12)],
        vel: [f32_at(16), f32_at(20), f32_at(24)],
        health: b[28],
        anim: b[29],
        kind: b[30],
        interaction_range: f32_at(31),
        prompt,
        dialogue: u32_at(99),
    }
}

/// A server → client event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// Damage (1), death (2) or heal (3).
    Combat {
        subtype: u8,
        attacker: u32,
        target: u32,
        value: i32,
        health: u8,
        timestamp: u32,
    },
    /// Zone handoff: connect to `host:port` (the token has no field in CONNECT).
    Handoff {
        zone: u32,
        host: &'a [u8],
        port: u16,
        token: &'a [u8],
    },
}

/// A packet the bot reads.
#[derive(Debug, Clone, Copy)]
pub enum ServerPacket<'a> {
    Snapshot(Snapshot<'a>),
    Event(Event<'a>),
    Pong(u32),
    ConnectReply {
        success: u8,
        entity_id: u32,
        zone_id: u32,
    },
    /// `[6][len u8]`: the reason's length only; its text is not sent.
    Disconnect {
        reason_len: u8,
    },
    /// Types 8-21: counted by name, not read.
    Game(u8),
}

/// Decode one datagram from the server. Types outside 2-21 (and 1, 4, which only clients
/// send) are `packet.unknown_type`.
pub fn decode_server(data: &[u8]) -> Result<ServerPacket<'_>, DecodeError> {
    let Some(&t) = data.first() else {
        return Err(err("packet", "empty"));
    };
    let mut r = Reader::<Le>::new(&data[1..]);
    match t {
        ty::SNAPSHOT => {
            let e = short("snapshot");
            let server_tick = r.u32().map_err(&e)?;
            let last_input_seq = r.u32().map_err(&e)?;
            let count = r.u32().map_err(&e)?;
            if count as usize > MAX_TRACKED_ENTITIES {
                return Err(err("snapshot", "too_many_entities"));
            }
            let records = r.rest();
            if records.len() != count as usize * len::ENTITY {
                return Err(err("snapshot", "bad_size"));
            }
            Ok(ServerPacket::Snapshot(Snapshot {
                server_tick,
                last_input_seq,
                count,
                records,
            }))
        }
        ty::EVENT => decode_event(data).map(ServerPacket::Event),
        ty::PONG => {
            if data.len() != len::PONG {
                return Err(err("pong", "bad_size"));
            }
            Ok(ServerPacket::Pong(r.u32().map_err(short("pong"))?))
        }
        ty::CONNECT_REPLY => {
            if data.len() != len::CONNECT_REPLY && data.len() != len::CONNECT_REPLY_SHORT {
                return Err(err("connect_reply", "bad_size"));
            }
            let e = short("connect_reply");
            Ok(ServerPacket::ConnectReply {
                success: r.u8().map_err(&e)?,
                entity_id: r.u32().map_err(&e)?,
                // The short reply (the reference server's) leaves the zone off: 0.
                zone_id: if r.is_empty() {
                    0
                } else {
                    r.u32().map_err(&e)?
                },
            })
        }
        ty::DISCONNECT => {
            if data.len() != len::DISCONNECT {
                return Err(err("disconnect", "bad_size"));
            }
            Ok(ServerPacket::Disconnect {
                reason_len: data[1],
            })
        }
        ty::GAME_FIRST..=ty::GAME_LAST => Ok(ServerPacket::Game(t)),
        _ => Err(err("packet", "unknown_type")),
    }
}

/// An event datagram. Subtype 1 is damage at exactly 19 bytes and a zone handoff at any
/// other length whose `host_len` and `tok_len` account for every byte (`10 + host_len +
/// tok_len`) and whose host (not empty) and token are printable ASCII; anything else is
/// `event.bad_size`. A 19-byte handoff (host and token of 9
/// bytes together) would read as damage: the real server's tokens are 64 characters.
pub fn decode_event(data: &[u8]) -> Result<Event<'_>, DecodeError> {
    let e = short("event");
    let mut r = Reader::<Le>::new(data.get(1..).unwrap_or_default());
    let sub = r.u8().map_err(&e)?;
    if data.len() == len::COMBAT_EVENT && matches!(sub, 1..=3) {
        return Ok(Event::Combat {
            subtype: sub,
            attacker: r.u32().map_err(&e)?,
            target: r.u32().map_err(&e)?,
            value: r.i32().map_err(&e)?,
            health: r.u8().map_err(&e)?,
            timestamp: r.u32().map_err(&e)?,
        });
    }
    if sub != subtype::HANDOFF {
        return Err(err(
            "event",
            if matches!(sub, 2 | 3) {
                "bad_size"
            } else {
                "unknown_subtype"
            },
        ));
    }
    let zone = r.u32().map_err(&e)?;
    let host_len = r.u8().map_err(&e)? as usize;
    let host = r.take(host_len).map_err(&e)?;
    let port = r.u16().map_err(&e)?;
    let tok_len = r.u8().map_err(&e)? as usize;
    let token = r.take(tok_len).map_err(&e)?;
    if !r.is_empty() {
        return Err(err("event", "bad_size"));
    }
    // The host is a name or an address and the token hex text: bytes that are not
    // printable ASCII are a damage event cut short or grown, not a handoff.
    let printable = |b: &[u8]| b.iter().all(u8::is_ascii_graphic);
    if host.is_empty() || !printable(host) || !printable(token) {
        return Err(err("event", "bad_size"));
    }
    Ok(Event::Handoff {
        zone,
        host,
        port,
        token,
    })
}

/// Whether `data` reads cleanly as a packet of this dialect from a server whose layout can
/// be checked (snapshot, reply, pong, event, disconnect; not the unread game messages,
/// whose type bytes 16-20 are also the spec dialect's 0x10-0x14): a hint, for a bot of the
/// other dialect, that the scenario named the wrong one.
pub fn fits(data: &[u8]) -> bool {
    matches!(
        decode_server(data),
        Ok(ServerPacket::Snapshot(_)
            | ServerPacket::Event(_)
            | ServerPacket::Pong(_)
            | ServerPacket::ConnectReply { success: 1, .. }
            | ServerPacket::Disconnect { .. })
    )
}

/// CONNECT: `[6][version u32][player_id u32]`.
pub fn encode_connect(buf: &mut [u8], version: u32, player_id: u32) -> Result<usize, WireError> {
    let mut w = Writer::<Le>::new(buf);
    w.u8(ty::CONNECT)?;
    w.u32(version)?;
    w.u32(player_id)?;
    Ok(w.position())
}

/// The `i16` an angle travels as: radians × 10,000, saturated (the real client truncates
/// with a cast; a bot keeps its angles within ±π, where both agree).
pub fn angle_to_wire(rad: f32) -> i16 {
    (rad * ANGLE_SCALE) as i16
}

/// INPUT (19 bytes).
pub fn encode_input(buf: &mut [u8], i: &Input) -> Result<usize, WireError> {
    let mut w = Writer::<Le>::new(buf);
    w.u8(ty::INPUT)?;
    w.u32(i.sequence)?;
    w.u32(i.timestamp)?;
    w.u16(i.flags)?;
    w.i16(angle_to_wire(i.yaw))?;
    w.i16(angle_to_wire(i.pitch))?;
    w.u32(i.target)?;
    Ok(w.position())
}

/// PING: `[4][u32]`.
pub fn encode_ping(buf: &mut [u8], token: u32) -> Result<usize, WireError> {
    let mut w = Writer::<Le>::new(buf);
    w.u8(ty::PING)?;
    w.u32(token)?;
    Ok(w.position())
}

/// A client packet, as the reference server reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ClientPacket {
    Connect {
        version: u32,
        player_id: u32,
    },
    Input(Input),
    Ping(u32),
    /// Another type the server does not act on (5, 8-21), counted.
    Other(u8),
}

/// Decode a datagram from a client. Like the real server, longer packets are accepted (it
/// checks only a minimum length) and the extra bytes ignored.
pub fn decode_client(data: &[u8]) -> Result<ClientPacket, DecodeError> {
    let Some(&t) = data.first() else {
        return Err(err("packet", "empty"));
    };
    let mut r = Reader::<Le>::new(&data[1..]);
    match t {
        ty::CONNECT => {
            let e = short("connect");
            Ok(ClientPacket::Connect {
                version: r.u32().map_err(&e)?,
                player_id: r.u32().map_err(&e)?,
            })
        }
        ty::INPUT => {
            let e = short("input");
            Ok(ClientPacket::Input(Input {
                sequence: r.u32().map_err(&e)?,
                timestamp: r.u32().map_err(&e)?,
                flags: r.u16().map_err(&e)?,
                yaw: f32::from(r.i16().map_err(&e)?) / ANGLE_SCALE,
                pitch: f32::from(r.i16().map_err(&e)?) / ANGLE_SCALE,
                target: r.u32().map_err(&e)?,
            }))
        }
        ty::PING => Ok(ClientPacket::Ping(r.u32().map_err(short("ping"))?)),
        5 | ty::GAME_FIRST..=ty::GAME_LAST => Ok(ClientPacket::Other(t)),
        _ => Err(err("packet", "unknown_type")),
    }
}

/// SNAPSHOT header; the caller appends `count` records with [`encode_entity`].
pub fn encode_snapshot_header(
    w: &mut Writer<'_, Le>,
    server_tick: u32,
    last_input_seq: u32,
    count: u32,
) -> Result<(), WireError> {
    w.u8(ty::SNAPSHOT)?;
    w.u32(server_tick)?;
    w.u32(last_input_seq)?;
    w.u32(count)
}

/// One 103-byte entity record.
pub fn encode_entity(w: &mut Writer<'_, Le>, e: &Entity) -> Result<(), WireError> {
    w.u32(e.id)?;
    for v in e.pos.iter().chain(e.vel.iter()) {
        w.f32(*v)?;
    }
    w.u8(e.health)?;
    w.u8(e.anim)?;
    w.u8(e.kind)?;
    w.f32(e.interaction_range)?;
    w.bytes(&e.prompt)?;
    w.u32(e.dialogue)
}

/// CONNECT reply (success 1).
/// The CONNECT reply cut to the 6 bytes the public client reads (`[7][1][entity_id u32]`;
/// it checks only that a reply has at least 6): the reference server's, which must not be
/// larger than the 9-byte CONNECT it answers (see [`super::admission`]).
pub fn encode_connect_reply_short(buf: &mut [u8], entity_id: u32) -> Result<usize, WireError> {
    let mut w = Writer::<Le>::new(buf);
    w.u8(ty::CONNECT_REPLY)?;
    w.u8(1)?;
    w.u32(entity_id)?;
    Ok(w.position())
}

pub fn encode_connect_reply(
    buf: &mut [u8],
    entity_id: u32,
    zone_id: u32,
) -> Result<usize, WireError> {
    let mut w = Writer::<Le>::new(buf);
    w.u8(ty::CONNECT_REPLY)?;
    w.u8(1)?;
    w.u32(entity_id)?;
    w.u32(zone_id)?;
    Ok(w.position())
}

/// PONG, the PING's `u32` echoed.
pub fn encode_pong(buf: &mut [u8], token: u32) -> Result<usize, WireError> {
    let mut w = Writer::<Le>::new(buf);
    w.u8(ty::PONG)?;
    w.u32(token)?;
    Ok(w.position())
}

/// DISCONNECT: `[6][len u8]`, the reason's length without its text.
pub fn encode_disconnect(buf: &mut [u8], reason: &str) -> Result<usize, WireError> {
    let mut w = Writer::<Le>::new(buf);
    w.u8(ty::DISCONNECT)?;
    w.u8(reason.len().min(255) as u8)?;
    Ok(w.position())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_is_19_bytes_little_endian_with_angles_times_10000() {
        let mut buf = [0u8; 64];
        let n = encode_input(
            &mut buf,
            &Input {
                sequence: 0x0102_0304,
                timestamp: 7,
                flags: flag::FORWARD | flag::INTERACT,
                yaw: 1.5,
                pitch: -0.25,
                target: 9,
            },
        )
        .unwrap();
        assert_eq!(n, len::INPUT);
        assert_eq!(
            &buf[..n],
            &[1, 4, 3, 2, 1, 7, 0, 0, 0, 0x01, 0x01, 0x98, 0x3a, 0x3c, 0xf6, 9, 0, 0, 0]
        );
        let ClientPacket::Input(i) = decode_client(&buf[..n]).unwrap() else {
            panic!("an input");
        };
        assert_eq!((i.yaw, i.pitch), (1.5, -0.25));
    }

    #[test]
    fn connect_and_ping_layouts() {
        let mut buf = [0u8; 16];
        let n = encode_connect(&mut buf, 1, 0x0A0B).unwrap();
        assert_eq!(&buf[..n], &[6, 1, 0, 0, 0, 0x0B, 0x0A, 0, 0]);
        let n = encode_ping(&mut buf, 0xDEAD_BEEF).unwrap();
        assert_eq!(&buf[..n], &[4, 0xEF, 0xBE, 0xAD, 0xDE]);
    }

    fn entity(id: u32) -> Entity {
        let mut prompt = [0u8; 64];
        prompt[..5].copy_from_slice(b"Hello");
        Entity {
            id,
            pos: [1.0, 2.0, -3.5],
            vel: [0.5, 0.0, 0.0],
            health: 100,
            anim: 2,
            kind: 0,
            interaction_range: 2.5,
            prompt,
            dialogue: 77,
        }
    }

    #[test]
    fn snapshots_carry_103_byte_records_and_any_other_length_is_refused() {
        let mut buf = vec![0u8; 512];
        let mut w = Writer::<Le>::new(&mut buf);
        encode_snapshot_header(&mut w, 300, 41, 2).unwrap();
        encode_entity(&mut w, &entity(5)).unwrap();
        encode_entity(&mut w, &entity(6)).unwrap();
        let n = w.position();
        assert_eq!(n, 13 + 2 * 103);
        let ServerPacket::Snapshot(s) = decode_server(&buf[..n]).unwrap() else {
            panic!("a snapshot");
        };
        assert_eq!((s.server_tick, s.last_input_seq, s.count), (300, 41, 2));
        let es: Vec<Entity> = s.entities().collect();
        assert_eq!(es, vec![entity(5), entity(6)]);
        for bad in [n - 1, n + 1, 12] {
            let e = decode_server(&buf[..bad]).unwrap_err();
            assert_eq!(e.message, "snapshot");
        }
    }

    #[test]
    fn subtype_1_is_damage_at_19_bytes_and_a_handoff_when_its_lengths_add_up() {
        let mut d = vec![3u8, 1];
        d.extend_from_slice(&7u32.to_le_bytes());
        d.extend_from_slice(&8u32.to_le_bytes());
        d.extend_from_slice(&(-12i32).to_le_bytes());
        d.push(55);
        d.extend_from_slice(&1234u32.to_le_bytes());
        assert_eq!(d.len(), 19);
        assert_eq!(
            decode_event(&d).unwrap(),
            Event::Combat {
                subtype: 1,
                attacker: 7,
                target: 8,
                value: -12,
                health: 55,
                timestamp: 1234
            }
        );
        let mut h = vec![3u8, 1];
        h.extend_from_slice(&2u32.to_le_bytes());
        h.push(9);
        h.extend_from_slice(b"127.0.0.1");
        h.extend_from_slice(&7001u16.to_le_bytes());
        h.push(64);
        h.extend_from_slice(&[b'a'; 64]);
        assert_eq!(h.len(), 10 + 9 + 64);
        assert_eq!(
            decode_event(&h).unwrap(),
            Event::Handoff {
                zone: 2,
                host: b"127.0.0.1",
                port: 7001,
                token: &[b'a'; 64]
            }
        );
        let mut long = h.clone();
        long.push(0);
        assert_eq!(decode_event(&long).unwrap_err().reason, "bad_size");
        assert_eq!(decode_event(&d[..18]).unwrap_err().message, "event");
        let mut death = d.clone();
        death[1] = 2;
        death.push(0);
        assert_eq!(decode_event(&death).unwrap_err().reason, "bad_size");
    }

    #[test]
    fn the_server_s_6_is_a_two_byte_disconnect_and_8_to_21_are_game_messages() {
        assert!(matches!(
            decode_server(&[6, 19]).unwrap(),
            ServerPacket::Disconnect { reason_len: 19 }
        ));
        assert!(decode_server(&[6, 19, 0]).is_err());
        assert!(matches!(
            decode_server(&[19; 201]).unwrap(),
            ServerPacket::Game(19)
        ));
        assert_eq!(game_message_name(19), "inventory_sync");
        assert_eq!(
            decode_server(&[0x21; 33]).unwrap_err().reason,
            "unknown_type"
        );
        assert!(
            !fits(&[0x11; 90]),
            "the spec's CONNECT_ACK is game message 17 here"
        );
        assert!(fits(&[7, 1, 1, 0, 0, 0, 1, 0, 0, 0]));
        assert!(!fits(&[7, 1, 1, 0, 0, 0, 1, 0, 0]));
    }
}
