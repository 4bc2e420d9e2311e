//! Reading: the packet's messages one by one, each body by its type and dialect.

use super::*;

// ---------------------------------------------------------------------------------------------
// Reading

/// City is big-endian throughout (floats too).
pub(super) type Reader<'a> = wire::Reader<'a, Be>;

/// Inner decode results carry the bare reason name; wire errors convert to theirs
/// (`truncated`, `varint_overlong`, `length_overrun`, `bad_utf8`, ...) through `?`.
pub(super) type RResult<T> = Result<T, &'static str>;

pub(super) fn read_vec2f(r: &mut Reader<'_>) -> Result<Vec2f, WireError> {
    Ok(Vec2f {
        x: r.f32()?,
        y: r.f32()?,
    })
}

pub(super) fn read_vec2i(r: &mut Reader<'_>) -> Result<Vec2i, WireError> {
    Ok(Vec2i {
        x: r.i32()?,
        y: r.i32()?,
    })
}

pub(super) fn read_asset<'a>(r: &mut Reader<'a>) -> RResult<AssetEntry<'a>> {
    Ok(AssetEntry {
        resource_id: r.u64()?,
        asset_type: r.u8()?,
        path: r.string()?,
        size: r.u64()?,
        checksum: r.u64()?,
    })
}

pub(super) fn read_entity<'a>(r: &mut Reader<'a>) -> RResult<EntityData<'a>> {
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

pub(super) fn read_tilemap<'a>(r: &mut Reader<'a>) -> RResult<TileMap<'a>> {
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
    pub(super) rest: &'a [u8],
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

pub(super) fn decode_inner<'a>(
    ty: MsgType,
    r: &mut Reader<'a>,
    dialect: Dialect,
) -> RResult<Message<'a>> {
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
pub(super) fn fits_impl_records(count: u32, records: &[u8]) -> bool {
    count > 0
        && u64::from(count).saturating_mul(DELTA_RECORD_LEN_IMPL as u64) == records.len() as u64
        && impl_bools_ok(records)
}

/// `has_player` and `is_moving` (bytes 20 and 21 of each 46-byte record) are 0 or 1.
pub(super) fn impl_bools_ok(records: &[u8]) -> bool {
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
