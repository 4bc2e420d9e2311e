//! The bot for the real ZergCity game server (`dialect: implementation`).
//!
//! Life: ENet connects and the server sends ServerStatus unasked; `start` sends Join (name,
//! no token). JoinAccept (player id 1-4, session token, tick) makes the bot Connected
//! (handshake time from `start`); JoinReject is a connect failure named after its reason
//! (`server_full`, `session_expired`, ...). In play the bot sends 30-byte Inputs on the input
//! grid (reliable, channel 0), a Heartbeat every `behaviour.ping_interval` (at most every
//! 5 s: the server drops a client that sent none for 10 s), and applies every StateUpdate
//! (tick, then entity creates, updates and destroys, LZ4 above 1024 bytes).
//!
//! # What it measures
//! - **RTT**: Heartbeat carries a timestamp the server echoes in its HeartbeatResponse; the
//!   bot pairs the echo with its send time (up to [`HEARTBEATS`] in flight). The server also
//!   sends HeartbeatResponses of its own about every second, with an echoed timestamp of 0:
//!   those are counted (`server_heartbeats`) and carry its tick, never an RTT. The bot's
//!   timestamps count milliseconds from its own start plus one (never 0, which would read as
//!   the server's own), unique per bot since heartbeats are at least 250 ms apart.
//! - **Upstream loss**: Heartbeats go on the unreliable channel (unless
//!   `reliable_heartbeats`), so one can be lost on the way; a Heartbeat without its echo
//!   within `heartbeat_timeout_ms` is lost (`heartbeat_lost`). The server answers every
//!   Heartbeat reliably, so each loss is the upstream one. Heartbeats in flight when the bot
//!   stops or drops its session on purpose are not counted (`heartbeats_abandoned`): their
//!   echo could never arrive.
//! - **Downstream loss**: not measurable. Everything the server sends is reliable on channel
//!   0 (ENet retransmits it), and a StateUpdate goes out only for ticks in which something
//!   changed, so a gap in its ticks is a quiet tick, not a loss.
//! - **Reconnection**: with `reconnect_share`, a chosen bot drops its ENet session once and
//!   sends Reconnect (token, name) on a new one; `reconnect_us` runs from the drop to the
//!   JoinAccept, which names the same player id (`reconnect_slot_restored`) or not
//!   (`reconnect_new_slot`); a JoinReject or no answer is `reconnect_failed`.
//! - **Resumption after a reconnect storm** (a scenario's `lifecycle.reconnect_storm`): the
//!   engine keeps the dropped bot's [`Bot::resume_state`] (player id and token, 17 bytes) and
//!   gives it to the bot that comes back, whose first message is then Reconnect instead of
//!   Join. A JoinAccept resumes the session; a JoinReject (`invalid_token`,
//!   `session_expired`) or a session the server closes unanswered is `resume_refused`: once
//!   the server has closed the refused session (it disconnects a refused peer), the bot asks
//!   for a new ENet session and joins anew, all within its `handshake_timeout`. (Reconnecting
//!   before the server's disconnect arrived raced it: the server's host could take the new
//!   connect for the old peer's.) The engine times both ways back from the drop.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::codec::{
    self, input, Decompressor, Input, Message, CHANNEL_RELIABLE, CHANNEL_UNRELIABLE, TOKEN_LEN,
};
use crate::games::zergcity::bot::Player;
use crate::games::zergcity::dialects::enet_closed::phase_after_close;
use crate::games::zergcity::ZergCityOptions;
use crate::protocol::prelude::input_grid::InputGrid;
use crate::protocol::prelude::timers::{earliest, Handshake, Periodic, Silence};
use crate::protocol::prelude::Recorder;
use crate::protocol::prelude::{Bot, BotParams, BotPhase, Relink, Transmit, MAX_TRACKED_ENTITIES};

/// Heartbeats in flight at once; a heartbeat due while this many wait is skipped.
pub const HEARTBEATS: usize = 8;
/// The longest gap between two heartbeats the bot allows itself (the server drops a client
/// silent for 10 s).
pub const MAX_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
/// The server's simulation rate (50 ms ticks).
pub const TICK_RATE: u64 = 20;

thread_local! {
    /// One decompression buffer per worker thread, not per bot.
    static DECOMPRESSOR: std::cell::RefCell<Decompressor> =
        std::cell::RefCell::new(Decompressor::default());
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Join (or Reconnect) sent.
    Joining,
    Playing,
    /// The session was dropped on purpose; waiting for the new one.
    Relinking,
    /// A resume was refused; waiting for the server to close the refused session (it does
    /// after a JoinReject), the handshake's deadline still running.
    Refused,
    /// The refused session is gone; waiting for a new one to join anew on (the deadline
    /// still runs).
    Rejoining,
}

#[derive(Debug, Clone, Copy)]
enum Out {
    Join,
    Reconnect,
    Heartbeat { ts: u64, seq: u32 },
    Input(Input),
}

