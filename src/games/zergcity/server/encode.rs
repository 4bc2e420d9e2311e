//! The server's queued messages onto the wire.

use super::*;

impl ZergCityServer {
    pub(super) fn encode(
        &mut self,
        buf: &mut [u8],
        seq: u32,
        o: &Out,
    ) -> Result<usize, codec::EncodeError> {
        let Self {
            enc,
            history,
            scratch,
            players,
            cfg,
            terrain,
            land_value,
            tick,
            ..
        } = self;
        match o {
            Out::Hello {
                result,
                slot,
                token,
                players: n,
            } => enc.encode(
                buf,
                seq,
                &Message::ServerHello {
                    server_version: cfg.server_version,
                    result: result.to_u8(),
                    assigned_slot: *slot,
                    session_token: *token,
                    tick_rate: cfg.tick_rate,
                    current_tick: *tick,
                    map_width: cfg.map_width,
                    map_height: cfg.map_height,
                    num_players: *n,
                },
            ),
            Out::Disconnect { reason, text } => enc.encode(
                buf,
                seq,
                &Message::Disconnect {
                    reason: *reason,
                    message: text,
                },
            ),
            Out::Error { code, text } => enc.encode(
                buf,
                seq,
                &Message::ErrorMessage {
                    error_code: *code,
                    context: 0,
                    message: text,
                },
            ),
            Out::Pong { timestamp } => enc.encode(
                buf,
                seq,
                &Message::Pong {
                    timestamp: *timestamp,
                    server_tick: *tick,
                },
            ),
            Out::InputAck {
                seq: input_sequence,
                result,
                applied,
            } => enc.encode(
                buf,
                seq,
                &Message::InputAck {
                    input_sequence: *input_sequence,
                    result: *result as u8,
                    applied_tick: *applied,
                },
            ),
            Out::Chat { sender, text } => enc.encode(
                buf,
                seq,
                &Message::ChatBroadcast {
                    sender_slot: *sender,
                    text,
                },
            ),
            Out::Full { tick: t } => {
                let w = &history[(*t as usize) % HISTORY];
                if w.tick != *t {
                    return Err(codec::EncodeError::FieldTooLong);
                }
                let infos: Vec<PlayerInfo<'_>> = players
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| {
                        p.as_ref().map(|p| PlayerInfo {
                            slot: i as u8,
                            connected: p.conn.is_some(),
                            name: &p.name,
                        })
                    })
                    .collect();
                let meta = Metadata {
                    tick: *t,
                    tick_rate: cfg.tick_rate,
                    map_width: cfg.map_width,
                    map_height: cfg.map_height,
                    rng_state: *t ^ cfg.seed,
                };
                let n = world::write_full(scratch, &meta, &infos, terrain, land_value, w)?;
                codec::encode_full(buf, seq, *t, &scratch[..n])
            }
            Out::Delta { base, target } => {
                let (b, t) = (
                    &history[(*base as usize) % HISTORY],
                    &history[(*target as usize) % HISTORY],
                );
                if b.tick != *base || t.tick != *target {
                    return Err(codec::EncodeError::FieldTooLong);
                }
                let (ents, comps, n) = world::write_delta(scratch, b, t)?;
                enc.encode(
                    buf,
                    seq,
                    &Message::DeltaSnapshot(codec::DeltaSnapshot {
                        base_tick: *base,
                        target_tick: *target,
                        entity_count: ents,
                        component_count: comps,
                        payload: &scratch[..n],
                    }),
                )
            }
        }
    }
}
