//! The City bot: a sans-IO client state machine over ENet packet payloads.
//!
//! Life: `start` (ENet is connected) sends ClientHello; ServerHello makes it Connected
//! (handshake time recorded), a Disconnect before that is a connect failure by reason
//! (`version_mismatch`, `server_full`, ...). Then the content transfer: the manifest, a
//! ContentRequest for the assets the bot lacks (always sent, empty when it lacks nothing, so
//! the server knows it may proceed), chunks checked against size and FNV-1a checksum as they
//! stream, ContentComplete (`content_time_us`). FullState gives the map and the entities; from
//! there the bot plays: PlayerInput on its fixed grid (unreliable), DeltaState applied every
//! tick, EntitySpawn/Despawn, chat, pings. Five seconds of server silence end the session
//! (Disconnect Timeout is sent, `server_silence_timeout` counted).
//!
//! # Prediction and reconciliation (city.md "Client-Side Prediction")
//! Every input is applied locally at once with the server's movement model
//! ([`super::step`], the speed from the entity's Movement component, the map bounds from
//! FullState) and stored in a 128-entry circular buffer with the position it led to (the
//! shared [`shared::Predictor`], with City's step as its [`Motion`]). Each
//! DeltaState names `last_acked_input` A and carries the server's position P of the bot's
//! entity: the bot compares P with its prediction after input A, records the distance in
//! `prediction_error` (milli-tiles, once per new A), and when it exceeds
//! `prediction_error_threshold` it snaps to P and replays the inputs after A (`corrections`).
//! The server moves a player only by its inputs (one tick of movement each), so with no loss
//! and no interference the error is exactly 0 however long the delay: delay is what prediction
//! hides. Lost inputs, server-side moves and map edges the bot does not know make it nonzero.
//!
//! # Prediction without acks (implementation dialect)
//! The variant sends no InputAck and its DeltaState no `last_acked_input`; it moves players
//! with its own grid mover at 60 Hz, and each DeltaState record carries that whole mover
//! (`pos, vel, is_moving, grid_pos, move_target, input_direction`). The bot predicts with
//! the same mover, bit for bit ([`Predictor`], see [`super::dialects::implementation::predict`]): every record
//! becomes the base, and the inputs sent since are replayed from it, mapped to server ticks
//! by a lag measured from the record's `input_direction`, whatever the input rate. Each
//! record is compared with the prediction for its tick: the distance is `prediction_error`
//! (milli-tiles, once per record). What the record itself explains is not a correction: an
//! input that landed a tick earlier or later than guessed (`prediction_timing_slips`), or a
//! move the server refused onto an impassable tile the bot cannot know (`move_refused`, once
//! per refusal; the tile is learnt). Anything else, such as a server-side move or a lost
//! input, counts in `corrections`. The bot's predicted position is the mover once the
//! server has applied every input sent.
//!
//! # Interpolation
//! Remote entities keep their last 10 samples (tick, position). At every frame (the input
//! grid) the bot renders them `interpolation_delay_ms` behind the newest server tick it has
//! (advanced by local time since it arrived), interpolating between the two samples around
//! that time. When the render time passes an entity's newest sample while the entity was
//! moving, the bot would have to extrapolate: one `extrapolation_gaps` per such episode. A
//! resting entity is not a gap (the server sends only changes).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use super::codec::{
    self, AssetEntry, DeltaState, DisconnectReason, EntityData, EntityUpdate, Fnv64, FullState,
    Message, MsgType, PlayerInput, Vec2f, Vec2i, BUTTON_INTERACT, MAX_PACKET_SIZE,
    MAX_UNRELIABLE_PACKET, TICK_INTERVAL,
};
use super::dialects::implementation::predict::{Mover, Predictor, Verdict};
use super::{step, ChatChannel, CityOptions, Dialect};
use crate::protocol::prelude::acks::PendingAcks;
use crate::protocol::prelude::input_grid::InputGrid;
use crate::protocol::prelude::ping::OneInFlight;
use crate::protocol::prelude::predict::{self as shared, Motion, Rebase};
use crate::protocol::prelude::seqwindow::{SeqOutcome, TickStep};
use crate::protocol::prelude::tail::SnapshotArrivals;
use crate::protocol::prelude::timers::{earliest, Handshake, Periodic, Silence};
use crate::protocol::prelude::Recorder;
use crate::protocol::prelude::MAX_TRACKED_ENTITIES;
use crate::protocol::prelude::{Bot, BotParams, BotPhase, PatternState, Phase, Transmit};

