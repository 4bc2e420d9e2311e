//! The Skirmish reference server.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tickswarm::api::baselines::Baselines;
use tickswarm::api::session::SessionTable;
use tickswarm::api::timers::Periodic;
use tickswarm::api::wire::{Le, Reader, WireResult, Writer};
use tickswarm::api::*;

use crate::codec::*;
use crate::{Dialect, Options};

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
