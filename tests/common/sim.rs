//! A deterministic simulation of N cafe bots and one cafe server, in one thread, on a
//! simulated clock, joined by a simulated link. No socket, no sleep, no randomness.
//!
//! - Clock: an `Instant` taken once as the origin; simulated time is an offset from it and
//!   only moves when the event loop jumps to the next event.
//! - Link: one [`Path`] per direction with a one-way delay and deterministic impairments
//!   (drop, duplicate, hold back = reorder), each a [`Rule`] deciding from the datagram's
//!   position, peer, time and bytes.
//! - Event loop: jump to the earliest of (datagram arrival, server timeout, bot timeouts);
//!   deliver every datagram due, then the server's timeout, then each bot's, in bot order;
//!   after every call drain `poll_transmit` (into buffers of `MAX_DATAGRAM`) onto the link.
//! - Log: every datagram the link took, with its bytes, fate and arrival times. Tests read
//!   their ground truth from it (header fields are read by hand here, not by the codec).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use tickswarm::metrics::Recorder;
use tickswarm::protocol::cafe::{CafeBot, CafeOptions, CafeServer, CafeServerConfig};
use tickswarm::protocol::{Bot, BotParams, ConnId, Server, MAX_DATAGRAM};

/// Message type bytes, from cafe.md.
pub const HELLO: u8 = 0;
pub const WELCOME: u8 = 1;
pub const INPUT: u8 = 2;
pub const SNAPSHOT: u8 = 3;
pub const PING: u8 = 4;
pub const DISCONNECT: u8 = 5;

pub fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub fn le_f32(b: &[u8], at: usize) -> f32 {
    f32::from_bits(le_u32(b, at))
}

/// Read by hand from the header: type byte.
pub fn msg_type(b: &[u8]) -> u8 {
    b[3]
}

/// Read by hand from the header: seq.
pub fn seq(b: &[u8]) -> u32 {
    le_u32(b, 4)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Bot to server.
    Up,
    /// Server to bot.
    Down,
}

/// What a rule sees of one datagram as the link takes it.
pub struct Meta<'a> {
    pub dir: Dir,
    pub bot: usize,
    /// Position among all datagrams of this direction, from 0.
    pub index: u64,
    /// Position among the datagrams of this direction to or from this bot, from 0.
    pub peer_index: u64,
    /// Simulated time of sending.
    pub at: Duration,
    pub bytes: &'a [u8],
}

impl Meta<'_> {
    pub fn msg_type(&self) -> u8 {
        msg_type(self.bytes)
    }
}

