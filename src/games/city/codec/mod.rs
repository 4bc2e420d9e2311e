//! The City wire format (`docs/protocols/city.md`): every byte rule of the
//! protocol lives in this file.
//!
//! City runs over ENet. The unit this codec sees is an *ENet packet payload*, which holds one
//! or more City messages back to back; each message carries its own length, so a reader parses
//! until the packet is used up.
//!
//! # Primitives
//! Integers are big-endian; `f32` is the big-endian IEEE 754 bit pattern; `bool` is one byte,
//! 0 or 1 (anything else is malformed). `varint` is LEB128: 7 bits per byte, low group first,
//! high bit = more follows, at most 10 bytes for a u64 (a 10th byte may only be 0 or 1).
//! Non-minimal encodings (`80 00` for 0) are accepted, as LEB128 allows them. `string` and
//! `bytes` are a varint length then that many bytes (strings must be UTF-8). `Vec2f` is
//! `x f32, y f32`; `Vec2i` is `x i32, y i32`.
//!
//! # Message header (5 bytes)
//! ```text
//! type u8 · sequence u16 · length u16 (payload bytes, header excluded) · payload
//! ```
//! `sequence` counts messages per sender and session (u16, wrapping). Nothing reads it: the
//! spec does not say whether it counts messages, packets or channels, so loss is measured
//! from DeltaState ticks and InputAcks instead (see the module docs of `city`).
//!
//! # Messages (payload layouts; `[...]` runs to the end of the message)
//! ```text
//! 0x01 ClientHello      protocol_version u32 · client_version string · player_name string
//! 0x02 ServerHello      protocol_version u32 · server_id string · server_name string
//!                       · session_id u32 · player_entity u32 (NetEntityId)
//! 0x03 Disconnect       reason u8 · message string
//! 0x04 Ping             (empty)
//! 0x05 Pong             (empty)
//! 0x10 ContentRequest   count u32 · resource_id u64 × count
//! 0x11 ContentManifest  server_id string · server_name string · version u32 · total_size u64
//!                       · [AssetEntry]
//!      AssetEntry       resource_id u64 · type u8 · path string · size u64 · checksum u64
//! 0x12 ContentChunk     resource_id u64 · chunk_index u32 · total_chunks u32 · data bytes
//! 0x13 ContentComplete  (empty)
//! 0x20 FullState        tick u32 · TileMap · [EntityData]
//! 0x21 DeltaState       tick u32 · last_acked_input u32 · [EntityUpdate]
//!      EntityUpdate     net_entity_id u32 · position Vec2f · velocity Vec2f   (20 bytes)
//! 0x22 EntitySpawn      EntityData
//! 0x23 EntityDespawn    net_entity_id u32
//! 0x30 PlayerInput      tick u32 · last_received_tick u32 · move_x i8 · move_y i8 · buttons u8
//!                       · target_tile Vec2i                                    (19 bytes)
//! 0x31 InputAck         tick u32
//! 0x40 ChatMessage      channel u8 · target string · content string
//! 0x41 ChatBroadcast    channel u8 · sender string · target string · content string
//! ```
//!
//! # Layouts the spec leaves undefined (defined by the reference server)
//! **EntityData** = `net_entity_id u32 · component_flags u8 · components`, where the
//! components present are those whose bit is set, in ascending bit order:
//! ```text
//! bit 0 (0x01) Transform  position Vec2f            (tiles)
//! bit 1 (0x02) Velocity   velocity Vec2f            (tiles per second)
//! bit 2 (0x04) Movement   speed f32                 (tiles per second, the movement model's)
//! bit 3 (0x08) Player     name string
//! bit 4 (0x10) Sprite     sprite_id u16
//! bit 5 (0x20) Health     hp u16 · hp_max u16
//! bits 6, 7               undefined: an entity with them set cannot be parsed
//!                         (decode error `unknown_component` for that message)
//! ```
//! **TileMap** = `width u16 · height u16 · row × height`, tiles row-major, one `u8` tile id
//! each (reference map: 0 grass, 1 road, 2 building, 3 park). A row is run-length encoded:
//! `run_count varint · (tile u8 · run_length varint) × run_count`, runs of length ≥ 1 summing
//! to exactly `width`. `run_count = 0` repeats the previous row (not allowed for the first).
//! A map is either `0 × 0` (no rows) or has both sides ≥ 1. A 128 × 128 city grid takes a
//! few hundred bytes this way, so FullState fits one packet.
//!
//! # Rules where the spec is silent (README's protocol notes repeat them)
//! - Fixed-layout messages must use their whole length; extra bytes are `trailing_bytes`.
//! - ContentRequest's `count` must match the bytes that follow exactly (`count_mismatch`).
//! - `chunk_index < total_chunks`, and PlayerInput's `move_x`/`move_y` in {-1, 0, 1}: the spec
//!   states both, so the codec enforces them.
//! - A message whose type is unknown is skipped by its length (counted, not an error); a
//!   header whose length runs past the packet ends the packet (`header.length_overrun`).
//!   A malformed payload costs only its own message: the next one is still read.
//! - Spec dialect DeltaState: a payload that is exactly the implementation's layout (a u32
//!   `count` ≥ 1 where `last_acked_input` stands, then `count` 46-byte records with valid
//!   bools) is rejected as `implementation_layout` rather than read as junk 20-byte records
//!   (46 × 10 = 20 × 23); otherwise the records must be a whole number of 20 bytes.
//!   [`fits_implementation`] tells a bot that such a message reads cleanly in the other
//!   dialect (`dialect_hint.implementation`).
//! - Implementation dialect (docs/protocols/city.md, "Dialects": the public server
//!   mints-fishtank/city), byte for byte:
//!   ```text
//!   0x21 DeltaState   tick u32 · count u32 · count × 46-byte record, exactly:
//!                     id u32 · pos Vec2f · vel Vec2f · has_player u8 · is_moving u8
//!                     · grid_pos Vec2i · move_target Vec2i · input_direction Vec2i
//!   0x22 EntitySpawn  id u32 · pos Vec2f · name string · is_player u8
//!   0x40 ChatMessage  channel u8 · sender string · target string · content string
//!   ```
//!   Bools 0 or 1 (`bad_bool`); a length other than `8 + 46 × count` is `count_mismatch`.
//!   Types 0x06 Kick, 0x24 EntityUpdate, 0x25 ChunkData exist with undocumented payloads
//!   (handed out opaque). That server reads only the first message of a packet and its
//!   header sequence is always 0; the bot writes one message per packet with sequence 0.
//! - Asset checksums are FNV-1a 64 of the asset's bytes ([`Fnv64`]).

