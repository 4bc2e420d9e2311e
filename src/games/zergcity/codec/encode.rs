//! Writing messages: fixed-size fields, bodies, and LZ4 above the threshold.

use super::*;

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
