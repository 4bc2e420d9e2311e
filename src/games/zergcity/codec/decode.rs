//! Reading a packet: the header's validation, then the body of each type.

use super::*;

/// A decoded packet: its header and its message (`None` for an unknown type, which the
/// caller counts and ignores).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded<'a> {
    pub header: Header,
    pub message: Option<Message<'a>>,
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
