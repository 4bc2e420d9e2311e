//! The ZergCity wire format (`docs/protocols/zergcity.md`): the header,
//! every message of §4-§7 and §12, LZ4 block compression (§8) and the validation of §13.1.
//! Snapshot *contents* (sections, entities, components) are in [`super::world`].
//!
//! # Framing
//! One ZergCity message per ENet packet. Every message starts with the 16-byte little-endian
//! header:
//! ```text
//! magic 5A 43 4E 54 ("ZCNT") · protocol_version u8 = 1 · message_type u8 · flags u8
//! · reserved u8 (written 0, not checked) · payload_length u32 · sequence u32
//! ```
//! `payload_length` must equal the bytes after the header exactly (a packet shorter is
//! `header.truncated`, longer `header.trailing_bytes`). `sequence` counts the messages one
//! side sent on one connection (all channels), from 0; the bot measures downstream loss
//! from its gaps (see the protocol's module docs).
//!
//! # Message bodies (after the header; fixed sizes are whole messages, header included)
//! ```text
//! 0x00 ClientHello   (72) client_version u32 · player_name [32] (UTF-8, NUL-padded)
//!                         · session_token [16] · requested_slot u32 (0-3, 0xFF any)
//! 0x01 ServerHello   (64) server_version u32 · result u8 · assigned_slot u8 · padding u16
//!                         · session_token [16] · tick_rate u32 · current_tick u64
//!                         · map_width u32 · map_height u32 · num_players u32
//! 0x02 Disconnect   (144) reason u8 · message [127] (UTF-8, NUL-terminated)
//! 0x03 Ping          (32) timestamp u64 (µs) · server_tick u64 (0 in Ping)
//! 0x04 Pong          (32) timestamp u64 (the Ping's, echoed) · server_tick u64
//! 0x10 FullSnapshot       uncompressed_size u32 · snapshot_tick u64 · LZ4 block
//!                         (COMPRESSED flag required; the tick precedes the data)
//! 0x11 DeltaSnapshot      base_tick u64 · target_tick u64 · entity_count u16
//!                         · component_count u16 · payload (see `world`)
//! 0x12 SnapshotAck   (28) acked_tick u64 · last_input_seq u32
//! 0x20 InputMessage       input_sequence u32 · client_tick u64 · input_type u8 · input_data
//! 0x21 InputAck      (29) input_sequence u32 · result u8 · applied_tick u64
//! 0x30-0x34 game actions  no layout in the spec: accepted as opaque bodies (the bot sends
//!                         its actions inside InputMessage, which the spec acknowledges)
//! 0x40 ChatMessage        text_len u16 · text (UTF-8, at most 256 bytes)
//! 0x41 ChatBroadcast      sender_slot u8 · text_len u16 · text
//! 0xF0 ServerCommand      opaque
//! 0xFE ErrorMessage (224) error_code u32 · context u32 · message [200] (NUL-terminated)
//! ```
//!
//! # Input data (InputMessage `input_type`; 0x01-0x03 from §6.1, the rest defined here)
//! ```text
//! 0x00 None            (empty)
//! 0x01 PlaceBuilding   building_type_id u32 · grid_x i32 · grid_y i32 · rotation u8 (0-3)
//! 0x02 DesignateZone   zone_type u8 (0-3) · density u8 (0-1) · rect_count u16
//!                      · rect_count × (x i32 · y i32 · width u32 · height u32)
//! 0x03 Demolish        tile_count u16 · tile_count × (grid_x i32 · grid_y i32)
//! 0x04 PurchaseTile    grid_x i32 · grid_y i32
//! 0x05 SetTributeRate  zone_type u8 (0 every zone, 1-3 as DesignateZone) · rate_percent u8
//! 0x06-0x08 PlaceRoad / PlaceConduit / PlacePipe   as Demolish: a tile list
//! 0x09 CancelAction    input_sequence u32 (the action to cancel)
//! ```
//! Counts must match the bytes exactly (`input_message.count_mismatch`).
//!
//! # Compression (§8)
//! FullSnapshot is always compressed with its own layout above. Any other message whose body
//! is over 1024 bytes is sent with the COMPRESSED flag and a body of
//! `uncompressed_size u32 · LZ4 block of the body`. Before decompressing, the stated size is
//! checked against the receiver's limit (16 MiB by default) and against what LZ4 can produce
//! from the bytes present (at most 255 bytes per input byte): a small packet claiming a huge
//! size is `<type>.impossible_size` and nothing is allocated. Decompression writes into a
//! reused buffer of exactly the stated size, and must fill it exactly
//! (`<type>.size_mismatch` otherwise).
//!
//! # Validation order (§13.1; each failure counted as `message.reason`, never a panic)
//! fewer than 16 bytes `header.truncated` · magic `header.bad_magic` · version
//! `header.bad_version` · `payload_length` over 16 MiB `header.oversized` · length against the
//! packet `header.truncated` / `header.trailing_bytes` · unknown type: not an error, the
//! caller counts `unknown_message_type` and ignores it · then the body: fixed sizes
//! `<type>.bad_size`, decompression as above, fields (`truncated`, `trailing_bytes`,
//! `count_mismatch`, `bad_value`).

use thiserror::Error;

use crate::protocol::prelude::wire::{Le, Reader, WireError, Writer};

pub const MAGIC: [u8; 4] = [0x5A, 0x43, 0x4E, 0x54];
pub const PROTOCOL_VERSION: u8 = 1;
pub const HEADER_LEN: usize = 16;
/// §13.1's payload cap.
pub const MAX_PAYLOAD: usize = 16 * 1024 * 1024;
/// Bodies longer than this are LZ4-compressed (§8.1).
pub const COMPRESS_THRESHOLD: usize = 1024;
/// The most bytes an LZ4 block can expand one input byte to (a match length is extended by
/// one 255 per byte), so a stated size beyond `255 × input` is a lie.
pub const LZ4_MAX_RATIO: usize = 255;
/// Largest player_name, Disconnect message and ErrorMessage message fields.
pub const NAME_LEN: usize = 32;
pub const DISCONNECT_TEXT_LEN: usize = 127;
pub const ERROR_TEXT_LEN: usize = 200;
pub const TOKEN_LEN: usize = 16;
/// Longest chat text the reference layout carries.
pub const MAX_CHAT_LEN: usize = 256;
/// `requested_slot` for "any slot".
pub const ANY_SLOT: u32 = 0xFF;

