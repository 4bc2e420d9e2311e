//! The R-Type bot: a sans-IO client state machine.
//!
//! Life: CONNECT (resent every `handshake_retry` until ACCEPT, REJECT or `handshake_timeout`;
//! after a REJECT, optionally again after a backoff), then INPUT on a fixed grid, one PING in
//! flight for RTT, an entity table kept from ENTITY_CREATE / ENTITY_DESTROY / DAMAGE_EVENT /
//! SNAPSHOT, GAMEOVER (counted; optionally a rejoin), DISCONNECT on stop.
//!
//! # What it measures
//! - `rtt_us`: PING has no payload, so one PING is in flight at a time and the next PONG
//!   answers it. A PONG is expected within [`RtypeBot::pong_timeout`] (2 × `ping_interval`,
//!   at least 1 s); past that the ping is counted `ping_timeout`, no new ping goes out for one
//!   more `ping_interval`, and a PONG arriving meanwhile is counted `pong_late`, not sampled.
//!   A ping due while one is in flight is skipped (`ping_skipped_in_flight`).
//! - `handshake_us`: from the CONNECT that opened the successful attempt (after any backoff)
//!   to ACCEPT. Rejoins after GAMEOVER are `rejoin_us` instead.
//! - `loss_down`: snapshot ticks divided by the tick step (configured, or learned as the
//!   greatest common divisor of the tick differences of the first [`LEARN_SNAPSHOTS`]
//!   snapshots, which are then replayed into the count) through a
//!   [`SeqWindow`](crate::protocol::prelude::seqwindow::SeqWindow); the learner is the shared
//!   [`TickStep`]. Lost snapshots before the first and after the last one received cannot be
//!   seen.
//! - `snapshot_interarrival_us`: time between two arrivals of a snapshot newer than any before.
//! - `snapshots_applied`: snapshots newer than any before (older ones are not applied: a
//!   client does not roll its world back).
//! - Protocol histograms (`record_extra`; note the recorder's floor of 1, so a 0 shows as 1):
//!   - `entities`: entities in each applied snapshot.
//!   - `snapshot_jitter_us`: |inter-arrival − Δtick × T̂| per applied snapshot, where T̂ is the
//!     server's tick duration as delivered: (arrival of the newest − arrival of the first)
//!     / (their tick difference), before this snapshot. Recorded once [`LEARN_SNAPSHOTS`]
//!     snapshots have set the baseline. Loss does not inflate it (Δtick grows with the gap),
//!     as in RFC 3550's transit-time difference.
//!   - `snapshot_age_ticks`: for each snapshot received (not a duplicate), how many ticks
//!     behind the newest tick already seen it is: 0 in order, > 0 when reordered.
//!   - `interp_delay_us`: **the interpolation delay needed to stay smooth at the rate the
//!     server actually delivers**, defined as the longest inter-arrival gap among the last
//!     [`INTERP_WINDOW`] applied snapshots (about a second at 20 Hz), recorded per applied
//!     snapshot. A client rendering that far behind its newest snapshot always holds a later
//!     snapshot to interpolate towards; with a steady stream it equals one snapshot interval,
//!     each lost snapshot in the window adds an interval, jitter adds the late part. (The
//!     usual "2 × interval" setting is this value when one snapshot in a row may be lost.)
//!   - `snapshot_tick_step`: the step learned (or configured), once per session.
//!   - `extrapolation_us`, with the counters `render_us` and `render_extrapolating_us`: §9's
//!     rendering. A client drawing the world `render_delay_ms` behind its newest snapshot
//!     extrapolates for whatever part of a gap between applied snapshots is longer than that
//!     delay; each such stretch is one sample, and the counters sum the time rendered and the
//!     time extrapolated (their ratio is the share of play on guessed positions).
//!   - `rejoin_us`: GAMEOVER to the ACCEPT of the rejoin.
//! - Events: `gameover`, `rejoined`, `reject_received`, `damage_events`, `damage_taken`
//!   (sum of amounts on the bot's own ship), `snapshot_unannounced` (entities a snapshot
//!   carried that no ENTITY_CREATE announced), `snapshot_stale_removed` (table entries a
//!   snapshot no longer carried: a lost ENTITY_DESTROY), and the ones named above.
//!
//! # Entity
//! The bot sends its `clientId` in CONNECT and as INPUT's `entity` until it learns its ship,
//! by either of two rules (docs/protocols/rtype.md, "Who is who"): the first ENTITY_CREATE
//! of a ship (sprite 1) after an ACCEPT is its ship (servers that choose the id, such as the reference server,
//! which takes the echo of that id in INPUT as the proof of the client's address), unless
//! an ENTITY_CREATE (or snapshot entity) whose id equals its non-zero clientId says
//! otherwise (servers that honour the clientId). After GAMEOVER the bot has no ship: it sends no inputs (the
//! grid keeps running, unsent slots are not counted) until a rejoin gives it a new one.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::codec::{self, Packet, Snapshot};
use super::RtypeOptions;
use crate::protocol::prelude::input_grid::KeyInputs;
use crate::protocol::prelude::ping::OneInFlight;
use crate::protocol::prelude::seqwindow::{self, TickStep, MAX_JUMP};
use crate::protocol::prelude::tail::SnapshotArrivals;
use crate::protocol::prelude::timers::{wake_in_phase, Handshake, Silence};
use crate::protocol::prelude::Recorder;
use crate::protocol::prelude::MAX_TRACKED_ENTITIES;
use crate::protocol::prelude::{Bot, BotParams, BotPhase, Transmit};

