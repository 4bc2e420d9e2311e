//! A small reference server of the implementation dialect, for `target: embedded` and
//! `tickswarm serve darkages --dialect implementation`: the public server's wire and the
//! rules a load test meets (docs/protocols/darkages.md, "Dialect `implementation`").
//!
//! - CONNECT from a connection it does not hold: admitted (up to `max_clients`), answered
//!   with the reply; from one it holds: no reply, as the public server does. Refusals get
//!   no reply either (`refused`). A full server gives the slot of an unproven session to a
//!   new CONNECT ([`admission`](super::admission), rule 3).
//! - 60 Hz ticks; every 3rd tick (20 Hz) each client gets a full snapshot: its own entity
//!   first, then up to [`MAX_OTHERS`] others nearest first (a snapshot fits a 1500-byte
//!   buffer), `last_input_seq` = the newest input applied.
//! - Nothing goes to a session that has not proven its address beyond the bytes it sent
//!   ([`admission`](super::admission)): the reply is the 6 bytes the client reads and a
//!   snapshot is cut to the credit left, so a forged CONNECT is not a reflector.
//! - PING answered with PONG at once; INPUT applied (the newest per tick moves the player);
//!   more than 65 inputs in a one-second window: DISCONNECT `[6][19]` ("Rate limit
//!   exceeded") and the connection is closed.
//! - A client silent for 30 s is dropped without a word; one never proven, after 2 s
//!   without a datagram other than CONNECT.
//!
//! It sees connections, not addresses (the transport hands it [`ConnId`]s), so the public
//! server's per-address and per-/24 admission tables are not modelled here; the test peer
//! in `tests/peers/darkages-implementation/` models them.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use super::admission::Admission;
use super::codec::{self, flag, len, ClientPacket, Entity};
use crate::protocol::prelude::wire::{Le, Writer};
use crate::protocol::prelude::ServerStats;
use crate::protocol::prelude::{ConnId, Server, Transmit};

/// Other entities in one snapshot at most (own + 13 records = 1,455 bytes).
pub const MAX_OTHERS: usize = 13;
/// Inputs a client may send in its one-second window (60 a second with a burst of 5).
pub const MAX_INPUTS_PER_WINDOW: u32 = 65;
const TICK: Duration = Duration::from_nanos(1_000_000_000 / 60);
const TICKS_PER_SNAPSHOT: u64 = 3;
const SILENCE: Duration = Duration::from_secs(30);
const SPEED: f32 = 6.0;
const KICK_REASON: &str = "Rate limit exceeded";

#[derive(Debug, Clone, Copy)]
enum Pending {
    Reply(ConnId),
    Pong(ConnId, u32),
    /// The snapshot of this tick (encoded when polled, from the state then).
    Snapshot(ConnId, u32),
    Kick(ConnId),
}

#[derive(Debug, Clone)]
struct Client {
    entity: u32,
    pos: [f32; 3],
    vel: [f32; 3],
    last_input_seq: u32,
    /// The newest input of this tick, applied at the tick.
    input: Option<(u16, f32)>,
    last_heard: Instant,
    window_start: Instant,
    window_inputs: u32,
    /// Address proof: the byte budget until the client has paid for it.
    adm: Admission,
}

/// The reference server. See the module docs.
pub struct ImplementationServer {
    max_clients: usize,
    clients: BTreeMap<ConnId, Client>,
    next_entity: u32,
    tick: u64,
    next_tick: Instant,
    out: VecDeque<Pending>,
    close: VecDeque<ConnId>,
    stats: ServerStats,
    scratch: Vec<(f32, ConnId)>,
}

impl ImplementationServer {
    pub fn new(max_clients: usize, now: Instant) -> Self {
        Self {
            max_clients: max_clients.max(1),
            clients: BTreeMap::new(),
            next_entity: 1,
            tick: 0,
            next_tick: now + TICK,
            out: VecDeque::new(),
            close: VecDeque::new(),
            stats: ServerStats::default(),
            scratch: Vec::new(),
        }
    }