pub const FLAG_COMPRESSED: u8 = 0x01;
pub const FLAG_FRAGMENTED: u8 = 0x02;
pub const FLAG_ACK_REQUEST: u8 = 0x04;
pub const FLAG_RELIABLE: u8 = 0x08;

/// §10's channels.
pub const CHANNEL_ORDERED: u8 = 0;
pub const CHANNEL_BULK: u8 = 1;
pub const CHANNEL_UNRELIABLE: u8 = 2;
pub const CHANNELS: usize = 3;

/// Whole-message sizes of the fixed layouts.
pub const CLIENT_HELLO_LEN: usize = 72;
pub const SERVER_HELLO_LEN: usize = 64;
pub const DISCONNECT_LEN: usize = 144;
pub const PING_LEN: usize = 32;
pub const SNAPSHOT_ACK_LEN: usize = 28;
pub const INPUT_ACK_LEN: usize = 29;
pub const ERROR_MESSAGE_LEN: usize = 224;
/// FullSnapshot's fields before the LZ4 data, and DeltaSnapshot's before its payload.
pub const FULL_PREFIX_LEN: usize = 12;
pub const DELTA_PREFIX_LEN: usize = 20;

/// §3's message types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MsgType {
    ClientHello = 0x00,
    ServerHello = 0x01,
    Disconnect = 0x02,
    Ping = 0x03,
    Pong = 0x04,
    FullSnapshot = 0x10,
    DeltaSnapshot = 0x11,
    SnapshotAck = 0x12,
    InputMessage = 0x20,
    InputAck = 0x21,
    PurchaseTile = 0x30,
    PlaceBuilding = 0x31,
    DesignateZone = 0x32,
    Demolish = 0x33,
    SetTributeRate = 0x34,
    ChatMessage = 0x40,
    ChatBroadcast = 0x41,
    ServerCommand = 0xF0,
    ErrorMessage = 0xFE,
}

impl MsgType {
    /// The type of a header byte; `None` for unknown types (and 0xFF "Reserved"), which are
    /// counted and ignored.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0x00 => Self::ClientHello,
            0x01 => Self::ServerHello,
            0x02 => Self::Disconnect,
            0x03 => Self::Ping,
            0x04 => Self::Pong,
            0x10 => Self::FullSnapshot,
            0x11 => Self::DeltaSnapshot,
            0x12 => Self::SnapshotAck,
            0x20 => Self::InputMessage,
            0x21 => Self::InputAck,
            0x30 => Self::PurchaseTile,
            0x31 => Self::PlaceBuilding,
            0x32 => Self::DesignateZone,
            0x33 => Self::Demolish,
            0x34 => Self::SetTributeRate,
            0x40 => Self::ChatMessage,
            0x41 => Self::ChatBroadcast,
            0xF0 => Self::ServerCommand,
            0xFE => Self::ErrorMessage,
            _ => return None,
        })
    }

    /// The stable name decode errors and counters use.
    pub fn name(self) -> &'static str {
        match self {
            Self::ClientHello => "client_hello",
            Self::ServerHello => "server_hello",
            Self::Disconnect => "disconnect",
            Self::Ping => "ping",
            Self::Pong => "pong",
            Self::FullSnapshot => "full_snapshot",
            Self::DeltaSnapshot => "delta_snapshot",
            Self::SnapshotAck => "snapshot_ack",
            Self::InputMessage => "input_message",
            Self::InputAck => "input_ack",
            Self::PurchaseTile => "purchase_tile",
            Self::PlaceBuilding => "place_building",
            Self::DesignateZone => "designate_zone",
            Self::Demolish => "demolish",
            Self::SetTributeRate => "set_tribute_rate",
            Self::ChatMessage => "chat_message",
            Self::ChatBroadcast => "chat_broadcast",
            Self::ServerCommand => "server_command",
            Self::ErrorMessage => "error_message",
        }
    }

    /// §10: `(channel, reliable)`. Handshake, input, acks, chat and errors reliable ordered on
    /// 0; FullSnapshot reliable on 1 (its own ordering, so a big snapshot does not hold up
    /// InputAcks); DeltaSnapshot, Ping and Pong unreliable on 2.
    pub fn channel(self) -> (u8, bool) {
        match self {
            Self::FullSnapshot => (CHANNEL_BULK, true),
            Self::DeltaSnapshot | Self::Ping | Self::Pong => (CHANNEL_UNRELIABLE, false),
            _ => (CHANNEL_ORDERED, true),
        }
    }

    /// The whole-message size of a fixed layout.
    pub fn fixed_len(self) -> Option<usize> {
        match self {
            Self::ClientHello => Some(CLIENT_HELLO_LEN),
            Self::ServerHello => Some(SERVER_HELLO_LEN),
            Self::Disconnect => Some(DISCONNECT_LEN),
            Self::Ping | Self::Pong => Some(PING_LEN),
            Self::SnapshotAck => Some(SNAPSHOT_ACK_LEN),
            Self::InputAck => Some(INPUT_ACK_LEN),
            Self::ErrorMessage => Some(ERROR_MESSAGE_LEN),
            _ => None,
        }
    }
}

/// A malformed message: counted as `message.reason`, then dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("{message}: {reason}")]
pub struct DecodeError {
    pub message: &'static str,
    pub reason: &'static str,
}

