//! A reference server with the POC-2 benchmark's rules, for embedded runs and tests.
//!
//! Every ENet peer that connects is streamed to, unasked: a FullSnapshot on the next tick
//! (reliable, channel 1), then every tick a DeltaSnapshot (unsequenced, channel 2) of every
//! entity changed since that peer's last newer ack, with the world's FNV-1a checksum. An ack
//! (type 3) newer than the last clears the peer's pending changes; a ResyncRequest (type 4)
//! gets a FullSnapshot on the next tick. Only channel-0 messages are read, as the real server
//! does. Each tick changes 2% of the entities (at least one).
//!
//! Its world is smaller than the real one's 50,000 entities (default 1,000) so a
//! FullSnapshot fits one transmit (64 KiB) and deltas stay under ENet's fragment size.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::codec::{self, ty, CHANNEL_DELTA, CHANNEL_FULL, ENTITY_BYTES};
use crate::protocol::prelude::session::TickClock;
use crate::protocol::prelude::ServerStats;
use crate::protocol::prelude::{ConnId, Server, Transmit};

#[derive(Debug, Clone)]
pub struct BenchmarkServerConfig {
    pub entities: u32,
    pub tick_interval: Duration,
    /// ENet peers the host takes (the real one: 8).
    pub max_clients: usize,
}

impl Default for BenchmarkServerConfig {
    fn default() -> Self {
        Self {
            entities: 1000,
            tick_interval: Duration::from_millis(50),
            max_clients: 8,
        }
    }
}

struct Client {
    conn: ConnId,
    needs_full: bool,
    last_acked: u32,
    /// Per entity, the fields changed since the last ack cleared them.
    pending: Vec<u8>,
}

pub struct BenchmarkServer {
    cfg: BenchmarkServerConfig,
    clock: TickClock,
    tick: u32,
    rng: u32,
    /// Positions then data components (the FullSnapshot body after `count`).
    world: Vec<u8>,
    dirty: Vec<u8>,
    clients: Vec<Client>,
    /// (client index, message type, tick) to encode at the next poll.
    out: VecDeque<(usize, u8, u32)>,
    body: Vec<u8>,
    stats: ServerStats,
}

impl BenchmarkServer {
    pub fn new(cfg: BenchmarkServerConfig, now: Instant) -> Self {
        let n = cfg.entities.clamp(1, codec::MAX_ENTITIES as u32) as usize;
        let mut s = Self {
            clock: TickClock::new(now, cfg.tick_interval),
            cfg,
            tick: 0,
            rng: 42,
            world: vec![0; n * ENTITY_BYTES],
            dirty: vec![0; n],
            clients: Vec::new(),
            out: VecDeque::new(),
            body: Vec::with_capacity(4 + n * ENTITY_BYTES),
            stats: ServerStats::default(),
        };
        for i in 0..n {
            for f in 0..6 {
                let v = s.next_rng();
                s.set_field(i, f, v % 10_000);
            }
        }
        s
    }