/// Decides, for each datagram, whether an impairment applies.
pub type Rule = Box<dyn FnMut(&Meta<'_>) -> bool>;

/// The k-th, 2k-th, 3k-th ... datagram of the direction (counting from 1).
pub fn every_kth(k: u64) -> Rule {
    assert!(k > 0);
    Box::new(move |m| (m.index + 1) % k == 0)
}

/// The datagrams of the direction at these positions (from 0).
pub fn at_indices(indices: &[u64]) -> Rule {
    let set: Vec<u64> = indices.to_vec();
    Box::new(move |m| set.contains(&m.index))
}

pub fn always() -> Rule {
    Box::new(|_| true)
}

pub fn rule(f: impl FnMut(&Meta<'_>) -> bool + 'static) -> Rule {
    Box::new(f)
}

/// One direction of the link.
#[derive(Default)]
pub struct Path {
    /// One-way delay of every datagram.
    pub delay: Duration,
    pub drop: Option<Rule>,
    /// Matching datagrams arrive twice, the copy this long after the original.
    pub duplicate: Option<(Rule, Duration)>,
    /// Matching datagrams are held back this much longer than the others (reordering).
    pub hold: Option<(Rule, Duration)>,
}

/// A datagram the link took.
#[derive(Debug, Clone)]
pub struct Record {
    pub dir: Dir,
    pub bot: usize,
    pub index: u64,
    pub peer_index: u64,
    pub sent_at: Duration,
    pub bytes: Vec<u8>,
    pub dropped: bool,
    pub duplicated: bool,
    /// Arrival times, one per copy delivered so far (empty: dropped or still in flight).
    pub delivered: Vec<Duration>,
}

impl Record {
    pub fn msg_type(&self) -> u8 {
        msg_type(&self.bytes)
    }
    pub fn seq(&self) -> u32 {
        seq(&self.bytes)
    }
    /// A u32 of the body (offset counted from the datagram's start).
    pub fn u32_at(&self, at: usize) -> u32 {
        le_u32(&self.bytes, at)
    }
    /// Snapshot: tick (bytes 8..12).
    pub fn tick(&self) -> u32 {
        self.u32_at(8)
    }
    /// Snapshot: flags bit 0 (byte 12).
    pub fn is_full(&self) -> bool {
        self.bytes[12] & 1 != 0
    }
    /// Ping: the timestamp / token (bytes 8..12).
    pub fn token(&self) -> u32 {
        self.u32_at(8)
    }
    pub fn first_arrival(&self) -> Option<Duration> {
        self.delivered.first().copied()
    }
}

pub struct Sim {
    pub t0: Instant,
    now: Instant,
    pub server: CafeServer,
    pub bots: Vec<CafeBot>,
    /// One recorder per bot, so tests can check each bot's own numbers.
    pub recs: Vec<Recorder>,
    pub params: Vec<BotParams>,
    pub addrs: Vec<ConnId>,
    by_addr: HashMap<ConnId, usize>,
    /// Detached bots are no longer driven: no timeouts, and datagrams to them vanish.
    pub detached: Vec<bool>,
    pub up: Path,
    pub down: Path,
    pub log: Vec<Record>,
    /// Log indices in delivery order (one entry per copy).
    pub deliveries: Vec<usize>,
    queue: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    order: u64,
    sent: HashMap<Dir, u64>,
    sent_peer: HashMap<(Dir, usize), u64>,
}

/// A bot's connection id at the server: its index.
pub fn bot_addr(i: usize) -> ConnId {
    ConnId(i as u64)
}

impl Sim {
    pub fn new(cfg: CafeServerConfig, bots: Vec<(BotParams, CafeOptions)>) -> Self {
        let t0 = Instant::now();
        let addrs: Vec<ConnId> = (0..bots.len()).map(bot_addr).collect();
        Self {
            t0,
            now: t0,
            server: CafeServer::new(cfg, t0),
            recs: bots.iter().map(|_| Recorder::new()).collect(),
            params: bots.iter().map(|(p, _)| p.clone()).collect(),
            bots: bots.into_iter().map(|(p, o)| CafeBot::new(p, o)).collect(),
            by_addr: addrs.iter().enumerate().map(|(i, a)| (*a, i)).collect(),
            detached: vec![false; addrs.len()],
            addrs,
            up: Path::default(),
            down: Path::default(),
            log: Vec::new(),
            deliveries: Vec::new(),
            queue: BinaryHeap::new(),
            order: 0,
            sent: HashMap::new(),
            sent_peer: HashMap::new(),
        }
    }

    /// Simulated time since the origin.
    pub fn elapsed(&self) -> Duration {
        self.now - self.t0
    }

    pub fn at(&self, d: Duration) -> Instant {
        self.t0 + d
    }

    pub fn start_all(&mut self) {
        for i in 0..self.bots.len() {
            self.start(i);
        }
    }

    pub fn start(&mut self, i: usize) {
        self.bots[i].start(self.now, &mut self.recs[i]);
        self.drain_bot(i);
    }

    /// `Bot::stop` now, and send what it queues.
    pub fn stop(&mut self, i: usize) {
        self.bots[i].stop(self.now, &mut self.recs[i]);
        self.drain_bot(i);
    }

    /// Stop driving bot `i` altogether, as if its process had died.
    pub fn detach(&mut self, i: usize) {
        self.detached[i] = true;
    }

    /// Hand one datagram to bot `i` directly (bypassing the link, not logged) and send what it
    /// answers through the link.
    pub fn inject_to_bot(&mut self, i: usize, bytes: &[u8]) {
        self.bots[i].handle_datagram(self.now, bytes, &mut self.recs[i]);
        self.drain_bot(i);
    }

    /// Run every event up to and including `until` (time since the origin).
    pub fn run_until(&mut self, until: Duration) {
        let end = self.t0 + until;
        let mut spins = 0u32;
        while let Some(next) = self.next_event() {
            if next > end {
                break;
            }
            let now = next.max(self.now);
            if now == self.now {
                spins += 1;
                assert!(
                    spins < 100_000,
                    "simulation stuck at {:?}: a timer or datagram loop",
                    now - self.t0
                );
            } else {
                spins = 0;
            }
            self.now = now;
            self.step();
        }
        self.now = self.now.max(end);
    }

    pub fn run_for(&mut self, d: Duration) {
        let until = self.elapsed() + d;
        self.run_until(until);
    }

    fn next_event(&self) -> Option<Instant> {
        let arrival = self.queue.peek().map(|Reverse((t, _, _))| *t);
        let server = self.server.poll_timeout();
        let bots = self
            .bots
            .iter()
            .zip(&self.detached)
            .filter(|(_, &d)| !d)
            .filter_map(|(b, _)| b.poll_timeout());
        [arrival, server].into_iter().flatten().chain(bots).min()
    }

    fn step(&mut self) {
        let now = self.now;
        let mut delivered = 0u32;
        while let Some(&Reverse((at, _, idx))) = self.queue.peek() {
            if at > now {
                break;
            }
            self.queue.pop();
            self.deliver(idx);
            delivered += 1;
            assert!(
                delivered < 1_000_000,
                "datagram loop at {:?}",
                now - self.t0
            );
        }
        if self.server.poll_timeout().is_some_and(|t| t <= now) {
            self.server.handle_timeout(now);
            self.drain_server();
        }
        for i in 0..self.bots.len() {
            if !self.detached[i] && self.bots[i].poll_timeout().is_some_and(|t| t <= now) {
                self.bots[i].handle_timeout(now, &mut self.recs[i]);
                self.drain_bot(i);
            }
        }
    }

    fn deliver(&mut self, idx: usize) {
        let (dir, bot) = (self.log[idx].dir, self.log[idx].bot);
        if dir == Dir::Down && self.detached[bot] {
            return;
        }
        let at = self.now - self.t0;
        self.log[idx].delivered.push(at);
        self.deliveries.push(idx);
        let bytes = self.log[idx].bytes.clone();
        match dir {
            Dir::Up => {
                self.server
                    .handle_datagram(self.now, self.addrs[bot], &bytes);
                self.drain_server();
            }
            Dir::Down => {
                self.bots[bot].handle_datagram(self.now, &bytes, &mut self.recs[bot]);
                self.drain_bot(bot);
            }
        }
    }

    fn drain_server(&mut self) {
        let mut buf = [0u8; MAX_DATAGRAM];
        while let Some((to, tx)) = self.server.poll_transmit(&mut buf) {
            assert!(tx.len > 0 && tx.len <= MAX_DATAGRAM);
            let bot = *self
                .by_addr
                .get(&to)
                .unwrap_or_else(|| panic!("server sent to unknown address {to}"));
            self.send(Dir::Down, bot, buf[..tx.len].to_vec());
        }
    }

    fn drain_bot(&mut self, i: usize) {
        let mut buf = [0u8; MAX_DATAGRAM];
        while let Some(tx) = self.bots[i].poll_transmit(&mut buf) {
            assert!(tx.len > 0 && tx.len <= MAX_DATAGRAM);
            self.send(Dir::Up, i, buf[..tx.len].to_vec());
        }
    }

    fn send(&mut self, dir: Dir, bot: usize, bytes: Vec<u8>) {
        assert!(
            self.log.len() < 1_000_000,
            "datagram storm: a million datagrams by {:?}",
            self.now - self.t0
        );
        let at = self.now - self.t0;
        let index = *self.sent.entry(dir).or_default();
        *self.sent.entry(dir).or_default() += 1;
        let peer_index = *self.sent_peer.entry((dir, bot)).or_default();
        *self.sent_peer.entry((dir, bot)).or_default() += 1;
        let path = match dir {
            Dir::Up => &mut self.up,
            Dir::Down => &mut self.down,
        };
        let meta = Meta {
            dir,
            bot,
            index,
            peer_index,
            at,
            bytes: &bytes,
        };
        let dropped = path.drop.as_mut().is_some_and(|r| r(&meta));
        let mut dup_gap = None;
        let mut hold = Duration::ZERO;
        if !dropped {
            if let Some((r, gap)) = &mut path.duplicate {
                dup_gap = r(&meta).then_some(*gap);
            }
            if let Some((r, extra)) = &mut path.hold {
                if r(&meta) {
                    hold = *extra;
                }
            }
        }
        let arrive = self.now + path.delay + hold;
        let idx = self.log.len();
        self.log.push(Record {
            dir,
            bot,
            index,
            peer_index,
            sent_at: at,
            bytes,
            dropped,
            duplicated: dup_gap.is_some(),
            delivered: Vec::new(),
        });
        if !dropped {
            self.schedule(arrive, idx);
            if let Some(gap) = dup_gap {
                self.schedule(arrive + gap, idx);
            }
        }
    }

    fn schedule(&mut self, at: Instant, idx: usize) {
        self.queue.push(Reverse((at, self.order, idx)));
        self.order += 1;
    }

    // -----------------------------------------------------------------------------------
    // Ground truth from the log.
    // -----------------------------------------------------------------------------------

    /// Server-to-bot datagrams for bot `i`, in sending order.
    pub fn down_to(&self, i: usize) -> impl Iterator<Item = &Record> + '_ {
        self.log
            .iter()
            .filter(move |r| r.dir == Dir::Down && r.bot == i)
    }

    /// Bot-to-server datagrams from bot `i`, in sending order.
    pub fn up_from(&self, i: usize) -> impl Iterator<Item = &Record> + '_ {
        self.log
            .iter()
            .filter(move |r| r.dir == Dir::Up && r.bot == i)
    }

    /// Where bot `i`'s downstream accounting can start and end, as positions in
    /// [`Sim::down_to`]: from the first Welcome that reached it (datagrams before it belong to
    /// no session), to the last datagram that reached it (later ones could not be seen yet).
    pub fn down_window(&self, i: usize) -> Option<(usize, usize)> {
        let recs: Vec<&Record> = self.down_to(i).collect();
        let first = recs
            .iter()
            .enumerate()
            .filter(|(_, r)| r.msg_type() == WELCOME)
            .filter_map(|(p, r)| r.first_arrival().map(|t| (t, p)))
            .min()?
            .1;
        let last = recs
            .iter()
            .rposition(|r| !r.delivered.is_empty())
            .expect("the welcome arrived");
        Some((first, last))
    }

    /// Datagrams bot `i` could have noticed missing: inside [`Sim::down_window`], never
    /// delivered (dropped, or still held in flight).
    pub fn unseen_down(&self, i: usize) -> u64 {
        let Some((first, last)) = self.down_window(i) else {
            return 0;
        };
        self.down_to(i)
            .skip(first)
            .take(last - first + 1)
            .filter(|r| r.delivered.is_empty())
            .count() as u64
    }

    /// Of those, the ones the link dropped.
    pub fn dropped_down_in_window(&self, i: usize) -> u64 {
        let Some((first, last)) = self.down_window(i) else {
            return 0;
        };
        self.down_to(i)
            .skip(first)
            .take(last - first + 1)
            .filter(|r| r.dropped)
            .count() as u64
    }

    /// Distinct datagrams of the window that reached bot `i`.
    pub fn received_down(&self, i: usize) -> u64 {
        let Some((first, last)) = self.down_window(i) else {
            return 0;
        };
        self.down_to(i)
            .skip(first)
            .take(last - first + 1)
            .filter(|r| !r.delivered.is_empty())
            .count() as u64
    }

    /// Extra copies of window datagrams that reached bot `i`.
    pub fn duplicate_deliveries(&self, i: usize) -> u64 {
        let Some((first, _)) = self.down_window(i) else {
            return 0;
        };
        self.down_to(i)
            .skip(first)
            .map(|r| r.delivered.len().saturating_sub(1) as u64)
            .sum()
    }

    /// First copies of window datagrams that reached bot `i` after a datagram sent later.
    pub fn reordered_deliveries(&self, i: usize) -> u64 {
        let Some((first, _)) = self.down_window(i) else {
            return 0;
        };
        let mut seen = std::collections::HashSet::new();
        let mut highest: Option<u64> = None;
        let mut n = 0;
        for &idx in &self.deliveries {
            let r = &self.log[idx];
            if r.dir != Dir::Down || r.bot != i || (r.peer_index as usize) < first {
                continue;
            }
            if !seen.insert(idx) {
                continue; // a duplicate copy
            }
            if highest.is_some_and(|h| r.peer_index < h) {
                n += 1;
            }
            highest = highest.max(Some(r.peer_index));
        }
        n
    }

    /// All bots' recorders merged, as one worker would hold them.
    pub fn merged(&self) -> Recorder {
        let mut all = Recorder::new();
        for r in &self.recs {
            all.merge(r);
        }
        all
    }
}