impl DecodeError {
    pub fn new(message: &'static str, reason: &'static str) -> Self {
        Self { message, reason }
    }

    fn wire(message: &'static str, e: WireError) -> Self {
        Self::new(message, e.reason())
    }
}

/// Why a message could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum EncodeError {
    #[error("the buffer is too small for the message")]
    BufferTooSmall,
    #[error("a count or text does not fit its field")]
    FieldTooLong,
}

impl From<WireError> for EncodeError {
    fn from(_: WireError) -> Self {
        EncodeError::BufferTooSmall
    }
}

/// The 16-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    pub msg_type: u8,
    pub flags: u8,
    pub payload_len: u32,
    pub sequence: u32,
}

impl Header {
    /// Read and check the header of a packet (§13.1: magic, version, size cap, length).
    pub fn parse(packet: &[u8]) -> Result<Header, DecodeError> {
        let mut r = Reader::<Le>::new(packet);
        let err = |reason| DecodeError::new("header", reason);
        if packet.len() < HEADER_LEN {
            return Err(err("truncated"));
        }
        let magic = r.array::<4>().map_err(|e| DecodeError::wire("header", e))?;
        if magic != MAGIC {
            return Err(err("bad_magic"));
        }
        let h = (|| -> Result<Header, WireError> {
            let version = r.u8()?;
            let msg_type = r.u8()?;
            let flags = r.u8()?;
            let _reserved = r.u8()?;
            Ok(Header {
                version,
                msg_type,
                flags,
                payload_len: r.u32()?,
                sequence: r.u32()?,
            })
        })()
        .map_err(|e| DecodeError::wire("header", e))?;
        if h.version != PROTOCOL_VERSION {
            return Err(err("bad_version"));
        }
        let len = h.payload_len as usize;
        if len > MAX_PAYLOAD {
            return Err(err("oversized"));
        }
        let have = packet.len() - HEADER_LEN;
        if len > have {
            return Err(err("truncated"));
        }
        if len < have {
            return Err(err("trailing_bytes"));
        }
        Ok(h)
    }

    pub fn compressed(&self) -> bool {
        self.flags & FLAG_COMPRESSED != 0
    }
}

/// Write a header. `flags` gets RELIABLE added for reliable types.
pub fn write_header(
    w: &mut Writer<'_, Le>,
    ty: MsgType,
    flags: u8,
    payload_len: usize,
    sequence: u32,
) -> Result<(), EncodeError> {
    let len = u32::try_from(payload_len).map_err(|_| EncodeError::FieldTooLong)?;
    if payload_len > MAX_PAYLOAD {
        return Err(EncodeError::FieldTooLong);
    }
    let reliable = if ty.channel().1 { FLAG_RELIABLE } else { 0 };
    w.bytes(&MAGIC)?;
    w.u8(PROTOCOL_VERSION)?;
    w.u8(ty as u8)?;
    w.u8(flags | reliable)?;
    w.u8(0)?;
    w.u32(len)?;
    w.u32(sequence)?;
    Ok(())
}

/// ServerHello result codes (§4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloResult {
    Accepted,
    ServerFull,
    VersionMismatch,
    InvalidSessionToken,
    Banned,
    NotAcceptingPlayers,
    Other(u8),
}

impl HelloResult {
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Accepted,
            1 => Self::ServerFull,
            2 => Self::VersionMismatch,
            3 => Self::InvalidSessionToken,
            4 => Self::Banned,
            5 => Self::NotAcceptingPlayers,
            v => Self::Other(v),
        }
    }

    pub fn to_u8(self) -> u8 {
        match self {
            Self::Accepted => 0,
            Self::ServerFull => 1,
            Self::VersionMismatch => 2,
            Self::InvalidSessionToken => 3,
            Self::Banned => 4,
            Self::NotAcceptingPlayers => 5,
            Self::Other(v) => v,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::ServerFull => "server_full",
            Self::VersionMismatch => "version_mismatch",
            Self::InvalidSessionToken => "invalid_session_token",
            Self::Banned => "banned",
            Self::NotAcceptingPlayers => "not_accepting_players",
            Self::Other(_) => "other",
        }
    }
}

/// Disconnect reason codes (§4.3).
pub const DISCONNECT_NORMAL: u8 = 0;
pub const DISCONNECT_KICKED: u8 = 1;
pub const DISCONNECT_SHUTDOWN: u8 = 2;
pub const DISCONNECT_TIMEOUT: u8 = 3;
pub const DISCONNECT_PROTOCOL_ERROR: u8 = 4;

pub fn disconnect_reason_name(r: u8) -> &'static str {
    match r {
        DISCONNECT_NORMAL => "normal",
        DISCONNECT_KICKED => "kicked",
        DISCONNECT_SHUTDOWN => "server_shutdown",
        DISCONNECT_TIMEOUT => "timeout",
        DISCONNECT_PROTOCOL_ERROR => "protocol_error",
        _ => "other",
    }
}

/// InputAck result codes (§6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum InputResult {
    Success = 0,
    InvalidPosition = 1,
    InsufficientFunds = 2,
    NotOwner = 3,
    BlockedByTerrain = 4,
    RequirementsNotMet = 5,
    RateLimited = 6,
}

impl InputResult {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Success,
            1 => Self::InvalidPosition,
            2 => Self::InsufficientFunds,
            3 => Self::NotOwner,
            4 => Self::BlockedByTerrain,
            5 => Self::RequirementsNotMet,
            6 => Self::RateLimited,
            _ => return None,
        })
    }

    /// Counter names (`input_result.<name>`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Success => "accepted",
            Self::InvalidPosition => "invalid_position",
            Self::InsufficientFunds => "insufficient_funds",
            Self::NotOwner => "not_owner",
            Self::BlockedByTerrain => "blocked_by_terrain",
            Self::RequirementsNotMet => "requirements_not_met",
            Self::RateLimited => "rate_limited",
        }
    }
}

