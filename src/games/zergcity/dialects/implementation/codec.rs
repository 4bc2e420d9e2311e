//! The real ZergCity game server's wire format (`dialect: implementation`).
//!
//! Every message is a 5-byte envelope, little-endian: `version u8` (1), `type u16`,
//! `length u16` (payload bytes, at most 65,000), then the payload. No magic, flags or
//! sequence. Strings are `u32 length` + bytes (no terminator); 64-bit values are written as
//! two `u32`s, low half first (the same bytes as a little-endian `u64`).
//!
//! One message travels in one ENet packet; the bot still reads messages back to back until
//! the packet ends ([`decode`] returns the bytes each took), so a packet carrying several is
//! not an error.
//!
//! Decoding borrows from the packet (strings, entity data) and, for a compressed
//! StateUpdate, from the caller's decompression buffer: nothing is allocated per message.

use thiserror::Error;

/// Envelope bytes before the payload.
pub const HEADER_LEN: usize = 5;
/// The only protocol version the server accepts (its range is 1..=1).
pub const VERSION: u8 = 1;
/// Largest payload the server writes or reads.
pub const MAX_PAYLOAD: usize = 65_000;
/// Session token bytes (JoinAccept, Join, Reconnect).
pub const TOKEN_LEN: usize = 16;
/// Input payload: tick u64, player u8, type u8, sequence u32, x i16, y i16, param1 u32,
/// param2 u32, value i32.
pub const INPUT_LEN: usize = 30;
/// Longest player name the server keeps.
pub const MAX_NAME: usize = 64;
/// Deltas one StateUpdate may carry (more is refused by the server's own reader).
pub const MAX_DELTAS: usize = 1000;
/// A StateUpdate body longer than this is LZ4-compressed (when that makes it smaller).
pub const COMPRESSION_THRESHOLD: usize = 1024;
/// ENet channels the server's host is created with: 0 reliable ordered, 1 unsequenced.
pub const CHANNELS: usize = 2;
pub const CHANNEL_RELIABLE: u8 = 0;
pub const CHANNEL_UNRELIABLE: u8 = 1;

/// Message types (the server's `MessageType`).
pub mod ty {
    pub const HEARTBEAT: u16 = 1;
    pub const HEARTBEAT_RESPONSE: u16 = 2;
    pub const JOIN: u16 = 3;
    pub const JOIN_ACCEPT: u16 = 4;
    pub const JOIN_REJECT: u16 = 5;
    pub const RECONNECT: u16 = 6;
    pub const DISCONNECT: u16 = 7;
    pub const KICK: u16 = 8;
    pub const SERVER_STATUS: u16 = 9;
    pub const PLAYER_LIST: u16 = 10;
    pub const CHAT: u16 = 11;
    pub const SNAPSHOT_START: u16 = 20;
    pub const SNAPSHOT_CHUNK: u16 = 21;
    pub const SNAPSHOT_END: u16 = 22;
    pub const INPUT: u16 = 100;
    pub const INPUT_ACK: u16 = 101;
    pub const STATE_UPDATE: u16 = 102;
    pub const REJECTION: u16 = 103;
    pub const EVENT: u16 = 104;
}

/// Input action types the bot sends (the server's `InputType`; 0 is None, 12-13 are
/// client-only camera moves, 14-15 game control).
pub mod input {
    pub const PLACE_BUILDING: u8 = 1;
    pub const DEMOLISH_BUILDING: u8 = 2;
    pub const SET_ZONE: u8 = 4;
    pub const PLACE_ROAD: u8 = 6;
    pub const PLACE_PIPE: u8 = 7;
    pub const PLACE_POWER_LINE: u8 = 8;
    pub const SET_TAX_RATE: u8 = 9;
    /// One past the last type the server accepts.
    pub const COUNT: u8 = 16;
}