mod content;
mod encode;
mod interp;
mod own;
mod rng;
mod world;

pub use content::{AssetOutcome, AssetState, ContentProgress};
use interp::Remote;
use own::CityMotion;

/// city.md's input buffer size.
pub const INPUT_BUFFER: usize = 128;
/// Samples kept per remote entity (city.md's InterpolationBuffer).
pub const INTERP_SAMPLES: usize = 10;
/// ContentRequest ids per message (8 bytes each; fits a packet with room to spare).
const REQUEST_IDS_PER_MESSAGE: usize = 160;
/// Own chat messages remembered for the echo latency.
const CHAT_REMEMBERED: usize = 16;

/// Inputs awaiting acknowledgement at once, reserved when the bot is made: every input stays
/// for the whole wait, so the queue holds one wait's worth of the input period, plus one, and
/// a sixteenth for inputs a late timer sent closer together (128 at 60 Hz and 2 s). Grown by
/// doubling instead, it left its smaller blocks behind on the way.
fn ack_capacity(wait: Duration, period: Duration) -> usize {
    let per_wait = (wait.as_nanos() / period.as_nanos().max(1)).min(1 << 16) as usize;
    per_wait + 1 + per_wait / 16
}

/// Where a connected session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// ClientHello sent, waiting for ServerHello.
    Hello,
    /// Downloading content (spec dialect).
    Content,
    /// Content done; waiting for FullState (spec) or the bot's own EntitySpawn
    /// (implementation dialect).
    AwaitWorld,
    /// In the game loop.
    Playing,
}

#[derive(Debug, Clone)]
enum Out {
    Hello,
    Disconnect(DisconnectReason),
    Ping,
    Pong,
    /// `request_ids[from..to]`.
    ContentRequest {
        from: usize,
        to: usize,
    },
    Input(PlayerInput),
    Chat(u32),
}

