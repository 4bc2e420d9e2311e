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

/// Why a message (or a packet, for `header`) was dropped: `message` is the message type name
/// (or `header`), `reason` a short stable name. Counted as `message.reason` in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("malformed city {message}: {reason}")]
pub struct DecodeError {
    pub message: &'static str,
    pub reason: &'static str,
}

/// The buffer given to an encoder was too small for the message (or the payload passed the
/// u16 length field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("buffer too small for city message")]
pub struct BufferTooSmall;

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Vec2f {
    pub x: f32,
    pub y: f32,
}

impl Vec2f {
    pub const ZERO: Vec2f = Vec2f { x: 0.0, y: 0.0 };

    pub fn new(x: f32, y: f32) -> Self {
        Self { x, y }
    }

    pub fn distance(self, o: Vec2f) -> f32 {
        let (dx, dy) = (self.x - o.x, self.y - o.y);
        (dx * dx + dy * dy).sqrt()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Vec2i {
    pub x: i32,
    pub y: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Health {
    pub hp: u16,
    pub hp_max: u16,
}

/// The components of one entity; `component_flags` is derived from which are present.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Components<'a> {
    pub position: Option<Vec2f>,
    pub velocity: Option<Vec2f>,
    pub speed: Option<f32>,
    pub name: Option<&'a str>,
    pub sprite: Option<u16>,
    pub health: Option<Health>,
    /// Implementation dialect only (its EntitySpawn's `is_player` byte); not a component bit.
    pub is_player: Option<bool>,
}

impl Components<'_> {
    pub fn flags(&self) -> u8 {
        let bit = |present: bool, b: u8| if present { b } else { 0 };
        bit(self.position.is_some(), COMP_TRANSFORM)
            | bit(self.velocity.is_some(), COMP_VELOCITY)
            | bit(self.speed.is_some(), COMP_MOVEMENT)
            | bit(self.name.is_some(), COMP_PLAYER)
            | bit(self.sprite.is_some(), COMP_SPRITE)
            | bit(self.health.is_some(), COMP_HEALTH)
    }
}

/// EntityData (FullState entries and EntitySpawn).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EntityData<'a> {
    pub net_entity_id: u32,
    pub components: Components<'a>,
}

/// One DeltaState record. `has_player` and `grid` only exist in the implementation dialect.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EntityUpdate {
    pub net_entity_id: u32,
    pub position: Vec2f,
    pub velocity: Vec2f,
    pub has_player: Option<bool>,
    pub grid: Option<GridState>,
}

/// The grid movement fields of an implementation-dialect DeltaState record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GridState {
    pub is_moving: bool,
    pub grid_pos: Vec2i,
    pub move_target: Vec2i,
    pub input_direction: Vec2i,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlayerInput {
    pub tick: u32,
    pub last_received_tick: u32,
    pub move_x: i8,
    pub move_y: i8,
    pub buttons: u8,
    pub target_tile: Vec2i,
}

/// One ContentManifest entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AssetEntry<'a> {
    pub resource_id: u64,
    pub asset_type: u8,
    pub path: &'a str,
    pub size: u64,
    pub checksum: u64,
}

/// A TileMap as decoded: dimensions plus the validated row encoding (expand on demand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileMap<'a> {
    pub width: u16,
    pub height: u16,
    rows: &'a [u8],
}

impl TileMap<'_> {
    /// The tiles, row-major, appended to `out` (cleared first).
    pub fn expand_into(&self, out: &mut Vec<u8>) {
        out.clear();
        let w = usize::from(self.width);
        let mut r = Reader::new(self.rows);
        for _ in 0..self.height {
            let Ok(runs) = r.varint() else { return };
            if runs == 0 {
                let start = out.len().saturating_sub(w);
                out.extend_from_within(start..);
                continue;
            }
            for _ in 0..runs {
                let (Ok(tile), Ok(n)) = (r.u8(), r.varint()) else {
                    return;
                };
                out.extend(std::iter::repeat_n(tile, n as usize));
            }
        }
    }

    /// Bytes the encoded rows take.
    pub fn encoded_len(&self) -> usize {
        self.rows.len()
    }
}

/// Decoded ContentRequest: the ids are read from the message on demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentRequest<'a> {
    ids: &'a [u8],
}

impl<'a> ContentRequest<'a> {
    pub fn count(&self) -> usize {
        self.ids.len() / 8
    }