/// Why a Join or Reconnect was refused (JoinReject's `reason`).
pub fn join_reject_name(reason: u8) -> &'static str {
    match reason {
        1 => "server_full",
        2 => "invalid_name",
        3 => "banned",
        4 => "invalid_token",
        5 => "session_expired",
        _ => "join_rejected",
    }
}

/// Entity delta kinds inside a StateUpdate.
pub const DELTA_CREATE: u8 = 0;
pub const DELTA_UPDATE: u8 = 1;
pub const DELTA_DESTROY: u8 = 2;

/// A malformed message, counted as `message.reason`: the one type of every ZergCity dialect.
pub use crate::games::zergcity::codec::DecodeError;
use crate::games::zergcity::dialects::lz4_sized::Lz4Sized;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum EncodeError {
    #[error("buffer too small")]
    BufferTooSmall,
    #[error("payload over 65,000 bytes")]
    PayloadTooLarge,
}

/// A little-endian reader over a payload; every read is checked.
#[derive(Debug, Clone, Copy)]
pub struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    msg: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8], msg: &'static str) -> Self {
        Self { b, at: 0, msg }
    }
    pub fn remaining(&self) -> usize {
        self.b.len() - self.at
    }
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or(DecodeError::new(self.msg, "truncated"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.bytes(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        let s = self.bytes(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        let s = self.bytes(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        let lo = u64::from(self.u32()?);
        let hi = u64::from(self.u32()?);
        Ok(lo | hi << 32)
    }
    /// `u32 length` + bytes, at most `max` bytes long.
    pub fn string(&mut self, max: usize) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(DecodeError::new(self.msg, "string_too_long"));
        }
        self.bytes(n)
    }
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.b[self.at..];
        self.at = self.b.len();
        s
    }
}

/// The envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    pub ty: u16,
    pub len: u16,
}

impl Header {
    pub fn parse(b: &[u8]) -> Result<Header, DecodeError> {
        if b.len() < HEADER_LEN {
            return Err(DecodeError::new("envelope", "truncated"));
        }
        Ok(Header {
            version: b[0],
            ty: u16::from_le_bytes([b[1], b[2]]),
            len: u16::from_le_bytes([b[3], b[4]]),
        })
    }
}

/// Whether `packet` reads as this dialect's server speaking: a version-1 envelope of a type
/// the server sends whose payload fits the packet. Used to name a wrong dialect
/// (`dialect_hint.implementation`) when the spec dialect's decoder refused the bytes.
pub fn fits(packet: &[u8]) -> bool {
    let Ok(h) = Header::parse(packet) else {
        return false;
    };
    let server_types = [
        ty::HEARTBEAT_RESPONSE,
        ty::JOIN_ACCEPT,
        ty::JOIN_REJECT,
        ty::KICK,
        ty::SERVER_STATUS,
        ty::PLAYER_LIST,
        ty::CHAT,
        ty::STATE_UPDATE,
        ty::REJECTION,
        ty::EVENT,
    ];
    h.version == VERSION
        && server_types.contains(&h.ty)
        && HEADER_LEN + usize::from(h.len) <= packet.len()
}

/// One player of a PlayerList.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlayerInfo<'a> {
    pub id: u8,
    pub name: &'a [u8],
    pub status: u8,
    pub latency_ms: u32,
}

fn read_player<'a>(r: &mut Reader<'a>) -> Result<PlayerInfo<'a>, DecodeError> {
    Ok(PlayerInfo {
        id: r.u8()?,
        name: r.string(MAX_PAYLOAD)?,
        status: r.u8()?,
        latency_ms: r.u32()?,
    })
}

/// A PlayerList, checked to hold `count` sound entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlayerList<'a> {
    pub count: u8,
    list: &'a [u8],
}

impl<'a> PlayerList<'a> {
    pub fn players(&self) -> impl Iterator<Item = PlayerInfo<'a>> + 'a {
        let mut r = Reader::new(self.list, "player_list");
        (0..self.count).map_while(move |_| read_player(&mut r).ok())
    }
}

