//! One decoded message of any type.

use super::*;

/// A snapshot body whose bytes the codec validated the framing of; [`crate::games::zergcity::world`] parses
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
