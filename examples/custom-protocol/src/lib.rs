//! Skirmish: the protocol of a made-up top-down arena game, load-tested with tickswarm.
//!
//! Raw UDP, little-endian, one message per datagram, the type in the first byte:
//!
//! | message | bytes |
//! |---|---|
//! | Hello (bot) | `1, version u8, nonce u32` |
//! | Welcome (server) | `0x81, nonce u32, player id u16` |
//! | Input (bot, 60 Hz) | `2, seq u32, acked tick u32, keys u8` |
//! | Snapshot (server, every tick) | `0x82, seq u32, tick u32, baseline u32, last input seq u32, inputs seen u32, n u8, n × (id u16, x i16, y i16)` |
//! | Ping / Pong | `3 / 0x83, token u32` |
//! | Bye (bot) | `4` |
//!
//! A snapshot lists the players that changed since `baseline`, the last tick the bot
//! acknowledged in an Input (0: a full snapshot); `x = i16::MIN` says a player left. Both
//! ends keep the last [`HISTORY`] worlds. Measured: RTT (Ping/Pong), downstream loss (the
//! snapshot `seq` per player), upstream loss (the server's `last input seq` and `inputs
//! seen`), and the protocol's own `baseline_age_ticks` and `full_snapshots`.
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tickswarm::api::input_grid::InputGrid;
use tickswarm::api::ping::OneInFlight;
use tickswarm::api::seqwindow::SeqWindow;
use tickswarm::api::timers::{earliest, Handshake, Periodic, Silence};
use tickswarm::api::wire::{Le, Reader, WireResult, Writer};
use tickswarm::api::*;

/// Wire version in the Hello.
pub const VERSION: u8 = 1;
/// Players one server takes: a full snapshot (22 + 200 × 6 bytes) fits one datagram.
pub const MAX_PLAYERS: usize = 200;
/// Worlds kept by both ends, so a delta's baseline is at most this many ticks old.
pub const HISTORY: usize = 32;
#[allow(missing_docs)]
pub mod msg {
    pub const HELLO: u8 = 1;
    pub const INPUT: u8 = 2;
    pub const PING: u8 = 3;
    pub const BYE: u8 = 4;
    pub const WELCOME: u8 = 0x81;
    pub const SNAPSHOT: u8 = 0x82;
    pub const PONG: u8 = 0x83;
}
const GONE: i16 = i16::MIN;

/// The scenario's `protocol: { skirmish: { dialect: delta } }` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    /// How the server sends snapshots.
    pub dialect: Dialect,
}
/// `delta`: deltas on the baseline each player acknowledged; `full`: every player each tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum Dialect {
    #[default]
    Delta,
    Full,
}

/// The protocol's marker: what `tickswarm::main_with(&[&Skirmish])` registers.
pub struct Skirmish;

impl Protocol for Skirmish {
    type Options = Options;
    const INFO: ProtocolInfo = ProtocolInfo {
        name: "skirmish",
        spec: "examples/custom-protocol/src/lib.rs",
        transport: "raw UDP",
        default_port: 4600,
        rtt: "Ping with a token the server echoes in a Pong",
        downstream_loss: "per-player snapshot seq (gaps, reordering, duplicates)",
        upstream_loss: "the server's last input seq and inputs seen, in each snapshot",
        dialects: &[("delta", "deltas on acked baselines (default)"), ("full", "full snapshots")],
        metrics: &[
            MetricDesc::histogram("baseline_age_ticks", "Baseline age", "delta tick - baseline", "ticks"),
            MetricDesc::count("full_snapshots", "Full snapshots", "snapshots without a baseline"),
        ],
    };
    fn transport(_: &Options) -> TransportNeeds {
        TransportNeeds::Udp
    }
    fn validate(_: &Options, _: &ServerParams) -> Result<(), String> {
        Ok(()) // players_per_instance caps each server; nothing else to check
    }
    fn dialect_name(o: &Options) -> String {
        format!("{:?}", o.dialect).to_lowercase()
    }
    fn make_bot(_: &Options, params: BotParams) -> Box<dyn Bot> {
        Box::new(SkirmishBot::new(params))
    }
    fn make_server(o: &Options, server: &ServerParams, now: Instant) -> Box<dyn Server> {
        Box::new(SkirmishServer::new(o.clone(), server, now))
    }
    fn players_per_instance(_: &Options, _: &ServerParams) -> Option<usize> {
        Some(MAX_PLAYERS)
    }
}

