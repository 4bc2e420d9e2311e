//! The DarkAges bot: a sans-IO client state machine.
//!
//! Life: CONNECT (resent every `handshake_retry` until CONNECT_ACK or `handshake_timeout`),
//! CONNECTED, then INPUT on the shared input grid, PINGs, HEARTBEATs every
//! `heartbeat_interval_ms`, SNAPSHOTs applied against baselines, EVENTs counted; a
//! ZONE_HANDOFF moves it to the next zone; DISCONNECT on stop.
//!
//! # Snapshots and baselines
//! The bot keeps the states of its last 30 snapshots (§3.3) by tick. A full snapshot is a
//! state of its own; a delta is applied to the stored state of exactly its `baseline_tick`,
//! never to another. A delta whose baseline is not stored is counted (`baseline_miss`),
//! dropped, and answered by acknowledging tick 0 in the following INPUTs, which asks the
//! server for a full snapshot; the full snapshot that ends the wait counts `full_fallback`.
//! Every state a snapshot produces (also a reordered, older one) is stored as a baseline;
//! only a snapshot newer than every other becomes the bot's world and is acknowledged
//! (`last_received_tick`). The store is emptied on a zone handoff: the next zone's ticks are
//! another sequence. A snapshot is a duplicate (`snapshot_duplicate`, not applied) when its
//! tick is already stored, whatever the loss accounting below makes of it.
//!
//! A delta is merged with its baseline in one pass ([`Applier`]); a state holds at most
//! [`MAX_TRACKED_ENTITIES`] entities (beyond, the snapshot is the decode error
//! `snapshot.too_many_entities`, neither stored nor acknowledged), and all states kept count
//! against `max_state_bytes` ([`Baselines`]: the oldest are dropped, `baseline_evicted`).
//!
//! # Downstream loss
//! Snapshot ticks are mapped to a gap-free sequence in steps of the snapshot tick step
//! ([`TickStep`]): per zone session the first 8 distinct ticks are held back, the step is the
//! gcd of their gaps (3 for a 60 Hz server sending at 20 Hz, 1 for one snapshot per tick),
//! and they are replayed into the count (`snapshot_tick_step` records the step). A
//! configured `snapshot_tick_step` is kept when it divides the learned one, otherwise the
//! learned one wins (`snapshot_tick_step_contradicted`). The held-back ticks are counted when
//! the session ends (stop, handoff, DISCONNECT, silence) if fewer than 8 arrived. Snapshots
//! lost before the first or after the last one received in a zone cannot be seen.
//!
//! # Prediction
//! The bot predicts its own entity with the server's movement model ([`super::step`]) for
//! each INPUT it sends. Snapshots carry no input acknowledgement, so each applied snapshot's
//! position of the bot's entity is compared with the nearest of the predicted positions
//! still in flight (ties to the newest): an exact match is a server that has applied the
//! inputs up to there; the distance is `prediction_error` (recorded in millimetres, so exact
//! shows as the histogram floor, 1 mm). Above `prediction_error_threshold_m` the bot snaps
//! to the server's position at that point and replays the later inputs (`corrections`).
//! Until the bot has seen its entity in a zone (after connecting, a handoff, or its own
//! DEATH) it sends no movement, so its history starts from a known position.
//!
//! # Invalid input on purpose
//! With `invalid_input_share`, that share of bots (chosen from the seed) replaces one input
//! every `invalid_input_interval_ms` by an invalid one, kinds in turn: yaw out of range,
//! conflicting direction flags, a replayed sequence number. The invalid input is left out of
//! the prediction and moves the player if applied, so the server's reaction is visible
//! within a second: a correction (`invalid_input_applied.<kind>`), nothing
//! (`invalid_input_ignored.<kind>`) or a DISCONNECT (`invalid_input_disconnected.<kind>`).
//!
//! # Zone handoff
//! On ZONE_HANDOFF (or an EVENT of type 0x06), the bot sends DISCONNECT(ZONE_HANDOFF) and asks
//! the engine for a new link to `new_server_address:new_server_port`
//! ([`Bot::poll_relink`]); once relinked it sends CONNECT with the token as `auth_token`
//! (after `handoff_connect_delay_ms`), resent like a handshake. CONNECT_ACK success ends the
//! handoff (`handoff_us`, `handoffs`); a failure result is `handoff_failed.expired_token`
//! (message starting with "expired") or `.refused`; no answer within `handshake_timeout`
//! is `.timeout`; an address that is not an IP literal is `.bad_address` (no DNS in a
//! sans-IO bot) and the bot stays where it is. An address neither on a host of the run's
//! targets nor in `handoff_allow` is refused (`handoff_refused.not_allowed`, see
//! [`self::allow`]): nothing is sent there and the bot stays where it is. A bot whose handoff failed has left its old
//! zone and ends (`Closed`). The token's own lifetime is the issuing zone's rule, checked by
//! the receiving zone.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use self::allow::HandoffPolicy;
use self::client::{keys_to_flags, Pings, Session};
use super::codec::{
    self, event, fixed_text, input, reason, result, EntityState, EventBody, Packet, Snapshot,
};
use super::{step, DarkAgesOptions, Dialect};
use crate::protocol::prelude::input_grid::KeyInputs;
use crate::protocol::prelude::predict::{Motion, Predictor};
use crate::protocol::prelude::seqwindow::TickStep;
use crate::protocol::prelude::tail::SnapshotArrivals;
use crate::protocol::prelude::timers::{wake_in_phase, Periodic, Silence};
use crate::protocol::prelude::Recorder;
use crate::protocol::prelude::{Bot, BotParams, BotPhase, Relink, Transmit, MAX_TRACKED_ENTITIES};

