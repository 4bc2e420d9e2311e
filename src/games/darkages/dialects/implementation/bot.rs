//! The implementation dialect's bot: a sans-IO client of the public server's plain-UDP
//! protocol (docs/protocols/darkages.md, "Dialect `implementation`").
//!
//! Life: CONNECT, resent every `handshake_retry` until the server says anything (a reply,
//! a snapshot, a game message); play begins at the CONNECT reply, or at a snapshot if the
//! reply was lost (only admitted clients get snapshots; `play_without_reply`). Then INPUT
//! on the input grid (at most 60 a second: the scenario is refused above), a PING every
//! `ping_interval`, snapshots applied, events and game messages counted.
//!
//! # Why CONNECT stops at the first word from the server
//! The server registers every CONNECT it accepts in its per-address and per-/24 tables and
//! never releases an entry; one from a client it already holds gets no reply but still
//! takes an entry. A bot that kept resending would use up its /24's 20 places by itself.
//! A refused CONNECT gets no reply at all, so a bot the server never answers is counted
//! `unanswered` when `handshake_timeout` runs out.
//!
//! # What the bot measures
//! - RTT: PING carries an opaque `u32` token the server echoes in PONG; the bot keeps its
//!   own microsecond send time for up to 8 pings in flight.
//! - Downstream loss: SNAPSHOT `server_tick` gaps in steps of the snapshot tick step,
//!   learned from the first 8 ticks as for the spec dialect (3 at 60 Hz ticks and 20 Hz
//!   snapshots). Snapshots are always full, so there is nothing else to lose.
//! - Upstream: `last_input_seq` is the newest input the server applied. It acknowledges that
//!   input (`input_ack_us`: its send to the first snapshot carrying it) and says nothing of
//!   those before it, so upstream loss is not measurable.
//! - Entities: a snapshot lists every entity the client may see; one missing from the next
//!   snapshot is gone (`entities_gone`).
//!
//! # Zone handoff
//! A handoff event (subtype 1 at a length other than 19 bytes) names `host:port`. An IP
//! literal on a host of the run's targets or in `handoff_allow` is followed: the bot asks
//! the engine for a new link there and sends CONNECT (the token has no field in it);
//! the reply ends the handoff (`handoff_us`). Anything else is not followed
//! (`handoff_refused.not_allowed`, `handoff_failed.bad_address`).

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::codec::{self, subtype, Event, Input, ServerPacket};
use crate::games::darkages::bot::allow::HandoffPolicy;
use crate::games::darkages::bot::client::{keys_to_flags, Pings, Session};
use crate::games::darkages::DarkAgesOptions;
use crate::protocol::prelude::input_grid::KeyInputs;
use crate::protocol::prelude::seqwindow::TickStep;
use crate::protocol::prelude::tail::SnapshotArrivals;
use crate::protocol::prelude::timers::{wake_in_phase, Silence};
use crate::protocol::prelude::Recorder;
use crate::protocol::prelude::{Bot, BotParams, BotPhase, Relink, Transmit};

/// `version` in CONNECT: the real client's protocol version (the server does not check it).
const CONNECT_VERSION: u32 = 1;
/// Inputs kept waiting for `last_input_seq` to reach them.
const ACK_WINDOW: usize = 256;
/// The reason the server gives when it kicks for more than 65 inputs in a second ("Rate
/// limit exceeded"): its DISCONNECT carries only the length.
const RATE_LIMIT_REASON_LEN: u8 = 19;

#[derive(Debug, Clone, Copy)]
enum Out {
    Connect,
    Input(Input),
    Ping(u32),
}

/// A handoff under way.
#[derive(Debug, Clone, Copy)]
struct Handoff {
    started: Instant,
    /// The new link is up and CONNECT went out.
    connecting: bool,
}