    pub fn ids(&self) -> impl Iterator<Item = u64> + 'a {
        self.ids
            .chunks_exact(8)
            .map(|c| Reader::new(c).u64().unwrap_or(0))
    }
}

/// Decoded ContentManifest: the header fields plus the validated asset list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentManifest<'a> {
    pub server_id: &'a str,
    pub server_name: &'a str,
    pub version: u32,
    pub total_size: u64,
    assets: &'a [u8],
}

impl<'a> ContentManifest<'a> {
    pub fn assets(&self) -> impl Iterator<Item = AssetEntry<'a>> + 'a {
        let mut r = Reader::new(self.assets);
        std::iter::from_fn(move || {
            if r.is_empty() {
                None
            } else {
                read_asset(&mut r).ok()
            }
        })
    }
}

/// Decoded FullState.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FullState<'a> {
    pub tick: u32,
    pub tilemap: TileMap<'a>,
    entities: &'a [u8],
}

impl<'a> FullState<'a> {
    pub fn entities(&self) -> impl Iterator<Item = EntityData<'a>> + 'a {
        let mut r = Reader::new(self.entities);
        std::iter::from_fn(move || {
            if r.is_empty() {
                None
            } else {
                read_entity(&mut r).ok()
            }
        })
    }
}

/// Decoded DeltaState: records are read from the message on demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaState<'a> {
    pub tick: u32,
    /// `None` in the implementation dialect, which has no such field.
    pub last_acked_input: Option<u32>,
    records: &'a [u8],
    dialect: Dialect,
}

impl<'a> DeltaState<'a> {
    fn record_len(&self) -> usize {
        match self.dialect {
            Dialect::Spec => DELTA_RECORD_LEN,
            Dialect::Implementation => DELTA_RECORD_LEN_IMPL,
        }
    }

    pub fn len(&self) -> usize {
        self.records.len() / self.record_len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn updates(&self) -> impl Iterator<Item = EntityUpdate> + 'a {
        let impl_dialect = self.dialect == Dialect::Implementation;
        self.records.chunks_exact(self.record_len()).map(move |c| {
            let mut r = Reader::new(c);
            let net_entity_id = r.u32().unwrap_or(0);
            let position = read_vec2f(&mut r).unwrap_or_default();
            let velocity = read_vec2f(&mut r).unwrap_or_default();
            let has_player = impl_dialect.then(|| r.u8().unwrap_or(0) == 1);
            let grid = impl_dialect.then(|| GridState {
                is_moving: r.u8().unwrap_or(0) == 1,
                grid_pos: read_vec2i(&mut r).unwrap_or_default(),
                move_target: read_vec2i(&mut r).unwrap_or_default(),
                input_direction: read_vec2i(&mut r).unwrap_or_default(),
            });
            EntityUpdate {
                net_entity_id,
                position,
                velocity,
                has_player,
                grid,
            }
        })
    }
}