pub mod allow;
pub(crate) mod client;
mod handoff;
mod own;
mod snapshot;

use handoff::*;
use own::*;
pub use snapshot::{apply_snapshot, Applier, Baselines, TooManyEntities};

/// Baselines kept (§3.3).
pub const BASELINES: usize = 30;
/// Predicted positions kept for matching snapshots against.
pub const PREDICTION_HISTORY: usize = 128;
/// Scratch an [`Applier`] keeps between snapshots (about 7,000 records); a larger delta's
/// is given back after it.
const APPLIER_KEEP_BYTES: usize = 256 * 1024;
/// How long the bot watches for the server's reaction to an invalid input.
const VERDICT_WINDOW: Duration = Duration::from_secs(1);
const MOVE_FLAGS: u8 = input::FORWARD | input::BACKWARD | input::LEFT | input::RIGHT;

const INVALID_KINDS: [&str; 3] = ["yaw_out_of_range", "conflicting_flags", "replayed_sequence"];

#[derive(Debug, Clone, Copy)]
enum Out {
    Connect,
    Connected,
    Input(codec::Input),
    Ping(u32),
    Pong(u32),
    Heartbeat(u32),
    Disconnect(u8),
}

pub struct DarkAgesBot {
    params: BotParams,
    opts: DarkAgesOptions,
    rng: ChaCha8Rng,
    phase: BotPhase,
    out: VecDeque<Out>,
    client_id: [u8; 32],
    auth_token: [u8; 64],

    session: Session,
    silence: Silence,
    entity: Option<u32>,
    zone: Option<u32>,

    keys: KeyInputs,
    seq: u32,

    pings: Pings,
    heartbeat_timer: Periodic,
    heartbeat_sent: Option<u32>,

    baselines: Baselines,
    scratch: Vec<EntityState>,
    applier: Applier,
    newest: Option<(u32, Instant)>,
    /// Snapshot arrival times in this zone, for the tail a dead server leaves uncounted.
    arrivals: SnapshotArrivals,
    ack: u32,
    awaiting_full: bool,
    /// Downstream loss over snapshot ticks, the step learned per zone session.
    ticks: TickStep,

    pred: Prediction,
    anchored: bool,
    heading: Option<f32>,
    turn_timer: Periodic,