/// A StateUpdate's body after the `compressed` flag (decompressed when it was compressed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateUpdate<'a> {
    pub tick: u64,
    pub count: u32,
    /// The deltas, already checked to hold `count` sound records.
    deltas: &'a [u8],
}

/// One entity delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityDelta<'a> {
    pub entity: u32,
    pub kind: u8,
    pub data: &'a [u8],
}

impl<'a> StateUpdate<'a> {
    /// Parse and check `tick u64, count u32, count × (entity u32, kind u8, size u32, data)`.
    pub fn parse(body: &'a [u8]) -> Result<StateUpdate<'a>, DecodeError> {
        let mut r = Reader::new(body, "state_update");
        let tick = r.u64()?;
        let count = r.u32()?;
        if count as usize > MAX_DELTAS {
            return Err(DecodeError::new("state_update", "too_many_deltas"));
        }
        let deltas = &body[r.at..];
        let mut check = Reader::new(deltas, "state_update");
        for _ in 0..count {
            check.u32()?;
            let kind = check.u8()?;
            if kind > DELTA_DESTROY {
                return Err(DecodeError::new("state_update", "bad_delta_kind"));
            }
            let n = check.u32()? as usize;
            if n > MAX_PAYLOAD {
                return Err(DecodeError::new("state_update", "delta_too_large"));
            }
            check.bytes(n)?;
        }
        Ok(StateUpdate {
            tick,
            count,
            deltas,
        })
    }

    pub fn deltas(&self) -> impl Iterator<Item = EntityDelta<'a>> + 'a {
        let mut r = Reader::new(self.deltas, "state_update");
        (0..self.count).map_while(move |_| {
            let entity = r.u32().ok()?;
            let kind = r.u8().ok()?;
            let n = r.u32().ok()? as usize;
            let data = r.bytes(n).ok()?;
            Some(EntityDelta { entity, kind, data })
        })
    }
}

/// A decoded server message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    HeartbeatResponse {
        client_ts: u64,
        server_ts: u64,
        tick: u64,
    },
    JoinAccept {
        player: u8,
        token: [u8; TOKEN_LEN],
        tick: u64,
    },
    JoinReject {
        reason: u8,
    },
    Kick,
    ServerStatus {
        state: u8,
        width: u16,
        height: u16,
        max_players: u8,
        players: u8,
        tick: u64,
    },
    PlayerList(PlayerList<'a>),
    Chat {
        sender: u8,
    },
    StateUpdate {
        /// Sent LZ4-compressed.
        compressed: bool,
        /// Payload bytes on the wire (after the envelope).
        wire_len: usize,
        update: StateUpdate<'a>,
    },
    Rejection {
        sequence: u32,
        reason: u8,
    },
    Event,
    /// A known type a client need not act on (snapshot transfer, InputAck, trades, ...).
    Other(u16),
}

/// Decompresses StateUpdate bodies into a buffer kept between messages.
#[derive(Debug, Default)]
pub struct Decompressor(Lz4Sized);

impl Decompressor {
    pub fn set_limit(&mut self, limit: usize) {
        self.0.set_limit(limit);
    }

    /// `u32 original size` + LZ4 block (the server's compressed form).
    fn inflate(&mut self, data: &[u8]) -> Result<&[u8], DecodeError> {
        self.0.inflate("state_update", data)
    }

    /// Give a buffer grown past 1 MiB back.
    pub fn shrink(&mut self) {
        self.0.shrink()
    }
}

/// Decode the message at the start of `b`; returns it and the bytes it took.
pub fn decode<'a>(
    b: &'a [u8],
    dec: &'a mut Decompressor,
) -> Result<(Message<'a>, usize), DecodeError> {
    let h = Header::parse(b)?;
    if h.version != VERSION {
        return Err(DecodeError::new("envelope", "version"));
    }
    let end = HEADER_LEN + usize::from(h.len);
    if usize::from(h.len) > MAX_PAYLOAD {
        return Err(DecodeError::new("envelope", "payload_too_large"));
    }
    let payload = b
        .get(HEADER_LEN..end)
        .ok_or(DecodeError::new("envelope", "truncated"))?;
    let m = decode_payload(h.ty, payload, dec)?;
    Ok((m, end))
}