/// One City message, borrowing from the packet (no allocation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Message<'a> {
    ClientHello {
        protocol_version: u32,
        client_version: &'a str,
        player_name: &'a str,
    },
    ServerHello {
        protocol_version: u32,
        server_id: &'a str,
        server_name: &'a str,
        session_id: u32,
        player_entity: u32,
    },
    Disconnect {
        /// Raw reason byte; [`DisconnectReason::from_u8`] names it.
        reason: u8,
        message: &'a str,
    },
    Ping,
    Pong,
    ContentRequest(ContentRequest<'a>),
    ContentManifest(ContentManifest<'a>),
    ContentChunk {
        resource_id: u64,
        chunk_index: u32,
        total_chunks: u32,
        data: &'a [u8],
    },
    ContentComplete,
    FullState(FullState<'a>),
    DeltaState(DeltaState<'a>),
    EntitySpawn(EntityData<'a>),
    EntityDespawn {
        net_entity_id: u32,
    },
    PlayerInput(PlayerInput),
    InputAck {
        tick: u32,
    },
    /// `sender` is `Some` in the implementation dialect, whose server reads four fields
    /// (`channel · sender · target · content`), and `None` in the spec's three.
    ChatMessage {
        channel: u8,
        sender: Option<&'a str>,
        target: &'a str,
        content: &'a str,
    },
    ChatBroadcast {
        channel: u8,
        sender: &'a str,
        target: &'a str,
        content: &'a str,
    },
    /// Implementation-dialect types whose payload is undocumented (Kick, EntityUpdate,
    /// ChunkData).
    Opaque {
        msg_type: MsgType,
        payload: &'a [u8],
    },
}

impl Message<'_> {
    pub fn msg_type(&self) -> MsgType {
        match self {
            Message::ClientHello { .. } => MsgType::ClientHello,
            Message::ServerHello { .. } => MsgType::ServerHello,
            Message::Disconnect { .. } => MsgType::Disconnect,
            Message::Ping => MsgType::Ping,
            Message::Pong => MsgType::Pong,
            Message::ContentRequest(_) => MsgType::ContentRequest,
            Message::ContentManifest(_) => MsgType::ContentManifest,
            Message::ContentChunk { .. } => MsgType::ContentChunk,
            Message::ContentComplete => MsgType::ContentComplete,
            Message::FullState(_) => MsgType::FullState,
            Message::DeltaState(_) => MsgType::DeltaState,
            Message::EntitySpawn(_) => MsgType::EntitySpawn,
            Message::EntityDespawn { .. } => MsgType::EntityDespawn,
            Message::PlayerInput(_) => MsgType::PlayerInput,
            Message::InputAck { .. } => MsgType::InputAck,
            Message::ChatMessage { .. } => MsgType::ChatMessage,
            Message::ChatBroadcast { .. } => MsgType::ChatBroadcast,
            Message::Opaque { msg_type, .. } => *msg_type,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reading

/// City is big-endian throughout (floats too).
type Reader<'a> = wire::Reader<'a, Be>;

/// Inner decode results carry the bare reason name; wire errors convert to theirs
/// (`truncated`, `varint_overlong`, `length_overrun`, `bad_utf8`, ...) through `?`.
type RResult<T> = Result<T, &'static str>;

fn read_vec2f(r: &mut Reader<'_>) -> Result<Vec2f, WireError> {
    Ok(Vec2f {
        x: r.f32()?,
        y: r.f32()?,
    })
}

fn read_vec2i(r: &mut Reader<'_>) -> Result<Vec2i, WireError> {
    Ok(Vec2i {
        x: r.i32()?,
        y: r.i32()?,
    })
}

fn read_asset<'a>(r: &mut Reader<'a>) -> RResult<AssetEntry<'a>> {
    Ok(AssetEntry {
        resource_id: r.u64()?,
        asset_type: r.u8()?,
        path: r.string()?,
        size: r.u64()?,
        checksum: r.u64()?,
    })
}

fn read_entity<'a>(r: &mut Reader<'a>) -> RResult<EntityData<'a>> {
    let net_entity_id = r.u32()?;
    let flags = r.u8()?;
    if flags & !COMP_KNOWN != 0 {
        return Err("unknown_component");
    }
    let has = |b: u8| flags & b != 0;
    let mut c = Components::default();
    if has(COMP_TRANSFORM) {
        c.position = Some(read_vec2f(r)?);
    }
    if has(COMP_VELOCITY) {
        c.velocity = Some(read_vec2f(r)?);
    }
    if has(COMP_MOVEMENT) {
        c.speed = Some(r.f32()?);
    }
    if has(COMP_PLAYER) {
        c.name = Some(r.string()?);
    }
    if has(COMP_SPRITE) {
        c.sprite = Some(r.u16()?);
    }
    if has(COMP_HEALTH) {
        c.health = Some(Health {
            hp: r.u16()?,
            hp_max: r.u16()?,
        });
    }
    Ok(EntityData {
        net_entity_id,
        components: c,
    })
}

fn read_tilemap<'a>(r: &mut Reader<'a>) -> RResult<TileMap<'a>> {
    let width = r.u16()?;
    let height = r.u16()?;
    if (width == 0) != (height == 0) {
        return Err("bad_dimensions");
    }
    let start = r.position();
    for row in 0..height {
        let runs = r.varint()?;
        if runs == 0 {
            if row == 0 {
                return Err("repeat_first_row");
            }
            continue;
        }
        // Every run covers at least one tile, so a row has at most `width` runs.
        if runs > u64::from(width) {
            return Err("row_width_mismatch");
        }
        let mut covered: u64 = 0;
        for _ in 0..runs {
            let _tile = r.u8()?;
            let n = r.varint()?;
            if n == 0 {
                return Err("zero_run");
            }
            covered = covered.saturating_add(n);
            if covered > u64::from(width) {
                return Err("row_width_mismatch");
            }
        }
        if covered != u64::from(width) {
            return Err("row_width_mismatch");
        }
    }
    Ok(TileMap {
        width,
        height,
        rows: r.since(start),
    })
}