/// The bot. See the module docs.
pub struct ImplementationBot {
    params: BotParams,
    opts: DarkAgesOptions,
    phase: BotPhase,
    session: Session,
    /// The server said something in this session: stop resending CONNECT.
    heard: bool,
    replied: bool,
    entity: Option<u32>,
    keys: KeyInputs,
    rng: ChaCha8Rng,
    seq: u32,
    heading: f32,
    pings: Pings,
    silence: Silence,
    ticks: TickStep,
    arrivals: SnapshotArrivals,
    newest_tick: Option<u32>,
    /// Highest `last_input_seq` seen.
    acked: Option<u32>,
    in_flight: VecDeque<(u32, Instant)>,
    ids: Vec<u32>,
    prev_ids: Vec<u32>,
    out: VecDeque<Out>,
    handoff: Option<Handoff>,
    relink: Option<SocketAddr>,
    policy: HandoffPolicy,
}

impl ImplementationBot {
    pub fn new(params: BotParams, opts: DarkAgesOptions) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(params.seed);
        // Each bot walks its own heading, spread round the compass by index.
        let heading =
            ((params.index % 16) as f32 / 16.0) * 2.0 * std::f32::consts::PI - std::f32::consts::PI;
        Self {
            keys: KeyInputs::new(&params),
            pings: Pings::new(params.ping_interval),
            silence: Silence::new(params.server_silence_timeout),
            ticks: TickStep::checked(opts.snapshot_tick_step),
            policy: HandoffPolicy::new(params.targets.clone(), &opts.handoff_allow),
            params,
            opts,
            phase: BotPhase::Idle,
            session: Session::new(),
            heard: false,
            replied: false,
            entity: None,
            rng,
            seq: 0,
            heading,
            arrivals: SnapshotArrivals::new(),
            newest_tick: None,
            acked: None,
            in_flight: VecDeque::with_capacity(ACK_WINDOW),
            ids: Vec::new(),
            prev_ids: Vec::new(),
            out: VecDeque::with_capacity(8),
            handoff: None,
            relink: None,
        }
    }

    /// `player_id` in CONNECT: the bot's index plus one (the server does not check it).
    fn player_id(&self) -> u32 {
        self.params.index.wrapping_add(1)
    }

    /// The end of a zone session's stream: held-back ticks counted, the tail too when the
    /// stream ended unexpectedly (`tail`).
    fn end_stream(&mut self, now: Instant, tail: bool, rec: &mut Recorder) {
        let news = self.ticks.finish();
        news.record(rec);
        if tail {
            self.arrivals.finish(now, rec);
        } else {
            self.arrivals.reset();
        }
    }

    fn reset_zone_session(&mut self) {
        self.ticks = TickStep::checked(self.opts.snapshot_tick_step);
        self.arrivals.reset();
        self.newest_tick = None;
        self.acked = None;
        self.in_flight.clear();
        self.prev_ids.clear();
        self.entity = None;
        self.heard = false;
        self.replied = false;
    }

    fn enter_play(&mut self, now: Instant, rec: &mut Recorder) {
        self.phase = BotPhase::Connected;
        self.session.established(now, rec);
        self.silence.arm(now);
        self.keys.begin(now, &self.params);
        self.pings.start_at(now + self.params.phase_offset);
    }

    fn on_reply(&mut self, now: Instant, success: u8, entity: u32, rec: &mut Recorder) {
        if success != 1 {
            // The real server never answers a refusal; a reply that says so is counted.
            rec.event("connect_reply_not_success");
            return;
        }
        if self.replied {
            rec.event("connect_reply_duplicate");
            return;
        }
        self.replied = true;
        self.entity = Some(entity);
        if let Some(h) = self.handoff {
            if h.connecting {
                self.handoff = None;
                self.session.handshake.end();
                rec.record_extra(
                    "handoff_us",
                    now.saturating_duration_since(h.started).as_micros() as u64,
                );
                rec.event("handoffs");
                self.keys.skip_past(now);
                return;
            }
        }
        match self.phase {
            BotPhase::Connecting => self.enter_play(now, rec),
            _ => rec.event("connect_reply_after_play"),
        }
    }

    fn on_snapshot(&mut self, now: Instant, s: &codec::Snapshot<'_>, rec: &mut Recorder) {
        if self.phase == BotPhase::Connecting {
            rec.event("play_without_reply");
            self.enter_play(now, rec);
        }
        let news = self.ticks.on_tick(s.server_tick);
        news.record(rec);
        if news.duplicate && self.newest_tick == Some(s.server_tick) {
            rec.event("snapshot_duplicate");
            return;
        }
        self.arrivals.on_arrival(now, rec);
        if let Some(n) = self.newest_tick {
            if (s.server_tick.wrapping_sub(n) as i32) <= 0 {
                // Older than the world the bot holds (reordered): counted for loss, not
                // applied.
                rec.event("snapshot_stale");
                return;
            }
        }
        self.newest_tick = Some(s.server_tick);
        rec.snapshots_applied += 1;
        rec.record_extra("entities", u64::from(s.count));

        self.ids.clear();
        let mut own = false;
        for e in s.entities() {
            if !(e.pos.iter().chain(e.vel.iter()).all(|v| v.is_finite())) {
                rec.event("entity_not_finite");
                continue;
            }
            own |= Some(e.id) == self.entity;
            self.ids.push(e.id);
        }
        if self.entity.is_some() && !own {
            rec.event("own_entity_missing");
        }
        self.ids.sort_unstable();
        let gone = count_missing(&self.prev_ids, &self.ids);
        if gone > 0 {
            rec.events.add("entities_gone", gone);
        }
        std::mem::swap(&mut self.ids, &mut self.prev_ids);

        self.on_ack(now, s.last_input_seq, rec);
    }

    /// `last_input_seq`: the newest input the server applied.
    fn on_ack(&mut self, now: Instant, seq: u32, rec: &mut Recorder) {
        if seq == 0
            || self
                .acked
                .is_some_and(|a| (seq.wrapping_sub(a) as i32) <= 0)
        {
            return;
        }
        if (seq.wrapping_sub(self.seq) as i32) > 0 {
            // Beyond anything this bot sent: another session's number, or a broken server.
            rec.event("input_ack_ahead");
            return;
        }
        self.acked = Some(seq);
        while let Some(&(s, sent)) = self.in_flight.front() {
            if (s.wrapping_sub(seq) as i32) > 0 {
                break;
            }
            self.in_flight.pop_front();
            if s == seq {
                rec.record_extra(
                    "input_ack_us",
                    now.saturating_duration_since(sent).as_micros() as u64,
                );
            }
        }
    }

    fn on_event(&mut self, now: Instant, e: Event<'_>, rec: &mut Recorder) {
        match e {
            Event::Combat { subtype, .. } => rec.event(match subtype {
                subtype::DAMAGE => "event_damage",
                subtype::DEATH => "event_death",
                _ => "event_heal",
            }),
            Event::Handoff {
                host, port, token, ..
            } => self.on_handoff(now, host, port, token, rec),
        }
    }

    fn on_handoff(
        &mut self,
        now: Instant,
        host: &[u8],
        port: u16,
        token: &[u8],
        rec: &mut Recorder,
    ) {
        rec.event("handoff_received");
        if token.is_empty() {
            rec.event("handoff_token_empty");
        }
        if self.handoff.is_some() || self.phase != BotPhase::Connected {
            rec.event("handoff_ignored_busy");
            return;
        }
        let Some(ip) = std::str::from_utf8(host)
            .ok()
            .and_then(|h| h.parse::<IpAddr>().ok())
        else {
            rec.event("handoff_failed.bad_address");
            return;
        };
        let to = SocketAddr::new(ip, port);
        if !self.policy.allows(to) {
            rec.event("handoff_refused.not_allowed");
            return;
        }
        self.end_stream(now, false, rec);
        self.reset_zone_session();
        self.out.clear();
        self.handoff = Some(Handoff {
            started: now,
            connecting: false,
        });
        self.relink = Some(to);
    }

    fn send_input_if_due(&mut self, now: Instant, rec: &mut Recorder) {
        let between_zones = self.handoff.is_some();
        let Some(keys) = self.session.keys_due(
            &mut self.keys,
            between_zones,
            now,
            &self.params,
            &mut self.rng,
            rec,
        ) else {
            return;
        };
        self.seq = self.seq.wrapping_add(1);
        if self.seq == 0 {
            self.seq = 1;
        }
        let inp = Input {
            sequence: self.seq,
            timestamp: self.session.ms(now),
            flags: u16::from(keys_to_flags(keys)),
            yaw: self.heading,
            pitch: 0.0,
            target: 0,
        };
        if self.in_flight.len() >= ACK_WINDOW {
            self.in_flight.pop_front();
        }
        self.in_flight.push_back((self.seq, now));
        rec.inputs_sent += 1;
        self.out.push_back(Out::Input(inp));
    }

    fn send_ping_if_due(&mut self, now: Instant, rec: &mut Recorder) {
        if self.pings.due(now) && self.handoff.is_none() {
            let token = self.pings.send(now, rec);
            rec.event("pings_sent");
            self.out.push_back(Out::Ping(token));
        }
    }

    fn fail_handoff(&mut self, why: &'static str, rec: &mut Recorder) {
        rec.events.add2("handoff_failed", why, 1);
        self.handoff = None;
        self.session.handshake.end();
        self.phase = BotPhase::Closed;
        self.out.clear();
    }
}