fn decode_payload<'a>(
    t: u16,
    p: &'a [u8],
    dec: &'a mut Decompressor,
) -> Result<Message<'a>, DecodeError> {
    Ok(match t {
        ty::HEARTBEAT_RESPONSE => {
            let mut r = Reader::new(p, "heartbeat_response");
            Message::HeartbeatResponse {
                client_ts: r.u64()?,
                server_ts: r.u64()?,
                tick: r.u64()?,
            }
        }
        ty::JOIN_ACCEPT => {
            let mut r = Reader::new(p, "join_accept");
            let player = r.u8()?;
            let mut token = [0u8; TOKEN_LEN];
            token.copy_from_slice(r.bytes(TOKEN_LEN)?);
            let tick = r.u64()?;
            if player == 0 {
                return Err(DecodeError::new("join_accept", "player_zero"));
            }
            Message::JoinAccept {
                player,
                token,
                tick,
            }
        }
        ty::JOIN_REJECT => {
            let mut r = Reader::new(p, "join_reject");
            let reason = r.u8()?;
            r.string(MAX_PAYLOAD)?;
            Message::JoinReject { reason }
        }
        ty::KICK => {
            Reader::new(p, "kick").string(MAX_PAYLOAD)?;
            Message::Kick
        }
        ty::SERVER_STATUS => {
            let mut r = Reader::new(p, "server_status");
            let state = r.u8()?;
            let _tier = r.u8()?;
            let width = r.u16()?;
            let height = r.u16()?;
            let max_players = r.u8()?;
            let players = r.u8()?;
            let tick = r.u64()?;
            r.string(MAX_PAYLOAD)?;
            Message::ServerStatus {
                state,
                width,
                height,
                max_players,
                players,
                tick,
            }
        }
        ty::PLAYER_LIST => {
            let mut r = Reader::new(p, "player_list");
            let count = r.u8()?;
            let list = r.rest();
            let mut check = Reader::new(list, "player_list");
            for _ in 0..count {
                read_player(&mut check)?;
            }
            Message::PlayerList(PlayerList { count, list })
        }
        ty::CHAT => {
            let mut r = Reader::new(p, "chat");
            let sender = r.u8()?;
            r.string(MAX_PAYLOAD)?;
            r.u64()?;
            Message::Chat { sender }
        }
        ty::STATE_UPDATE => {
            let mut r = Reader::new(p, "state_update");
            let compressed = r.u8()? != 0;
            let body = r.rest();
            let body = if compressed { dec.inflate(body)? } else { body };
            Message::StateUpdate {
                compressed,
                wire_len: p.len(),
                update: StateUpdate::parse(body)?,
            }
        }
        ty::REJECTION => {
            let mut r = Reader::new(p, "rejection");
            let sequence = r.u32()?;
            let reason = r.u8()?;
            r.string(MAX_PAYLOAD)?;
            Message::Rejection { sequence, reason }
        }
        ty::EVENT => Message::Event,
        ty::HEARTBEAT
        | ty::JOIN
        | ty::RECONNECT
        | ty::DISCONNECT
        | ty::SNAPSHOT_START
        | ty::SNAPSHOT_CHUNK
        | ty::SNAPSHOT_END
        | ty::INPUT
        | ty::INPUT_ACK
        | 110..=113
        | 120..=125 => Message::Other(t),
        _ => return Err(DecodeError::new("envelope", "unknown_type")),
    })
}

/// A little-endian writer into a caller's buffer.
pub struct Writer<'a> {
    b: &'a mut [u8],
    at: usize,
}