    misbehaves: bool,
    invalid_timer: Periodic,
    invalid_next: usize,
    verdict: Option<(&'static str, Instant)>,

    handoff: Option<Handoff>,
    handoff_policy: HandoffPolicy,
    relink: Option<SocketAddr>,
    failed_token: Option<[u8; 32]>,
}

impl DarkAgesBot {
    pub fn new(params: BotParams, opts: DarkAgesOptions) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
        let misbehaves =
            opts.invalid_input_share > 0.0 && rng.random::<f64>() < opts.invalid_input_share;
        let client_id = fixed_text(&format!("{}-{}", opts.client_id_prefix, params.index));
        Self {
            keys: KeyInputs::new(&params),
            silence: Silence::new(params.server_silence_timeout),
            pings: Pings::new(params.ping_interval),
            heartbeat_timer: Periodic::new(Duration::from_millis(opts.heartbeat_interval_ms)),
            turn_timer: Periodic::new(Duration::from_millis(opts.turn_every_ms.max(1))),
            invalid_timer: Periodic::new(Duration::from_millis(opts.invalid_input_interval_ms)),
            ticks: TickStep::checked(opts.snapshot_tick_step),
            rng,
            phase: BotPhase::Idle,
            out: VecDeque::with_capacity(16),
            client_id,
            auth_token: [0; 64],
            session: Session::new(),
            entity: None,
            zone: None,
            seq: 0,
            heartbeat_sent: None,
            baselines: Baselines::with_budget(BASELINES, opts.max_state_bytes),
            scratch: Vec::with_capacity(64),
            applier: Applier::new(),
            newest: None,
            arrivals: SnapshotArrivals::new(),
            ack: 0,
            awaiting_full: false,
            pred: Prediction::new(),
            anchored: false,
            heading: None,
            misbehaves,
            invalid_next: 0,
            verdict: None,
            handoff: None,
            handoff_policy: HandoffPolicy::new(params.targets.clone(), &opts.handoff_allow),
            relink: None,
            failed_token: None,
            params,
            opts,
        }
    }

    /// The bot's entity in its current zone.
    pub fn entity_id(&self) -> Option<u32> {
        self.entity
    }

    /// The zone it plays in (CONNECT_ACK's `zone_id`).
    pub fn zone(&self) -> Option<u32> {
        self.zone
    }

    /// Server ticks between snapshots in this zone session, once learned (or configured and
    /// confirmed by the first snapshots).
    pub fn tick_step(&self) -> Option<u32> {
        self.ticks.step()
    }

    /// The newest applied snapshot's tick.
    pub fn current_tick(&self) -> Option<u32> {
        self.newest.map(|n| n.0)
    }

    /// The world as of the newest applied snapshot, sorted by entity id.
    pub fn entities(&self) -> &[EntityState] {
        self.baselines.current()
    }

    /// Ticks of the stored baselines, newest stored first.
    pub fn baseline_ticks(&self) -> Vec<u32> {
        self.baselines.ticks().collect()
    }

    /// The stored state of `tick`, if any.
    pub fn baseline(&self, tick: u32) -> Option<&[EntityState]> {
        self.baselines.find(tick).map(|i| self.baselines.get(i))
    }

    /// A handoff is in progress.
    pub fn is_handing_off(&self) -> bool {
        self.handoff.is_some()
    }

    /// Predicted position of the bot's entity.
    pub fn predicted_position(&self) -> [f32; 3] {
        self.pred.current()
    }

    /// Whether this bot breaks inputs on purpose.
    pub fn misbehaves(&self) -> bool {
        self.misbehaves
    }

    fn fail(&mut self, reason: &'static str, rec: &mut Recorder) {
        self.phase = BotPhase::Failed;
        rec.connect_failures.add(reason, 1);
        self.out.clear();
        self.session.handshake.end();
    }

    /// Forget the zone: ticks, baselines, pings and the prediction belong to one server.
    fn reset_zone_session(&mut self) {
        self.baselines.clear();
        self.newest = None;
        self.arrivals.reset();
        self.ack = 0;
        self.awaiting_full = false;
        self.ticks = TickStep::checked(self.opts.snapshot_tick_step);
        self.pings.forget();
        self.heartbeat_sent = None;
        self.anchored = false;
        self.entity = None;
        self.verdict = None;
    }