/// One world: every player slot's position, or `None` for an empty slot.
#[derive(Clone, Copy)]
struct World {
    tick: u32,
    pos: [Option<(i16, i16)>; MAX_PLAYERS],
}
const EMPTY: World = World { tick: 0, pos: [None; MAX_PLAYERS] };

/// The last [`HISTORY`] worlds, by tick: fixed memory whatever the peer sends.
struct Worlds(Box<[World; HISTORY]>);
impl Worlds {
    fn new() -> Self {
        Self(Box::new([EMPTY; HISTORY]))
    }
    fn get(&self, tick: u32) -> Option<&World> {
        Some(&self.0[tick as usize % HISTORY]).filter(|w| w.tick == tick && tick != 0)
    }
    fn put(&mut self, w: World) {
        self.0[w.tick as usize % HISTORY] = w;
    }
}

/// A simulated Skirmish player.
pub struct SkirmishBot {
    params: BotParams,
    phase: BotPhase,
    nonce: u32,
    rng: ChaCha8Rng,
    pattern: PatternState,
    handshake: Handshake,
    silence: Silence,
    grid: InputGrid,
    ping: OneInFlight,
    started: Option<Instant>,
    worlds: Worlds,
    acked: u32,
    seqs: SeqWindow,
    up: (u32, u32),
    input_seq: u32,
    keys: u8,
    token: u32,
    out: VecDeque<u8>,
}

impl SkirmishBot {
    /// A bot not yet started.
    pub fn new(params: BotParams) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
        Self {
            nonce: rng.next_u32() | 1,
            rng,
            phase: BotPhase::Idle,
            pattern: PatternState::new(),
            handshake: Handshake::new(),
            silence: Silence::new(params.server_silence_timeout),
            grid: InputGrid::new(params.input_period()),
            ping: OneInFlight::new(params.ping_interval),
            started: None,
            worlds: Worlds::new(),
            acked: 0,
            seqs: SeqWindow::new(),
            up: (0, 0),
            input_seq: 0,
            keys: 0,
            token: 0,
            out: VecDeque::with_capacity(8),
            params,
        }
    }
    /// The last tick this bot applied (and acknowledges).
    pub fn acked_tick(&self) -> u32 {
        self.acked
    }
    /// Player `id`'s position in the bot's newest world.
    pub fn position(&self, id: u16) -> Option<(i16, i16)> {
        self.worlds.get(self.acked)?.pos.get(usize::from(id)).copied().flatten()
    }

    fn on_snapshot(&mut self, r: &mut Reader<'_, Le>, rec: &mut Recorder) -> WireResult<()> {
        let (seq, tick, baseline) = (r.u32()?, r.u32()?, r.u32()?);
        let (last_input, seen) = (r.u32()?, r.u32()?);
        let n = usize::from(r.u8()?);
        let (e, got) = self.seqs.on_seq(seq).deltas();
        rec.loss_down.add(e, got);
        if tick <= self.acked {
            return Ok(()); // older than what we have: nothing new to apply
        }
        let mut w = match baseline {
            0 => {
                rec.event("full_snapshots");
                EMPTY
            }
            b => match self.worlds.get(b) {
                Some(w) => *w,
                None => {
                    rec.decode_error("snapshot", "baseline_missing");
                    return Ok(());
                }
            },
        };
        if baseline != 0 {
            rec.record_extra("baseline_age_ticks", u64::from(tick.saturating_sub(baseline)));
        }
        w.tick = tick;
        for _ in 0..n {
            let (id, x, y) = (usize::from(r.u16()?), r.i16()?, r.i16()?);
            let Some(slot) = w.pos.get_mut(id) else {
                rec.decode_error("snapshot", "player_id_out_of_range");
                return Ok(());
            };
            *slot = (x != GONE).then_some((x, y));
        }
        r.expect_end()?;
        // Upstream: inputs the server saw, against the highest sequence it saw.
        if last_input >= self.up.0 && seen >= self.up.1 {
            rec.loss_up.add(u64::from(last_input - self.up.0), u64::from(seen - self.up.1));
            self.up = (last_input, seen);
        }
        self.worlds.put(w);
        self.acked = tick;
        rec.snapshots_applied += 1;
        Ok(())
    }

    fn handle(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) -> WireResult<()> {
        let mut r = Reader::<Le>::new(data);
        match (r.u8()?, self.phase) {
            (msg::WELCOME, BotPhase::Connecting) if r.u32()? == self.nonce => {
                let _id = r.u16()?;
                self.handshake.end();
                self.phase = BotPhase::Connected;
                self.seqs.on_seq(0); // the server's snapshot seq starts at 1: a lost first counts
                if let Some(s) = self.started {
                    rec.record_handshake(now.saturating_duration_since(s).as_micros() as u64);
                }
                self.grid.start(now + self.params.phase_offset);
                self.ping.start_at(now);
            }
            (msg::SNAPSHOT, BotPhase::Connected) => self.on_snapshot(&mut r, rec)?,
            (msg::PONG, BotPhase::Connected) if r.u32()? == self.token => self.ping.on_pong(now, rec),
            (msg::WELCOME | msg::PONG, _) => rec.event("stale_reply"),
            (msg::SNAPSHOT, _) => rec.event("snapshot_outside_session"),
            _ => rec.decode_error("datagram", "unknown_type"),
        }
        Ok(())
    }
}

