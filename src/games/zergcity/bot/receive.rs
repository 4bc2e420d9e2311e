//! What the bot does with each message the server sends: the handshake's answer, snapshots,
//! acknowledgements, pongs, chat and the server's goodbye.

use super::*;

impl ZergCityBot {
    pub(super) fn on_message(
        &mut self,
        now: Instant,
        m: Message<'_>,
        len: usize,
        compressed: bool,
        rec: &mut Recorder,
    ) {
        match m {
            Message::ServerHello {
                result,
                assigned_slot,
                session_token,
                tick_rate,
                current_tick,
                map_width,
                map_height,
                ..
            } => self.on_server_hello(
                now,
                HelloResult::from_u8(result),
                assigned_slot,
                session_token,
                (tick_rate, current_tick, map_width, map_height),
                rec,
            ),
            Message::FullSnapshot {
                snapshot_tick,
                data,
            } => {
                let data_len = data.len();
                rec.record_extra("full_snapshot_compressed_bytes", len as u64);
                rec.record_extra("full_snapshot_uncompressed_bytes", data_len as u64);
                rec.record_extra(
                    "compression_ratio",
                    (data_len as u64 * 100) / (len.max(1) as u64),
                );
                self.on_full(now, snapshot_tick, data, rec);
            }
            Message::DeltaSnapshot(d) => {
                let plain = codec::HEADER_LEN + codec::DELTA_PREFIX_LEN + d.payload.len();
                rec.record_extra("delta_compressed_bytes", len as u64);
                rec.record_extra("delta_uncompressed_bytes", plain as u64);
                if compressed {
                    rec.record_extra(
                        "compression_ratio",
                        (plain as u64 * 100) / (len.max(1) as u64),
                    );
                }
                self.on_delta(now, &d, rec);
            }
            Message::InputAck {
                input_sequence,
                result,
                ..
            } => self.on_input_ack(now, input_sequence, result, rec),
            Message::Pong {
                timestamp,
                server_tick,
            } => self.on_pong(now, timestamp, server_tick, rec),
            Message::Ping { .. } => rec.event("server_ping_ignored"),
            Message::Disconnect { reason, .. } => {
                let why = codec::disconnect_reason_name(reason);
                match self.phase {
                    BotPhase::Connecting => {
                        rec.connect_failures.add(why, 1);
                        self.close(BotPhase::Failed);
                    }
                    _ => {
                        rec.events.add2("server_disconnect", why, 1);
                        if self.relink_started.is_some() {
                            rec.event("reconnect_failed");
                        }
                        self.close(BotPhase::Closed);
                    }
                }
            }
            Message::ErrorMessage { error_code, .. } => {
                rec.events
                    .add2("error_message", codec::error_code_name(error_code), 1)
            }
            Message::ChatBroadcast { sender_slot, .. } => {
                rec.event("chat_received");
                if Some(sender_slot) == self.slot {
                    rec.event("chat_echoed");
                }
            }
            Message::Opaque { .. } => rec.event("opaque_message_ignored"),
            Message::ClientHello { .. }
            | Message::SnapshotAck { .. }
            | Message::InputMessage { .. }
            | Message::ChatMessage { .. } => {
                rec.decode_error(m.msg_type().name(), "wrong_direction")
            }
        }
    }

    pub(super) fn on_server_hello(
        &mut self,
        now: Instant,
        result: HelloResult,
        slot: u8,
        token: [u8; TOKEN_LEN],
        (tick_rate, tick, w, h): (u32, u64, u32, u32),
        rec: &mut Recorder,
    ) {
        if self.stage != Stage::Hello {
            rec.event("duplicate_server_hello");
            return;
        }
        rec.events.add2("hello_result", result.name(), 1);
        let reconnecting = self.relink_started.is_some();
        self.handshake.end();
        if result != HelloResult::Accepted {
            if reconnecting {
                rec.event("reconnect_failed");
                self.close(BotPhase::Closed);
            } else {
                rec.connect_failures.add(result.name(), 1);
                self.close(BotPhase::Failed);
            }
            return;
        }
        if reconnecting {
            if Some(slot) == self.slot_before {
                rec.event("reconnect_slot_restored");
            } else {
                rec.event("reconnect_new_slot");
            }
        } else if let Some(s) = self.started_at {
            rec.record_handshake(now.saturating_duration_since(s).as_micros() as u64);
        }
        self.phase = BotPhase::Connected;
        self.stage = Stage::AwaitFull;
        self.slot = Some(slot);
        self.token = token;
        self.tick_rate = tick_rate.max(1);
        self.map = (w.min(4096) as i32, h.min(4096) as i32);
        self.clock = Some((tick as f64, now));
        self.silence.arm(now);
        self.ping_timer.start_at(now + self.me.params.phase_offset);
    }
}