/// Snapshots from which the tick step and the tick-duration baseline are learned.
pub const LEARN_SNAPSHOTS: usize = seqwindow::LEARN_SNAPSHOTS;
/// Inter-arrival gaps over which `interp_delay_us` takes its maximum.
pub const INTERP_WINDOW: usize = 20;

#[derive(Debug, Clone, Copy)]
enum Out {
    Connect,
    Input { dx: f32, dy: f32, shooting: bool },
    Ping,
    Disconnect,
}

/// One row of the bot's entity table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrackedEntity {
    pub x: f32,
    pub y: f32,
    pub vx: f32,
    pub vy: f32,
    pub sprite: u16,
    /// Sum of DAMAGE_EVENT amounts received for this entity.
    pub damage: u32,
    /// Snapshot generation that last carried (or created) it.
    generation: u32,
}

/// Where a snapshot's tick falls against the newest seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    First,
    Newer { ticks: u32 },
    Same,
    Older { ticks: u32 },
}

pub struct RtypeBot {
    params: BotParams,
    opts: RtypeOptions,
    rng: ChaCha8Rng,
    phase: BotPhase,
    out: VecDeque<Out>,
    client_id: u32,
    entity: Option<u32>,
    /// The entity was taken from the order of arrival (the first ship ENTITY_CREATE after an
    /// ACCEPT), not from a clientId match: a later match corrects it.
    entity_by_order: bool,
    /// An ACCEPT arrived and no ENTITY_CREATE since: the next one, if it is a ship, is ours.
    first_create_pending: bool,

    // Handshake.
    attempt_started: Option<Instant>,
    /// CONNECT resends and deadline, of the first attempt and of a rejoin.
    handshake: Handshake,
    /// Waiting out a backoff after REJECT until then.
    retry_at: Option<Instant>,
    rejections: u32,

    // Session.
    connected_at: Option<Instant>,
    silence: Silence,
    /// No ship since GAMEOVER.
    dead: bool,
    gameover_at: Option<Instant>,
    rejoining: bool,
    gameovers: u32,

    keys: KeyInputs,

    /// One PING in flight (PING carries nothing to match a PONG by).
    ping: OneInFlight,

    // Snapshots.
    /// Tick step (configured or learned) and the loss window over the ticks.
    ticks: TickStep,
    newest: Option<(u32, Instant)>,
    /// Snapshot arrival times, for the tail a dead server leaves uncounted.
    arrivals: SnapshotArrivals,
    /// First applied snapshot of the current tick baseline, and applied ones since.
    base: Option<(u32, Instant)>,
    base_count: usize,
    gaps: [u64; INTERP_WINDOW],
    gap_count: usize,