/// ErrorMessage codes (§12.2).
pub fn error_code_name(code: u32) -> &'static str {
    match code {
        0 => "none",
        1 => "protocol_mismatch",
        2 => "invalid_message",
        3 => "invalid_sequence",
        4 => "rate_limited",
        5 => "server_full",
        6 => "not_authorized",
        7 => "internal_error",
        8 => "timeout",
        _ => "other",
    }
}
pub const ERROR_INVALID_MESSAGE: u32 = 2;
pub const ERROR_SERVER_FULL: u32 = 5;

/// InputMessage input types (§6.1).
pub const INPUT_NONE: u8 = 0x00;
pub const INPUT_PLACE_BUILDING: u8 = 0x01;
pub const INPUT_DESIGNATE_ZONE: u8 = 0x02;
pub const INPUT_DEMOLISH: u8 = 0x03;
pub const INPUT_PURCHASE_TILE: u8 = 0x04;
pub const INPUT_SET_TRIBUTE_RATE: u8 = 0x05;
pub const INPUT_PLACE_ROAD: u8 = 0x06;
pub const INPUT_PLACE_CONDUIT: u8 = 0x07;
pub const INPUT_PLACE_PIPE: u8 = 0x08;
pub const INPUT_CANCEL_ACTION: u8 = 0x09;

/// A grid rectangle of DesignateZone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GridRect {
    pub x: i32,
    pub y: i32,
    pub width: u32,
    pub height: u32,
}

/// A list of `count` fixed-size records, validated once, iterated on demand (no allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Records<'a> {
    bytes: &'a [u8],
}

impl<'a> Records<'a> {
    pub fn len_in(&self, record: usize) -> usize {
        self.bytes.len() / record.max(1)
    }

    /// Grid tiles `(x, y)`.
    pub fn tiles(&self) -> impl Iterator<Item = (i32, i32)> + 'a {
        self.bytes.chunks_exact(8).map(|c| {
            let mut r = Reader::<Le>::new(c);
            (r.i32().unwrap_or(0), r.i32().unwrap_or(0))
        })
    }

    pub fn rects(&self) -> impl Iterator<Item = GridRect> + 'a {
        self.bytes.chunks_exact(16).map(|c| {
            let mut r = Reader::<Le>::new(c);
            GridRect {
                x: r.i32().unwrap_or(0),
                y: r.i32().unwrap_or(0),
                width: r.u32().unwrap_or(0),
                height: r.u32().unwrap_or(0),
            }
        })
    }
}

/// Typed input data, borrowed from the message (decoding) or the caller (encoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action<'a> {
    None,
    PlaceBuilding {
        building_type: u32,
        x: i32,
        y: i32,
        rotation: u8,
    },
    DesignateZone {
        zone_type: u8,
        density: u8,
        rects: &'a [GridRect],
    },
    /// A zone as decoded (records borrowed from the wire).
    DesignateZoneWire {
        zone_type: u8,
        density: u8,
        rects: Records<'a>,
    },
    /// Demolish, PlaceRoad, PlaceConduit, PlacePipe: `kind` is the input type.
    Tiles {
        kind: u8,
        tiles: &'a [(i32, i32)],
    },
    TilesWire {
        kind: u8,
        tiles: Records<'a>,
    },
    PurchaseTile {
        x: i32,
        y: i32,
    },
    /// `zone_type` as DesignateZone's (0 = every zone, 1-3 one), `rate` in percent.
    SetTributeRate {
        zone_type: u8,
        rate: u8,
    },
    CancelAction {
        input_sequence: u32,
    },
}