pub struct ImplementationBot {
    me: Player,
    phase: BotPhase,
    stage: Stage,
    out: VecDeque<Out>,

    started_at: Option<Instant>,
    epoch: Option<Instant>,
    handshake: Handshake,
    silence: Silence,

    heartbeat: Periodic,
    heartbeat_seq: u32,
    /// Heartbeats awaiting their echo: (timestamp sent, when).
    in_flight: VecDeque<(u64, Instant)>,
    heartbeat_timeout: Duration,

    player: u8,
    token: Option<[u8; TOKEN_LEN]>,
    /// The server's tick and when it was heard, for the Input's tick.
    tick_at: Option<(u64, Instant)>,
    map: (u16, u16),
    last_state_tick: Option<u64>,
    entities: HashSet<u32>,

    grid: InputGrid,
    input_seq: u32,
    /// Cumulative action weights over the input types this server knows.
    actions: [(u8, f64); 7],

    reconnect_at: Option<Instant>,
    relink_requested: bool,
    relink_started: Option<Instant>,
    player_before: u8,
    reconnects_done: u32,
    /// Given a resume state: the first message is Reconnect, not Join.
    resuming: bool,
    /// How the resumption went ([`Bot::resumed`]).
    resumed: Option<bool>,
}

impl ImplementationBot {
    pub fn new(params: BotParams, opts: ZergCityOptions) -> Self {
        let interval = params
            .ping_interval
            .clamp(Duration::from_millis(250), MAX_HEARTBEAT_INTERVAL);
        let w = &opts.actions;
        let weights = [
            (input::PLACE_BUILDING, w.place_building),
            (input::SET_ZONE, w.designate_zone),
            (input::DEMOLISH_BUILDING, w.demolish),
            (input::SET_TAX_RATE, w.set_tribute_rate),
            (input::PLACE_ROAD, w.place_road),
            (input::PLACE_POWER_LINE, w.place_conduit),
            (input::PLACE_PIPE, w.place_pipe),
        ];
        let mut acc = 0.0;
        let actions = weights.map(|(k, w)| {
            acc += w.max(0.0);
            (k, acc)
        });
        Self {
            grid: InputGrid::new(params.input_period()),
            silence: Silence::new(params.server_silence_timeout),
            heartbeat_timeout: Duration::from_millis(opts.heartbeat_timeout_ms),
            me: Player::new(params, opts),
            phase: BotPhase::Idle,
            stage: Stage::Joining,
            out: VecDeque::with_capacity(8),
            started_at: None,
            epoch: None,
            handshake: Handshake::new(),
            heartbeat: Periodic::new(interval),
            heartbeat_seq: 0,
            in_flight: VecDeque::with_capacity(HEARTBEATS),
            player: 0,
            token: None,
            tick_at: None,
            map: (256, 256),
            last_state_tick: None,
            entities: HashSet::new(),
            input_seq: 0,
            actions,
            reconnect_at: None,
            relink_requested: false,
            relink_started: None,
            player_before: 0,
            reconnects_done: 0,
            resuming: false,
            resumed: None,
        }
    }

    /// The player id the server gave (0 before JoinAccept).
    pub fn player(&self) -> u8 {
        self.player
    }

    /// Entities the bot holds from the StateUpdates it applied.
    pub fn entity_count(&self) -> usize {
        self.entities.len()
    }

    /// Ask for a reconnection now (tests; scenarios use `reconnect_share`).
    pub fn request_reconnect(&mut self, now: Instant) {
        self.reconnect_at = Some(now);
    }

    fn close(&mut self, phase: BotPhase) {
        self.phase = phase;
        self.out.clear();
        self.handshake.end();
        self.heartbeat.stop();
        self.in_flight.clear();
    }

    fn server_tick(&self, now: Instant) -> u64 {
        self.tick_at.map_or(0, |(t, at)| {
            t + (now.saturating_duration_since(at).as_millis() as u64) * TICK_RATE / 1000
        })
    }

    // ---- receiving -------------------------------------------------------------------