/// One message as framed in a packet, before its payload is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawMessage<'a> {
    pub type_byte: u8,
    pub seq: u16,
    pub payload: &'a [u8],
}

/// The messages of one packet, in order. A header error is yielded once and ends the packet
/// (nothing after it can be framed).
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    rest: &'a [u8],
}

/// Frame the messages of an ENet packet payload.
pub fn messages(packet: &[u8]) -> Messages<'_> {
    Messages { rest: packet }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<RawMessage<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let fail = |reason| {
            Some(Err(DecodeError {
                message: "header",
                reason,
            }))
        };
        if self.rest.len() < HEADER_LEN {
            self.rest = &[];
            return fail("truncated");
        }
        let mut r = Reader::new(self.rest);
        let (Ok(type_byte), Ok(seq), Ok(len)) = (r.u8(), r.u16(), r.u16()) else {
            self.rest = &[];
            return fail("truncated");
        };
        let Ok(payload) = r.take(usize::from(len)) else {
            self.rest = &[];
            return fail("length_overrun");
        };
        self.rest = r.rest();
        Some(Ok(RawMessage {
            type_byte,
            seq,
            payload,
        }))
    }
}

impl<'a> RawMessage<'a> {
    /// Decode the payload. `Ok(None)`: the type is unknown in `dialect` (count and skip it).
    pub fn decode(&self, dialect: Dialect) -> Result<Option<Message<'a>>, DecodeError> {
        match MsgType::from_u8(self.type_byte, dialect) {
            Some(ty) => decode_body(ty, self.payload, dialect).map(Some),
            None => Ok(None),
        }
    }
}

/// Decode one message payload of type `ty`.
pub fn decode_body(
    ty: MsgType,
    payload: &[u8],
    dialect: Dialect,
) -> Result<Message<'_>, DecodeError> {
    let mut r = Reader::new(payload);
    decode_inner(ty, &mut r, dialect)
        .and_then(|m| {
            r.expect_end()?;
            Ok(m)
        })
        .map_err(|reason| DecodeError {
            message: ty.name(),
            reason,
        })
}

