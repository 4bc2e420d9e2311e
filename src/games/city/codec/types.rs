//! The messages and records as decoded (borrowing the packet) and as encoded, and the
//! errors of both.

use super::*;

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
    pub(super) rows: &'a [u8],
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
    pub(super) ids: &'a [u8],
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
    pub(super) assets: &'a [u8],
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
    pub(super) entities: &'a [u8],
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
    pub(super) records: &'a [u8],
    pub(super) dialect: Dialect,
}

impl<'a> DeltaState<'a> {
    pub(super) fn record_len(&self) -> usize {
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
