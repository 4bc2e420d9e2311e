//! Zone handoff: CONNECT_ACK (first connect and handoff), ZONE_HANDOFF and its EVENT form,
//! the relink and the CONNECT to the new zone with the token.

use super::*;

#[derive(Debug, Clone, Copy)]
pub(super) struct Handoff {
    pub(super) started: Instant,
    pub(super) token: [u8; 32],
    /// CONNECT to the new zone due at (set once relinked).
    pub(super) connect_at: Option<Instant>,
    pub(super) connecting: bool,
}

impl DarkAgesBot {
    pub(super) fn fail_handoff(&mut self, reason: &'static str, rec: &mut Recorder) {
        rec.events.add2("handoff_failed", reason, 1);
        self.handoff = None;
        self.session.handshake.end();
        self.out.clear();
        self.phase = BotPhase::Closed;
    }

    pub(super) fn on_connect_ack(
        &mut self,
        now: Instant,
        a: &codec::ConnectAck,
        rec: &mut Recorder,
    ) {
        if let Some(h) = self.handoff.filter(|h| h.connecting) {
            if a.result == result::SUCCESS {
                rec.record_extra(
                    "handoff_us",
                    now.saturating_duration_since(h.started).as_micros() as u64,
                );
                rec.event("handoffs");
                self.handoff = None;
                self.session.handshake.end();
                self.auth_token = [0; 64];
                self.entity = Some(a.entity_id);
                self.zone = Some(a.zone_id);
                self.out.push_back(Out::Connected);
            } else if a.result == result::AUTH_FAILED
                && codec::text_of(&a.message).starts_with("expired")
            {
                self.fail_handoff("expired_token", rec);
            } else {
                self.fail_handoff("refused", rec);
            }
            return;
        }
        match self.phase {
            BotPhase::Connecting => {
                if a.result != result::SUCCESS {
                    let why = match a.result {
                        result::VERSION_MISMATCH => "version_mismatch",
                        result::AUTH_FAILED => "auth_failed",
                        _ => "refused",
                    };
                    self.fail(why, rec);
                    return;
                }
                self.phase = BotPhase::Connected;
                self.session.established(now, rec);
                self.silence.arm(now);
                self.entity = Some(a.entity_id);
                self.zone = Some(a.zone_id);
                self.out.push_back(Out::Connected);
                self.keys.begin(now, &self.params);
                self.pings.start_at(now + self.params.phase_offset);
                self.heartbeat_timer
                    .start_at(now + Duration::from_millis(self.opts.heartbeat_interval_ms));
                self.invalid_timer
                    .start_at(now + Duration::from_millis(self.opts.invalid_input_interval_ms));
            }
            _ => rec.event("connect_ack_duplicate"),
        }
    }

    pub(super) fn on_zone_handoff(
        &mut self,
        now: Instant,
        z: &codec::ZoneHandoff,
        rec: &mut Recorder,
    ) {
        if self.handoff.is_some() {
            rec.event("handoff_duplicate");
            return;
        }
        if self.failed_token == Some(z.handoff_token) {
            return;
        }
        let ip = z
            .address_text()
            .and_then(|t| t.trim().parse::<IpAddr>().ok());
        let Some(ip) = ip.filter(|_| z.new_server_port != 0) else {
            rec.events.add2("handoff_failed", "bad_address", 1);
            self.failed_token = Some(z.handoff_token);
            return;
        };
        let to = SocketAddr::new(ip, z.new_server_port);
        if !self.handoff_policy.allows(to) {
            // Counted once per token (the server resends it); nothing goes to `to`.
            rec.events.add2("handoff_refused", "not_allowed", 1);
            self.failed_token = Some(z.handoff_token);
            return;
        }
        if let Some((kind, _)) = self.verdict.take() {
            rec.events.add2("invalid_input_unjudged", kind, 1);
        }
        // This zone's snapshots end here (later ones are ignored while handing off), on
        // purpose: no tail is lost.
        self.finish_ticks(rec);
        self.arrivals.reset();
        self.out.push_back(Out::Disconnect(reason::ZONE_HANDOFF));
        self.handoff = Some(Handoff {
            started: now,
            token: z.handoff_token,
            connect_at: None,
            connecting: false,
        });
        self.relink = Some(to);
        rec.event("handoff_started");
    }

    pub(super) fn send_handoff_connect(&mut self, now: Instant) {
        let Some(h) = self.handoff.as_mut() else {
            return;
        };
        h.connect_at = None;
        h.connecting = true;
        self.auth_token = [0; 64];
        self.auth_token[..32].copy_from_slice(&h.token);
        self.out.push_back(Out::Connect);
        self.session.connect_again(now, &self.params);
    }

    pub(super) fn on_event(&mut self, now: Instant, body: &EventBody<'_>, rec: &mut Recorder) {
        let t = body.event_type();
        rec.event(event::name(t));
        match body {
            EventBody::Damage(d) if Some(d.target_id) == self.entity => {
                rec.events.add("damage_taken", d.damage.max(0) as u64);
            }
            EventBody::Death(d) if Some(d.victim_id) == self.entity => {
                // The server respawns the player elsewhere: re-anchor, not a correction.
                self.anchored = false;
            }
            EventBody::ZoneHandoff(z) => self.on_zone_handoff(now, z, rec),
            _ => {}
        }
    }
}