    fn on_input(&mut self, now: Instant, from: ConnId, i: codec::Input) {
        let Some(c) = self.clients.get_mut(&from) else {
            self.stats.dropped.add2("input", "no_session", 1);
            return;
        };
        if now.saturating_duration_since(c.window_start) > Duration::from_secs(1) {
            c.window_start = now;
            c.window_inputs = 1;
        } else {
            c.window_inputs += 1;
        }
        if c.window_inputs > MAX_INPUTS_PER_WINDOW {
            // The DISCONNECT is paid for here (the session is gone when it is polled).
            let say = c.adm.spend(len::DISCONNECT);
            self.stats.events.add("kicked_input_rate", 1);
            self.stats.disconnected += 1;
            self.clients.remove(&from);
            if say {
                self.out.push_back(Pending::Kick(from));
            } else {
                self.close.push_back(from);
            }
            return;
        }
        c.last_input_seq = i.sequence;
        c.input = Some((i.flags, i.yaw));
        self.stats.events.add("inputs_applied", 1);
    }

    fn step(&mut self, now: Instant) {
        self.tick += 1;
        let dt = TICK.as_secs_f32();
        for c in self.clients.values_mut() {
            if let Some((flags, yaw)) = c.input.take() {
                let b = |f: u16| if flags & f != 0 { 1.0f32 } else { 0.0 };
                let fwd = b(flag::FORWARD) - b(flag::BACKWARD);
                let strafe = b(flag::RIGHT) - b(flag::LEFT);
                let (s, co) = yaw.sin_cos();
                c.vel = [
                    (fwd * co + strafe * s) * SPEED,
                    0.0,
                    (fwd * s - strafe * co) * SPEED,
                ];
            }
            for (p, v) in c.pos.iter_mut().zip(c.vel) {
                *p = (*p + v * dt).clamp(-5000.0, 5000.0);
            }
        }
        let mut silent = Vec::new();
        let mut unproven = Vec::new();
        for (id, c) in self.clients.iter_mut() {
            c.adm.roll(now);
            if now.saturating_duration_since(c.last_heard) > SILENCE {
                silent.push(*id);
            } else if c.adm.expired(now) {
                unproven.push(*id);
            }
        }
        for id in silent {
            self.clients.remove(&id);
            self.stats.timed_out += 1;
            self.close.push_back(id);
        }
        for id in unproven {
            self.clients.remove(&id);
            self.stats.timed_out += 1;
            self.close.push_back(id);
        }
        if self.tick % TICKS_PER_SNAPSHOT == 0 {
            for id in self.clients.keys() {
                self.out.push_back(Pending::Snapshot(*id, self.tick as u32));
            }
        }
        self.stats.clients = self.clients.len();
        self.stats.connections = self.clients.len();
    }

    fn entity_of(c: &Client) -> Entity {
        let mut prompt = [0u8; 64];
        prompt[..19].copy_from_slice(b"Press E to interact");
        Entity {
            id: c.entity,
            pos: c.pos,
            vel: c.vel,
            health: 100,
            anim: 0,
            kind: 0,
            interaction_range: 0.0,
            prompt,
            dialogue: 0,
        }
    }

    /// The snapshot for `to`, cut to its credit while it is unproven: the header, then as
    /// many records (its own first) as the credit covers. `None` when not even the header
    /// fits (or `to` is gone).
    fn encode_snapshot(&mut self, buf: &mut [u8], to: ConnId, tick: u32) -> Option<usize> {
        let me = self.clients.get(&to)?;
        let limit = me.adm.credit().min(buf.len());
        let records = limit.checked_sub(len::SNAPSHOT_HEADER)? / len::ENTITY;
        self.scratch.clear();
        for (id, c) in &self.clients {
            if *id != to {
                let d = (c.pos[0] - me.pos[0]).powi(2) + (c.pos[2] - me.pos[2]).powi(2);
                self.scratch.push((d, *id));
            }
        }
        let n = self
            .scratch
            .len()
            .min(MAX_OTHERS)
            .min(records.saturating_sub(1));
        if n < self.scratch.len() {
            self.scratch
                .select_nth_unstable_by(n, |a, b| a.0.total_cmp(&b.0));
        }
        self.scratch.truncate(n);
        let own = usize::from(records > 0);
        let mut w = Writer::<Le>::new(buf);
        codec::encode_snapshot_header(&mut w, tick, me.last_input_seq, (n + own) as u32).ok()?;
        if own == 1 {
            codec::encode_entity(&mut w, &Self::entity_of(me)).ok()?;
        }
        for &(_, id) in &self.scratch {
            if let Some(c) = self.clients.get(&id) {
                codec::encode_entity(&mut w, &Self::entity_of(c)).ok()?;
            }
        }
        Some(w.position())
    }
}

