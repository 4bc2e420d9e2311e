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
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tickswarm::api::baselines::Baselines;
use tickswarm::api::lifecycle::{Due, Lifecycle};
use tickswarm::api::reported::ReportedLoss;
use tickswarm::api::seqwindow::SeqWindow;
use tickswarm::api::session::SessionTable;
use tickswarm::api::timers::Periodic;
use tickswarm::api::wire::{Le, Reader, WireResult, Writer};
use tickswarm::api::*;

/// A decode failure's reason, counted as `datagram.<reason>` (wire errors convert with `?`).
type Decoded = Result<(), &'static str>;

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
type World = [Option<(i16, i16)>; MAX_PLAYERS];
const EMPTY: World = [None; MAX_PLAYERS];

/// A simulated Skirmish player: its messages; the lifecycle (handshake, silence, input grid,
/// ping) is tickswarm's.
pub struct SkirmishBot {
    life: Lifecycle,
    nonce: u32,
    worlds: Baselines<World, HISTORY>,
    acked: u32,
    seqs: SeqWindow,
    up: ReportedLoss,
    input_seq: u32,
    token: u32,
    /// Messages to send: their type, and the keys of an Input.
    out: VecDeque<(u8, u8)>,
}

impl SkirmishBot {
    /// A bot not yet started.
    pub fn new(params: BotParams) -> Self {
        let mut life = Lifecycle::new(params);
        Self {
            nonce: life.rng().next_u32() | 1,
            life,
            worlds: Baselines::new(),
            acked: 0,
            seqs: SeqWindow::new(),
            up: ReportedLoss::new(),
            input_seq: 0,
            token: 0,
            out: VecDeque::with_capacity(8),
        }
    }
    /// The last tick this bot applied (and acknowledges).
    pub fn acked_tick(&self) -> u32 {
        self.acked
    }
    /// Player `id`'s position in the bot's newest world.
    pub fn position(&self, id: u16) -> Option<(i16, i16)> {
        *self.worlds.get(self.acked)?.get(usize::from(id))?
    }

    fn on_snapshot(&mut self, r: &mut Reader<'_, Le>, rec: &mut Recorder) -> Decoded {
        let [seq, tick, baseline, last_input, seen] = [r.u32()?, r.u32()?, r.u32()?, r.u32()?, r.u32()?];
        let (e, got) = self.seqs.on_seq(seq).deltas();
        rec.loss_down.add(e, got);
        if tick <= self.acked {
            return Ok(()); // older than what we have: nothing new to apply
        }
        let mut w = match (baseline, self.worlds.get(baseline)) {
            (0, _) => EMPTY,
            (_, Some(w)) => *w,
            (_, None) => return Err("baseline_missing"),
        };
        for _ in 0..r.u8()? {
            let (id, x, y) = (usize::from(r.u16()?), r.i16()?, r.i16()?);
            *w.get_mut(id).ok_or("player_id_out_of_range")? = (x != GONE).then_some((x, y));
        }
        r.expect_end()?;
        match baseline {
            0 => rec.event("full_snapshots"),
            b => rec.record_extra("baseline_age_ticks", u64::from(tick.saturating_sub(b))),
        }
        self.up.on_report(last_input, seen, rec);
        self.worlds.put(tick, w);
        self.acked = tick;
        rec.snapshots_applied += 1;
        Ok(())
    }

    fn handle(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) -> Decoded {
        let mut r = Reader::<Le>::new(data);
        match (r.u8()?, self.life.phase()) {
            (msg::WELCOME, BotPhase::Connecting) if r.u32()? == self.nonce => {
                let _id = r.u16()?;
                self.life.accepted(now, rec);
                self.seqs.on_seq(0); // the server's snapshot seq starts at 1: a lost first counts
            }
            (msg::SNAPSHOT, BotPhase::Connected) => self.on_snapshot(&mut r, rec)?,
            (msg::PONG, BotPhase::Connected) if r.u32()? == self.token => self.life.on_pong(now, rec),
            (msg::WELCOME | msg::PONG, _) => rec.event("stale_reply"),
            (msg::SNAPSHOT, _) => rec.event("snapshot_outside_session"),
            _ => return Err("unknown_type"),
        }
        Ok(())
    }
}

