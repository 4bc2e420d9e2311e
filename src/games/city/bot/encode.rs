//! The bot's queued messages onto the wire, each dialect writing what its server reads.

use super::*;

impl CityBot {
    pub(super) fn encode_out(
        &self,
        o: &Out,
        buf: &mut [u8],
        seq: u16,
    ) -> Result<usize, codec::BufferTooSmall> {
        match o {
            Out::Hello => codec::encode(
                buf,
                seq,
                &Message::ClientHello {
                    protocol_version: self.opts.protocol_version,
                    client_version: &self.opts.client_version,
                    player_name: &self.name,
                },
            ),
            Out::Disconnect(r) => codec::encode(
                buf,
                seq,
                &Message::Disconnect {
                    reason: *r as u8,
                    message: match r {
                        DisconnectReason::Timeout => "server silent",
                        _ => "bye",
                    },
                },
            ),
            Out::Ping => codec::encode(buf, seq, &Message::Ping),
            Out::Pong => codec::encode(buf, seq, &Message::Pong),
            Out::ContentRequest { from, to } => {
                let ids = self.request_ids.get(*from..*to).unwrap_or(&[]);
                codec::encode_content_request(buf, seq, ids)
            }
            Out::Input(i) => codec::encode(buf, seq, &Message::PlayerInput(*i)),
            Out::Chat(k) => {
                let content = format!("hello from {} #{k}", self.name);
                // The implementation's server reads four fields and dies on the spec's three:
                // each dialect writes only what its server reads.
                let dialect = self.dialect();
                let sender = (dialect == Dialect::Implementation).then_some(self.name.as_str());
                let target = match self.opts.chat_channel {
                    ChatChannel::Whisper => {
                        format!("{}-{}", self.opts.name_prefix, self.params.index ^ 1)
                    }
                    _ => String::new(),
                };
                codec::encode_in(
                    buf,
                    seq,
                    &Message::ChatMessage {
                        channel: self.opts.chat_channel.wire(),
                        sender,
                        target: &target,
                        content: &content,
                    },
                    dialect,
                )
            }
        }
    }
}