/// Ids in `prev` that are not in `cur` (both sorted).
fn count_missing(prev: &[u32], cur: &[u32]) -> u64 {
    let (mut i, mut j, mut n) = (0, 0, 0u64);
    while i < prev.len() {
        match cur.get(j) {
            Some(&c) if c < prev[i] => j += 1,
            Some(&c) if c == prev[i] => {
                i += 1;
                j += 1;
            }
            _ => {
                n += 1;
                i += 1;
            }
        }
    }
    n
}

impl ImplementationBot {
    /// A datagram as this dialect's server packet, when the bot takes datagrams now; a
    /// packet that does not decode is counted (with a hint when it is the spec's).
    fn read_packet<'a>(&self, data: &'a [u8], rec: &mut Recorder) -> Option<ServerPacket<'a>> {
        if !self.phase.takes_datagram(rec) {
            return None;
        }
        match codec::decode_server(data) {
            Ok(p) => Some(p),
            Err(e) => {
                if crate::games::darkages::codec::decode(data).is_ok() {
                    rec.event("dialect_hint.spec");
                    rec.decode_error(e.message, "fits_spec_dialect");
                } else {
                    rec.decode_error(e.message, e.reason);
                }
                None
            }
        }
    }
}

impl Bot for ImplementationBot {
    fn start(&mut self, now: Instant, _rec: &mut Recorder) {
        self.phase = self.session.begin(now, &self.params);
        self.out.push_back(Out::Connect);
    }

    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        let Some(packet) = self.read_packet(data, rec) else {
            return;
        };
        self.heard = true;
        self.silence.heard(now);
        match packet {
            ServerPacket::Snapshot(s) => self.on_snapshot(now, &s, rec),
            ServerPacket::ConnectReply {
                success, entity_id, ..
            } => self.on_reply(now, success, entity_id, rec),
            ServerPacket::Pong(t) => self.pings.on_pong(now, t, rec),
            ServerPacket::Event(e) => self.on_event(now, e, rec),
            ServerPacket::Game(t) => {
                rec.events
                    .add2("game_message", codec::game_message_name(t), 1)
            }
            ServerPacket::Disconnect { reason_len } => {
                rec.events.add2(
                    "disconnected",
                    if reason_len == RATE_LIMIT_REASON_LEN {
                        "rate_limit_exceeded"
                    } else {
                        "other"
                    },
                    1,
                );
                if self.phase == BotPhase::Connecting {
                    rec.connect_failures.add("disconnected", 1);
                    self.phase = BotPhase::Failed;
                } else {
                    self.end_stream(now, false, rec);
                    self.phase = BotPhase::Closed;
                }
                self.handoff = None;
                self.out.clear();
            }
        }
    }

    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting => {
                if self.session.handshake.timed_out(now) {
                    rec.connect_failures
                        .add(if self.heard { "no_reply" } else { "unanswered" }, 1);
                    self.phase = BotPhase::Failed;
                    self.out.clear();
                } else if self.session.handshake.retry_due(now) && !self.heard {
                    self.out.push_back(Out::Connect);
                }
            }
            BotPhase::Connected => {
                if let Some(h) = self.handoff {
                    if h.connecting {
                        if self.session.handshake.timed_out(now) {
                            self.fail_handoff("timeout", rec);
                            return;
                        }
                        if self.session.handshake.retry_due(now) && !self.heard {
                            self.out.push_back(Out::Connect);
                        }
                    }
                }
                if self.silence.expired(now) {
                    rec.event("server_silence_timeout");
                    self.end_stream(now, true, rec);
                    self.phase = BotPhase::Closed;
                    self.out.clear();
                    return;
                }
                self.send_input_if_due(now, rec);
                self.send_ping_if_due(now, rec);
            }
            BotPhase::Idle | BotPhase::Failed | BotPhase::Closed => {}
        }
    }

    /// The real client sends nothing when it leaves (the server drops it after 30 s of
    /// silence); neither does the bot.
    fn stop(&mut self, now: Instant, rec: &mut Recorder) {
        if self.phase == BotPhase::Connected {
            self.end_stream(now, true, rec);
        }
        if matches!(self.phase, BotPhase::Connecting | BotPhase::Connected) {
            self.phase = BotPhase::Closed;
        }
        self.out.clear();
        self.handoff = None;
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let o = self.out.pop_front()?;
        let len = match o {
            Out::Connect => codec::encode_connect(buf, CONNECT_VERSION, self.player_id()),
            Out::Input(i) => codec::encode_input(buf, &i),
            Out::Ping(t) => codec::encode_ping(buf, t),
        }
        .ok()?;
        Some(Transmit::datagram(len))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let handshake = self.session.handshake.next_deadline();
        wake_in_phase(
            self.phase,
            handshake,
            [
                self.keys.next_due(),
                self.pings.next(),
                self.silence.deadline(),
                handshake.filter(|_| self.handoff.is_some_and(|h| h.connecting)),
            ],
        )
    }

    fn phase(&self) -> BotPhase {
        self.phase
    }

    fn waiting_for(&self) -> Option<&'static str> {
        (self.phase == BotPhase::Connecting).then_some("CONNECT reply")
    }

    fn poll_relink(&mut self) -> Option<Relink> {
        self.relink.take().map(|a| Relink { to: Some(a) })
    }

    fn handle_relinked(&mut self, now: Instant, _rec: &mut Recorder) {
        let Some(h) = self.handoff.as_mut() else {
            return;
        };
        h.connecting = true;
        self.silence.arm(now);
        self.silence.heard(now);
        self.out.push_back(Out::Connect);
        self.session.connect_again(now, &self.params);
    }

    fn handle_transport_closed(&mut self, now: Instant, rec: &mut Recorder) {
        if self.handoff.is_some() {
            self.fail_handoff("bad_address", rec);
        } else if self.phase == BotPhase::Connected {
            self.phase = BotPhase::Closed;
            rec.event("transport_closed");
            self.end_stream(now, true, rec);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::prelude::wire::{Le, Writer};
    use std::time::Duration;

    fn bot() -> ImplementationBot {
        let opts = DarkAgesOptions {
            dialect: crate::games::darkages::Dialect::Implementation,
            ..DarkAgesOptions::default()
        };
        ImplementationBot::new(BotParams::with_index(0, 7), opts)
    }

    fn sent(b: &mut ImplementationBot) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 1500];
        while let Some(t) = b.poll_transmit(&mut buf) {
            out.push(buf[..t.len].to_vec());
        }
        out
    }

    fn snapshot(tick: u32, last_input: u32, ids: &[u32]) -> Vec<u8> {
        let mut buf = vec![0u8; 13 + ids.len() * 103];
        let mut w = Writer::<Le>::new(&mut buf);
        codec::encode_snapshot_header(&mut w, tick, last_input, ids.len() as u32).unwrap();
        for &id in ids {
            let e = codec::Entity {
                id,
                pos: [0.0; 3],
                vel: [0.0; 3],
                health: 100,
                anim: 0,
                kind: 0,
                interaction_range: 0.0,
                prompt: [0; 64],
                dialogue: 0,
            };
            codec::encode_entity(&mut w, &e).unwrap();
        }
        buf
    }

    /// CONNECT goes out until the server says anything: the inventory that comes before the
    /// reply stops the resends, so the bot never takes a second place in the server's tables.
    #[test]
    fn connect_is_resent_only_until_the_server_speaks_then_play_starts_at_the_reply() {
        let t0 = Instant::now();
        let mut rec = Recorder::new();
        let mut b = bot();
        b.start(t0, &mut rec);
        assert_eq!(sent(&mut b), vec![vec![6, 1, 0, 0, 0, 1, 0, 0, 0]]);
        let t1 = t0 + Duration::from_millis(500);
        b.handle_timeout(t1, &mut rec);
        assert_eq!(sent(&mut b).len(), 1, "resent while unanswered");
        b.handle_datagram(t1, &[19; 201], &mut rec);
        let t2 = t0 + Duration::from_millis(1000);
        b.handle_timeout(t2, &mut rec);
        assert!(sent(&mut b).is_empty(), "not resent once the server spoke");
        assert_eq!(b.phase(), BotPhase::Connecting);
        b.handle_datagram(t2, &[7, 1, 42, 0, 0, 0, 1, 0, 0, 0], &mut rec);
        assert_eq!(b.phase(), BotPhase::Connected);
        assert_eq!(rec.connects_ok, 1);
        assert_eq!(rec.events.get("game_message.inventory_sync"), 1);
    }

    /// A refused CONNECT gets no reply: the bot is `unanswered` after the timeout.
    #[test]
    fn a_silent_server_leaves_the_bot_unanswered() {
        let t0 = Instant::now();
        let mut rec = Recorder::new();
        let mut b = bot();
        b.start(t0, &mut rec);
        b.handle_timeout(t0 + Duration::from_secs(6), &mut rec);
        assert_eq!(b.phase(), BotPhase::Failed);
        assert_eq!(rec.connect_failures.get("unanswered"), 1);
    }

    /// Tick gaps in steps of 3 are loss; `last_input_seq` times the input it names; an entity
    /// missing from the next snapshot is gone; `[6][19]` is the input-rate kick.
    #[test]
    fn snapshots_count_loss_acks_and_departures_and_the_kick_is_named() {
        let t0 = Instant::now();
        let mut rec = Recorder::new();
        let mut b = bot();
        b.start(t0, &mut rec);
        b.handle_datagram(t0, &[7, 1, 42, 0, 0, 0, 1, 0, 0, 0], &mut rec);
        let mut now = t0;
        for _ in 0..30 {
            now += Duration::from_micros(16_667);
            b.handle_timeout(now, &mut rec);
        }
        let inputs: Vec<Vec<u8>> = sent(&mut b).into_iter().filter(|p| p[0] == 1).collect();
        assert!(inputs.len() >= 25 && inputs.iter().all(|p| p.len() == 19));
        // Ticks 300..=336 step 3, with 309 and 330 missing; input 5 acknowledged at 303.
        for tick in (300..=336).step_by(3).filter(|t| *t != 309 && *t != 330) {
            let ids: &[u32] = if tick < 320 { &[42, 7, 8] } else { &[42, 7] };
            let ack = if tick >= 303 { 5 } else { 0 };
            b.handle_datagram(now, &snapshot(tick, ack, ids), &mut rec);
        }
        b.stop(now, &mut rec);
        assert_eq!((rec.loss_down.expected, rec.loss_down.received), (13, 11));
        assert_eq!(rec.snapshots_applied, 11);
        assert_eq!(rec.events.get("entities_gone"), 1);
        let ack = rec.extra("input_ack_us").expect("input_ack_us samples");
        assert_eq!(ack.len(), 1, "input 5, once");

        let mut b = bot();
        b.start(t0, &mut rec);
        b.handle_datagram(t0, &[7, 1, 42, 0, 0, 0, 1, 0, 0, 0], &mut rec);
        b.handle_datagram(t0, &[6, 19], &mut rec);
        assert_eq!(b.phase(), BotPhase::Closed);
        assert_eq!(rec.events.get("disconnected.rate_limit_exceeded"), 1);
    }

    /// `input_mode: on_change` holds here as in the spec dialect (the shared key inputs):
    /// with keys that never change, one INPUT goes out, not one per slot.
    #[test]
    fn on_change_sends_an_input_only_when_the_keys_change() {
        let t0 = Instant::now();
        let mut rec = Recorder::new();
        let mut params = BotParams::with_index(0, 7);
        params.input_on_change = true;
        params.pattern = crate::protocol::prelude::InputPattern::Idle;
        let opts = DarkAgesOptions {
            dialect: crate::games::darkages::Dialect::Implementation,
            ..DarkAgesOptions::default()
        };
        let mut b = ImplementationBot::new(params, opts);
        b.start(t0, &mut rec);
        b.handle_datagram(t0, &[7, 1, 42, 0, 0, 0, 1, 0, 0, 0], &mut rec);
        let mut now = t0;
        for _ in 0..30 {
            now += Duration::from_micros(16_667);
            b.handle_timeout(now, &mut rec);
        }
        let inputs = sent(&mut b).into_iter().filter(|p| p[0] == 1).count();
        assert_eq!(inputs, 1);
        assert_eq!(rec.inputs_sent, 1);
        assert_eq!(
            rec.send_lateness_us.len(),
            1,
            "lateness of the input sent only"
        );
    }

    fn handoff(host: &[u8], port: u16) -> Vec<u8> {
        let mut h = vec![3u8, 1, 2, 0, 0, 0, host.len() as u8];
        h.extend_from_slice(host);
        h.extend_from_slice(&port.to_le_bytes());
        h.push(64);
        h.extend_from_slice(&[b'f'; 64]);
        h
    }

    /// A handoff to an allowed address relinks there and reconnects; the reply ends it. One
    /// to an address nothing allows is not followed.
    #[test]
    fn handoffs_follow_allowed_addresses_only() {
        let t0 = Instant::now();
        let mut rec = Recorder::new();
        let opts = DarkAgesOptions {
            dialect: crate::games::darkages::Dialect::Implementation,
            handoff_allow: vec!["127.0.0.1".into()],
            ..DarkAgesOptions::default()
        };
        let mut b = ImplementationBot::new(BotParams::with_index(0, 7), opts);
        b.start(t0, &mut rec);
        b.handle_datagram(t0, &[7, 1, 42, 0, 0, 0, 1, 0, 0, 0], &mut rec);
        sent(&mut b);
        b.handle_datagram(t0, &handoff(b"10.9.9.9", 7001), &mut rec);
        assert_eq!(rec.events.get("handoff_refused.not_allowed"), 1);
        assert!(b.poll_relink().is_none());
        b.handle_datagram(t0, &handoff(b"127.0.0.1", 7001), &mut rec);
        let to = b.poll_relink().and_then(|r| r.to);
        assert_eq!(to, Some("127.0.0.1:7001".parse().unwrap()));
        let t1 = t0 + Duration::from_millis(20);
        b.handle_relinked(t1, &mut rec);
        assert_eq!(sent(&mut b)[0][0], codec::ty::CONNECT);
        b.handle_datagram(t1, &[7, 1, 43, 0, 0, 0, 2, 0, 0, 0], &mut rec);
        assert_eq!(rec.events.get("handoffs"), 1);
        assert_eq!(b.phase(), BotPhase::Connected);
        let h = rec.extra("handoff_us").expect("handoff_us samples");
        assert_eq!(h.len(), 1);
    }
}
