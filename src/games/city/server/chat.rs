//! Chat: channels, the per-minute limit, and who receives what.

use super::*;

impl CityServer {
    pub(super) fn on_chat(
        &mut self,
        now: Instant,
        slot: usize,
        channel: u8,
        target: &str,
        content: &str,
    ) {
        let max = self.cfg.max_chat_per_minute;
        let view = self.cfg.view_distance;
        let Some(s) = self.sessions.state_mut(slot) else {
            return;
        };
        let Some(sender_entity) = s.entity.filter(|_| s.stage == Stage::InGame) else {
            self.stats.events.add("chat_before_game", 1);
            return;
        };
        if now.saturating_duration_since(s.chat_window) >= Duration::from_secs(60) {
            s.chat_window = now;
            s.chats_in_window = 0;
        }
        s.chats_in_window += 1;
        if s.chats_in_window > max {
            self.stats.events.add("chat_rate_limited", 1);
            return;
        }
        if content.len() > MAX_CHAT_LEN {
            self.stats.events.add("chat_too_long", 1);
            return;
        }
        if channel == codec::CHAT_SYSTEM || channel > codec::CHAT_WHISPER {
            self.stats.events.add("chat_bad_channel", 1);
            return;
        }
        let sender = s.name.clone();
        let origin = self.entities.get(&sender_entity).map(|e| e.pos);
        let msg = Message::ChatBroadcast {
            channel,
            sender: &sender,
            target,
            content,
        };
        let ob = &mut self.outbox;
        let mut delivered = 0u64;
        for (i, o) in self.sessions.iter_mut() {
            let o = &mut o.state;
            if o.stage != Stage::InGame {
                continue;
            }
            let to = match channel {
                codec::CHAT_LOCAL => {
                    let p = o
                        .entity
                        .and_then(|id| self.entities.get(&id))
                        .map(|e| e.pos);
                    matches!((origin, p), (Some(a), Some(b)) if a.distance(b) <= view)
                }
                codec::CHAT_WHISPER => i == slot || o.name == target,
                _ => true,
            };
            if to && push_msg(o, ob, &msg) {
                delivered += 1;
            }
        }
        self.stats.events.add("chat_relayed", 1);
        self.stats.events.add("chat_deliveries", delivered);
    }
}