    fn next_rng(&mut self) -> u32 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 17;
        self.rng ^= self.rng << 5;
        self.rng
    }

    fn n(&self) -> usize {
        self.dirty.len()
    }

    fn field_at(&self, id: usize, f: usize) -> usize {
        if f < 3 {
            id * 12 + f * 4
        } else {
            self.n() * 12 + id * 12 + (f - 3) * 4
        }
    }

    fn set_field(&mut self, id: usize, f: usize, v: u32) {
        let at = self.field_at(id, f);
        self.world[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn run_tick(&mut self) {
        self.tick = self.tick.wrapping_add(1);
        self.dirty.fill(0);
        let n = self.n();
        for _ in 0..(n / 50).max(1) {
            let id = self.next_rng() as usize % n;
            let f = self.next_rng() as usize % 6;
            let v = self.next_rng();
            self.set_field(id, f, v);
            self.dirty[id] |= 1 << f;
        }
        for (i, c) in self.clients.iter_mut().enumerate() {
            if c.needs_full {
                c.needs_full = false;
                c.last_acked = self.tick;
                c.pending.fill(0);
                self.out.push_back((i, ty::FULL_SNAPSHOT, self.tick));
            } else {
                for (p, d) in c.pending.iter_mut().zip(&self.dirty) {
                    *p |= d;
                }
                if c.pending.iter().any(|&p| p != 0) {
                    self.out.push_back((i, ty::DELTA_SNAPSHOT, self.tick));
                }
            }
        }
    }

    fn encode(&mut self, i: usize, t: u8, tick: u32, buf: &mut [u8]) -> Option<Transmit> {
        self.body.clear();
        let n = self.n();
        if t == ty::FULL_SNAPSHOT {
            self.body.extend_from_slice(&(n as u32).to_le_bytes());
            self.body.extend_from_slice(&self.world);
        } else {
            let c = self.clients.get(i)?;
            self.body
                .extend_from_slice(&codec::fnv1a(&self.world).to_le_bytes());
            let count = c.pending.iter().filter(|&&p| p != 0).count().min(0xFFFF);
            self.body.extend_from_slice(&(count as u16).to_le_bytes());
            for (id, &mask) in c
                .pending
                .iter()
                .enumerate()
                .filter(|(_, &p)| p != 0)
                .take(count)
            {
                self.body.extend_from_slice(&(id as u16).to_le_bytes());
                self.body.push(mask);
                for f in 0..6 {
                    if mask & (1 << f) != 0 {
                        let at = self.field_at(id, f);
                        let v = [
                            self.world[at],
                            self.world[at + 1],
                            self.world[at + 2],
                            self.world[at + 3],
                        ];
                        self.body.extend_from_slice(&v);
                    }
                }
            }
        }
        let len = codec::encode_compressed(buf, t, tick, &self.body).ok()?;
        let (channel, reliable) = if t == ty::FULL_SNAPSHOT {
            (CHANNEL_FULL, true)
        } else {
            (CHANNEL_DELTA, false)
        };
        Some(Transmit {
            len,
            channel,
            reliable,
        })
    }
}

impl Server for BenchmarkServer {
    fn handle_datagram(&mut self, _now: Instant, from: ConnId, data: &[u8]) {
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += data.len() as u64;
        let Ok(h) = codec::Header::parse(data) else {
            self.stats.dropped.add("header.bad", 1);
            return;
        };
        let Some(c) = self.clients.iter_mut().find(|c| c.conn == from) else {
            return;
        };
        match h.ty {
            ty::SNAPSHOT_ACK if h.sequence > c.last_acked => {
                c.last_acked = h.sequence;
                c.pending.fill(0);
                self.stats.events.add("acks", 1);
            }
            ty::SNAPSHOT_ACK => self.stats.events.add("acks_not_newer", 1),
            ty::RESYNC_REQUEST => {
                c.needs_full = true;
                self.stats.events.add("resync_requests", 1);
            }
            _ => self.stats.dropped.add("header.unknown_type", 1),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.clock.due(now) > 0 {
            self.run_tick();
        }
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
        while let Some((i, t, tick)) = self.out.pop_front() {
            if let Some(tx) = self.encode(i, t, tick, buf) {
                self.stats.datagrams_out += 1;
                self.stats.bytes_out += tx.len as u64;
                return Some((self.clients[i].conn, tx));
            }
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.clock.next_deadline())
    }

    fn stats(&self) -> &ServerStats {
        &self.stats
    }

    fn handle_connect(&mut self, _now: Instant, from: ConnId) {
        if self.clients.len() >= self.cfg.max_clients {
            self.stats.refused += 1;
            return;
        }
        self.stats.accepted += 1;
        self.clients.push(Client {
            conn: from,
            needs_full: true,
            last_acked: 0,
            pending: vec![0; self.n()],
        });
        self.stats.clients = self.clients.len();
        self.stats.connections = self.clients.len();
    }

    fn handle_disconnect(&mut self, _now: Instant, from: ConnId) {
        if let Some(i) = self.clients.iter().position(|c| c.conn == from) {
            self.clients.remove(i);
            // Queued messages name clients by index: drop them rather than misdeliver.
            self.out.clear();
            self.stats.disconnected += 1;
        }
        self.stats.clients = self.clients.len();
        self.stats.connections = self.clients.len();
    }
}
