//! A deterministic simulation of N bots and one server, in one thread, on a simulated clock,
//! joined by a simulated link: the test harness the sans-IO contract exists for (after
//! quinn-proto's test `Pair`, which drives two endpoints the same way).
//!
//! No socket, no sleep, no wall clock after the origin, no randomness but seeded rules, so a
//! test can state exact ground truth ("the link dropped these 12 snapshots; the bot must
//! report exactly 12 lost") and a run repeats bit for bit.
//!
//! - **Clock**: an `Instant` taken once as the origin; simulated time is an offset from it and
//!   only moves when the event loop jumps to the next event.
//! - **Link**: one [`Path`] per direction, with a one-way delay and impairments decided per
//!   datagram by a [`Rule`]: drop, duplicate (a copy some time after the original), hold back
//!   (arrive later than datagrams sent after it, i.e. reordering). Rules are deterministic:
//!   every K-th ([`every_kth`]), explicit positions ([`at_indices`]), seeded random
//!   ([`random`]), or any closure over the datagram's [`Meta`] ([`rule`]).
//! - **Event loop**: jump to the earliest of (datagram arrival, server timeout, bot timeouts);
//!   deliver every datagram due, then the server's timeout, then each bot's, in bot order;
//!   after every call drain `poll_transmit` (into buffers of [`MAX_DATAGRAM`]) onto the link,
//!   and the server's `poll_close` into [`Sim::closed`].
//! - **Log**: every datagram the link took, with its bytes, fate and arrival times
//!   ([`Sim::log`], [`Sim::deliveries`]). Tests read their ground truth from it.
//!
//! Bot `i` is [`ConnId`]`(i)` at the server ([`bot_addr`]) until it relinks. Each bot has its
//! own [`Recorder`] so a test can check one bot's numbers; like the engine, the harness counts
//! each datagram a bot sends (`datagram_up`) and receives (`datagram_down`) in its recorder;
//! bots count neither themselves.
//!
//! The link is a datagram network (raw UDP) by default. With [`Link::Enet`] it carries what
//! a protocol over ENet sends: messages up to [`MAX_MESSAGE`] (ENet fragments them), a
//! `reliable` one never lost (ENet resends it; the drop rule is not asked) and delivered in
//! order behind the reliable ones before it, an unreliable one on a channel dropped on
//! arrival when a later one of that channel already arrived (ENet's sequenced delivery;
//! [`Sim::sequenced`] `false` for a sender that marks them unsequenced), and the sessions:
//! [`Sim::transport_connect`] for the one ENet opens before the first message (a bot started
//! with [`Sim::start_at`] gets it first, as the engine does), and the engine's disconnect when
//! a bot ends (`Failed` or `Closed`), which reaches the server (`handle_disconnect`) behind
//! the reliable messages sent before it. ENet's own handshake, acknowledgements and
//! throttling are not modelled: drive those through real transport hosts.
//!
//! A bot that asks for a relink ([`Bot::poll_relink`]) gets a new connection id
//! ([`Sim::addrs`]), as a new socket or ENet peer would; datagrams still in flight to the old
//! one are lost on arrival. Over [`Link::Enet`] the server learns of the old session's end
//! one way later and of the new one's connect, with the bot's `handle_relinked`, one round
//! trip later; over datagrams the bot is relinked at once. The harness has one server, so a
//! relink to another address (`Relink::to`) reaches the same one.
//!
//! For what a rule cannot express:
//! - [`Path::cut`]: everything lost in one direction, reliable messages too (a server gone
//!   silent).
//! - [`Sim::server_lag`]: a server loop that wakes late and catches up several ticks at once.
//! - [`Sim::watch`]: a test's own ground truth, taken as things happen ([`Seen`]): every
//!   datagram the link takes, each server timeout, each datagram a bot handles.
//! - [`Sim::inject_to_server`], [`Sim::transport_disconnect`] and [`Sim::jump`]: raw frames
//!   fed to the server on a coarse clock, as the fuzz targets replay their inputs.

/// What the link between the bots and the server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Link {
    /// Raw UDP: datagrams up to [`MAX_DATAGRAM`], each impaired on its own.
    #[default]
    Datagrams,
    /// ENet's channels (see the module docs).
    Enet,
}

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Bot, BotPhase, ConnId, Server, Transmit, MAX_DATAGRAM, MAX_MESSAGE};
use crate::metrics::Recorder;

/// A direction of the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Bot to server.
    Up,
    /// Server to bot.
    Down,
}

/// What a rule sees of one datagram as the link takes it.
#[derive(Debug, Clone, Copy)]
pub struct Meta<'a> {
    /// Which direction the datagram travels.
    pub dir: Dir,
    /// The bot it is from or to (its index in [`Sim::bots`]).
    pub bot: usize,
    /// Position among all datagrams of this direction, from 0.
    pub index: u64,
    /// Position among the datagrams of this direction to or from this bot, from 0.
    pub peer_index: u64,
    /// Position among the datagrams of this direction to or from this bot on this channel,
    /// from 0.
    pub channel_index: u64,
    /// The bot's connection at the server it is from or to.
    pub conn: ConnId,
    /// Simulated time of sending.
    pub at: Duration,
    /// The datagram's bytes.
    pub bytes: &'a [u8],
    /// The sender's delivery hints (see [`Transmit`]); the link itself treats every datagram
    /// alike, a rule may not.
    pub channel: u8,
    /// Whether the sender asked for reliable delivery.
    pub reliable: bool,
}