impl Action<'_> {
    pub fn input_type(&self) -> u8 {
        match self {
            Action::None => INPUT_NONE,
            Action::PlaceBuilding { .. } => INPUT_PLACE_BUILDING,
            Action::DesignateZone { .. } | Action::DesignateZoneWire { .. } => INPUT_DESIGNATE_ZONE,
            Action::Tiles { kind, .. } | Action::TilesWire { kind, .. } => *kind,
            Action::PurchaseTile { .. } => INPUT_PURCHASE_TILE,
            Action::SetTributeRate { .. } => INPUT_SET_TRIBUTE_RATE,
            Action::CancelAction { .. } => INPUT_CANCEL_ACTION,
        }
    }

    /// Counter names (`action.<name>`).
    pub fn name(&self) -> &'static str {
        match self.input_type() {
            INPUT_NONE => "none",
            INPUT_PLACE_BUILDING => "place_building",
            INPUT_DESIGNATE_ZONE => "designate_zone",
            INPUT_DEMOLISH => "demolish",
            INPUT_PURCHASE_TILE => "purchase_tile",
            INPUT_SET_TRIBUTE_RATE => "set_tribute_rate",
            INPUT_PLACE_ROAD => "place_road",
            INPUT_PLACE_CONDUIT => "place_conduit",
            INPUT_PLACE_PIPE => "place_pipe",
            _ => "cancel_action",
        }
    }

    fn write(&self, w: &mut Writer<'_, Le>) -> Result<(), EncodeError> {
        match self {
            Action::None => {}
            Action::PlaceBuilding {
                building_type,
                x,
                y,
                rotation,
            } => {
                w.u32(*building_type)?;
                w.i32(*x)?;
                w.i32(*y)?;
                w.u8(*rotation)?;
            }
            Action::DesignateZone {
                zone_type,
                density,
                rects,
            } => {
                w.u8(*zone_type)?;
                w.u8(*density)?;
                w.u16(u16::try_from(rects.len()).map_err(|_| EncodeError::FieldTooLong)?)?;
                for r in rects.iter() {
                    w.i32(r.x)?;
                    w.i32(r.y)?;
                    w.u32(r.width)?;
                    w.u32(r.height)?;
                }
            }
            Action::DesignateZoneWire {
                zone_type,
                density,
                rects,
            } => {
                w.u8(*zone_type)?;
                w.u8(*density)?;
                w.u16(rects.len_in(16) as u16)?;
                w.bytes(rects.bytes)?;
            }
            Action::Tiles { tiles, .. } => {
                w.u16(u16::try_from(tiles.len()).map_err(|_| EncodeError::FieldTooLong)?)?;
                for (x, y) in tiles.iter() {
                    w.i32(*x)?;
                    w.i32(*y)?;
                }
            }
            Action::TilesWire { tiles, .. } => {
                w.u16(tiles.len_in(8) as u16)?;
                w.bytes(tiles.bytes)?;
            }
            Action::PurchaseTile { x, y } => {
                w.i32(*x)?;
                w.i32(*y)?;
            }
            Action::SetTributeRate { zone_type, rate } => {
                w.u8(*zone_type)?;
                w.u8(*rate)?;
            }
            Action::CancelAction { input_sequence } => w.u32(*input_sequence)?,
        }
        Ok(())
    }

    fn read<'a>(ty: u8, r: &mut Reader<'a, Le>) -> Result<Action<'a>, &'static str> {
        let a = match ty {
            INPUT_NONE => Action::None,
            INPUT_PLACE_BUILDING => {
                let building_type = r.u32()?;
                let x = r.i32()?;
                let y = r.i32()?;
                let rotation = r.u8()?;
                if rotation > 3 {
                    return Err("bad_value");
                }
                Action::PlaceBuilding {
                    building_type,
                    x,
                    y,
                    rotation,
                }
            }
            INPUT_DESIGNATE_ZONE => {
                let zone_type = r.u8()?;
                let density = r.u8()?;
                if zone_type > 3 || density > 1 {
                    return Err("bad_value");
                }
                let n = usize::from(r.u16()?);
                if r.remaining() != n * 16 {
                    return Err("count_mismatch");
                }
                Action::DesignateZoneWire {
                    zone_type,
                    density,
                    rects: Records {
                        bytes: r.take(n * 16)?,
                    },
                }
            }
            INPUT_DEMOLISH | INPUT_PLACE_ROAD | INPUT_PLACE_CONDUIT | INPUT_PLACE_PIPE => {
                let n = usize::from(r.u16()?);
                if r.remaining() != n * 8 {
                    return Err("count_mismatch");
                }
                Action::TilesWire {
                    kind: ty,
                    tiles: Records {
                        bytes: r.take(n * 8)?,
                    },
                }
            }
            INPUT_PURCHASE_TILE => Action::PurchaseTile {
                x: r.i32()?,
                y: r.i32()?,
            },
            INPUT_SET_TRIBUTE_RATE => {
                let zone_type = r.u8()?;
                if zone_type > 3 {
                    return Err("bad_value");
                }
                Action::SetTributeRate {
                    zone_type,
                    rate: r.u8()?,
                }
            }
            INPUT_CANCEL_ACTION => Action::CancelAction {
                input_sequence: r.u32()?,
            },
            _ => return Err("unknown_input_type"),
        };
        r.expect_end()?;
        Ok(a)
    }
}

/// A snapshot body whose bytes the codec validated the framing of; [`super::world`] parses
/// the contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaSnapshot<'a> {
    pub base_tick: u64,
    pub target_tick: u64,
    pub entity_count: u16,
    pub component_count: u16,
    pub payload: &'a [u8],
}

/// One decoded message. Text fields are the bytes before the first NUL, checked UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    ClientHello {
        client_version: u32,
        player_name: &'a str,
        session_token: [u8; TOKEN_LEN],
        requested_slot: u32,
    },
    ServerHello {
        server_version: u32,
        result: u8,
        assigned_slot: u8,
        session_token: [u8; TOKEN_LEN],
        tick_rate: u32,
        current_tick: u64,
        map_width: u32,
        map_height: u32,
        num_players: u32,
    },
    Disconnect {
        reason: u8,
        message: &'a str,
    },
    Ping {
        timestamp: u64,
        server_tick: u64,
    },
    Pong {
        timestamp: u64,
        server_tick: u64,
    },
    /// `data` is the *decompressed* snapshot payload (sections), exactly
    /// `uncompressed_size` bytes.
    FullSnapshot {
        snapshot_tick: u64,
        data: &'a [u8],
    },
    DeltaSnapshot(DeltaSnapshot<'a>),
    SnapshotAck {
        acked_tick: u64,
        last_input_seq: u32,
    },
    InputMessage {
        input_sequence: u32,
        client_tick: u64,
        action: Action<'a>,
    },
    InputAck {
        input_sequence: u32,
        result: u8,
        applied_tick: u64,
    },
    /// 0x30-0x34 and 0xF0: types without a layout, handed out whole.
    Opaque {
        msg_type: MsgType,
        body: &'a [u8],
    },
    ChatMessage {
        text: &'a str,
    },
    ChatBroadcast {
        sender_slot: u8,
        text: &'a str,
    },
    ErrorMessage {
        error_code: u32,
        context: u32,
        message: &'a str,
    },
}

impl Message<'_> {
    pub fn msg_type(&self) -> MsgType {
        match self {
            Message::ClientHello { .. } => MsgType::ClientHello,
            Message::ServerHello { .. } => MsgType::ServerHello,
            Message::Disconnect { .. } => MsgType::Disconnect,
            Message::Ping { .. } => MsgType::Ping,
            Message::Pong { .. } => MsgType::Pong,
            Message::FullSnapshot { .. } => MsgType::FullSnapshot,
            Message::DeltaSnapshot(_) => MsgType::DeltaSnapshot,
            Message::SnapshotAck { .. } => MsgType::SnapshotAck,
            Message::InputMessage { .. } => MsgType::InputMessage,
            Message::InputAck { .. } => MsgType::InputAck,
            Message::Opaque { msg_type, .. } => *msg_type,
            Message::ChatMessage { .. } => MsgType::ChatMessage,
            Message::ChatBroadcast { .. } => MsgType::ChatBroadcast,
            Message::ErrorMessage { .. } => MsgType::ErrorMessage,
        }
    }
}