impl<'a> Writer<'a> {
    pub fn new(b: &'a mut [u8]) -> Self {
        Self { b, at: 0 }
    }
    pub fn len(&self) -> usize {
        self.at
    }
    pub fn is_empty(&self) -> bool {
        self.at == 0
    }
    pub fn bytes(&mut self, s: &[u8]) -> Result<(), EncodeError> {
        let end = self.at + s.len();
        let dst = self
            .b
            .get_mut(self.at..end)
            .ok_or(EncodeError::BufferTooSmall)?;
        dst.copy_from_slice(s);
        self.at = end;
        Ok(())
    }
    pub fn u8(&mut self, v: u8) -> Result<(), EncodeError> {
        self.bytes(&[v])
    }
    pub fn u16(&mut self, v: u16) -> Result<(), EncodeError> {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u32(&mut self, v: u32) -> Result<(), EncodeError> {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u64(&mut self, v: u64) -> Result<(), EncodeError> {
        self.bytes(&v.to_le_bytes())
    }
    pub fn string(&mut self, s: &[u8]) -> Result<(), EncodeError> {
        let n = u32::try_from(s.len()).map_err(|_| EncodeError::PayloadTooLarge)?;
        self.u32(n)?;
        self.bytes(s)
    }
}

/// Write one message: the envelope, then what `body` writes; returns the total length.
pub fn encode(
    buf: &mut [u8],
    t: u16,
    body: impl FnOnce(&mut Writer<'_>) -> Result<(), EncodeError>,
) -> Result<usize, EncodeError> {
    let (head, rest) = buf
        .split_at_mut_checked(HEADER_LEN)
        .ok_or(EncodeError::BufferTooSmall)?;
    let mut w = Writer::new(rest);
    body(&mut w)?;
    let n = w.len();
    if n > MAX_PAYLOAD {
        return Err(EncodeError::PayloadTooLarge);
    }
    head[0] = VERSION;
    head[1..3].copy_from_slice(&t.to_le_bytes());
    head[3..5].copy_from_slice(&(n as u16).to_le_bytes());
    Ok(HEADER_LEN + n)
}

/// The 30-byte Input payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Input {
    pub tick: u64,
    pub player: u8,
    pub kind: u8,
    pub sequence: u32,
    pub x: i16,
    pub y: i16,
    pub param1: u32,
    pub param2: u32,
    pub value: i32,
}

impl Input {
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        encode(buf, ty::INPUT, |w| {
            w.u64(self.tick)?;
            w.u8(self.player)?;
            w.u8(self.kind)?;
            w.u32(self.sequence)?;
            w.u16(self.x as u16)?;
            w.u16(self.y as u16)?;
            w.u32(self.param1)?;
            w.u32(self.param2)?;
            w.u32(self.value as u32)
        })
    }
}

/// Join: `name string, has_token u8, [token]`.
pub fn encode_join(
    buf: &mut [u8],
    name: &[u8],
    token: Option<&[u8; TOKEN_LEN]>,
) -> Result<usize, EncodeError> {
    encode(buf, ty::JOIN, |w| {
        w.string(&name[..name.len().min(MAX_NAME)])?;
        match token {
            Some(t) => {
                w.u8(1)?;
                w.bytes(t)
            }
            None => w.u8(0),
        }
    })
}

/// Reconnect: `token [16], name string`.
pub fn encode_reconnect(
    buf: &mut [u8],
    token: &[u8; TOKEN_LEN],
    name: &[u8],
) -> Result<usize, EncodeError> {
    encode(buf, ty::RECONNECT, |w| {
        w.bytes(token)?;
        w.string(&name[..name.len().min(MAX_NAME)])
    })
}

/// Heartbeat: `client timestamp u64, sequence u32`.
pub fn encode_heartbeat(buf: &mut [u8], ts: u64, seq: u32) -> Result<usize, EncodeError> {
    encode(buf, ty::HEARTBEAT, |w| {
        w.u64(ts)?;
        w.u32(seq)
    })
}

// ---- the server's side (the reference server and tests) -----------------------------------

pub fn encode_heartbeat_response(
    buf: &mut [u8],
    client_ts: u64,
    server_ts: u64,
    tick: u64,
) -> Result<usize, EncodeError> {
    encode(buf, ty::HEARTBEAT_RESPONSE, |w| {
        w.u64(client_ts)?;
        w.u64(server_ts)?;
        w.u64(tick)
    })
}

pub fn encode_join_accept(
    buf: &mut [u8],
    player: u8,
    token: &[u8; TOKEN_LEN],
    tick: u64,
) -> Result<usize, EncodeError> {
    encode(buf, ty::JOIN_ACCEPT, |w| {
        w.u8(player)?;
        w.bytes(token)?;
        w.u64(tick)
    })
}

pub fn encode_join_reject(buf: &mut [u8], reason: u8, text: &[u8]) -> Result<usize, EncodeError> {
    encode(buf, ty::JOIN_REJECT, |w| {
        w.u8(reason)?;
        w.string(text)
    })
}

/// ServerStatus with the medium map (256 × 256) the server defaults to.
pub fn encode_server_status(
    buf: &mut [u8],
    state: u8,
    max_players: u8,
    players: u8,
    tick: u64,
    name: &[u8],
) -> Result<usize, EncodeError> {
    encode(buf, ty::SERVER_STATUS, |w| {
        w.u8(state)?;
        w.u8(1)?;
        w.u16(256)?;
        w.u16(256)?;
        w.u8(max_players)?;
        w.u8(players)?;
        w.u64(tick)?;
        w.string(name)
    })
}

/// PlayerList of `(id, name, status, latency ms)`.
pub fn encode_player_list<'p>(
    buf: &mut [u8],
    players: impl ExactSizeIterator<Item = (u8, &'p [u8], u8, u32)>,
) -> Result<usize, EncodeError> {
    let n = u8::try_from(players.len()).map_err(|_| EncodeError::PayloadTooLarge)?;
    encode(buf, ty::PLAYER_LIST, |w| {
        w.u8(n)?;
        for (id, name, status, latency) in players {
            w.u8(id)?;
            w.string(name)?;
            w.u8(status)?;
            w.u32(latency)?;
        }
        Ok(())
    })
}

/// StateUpdate from an uncompressed body (`tick, count, deltas`) built in `scratch`:
/// compressed (`1`, `u32 size`, LZ4 block) when the body is over 1024 bytes and that makes
/// it smaller, else plain (`0`, body).
pub fn encode_state_update(buf: &mut [u8], body: &[u8]) -> Result<usize, EncodeError> {
    encode(buf, ty::STATE_UPDATE, |w| {
        if body.len() > COMPRESSION_THRESHOLD {
            let bound = lz4_flex::block::get_maximum_output_size(body.len());
            let mut tmp = vec![0u8; bound];
            if let Ok(n) = lz4_flex::block::compress_into(body, &mut tmp) {
                if n + 4 < body.len() {
                    w.u8(1)?;
                    w.u32(body.len() as u32)?;
                    return w.bytes(&tmp[..n]);
                }
            }
        }
        w.u8(0)?;
        w.bytes(body)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_is_thirty_bytes_after_a_five_byte_envelope() {
        let mut b = [0u8; 64];
        let n = Input {
            tick: 0x0102_0304_0506_0708,
            player: 3,
            kind: input::SET_ZONE,
            sequence: 9,
            x: -2,
            y: 7,
            param1: 1,
            param2: 2,
            value: -5,
        }
        .encode(&mut b)
        .unwrap();
        assert_eq!(n, HEADER_LEN + INPUT_LEN);
        assert_eq!(&b[..5], &[1, 100, 0, 30, 0]);
        assert_eq!(&b[5..13], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(b[13], 3);
        assert_eq!(b[14], input::SET_ZONE);
        assert_eq!(&b[19..21], &(-2i16).to_le_bytes());
        assert_eq!(&b[31..35], &(-5i32).to_le_bytes());
    }

    #[test]
    fn join_accept_and_heartbeat_response_round_trip() {
        let mut b = [0u8; 128];
        let mut dec = Decompressor::default();
        let n = encode_join_accept(&mut b, 2, &[7; 16], 99).unwrap();
        assert_eq!(n, HEADER_LEN + 25);
        let (m, used) = decode(&b[..n], &mut dec).unwrap();
        assert_eq!(used, n);
        assert_eq!(
            m,
            Message::JoinAccept {
                player: 2,
                token: [7; 16],
                tick: 99
            }
        );
        let n = encode_heartbeat_response(&mut b, 5, 6, 7).unwrap();
        assert_eq!(n, HEADER_LEN + 24);
        let (m, _) = decode(&b[..n], &mut dec).unwrap();
        assert_eq!(
            m,
            Message::HeartbeatResponse {
                client_ts: 5,
                server_ts: 6,
                tick: 7
            }
        );
    }

    fn body(tick: u64, deltas: &[(u32, u8, usize)]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&tick.to_le_bytes());
        v.extend_from_slice(&(deltas.len() as u32).to_le_bytes());
        for &(id, kind, n) in deltas {
            v.extend_from_slice(&id.to_le_bytes());
            v.push(kind);
            v.extend_from_slice(&(n as u32).to_le_bytes());
            v.extend(std::iter::repeat_n(0xAB, n));
        }
        v
    }

    #[test]
    fn state_updates_are_compressed_only_above_1024_bytes() {
        let mut b = vec![0u8; 70_000];
        let mut dec = Decompressor::default();
        dec.set_limit(1 << 20);
        let small = body(5, &[(1, DELTA_CREATE, 100)]);
        let n = encode_state_update(&mut b, &small).unwrap();
        assert_eq!(b[HEADER_LEN], 0);
        let (m, _) = decode(&b[..n], &mut dec).unwrap();
        let Message::StateUpdate {
            compressed, update, ..
        } = m
        else {
            panic!("{m:?}")
        };
        assert!(!compressed);
        assert_eq!(update.tick, 5);
        assert_eq!(update.deltas().count(), 1);

        let big = body(6, &[(1, DELTA_UPDATE, 2000), (2, DELTA_DESTROY, 0)]);
        let n = encode_state_update(&mut b, &big).unwrap();
        assert_eq!(b[HEADER_LEN], 1);
        assert!(n < big.len());
        let (m, _) = decode(&b[..n], &mut dec).unwrap();
        let Message::StateUpdate {
            compressed, update, ..
        } = m
        else {
            panic!("{m:?}")
        };
        assert!(compressed);
        assert_eq!(update.tick, 6);
        let d: Vec<_> = update.deltas().collect();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].data.len(), 2000);
        assert_eq!(d[1].kind, DELTA_DESTROY);
    }

    #[test]
    fn broken_messages_are_named() {
        let mut dec = Decompressor::default();
        dec.set_limit(1 << 20);
        assert_eq!(
            decode(&[2, 2, 0, 0, 0], &mut dec).unwrap_err().reason,
            "version"
        );
        assert_eq!(
            decode(&[1, 2, 0, 30, 0, 1], &mut dec).unwrap_err().reason,
            "truncated"
        );
        assert_eq!(
            decode(&[1, 0xEE, 0, 0, 0], &mut dec).unwrap_err().reason,
            "unknown_type"
        );
        let mut b = [0u8; 64];
        let n = encode(&mut b, ty::STATE_UPDATE, |w| {
            w.u8(1)?;
            w.u32(4000)?;
            w.bytes(&[0xFF; 10])
        })
        .unwrap();
        assert_eq!(decode(&b[..n], &mut dec).unwrap_err().reason, "lz4_corrupt");
    }

    #[test]
    fn fits_names_this_dialect_and_not_the_spec_header() {
        let mut b = [0u8; 64];
        let n = encode_server_status(&mut b, 1, 4, 0, 0, b"z").unwrap();
        assert!(fits(&b[..n]));
        assert!(!fits(
            b"ZCNT\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
        ));
    }
}
