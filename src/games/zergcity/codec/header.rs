//! §3's message types and the 16-byte header every message starts with.

use super::*;

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
