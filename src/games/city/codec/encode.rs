//! Writing: each message into a caller's buffer, and the bulk messages (manifest, content
//! request, full and delta state) from the server's own data.

use super::*;

// ---------------------------------------------------------------------------------------------
// Writing

pub(super) type Writer<'b> = wire::Writer<'b, Be>;

pub(super) type WResult<T = ()> = Result<T, BufferTooSmall>;

impl From<WireError> for BufferTooSmall {
    fn from(_: WireError) -> Self {
        BufferTooSmall
    }
}

pub(super) fn write_vec2f(w: &mut Writer<'_>, v: Vec2f) -> WResult {
    w.f32(v.x)?;
    Ok(w.f32(v.y)?)
}

/// Header with a zero length; [`end`] patches it. Returns where the message starts.
pub(super) fn begin(w: &mut Writer<'_>, ty: MsgType, seq: u16) -> WResult<usize> {
    let start = w.position();
    w.u8(ty as u8)?;
    w.u16(seq)?;
    w.u16(0)?;
    Ok(start)
}

/// Patch the length of the message begun at `start`; returns the bytes written in all.
pub(super) fn end(w: &mut Writer<'_>, start: usize) -> WResult<usize> {
    let len = w.position() - start - HEADER_LEN;
    let len16 = u16::try_from(len).map_err(|_| BufferTooSmall)?;
    w.patch_u16(start + 3, len16)?;
    Ok(w.position())
}

pub(super) fn write_entity(w: &mut Writer<'_>, e: &EntityData<'_>) -> WResult {
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

pub(super) fn write_asset(w: &mut Writer<'_>, a: &AssetEntry<'_>) -> WResult {
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
pub(super) fn write_tilemap(w: &mut Writer<'_>, width: u16, height: u16, tiles: &[u8]) -> WResult {
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