    fn on_message(&mut self, now: Instant, m: Message<'_>, rec: &mut Recorder) {
        match m {
            Message::ServerStatus {
                width,
                height,
                tick,
                ..
            } => {
                rec.event("server_status");
                if width > 0 && height > 0 {
                    self.map = (width, height);
                }
                self.tick_at = Some((tick, now));
            }
            Message::JoinAccept {
                player,
                token,
                tick,
            } => self.on_join_accept(now, player, token, tick, rec),
            Message::JoinReject { reason } => {
                let why = codec::join_reject_name(reason);
                if self.resuming && self.stage == Stage::Joining {
                    rec.event(why);
                    self.refuse_resume(rec);
                } else if self.relink_started.take().is_some() {
                    rec.event("reconnect_failed");
                    rec.event(why);
                    self.close(BotPhase::Closed);
                } else if self.phase == BotPhase::Connecting {
                    rec.connect_failures.add(why, 1);
                    self.close(BotPhase::Failed);
                } else {
                    rec.event("join_reject_in_play");
                }
            }
            Message::Kick => {
                rec.event("kicked");
                self.close(BotPhase::Closed);
            }
            Message::HeartbeatResponse {
                client_ts, tick, ..
            } => {
                self.tick_at = Some((tick, now));
                if client_ts == 0 {
                    rec.event("server_heartbeats");
                } else if let Some(i) = self.in_flight.iter().position(|&(ts, _)| ts == client_ts) {
                    // Older heartbeats still waiting stay: an unreliable one may be overtaken.
                    if let Some((_, sent)) = self.in_flight.remove(i) {
                        rec.record_rtt(now.saturating_duration_since(sent).as_micros() as u64);
                        rec.loss_up.add(1, 1);
                    }
                } else {
                    rec.event("heartbeat_echo_unmatched");
                }
            }
            Message::PlayerList(list) => {
                rec.event("player_list");
                if self.player != 0 && !list.players().any(|p| p.id == self.player) {
                    rec.event("player_list_without_self");
                }
            }
            Message::StateUpdate {
                compressed,
                wire_len,
                update,
            } => {
                if self.phase != BotPhase::Connected {
                    rec.event("state_update_before_join");
                }
                if self.last_state_tick.is_some_and(|t| update.tick <= t) {
                    // The reliable channel keeps order: a repeat means a server that sent it twice.
                    rec.event("state_update_stale");
                    return;
                }
                self.last_state_tick = Some(update.tick);
                if compressed {
                    rec.event("state_update_compressed");
                }
                rec.record_extra("state_update_bytes", wire_len as u64);
                for d in update.deltas() {
                    match d.kind {
                        codec::DELTA_CREATE => {
                            if self.entities.len() < MAX_TRACKED_ENTITIES {
                                self.entities.insert(d.entity);
                            } else if !self.entities.contains(&d.entity) {
                                rec.event("entity_refused_table_full");
                            }
                        }
                        codec::DELTA_UPDATE => {
                            if !self.entities.contains(&d.entity) {
                                rec.event("state_update_unknown_entity");
                            }
                        }
                        _ => {
                            self.entities.remove(&d.entity);
                        }
                    }
                }
                rec.snapshots_applied += 1;
                // No lost snapshot is counted here: the rate reads what arrived.
                rec.snapshots_sent += 1;
            }
            Message::Rejection { .. } => rec.event("input_rejected"),
            Message::Chat { .. } => rec.event("chat_received"),
            Message::Event => rec.event("game_event"),
            Message::Other(_) => rec.event("other_message"),
        }
    }

    fn on_join_accept(
        &mut self,
        now: Instant,
        player: u8,
        token: [u8; TOKEN_LEN],
        tick: u64,
        rec: &mut Recorder,
    ) {
        if self.stage != Stage::Joining {
            rec.event("join_accept_unexpected");
            return;
        }
        self.handshake.end();
        self.player = player;
        self.token = Some(token);
        self.tick_at = Some((tick, now));
        self.stage = Stage::Playing;
        self.silence.arm(now);
        if let Some(start) = self.relink_started.take() {
            rec.record_extra(
                "reconnect_us",
                now.saturating_duration_since(start).as_micros() as u64,
            );
            rec.event(if player == self.player_before {
                "reconnect_slot_restored"
            } else {
                "reconnect_new_slot"
            });
        } else {
            if std::mem::take(&mut self.resuming) {
                let same = player == self.player_before;
                self.resumed = Some(same);
                if !same {
                    rec.event("resume_new_slot");
                }
            }
            if let Some(s) = self.started_at {
                rec.record_handshake(now.saturating_duration_since(s).as_micros() as u64);
            }
            self.phase = BotPhase::Connected;
            self.plan_reconnect(now);
        }
        self.grid.begin(now, &self.me.params);
    }

    /// A bot chosen by its seed drops once, `reconnect_after_ms` (plus up to as much again)
    /// after joining.
    fn plan_reconnect(&mut self, now: Instant) {
        if self.reconnects_done > 0 || self.me.opts.reconnect_share <= 0.0 {
            return;
        }
        let coin: f64 = ChaCha8Rng::seed_from_u64(self.me.params.seed ^ 0x7e_c0).random();
        if coin < self.me.opts.reconnect_share {
            let after = Duration::from_millis(self.me.opts.reconnect_after_ms);
            self.reconnect_at = Some(now + after + after.mul_f64(self.me.rng.random::<f64>()));
        }
    }

    // ---- sending ---------------------------------------------------------------------