use thiserror::Error;

use crate::protocol::prelude::wire::{self, Be, WireError};

mod decode;
mod encode;
pub mod inspect;
mod types;

pub use decode::*;
pub use encode::*;
pub use types::*;

pub const PROTOCOL_VERSION: u32 = 1;
pub const HEADER_LEN: usize = 5;
/// Largest ENet packet payload City writes (the spec's `MAX_PACKET_SIZE`, "safe MTU").
pub const MAX_PACKET_SIZE: usize = 1400;
/// Largest packet City sends on the unreliable channel. ENet sends an unreliable packet longer
/// than its fragment length (MTU − 28 bytes: 1364 at the default MTU of 1392, less with
/// checksums) *reliably*, in fragments; staying under 1200 bytes keeps DeltaState and input
/// unreliable on any MTU from about 1240 up.
pub const MAX_UNRELIABLE_PACKET: usize = 1200;
pub const TICK_RATE: u32 = 60;
/// The movement model's time step: one tick.
pub const TICK_INTERVAL: f32 = 1.0 / 60.0;
pub const CHANNEL_RELIABLE: u8 = 0;
pub const CHANNEL_UNRELIABLE: u8 = 1;
pub const DELTA_RECORD_LEN: usize = 20;
/// Implementation dialect DeltaState record: `id u32 · pos Vec2f · vel Vec2f · has_player u8
/// · is_moving u8 · grid_pos Vec2i · move_target Vec2i · input_direction Vec2i`.
pub const DELTA_RECORD_LEN_IMPL: usize = 46;
/// ENet's fragment length at its default MTU (1392 − 28 bytes). A packet longer than this that
/// was sent unreliable is sent *reliably*, in fragments, by ENet 1.3: a DeltaState of the
/// implementation dialect that long (30 players or more) arrived reliably.
pub const ENET_FRAGMENT_LEN: usize = 1364;
pub const PLAYER_INPUT_LEN: usize = 19;

/// Button bits of PlayerInput.
pub const BUTTON_INTERACT: u8 = 0x01;
pub const BUTTON_SECONDARY: u8 = 0x02;

/// Component bits of EntityData.
pub const COMP_TRANSFORM: u8 = 0x01;
pub const COMP_VELOCITY: u8 = 0x02;
pub const COMP_MOVEMENT: u8 = 0x04;
pub const COMP_PLAYER: u8 = 0x08;
pub const COMP_SPRITE: u8 = 0x10;
pub const COMP_HEALTH: u8 = 0x20;
const COMP_KNOWN: u8 = 0x3f;

/// Chat channels.
pub const CHAT_GLOBAL: u8 = 0;
pub const CHAT_LOCAL: u8 = 1;
pub const CHAT_TEAM: u8 = 2;
pub const CHAT_WHISPER: u8 = 3;
pub const CHAT_SYSTEM: u8 = 255;

/// Which reading of the protocol to speak (docs/protocols/city.md, "Dialects").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// city.md as written.
    #[default]
    Spec,
    /// The implementation city.md documents: no content transfer and no FullState (ServerHello
    /// then EntitySpawn), DeltaState without `last_acked_input` (count + 21-byte records),
    /// extra types Kick 0x06, EntityUpdate 0x24, ChunkData 0x25.
    Implementation,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MsgType {
    ClientHello = 0x01,
    ServerHello = 0x02,
    Disconnect = 0x03,
    Ping = 0x04,
    Pong = 0x05,
    /// Implementation dialect only.
    Kick = 0x06,
    ContentRequest = 0x10,
    ContentManifest = 0x11,
    ContentChunk = 0x12,
    ContentComplete = 0x13,
    FullState = 0x20,
    DeltaState = 0x21,
    EntitySpawn = 0x22,
    EntityDespawn = 0x23,
    /// Implementation dialect only.
    EntityUpdate = 0x24,
    /// Implementation dialect only.
    ChunkData = 0x25,
    PlayerInput = 0x30,
    InputAck = 0x31,
    ChatMessage = 0x40,
    ChatBroadcast = 0x41,
}