    entities: HashMap<u32, TrackedEntity>,
    generation: u32,
}

impl RtypeBot {
    pub fn new(params: BotParams, opts: RtypeOptions) -> Self {
        let keys = KeyInputs::new(&params);
        let rng = ChaCha8Rng::seed_from_u64(params.seed);
        let client_id = opts.client_id_for(params.index);
        let silence = Silence::new(params.server_silence_timeout);
        let ping = OneInFlight::new(params.ping_interval);
        Self {
            ticks: TickStep::new(opts.snapshot_tick_step),
            params,
            opts,
            rng,
            phase: BotPhase::Idle,
            out: VecDeque::with_capacity(16),
            client_id,
            entity: None,
            entity_by_order: false,
            first_create_pending: false,
            attempt_started: None,
            handshake: Handshake::new(),
            retry_at: None,
            rejections: 0,
            connected_at: None,
            silence,
            arrivals: SnapshotArrivals::new(),
            dead: false,
            gameover_at: None,
            rejoining: false,
            gameovers: 0,
            keys,
            ping,
            newest: None,
            base: None,
            base_count: 0,
            gaps: [0; INTERP_WINDOW],
            gap_count: 0,
            entities: HashMap::with_capacity(64),
            generation: 0,
        }
    }

    /// The clientId this bot sends in CONNECT.
    pub fn client_id(&self) -> u32 {
        self.client_id
    }

    /// The bot's ship, once learned (and while alive).
    pub fn entity_id(&self) -> Option<u32> {
        self.entity
    }

    /// Ticks between snapshots, configured or learned.
    pub fn tick_step(&self) -> Option<u32> {
        self.ticks.step()
    }

    /// GAMEOVERs received.
    pub fn gameovers(&self) -> u32 {
        self.gameovers
    }

    /// True between GAMEOVER and a rejoin.
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    pub fn entity_count(&self) -> usize {
        self.entities.len()
    }

    pub fn entity(&self, id: u32) -> Option<&TrackedEntity> {
        self.entities.get(&id)
    }

    pub fn entities(&self) -> impl Iterator<Item = (u32, &TrackedEntity)> {
        self.entities.iter().map(|(&id, e)| (id, e))
    }

    /// How long a PONG may take before the ping counts as timed out.
    pub fn pong_timeout(&self) -> Duration {
        self.ping.timeout()
    }

    fn begin_attempt(&mut self, now: Instant) {
        self.out.push_back(Out::Connect);
        self.attempt_started = Some(now);
        self.start_handshake(now);
        self.retry_at = None;
    }

    fn fail(&mut self, reason: &'static str, rec: &mut Recorder) {
        self.phase = BotPhase::Failed;
        rec.connect_failures.add(reason, 1);
        self.out.clear();
        self.handshake.end();
        self.retry_at = None;
    }