impl Bot for SkirmishBot {
    fn start(&mut self, now: Instant, _: &mut Recorder) {
        self.phase = BotPhase::Connecting;
        self.started = Some(now);
        self.handshake.begin(now, Some(self.params.handshake_retry), self.params.handshake_timeout);
        self.silence.arm(now);
        self.out.push_back(msg::HELLO);
    }
    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        self.silence.heard(now);
        if let Err(e) = self.handle(now, data, rec) {
            rec.decode_error("datagram", e.reason());
        }
    }
    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting if self.handshake.timed_out(now) => {
                self.phase = BotPhase::Failed;
                rec.connect_failures.add("timeout", 1);
            }
            BotPhase::Connecting if self.handshake.retry_due(now) => self.out.push_back(msg::HELLO),
            BotPhase::Connected if self.silence.expired(now) => {
                self.phase = BotPhase::Closed;
                rec.event("server_silence_timeout");
            }
            BotPhase::Connected => {
                if let Some(due) = self.grid.take_due(now, rec) {
                    rec.record_lateness(now.saturating_duration_since(due).as_micros() as u64);
                    let elapsed = now.saturating_duration_since(self.started.unwrap_or(now));
                    self.keys = self.pattern.sample(&self.params.pattern, elapsed, &mut self.rng).0;
                    self.out.push_back(msg::INPUT);
                    rec.inputs_sent += 1;
                }
                if self.ping.poll(now, rec) {
                    self.out.push_back(msg::PING);
                }
            }
            _ => {}
        }
    }
    fn stop(&mut self, _: Instant, _: &mut Recorder) {
        if self.phase == BotPhase::Connected {
            self.out.push_back(msg::BYE);
        }
        if !matches!(self.phase, BotPhase::Failed) {
            self.phase = BotPhase::Closed;
        }
        self.ping.stop();
    }
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let kind = self.out.pop_front()?;
        let mut w = Writer::<Le>::new(buf);
        let written = (|| -> WireResult<()> {
            w.u8(kind)?;
            match kind {
                msg::HELLO => (w.u8(VERSION)?, w.u32(self.nonce)?).1,
                msg::INPUT => {
                    self.input_seq += 1;
                    (w.u32(self.input_seq)?, w.u32(self.acked)?, w.u8(self.keys)?).2
                }
                msg::PING => {
                    self.token = self.token.wrapping_add(1);
                    w.u32(self.token)?
                }
                _ => {}
            }
            Ok(())
        })();
        written.ok().map(|()| Transmit::datagram(w.position()))
    }
    fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            BotPhase::Connecting => earliest([self.handshake.next_deadline(), self.silence.deadline()]),
            BotPhase::Connected => {
                earliest([self.grid.next_due(), self.ping.next(), self.silence.deadline()])
            }
            _ => None,
        }
    }
    fn phase(&self) -> BotPhase {
        self.phase
    }
}