/// A decoded packet: its header and its message (`None` for an unknown type, which the
/// caller counts and ignores).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded<'a> {
    pub header: Header,
    pub message: Option<Message<'a>>,
}

/// The receiver's decompression buffer: reused across packets (no allocation per packet once
/// it has grown to the largest snapshot seen), and never grown beyond `limit`.
#[derive(Debug, Clone)]
pub struct Decompressor {
    buf: Vec<u8>,
    limit: usize,
}

impl Default for Decompressor {
    fn default() -> Self {
        Self::new(MAX_PAYLOAD)
    }
}

impl Decompressor {
    /// A buffer that accepts stated sizes up to `limit` bytes (at most 16 MiB).
    pub fn new(limit: usize) -> Self {
        Self {
            buf: Vec::new(),
            limit: limit.min(MAX_PAYLOAD),
        }
    }

    /// Bytes allocated so far (tests check a lying size allocated nothing).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Accept stated sizes up to `limit` bytes (at most 16 MiB) from now on; the buffer is
    /// kept, and given back if it is larger than the new limit.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit.min(MAX_PAYLOAD);
        if self.buf.capacity() > self.limit {
            self.buf = Vec::new();
        }
    }

    /// Decompress `block` that claims to expand to `size` bytes; checked before anything is
    /// allocated, and the output must be exactly `size` bytes.
    pub fn decompress(
        &mut self,
        msg: &'static str,
        block: &[u8],
        size: u32,
    ) -> Result<&[u8], DecodeError> {
        let size = size as usize;
        if size > self.limit {
            return Err(DecodeError::new(msg, "decompressed_too_large"));
        }
        if size > block.len().saturating_mul(LZ4_MAX_RATIO) {
            return Err(DecodeError::new(msg, "impossible_size"));
        }
        if self.buf.len() < size {
            // A new zeroed allocation (fresh pages) rather than growing and filling the old
            // one: the buffer only grows to the largest size seen.
            self.buf = vec![0; size];
        }
        let out = &mut self.buf[..size];
        match lz4_flex::block::decompress_into(block, out) {
            Ok(n) if n == size => Ok(&self.buf[..size]),
            Ok(_) | Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) => {
                Err(DecodeError::new(msg, "size_mismatch"))
            }
            Err(_) => Err(DecodeError::new(msg, "lz4_corrupt")),
        }
    }
}

/// Text up to the first NUL of a fixed field, UTF-8.
fn fixed_text(field: &[u8]) -> Result<&str, &'static str> {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    std::str::from_utf8(&field[..end]).map_err(|_| "bad_utf8")
}

/// Decode one packet. Decompressed bodies live in `dec`, so the message borrows both.
pub fn decode<'a>(packet: &'a [u8], dec: &'a mut Decompressor) -> Result<Decoded<'a>, DecodeError> {
    let header = Header::parse(packet)?;
    let Some(ty) = MsgType::from_u8(header.msg_type) else {
        return Ok(Decoded {
            header,
            message: None,
        });
    };
    let name = ty.name();
    let body = &packet[HEADER_LEN..];
    if let Some(n) = ty.fixed_len() {
        if packet.len() != n {
            return Err(DecodeError::new(name, "bad_size"));
        }
        if header.compressed() {
            return Err(DecodeError::new(name, "unexpected_compression"));
        }
    }
    if ty == MsgType::FullSnapshot {
        if !header.compressed() {
            return Err(DecodeError::new(name, "not_compressed"));
        }
        let mut r = Reader::<Le>::new(body);
        let size = r.u32().map_err(|e| DecodeError::wire(name, e))?;
        let snapshot_tick = r.u64().map_err(|e| DecodeError::wire(name, e))?;
        let data = dec.decompress(name, r.rest(), size)?;
        return Ok(Decoded {
            header,
            message: Some(Message::FullSnapshot {
                snapshot_tick,
                data,
            }),
        });
    }
    let body: &'a [u8] = if header.compressed() {
        let mut r = Reader::<Le>::new(body);
        let size = r.u32().map_err(|e| DecodeError::wire(name, e))?;
        dec.decompress(name, r.rest(), size)?
    } else {
        body
    };
    let message = decode_body(ty, body).map_err(|reason| DecodeError::new(name, reason))?;
    Ok(Decoded {
        header,
        message: Some(message),
    })
}