fn decode_inner<'a>(ty: MsgType, r: &mut Reader<'a>, dialect: Dialect) -> RResult<Message<'a>> {
    Ok(match ty {
        MsgType::ClientHello => Message::ClientHello {
            protocol_version: r.u32()?,
            client_version: r.string()?,
            player_name: r.string()?,
        },
        MsgType::ServerHello => Message::ServerHello {
            protocol_version: r.u32()?,
            server_id: r.string()?,
            server_name: r.string()?,
            session_id: r.u32()?,
            player_entity: r.u32()?,
        },
        MsgType::Disconnect => Message::Disconnect {
            reason: r.u8()?,
            message: r.string()?,
        },
        MsgType::Ping => Message::Ping,
        MsgType::Pong => Message::Pong,
        MsgType::ContentRequest => {
            let count = u64::from(r.u32()?);
            if count.saturating_mul(8) != r.remaining() as u64 {
                return Err("count_mismatch");
            }
            Message::ContentRequest(ContentRequest { ids: r.rest() })
        }
        MsgType::ContentManifest => {
            let server_id = r.string()?;
            let server_name = r.string()?;
            let version = r.u32()?;
            let total_size = r.u64()?;
            let start = r.position();
            while !r.is_empty() {
                read_asset(r)?;
            }
            Message::ContentManifest(ContentManifest {
                server_id,
                server_name,
                version,
                total_size,
                assets: r.since(start),
            })
        }
        MsgType::ContentChunk => {
            let resource_id = r.u64()?;
            let chunk_index = r.u32()?;
            let total_chunks = r.u32()?;
            let data = r.len_prefixed()?;
            if chunk_index >= total_chunks {
                return Err("chunk_index_out_of_range");
            }
            Message::ContentChunk {
                resource_id,
                chunk_index,
                total_chunks,
                data,
            }
        }
        MsgType::ContentComplete => Message::ContentComplete,
        MsgType::FullState => {
            let tick = r.u32()?;
            let tilemap = read_tilemap(r)?;
            let start = r.position();
            while !r.is_empty() {
                read_entity(r)?;
            }
            Message::FullState(FullState {
                tick,
                tilemap,
                entities: r.since(start),
            })
        }
        MsgType::DeltaState => {
            let tick = r.u32()?;
            match dialect {
                Dialect::Spec => {
                    let last_acked_input = r.u32()?;
                    let records = r.rest();
                    if fits_impl_records(last_acked_input, records) {
                        // `count` then exactly `count` 46-byte records with valid bools: the
                        // implementation's layout, whose junk would read as 20-byte records
                        // whenever the count is a multiple of 10.
                        return Err("implementation_layout");
                    }
                    if records.len() % DELTA_RECORD_LEN != 0 {
                        return Err("bad_record_size");
                    }
                    Message::DeltaState(DeltaState {
                        tick,
                        last_acked_input: Some(last_acked_input),
                        records,
                        dialect,
                    })
                }
                Dialect::Implementation => {
                    let count = u64::from(r.u32()?);
                    if count.saturating_mul(DELTA_RECORD_LEN_IMPL as u64) != r.remaining() as u64 {
                        return Err("count_mismatch");
                    }
                    let records = r.rest();
                    if !impl_bools_ok(records) {
                        return Err("bad_bool");
                    }
                    Message::DeltaState(DeltaState {
                        tick,
                        last_acked_input: None,
                        records,
                        dialect,
                    })
                }
            }
        }
        MsgType::EntitySpawn => match dialect {
            Dialect::Spec => Message::EntitySpawn(read_entity(r)?),
            Dialect::Implementation => {
                let net_entity_id = r.u32()?;
                let position = read_vec2f(r)?;
                let name = r.string()?;
                let is_player = r.u8()?;
                if is_player > 1 {
                    return Err("bad_bool");
                }
                Message::EntitySpawn(EntityData {
                    net_entity_id,
                    components: Components {
                        position: Some(position),
                        name: Some(name),
                        is_player: Some(is_player == 1),
                        ..Components::default()
                    },
                })
            }
        },
        MsgType::EntityDespawn => Message::EntityDespawn {
            net_entity_id: r.u32()?,
        },
        MsgType::PlayerInput => {
            let input = PlayerInput {
                tick: r.u32()?,
                last_received_tick: r.u32()?,
                move_x: r.i8()?,
                move_y: r.i8()?,
                buttons: r.u8()?,
                target_tile: read_vec2i(r)?,
            };
            if !(-1..=1).contains(&input.move_x) || !(-1..=1).contains(&input.move_y) {
                return Err("bad_axis");
            }
            Message::PlayerInput(input)
        }
        MsgType::InputAck => Message::InputAck { tick: r.u32()? },
        MsgType::ChatMessage => {
            let channel = r.u8()?;
            let sender = match dialect {
                Dialect::Spec => None,
                Dialect::Implementation => Some(r.string()?),
            };
            Message::ChatMessage {
                channel,
                sender,
                target: r.string()?,
                content: r.string()?,
            }
        }
        MsgType::ChatBroadcast => Message::ChatBroadcast {
            channel: r.u8()?,
            sender: r.string()?,
            target: r.string()?,
            content: r.string()?,
        },
        MsgType::Kick | MsgType::EntityUpdate | MsgType::ChunkData => Message::Opaque {
            msg_type: ty,
            payload: r.rest(),
        },
    })
}

/// True when `records` (after DeltaState's tick and a u32 read as `count`) is exactly `count`
/// implementation-dialect records, each with valid `has_player` / `is_moving` bytes.
fn fits_impl_records(count: u32, records: &[u8]) -> bool {
    count > 0
        && u64::from(count).saturating_mul(DELTA_RECORD_LEN_IMPL as u64) == records.len() as u64
        && impl_bools_ok(records)
}

/// `has_player` and `is_moving` (bytes 20 and 21 of each 46-byte record) are 0 or 1.
fn impl_bools_ok(records: &[u8]) -> bool {
    records
        .chunks_exact(DELTA_RECORD_LEN_IMPL)
        .all(|c| c.get(20..22).is_some_and(|b| b[0] <= 1 && b[1] <= 1))
}

/// Whether a message the spec dialect could not read (or read as the implementation's
/// layout) decodes cleanly in the implementation dialect: a hint that the scenario named the
/// wrong dialect (`dialect_hint.implementation`).
pub fn fits_implementation(raw: &RawMessage<'_>) -> bool {
    matches!(raw.decode(Dialect::Implementation), Ok(Some(_)))
}