struct Player {
    conn: ConnId,
    last_heard: Instant,
    keys: u8,
    acked: u32,
    seq: u32,
    last_input: u32,
    inputs_seen: u32,
}

enum Out {
    Welcome(usize, u32),
    Snapshot(usize),
    Pong(usize, u32),
}

/// The reference server: a 60 Hz world of up to [`MAX_PLAYERS`] players, one snapshot per
/// player per tick. Memory is bounded whatever clients send: fixed player slots, fixed history.
pub struct SkirmishServer {
    opts: Options,
    players: Vec<Option<Player>>,
    by_conn: HashMap<ConnId, usize>,
    worlds: Worlds,
    now_world: World,
    tick: Periodic,
    timeout: Duration,
    max: usize,
    out: VecDeque<Out>,
    stats: ServerStats,
}

impl SkirmishServer {
    /// A server whose first tick is one period after `now`.
    pub fn new(opts: Options, p: &ServerParams, now: Instant) -> Self {
        let mut tick = Periodic::new(Duration::from_secs_f64(1.0 / f64::from(p.tick_rate)));
        tick.start_at(now + tick.period());
        Self {
            opts,
            players: (0..MAX_PLAYERS).map(|_| None).collect(),
            by_conn: HashMap::with_capacity(MAX_PLAYERS),
            worlds: Worlds::new(),
            now_world: EMPTY,
            tick,
            timeout: p.client_timeout.0,
            max: p.max_clients.min(MAX_PLAYERS),
            out: VecDeque::with_capacity(MAX_PLAYERS * 2),
            stats: ServerStats::default(),
        }
    }

    /// Player `id`'s position at `tick`, while that world is in the history.
    pub fn position(&self, tick: u32, id: u16) -> Option<(i16, i16)> {
        self.worlds.get(tick)?.pos.get(usize::from(id)).copied().flatten()
    }