fn decode_body(ty: MsgType, body: &[u8]) -> Result<Message<'_>, &'static str> {
    let mut r = Reader::<Le>::new(body);
    let m = match ty {
        MsgType::ClientHello => {
            let client_version = r.u32()?;
            let name = r.take(NAME_LEN)?;
            let session_token = r.array::<TOKEN_LEN>()?;
            let requested_slot = r.u32()?;
            Message::ClientHello {
                client_version,
                player_name: fixed_text(name)?,
                session_token,
                requested_slot,
            }
        }
        MsgType::ServerHello => {
            let server_version = r.u32()?;
            let result = r.u8()?;
            let assigned_slot = r.u8()?;
            let _padding = r.u16()?;
            Message::ServerHello {
                server_version,
                result,
                assigned_slot,
                session_token: r.array::<TOKEN_LEN>()?,
                tick_rate: r.u32()?,
                current_tick: r.u64()?,
                map_width: r.u32()?,
                map_height: r.u32()?,
                num_players: r.u32()?,
            }
        }
        MsgType::Disconnect => {
            let reason = r.u8()?;
            Message::Disconnect {
                reason,
                message: fixed_text(r.take(DISCONNECT_TEXT_LEN)?)?,
            }
        }
        MsgType::Ping | MsgType::Pong => {
            let timestamp = r.u64()?;
            let server_tick = r.u64()?;
            if ty == MsgType::Ping {
                Message::Ping {
                    timestamp,
                    server_tick,
                }
            } else {
                Message::Pong {
                    timestamp,
                    server_tick,
                }
            }
        }
        MsgType::DeltaSnapshot => Message::DeltaSnapshot(DeltaSnapshot {
            base_tick: r.u64()?,
            target_tick: r.u64()?,
            entity_count: r.u16()?,
            component_count: r.u16()?,
            payload: r.rest(),
        }),
        MsgType::SnapshotAck => Message::SnapshotAck {
            acked_tick: r.u64()?,
            last_input_seq: r.u32()?,
        },
        MsgType::InputMessage => {
            let input_sequence = r.u32()?;
            let client_tick = r.u64()?;
            let ty = r.u8()?;
            Message::InputMessage {
                input_sequence,
                client_tick,
                action: Action::read(ty, &mut r)?,
            }
        }
        MsgType::InputAck => Message::InputAck {
            input_sequence: r.u32()?,
            result: r.u8()?,
            applied_tick: r.u64()?,
        },
        MsgType::ChatMessage => {
            let n = usize::from(r.u16()?);
            if n > MAX_CHAT_LEN {
                return Err("text_too_long");
            }
            let text = std::str::from_utf8(r.take(n)?).map_err(|_| "bad_utf8")?;
            Message::ChatMessage { text }
        }
        MsgType::ChatBroadcast => {
            let sender_slot = r.u8()?;
            let n = usize::from(r.u16()?);
            if n > MAX_CHAT_LEN {
                return Err("text_too_long");
            }
            let text = std::str::from_utf8(r.take(n)?).map_err(|_| "bad_utf8")?;
            Message::ChatBroadcast { sender_slot, text }
        }
        MsgType::ErrorMessage => {
            let error_code = r.u32()?;
            let context = r.u32()?;
            Message::ErrorMessage {
                error_code,
                context,
                message: fixed_text(r.take(ERROR_TEXT_LEN)?)?,
            }
        }
        MsgType::FullSnapshot
        | MsgType::PurchaseTile
        | MsgType::PlaceBuilding
        | MsgType::DesignateZone
        | MsgType::Demolish
        | MsgType::SetTributeRate
        | MsgType::ServerCommand => Message::Opaque {
            msg_type: ty,
            body: r.rest(),
        },
    };
    r.expect_end()?;
    Ok(m)
}

/// Writes messages into a caller's buffer. Keeps one scratch body buffer, so compressing a
/// large body allocates nothing once the buffer has grown.
#[derive(Debug, Default, Clone)]
pub struct Encoder {
    body: Vec<u8>,
}

/// Copy `s` into a fixed field, NUL-padded; too long is an error (it would lose the NUL
/// terminator the spec asks for, or cut a character).
fn write_fixed_text(w: &mut Writer<'_, Le>, s: &str, len: usize, nul: bool) -> WireOr {
    let room = if nul { len - 1 } else { len };
    if s.len() > room {
        return Err(EncodeError::FieldTooLong);
    }
    w.bytes(s.as_bytes())?;
    for _ in s.len()..len {
        w.u8(0)?;
    }
    Ok(())
}

type WireOr = Result<(), EncodeError>;

impl Encoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Encode `msg` with header `sequence` into `buf`; returns the length. Bodies over 1024
    /// bytes are compressed. FullSnapshot's `data` is the uncompressed section payload; it is
    /// always compressed.
    pub fn encode(
        &mut self,
        buf: &mut [u8],
        sequence: u32,
        msg: &Message<'_>,
    ) -> Result<usize, EncodeError> {
        let ty = msg.msg_type();
        if let Message::FullSnapshot {
            snapshot_tick,
            data,
        } = msg
        {
            return encode_full(buf, sequence, *snapshot_tick, data);
        }
        let mut body = std::mem::take(&mut self.body);
        let need = body_len_bound(msg);
        if body.len() < need {
            body.resize(need, 0);
        }
        let n = {
            let mut w = Writer::<Le>::new(&mut body);
            write_body(&mut w, msg).map(|_| w.position())
        };
        let out = n.and_then(|n| encode_body(buf, sequence, ty, &body[..n]));
        self.body = body;
        out
    }
}

/// An upper bound of a message body's size (the scratch buffer is grown to it once).
fn body_len_bound(msg: &Message<'_>) -> usize {
    let var = match msg {
        Message::DeltaSnapshot(d) => d.payload.len(),
        Message::InputMessage { action, .. } => match action {
            Action::DesignateZone { rects, .. } => rects.len() * 16,
            Action::DesignateZoneWire { rects, .. } => rects.bytes.len(),
            Action::Tiles { tiles, .. } => tiles.len() * 8,
            Action::TilesWire { tiles, .. } => tiles.bytes.len(),
            _ => 0,
        },
        Message::Opaque { body, .. } => body.len(),
        Message::ChatMessage { text } | Message::ChatBroadcast { text, .. } => text.len(),
        _ => 0,
    };
    var + 256
}