impl ImplementationServer {
    /// Take `n` bytes to `to` from its budget; counted as withheld when they do not fit.
    fn spend(&mut self, to: ConnId, n: usize) -> bool {
        let ok = self.clients.get_mut(&to).is_some_and(|c| c.adm.spend(n));
        if !ok {
            self.stats.events.add("unproven_budget_withheld", 1);
        }
        ok
    }

    /// A full server's room for a new CONNECT: the least recently heard unproven session
    /// admitted long enough ago is dropped. `false` when there is none.
    fn evict_unproven(&mut self, now: Instant) -> bool {
        let Some(id) = self
            .clients
            .iter()
            .filter(|(_, c)| c.adm.evictable(now))
            .min_by_key(|(_, c)| c.adm.last_paid())
            .map(|(id, _)| *id)
        else {
            return false;
        };
        self.clients.remove(&id);
        self.stats.events.add("unproven_evicted", 1);
        self.close.push_back(id);
        true
    }
}

impl Server for ImplementationServer {
    fn handle_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) {
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += data.len() as u64;
        let p = match codec::decode_client(data) {
            Ok(p) => p,
            Err(e) => {
                self.stats.dropped.add2(e.message, e.reason, 1);
                return;
            }
        };
        let connect = matches!(p, ClientPacket::Connect { .. });
        if let Some(c) = self.clients.get_mut(&from) {
            c.last_heard = now;
            c.adm.on_datagram(now, data.len(), connect);
        }
        match p {
            ClientPacket::Connect { .. } => {
                if self.clients.contains_key(&from) {
                    self.stats.events.add("connect_repeated_unanswered", 1);
                } else if self.clients.len() >= self.max_clients && !self.evict_unproven(now) {
                    self.stats.refused += 1;
                } else {
                    let entity = self.next_entity;
                    self.next_entity += 1;
                    let x = (entity % 32) as f32 * 4.0;
                    self.clients.insert(
                        from,
                        Client {
                            entity,
                            pos: [x, 0.0, 0.0],
                            vel: [0.0; 3],
                            last_input_seq: 0,
                            input: None,
                            last_heard: now,
                            window_start: now,
                            window_inputs: 0,
                            adm: Admission::new(now, data.len()),
                        },
                    );
                    self.stats.accepted += 1;
                    self.out.push_back(Pending::Reply(from));
                }
            }
            ClientPacket::Input(i) => self.on_input(now, from, i),
            ClientPacket::Ping(t) => {
                if self.clients.contains_key(&from) {
                    self.out.push_back(Pending::Pong(from, t));
                } else {
                    self.stats.dropped.add2("ping", "no_session", 1);
                }
            }
            ClientPacket::Other(t) => {
                self.stats
                    .events
                    .add2("ignored", codec::game_message_name(t), 1)
            }
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        // Catch up at most a second of ticks; the rest is skipped and counted.
        let mut n = 0;
        while self.next_tick <= now {
            if n < 60 {
                self.step(now);
            } else {
                self.stats.events.add("ticks_skipped", 1);
                self.tick += 1;
            }
            n += 1;
            self.next_tick += TICK;
        }
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
        while let Some(p) = self.out.pop_front() {
            let sent = match p {
                Pending::Reply(to) => self
                    .clients
                    .get(&to)
                    .and_then(|c| codec::encode_connect_reply_short(buf, c.entity).ok())
                    .filter(|&n| self.spend(to, n))
                    .map(|n| (to, n)),
                Pending::Pong(to, t) => codec::encode_pong(buf, t)
                    .ok()
                    .filter(|&n| self.spend(to, n))
                    .map(|n| (to, n)),
                Pending::Snapshot(to, tick) => match self.encode_snapshot(buf, to, tick) {
                    Some(n) if self.spend(to, n) => Some((to, n)),
                    Some(_) => None,
                    None => {
                        if self.clients.contains_key(&to) {
                            self.stats.events.add("unproven_budget_withheld", 1);
                        }
                        None
                    }
                },
                Pending::Kick(to) => {
                    self.close.push_back(to);
                    codec::encode_disconnect(buf, KICK_REASON)
                        .ok()
                        .map(|n| (to, n))
                }
            };
            if let Some((to, n)) = sent {
                self.stats.datagrams_out += 1;
                self.stats.bytes_out += n as u64;
                return Some((to, Transmit::datagram(n)));
            }
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_tick)
    }

    fn stats(&self) -> &ServerStats {
        &self.stats
    }

    fn poll_close(&mut self) -> Option<ConnId> {
        self.close.pop_front()
    }
}