    fn send_heartbeat_if_due(&mut self, now: Instant, rec: &mut Recorder) {
        // Echoes overdue are lost.
        while let Some(&(_, sent)) = self.in_flight.front() {
            if now.saturating_duration_since(sent) < self.heartbeat_timeout {
                break;
            }
            self.in_flight.pop_front();
            rec.loss_up.add(1, 0);
            rec.event("heartbeat_lost");
        }
        if !self.heartbeat.fire(now) {
            return;
        }
        if self.in_flight.len() >= HEARTBEATS {
            rec.event("heartbeat_skipped");
            return;
        }
        let epoch = *self.epoch.get_or_insert(now);
        let ts = now.saturating_duration_since(epoch).as_millis() as u64 + 1;
        if self.in_flight.back().is_some_and(|&(t, _)| t == ts) {
            return;
        }
        self.heartbeat_seq = self.heartbeat_seq.wrapping_add(1);
        self.in_flight.push_back((ts, now));
        self.out.push_back(Out::Heartbeat {
            ts,
            seq: self.heartbeat_seq,
        });
    }

    fn send_inputs_due(&mut self, now: Instant, rec: &mut Recorder) {
        while let Some(due) = self.grid.take_due(now, rec) {
            rec.record_lateness(now.saturating_duration_since(due).as_micros() as u64);
            let total = self.actions[self.actions.len() - 1].1;
            let pick = self.me.rng.random::<f64>() * total;
            let kind = self
                .actions
                .iter()
                .find(|(_, acc)| pick < *acc)
                .map_or(input::PLACE_BUILDING, |(k, _)| *k);
            let (w, h) = (i32::from(self.map.0), i32::from(self.map.1));
            let x = self.me.rng.random_range(0..w.max(1));
            let y = self.me.rng.random_range(0..h.max(1));
            let (param1, value) = match kind {
                input::PLACE_BUILDING => (self.me.rng.random_range(1..=8), 0),
                input::SET_ZONE => (self.me.rng.random_range(1..=3), 0),
                input::SET_TAX_RATE => (0, self.me.rng.random_range(0..=20)),
                _ => (0, 0),
            };
            self.input_seq = self.input_seq.wrapping_add(1);
            self.out.push_back(Out::Input(Input {
                tick: self.server_tick(now),
                player: self.player,
                kind,
                sequence: self.input_seq,
                x: x as i16,
                y: y as i16,
                param1,
                param2: 0,
                value,
            }));
            rec.inputs_sent += 1;
        }
    }

    /// The server would not resume the session (a JoinReject to the Reconnect): wait for it
    /// to close the refused session, then join anew on a new one.
    fn refuse_resume(&mut self, rec: &mut Recorder) {
        rec.event("resume_refused");
        self.resuming = false;
        self.resumed = Some(false);
        self.stage = Stage::Refused;
        self.out.clear();
        rec.events
            .add("heartbeats_abandoned", self.in_flight.len() as u64);
        self.in_flight.clear();
    }

    fn start_relink(&mut self, now: Instant, rec: &mut Recorder) {
        rec.event("reconnect_attempts");
        self.reconnects_done += 1;
        self.relink_requested = true;
        self.relink_started = Some(now);
        self.player_before = self.player;
        self.stage = Stage::Relinking;
        self.reconnect_at = None;
        self.out.clear();
        // Heartbeats in flight on the dropped session can never be answered: not loss.
        rec.events
            .add("heartbeats_abandoned", self.in_flight.len() as u64);
        self.in_flight.clear();
    }

    fn encode_out(&self, o: &Out, buf: &mut [u8]) -> Result<Transmit, codec::EncodeError> {
        let reliable = |len| Transmit {
            len,
            channel: CHANNEL_RELIABLE,
            reliable: true,
        };
        Ok(match o {
            Out::Join => reliable(codec::encode_join(buf, self.me.name.as_bytes(), None)?),
            Out::Reconnect => {
                let token = self.token.unwrap_or([0; TOKEN_LEN]);
                reliable(codec::encode_reconnect(
                    buf,
                    &token,
                    self.me.name.as_bytes(),
                )?)
            }
            Out::Input(i) => reliable(i.encode(buf)?),
            Out::Heartbeat { ts, seq } => {
                let len = codec::encode_heartbeat(buf, *ts, *seq)?;
                if self.me.opts.reliable_heartbeats {
                    reliable(len)
                } else {
                    Transmit {
                        len,
                        channel: CHANNEL_UNRELIABLE,
                        reliable: false,
                    }
                }
            }
        })
    }
}