fn write_body(w: &mut Writer<'_, Le>, msg: &Message<'_>) -> WireOr {
    match msg {
        Message::ClientHello {
            client_version,
            player_name,
            session_token,
            requested_slot,
        } => {
            w.u32(*client_version)?;
            write_fixed_text(w, player_name, NAME_LEN, false)?;
            w.bytes(session_token)?;
            w.u32(*requested_slot)?;
        }
        Message::ServerHello {
            server_version,
            result,
            assigned_slot,
            session_token,
            tick_rate,
            current_tick,
            map_width,
            map_height,
            num_players,
        } => {
            w.u32(*server_version)?;
            w.u8(*result)?;
            w.u8(*assigned_slot)?;
            w.u16(0)?;
            w.bytes(session_token)?;
            w.u32(*tick_rate)?;
            w.u64(*current_tick)?;
            w.u32(*map_width)?;
            w.u32(*map_height)?;
            w.u32(*num_players)?;
        }
        Message::Disconnect { reason, message } => {
            w.u8(*reason)?;
            write_fixed_text(w, message, DISCONNECT_TEXT_LEN, true)?;
        }
        Message::Ping {
            timestamp,
            server_tick,
        }
        | Message::Pong {
            timestamp,
            server_tick,
        } => {
            w.u64(*timestamp)?;
            w.u64(*server_tick)?;
        }
        Message::FullSnapshot { .. } => return Err(EncodeError::FieldTooLong),
        Message::DeltaSnapshot(d) => {
            w.u64(d.base_tick)?;
            w.u64(d.target_tick)?;
            w.u16(d.entity_count)?;
            w.u16(d.component_count)?;
            w.bytes(d.payload)?;
        }
        Message::SnapshotAck {
            acked_tick,
            last_input_seq,
        } => {
            w.u64(*acked_tick)?;
            w.u32(*last_input_seq)?;
        }
        Message::InputMessage {
            input_sequence,
            client_tick,
            action,
        } => {
            w.u32(*input_sequence)?;
            w.u64(*client_tick)?;
            w.u8(action.input_type())?;
            action.write(w)?;
        }
        Message::InputAck {
            input_sequence,
            result,
            applied_tick,
        } => {
            w.u32(*input_sequence)?;
            w.u8(*result)?;
            w.u64(*applied_tick)?;
        }
        Message::Opaque { body, .. } => w.bytes(body)?,
        Message::ChatMessage { text } => {
            if text.len() > MAX_CHAT_LEN {
                return Err(EncodeError::FieldTooLong);
            }
            w.u16(text.len() as u16)?;
            w.bytes(text.as_bytes())?;
        }
        Message::ChatBroadcast { sender_slot, text } => {
            if text.len() > MAX_CHAT_LEN {
                return Err(EncodeError::FieldTooLong);
            }
            w.u8(*sender_slot)?;
            w.u16(text.len() as u16)?;
            w.bytes(text.as_bytes())?;
        }
        Message::ErrorMessage {
            error_code,
            context,
            message,
        } => {
            w.u32(*error_code)?;
            w.u32(*context)?;
            write_fixed_text(w, message, ERROR_TEXT_LEN, true)?;
        }
    }
    Ok(())
}

/// Header plus `body`, compressed as §8 says when it is over 1024 bytes.
pub fn encode_body(
    buf: &mut [u8],
    sequence: u32,
    ty: MsgType,
    body: &[u8],
) -> Result<usize, EncodeError> {
    if body.len() > COMPRESS_THRESHOLD && ty.fixed_len().is_none() {
        let size = u32::try_from(body.len()).map_err(|_| EncodeError::FieldTooLong)?;
        let out = buf
            .get_mut(HEADER_LEN + 4..)
            .ok_or(EncodeError::BufferTooSmall)?;
        let n =
            lz4_flex::block::compress_into(body, out).map_err(|_| EncodeError::BufferTooSmall)?;
        let mut w = Writer::<Le>::new(buf);
        write_header(&mut w, ty, FLAG_COMPRESSED, 4 + n, sequence)?;
        w.u32(size)?;
        return Ok(HEADER_LEN + 4 + n);
    }
    let mut w = Writer::<Le>::new(buf);
    write_header(&mut w, ty, 0, body.len(), sequence)?;
    w.bytes(body)?;
    Ok(w.position())
}

/// A FullSnapshot of the uncompressed section payload `data` (always compressed).
pub fn encode_full(
    buf: &mut [u8],
    sequence: u32,
    snapshot_tick: u64,
    data: &[u8],
) -> Result<usize, EncodeError> {
    let size = u32::try_from(data.len()).map_err(|_| EncodeError::FieldTooLong)?;
    let out = buf
        .get_mut(HEADER_LEN + FULL_PREFIX_LEN..)
        .ok_or(EncodeError::BufferTooSmall)?;
    let n = lz4_flex::block::compress_into(data, out).map_err(|_| EncodeError::BufferTooSmall)?;
    let mut w = Writer::<Le>::new(buf);
    write_header(
        &mut w,
        MsgType::FullSnapshot,
        FLAG_COMPRESSED,
        FULL_PREFIX_LEN + n,
        sequence,
    )?;
    w.u32(size)?;
    w.u64(snapshot_tick)?;
    Ok(HEADER_LEN + FULL_PREFIX_LEN + n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_sizes_match_the_spec_tables() {
        let mut e = Encoder::new();
        let mut buf = [0u8; 512];
        let msgs = [
            Message::ClientHello {
                client_version: 1,
                player_name: "a",
                session_token: [0; 16],
                requested_slot: ANY_SLOT,
            },
            Message::ServerHello {
                server_version: 1,
                result: 0,
                assigned_slot: 0,
                session_token: [0; 16],
                tick_rate: 20,
                current_tick: 0,
                map_width: 64,
                map_height: 64,
                num_players: 1,
            },
            Message::Disconnect {
                reason: 0,
                message: "bye",
            },
            Message::Ping {
                timestamp: 1,
                server_tick: 0,
            },
            Message::SnapshotAck {
                acked_tick: 1,
                last_input_seq: 2,
            },
            Message::InputAck {
                input_sequence: 1,
                result: 0,
                applied_tick: 3,
            },
            Message::ErrorMessage {
                error_code: 2,
                context: 0,
                message: "x",
            },
        ];
        for m in msgs {
            let n = e.encode(&mut buf, 0, &m).unwrap();
            assert_eq!(Some(n), m.msg_type().fixed_len(), "{m:?}");
            let mut d = Decompressor::default();
            assert_eq!(decode(&buf[..n], &mut d).unwrap().message, Some(m));
        }
    }
}