    fn send_ping_if_due(&mut self, now: Instant, rec: &mut Recorder) {
        if self.pings.due(now) && self.handoff.is_none() {
            let token = self.pings.send(now, rec);
            self.out.push_back(Out::Ping(token));
        }
    }
}

impl Bot for DarkAgesBot {
    fn start(&mut self, now: Instant, _rec: &mut Recorder) {
        self.phase = self.session.begin(now, &self.params);
        self.out.push_back(Out::Connect);
    }

    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        if !self.phase.takes_datagram(rec) {
            return;
        }
        let packet = match codec::decode(data) {
            Ok(p) => p,
            Err(e) if e.is_unknown_type() => {
                rec.event("unknown_packet_type");
                if super::dialects::implementation::codec::fits(data) {
                    rec.event("dialect_hint.implementation");
                }
                return;
            }
            Err(e) => {
                rec.decode_error(e.message, e.reason);
                return;
            }
        };
        self.silence.heard(now);
        if let Packet::ConnectAck(a) = &packet {
            let a = *a;
            self.on_connect_ack(now, &a, rec);
            return;
        }
        if self.phase != BotPhase::Connected {
            rec.event("packet_before_connect_ack");
            return;
        }
        match packet {
            Packet::Snapshot(s) if self.handoff.is_none() => {
                self.on_snapshot(now, data.len(), &s, rec)
            }
            Packet::Snapshot(_) => rec.event("snapshot_during_handoff"),
            Packet::Event(e) => self.on_event(now, &e.body, rec),
            Packet::Coalesced(c) => {
                rec.event("coalesced_events");
                for b in c.events() {
                    self.on_event(now, &b, rec);
                }
            }
            Packet::ZoneHandoff(z) => self.on_zone_handoff(now, &z, rec),
            Packet::ZoneEnter { .. } => rec.event("zone_enter"),
            Packet::ZoneLeave { .. } => rec.event("zone_leave"),
            Packet::DebugText(_) => rec.event("debug_text"),
            Packet::Pong { timestamp } => self.pings.on_pong(now, timestamp, rec),
            Packet::Ping { timestamp } => self.out.push_back(Out::Pong(timestamp)),
            Packet::Heartbeat { timestamp } => {
                if self.heartbeat_sent == Some(timestamp) {
                    self.heartbeat_sent = None;
                    rec.event("heartbeat_echoed");
                } else {
                    rec.event("heartbeat_answered");
                    self.out.push_back(Out::Heartbeat(timestamp));
                }
            }
            Packet::Disconnect { reason: r, .. } => {
                rec.events.add2("server_disconnect", reason::name(r), 1);
                self.finish_ticks(rec);
                self.arrivals.reset();
                if let Some((kind, _)) = self.verdict.take() {
                    rec.events.add2("invalid_input_disconnected", kind, 1);
                    rec.event("invalid_input_disconnected");
                }
                self.phase = BotPhase::Closed;
                self.out.clear();
            }
            Packet::Connect(_) | Packet::Connected | Packet::Input(_) | Packet::ConnectAck(_) => {
                rec.decode_error(packet.name(), "wrong_direction")
            }
        }
    }

    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting => {
                if self.session.handshake.timed_out(now) {
                    self.fail("timeout", rec);
                } else if self.session.handshake.retry_due(now) {
                    rec.event("connect_retry");
                    self.out.push_back(Out::Connect);
                }
            }
            BotPhase::Connected => {
                if let Some(h) = self.handoff {
                    if h.connect_at.is_some_and(|t| now >= t) {
                        self.send_handoff_connect(now);
                    } else if h.connecting {
                        if self.session.handshake.timed_out(now) {
                            self.fail_handoff("timeout", rec);
                            return;
                        }
                        if self.session.handshake.retry_due(now) {
                            rec.event("handoff_connect_retry");
                            self.out.push_back(Out::Connect);
                        }
                    }
                }
                if self.silence.expired(now) {
                    rec.event("server_silence_timeout");
                    self.finish_ticks(rec);
                    self.arrivals.finish(now, rec);
                    self.phase = BotPhase::Closed;
                    self.out.clear();
                    return;
                }
                if let Some((kind, at)) = self.verdict {
                    if now >= at {
                        self.verdict = None;
                        rec.events.add2("invalid_input_ignored", kind, 1);
                        rec.event("invalid_input_ignored");
                    }
                }
                self.send_input_if_due(now, rec);
                self.send_ping_if_due(now, rec);
                if self.heartbeat_timer.fire(now) && self.handoff.is_none() {
                    let ts = self.session.ms(now).max(1);
                    self.heartbeat_sent = Some(ts);
                    self.out.push_back(Out::Heartbeat(ts));
                }
            }
            BotPhase::Idle | BotPhase::Failed | BotPhase::Closed => {}
        }
    }

    fn stop(&mut self, now: Instant, rec: &mut Recorder) {
        if self.phase == BotPhase::Connected {
            match self.handoff {
                None => {
                    self.out.push_back(Out::Disconnect(reason::NORMAL));
                    self.finish_ticks(rec);
                    self.arrivals.finish(now, rec);
                }
                // The new zone may hold a session for the CONNECT already sent: the goodbye
                // goes there, or that session ends as a dropped transport.
                Some(h) if h.connecting => self.out.push_back(Out::Disconnect(reason::NORMAL)),
                Some(_) => {}
            }
        }
        self.phase = self.phase.after_stop();
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let out = self.out.pop_front()?;
        let p = match out {
            Out::Connect => Packet::Connect(codec::Connect {
                protocol_version: self.opts.protocol_version,
                client_version: self.opts.client_version,
                client_id: self.client_id,
                auth_token: self.auth_token,
            }),
            Out::Connected => Packet::Connected,
            Out::Input(i) => Packet::Input(i),
            Out::Ping(t) => Packet::Ping { timestamp: t },
            Out::Pong(t) => Packet::Pong { timestamp: t },
            Out::Heartbeat(t) => Packet::Heartbeat { timestamp: t },
            Out::Disconnect(r) => Packet::Disconnect {
                reason: r,
                message: if r == reason::ZONE_HANDOFF {
                    "zone handoff"
                } else {
                    "bye"
                },
            },
        };
        // Every client packet fits in 105 bytes; callers pass MAX_DATAGRAM.
        let len = codec::encode(buf, &p).ok()?;
        Some(super::transmit(buf, len))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let handshake = self.session.handshake.next_deadline();
        let handoff = self
            .handoff
            .and_then(|h| h.connect_at.or_else(|| h.connecting.then_some(handshake)?));
        wake_in_phase(
            self.phase,
            handshake,
            [
                self.keys.next_due(),
                self.pings.next(),
                self.heartbeat_timer.next(),
                self.silence.deadline(),
                self.verdict.map(|v| v.1),
                handoff,
            ],
        )
    }

    fn phase(&self) -> BotPhase {
        self.phase
    }

    fn poll_relink(&mut self) -> Option<Relink> {
        self.relink.take().map(|a| Relink { to: Some(a) })
    }

    fn handle_relinked(&mut self, now: Instant, _rec: &mut Recorder) {
        if self.handoff.is_none() {
            return;
        }
        self.reset_zone_session();
        self.silence.arm(now);
        self.silence.heard(now);
        let delay = Duration::from_millis(self.opts.handoff_connect_delay_ms);
        if delay.is_zero() {
            self.send_handoff_connect(now);
        } else if let Some(h) = self.handoff.as_mut() {
            h.connect_at = Some(now + delay);
        }
    }

    fn handle_transport_closed(&mut self, now: Instant, rec: &mut Recorder) {
        if self.handoff.is_some() {
            self.fail_handoff("bad_address", rec);
        } else if self.phase == BotPhase::Connected {
            self.phase = BotPhase::Closed;
            rec.event("transport_closed");
            self.finish_ticks(rec);
            self.arrivals.finish(now, rec);
        }
    }
}

impl std::fmt::Debug for DarkAgesBot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DarkAgesBot")
            .field("index", &self.params.index)
            .field("phase", &self.phase)
            .field("entity", &self.entity)
            .field("zone", &self.zone)
            .finish()
    }
}