    fn on_accept(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            // Also during a backoff: an earlier CONNECT of the attempt got in after all.
            BotPhase::Connecting => {
                self.phase = BotPhase::Connected;
                self.first_create_pending = true;
                self.connected_at = Some(now);
                self.silence.arm(now);
                self.handshake.end();
                self.retry_at = None;
                if let Some(s) = self.attempt_started {
                    rec.record_handshake(now.saturating_duration_since(s).as_micros() as u64);
                }
                self.keys.begin(now, &self.params);
                // Spread pings the same way inputs are spread.
                self.ping.start_at(now + self.params.phase_offset);
            }
            BotPhase::Connected if self.rejoining => {
                self.rejoining = false;
                self.dead = false;
                self.first_create_pending = true;
                self.handshake.end();
                rec.event("rejoined");
                if let Some(t) = self.gameover_at {
                    rec.record_extra(
                        "rejoin_us",
                        now.saturating_duration_since(t).as_micros() as u64,
                    );
                }
            }
            _ => rec.event("accept_duplicate"),
        }
    }

    fn on_reject(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting if self.retry_at.is_none() => {
                self.rejections += 1;
                rec.event("reject_received");
                if self.opts.retry_on_reject && self.rejections < self.opts.retry_limit {
                    // Jitter in the upper half of the wait, from the bot's own seed.
                    let wait = self.opts.backoff(self.rejections);
                    let half = wait / 2;
                    let jitter = half.mul_f64(self.rng.random::<f64>());
                    self.retry_at = Some(now + half + jitter);
                    self.handshake.end();
                } else {
                    self.fail("rejected", rec);
                }
            }
            BotPhase::Connecting => rec.event("reject_duplicate"),
            BotPhase::Connected if self.rejoining => {
                rec.event("rejoin_rejected");
                self.rejoining = false;
                self.handshake.end();
            }
            _ => rec.event("reject_unexpected"),
        }
    }

    fn on_pong(&mut self, now: Instant, rec: &mut Recorder) {
        self.ping.on_pong(now, rec);
    }

    fn on_gameover(&mut self, now: Instant, rec: &mut Recorder) {
        if self.dead {
            rec.event("gameover_duplicate");
            return;
        }
        rec.event("gameover");
        self.gameovers += 1;
        self.dead = true;
        self.entity = None;
        self.entity_by_order = false;
        self.gameover_at = Some(now);
        if self.opts.rejoin_on_gameover {
            self.rejoining = true;
            self.out.push_back(Out::Connect);
            self.start_handshake(now);
        }
    }

    /// Our ship is the entity whose id equals our non-zero clientId (servers that honour the
    /// clientId), which wins over the order rule of [`Self::maybe_learn_by_order`].
    fn maybe_learn_entity(&mut self, id: u32) {
        if self.dead || self.client_id == 0 || id != self.client_id {
            return;
        }
        if self.entity.is_none() || self.entity_by_order {
            self.entity = Some(id);
            self.entity_by_order = false;
        }
    }

    /// Servers that choose the ship id themselves (the reference server, which uses it as the
    /// address proof) send the client's own ship as the first ENTITY_CREATE after ACCEPT
    /// (docs/protocols/rtype.md, "Who is who").
    /// Only a ship counts (sprite 1, [`super::server::SPRITE_PLAYER`]): an enemy or a
    /// projectile created first, or a hostile server's flood of them, cannot take its place.
    fn maybe_learn_by_order(&mut self, id: u32, sprite: u16) {
        if !self.first_create_pending || sprite != super::server::SPRITE_PLAYER {
            return;
        }
        self.first_create_pending = false;
        if self.entity.is_none() && !self.dead {
            self.entity = Some(id);
            self.entity_by_order = true;
        }
    }

    fn on_create(&mut self, id: u32, x: f32, y: f32, sprite: u16, rec: &mut Recorder) {
        let generation = self.generation;
        let row = TrackedEntity {
            x,
            y,
            vx: 0.0,
            vy: 0.0,
            sprite,
            damage: 0,
            generation,
        };
        if !self.entities.contains_key(&id) && self.entities.len() >= MAX_TRACKED_ENTITIES {
            rec.event("entity_refused_table_full");
            return;
        }
        if self.entities.insert(id, row).is_some() {
            rec.event("entity_create_existing");
        }
        self.maybe_learn_by_order(id, sprite);
        self.maybe_learn_entity(id);
    }

    fn on_destroy(&mut self, id: u32, rec: &mut Recorder) {
        if self.entities.remove(&id).is_none() {
            rec.event("entity_destroy_unknown");
        }
        if self.entity == Some(id) {
            self.entity = None;
        }
    }

    fn on_damage(&mut self, id: u32, amount: u16, rec: &mut Recorder) {
        rec.event("damage_events");
        match self.entities.get_mut(&id) {
            Some(e) => e.damage = e.damage.saturating_add(u32::from(amount)),
            None => rec.event("damage_unknown_entity"),
        }
        if self.entity == Some(id) {
            rec.events.add("damage_taken", u64::from(amount));
        }
    }

    fn order_of(&self, tick: u32) -> Order {
        let Some((newest, _)) = self.newest else {
            return Order::First;
        };
        let ahead = tick.wrapping_sub(newest);
        if ahead == 0 {
            Order::Same
        } else if ahead < (1 << 31) {
            Order::Newer { ticks: ahead }
        } else {
            Order::Older {
                ticks: newest.wrapping_sub(tick),
            }
        }
    }

    /// Loss accounting of one snapshot tick (or learning the step first). Returns true when
    /// the tick was seen before (a duplicate datagram).
    fn account_tick(&mut self, tick: u32, rec: &mut Recorder) -> bool {
        let news = self.ticks.on_tick(tick);
        news.record(rec);
        news.duplicate
    }

    /// Set the step from the ticks collected so far and replay them into the loss count.
    fn finish_learning(&mut self, rec: &mut Recorder) {
        self.ticks.finish().record(rec);
    }

    fn on_snapshot(&mut self, now: Instant, s: &Snapshot<'_>, rec: &mut Recorder) {
        let tick = s.tick;
        let order = self.order_of(tick);
        let duplicate = self.account_tick(tick, rec);
        if duplicate || order == Order::Same {
            rec.event("snapshot_duplicate");
            return;
        }
        match order {
            Order::Same => return,
            Order::Older { ticks } => {
                rec.event("snapshot_reordered");
                rec.record_extra("snapshot_age_ticks", u64::from(ticks));
                return;
            }
            Order::First => {
                self.base = Some((tick, now));
                self.base_count = 1;
            }
            Order::Newer { ticks } => {
                if ticks > MAX_JUMP {
                    // The server restarted or its counter jumped: new baseline.
                    rec.event("snapshot_tick_jump");
                    self.base = Some((tick, now));
                    self.base_count = 1;
                    self.gap_count = 0;
                } else if let Some((_, prev_at)) = self.newest {
                    self.on_gap(now, prev_at, ticks, rec);
                    self.base_count += 1;
                }
            }
        }
        rec.record_extra("snapshot_age_ticks", 0);
        self.arrivals.mark(now);
        self.newest = Some((tick, now));
        self.apply(s, rec);
    }

    /// Inter-arrival, jitter and interpolation delay for an applied snapshot `ticks` after
    /// the previous one, which arrived at `prev_at`.
    fn on_gap(&mut self, now: Instant, prev_at: Instant, ticks: u32, rec: &mut Recorder) {
        let gap = now.saturating_duration_since(prev_at);
        let gap_us = gap.as_micros() as u64;
        rec.record_snapshot_interarrival(gap_us);
        if self.base_count >= LEARN_SNAPSHOTS {
            if let (Some((btick, bat)), Some((ntick, nat))) = (self.base, self.newest) {
                let span = ntick.wrapping_sub(btick);
                if span > 0 {
                    let tick_ns =
                        nat.saturating_duration_since(bat).as_nanos() as f64 / f64::from(span);
                    let expected_ns = tick_ns * f64::from(ticks);
                    let jitter_us = ((gap.as_nanos() as f64 - expected_ns).abs() / 1000.0).round();
                    rec.record_extra("snapshot_jitter_us", jitter_us as u64);
                }
            }
        }
        self.on_render_gap(gap, rec);
        self.gaps[self.gap_count % INTERP_WINDOW] = gap_us;
        self.gap_count += 1;
        let filled = self.gap_count.min(INTERP_WINDOW);
        let need = self.gaps[..filled].iter().copied().max().unwrap_or(gap_us);
        rec.record_extra("interp_delay_us", need);
    }

    /// §9's rendering, between two applied snapshots `gap` apart: a client drawing the world
    /// `render_delay_ms` behind its newest snapshot interpolates while a newer one arrives
    /// within that delay and extrapolates for the rest of a longer gap. Counted: the time
    /// rendered (`render_us`), the time extrapolating (`render_extrapolating_us`), and each
    /// stretch of it (`extrapolation_us`). Loss or jitter beyond the delay shows here as time
    /// the player saw guessed positions.
    fn on_render_gap(&mut self, gap: Duration, rec: &mut Recorder) {
        let delay = Duration::from_millis(self.opts.render_delay_ms);
        rec.events.add("render_us", gap.as_micros() as u64);
        let beyond = gap.saturating_sub(delay);
        if !beyond.is_zero() {
            let us = beyond.as_micros() as u64;
            rec.events.add("render_extrapolating_us", us);
            rec.record_extra("extrapolation_us", us);
        }
    }

    /// A snapshot is the full world state: upsert what it carries, drop what it does not.
    fn apply(&mut self, s: &Snapshot<'_>, rec: &mut Recorder) {
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        let mut unannounced = 0u64;
        for e in s.entities() {
            let row = TrackedEntity {
                x: e.x,
                y: e.y,
                vx: e.vx,
                vy: e.vy,
                sprite: e.sprite,
                damage: 0,
                generation,
            };
            let full = self.entities.len() >= MAX_TRACKED_ENTITIES;
            match self.entities.get_mut(&e.id) {
                Some(t) => {
                    *t = TrackedEntity {
                        damage: t.damage,
                        ..row
                    }
                }
                None if full => {
                    rec.event("entity_refused_table_full");
                }
                None => {
                    unannounced += 1;
                    self.entities.insert(e.id, row);
                }
            }
            self.maybe_learn_entity(e.id);
        }
        let before = self.entities.len();
        self.entities.retain(|_, t| t.generation == generation);
        let stale = (before - self.entities.len()) as u64;
        if let Some(id) = self.entity {
            if !self.entities.contains_key(&id) {
                self.entity = None;
            }
        }
        if unannounced > 0 {
            rec.events.add("snapshot_unannounced", unannounced);
        }
        if stale > 0 {
            rec.events.add("snapshot_stale_removed", stale);
        }
        rec.snapshots_applied += 1;
        rec.record_extra("entities", s.entity_count() as u64);
    }

    fn send_inputs_due(&mut self, now: Instant, rec: &mut Recorder) {
        if self.dead {
            // No ship to steer: move past `now` without sending or counting.
            self.keys.skip_past(now);
            return;
        }
        let played = now.saturating_duration_since(self.connected_at.unwrap_or(now));
        let Some(keys) = self
            .keys
            .take(now, played, &self.params, &mut self.rng, rec)
        else {
            return;
        };
        let (dx, dy) = keys.axis();
        self.out.push_back(Out::Input {
            dx,
            dy,
            shooting: keys.shoot(),
        });
        rec.inputs_sent += 1;
    }

    fn send_ping_if_due(&mut self, now: Instant, rec: &mut Recorder) {
        if self.ping.poll(now, rec) {
            self.out.push_back(Out::Ping);
        }
    }

    fn rejoin_timers(&mut self, now: Instant, rec: &mut Recorder) {
        if !self.rejoining {
            return;
        }
        if self.handshake.timed_out(now) {
            rec.event("rejoin_timeout");
            self.rejoining = false;
            self.handshake.end();
            return;
        }
        self.resend_connect_if_due(now, rec);
    }

    fn resend_connect_if_due(&mut self, now: Instant, rec: &mut Recorder) {
        if self.handshake.retry_due(now) {
            rec.event("connect_retry");
            self.out.push_back(Out::Connect);
        }
    }

    /// Resend CONNECT every `handshake_retry`, give up after `handshake_timeout`.
    fn start_handshake(&mut self, now: Instant) {
        self.handshake.begin(
            now,
            Some(self.params.handshake_retry),
            self.params.handshake_timeout,
        );
    }
}

