//! The bot's queued messages onto the wire.

use super::*;

impl ZergCityBot {
    pub(super) fn encode_out(
        &mut self,
        o: &Out,
        buf: &mut [u8],
    ) -> Result<usize, codec::EncodeError> {
        let seq = self.seq_out;
        match *o {
            Out::Hello { token, slot } => self.enc.encode(
                buf,
                seq,
                &Message::ClientHello {
                    client_version: self.me.opts.client_version,
                    player_name: &self.me.name,
                    session_token: token,
                    requested_slot: slot,
                },
            ),
            Out::Ack(tick) => self.enc.encode(
                buf,
                seq,
                &Message::SnapshotAck {
                    acked_tick: tick,
                    last_input_seq: self.input_seq,
                },
            ),
            Out::Ping(ts) => self.enc.encode(
                buf,
                seq,
                &Message::Ping {
                    timestamp: ts,
                    server_tick: 0,
                },
            ),
            Out::Chat(k) => {
                let text = format!("{} says hello #{k}", self.me.name);
                self.enc
                    .encode(buf, seq, &Message::ChatMessage { text: &text })
            }
            Out::Disconnect(reason) => self.enc.encode(
                buf,
                seq,
                &Message::Disconnect {
                    reason,
                    message: if reason == DISCONNECT_TIMEOUT {
                        "server silent"
                    } else {
                        "bye"
                    },
                },
            ),
            Out::Input {
                seq: input_sequence,
                client_tick,
                act,
            } => {
                let rects = [GridRect {
                    x: act.tiles[0].0,
                    y: act.tiles[0].1,
                    width: 1,
                    height: 1,
                }];
                let tiles = &act.tiles[..act.n.min(4)];
                let action = match act.ty {
                    codec::INPUT_PLACE_BUILDING => Action::PlaceBuilding {
                        building_type: act.c,
                        x: act.tiles[0].0,
                        y: act.tiles[0].1,
                        rotation: act.a as u8,
                    },
                    codec::INPUT_DESIGNATE_ZONE => Action::DesignateZone {
                        zone_type: act.c as u8,
                        density: act.a as u8,
                        rects: &rects,
                    },
                    codec::INPUT_PURCHASE_TILE => Action::PurchaseTile {
                        x: act.tiles[0].0,
                        y: act.tiles[0].1,
                    },
                    codec::INPUT_SET_TRIBUTE_RATE => Action::SetTributeRate {
                        zone_type: act.a as u8,
                        rate: act.c as u8,
                    },
                    codec::INPUT_NONE => Action::None,
                    kind => Action::Tiles { kind, tiles },
                };
                self.enc.encode(
                    buf,
                    seq,
                    &Message::InputMessage {
                        input_sequence,
                        client_tick,
                        action,
                    },
                )
            }
        }
    }
}