impl MsgType {
    pub fn name(self) -> &'static str {
        match self {
            MsgType::ClientHello => "client_hello",
            MsgType::ServerHello => "server_hello",
            MsgType::Disconnect => "disconnect",
            MsgType::Ping => "ping",
            MsgType::Pong => "pong",
            MsgType::Kick => "kick",
            MsgType::ContentRequest => "content_request",
            MsgType::ContentManifest => "content_manifest",
            MsgType::ContentChunk => "content_chunk",
            MsgType::ContentComplete => "content_complete",
            MsgType::FullState => "full_state",
            MsgType::DeltaState => "delta_state",
            MsgType::EntitySpawn => "entity_spawn",
            MsgType::EntityDespawn => "entity_despawn",
            MsgType::EntityUpdate => "entity_update",
            MsgType::ChunkData => "chunk_data",
            MsgType::PlayerInput => "player_input",
            MsgType::InputAck => "input_ack",
            MsgType::ChatMessage => "chat_message",
            MsgType::ChatBroadcast => "chat_broadcast",
        }
    }

    /// The type for a header's type byte in `dialect`; `None` when unknown there.
    pub fn from_u8(v: u8, dialect: Dialect) -> Option<Self> {
        let impl_only = dialect == Dialect::Implementation;
        Some(match v {
            0x01 => MsgType::ClientHello,
            0x02 => MsgType::ServerHello,
            0x03 => MsgType::Disconnect,
            0x04 => MsgType::Ping,
            0x05 => MsgType::Pong,
            0x06 if impl_only => MsgType::Kick,
            0x10 => MsgType::ContentRequest,
            0x11 => MsgType::ContentManifest,
            0x12 => MsgType::ContentChunk,
            0x13 => MsgType::ContentComplete,
            0x20 => MsgType::FullState,
            0x21 => MsgType::DeltaState,
            0x22 => MsgType::EntitySpawn,
            0x23 => MsgType::EntityDespawn,
            0x24 if impl_only => MsgType::EntityUpdate,
            0x25 if impl_only => MsgType::ChunkData,
            0x30 => MsgType::PlayerInput,
            0x31 => MsgType::InputAck,
            0x40 => MsgType::ChatMessage,
            0x41 => MsgType::ChatBroadcast,
            _ => return None,
        })
    }

    /// The ENet channel and reliability of this message (city.md's mapping table; the
    /// messages the table leaves out travel reliably on channel 0, except Pong, which answers
    /// Ping on channel 1).
    pub fn channel(self) -> (u8, bool) {
        match self {
            MsgType::Ping | MsgType::Pong | MsgType::DeltaState | MsgType::PlayerInput => {
                (CHANNEL_UNRELIABLE, false)
            }
            _ => (CHANNEL_RELIABLE, true),
        }
    }
}

/// Disconnect reasons (city.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum DisconnectReason {
    Unknown = 0,
    ClientQuit = 1,
    ServerShutdown = 2,
    Timeout = 3,
    Kicked = 4,
    Banned = 5,
    VersionMismatch = 6,
    AuthFailed = 7,
    ServerFull = 8,
}

impl DisconnectReason {
    /// Values outside the table read as `Unknown`.
    pub fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::ClientQuit,
            2 => Self::ServerShutdown,
            3 => Self::Timeout,
            4 => Self::Kicked,
            5 => Self::Banned,
            6 => Self::VersionMismatch,
            7 => Self::AuthFailed,
            8 => Self::ServerFull,
            _ => Self::Unknown,
        }
    }

    /// Stable name for counters.
    pub fn name(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::ClientQuit => "client_quit",
            Self::ServerShutdown => "server_shutdown",
            Self::Timeout => "timeout",
            Self::Kicked => "kicked",
            Self::Banned => "banned",
            Self::VersionMismatch => "version_mismatch",
            Self::AuthFailed => "auth_failed",
            Self::ServerFull => "server_full",
        }
    }
}

/// FNV-1a 64, the asset checksum. Streaming: a bot checks chunks as they arrive without
/// keeping the asset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Self::new()
    }
}

impl Fnv64 {
    pub const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    pub const PRIME: u64 = 0x0000_0100_0000_01b3;

    pub fn new() -> Self {
        Self(Self::OFFSET_BASIS)
    }

    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    pub fn finish(self) -> u64 {
        self.0
    }

    pub fn hash(bytes: &[u8]) -> u64 {
        let mut h = Self::new();
        h.update(bytes);
        h.finish()
    }
}