    fn on_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) -> WireResult<()> {
        let mut r = Reader::<Le>::new(data);
        let kind = r.u8()?;
        let slot = self.by_conn.get(&from).copied();
        match (kind, slot) {
            (msg::HELLO, _) => {
                let (version, nonce) = (r.u8()?, r.u32()?);
                let free = self.players.iter().position(Option::is_none);
                match (version, slot, free) {
                    (VERSION, Some(s), _) => self.out.push_back(Out::Welcome(s, nonce)),
                    (VERSION, None, Some(s)) if self.by_conn.len() < self.max => {
                        self.players[s] = Some(Player {
                            conn: from,
                            last_heard: now,
                            keys: 0,
                            acked: 0,
                            seq: 0,
                            last_input: 0,
                            inputs_seen: 0,
                        });
                        self.by_conn.insert(from, s);
                        self.now_world.pos[s] = Some((0, 0));
                        self.stats.accepted += 1;
                        self.out.push_back(Out::Welcome(s, nonce));
                    }
                    _ => self.stats.refused += 1,
                }
            }
            (msg::INPUT, Some(s)) => {
                let (seq, acked, keys) = (r.u32()?, r.u32()?, r.u8()?);
                if let Some(p) = self.players[s].as_mut() {
                    p.last_heard = now;
                    p.inputs_seen += 1;
                    if seq > p.last_input {
                        (p.last_input, p.keys, p.acked) = (seq, keys, acked.max(p.acked));
                    }
                }
            }
            (msg::PING, Some(s)) => self.out.push_back(Out::Pong(s, r.u32()?)),
            (msg::BYE, Some(s)) => {
                self.leave(s);
                self.stats.disconnected += 1;
            }
            (msg::INPUT | msg::PING | msg::BYE, None) => self.stats.dropped.add2("datagram", "no_session", 1),
            _ => self.stats.dropped.add2("datagram", "unknown_type", 1),
        }
        Ok(())
    }

    fn leave(&mut self, s: usize) {
        if let Some(p) = self.players[s].take() {
            self.by_conn.remove(&p.conn);
        }
        self.now_world.pos[s] = None;
    }

    fn step(&mut self, now: Instant) {
        for s in 0..MAX_PLAYERS {
            let Some(p) = self.players[s].as_ref() else {
                continue;
            };
            if now.saturating_duration_since(p.last_heard) > self.timeout {
                self.leave(s);
                self.stats.timed_out += 1;
                continue;
            }
            let k = Keys(p.keys);
            let dx = i16::from(k.0 & Keys::RIGHT != 0) - i16::from(k.0 & Keys::LEFT != 0);
            let dy = i16::from(k.0 & Keys::DOWN != 0) - i16::from(k.0 & Keys::UP != 0);
            if let Some((x, y)) = self.now_world.pos[s] {
                self.now_world.pos[s] = Some(((x + dx).clamp(-1000, 1000), (y + dy).clamp(-1000, 1000)));
            }
            self.out.push_back(Out::Snapshot(s));
        }
        self.now_world.tick += 1;
        self.worlds.put(self.now_world);
        self.stats.clients = self.by_conn.len();
        self.stats.connections = self.by_conn.len();
    }

    /// Writes `out` into `buf`: its destination and length, or `None` for a player gone.
    fn encode(&mut self, out: &Out, buf: &mut [u8]) -> WireResult<Option<(ConnId, usize)>> {
        let (Out::Welcome(s, _) | Out::Snapshot(s) | Out::Pong(s, _)) = *out;
        let Some(p) = self.players[s].as_mut() else {
            return Ok(None); // left since this was queued
        };
        let mut w = Writer::<Le>::new(buf);
        let mut n = 0u8;
        match *out {
            Out::Welcome(_, nonce) => {
                w.u8(msg::WELCOME)?;
                w.u32(nonce)?;
                w.u16(s as u16)?;
            }
            Out::Pong(_, token) => {
                w.u8(msg::PONG)?;
                w.u32(token)?;
            }
            Out::Snapshot(_) => {
                let now = &self.now_world;
                let base = self.worlds.get(p.acked).filter(|_| self.opts.dialect == Dialect::Delta);
                p.seq += 1;
                w.u8(msg::SNAPSHOT)?;
                for v in [p.seq, now.tick, base.map_or(0, |b| b.tick), p.last_input, p.inputs_seen] {
                    w.u32(v)?;
                }
                w.u8(0)?; // the count, at byte 21: set below
                let base_pos = base.map_or(&EMPTY.pos, |b| &b.pos);
                for (id, (a, b)) in now.pos.iter().zip(base_pos).enumerate() {
                    let (x, y) = match (a, b) {
                        (Some(xy), b) if b != a => *xy,
                        (None, Some(_)) => (GONE, 0),
                        _ => continue,
                    };
                    w.u16(id as u16)?;
                    w.i16(x)?;
                    w.i16(y)?;
                    n += 1;
                }
            }
        }
        let len = w.position();
        if let Out::Snapshot(_) = out {
            buf[21] = n;
        }
        Ok(Some((p.conn, len)))
    }
}

impl Server for SkirmishServer {
    fn handle_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) {
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += data.len() as u64;
        if let Err(e) = self.on_datagram(now, from, data) {
            self.stats.dropped.add2("datagram", e.reason(), 1);
        }
    }
    fn handle_timeout(&mut self, now: Instant) {
        while self.tick.fire(now) {
            self.step(now);
        }
    }
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
        while let Some(out) = self.out.pop_front() {
            if let Ok(Some((conn, len))) = self.encode(&out, buf) {
                self.stats.datagrams_out += 1;
                self.stats.bytes_out += len as u64;
                return Some((conn, Transmit::datagram(len)));
            }
        }
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.tick.next()
    }
    fn stats(&self) -> &ServerStats {
        &self.stats
    }
}