impl Out {
    fn msg_type(&self) -> MsgType {
        match self {
            Out::Hello => MsgType::ClientHello,
            Out::Disconnect(_) => MsgType::Disconnect,
            Out::Ping => MsgType::Ping,
            Out::Pong => MsgType::Pong,
            Out::ContentRequest { .. } => MsgType::ContentRequest,
            Out::Input(_) => MsgType::PlayerInput,
            Out::Chat(_) => MsgType::ChatMessage,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct OwnEntity {
    id: u32,
    /// Predicted current position.
    pos: Vec2f,
    speed: f32,
}

pub struct CityBot {
    params: BotParams,
    opts: CityOptions,
    name: String,
    rng: rng::BotRng,
    pattern: PatternState,
    phase: BotPhase,
    stage: Stage,
    out: VecDeque<Out>,
    seq_out: u16,

    started_at: Option<Instant>,
    /// ENet delivers the hello or drops the session: a deadline, no resends.
    handshake: Handshake,
    hello_at: Option<Instant>,
    silence: Silence,
    session_id: u32,
    player_entity: u32,

    // Content.
    manifest_seen: bool,
    assets: Vec<AssetState>,
    request_ids: Vec<u64>,
    content_bytes: u64,
    content_complete: bool,

    // World.
    bounds: Option<(f32, f32)>,
    ticks: TickStep,
    /// Newest server tick and when it arrived.
    newest_tick: Option<(u32, Instant)>,
    /// DeltaState arrival times (one a tick): inter-arrival, and the tail a dead server
    /// leaves uncounted.
    arrivals: SnapshotArrivals,
    own: Option<OwnEntity>,
    remotes: HashMap<u32, Remote>,

    // Input and prediction.
    grid: InputGrid,
    /// When play began (the pattern's clock).
    play_started: Option<Instant>,
    next_input_tick: u32,
    first_input_tick: u32,
    /// Spec dialect: the inputs the server has not acknowledged, and the prediction of the
    /// own entity's position from them.
    inputs: shared::Predictor<CityMotion>,
    /// Newest InputAck (the implementation dialect reconciles against it).
    newest_input_ack: Option<u32>,
    acks: PendingAcks,
    /// Implementation dialect: the prediction of the variant's mover (from the bot's own
    /// EntitySpawn). Boxed: 224 bytes that a spec-dialect bot would carry unused.
    grid_pred: Option<Box<Predictor>>,

    // Ping, chat.
    /// One Ping in flight: City's Ping and Pong are empty (see [`OneInFlight`]).
    ping: OneInFlight,
    chat_timer: Periodic,
    chat_seq: u32,
    chat_sent: VecDeque<(u32, Instant)>,

    corrections: u64,
}

impl CityBot {
    pub fn new(params: BotParams, opts: CityOptions) -> Self {
        let ack_wait = Duration::from_millis(opts.input_ack_timeout_ms);
        let period = Self::input_period(&params);
        let grid = InputGrid::new(Some(period));
        // The spec dialect's prediction history and acknowledgement wait; the implementation
        // dialect uses neither (it predicts with its own mover, and nothing acknowledges).
        let spec = opts.dialect == Dialect::Spec;
        let rng = rng::BotRng::seed_from_u64(params.seed);
        let name = format!("{}-{}", opts.name_prefix, params.index);
        let silence = Silence::new(params.server_silence_timeout);
        let ping = OneInFlight::new(params.ping_interval);
        let chat_timer = Periodic::new(Duration::from_secs_f64(60.0 / opts.chat_rate.max(1e-6)));
        Self {
            params,
            opts,
            name,
            rng,
            pattern: PatternState::new(),
            phase: BotPhase::Idle,
            stage: Stage::Hello,
            // Grows to the few messages queued at once: 16 reserved up front was 384 bytes.
            out: VecDeque::new(),
            seq_out: 0,
            started_at: None,
            handshake: Handshake::new(),
            hello_at: None,
            silence,
            session_id: 0,
            player_entity: 0,
            manifest_seen: false,
            assets: Vec::new(),
            request_ids: Vec::new(),
            content_bytes: 0,
            content_complete: false,
            bounds: None,
            ticks: TickStep::new(Some(1)),
            newest_tick: None,
            arrivals: SnapshotArrivals::new(),
            own: None,
            remotes: HashMap::new(),
            grid,
            play_started: None,
            next_input_tick: 1,
            first_input_tick: 1,
            inputs: shared::Predictor::new(if spec { INPUT_BUFFER } else { 1 }),
            newest_input_ack: None,
            acks: PendingAcks::with_capacity(
                ack_wait,
                if spec {
                    ack_capacity(ack_wait, period)
                } else {
                    0
                },
            ),
            grid_pred: None,
            ping,
            chat_timer,
            chat_seq: 0,
            // A few messages a minute: most bots never hold more than one or two.
            chat_sent: VecDeque::new(),
            corrections: 0,
        }
    }

    /// Heap bytes the bot holds in its own containers beyond its inline size: what
    /// `engine/footprint.rs` pins for a fresh bot (the entity table and the content list
    /// grow with what the server sends).
    pub fn reserved_heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.inputs.history_bytes()
            + self.acks.reserved_bytes()
            + self.out.capacity() * size_of::<Out>()
            + self.chat_sent.capacity() * size_of::<(u32, Instant)>()
            + self.assets.capacity() * size_of::<AssetState>()
            + self.request_ids.capacity() * size_of::<u64>()
            + self.remotes.capacity() * size_of::<(u32, Remote)>()
            + self.name.capacity()
            + self
                .grid_pred
                .as_ref()
                .map_or(0, |p| size_of::<Predictor>() + p.reserved_heap_bytes())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn stage(&self) -> Stage {
        self.stage
    }

    pub fn session_id(&self) -> u32 {
        self.session_id
    }

    /// The bot's NetEntityId from ServerHello (0 before).
    pub fn player_entity(&self) -> u32 {
        self.player_entity
    }

    /// The predicted position of the bot's own entity.
    pub fn predicted_position(&self) -> Option<Vec2f> {
        self.own.map(|o| o.pos)
    }

    /// Remote entities the bot knows.
    pub fn remote_count(&self) -> usize {
        self.remotes.len()
    }

    pub fn knows_entity(&self, id: u32) -> bool {
        self.remotes.contains_key(&id) || self.own.is_some_and(|o| o.id == id)
    }

    /// Where a remote entity was last drawn (interpolated).
    pub fn rendered_position(&self, id: u32) -> Option<Vec2f> {
        self.remotes.get(&id).map(|r| r.rendered)
    }

    pub fn corrections(&self) -> u64 {
        self.corrections
    }

    /// Map size in tiles from FullState.
    pub fn map_size(&self) -> Option<(f32, f32)> {
        self.bounds
    }

    pub fn content(&self) -> ContentProgress {
        let count = |o| self.assets.iter().filter(|a| a.outcome == o).count();
        ContentProgress {
            assets: self.assets.len(),
            cached: count(AssetOutcome::Cached),
            requested: self.assets.len() - count(AssetOutcome::Cached),
            verified: count(AssetOutcome::Verified),
            failed: count(AssetOutcome::Failed),
            bytes: self.content_bytes,
            complete: self.content_complete,
        }
    }

    pub fn assets(&self) -> &[AssetState] {
        &self.assets
    }

    fn dialect(&self) -> Dialect {
        self.opts.dialect
    }

    fn close(&mut self, phase: BotPhase) {
        self.phase = phase;
        self.out.clear();
        self.ping.stop();
    }

    // ---- messages ------------------------------------------------------------------------

    fn on_message(&mut self, now: Instant, msg: Message<'_>, rec: &mut Recorder) {
        match msg {
            Message::ServerHello {
                session_id,
                player_entity,
                ..
            } => self.on_server_hello(now, session_id, player_entity, rec),
            Message::Disconnect { reason, .. } => {
                self.on_disconnect(DisconnectReason::from_u8(reason), rec)
            }
            Message::Opaque {
                msg_type: MsgType::Kick,
                ..
            } => self.on_disconnect(DisconnectReason::Kicked, rec),
            Message::Opaque { .. } => rec.event("opaque_message_ignored"),
            Message::Ping => {
                rec.event("server_ping_answered");
                self.out.push_back(Out::Pong);
            }
            Message::Pong => self.ping.on_pong(now, rec),
            Message::ContentManifest(m) => {
                let assets: Vec<AssetEntry<'_>> = m.assets().collect();
                self.on_manifest(&assets, rec);
            }
            Message::ContentChunk {
                resource_id,
                chunk_index,
                total_chunks,
                data,
            } => self.on_chunk(resource_id, chunk_index, total_chunks, data, rec),
            Message::ContentComplete => self.on_content_complete(now, rec),
            Message::FullState(f) => self.on_full_state(now, &f, rec),
            Message::EntitySpawn(e) => self.on_spawn(now, &e, rec),
            Message::EntityDespawn { net_entity_id } => {
                if self.remotes.remove(&net_entity_id).is_none() {
                    if self.own.is_some_and(|o| o.id == net_entity_id) {
                        rec.event("own_entity_despawned");
                    } else {
                        rec.event("despawn_unknown_entity");
                    }
                }
            }
            Message::DeltaState(d) => self.on_delta(now, &d, rec),
            Message::InputAck { tick } => self.on_input_ack(now, tick, rec),
            Message::ChatBroadcast {
                sender, content, ..
            } => {
                rec.event("chat_received");
                if sender == self.name {
                    self.on_own_chat(now, content, rec);
                }
            }
            Message::ClientHello { .. }
            | Message::ContentRequest(_)
            | Message::PlayerInput(_)
            | Message::ChatMessage { .. } => {
                rec.decode_error(msg.msg_type().name(), "wrong_direction")
            }
        }
    }

    fn on_server_hello(&mut self, now: Instant, session_id: u32, entity: u32, rec: &mut Recorder) {
        if self.phase != BotPhase::Connecting {
            rec.event("duplicate_server_hello");
            return;
        }
        self.phase = BotPhase::Connected;
        self.session_id = session_id;
        self.player_entity = entity;
        self.hello_at = Some(now);
        self.silence.arm(now);
        self.handshake.end();
        if let Some(s) = self.started_at {
            rec.record_handshake(now.saturating_duration_since(s).as_micros() as u64);
        }
        self.stage = match self.dialect() {
            Dialect::Spec => Stage::Content,
            Dialect::Implementation => Stage::AwaitWorld,
        };
        // The implementation's server ignores Ping and never sends Pong: RTT comes from
        // ENet's own estimate only, so no Ping is sent there.
        if self.dialect() == Dialect::Spec {
            self.ping.start_at(now + self.params.phase_offset);
        }
    }

    fn on_disconnect(&mut self, reason: DisconnectReason, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting => {
                rec.connect_failures.add(reason.name(), 1);
                self.close(BotPhase::Failed);
            }
            BotPhase::Connected => {
                rec.events.add2("server_disconnect", reason.name(), 1);
                self.ticks.finish().record(rec);
                self.close(BotPhase::Closed);
            }
            _ => {}
        }
    }

    fn on_own_chat(&mut self, now: Instant, content: &str, rec: &mut Recorder) {
        let Some(k) = content
            .rsplit_once('#')
            .and_then(|(_, n)| n.parse::<u32>().ok())
        else {
            return;
        };
        if let Some(i) = self.chat_sent.iter().position(|(s, _)| *s == k) {
            let (_, sent) = self.chat_sent.remove(i).unwrap_or((k, now));
            rec.record_extra(
                "chat_echo_us",
                now.saturating_duration_since(sent).as_micros() as u64,
            );
        }
    }

    // ---- timers --------------------------------------------------------------------------

    fn send_ping_if_due(&mut self, now: Instant, rec: &mut Recorder) {
        if self.ping.poll(now, rec) {
            self.out.push_back(Out::Ping);
        }
    }

    fn send_chat_if_due(&mut self, now: Instant) {
        if !self.chat_timer.fire(now) {
            return;
        }
        let k = self.chat_seq;
        self.chat_seq = self.chat_seq.wrapping_add(1);
        self.out.push_back(Out::Chat(k));
        if self.chat_sent.len() == CHAT_REMEMBERED {
            self.chat_sent.pop_front();
        }
        self.chat_sent.push_back((k, now));
    }
}

impl Bot for CityBot {
    fn start(&mut self, now: Instant, _rec: &mut Recorder) {
        if self.phase != BotPhase::Idle {
            return;
        }
        self.phase = BotPhase::Connecting;
        self.stage = Stage::Hello;
        self.started_at = Some(now);
        self.handshake
            .begin(now, None, self.params.handshake_timeout);
        // The reliable channel delivers it or ENet drops the session: no resends.
        self.out.push_back(Out::Hello);
    }

    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        if !self.phase.takes_datagram(rec) {
            return;
        }
        self.silence.heard(now);
        let dialect = self.dialect();
        for raw in codec::messages(data) {
            let raw = match raw {
                Ok(r) => r,
                Err(e) => {
                    rec.decode_error(e.message, e.reason);
                    break;
                }
            };
            if raw.type_byte == MsgType::DeltaState as u8 && data.len() > codec::ENET_FRAGMENT_LEN {
                // Longer than ENet's fragment: ENet 1.3 sent it reliably, whatever the server
                // asked (the implementation's DeltaState past about 30 players).
                rec.event("delta_state_reliable");
            }
            match raw.decode(dialect) {
                Ok(Some(msg)) => self.on_message(now, msg, rec),
                Ok(None) => rec.event("unknown_message_type"),
                Err(e) => {
                    rec.decode_error(e.message, e.reason);
                    if dialect == Dialect::Spec && codec::fits_implementation(&raw) {
                        rec.event("dialect_hint.implementation");
                    }
                }
            }
            if !matches!(self.phase, BotPhase::Connecting | BotPhase::Connected) {
                break;
            }
        }
    }

    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting => {
                if self.handshake.timed_out(now) {
                    rec.connect_failures.add("timeout", 1);
                    self.close(BotPhase::Failed);
                }
            }
            BotPhase::Connected => {
                if self.silence.expired(now) {
                    rec.event("server_silence_timeout");
                    self.arrivals.finish(now, rec);
                    self.ticks.finish().record(rec);
                    self.close(BotPhase::Closed);
                    self.out
                        .push_back(Out::Disconnect(DisconnectReason::Timeout));
                    return;
                }
                if self.stage == Stage::Playing {
                    self.send_inputs_due(now, rec);
                    self.age_acks(now, rec);
                    self.send_chat_if_due(now);
                }
                self.send_ping_if_due(now, rec);
            }
            BotPhase::Idle | BotPhase::Failed | BotPhase::Closed => {}
        }
    }

    fn stop(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting | BotPhase::Connected => {
                self.arrivals.finish(now, rec);
                self.ticks.finish().record(rec);
                self.close(BotPhase::Closed);
                self.out
                    .push_back(Out::Disconnect(DisconnectReason::ClientQuit));
            }
            BotPhase::Idle => self.phase = BotPhase::Closed,
            BotPhase::Failed | BotPhase::Closed => {}
        }
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        loop {
            let (channel, reliable) = self.out.front()?.msg_type().channel();
            let limit = if reliable {
                MAX_PACKET_SIZE
            } else {
                MAX_UNRELIABLE_PACKET
            };
            let cap = buf.len().min(limit);
            let buf = &mut buf[..cap];
            let mut len = 0;
            // The implementation's server reads only the first message of a packet and its
            // header sequence is always 0: one message per packet, sequence 0.
            let one_per_packet = self.dialect() == Dialect::Implementation;
            while let Some(o) = self.out.front() {
                if o.msg_type().channel() != (channel, reliable) || (one_per_packet && len > 0) {
                    break;
                }
                let seq = if one_per_packet { 0 } else { self.seq_out };
                match self.encode_out(o, &mut buf[len..], seq) {
                    Ok(n) => {
                        len += n;
                        self.seq_out = self.seq_out.wrapping_add(1);
                        self.out.pop_front();
                    }
                    Err(_) if len == 0 => {
                        // Cannot fit even an empty packet: drop it rather than stall.
                        self.out.pop_front();
                    }
                    Err(_) => break,
                }
            }
            if len > 0 {
                return Some(Transmit {
                    len,
                    channel,
                    reliable,
                });
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            BotPhase::Connecting => self.handshake.next_deadline(),
            BotPhase::Connected => {
                let playing = self.stage == Stage::Playing;
                let input = playing.then(|| self.grid.next_due()).flatten();
                let chat = playing.then(|| self.chat_timer.next()).flatten();
                earliest([self.silence.deadline(), self.ping.next(), input, chat])
            }
            BotPhase::Idle | BotPhase::Failed | BotPhase::Closed => None,
        }
    }

    fn phase(&self) -> BotPhase {
        self.phase
    }

    /// After ServerHello the session is `Connected`, but the bot plays only once content
    /// and the first world state arrived: that stretch is the `content` phase.
    fn life_phase(&self) -> Phase {
        match (self.phase, self.stage) {
            (BotPhase::Connected, Stage::Content | Stage::AwaitWorld) => Phase::Content,
            (BotPhase::Idle, _) => Phase::Connecting,
            (BotPhase::Connecting, _) => Phase::ProtocolHandshake,
            (BotPhase::Connected, Stage::Hello | Stage::Playing) => Phase::InGame,
            (BotPhase::Failed, _) => Phase::Failed,
            (BotPhase::Closed, _) => Phase::Closed,
        }
    }

    fn waiting_for(&self) -> Option<&'static str> {
        match (self.phase, self.stage) {
            (BotPhase::Connecting, _) => Some("ServerHello"),
            (BotPhase::Connected, Stage::Content) if !self.manifest_seen => Some("ContentManifest"),
            (BotPhase::Connected, Stage::Content) => Some("ContentChunk/ContentComplete"),
            (BotPhase::Connected, Stage::AwaitWorld) => Some(match self.dialect() {
                Dialect::Spec => "FullState",
                Dialect::Implementation => "EntitySpawn (own player)",
            }),
            _ => None,
        }
    }

    fn handle_transport_closed(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting => {
                rec.connect_failures.add("transport_closed", 1);
                self.close(BotPhase::Failed);
            }
            BotPhase::Connected => {
                rec.event("transport_closed");
                self.arrivals.finish(now, rec);
                self.ticks.finish().record(rec);
                self.close(BotPhase::Closed);
            }
            BotPhase::Idle => self.close(BotPhase::Failed),
            BotPhase::Failed | BotPhase::Closed => {}
        }
    }
}

impl std::fmt::Debug for CityBot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CityBot")
            .field("index", &self.params.index)
            .field("phase", &self.phase)
            .field("stage", &self.stage)
            .field("player_entity", &self.player_entity)
            .finish()
    }
}