impl Bot for ImplementationBot {
    fn start(&mut self, now: Instant, _rec: &mut Recorder) {
        self.phase = BotPhase::Connecting;
        self.stage = Stage::Joining;
        self.started_at = Some(now);
        self.epoch = Some(now);
        // ENet delivers Join or drops the session: no resends, only the deadline.
        self.handshake
            .begin(now, None, self.me.params.handshake_timeout);
        self.silence.arm(now);
        self.out.push_back(if self.resuming {
            Out::Reconnect
        } else {
            Out::Join
        });
        // The server counts a client's silence from its connect, Join or not.
        self.heartbeat.start_at(now);
    }

    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        if !self.phase.in_session()
            || matches!(
                self.stage,
                Stage::Relinking | Stage::Refused | Stage::Rejoining
            )
        {
            rec.event("datagram_outside_session");
            return;
        }
        self.silence.heard(now);
        let limit = self.me.opts.max_decompressed_bytes;
        DECOMPRESSOR.with(|cell| {
            let Ok(mut dec) = cell.try_borrow_mut() else {
                rec.event("decompressor_busy");
                return;
            };
            dec.set_limit(limit);
            let mut at = 0;
            while at < data.len() {
                match codec::decode(&data[at..], &mut dec) {
                    Ok((m, used)) => {
                        at += used;
                        self.on_message(now, m, rec);
                    }
                    Err(e) => {
                        rec.decode_error(e.message, e.reason);
                        if crate::games::zergcity::dialects::benchmark::codec::fits(&data[at..]) {
                            rec.event("dialect_hint.benchmark");
                        } else if data[at..].starts_with(b"ZCNT") {
                            rec.event("dialect_hint.spec");
                        }
                        break;
                    }
                }
                if !matches!(self.phase, BotPhase::Connecting | BotPhase::Connected) {
                    break;
                }
            }
            dec.shrink();
        });
    }

    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting | BotPhase::Connected => {
                if self.stage == Stage::Relinking {
                    return;
                }
                if matches!(self.stage, Stage::Refused | Stage::Rejoining) {
                    if self.handshake.timed_out(now) {
                        rec.connect_failures.add("timeout", 1);
                        self.close(BotPhase::Failed);
                    }
                    return;
                }
                if self.handshake.timed_out(now) {
                    if self.relink_started.take().is_some() {
                        rec.event("reconnect_failed");
                        self.close(BotPhase::Closed);
                    } else {
                        rec.connect_failures.add("timeout", 1);
                        self.close(BotPhase::Failed);
                    }
                    return;
                }
                if self.silence.expired(now) {
                    rec.event("server_silence_timeout");
                    self.close(BotPhase::Closed);
                    return;
                }
                if self.reconnect_at.is_some_and(|t| now >= t) && self.stage == Stage::Playing {
                    self.start_relink(now, rec);
                    return;
                }
                self.send_heartbeat_if_due(now, rec);
                if self.stage == Stage::Playing {
                    self.send_inputs_due(now, rec);
                }
            }
            _ => {}
        }
    }

    fn stop(&mut self, _now: Instant, rec: &mut Recorder) {
        if self.relink_started.is_some() {
            rec.event("reconnect_unfinished");
        }
        // The server registers no Disconnect message (it would log it as unknown): the
        // engine's ENet disconnect is the goodbye.
        self.close(if self.phase == BotPhase::Idle {
            BotPhase::Closed
        } else {
            match self.phase {
                BotPhase::Failed => BotPhase::Failed,
                _ => BotPhase::Closed,
            }
        });
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(o) = self.out.pop_front() {
            if let Ok(t) = self.encode_out(&o, buf) {
                return Some(t);
            }
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            BotPhase::Connecting if matches!(self.stage, Stage::Refused | Stage::Rejoining) => {
                self.handshake.next_deadline()
            }
            BotPhase::Connecting | BotPhase::Connected if self.stage != Stage::Relinking => {
                let playing = self.stage == Stage::Playing;
                earliest([
                    self.handshake.next_deadline(),
                    self.silence.deadline(),
                    self.heartbeat.next(),
                    self.in_flight
                        .front()
                        .map(|&(_, sent)| sent + self.heartbeat_timeout),
                    playing.then(|| self.grid.next_due()).flatten(),
                    playing.then_some(self.reconnect_at).flatten(),
                ])
            }
            _ => None,
        }
    }

    fn phase(&self) -> BotPhase {
        self.phase
    }

    fn waiting_for(&self) -> Option<&'static str> {
        (self.phase == BotPhase::Connecting).then_some("JoinAccept")
    }

    fn resume_state(&self) -> Option<Vec<u8>> {
        let token = self.token.filter(|_| self.player != 0)?;
        let mut v = Vec::with_capacity(1 + TOKEN_LEN);
        v.push(self.player);
        v.extend_from_slice(&token);
        Some(v)
    }

    fn resume_from(&mut self, state: &[u8]) {
        // Anything but what resume_state wrote: join as a new player.
        if let [player, token @ ..] = state {
            if let Ok(token) = <[u8; TOKEN_LEN]>::try_from(token) {
                self.player_before = *player;
                self.token = Some(token);
                self.resuming = true;
            }
        }
    }

    fn resumed(&self) -> Option<bool> {
        self.resumed
    }

    fn handle_transport_closed(&mut self, _now: Instant, rec: &mut Recorder) {
        match self.phase {
            // The refused session is gone: join anew on a new one.
            BotPhase::Connecting if self.stage == Stage::Refused => {
                self.stage = Stage::Rejoining;
                self.relink_requested = true;
            }
            BotPhase::Connecting if self.resuming && self.stage == Stage::Joining => {
                rec.event("resume_closed_unanswered");
                self.refuse_resume(rec);
                self.stage = Stage::Rejoining;
                self.relink_requested = true;
            }
            phase => {
                if let Some(phase) = phase_after_close(phase, rec) {
                    self.close(phase);
                }
            }
        }
    }

    fn poll_relink(&mut self) -> Option<Relink> {
        std::mem::take(&mut self.relink_requested).then_some(Relink { to: None })
    }

    fn handle_relinked(&mut self, now: Instant, _rec: &mut Recorder) {
        if self.stage == Stage::Rejoining && self.phase == BotPhase::Connecting {
            // Join anew, with a handshake deadline of its own.
            self.stage = Stage::Joining;
            self.handshake
                .begin(now, None, self.me.params.handshake_timeout);
            self.silence.arm(now);
            self.silence.heard(now);
            self.out.push_back(Out::Join);
            self.heartbeat.start_at(now);
            return;
        }
        if self.stage != Stage::Relinking || self.phase != BotPhase::Connected {
            return;
        }
        self.stage = Stage::Joining;
        self.handshake
            .begin(now, None, self.me.params.handshake_timeout);
        self.silence.arm(now);
        self.silence.heard(now);
        self.out.push_back(Out::Reconnect);
        self.heartbeat.start_at(now);
    }
}