impl Bot for SkirmishBot {
    fn start(&mut self, now: Instant, _: &mut Recorder) {
        self.life.start(now);
        self.out.push_back((msg::HELLO, 0));
    }
    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        self.life.heard(now);
        if let Err(e) = self.handle(now, data, rec) {
            rec.decode_error("datagram", e);
        }
    }
    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        while let Some(due) = self.life.poll(now, rec) {
            self.out.push_back(match due {
                Due::Hello => (msg::HELLO, 0),
                Due::Input(keys) => (msg::INPUT, keys.0),
                Due::Ping => (msg::PING, 0),
            });
        }
    }
    fn stop(&mut self, _: Instant, _: &mut Recorder) {
        if self.life.stop() {
            self.out.push_back((msg::BYE, 0));
        }
    }
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let (kind, keys) = self.out.pop_front()?;
        let mut w = Writer::<Le>::new(buf);
        w.u8(kind).ok()?;
        match kind {
            msg::HELLO => (w.u8(VERSION).ok()?, w.u32(self.nonce).ok()?).1,
            msg::INPUT => {
                self.input_seq += 1;
                (w.u32(self.input_seq).ok()?, w.u32(self.acked).ok()?, w.u8(keys).ok()?).2
            }
            msg::PING => {
                self.token = self.token.wrapping_add(1);
                w.u32(self.token).ok()?
            }
            _ => {}
        }
        Some(Transmit::datagram(w.position()))
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.life.next_timeout()
    }
    fn phase(&self) -> BotPhase {
        self.life.phase()
    }
}

/// The server's state of one player (its slot in the session table is its id).
#[derive(Default)]
struct Player {
    keys: u8,
    acked: u32,
    seq: u32,
    last_input: u32,
    inputs_seen: u32,
}

/// What to send, queued as a small copy (no allocation per datagram).
enum Out {
    Welcome(ConnId, u32),
    Snapshot(ConnId),
    Pong(ConnId, u32),
}

/// The reference server: a 60 Hz world of up to [`MAX_PLAYERS`] players, one snapshot per
/// player per tick. Memory is bounded whatever clients send: fixed player slots, fixed history.
pub struct SkirmishServer {
    opts: Options,
    players: SessionTable<Player>,
    worlds: Baselines<World, HISTORY>,
    world: World,
    tick_no: u32,
    tick: Periodic,
    timeout: Duration,
    max: usize,
    out: VecDeque<Out>,
    expired: Vec<usize>,
    stats: ServerStats,
}

impl SkirmishServer {
    /// A server whose first tick is one period after `now`.
    pub fn new(opts: Options, p: &ServerParams, now: Instant) -> Self {
        let mut tick = Periodic::new(Duration::from_secs_f64(1.0 / f64::from(p.tick_rate)));
        tick.start_at(now + tick.period());
        Self {
            opts,
            players: SessionTable::new(),
            worlds: Baselines::new(),
            world: EMPTY,
            tick_no: 0,
            tick,
            timeout: p.client_timeout.0,
            max: p.max_clients.min(MAX_PLAYERS),
            out: VecDeque::with_capacity(MAX_PLAYERS * 2),
            expired: Vec::with_capacity(MAX_PLAYERS),
            stats: ServerStats::default(),
        }
    }

    /// Player `id`'s position at `tick`, while that world is in the history.
    pub fn position(&self, tick: u32, id: u16) -> Option<(i16, i16)> {
        *self.worlds.get(tick)?.get(usize::from(id))?
    }