impl Bot for RtypeBot {
    fn start(&mut self, now: Instant, _rec: &mut Recorder) {
        self.phase = BotPhase::Connecting;
        self.begin_attempt(now);
    }

    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        if !self.phase.takes_datagram(rec) {
            return;
        }
        let packet = match codec::decode(data, self.opts.float_order) {
            Ok(p) => p,
            // §8 and docs/protocols/rtype.md: unknown packet types are ignored (and counted),
            // not malformed.
            Err(e) if (e.message, e.reason) == ("header", "unknown_type") => {
                rec.event("unknown_message_type");
                return;
            }
            Err(e) => {
                rec.decode_error(e.message, e.reason);
                return;
            }
        };
        let ty = packet.packet_type();
        if ty.is_client_to_server() {
            rec.decode_error(ty.name(), "wrong_direction");
            return;
        }
        self.silence.heard(now);
        match packet {
            Packet::Accept => return self.on_accept(now, rec),
            Packet::Reject => return self.on_reject(now, rec),
            _ => {}
        }
        if self.phase != BotPhase::Connected {
            rec.event("packet_before_accept");
            return;
        }
        match packet {
            Packet::Pong { .. } => self.on_pong(now, rec),
            Packet::GameOver => self.on_gameover(now, rec),
            Packet::EntityCreate { id, x, y, sprite } => self.on_create(id, x, y, sprite, rec),
            Packet::EntityDestroy { id } => self.on_destroy(id, rec),
            Packet::Damage { id, amount } => self.on_damage(id, amount, rec),
            Packet::Snapshot(s) => self.on_snapshot(now, &s, rec),
            Packet::Accept
            | Packet::Reject
            | Packet::Connect { .. }
            | Packet::Input { .. }
            | Packet::Ping
            | Packet::Disconnect => {}
        }
    }

    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting => {
                if let Some(at) = self.retry_at {
                    if now >= at {
                        rec.event("connect_after_backoff");
                        self.begin_attempt(now);
                    }
                    return;
                }
                if self.handshake.timed_out(now) {
                    self.fail("timeout", rec);
                    return;
                }
                self.resend_connect_if_due(now, rec);
            }
            BotPhase::Connected => {
                if self.silence.expired(now) {
                    self.phase = BotPhase::Closed;
                    rec.event("server_silence_timeout");
                    self.out.clear();
                    self.finish_learning(rec);
                    self.arrivals.finish(now, rec);
                    return;
                }
                self.rejoin_timers(now, rec);
                self.send_inputs_due(now, rec);
                self.send_ping_if_due(now, rec);
            }
            BotPhase::Idle | BotPhase::Failed | BotPhase::Closed => {}
        }
    }

    fn stop(&mut self, now: Instant, rec: &mut Recorder) {
        if self.phase == BotPhase::Connected {
            self.out.push_back(Out::Disconnect);
            // Count what the learning phase saw, even if the session was short.
            self.finish_learning(rec);
            self.arrivals.finish(now, rec);
        }
        self.phase = self.phase.after_stop();
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let out = self.out.pop_front()?;
        let packet = match out {
            Out::Connect => Packet::Connect {
                client_id: self.client_id,
            },
            Out::Input { dx, dy, shooting } => Packet::Input {
                entity: self.entity.unwrap_or(self.client_id),
                dx,
                dy,
                shooting,
            },
            Out::Ping => Packet::Ping,
            Out::Disconnect => Packet::Disconnect,
        };
        // Every client packet fits in 17 bytes; callers pass MAX_DATAGRAM.
        codec::encode(buf, &packet, self.opts.float_order)
            .ok()
            .map(Transmit::datagram)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let handshake = self.handshake.next_deadline();
        wake_in_phase(
            self.phase,
            self.retry_at.or(handshake),
            [
                self.keys.next_due(),
                self.ping.next(),
                self.silence.deadline(),
                handshake.filter(|_| self.rejoining),
            ],
        )
    }

    fn phase(&self) -> BotPhase {
        self.phase
    }
}

impl std::fmt::Debug for RtypeBot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RtypeBot")
            .field("index", &self.params.index)
            .field("phase", &self.phase)
            .field("client_id", &self.client_id)
            .field("entity", &self.entity)
            .finish()
    }
}