impl std::fmt::Debug for ImplementationBot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImplementationBot")
            .field("index", &self.me.params.index)
            .field("phase", &self.phase)
            .field("stage", &self.stage)
            .field("player", &self.player)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot() -> (ImplementationBot, Recorder, Instant) {
        let mut p = BotParams::with_index(3, 7);
        p.input_rate_hz = 10.0;
        p.ping_interval = Duration::from_millis(500);
        let opts = ZergCityOptions {
            dialect: crate::games::zergcity::Dialect::Implementation,
            heartbeat_timeout_ms: 1000,
            ..ZergCityOptions::default()
        };
        (
            ImplementationBot::new(p, opts),
            Recorder::new(),
            Instant::now(),
        )
    }

    /// Everything the bot wants sent: (type, channel, reliable, payload).
    fn sent(b: &mut ImplementationBot) -> Vec<(u16, u8, bool, Vec<u8>)> {
        let mut buf = [0u8; 1500];
        let mut v = Vec::new();
        while let Some(t) = b.poll_transmit(&mut buf) {
            let h = codec::Header::parse(&buf[..t.len]).unwrap();
            assert_eq!(h.version, 1);
            assert_eq!(usize::from(h.len) + codec::HEADER_LEN, t.len);
            v.push((h.ty, t.channel, t.reliable, buf[5..t.len].to_vec()));
        }
        v
    }

    fn deliver(
        b: &mut ImplementationBot,
        now: Instant,
        rec: &mut Recorder,
        enc: impl FnOnce(&mut [u8]) -> Result<usize, codec::EncodeError>,
    ) {
        let mut buf = vec![0u8; 70_000];
        let n = enc(&mut buf).unwrap();
        b.handle_datagram(now, &buf[..n], rec);
    }

    #[test]
    fn join_accept_starts_play_and_inputs_carry_the_player_id() {
        let (mut b, mut rec, t0) = bot();
        b.start(t0, &mut rec);
        let out = sent(&mut b);
        assert_eq!(out[0].0, codec::ty::JOIN);
        assert!(out[0].2, "Join is reliable");
        assert_eq!(&out[0].3[..4], &5u32.to_le_bytes(), "name string: bot-3");
        deliver(&mut b, t0, &mut rec, |x| {
            codec::encode_server_status(x, 1, 4, 0, 100, b"z")
        });
        deliver(&mut b, t0, &mut rec, |x| {
            codec::encode_join_accept(x, 2, &[9; 16], 100)
        });
        assert_eq!(b.phase(), BotPhase::Connected);
        assert_eq!(b.player(), 2);
        assert_eq!(rec.connects_ok, 1);
        let t1 = t0 + Duration::from_millis(1000);
        b.handle_timeout(t1, &mut rec);
        let inputs: Vec<_> = sent(&mut b)
            .into_iter()
            .filter(|o| o.0 == codec::ty::INPUT)
            .collect();
        assert!(!inputs.is_empty());
        for (_, ch, rel, p) in &inputs {
            assert_eq!((*ch, *rel), (CHANNEL_RELIABLE, true));
            assert_eq!(p.len(), codec::INPUT_LEN);
            assert_eq!(p[8], 2, "the player id JoinAccept gave");
            assert!((1..codec::input::COUNT).contains(&p[9]));
            let tick = u64::from_le_bytes(p[..8].try_into().unwrap());
            assert!((100..=121).contains(&tick), "estimated server tick {tick}");
        }
    }

    #[test]
    fn a_join_reject_is_a_failure_named_after_its_reason() {
        let (mut b, mut rec, t0) = bot();
        b.start(t0, &mut rec);
        deliver(&mut b, t0, &mut rec, |x| {
            codec::encode_join_reject(x, 1, b"full")
        });
        assert_eq!(b.phase(), BotPhase::Failed);
        assert_eq!(rec.connect_failures.get("server_full"), 1);
    }

    #[test]
    fn heartbeats_are_paired_by_their_echo_and_unanswered_ones_are_lost() {
        let (mut b, mut rec, t0) = bot();
        b.start(t0, &mut rec);
        deliver(&mut b, t0, &mut rec, |x| {
            codec::encode_join_accept(x, 1, &[9; 16], 0)
        });
        b.handle_timeout(t0, &mut rec);
        let hb: Vec<_> = sent(&mut b)
            .into_iter()
            .filter(|o| o.0 == codec::ty::HEARTBEAT)
            .collect();
        assert_eq!(hb.len(), 1);
        let (_, ch, rel, p) = &hb[0];
        assert_eq!((*ch, *rel), (CHANNEL_UNRELIABLE, false));
        let ts = u64::from_le_bytes(p[..8].try_into().unwrap());
        assert_ne!(ts, 0, "0 is the server's own heartbeats' echo");
        // The server's own heartbeat: counted, never an RTT.
        deliver(&mut b, t0 + Duration::from_millis(3), &mut rec, |x| {
            codec::encode_heartbeat_response(x, 0, 1, 2)
        });
        assert_eq!(rec.rtt_us.len(), 0);
        assert_eq!(rec.events.get("server_heartbeats"), 1);
        // Its echo, 40 ms later.
        deliver(&mut b, t0 + Duration::from_millis(40), &mut rec, |x| {
            codec::encode_heartbeat_response(x, ts, 1, 2)
        });
        assert_eq!(rec.rtt_us.len(), 1);
        assert!(rec.rtt_us.min() >= 39_900, "{}", rec.rtt_us.min());
        assert_eq!((rec.loss_up.expected, rec.loss_up.received), (1, 1));
        // The next one goes unanswered: lost after heartbeat_timeout_ms.
        let t1 = t0 + Duration::from_millis(500);
        b.handle_timeout(t1, &mut rec);
        assert!(sent(&mut b).iter().any(|o| o.0 == codec::ty::HEARTBEAT));
        b.handle_timeout(t1 + Duration::from_millis(999), &mut rec);
        assert_eq!(rec.events.get("heartbeat_lost"), 0);
        b.handle_timeout(t1 + Duration::from_millis(1000), &mut rec);
        assert_eq!(rec.events.get("heartbeat_lost"), 1);
        assert_eq!((rec.loss_up.expected, rec.loss_up.received), (2, 1));
    }

    #[test]
    fn a_reconnection_sends_the_token_and_times_the_join_accept() {
        let (mut b, mut rec, t0) = bot();
        b.start(t0, &mut rec);
        deliver(&mut b, t0, &mut rec, |x| {
            codec::encode_join_accept(x, 3, &[7; 16], 0)
        });
        sent(&mut b);
        b.request_reconnect(t0);
        b.handle_timeout(t0, &mut rec);
        assert_eq!(b.poll_relink(), Some(Relink { to: None }));
        let t1 = t0 + Duration::from_millis(5);
        b.handle_relinked(t1, &mut rec);
        let out = sent(&mut b);
        let rc = out.iter().find(|o| o.0 == codec::ty::RECONNECT).unwrap();
        assert_eq!(&rc.3[..16], &[7; 16]);
        deliver(&mut b, t1 + Duration::from_millis(2), &mut rec, |x| {
            codec::encode_join_accept(x, 3, &[7; 16], 40)
        });
        assert_eq!(rec.events.get("reconnect_slot_restored"), 1);
        assert_eq!(b.phase(), BotPhase::Connected);
        assert_eq!(
            rec.connects_ok, 1,
            "a reconnection is not a second handshake"
        );
    }

    /// A storm victim: the dropped bot's resume state (player id and token) makes the next
    /// bot's first message a Reconnect; the JoinAccept resumes it.
    #[test]
    fn a_resumed_bot_sends_reconnect_with_the_dropped_bots_token() {
        let (mut old, mut rec, t0) = bot();
        assert_eq!(
            old.resume_state(),
            None,
            "nothing to resume before JoinAccept"
        );
        old.start(t0, &mut rec);
        deliver(&mut old, t0, &mut rec, |x| {
            codec::encode_join_accept(x, 3, &[7; 16], 0)
        });
        let state = old.resume_state().unwrap();
        assert_eq!(state.len(), 17);
        let (mut b, mut rec, t1) = bot();
        b.resume_from(&state);
        b.start(t1, &mut rec);
        let out = sent(&mut b);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, codec::ty::RECONNECT);
        assert_eq!(&out[0].3[..16], &[7; 16]);
        assert_eq!(b.resumed(), None);
        deliver(&mut b, t1, &mut rec, |x| {
            codec::encode_join_accept(x, 3, &[7; 16], 40)
        });
        assert_eq!(b.phase(), BotPhase::Connected);
        assert_eq!(b.resumed(), Some(true));
        assert_eq!(b.player(), 3);
    }

    /// A refused token: counted, a new session asked for, a Join on it; in play as a new
    /// player, `resumed` false.
    #[test]
    fn a_refused_resume_rejoins_on_a_new_session() {
        let (mut b, mut rec, t0) = bot();
        let mut state = vec![2u8];
        state.extend_from_slice(&[5; 16]);
        b.resume_from(&state);
        b.start(t0, &mut rec);
        assert_eq!(sent(&mut b)[0].0, codec::ty::RECONNECT);
        deliver(&mut b, t0, &mut rec, |x| {
            codec::encode_join_reject(x, 4, b"Session not found")
        });
        assert_eq!(rec.events.get("resume_refused"), 1);
        assert_eq!(rec.events.get("invalid_token"), 1);
        assert_eq!(b.phase(), BotPhase::Connecting);
        assert_eq!(
            b.poll_relink(),
            None,
            "not before the server closed the refused session"
        );
        b.handle_transport_closed(t0, &mut rec);
        assert_eq!(b.phase(), BotPhase::Connecting);
        assert_eq!(b.poll_relink(), Some(Relink { to: None }));
        let t1 = t0 + Duration::from_millis(3);
        b.handle_relinked(t1, &mut rec);
        let out = sent(&mut b);
        assert_eq!(out[0].0, codec::ty::JOIN);
        deliver(&mut b, t1, &mut rec, |x| {
            codec::encode_join_accept(x, 1, &[8; 16], 40)
        });
        assert_eq!(b.phase(), BotPhase::Connected);
        assert_eq!(b.resumed(), Some(false));
        assert_eq!(rec.connect_failures.total(), 0);
    }

    /// A refused bot whose new session never comes up fails at its handshake deadline.
    #[test]
    fn a_refused_resume_without_a_new_session_times_out() {
        let (mut b, mut rec, t0) = bot();
        let mut state = vec![2u8];
        state.extend_from_slice(&[5; 16]);
        b.resume_from(&state);
        b.start(t0, &mut rec);
        deliver(&mut b, t0, &mut rec, |x| {
            codec::encode_join_reject(x, 5, b"x")
        });
        let deadline = b.poll_timeout().expect("the handshake deadline runs");
        b.handle_timeout(deadline, &mut rec);
        assert_eq!(b.phase(), BotPhase::Failed);
        assert_eq!(rec.connect_failures.get("timeout"), 1);
    }

    #[test]
    fn state_updates_are_applied_in_tick_order() {
        let (mut b, mut rec, t0) = bot();
        b.start(t0, &mut rec);
        deliver(&mut b, t0, &mut rec, |x| {
            codec::encode_join_accept(x, 1, &[1; 16], 0)
        });
        let body = |tick: u64, kind: u8| {
            let mut v = Vec::new();
            v.extend_from_slice(&tick.to_le_bytes());
            v.extend_from_slice(&1u32.to_le_bytes());
            v.extend_from_slice(&42u32.to_le_bytes());
            v.push(kind);
            v.extend_from_slice(&2000u32.to_le_bytes());
            v.extend(std::iter::repeat_n(1u8, 2000));
            v
        };
        let b5 = body(5, codec::DELTA_CREATE);
        deliver(&mut b, t0, &mut rec, |x| codec::encode_state_update(x, &b5));
        assert_eq!(b.entity_count(), 1);
        assert_eq!(rec.events.get("state_update_compressed"), 1);
        deliver(&mut b, t0, &mut rec, |x| codec::encode_state_update(x, &b5));
        assert_eq!(rec.events.get("state_update_stale"), 1);
        let b6 = body(6, codec::DELTA_DESTROY);
        deliver(&mut b, t0, &mut rec, |x| codec::encode_state_update(x, &b6));
        assert_eq!(b.entity_count(), 0);
        assert_eq!(rec.snapshots_applied, 2);
        assert_eq!(rec.decode_errors.total(), 0);
    }

    #[test]
    fn spec_bytes_are_a_decode_error_with_a_dialect_hint() {
        let (mut b, mut rec, t0) = bot();
        b.start(t0, &mut rec);
        b.handle_datagram(
            t0,
            b"ZCNT\x01\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
            &mut rec,
        );
        assert_eq!(rec.events.get("dialect_hint.spec"), 1);
        assert_eq!(rec.decode_errors.total(), 1);
    }
}