/// Decides, for each datagram, whether an impairment applies.
pub type Rule = Box<dyn FnMut(&Meta<'_>) -> bool>;

/// The k-th, 2k-th, 3k-th ... datagram of the direction (counting from 1).
///
/// # Panics
/// If `k` is 0 (a test bug, caught at setup).
pub fn every_kth(k: u64) -> Rule {
    assert!(k > 0, "every_kth(0)");
    Box::new(move |m| (m.index + 1) % k == 0)
}

/// The datagrams of the direction at these positions (from 0).
pub fn at_indices(indices: &[u64]) -> Rule {
    let set: Vec<u64> = indices.to_vec();
    Box::new(move |m| set.contains(&m.index))
}

/// Every datagram (a link down in that direction).
pub fn always() -> Rule {
    Box::new(|_| true)
}

/// Each datagram with probability `p`, from a generator seeded with `seed`: random-looking
/// loss that is the same on every run.
pub fn random(p: f64, seed: u64) -> Rule {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let p = p.clamp(0.0, 1.0);
    Box::new(move |_| rng.random_bool(p))
}

/// Any decision over the datagram's [`Meta`] (its bytes, bot, position, time).
pub fn rule(f: impl FnMut(&Meta<'_>) -> bool + 'static) -> Rule {
    Box::new(f)
}

/// One direction of the link.
#[derive(Default)]
pub struct Path {
    /// One-way delay of every datagram.
    pub delay: Duration,
    /// Matching datagrams are lost.
    pub drop: Option<Rule>,
    /// Matching datagrams arrive twice, the copy this long after the original.
    pub duplicate: Option<(Rule, Duration)>,
    /// Matching datagrams are held back this much longer than the others (reordering).
    pub hold: Option<(Rule, Duration)>,
    /// Everything sent is lost, reliable messages too (the rules are not asked).
    pub cut: bool,
}

/// What a [`Sim::watch`] closure is shown, with the server and the bots as they are then.
#[derive(Debug, Clone, Copy)]
pub enum Seen<'a> {
    /// The link took a datagram; its fate is decided after.
    Sent(&'a Meta<'a>),
    /// The server's timeout ran; what it queued is sent after.
    ServerTimeout,
    /// Bot `i` is about to handle a datagram.
    BotReceiving(usize),
    /// Bot `i` handled a datagram; what it answers is sent after.
    BotReceived(usize),
}

/// A [`Sim::watch`] closure.
pub type Watch<B, S> = Box<dyn FnMut(Seen<'_>, &S, &[B])>;

/// A [`Sim::server_lag`] closure: given the count of the server's timeout calls so far (from
/// 1), how long until the server may be called again.
pub type Lag = Box<dyn FnMut(u64) -> Duration>;

/// What the event queue holds besides datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The log entry arrives.
    Deliver(usize),
    /// [`Sim::start_at`].
    Start(usize),
    /// The server learns that a transport session ended.
    Disconnect(ConnId),
    /// Bot `i`'s new session (a relink over ENet) is up.
    Relinked(usize),
}

/// Connection ids of relinked sessions start here, above any bot index.
const RELINK_BASE: u64 = 1 << 32;

/// A datagram the link took.
#[derive(Debug, Clone)]
pub struct Record {
    /// Which direction it travelled.
    pub dir: Dir,
    /// The bot it was from or to.
    pub bot: usize,
    /// Position among all datagrams of its direction, from 0.
    pub index: u64,
    /// Position among its bot's datagrams of its direction, from 0.
    pub peer_index: u64,
    /// Position among its bot's datagrams of its direction and channel, from 0.
    pub channel_index: u64,
    /// The bot's connection at the server when it was sent.
    pub conn: ConnId,
    /// Simulated time of sending (from [`Sim::t0`]).
    pub sent_at: Duration,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// The sender's channel hint.
    pub channel: u8,
    /// The sender's reliability hint.
    pub reliable: bool,
    /// Whether the link dropped it.
    pub dropped: bool,
    /// Whether the link delivered a copy too.
    pub duplicated: bool,
    /// Arrival times, one per copy delivered so far (empty: dropped or still in flight).
    pub delivered: Vec<Duration>,
}

impl Record {
    /// When its first copy arrived, if one did.
    pub fn first_arrival(&self) -> Option<Duration> {
        self.delivered.first().copied()
    }
}

/// N bots of type `B` and one server of type `S` on a simulated link. See the module docs.
pub struct Sim<B: Bot, S: Server> {
    /// The origin of simulated time (the instant the server was made with).
    pub t0: Instant,
    now: Instant,
    /// The server under test.
    pub server: S,
    /// The bots, bot `i` being `ConnId(i)` at the server until it relinks.
    pub bots: Vec<B>,
    /// One recorder per bot.
    pub recs: Vec<Recorder>,
    /// Bot `i`'s connection id at the server: `ConnId(i)`, a new one after each relink.
    pub addrs: Vec<ConnId>,
    by_addr: HashMap<ConnId, usize>,
    /// Connections bots left by relinking: what the server sends to them is lost.
    retired: std::collections::HashSet<ConnId>,
    relinks: u64,
    /// Whether bot `i`'s ended session was closed (ENet).
    closing: Vec<bool>,
    /// Detached bots are no longer driven: no timeouts, and datagrams to them vanish.
    pub detached: Vec<bool>,
    /// While set, the server's timeouts are not called (its clock stands still), so what is
    /// in flight can settle against a fixed world.
    pub server_paused: bool,
    /// When set, after each call of the server's timeout the server is not called again
    /// before `now + lag(calls so far)`: a loop that wakes late (descheduled, stalled) and
    /// then runs every tick due at once. Datagrams still reach it as they arrive.
    pub server_lag: Option<Lag>,
    server_wakes: u64,
    server_not_before: Option<Instant>,
    /// [`Link::Enet`]: unreliable messages are delivered sequenced (default `true`); `false`
    /// delivers late ones too, as ENet does for unsequenced packets.
    pub sequenced: bool,
    /// Called with what happens as it happens (see [`Seen`]), for ground truth a test takes
    /// from the state machines themselves (the server's world at each tick, say).
    pub watch: Option<Watch<B, S>>,
    /// The link from the bots to the server.
    pub up: Path,
    /// Datagrams (default) or ENet's channels; set before the first send.
    pub link: Link,
    /// The link from the server to the bots.
    pub down: Path,
    /// Every datagram the link took, in sending order.
    pub log: Vec<Record>,
    /// Log indices in delivery order (one entry per copy).
    pub deliveries: Vec<usize>,
    /// Connections the server closed (`poll_close`), with when.
    pub closed: Vec<(Duration, ConnId)>,
    queue: BinaryHeap<Reverse<(Instant, u64, Event)>>,
    order: u64,
    spins: u32,
    sent: [u64; 2],
    sent_peer: HashMap<(Dir, usize), u64>,
    sent_channel: HashMap<(Dir, usize, u8), u64>,
    /// ENet: when the last reliable message of (direction, bot) arrives...
    reliable_at: HashMap<(Dir, usize), Instant>,
    /// ...and the highest sending position delivered per (direction, bot, channel), for
    /// sequenced unreliable delivery.
    newest_sequenced: HashMap<(Dir, usize, u8), u64>,
}

/// A bot's connection id at the server: its index.
pub fn bot_addr(i: usize) -> ConnId {
    ConnId(i as u64)
}

/// Guards against a state machine that never lets time move (a timer that stays due).
const MAX_SPINS: u32 = 100_000;
/// Guards against datagrams that trigger datagrams forever.
const MAX_LOG: usize = 2_000_000;

impl<B: Bot, S: Server> Sim<B, S> {
    /// A simulation starting at `t0` (the instant `server` was created with), with `bots`
    /// not yet started.
    pub fn new(t0: Instant, server: S, bots: Vec<B>) -> Self {
        let mut sim = Self {
            t0,
            now: t0,
            server,
            bots: Vec::new(),
            recs: Vec::new(),
            addrs: Vec::new(),
            by_addr: HashMap::new(),
            retired: Default::default(),
            relinks: 0,
            closing: Vec::new(),
            detached: Vec::new(),
            server_paused: false,
            server_lag: None,
            server_wakes: 0,
            server_not_before: None,
            sequenced: true,
            watch: None,
            up: Path::default(),
            link: Link::Datagrams,
            down: Path::default(),
            log: Vec::new(),
            deliveries: Vec::new(),
            closed: Vec::new(),
            queue: BinaryHeap::new(),
            order: 0,
            spins: 0,
            sent: [0; 2],
            sent_peer: HashMap::new(),
            sent_channel: HashMap::new(),
            reliable_at: HashMap::new(),
            newest_sequenced: HashMap::new(),
        };
        for b in bots {
            sim.add_bot(b);
        }
        sim
    }

    /// Add a bot (not started); returns its index.
    pub fn add_bot(&mut self, bot: B) -> usize {
        let i = self.bots.len();
        let addr = bot_addr(i);
        self.bots.push(bot);
        self.recs.push(Recorder::new());
        self.addrs.push(addr);
        self.by_addr.insert(addr, i);
        self.detached.push(false);
        self.closing.push(false);
        i
    }

    /// The current simulated instant.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Simulated time since the origin.
    pub fn elapsed(&self) -> Duration {
        self.now - self.t0
    }

    /// The instant `d` after the origin.
    pub fn at(&self, d: Duration) -> Instant {
        self.t0 + d
    }

    /// Start every bot now (each sends its hello), then settle what that sent.
    pub fn start_all(&mut self) {
        for i in 0..self.bots.len() {
            self.start(i);
        }
    }

    /// `Bot::start` now, and send what it queues.
    pub fn start(&mut self, i: usize) {
        self.bots[i].start(self.now, &mut self.recs[i]);
        self.drain_bot(i);
    }

    /// Start bot `i` at `at` (time since the origin; now if that has passed): over
    /// [`Link::Enet`], [`Sim::transport_connect`] first, as the engine connects before it
    /// starts a bot. Bots scheduled before the run start before anything else due then.
    pub fn start_at(&mut self, i: usize, at: Duration) {
        let at = (self.t0 + at).max(self.now);
        self.schedule(at, Event::Start(i));
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

    /// Hand one datagram to the server from bot `i`'s connection directly (bypassing the link,
    /// not logged) and send what it answers through the link.
    pub fn inject_to_server(&mut self, i: usize, bytes: &[u8]) {
        self.server.handle_datagram(self.now, self.addrs[i], bytes);
        self.drain_server();
    }

    /// The transport session of bot `i` ended now (ENet's disconnect): `handle_disconnect`,
    /// and send what the server queues.
    pub fn transport_disconnect(&mut self, i: usize) {
        self.server.handle_disconnect(self.now, self.addrs[i]);
        self.drain_server();
    }

    /// Move the clock `d` ahead at once and handle, once, at the new instant, what is due by
    /// then: datagrams, the server's timeout, the bots' (a coarse clock, as a loop that wakes
    /// every `d` sees it; the fuzz targets replay their inputs this way).
    pub fn jump(&mut self, d: Duration) {
        self.now += d;
        self.step();
    }

    /// Hand one datagram to bot `i` directly (bypassing the link, not logged) and send what it
    /// answers through the link.
    pub fn inject_to_bot(&mut self, i: usize, bytes: &[u8]) {
        self.recs[i].datagram_down(bytes.len());
        self.bots[i].handle_datagram(self.now, bytes, &mut self.recs[i]);
        self.drain_bot(i);
    }

    /// Run every event up to and including `until` (time since the origin); the clock ends at
    /// `until`.
    ///
    /// # Panics
    /// When time stops moving (a timer that stays due, a datagram loop): a state machine bug
    /// the test should see rather than hang on.
    pub fn run_until(&mut self, until: Duration) {
        let end = self.t0 + until;
        while self.advance(end) {}
        self.now = self.now.max(end);
    }

    /// Run the event loop for `d` of simulated time.
    pub fn run_for(&mut self, d: Duration) {
        let until = self.elapsed() + d;
        self.run_until(until);
    }

    /// Run until `done` holds or `limit` of simulated time has passed; whether `done` held.
    pub fn run_while_not(&mut self, limit: Duration, mut done: impl FnMut(&Self) -> bool) -> bool {
        let end = self.now + limit;
        while !done(self) {
            if !self.advance(end) {
                self.now = self.now.max(end);
                return done(self);
            }
        }
        true
    }

    /// Jump to the next instant with events and handle them, if it is not after `end`;
    /// `false` (and the clock unmoved) when there is none. For loops with their own stop
    /// condition; [`Sim::run_until`] is this until `false`.
    pub fn advance(&mut self, end: Instant) -> bool {
        let Some(next) = self.next_event().filter(|&t| t <= end) else {
            return false;
        };
        let now = next.max(self.now);
        if now == self.now {
            self.spins += 1;
            assert!(
                self.spins < MAX_SPINS,
                "simulation stuck at {:?}: a timer or datagram loop",
                now - self.t0
            );
        } else {
            self.spins = 0;
        }
        self.now = now;
        self.step();
        true
    }

    /// When the server's timeout is to be called: its own deadline, not before a lagging
    /// loop wakes, never while paused.
    fn server_due(&self) -> Option<Instant> {
        let t = self.server.poll_timeout().filter(|_| !self.server_paused)?;
        Some(self.server_not_before.map_or(t, |nb| t.max(nb)))
    }

    fn next_event(&self) -> Option<Instant> {
        let arrival = self.queue.peek().map(|Reverse((t, _, _))| *t);
        let server = self.server_due();
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
        while let Some(&Reverse((at, _, ev))) = self.queue.peek() {
            if at > now {
                break;
            }
            self.queue.pop();
            match ev {
                Event::Deliver(idx) => self.deliver(idx),
                Event::Start(i) if !self.detached[i] => {
                    if self.link == Link::Enet {
                        self.transport_connect(i);
                    }
                    self.start(i);
                }
                Event::Start(_) => {}
                Event::Disconnect(conn) => {
                    self.server.handle_disconnect(now, conn);
                    self.drain_server();
                }
                Event::Relinked(i) => {
                    self.transport_connect(i);
                    self.bots[i].handle_relinked(now, &mut self.recs[i]);
                    self.drain_bot(i);
                }
            }
        }
        if self.server_due().is_some_and(|t| t <= now) {
            self.server.handle_timeout(now);
            if let Some(w) = self.watch.as_mut() {
                w(Seen::ServerTimeout, &self.server, &self.bots);
            }
            if let Some(lag) = self.server_lag.as_mut() {
                self.server_wakes += 1;
                self.server_not_before = Some(now + lag(self.server_wakes));
            }
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
        if dir == Dir::Down && self.log[idx].conn != self.addrs[bot] {
            return; // to a session the bot has left (relinked)
        }
        if self.link == Link::Enet && self.sequenced && !self.log[idx].reliable {
            // Sequenced: an unreliable message older than one delivered on its channel is
            // dropped on arrival.
            let key = (dir, bot, self.log[idx].channel);
            let pos = self.log[idx].channel_index;
            let newest = self.newest_sequenced.entry(key).or_insert(pos);
            if pos < *newest {
                return;
            }
            *newest = pos;
        }
        let at = self.now - self.t0;
        self.log[idx].delivered.push(at);
        self.deliveries.push(idx);
        // Taken out for the call and put back: the state machines borrow the bytes, and the
        // log keeps them for ground truth.
        let bytes = std::mem::take(&mut self.log[idx].bytes);
        match dir {
            Dir::Up => {
                let from = self.log[idx].conn;
                self.server.handle_datagram(self.now, from, &bytes);
                self.log[idx].bytes = bytes;
                self.drain_server();
            }
            Dir::Down => {
                if let Some(w) = self.watch.as_mut() {
                    w(Seen::BotReceiving(bot), &self.server, &self.bots);
                }
                self.recs[bot].datagram_down(bytes.len());
                self.bots[bot].handle_datagram(self.now, &bytes, &mut self.recs[bot]);
                if let Some(w) = self.watch.as_mut() {
                    w(Seen::BotReceived(bot), &self.server, &self.bots);
                }
                self.log[idx].bytes = bytes;
                self.drain_bot(bot);
            }
        }
    }

    /// Put what the server wants sent on the link, then note what it closed (after, as the
    /// engine does: a refusal goes out before its connection is forgotten).
    ///
    /// What it sends to a connection a bot left by relinking is lost.
    ///
    /// # Panics
    /// When the server sends to a connection no bot ever had.
    pub fn drain_server(&mut self) {
        let mut buf = vec![0u8; self.max_len()];
        while let Some((to, tx)) = self.server.poll_transmit(&mut buf) {
            assert!(tx.len > 0 && tx.len <= buf.len(), "transmit of {}", tx.len);
            let Some(&bot) = self.by_addr.get(&to) else {
                assert!(
                    self.retired.contains(&to),
                    "server sent to unknown connection {to}"
                );
                continue;
            };
            self.send(Dir::Down, bot, &buf[..tx.len], tx);
        }
        while let Some(c) = self.server.poll_close() {
            self.closed.push((self.now - self.t0, c));
        }
    }

    /// Put what bot `i` wants sent on the link, then follow its relink request, and over
    /// [`Link::Enet`] close its session when it has ended (see the module docs).
    pub fn drain_bot(&mut self, i: usize) {
        let mut buf = vec![0u8; self.max_len()];
        while let Some(tx) = self.bots[i].poll_transmit(&mut buf) {
            assert!(tx.len > 0 && tx.len <= buf.len(), "transmit of {}", tx.len);
            self.recs[i].datagram_up(tx.len);
            self.send(Dir::Up, i, &buf[..tx.len], tx);
        }
        if self.bots[i].poll_relink().is_some() {
            self.relink(i);
        }
        let ended = matches!(self.bots[i].phase(), BotPhase::Failed | BotPhase::Closed);
        if self.link == Link::Enet && ended && !self.closing[i] {
            self.closing[i] = true;
            // ENet's disconnect goes out behind the reliable messages queued before it.
            let at = self.reliable_arrival(Dir::Up, i, self.now + self.up.delay);
            if !self.up.cut {
                self.schedule(at, Event::Disconnect(self.addrs[i]));
            }
        }
    }

    /// Bot `i` gets a new connection id (see the module docs).
    fn relink(&mut self, i: usize) {
        let old = self.addrs[i];
        let new = ConnId(RELINK_BASE + self.relinks);
        self.relinks += 1;
        self.by_addr.remove(&old);
        self.retired.insert(old);
        self.addrs[i] = new;
        self.by_addr.insert(new, i);
        match self.link {
            Link::Enet => {
                self.schedule(self.now + self.up.delay, Event::Disconnect(old));
                let rtt = self.up.delay + self.down.delay;
                self.schedule(self.now + rtt, Event::Relinked(i));
            }
            Link::Datagrams => {
                self.bots[i].handle_relinked(self.now, &mut self.recs[i]);
                self.drain_bot(i);
            }
        }
    }

    /// When a reliable message sent now on (`dir`, `bot`) that would arrive at `at` arrives:
    /// not before the reliable ones sent before it.
    fn reliable_arrival(&mut self, dir: Dir, bot: usize, at: Instant) -> Instant {
        let last = self.reliable_at.entry((dir, bot)).or_insert(at);
        *last = at.max(*last);
        *last
    }

    /// The largest message the link carries (the buffers handed to `poll_transmit`).
    fn max_len(&self) -> usize {
        match self.link {
            Link::Datagrams => MAX_DATAGRAM,
            Link::Enet => MAX_MESSAGE,
        }
    }

    /// ENet's session from bot `i` is up: `Server::handle_connect` now (call it before the
    /// bot starts, as ENet connects before the first message), and send what it queues.
    pub fn transport_connect(&mut self, i: usize) {
        self.server.handle_connect(self.now, self.addrs[i]);
        self.drain_server();
    }

    fn send(&mut self, dir: Dir, bot: usize, bytes: &[u8], tx: Transmit) {
        assert!(
            self.log.len() < MAX_LOG,
            "datagram storm: {MAX_LOG} datagrams by {:?}",
            self.now - self.t0
        );
        let at = self.now - self.t0;
        let d = dir as usize;
        let index = self.sent[d];
        self.sent[d] += 1;
        let peer = self.sent_peer.entry((dir, bot)).or_default();
        let peer_index = *peer;
        *peer += 1;
        let on_channel = self.sent_channel.entry((dir, bot, tx.channel)).or_default();
        let channel_index = *on_channel;
        *on_channel += 1;
        let conn = self.addrs[bot];
        let meta = Meta {
            dir,
            bot,
            index,
            peer_index,
            channel_index,
            conn,
            at,
            bytes,
            channel: tx.channel,
            reliable: tx.reliable,
        };
        if let Some(w) = self.watch.as_mut() {
            w(Seen::Sent(&meta), &self.server, &self.bots);
        }
        let path = match dir {
            Dir::Up => &mut self.up,
            Dir::Down => &mut self.down,
        };
        // ENet resends a reliable message until it arrives: the link never loses one.
        let enet_reliable = self.link == Link::Enet && tx.reliable;
        let dropped = path.cut || (!enet_reliable && path.drop.as_mut().is_some_and(|r| r(&meta)));
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
        let mut arrive = self.now + path.delay + hold;
        if enet_reliable && !dropped {
            // In order behind the reliable messages sent before it.
            arrive = self.reliable_arrival(dir, bot, arrive);
        }
        let idx = self.log.len();
        self.log.push(Record {
            dir,
            bot,
            index,
            peer_index,
            channel_index,
            conn,
            sent_at: at,
            bytes: bytes.to_vec(),
            channel: tx.channel,
            reliable: tx.reliable,
            dropped,
            duplicated: dup_gap.is_some(),
            delivered: Vec::new(),
        });
        if !dropped {
            self.schedule(arrive, Event::Deliver(idx));
            if let Some(gap) = dup_gap {
                self.schedule(arrive + gap, Event::Deliver(idx));
            }
        }
    }

    fn schedule(&mut self, at: Instant, ev: Event) {
        self.queue.push(Reverse((at, self.order, ev)));
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
    /// [`Sim::down_to`]: from the first datagram that `starts` a session and reached the bot
    /// (datagrams before it belong to no session) to the last datagram that reached it (later
    /// ones could not be seen missing yet).
    pub fn down_window(
        &self,
        i: usize,
        starts: impl Fn(&Record) -> bool,
    ) -> Option<(usize, usize)> {
        let first = self
            .down_to(i)
            .enumerate()
            .filter(|(_, r)| starts(r))
            .filter_map(|(p, r)| r.first_arrival().map(|t| (t, p)))
            .min()?
            .1;
        let last = self
            .down_to(i)
            .enumerate()
            .filter(|(_, r)| !r.delivered.is_empty())
            .map(|(p, _)| p)
            .last()?;
        Some((first, last))
    }

    /// The datagrams of a [`Sim::down_window`].
    pub fn down_in_window(
        &self,
        i: usize,
        window: Option<(usize, usize)>,
    ) -> impl Iterator<Item = &Record> + '_ {
        let (first, n) = window.map_or((0, 0), |(f, l)| (f, l + 1 - f));
        self.down_to(i).skip(first).take(n)
    }

    /// Extra copies of datagrams from position `first` on that reached bot `i`.
    pub fn duplicate_deliveries_from(&self, i: usize, first: usize) -> u64 {
        self.down_to(i)
            .skip(first)
            .map(|r| r.delivered.len().saturating_sub(1) as u64)
            .sum()
    }

    /// First copies of datagrams from position `first` on that reached bot `i` after a
    /// datagram sent later.
    pub fn reordered_deliveries_from(&self, i: usize, first: usize) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{BotPhase, Relink, ServerStats};

    /// A bot that sends one byte (its counter) every 10 ms and counts what comes back.
    struct Echoer {
        next: Option<Instant>,
        n: u8,
        pending: bool,
        got: Vec<u8>,
        /// Sent reliably (meaningful on [`Link::Enet`]).
        reliable: bool,
        /// Ask for a relink once this many were sent.
        relink_after: Option<u8>,
        relinked: Vec<Instant>,
        stopped: bool,
    }

    impl Bot for Echoer {
        fn start(&mut self, now: Instant, _: &mut Recorder) {
            self.next = Some(now);
        }
        fn handle_datagram(&mut self, _: Instant, data: &[u8], _: &mut Recorder) {
            self.got.extend_from_slice(data);
        }
        fn handle_timeout(&mut self, now: Instant, _: &mut Recorder) {
            self.pending = true;
            self.next = Some(now + Duration::from_millis(10));
        }
        fn stop(&mut self, _: Instant, _: &mut Recorder) {
            self.next = None;
            self.stopped = true;
        }
        fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
            if !std::mem::take(&mut self.pending) {
                return None;
            }
            buf[0] = self.n;
            self.n += 1;
            Some(Transmit {
                reliable: self.reliable,
                ..Transmit::datagram(1)
            })
        }
        fn poll_timeout(&self) -> Option<Instant> {
            self.next
        }
        fn phase(&self) -> BotPhase {
            if self.stopped {
                BotPhase::Closed
            } else {
                BotPhase::Connected
            }
        }
        fn poll_relink(&mut self) -> Option<Relink> {
            if self.relink_after.is_some_and(|n| self.n >= n) {
                self.relink_after = None;
                return Some(Relink { to: None });
            }
            None
        }
        fn handle_relinked(&mut self, now: Instant, _: &mut Recorder) {
            self.relinked.push(now);
        }
    }

    /// Echoes every datagram to its sender; closes a connection after its 3rd datagram.
    #[derive(Default)]
    struct Mirror {
        out: Vec<(ConnId, u8)>,
        seen: HashMap<ConnId, u32>,
        close: Vec<ConnId>,
        /// Transport sessions: (when, connected or not, who).
        sessions: Vec<(Instant, bool, ConnId)>,
        stats: ServerStats,
    }

    impl Server for Mirror {
        fn handle_datagram(&mut self, _: Instant, from: ConnId, data: &[u8]) {
            self.out.push((from, data[0]));
            let n = self.seen.entry(from).or_default();
            *n += 1;
            if *n == 3 {
                self.close.push(from);
            }
        }
        fn handle_timeout(&mut self, _: Instant) {}
        fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
            let (to, b) = self.out.pop()?;
            buf[0] = b;
            Some((to, Transmit::datagram(1)))
        }
        fn poll_timeout(&self) -> Option<Instant> {
            None
        }
        fn stats(&self) -> &ServerStats {
            &self.stats
        }
        fn poll_close(&mut self) -> Option<ConnId> {
            self.close.pop()
        }
        fn handle_connect(&mut self, now: Instant, from: ConnId) {
            self.sessions.push((now, true, from));
        }
        fn handle_disconnect(&mut self, now: Instant, from: ConnId) {
            self.sessions.push((now, false, from));
        }
    }

    fn echoer() -> Echoer {
        Echoer {
            next: None,
            n: 0,
            pending: false,
            got: Vec::new(),
            reliable: false,
            relink_after: None,
            relinked: Vec::new(),
            stopped: false,
        }
    }

    #[test]
    fn enet_sessions_open_before_a_scheduled_start_and_close_behind_reliable_data() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let reliable = Echoer {
            reliable: true,
            ..echoer()
        };
        let mut sim = Sim::new(t0, Mirror::default(), vec![reliable]);
        sim.link = Link::Enet;
        sim.up.delay = ms(3);
        // The first datagram is held 30 ms: the ones after it wait behind it.
        sim.up.hold = Some((rule(|m| m.peer_index == 0), ms(30)));
        sim.start_at(0, ms(5));
        sim.run_until(ms(20));
        sim.stop(0);
        sim.run_until(ms(60));
        let up: Vec<_> = sim.up_from(0).map(|r| r.delivered.clone()).collect();
        assert_eq!(up, vec![vec![ms(38)], vec![ms(38)]], "sent at 5 and 15 ms");
        // Connected when started; the disconnect waits behind the held reliable data.
        let sessions = &sim.server.sessions;
        assert_eq!(
            sessions,
            &vec![
                (sim.at(ms(5)), true, ConnId(0)),
                (sim.at(ms(38)), false, ConnId(0))
            ]
        );
    }

    #[test]
    fn a_relink_is_a_new_connection_and_what_was_sent_to_the_old_one_is_lost() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let bot = Echoer {
            relink_after: Some(2),
            ..echoer()
        };
        let mut sim = Sim::new(t0, Mirror::default(), vec![bot]);
        sim.link = Link::Enet;
        sim.up.delay = ms(2);
        sim.down.delay = ms(9);
        let sent: std::rc::Rc<std::cell::RefCell<Vec<ConnId>>> = Default::default();
        let seen = sent.clone();
        sim.watch = Some(Box::new(move |s, _, _| {
            if let Seen::Sent(m) = s {
                seen.borrow_mut().push(m.conn);
            }
        }));
        sim.transport_connect(0);
        sim.start(0);
        sim.run_until(ms(40));
        // The bot asked at 10 ms, after its second datagram: the server sees the old session
        // end one way later and the new one a round trip later, with the bot relinked.
        let new = ConnId(RELINK_BASE);
        assert_eq!(sim.addrs[0], new);
        assert_eq!(sim.bots[0].relinked, vec![sim.at(ms(21))]);
        let sessions = &sim.server.sessions;
        assert_eq!(
            sessions,
            &vec![
                (t0, true, ConnId(0)),
                (sim.at(ms(12)), false, ConnId(0)),
                (sim.at(ms(21)), true, new),
            ]
        );
        // The first echo was in flight to the old connection: lost on arrival. The second
        // was answered to the old connection after the relink: never sent. The third came,
        // the fourth is in flight.
        assert_eq!(sim.bots[0].got, vec![2]);
        let down: Vec<_> = sim
            .down_to(0)
            .map(|r| (r.conn, r.delivered.clone()))
            .collect();
        let want = vec![(ConnId(0), vec![]), (new, vec![ms(31)]), (new, vec![])];
        assert_eq!(down, want);
        assert_eq!(
            sent.borrow().len(),
            sim.log.len(),
            "the watch saw every datagram"
        );
    }

    #[test]
    fn a_cut_path_loses_reliable_data_and_a_lagging_server_catches_up() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let reliable = Echoer {
            reliable: true,
            ..echoer()
        };
        let mut sim = Sim::new(t0, Ticker::default(), vec![reliable]);
        sim.link = Link::Enet;
        sim.down.cut = true;
        // Every wake of the server's loop is 25 ms after the previous one.
        sim.server_lag = Some(Box::new(move |_| ms(25)));
        sim.start_all();
        sim.run_until(ms(60));
        assert!(sim.bots[0].got.is_empty(), "nothing came down");
        assert!(sim.down_to(0).all(|r| r.dropped));
        // Ticks due every 10 ms, run at 0, 25 and 50 ms.
        assert_eq!(
            sim.server.ticks,
            vec![ms(0), ms(25), ms(25), ms(50), ms(50), ms(50)]
        );
    }

    #[test]
    fn jump_handles_what_is_due_once_at_the_new_instant() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut sim = Sim::new(t0, Ticker::default(), vec![echoer()]);
        sim.detach(0);
        sim.inject_to_server(0, &[9]);
        sim.jump(ms(35));
        assert_eq!(
            sim.server.ticks,
            vec![ms(35); 4],
            "one call, late, catching up"
        );
        assert_eq!(sim.elapsed(), ms(35));
        assert_eq!(sim.log.len(), 1, "its answer went out");
    }

    /// A server that ticks every 10 ms from the first datagram it gets, runs every tick due
    /// when called (noting when), and answers every datagram.
    #[derive(Default)]
    struct Ticker {
        t0: Option<Instant>,
        next: Option<Instant>,
        ticks: Vec<Duration>,
        out: Vec<ConnId>,
        stats: ServerStats,
    }

    impl Server for Ticker {
        fn handle_datagram(&mut self, now: Instant, from: ConnId, _: &[u8]) {
            self.t0.get_or_insert(now);
            self.next.get_or_insert(now);
            self.out.push(from);
        }
        fn handle_timeout(&mut self, now: Instant) {
            let t0 = self.t0.unwrap_or(now);
            while let Some(due) = self.next.filter(|&d| d <= now) {
                self.ticks.push(now - t0);
                self.next = Some(due + Duration::from_millis(10));
            }
        }
        fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
            let to = self.out.pop()?;
            buf[0] = 1;
            Some((to, Transmit::datagram(1)))
        }
        fn poll_timeout(&self) -> Option<Instant> {
            self.next
        }
        fn stats(&self) -> &ServerStats {
            &self.stats
        }
    }

    #[test]
    fn enet_link_never_loses_reliable_keeps_it_in_order_and_sequences_unreliable() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let reliable = Echoer {
            reliable: true,
            ..echoer()
        };
        let mut sim = Sim::new(t0, Mirror::default(), vec![reliable, echoer()]);
        sim.link = Link::Enet;
        sim.up.delay = ms(3);
        // Bot 1's datagrams from its third on are lost; every bot's first is held 15 ms.
        sim.up.drop = Some(rule(|m| m.bot == 1 && m.peer_index >= 2));
        sim.up.hold = Some((rule(|m| m.peer_index == 0), ms(15)));
        sim.start_all();
        sim.run_until(ms(25));
        // Bot 0 (reliable): nothing lost, and its second and third wait behind the first.
        let up0: Vec<_> = sim.up_from(0).map(|r| r.delivered.clone()).collect();
        assert_eq!(up0, vec![vec![ms(18)], vec![ms(18)], vec![ms(23)]]);
        // Bot 1 (unreliable): the held first arrives after the second and is discarded;
        // the third is lost to the drop rule.
        let up1: Vec<_> = sim
            .up_from(1)
            .map(|r| (r.dropped, r.delivered.len()))
            .collect();
        assert_eq!(up1, vec![(false, 0), (false, 1), (true, 0)]);
    }

    #[test]
    fn delay_drop_duplicate_hold_and_log() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut sim = Sim::new(t0, Mirror::default(), vec![echoer(), echoer()]);
        sim.up.delay = ms(3);
        sim.down.delay = ms(2);
        sim.up.drop = Some(at_indices(&[2]));
        sim.down.duplicate = Some((rule(|m| m.bot == 1 && m.peer_index == 0), ms(1)));
        sim.down.hold = Some((rule(|m| m.bot == 0 && m.peer_index == 1), ms(15)));
        sim.start_all();
        sim.run_until(ms(25));
        // Up: bot 0 sends 0,1,2 at 0,10,20 ms; bot 1 the same; up index 2 is bot 0's second.
        let up0: Vec<bool> = sim.up_from(0).map(|r| r.dropped).collect();
        assert_eq!(up0, vec![false, true, false]);
        // Echoes arrive 5 ms after sending; bot 0's second echo is its datagram 2, held.
        assert_eq!(sim.bots[0].got, vec![0]);
        assert_eq!(sim.bots[1].got, vec![0, 0, 1, 2], "first echo duplicated");
        assert_eq!(
            sim.recs[0].packets_up, 3,
            "the harness counts what a bot sends"
        );
        assert_eq!(sim.closed, vec![(ms(23), ConnId(1))]);
        sim.run_until(ms(40));
        assert_eq!(sim.bots[0].got, vec![0, 3, 2], "held back past a later one");
        assert_eq!(sim.reordered_deliveries_from(0, 0), 1);
        assert_eq!(sim.duplicate_deliveries_from(1, 0), 1);
        let window = sim.down_window(1, |r| r.bytes[0] == 1);
        assert_eq!(window, Some((1, 3)));
        assert_eq!(sim.down_in_window(1, window).count(), 3);
    }

    #[test]
    fn seeded_random_rules_repeat() {
        let picks = |seed| {
            let mut r = random(0.3, seed);
            (0..100u64)
                .map(|index| {
                    r(&Meta {
                        dir: Dir::Up,
                        bot: 0,
                        index,
                        peer_index: index,
                        channel_index: index,
                        conn: ConnId(0),
                        at: Duration::ZERO,
                        bytes: &[],
                        channel: 0,
                        reliable: false,
                    })
                })
                .collect::<Vec<bool>>()
        };
        assert_eq!(picks(7), picks(7));
        assert_ne!(picks(7), picks(8));
        let n = picks(7).iter().filter(|&&d| d).count();
        assert!((15..45).contains(&n), "{n} of 100 at p = 0.3");
    }
}