/// Decode every message of a packet, failing on the first error; unknown types are skipped.
/// Returns `(sequence, message)` pairs. Convenient for tests; the bot and server use
/// [`messages`] to keep going after a bad message.
pub fn decode_all(packet: &[u8], dialect: Dialect) -> Result<Vec<(u16, Message<'_>)>, DecodeError> {
    let mut out = Vec::new();
    for raw in messages(packet) {
        let raw = raw?;
        if let Some(m) = raw.decode(dialect)? {
            out.push((raw.seq, m));
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Writing

type Writer<'b> = wire::Writer<'b, Be>;

type WResult<T = ()> = Result<T, BufferTooSmall>;

impl From<WireError> for BufferTooSmall {
    fn from(_: WireError) -> Self {
        BufferTooSmall
    }
}

fn write_vec2f(w: &mut Writer<'_>, v: Vec2f) -> WResult {
    w.f32(v.x)?;
    Ok(w.f32(v.y)?)
}

/// Header with a zero length; [`end`] patches it. Returns where the message starts.
fn begin(w: &mut Writer<'_>, ty: MsgType, seq: u16) -> WResult<usize> {
    let start = w.position();
    w.u8(ty as u8)?;
    w.u16(seq)?;
    w.u16(0)?;
    Ok(start)
}

/// Patch the length of the message begun at `start`; returns the bytes written in all.
fn end(w: &mut Writer<'_>, start: usize) -> WResult<usize> {
    let len = w.position() - start - HEADER_LEN;
    let len16 = u16::try_from(len).map_err(|_| BufferTooSmall)?;
    w.patch_u16(start + 3, len16)?;
    Ok(w.position())
}

fn write_entity(w: &mut Writer<'_>, e: &EntityData<'_>) -> WResult {
    let c = &e.components;
    w.u32(e.net_entity_id)?;
    w.u8(c.flags())?;
    if let Some(p) = c.position {
        write_vec2f(w, p)?;
    }
    if let Some(v) = c.velocity {
        write_vec2f(w, v)?;
    }
    if let Some(s) = c.speed {
        w.f32(s)?;
    }
    if let Some(n) = c.name {
        w.string(n)?;
    }
    if let Some(s) = c.sprite {
        w.u16(s)?;
    }
    if let Some(h) = c.health {
        w.u16(h.hp)?;
        w.u16(h.hp_max)?;
    }
    Ok(())
}

fn write_asset(w: &mut Writer<'_>, a: &AssetEntry<'_>) -> WResult {
    w.u64(a.resource_id)?;
    w.u8(a.asset_type)?;
    w.string(a.path)?;
    w.u64(a.size)?;
    Ok(w.u64(a.checksum)?)
}

/// Encode one message (header and payload) at the start of `buf`; returns its length.
/// Messages with lists ([`Message::ContentRequest`], [`Message::ContentManifest`],
/// [`Message::FullState`], [`Message::DeltaState`]) are copied from their decoded form; to
/// build them from values use [`encode_content_request`], [`encode_content_manifest`],
/// [`encode_full_state`] and [`encode_delta_state`].
pub fn encode(buf: &mut [u8], seq: u16, msg: &Message<'_>) -> WResult<usize> {
    encode_in(buf, seq, msg, Dialect::Spec)
}

/// [`encode`] in `dialect`: the implementation dialect writes its own EntitySpawn
/// (`id · pos · name · is_player`) and the four-field ChatMessage (`sender` empty when
/// `None`); the spec dialect never writes a ChatMessage `sender`.
pub fn encode_in(buf: &mut [u8], seq: u16, msg: &Message<'_>, dialect: Dialect) -> WResult<usize> {
    let mut w = Writer::new(buf);
    let start = begin(&mut w, msg.msg_type(), seq)?;
    match msg {
        Message::ClientHello {
            protocol_version,
            client_version,
            player_name,
        } => {
            w.u32(*protocol_version)?;
            w.string(client_version)?;
            w.string(player_name)?;
        }
        Message::ServerHello {
            protocol_version,
            server_id,
            server_name,
            session_id,
            player_entity,
        } => {
            w.u32(*protocol_version)?;
            w.string(server_id)?;
            w.string(server_name)?;
            w.u32(*session_id)?;
            w.u32(*player_entity)?;
        }
        Message::Disconnect { reason, message } => {
            w.u8(*reason)?;
            w.string(message)?;
        }
        Message::Ping | Message::Pong | Message::ContentComplete => {}
        Message::ContentRequest(c) => {
            w.u32(c.count() as u32)?;
            w.bytes(&c.ids[..c.count() * 8])?;
        }
        Message::ContentManifest(m) => {
            w.string(m.server_id)?;
            w.string(m.server_name)?;
            w.u32(m.version)?;
            w.u64(m.total_size)?;
            w.bytes(m.assets)?;
        }
        Message::ContentChunk {
            resource_id,
            chunk_index,
            total_chunks,
            data,
        } => {
            w.u64(*resource_id)?;
            w.u32(*chunk_index)?;
            w.u32(*total_chunks)?;
            w.len_prefixed(data)?;
        }
        Message::FullState(f) => {
            w.u32(f.tick)?;
            w.u16(f.tilemap.width)?;
            w.u16(f.tilemap.height)?;
            w.bytes(f.tilemap.rows)?;
            w.bytes(f.entities)?;
        }
        Message::DeltaState(d) => {
            w.u32(d.tick)?;
            match d.last_acked_input {
                Some(a) => w.u32(a)?,
                None => w.u32(d.len() as u32)?,
            }
            w.bytes(d.records)?;
        }
        Message::EntitySpawn(e) => match dialect {
            Dialect::Spec => write_entity(&mut w, e)?,
            Dialect::Implementation => {
                let c = &e.components;
                w.u32(e.net_entity_id)?;
                write_vec2f(&mut w, c.position.unwrap_or_default())?;
                w.string(c.name.unwrap_or(""))?;
                w.u8(u8::from(c.is_player.unwrap_or(c.name.is_some())))?;
            }
        },
        Message::EntityDespawn { net_entity_id } => w.u32(*net_entity_id)?,
        Message::PlayerInput(i) => {
            w.u32(i.tick)?;
            w.u32(i.last_received_tick)?;
            w.u8(i.move_x as u8)?;
            w.u8(i.move_y as u8)?;
            w.u8(i.buttons)?;
            w.i32(i.target_tile.x)?;
            w.i32(i.target_tile.y)?;
        }
        Message::InputAck { tick } => w.u32(*tick)?,
        Message::ChatMessage {
            channel,
            sender,
            target,
            content,
        } => {
            w.u8(*channel)?;
            if dialect == Dialect::Implementation {
                w.string(sender.unwrap_or(""))?;
            }
            w.string(target)?;
            w.string(content)?;
        }
        Message::ChatBroadcast {
            channel,
            sender,
            target,
            content,
        } => {
            w.u8(*channel)?;
            w.string(sender)?;
            w.string(target)?;
            w.string(content)?;
        }
        Message::Opaque { payload, .. } => w.bytes(payload)?,
    }
    end(&mut w, start)
}

/// ContentRequest for `ids`.
pub fn encode_content_request(buf: &mut [u8], seq: u16, ids: &[u64]) -> WResult<usize> {
    let mut w = Writer::new(buf);
    let start = begin(&mut w, MsgType::ContentRequest, seq)?;
    w.u32(u32::try_from(ids.len()).map_err(|_| BufferTooSmall)?)?;
    for &id in ids {
        w.u64(id)?;
    }
    end(&mut w, start)
}

/// ContentManifest with `assets`.
#[allow(clippy::too_many_arguments)]
pub fn encode_content_manifest(
    buf: &mut [u8],
    seq: u16,
    server_id: &str,
    server_name: &str,
    version: u32,
    total_size: u64,
    assets: &[AssetEntry<'_>],
) -> WResult<usize> {
    let mut w = Writer::new(buf);
    let start = begin(&mut w, MsgType::ContentManifest, seq)?;
    w.string(server_id)?;
    w.string(server_name)?;
    w.u32(version)?;
    w.u64(total_size)?;
    for a in assets {
        write_asset(&mut w, a)?;
    }
    end(&mut w, start)
}

/// The TileMap encoding of `tiles` (row-major, `width × height`). See the module docs.
fn write_tilemap(w: &mut Writer<'_>, width: u16, height: u16, tiles: &[u8]) -> WResult {
    w.u16(width)?;
    w.u16(height)?;
    let wd = usize::from(width);
    let mut prev: Option<&[u8]> = None;
    for y in 0..usize::from(height) {
        let row = tiles.get(y * wd..(y + 1) * wd).ok_or(BufferTooSmall)?;
        if prev == Some(row) {
            w.varint(0)?;
            continue;
        }
        let runs = 1 + row.windows(2).filter(|p| p[0] != p[1]).count();
        w.varint(runs as u64)?;
        let mut i = 0;
        while i < row.len() {
            let t = row[i];
            let n = row[i..].iter().take_while(|&&x| x == t).count();
            w.u8(t)?;
            w.varint(n as u64)?;
            i += n;
        }
        prev = Some(row);
    }
    Ok(())
}

/// FullState: `tick`, the map (`tiles` row-major, `width × height`; fewer tiles is an error),
/// then as many of `entities` as fit in `buf`. Returns `(length, entities written)`.
pub fn encode_full_state(
    buf: &mut [u8],
    seq: u16,
    tick: u32,
    width: u16,
    height: u16,
    tiles: &[u8],
    entities: &[EntityData<'_>],
) -> WResult<(usize, usize)> {
    let limit = buf.len().min(HEADER_LEN + usize::from(u16::MAX));
    let mut w = Writer::new(&mut buf[..limit]);
    let start = begin(&mut w, MsgType::FullState, seq)?;
    w.u32(tick)?;
    write_tilemap(&mut w, width, height, tiles)?;
    let mut n = 0;
    for e in entities {
        let before = w.position();
        if write_entity(&mut w, e).is_err() {
            w.rewind(before);
            break;
        }
        n += 1;
    }
    Ok((end(&mut w, start)?, n))
}

/// DeltaState: `tick`, then (spec dialect) `last_acked_input` or (implementation dialect) the
/// record count, then as many of `updates` as fit in `buf`. Returns `(length, updates
/// written)`.
pub fn encode_delta_state(
    buf: &mut [u8],
    seq: u16,
    tick: u32,
    last_acked_input: u32,
    updates: &[EntityUpdate],
    dialect: Dialect,
) -> WResult<(usize, usize)> {
    let limit = buf.len().min(HEADER_LEN + usize::from(u16::MAX));
    let mut w = Writer::new(&mut buf[..limit]);
    let start = begin(&mut w, MsgType::DeltaState, seq)?;
    w.u32(tick)?;
    let count_at = w.position();
    w.u32(last_acked_input)?;
    let rec_len = match dialect {
        Dialect::Spec => DELTA_RECORD_LEN,
        Dialect::Implementation => DELTA_RECORD_LEN_IMPL,
    };
    let room = w.remaining() / rec_len;
    let n = updates.len().min(room);
    for u in &updates[..n] {
        w.u32(u.net_entity_id)?;
        write_vec2f(&mut w, u.position)?;
        write_vec2f(&mut w, u.velocity)?;
        if dialect == Dialect::Implementation {
            let g = u.grid.unwrap_or_default();
            w.u8(u8::from(u.has_player.unwrap_or(false)))?;
            w.u8(u8::from(g.is_moving))?;
            for v in [g.grid_pos, g.move_target, g.input_direction] {
                w.i32(v.x)?;
                w.i32(v.y)?;
            }
        }
    }
    if dialect == Dialect::Implementation {
        w.patch_u32(count_at, n as u32)?;
    }
    Ok((end(&mut w, start)?, n))
}

/// Encode a payload under a header verbatim (tests, unknown types).
pub fn encode_raw(buf: &mut [u8], type_byte: u8, seq: u16, payload: &[u8]) -> WResult<usize> {
    let len = u16::try_from(payload.len()).map_err(|_| BufferTooSmall)?;
    let mut w = Writer::new(buf);
    w.u8(type_byte)?;
    w.u16(seq)?;
    w.u16(len)?;
    w.bytes(payload)?;
    Ok(w.position())
}

/// Encode `v` as LEB128 into `buf`; returns the bytes written.
pub fn encode_varint(buf: &mut [u8], v: u64) -> WResult<usize> {
    let mut w = Writer::new(buf);
    w.varint(v)?;
    Ok(w.position())
}

/// Decode a LEB128 varint at the start of `buf`: `(value, bytes read)`.
pub fn decode_varint(buf: &[u8]) -> Result<(u64, usize), &'static str> {
    let mut r = Reader::new(buf);
    let v = r.varint()?;
    Ok((v, r.position()))
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