    fn on_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) -> Decoded {
        let mut r = Reader::<Le>::new(data);
        let (kind, slot) = (r.u8()?, self.players.slot_of(from));
        match (kind, slot) {
            (msg::HELLO, _) => match (r.u8()?, r.u32()?, slot) {
                (VERSION, nonce, Some(_)) => self.out.push_back(Out::Welcome(from, nonce)),
                (VERSION, nonce, None) if self.players.len() < self.max => {
                    let s = self.players.insert(from, now, Player::default());
                    self.world[s] = Some((0, 0));
                    self.stats.accepted += 1;
                    self.out.push_back(Out::Welcome(from, nonce));
                }
                _ => {
                    self.stats.refused += 1;
                    self.players.close(from); // the transport may forget it
                }
            },
            (msg::INPUT, Some(s)) => {
                let (seq, acked, keys) = (r.u32()?, r.u32()?, r.u8()?);
                self.players.touch(s, now);
                self.players.prove(s); // its first Input shows it receives (no unproven expiry)
                if let Some(p) = self.players.state_mut(s) {
                    p.inputs_seen += 1;
                    if seq > p.last_input {
                        (p.last_input, p.keys, p.acked) = (seq, keys, acked.max(p.acked));
                    }
                }
            }
            (msg::PING, Some(_)) => self.out.push_back(Out::Pong(from, r.u32()?)),
            (msg::BYE, Some(s)) => {
                self.players.remove(s);
                self.world[s] = None;
                self.stats.disconnected += 1;
            }
            (msg::INPUT | msg::PING | msg::BYE, None) => return Err("no_session"),
            _ => return Err("unknown_type"),
        }
        Ok(())
    }

    fn step(&mut self, now: Instant) {
        self.players.expired_into(now, self.timeout, &mut self.expired);
        for &s in &self.expired {
            self.players.remove(s);
            self.world[s] = None;
            self.stats.timed_out += 1;
        }
        for (s, p) in self.players.iter() {
            let k = p.state.keys;
            let dx = i16::from(k & Keys::RIGHT != 0) - i16::from(k & Keys::LEFT != 0);
            let dy = i16::from(k & Keys::DOWN != 0) - i16::from(k & Keys::UP != 0);
            if let Some((x, y)) = self.world[s] {
                self.world[s] = Some(((x + dx).clamp(-1000, 1000), (y + dy).clamp(-1000, 1000)));
            }
            self.out.push_back(Out::Snapshot(p.conn));
        }
        self.tick_no += 1;
        self.worlds.put(self.tick_no, self.world);
        (self.stats.clients, self.stats.connections) = (self.players.len(), self.players.len());
    }

    /// Writes `out` into `w`; `None` for a player gone since it was queued.
    fn encode(&mut self, out: Out, w: &mut Writer<'_, Le>) -> WireResult<Option<ConnId>> {
        let (Out::Welcome(to, _) | Out::Snapshot(to) | Out::Pong(to, _)) = out;
        let Some(s) = self.players.slot_of(to) else { return Ok(None) };
        match out {
            Out::Welcome(_, nonce) => (w.u8(msg::WELCOME)?, w.u32(nonce)?, w.u16(s as u16)?).2,
            Out::Pong(_, token) => (w.u8(msg::PONG)?, w.u32(token)?).1,
            Out::Snapshot(_) => {
                let Some(p) = self.players.state_mut(s) else { return Ok(None) };
                let base = self.worlds.get(p.acked).filter(|_| self.opts.dialect == Dialect::Delta);
                p.seq += 1;
                w.u8(msg::SNAPSHOT)?;
                let baseline = base.map_or(0, |_| p.acked);
                for v in [p.seq, self.tick_no, baseline, p.last_input, p.inputs_seen] {
                    w.u32(v)?;
                }
                let changes = || {
                    let pairs = self.world.iter().zip(base.unwrap_or(&EMPTY)).enumerate();
                    pairs.filter_map(|(id, (now, then))| match (now, then) {
                        (Some(xy), _) if now != then => Some((id as u16, *xy)),
                        (None, Some(_)) => Some((id as u16, (GONE, 0))),
                        _ => None,
                    })
                };
                w.u8(changes().count() as u8)?; // at most MAX_PLAYERS
                for (id, (x, y)) in changes() {
                    w.u16(id)?;
                    w.i16(x)?;
                    w.i16(y)?;
                }
            }
        }
        Ok(Some(to))
    }
}

impl Server for SkirmishServer {
    fn handle_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) {
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += data.len() as u64;
        if let Err(e) = self.on_datagram(now, from, data) {
            self.stats.dropped.add2("datagram", e, 1);
        }
    }
    fn handle_timeout(&mut self, now: Instant) {
        while self.tick.fire(now) {
            self.step(now);
        }
    }
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
        while let Some(out) = self.out.pop_front() {
            let mut w = Writer::<Le>::new(buf);
            if let Ok(Some(to)) = self.encode(out, &mut w) {
                self.stats.datagrams_out += 1;
                self.stats.bytes_out += w.position() as u64;
                return Some((to, Transmit::datagram(w.position())));
            }
        }
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.tick.next()
    }
    fn poll_close(&mut self) -> Option<ConnId> {
        self.players.poll_close()
    }
    fn stats(&self) -> &ServerStats {
        &self.stats
    }
}
