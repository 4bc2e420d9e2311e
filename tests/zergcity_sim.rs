//! ZergCity bots and the reference server over a simulated ENet-like link, in simulated time.
//!
//! `protocol::sim` models a datagram network; ZergCity needs ENet's channels, so this file
//! keeps City's pattern (tests/city_sim.rs): channels 0 and 1 are reliable (never lost, in
//! order), channel 2 is unreliable and subject to injected loss and hold-back; by default it
//! is delivered sequenced as ENet does (a packet older than one delivered is dropped). A bot
//! that asks for a relink gets a new connection id: the server sees the old one disconnect
//! and the bot's `handle_relinked` follows one round trip later, as ENet's connect would.
//! The link keeps what it dropped; the server's world at every tick is captured, so the tests
//! compare what the bots measured and applied with ground truth.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use tickswarm::metrics::Recorder;
use tickswarm::protocol::zergcity::codec::{self, Decompressor, Message};
use tickswarm::protocol::zergcity::world::World;
use tickswarm::protocol::zergcity::{
    ZergCityBot, ZergCityOptions, ZergCityServer, ZergCityServerConfig,
};
use tickswarm::protocol::{Bot, BotParams, BotPhase, ConnId, Server, MAX_MESSAGE};

#[derive(Debug, Clone)]
struct Pkt {
    to_server: bool,
    bot: usize,
    conn: ConnId,
    channel: u8,
    bytes: Vec<u8>,
    order: u64,
}

enum Ev {
    Pkt(Pkt),
    /// The new session of a relinking bot is up.
    Relinked(usize),
    /// The server learns that a connection dropped.
    ServerDisconnect(ConnId),
}

type DropRule = Box<dyn FnMut(&Pkt, Duration) -> bool>;

struct SimBot {
    bot: ZergCityBot,
    rec: Recorder,
    conn: ConnId,
}

struct Sim {
    base: Instant,
    now: Instant,
    server: ZergCityServer,
    bots: Vec<SimBot>,
    by_conn: HashMap<ConnId, usize>,
    next_conn: u64,
    delay: Duration,
    /// Unreliable packets (channel 2) server to bot that this rule returns true for are lost.
    drop_down: Option<DropRule>,
    /// Unreliable packets server to bot held back this much longer (reordering).
    hold_down: Option<(DropRule, Duration)>,
    sequenced: bool,
    wire: BTreeMap<(Instant, u64), Ev>,
    next_id: u64,
    order: HashMap<(bool, usize, u8), u64>,
    delivered_unrel: HashMap<(bool, usize), u64>,
    dropped: Vec<Pkt>,
    delivered_down: Vec<Pkt>,
    worlds: BTreeMap<u64, World>,
    /// (base_tick of each delta the server sent, the server's acked tick of that client then).
    delta_bases: Vec<(usize, u64, u64, Option<u64>)>,
    buf: Vec<u8>,
}

impl Sim {
    fn new(cfg: ZergCityServerConfig, delay: Duration) -> Self {
        let base = Instant::now();
        Self {
            base,
            now: base,
            server: ZergCityServer::new(cfg, base),
            bots: Vec::new(),
            by_conn: HashMap::new(),
            next_conn: 0,
            delay,
            drop_down: None,
            hold_down: None,
            sequenced: true,
            wire: BTreeMap::new(),
            next_id: 0,
            order: HashMap::new(),
            delivered_unrel: HashMap::new(),
            dropped: Vec::new(),
            delivered_down: Vec::new(),
            worlds: BTreeMap::new(),
            delta_bases: Vec::new(),
            buf: vec![0; MAX_MESSAGE],
        }
    }

    fn add_bot(&mut self, opts: ZergCityOptions, params: BotParams) -> usize {
        let i = self.bots.len();
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        self.by_conn.insert(conn, i);
        self.bots.push(SimBot {
            bot: ZergCityBot::new(params, opts),
            rec: Recorder::new(),
            conn,
        });
        self.server.handle_connect(self.now, conn);
        let b = &mut self.bots[i];
        b.bot.start(self.now, &mut b.rec);
        self.drain_bot(i);
        i
    }

    fn elapsed(&self) -> Duration {
        self.now - self.base
    }

    fn schedule(&mut self, at: Instant, ev: Ev) {
        self.next_id += 1;
        self.wire.insert((at, self.next_id), ev);
    }

    fn send(
        &mut self,
        to_server: bool,
        bot: usize,
        conn: ConnId,
        channel: u8,
        reliable: bool,
        bytes: &[u8],
    ) {
        assert_eq!(
            channel == codec::CHANNEL_UNRELIABLE,
            !reliable,
            "channel 2 and only channel 2 is unreliable"
        );
        let o = self.order.entry((to_server, bot, channel)).or_insert(0);
        *o += 1;
        let p = Pkt {
            to_server,
            bot,
            conn,
            channel,
            bytes: bytes.to_vec(),
            order: *o,
        };
        let mut at = self.now + self.delay;
        if !to_server && !reliable {
            let t = self.elapsed();
            if self.drop_down.as_mut().is_some_and(|r| r(&p, t)) {
                self.dropped.push(p);
                return;
            }
            if let Some((r, extra)) = self.hold_down.as_mut() {
                if r(&p, t) {
                    at += *extra;
                }
            }
        }
        self.schedule(at, Ev::Pkt(p));
    }

    fn drain_bot(&mut self, i: usize) {
        let mut buf = std::mem::take(&mut self.buf);
        while let Some(t) = self.bots[i].bot.poll_transmit(&mut buf) {
            let conn = self.bots[i].conn;
            self.send(true, i, conn, t.channel, t.reliable, &buf[..t.len]);
        }
        self.buf = buf;
        if self.bots[i].bot.poll_relink().is_some() {
            let old = self.bots[i].conn;
            self.by_conn.remove(&old);
            let conn = ConnId(self.next_conn);
            self.next_conn += 1;
            self.bots[i].conn = conn;
            self.by_conn.insert(conn, i);
            let (d, rtt) = (self.now + self.delay, self.now + self.delay * 2);
            self.schedule(d, Ev::ServerDisconnect(old));
            self.schedule(rtt, Ev::Relinked(i));
        }
    }

    fn drain_server(&mut self) {
        let mut buf = std::mem::take(&mut self.buf);
        while let Some((to, t)) = self.server.poll_transmit(&mut buf) {
            let bytes = &buf[..t.len];
            let Some(&i) = self.by_conn.get(&to) else {
                continue; // a dropped session
            };
            let mut dec = Decompressor::default();
            if let Ok(codec::Decoded {
                message: Some(Message::DeltaSnapshot(d)),
                ..
            }) = codec::decode(bytes, &mut dec)
            {
                let acked = self.server.acked_tick(to);
                self.delta_bases
                    .push((i, d.base_tick, d.target_tick, acked));
            }
            self.send(false, i, to, t.channel, t.reliable, bytes);
        }
        self.buf = buf;
        while self.server.poll_close().is_some() {}
    }

    fn deliver(&mut self, p: Pkt) {
        if p.to_server {
            self.server.handle_datagram(self.now, p.conn, &p.bytes);
            self.drain_server();
            return;
        }
        let i = p.bot;
        if self.bots[i].conn != p.conn {
            return; // for a session the bot dropped
        }
        if p.channel == codec::CHANNEL_UNRELIABLE && self.sequenced {
            let last = self.delivered_unrel.entry((false, i)).or_insert(0);
            if p.order < *last {
                return;
            }
            *last = p.order;
        }
        let before = self.bots[i].bot.newest_tick();
        let b = &mut self.bots[i];
        b.rec.datagram_down(p.bytes.len());
        b.bot.handle_datagram(self.now, &p.bytes, &mut b.rec);
        let after = self.bots[i].bot.newest_tick();
        if after != before {
            if let Some(t) = after {
                let applied = self.bots[i].bot.world().expect("the newest state is held");
                assert_eq!(
                    Some(applied),
                    self.worlds.get(&t),
                    "bot {i} applied tick {t} differently from the server"
                );
            }
        }
        self.delivered_down.push(p);
        self.drain_bot(i);
    }

    fn run_until(&mut self, until: Duration) {
        let end = self.base + until;
        loop {
            let wire = self.wire.keys().next().map(|k| k.0);
            let server = self.server.poll_timeout();
            let bots = self.bots.iter().filter_map(|b| b.bot.poll_timeout()).min();
            let Some(next) = [wire, server, bots].into_iter().flatten().min() else {
                break;
            };
            if next > end {
                break;
            }
            self.now = self.now.max(next);
            while let Some((&(at, id), _)) = self.wire.iter().next() {
                if at > self.now {
                    break;
                }
                let Some(ev) = self.wire.remove(&(at, id)) else {
                    break;
                };
                match ev {
                    Ev::Pkt(p) => self.deliver(p),
                    Ev::Relinked(i) => {
                        let conn = self.bots[i].conn;
                        self.server.handle_connect(self.now, conn);
                        let b = &mut self.bots[i];
                        b.bot.handle_relinked(self.now, &mut b.rec);
                        self.drain_bot(i);
                    }
                    Ev::ServerDisconnect(c) => {
                        self.server.handle_disconnect(self.now, c);
                        self.drain_server();
                    }
                }
            }
            if self.server.poll_timeout().is_some_and(|t| t <= self.now) {
                let before = self.server.tick();
                self.server.handle_timeout(self.now);
                if self.server.tick() != before {
                    self.worlds
                        .insert(self.server.tick(), self.server.world().clone());
                }
                self.drain_server();
            }
            for i in 0..self.bots.len() {
                if self.bots[i]
                    .bot
                    .poll_timeout()
                    .is_some_and(|t| t <= self.now)
                {
                    let b = &mut self.bots[i];
                    b.bot.handle_timeout(self.now, &mut b.rec);
                    self.drain_bot(i);
                }
            }
        }
        self.now = self.now.max(end);
    }

    fn rec(&self, i: usize) -> &Recorder {
        &self.bots[i].rec
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn params(i: u32) -> BotParams {
    let mut p = BotParams::with_index(i, 1000 + u64::from(i));
    p.input_rate_hz = 10.0;
    p.ping_interval = ms(250);
    p
}

fn extra<'a>(rec: &'a Recorder, name: &str) -> Option<&'a hdrhistogram::Histogram<u64>> {
    rec.extra.iter().find(|(n, _)| *n == name).map(|(_, h)| h)
}

#[test]
fn rtt_is_twice_the_one_way_delay_and_nothing_is_lost() {
    let mut sim = Sim::new(ZergCityServerConfig::default(), ms(20));
    for i in 0..4 {
        sim.add_bot(ZergCityOptions::default(), params(i));
    }
    sim.run_until(Duration::from_secs(5));
    for i in 0..4 {
        let r = sim.rec(i);
        assert_eq!(sim.bots[i].bot.phase(), BotPhase::Connected);
        assert!(r.rtt_us.len() >= 15, "{} pings", r.rtt_us.len());
        assert!(
            r.rtt_us.min() >= 39_900 && r.rtt_us.max() <= 40_100,
            "rtt {}..{}",
            r.rtt_us.min(),
            r.rtt_us.max()
        );
        assert_eq!(r.loss_down.expected, r.loss_down.received);
        assert!(r.loss_down.expected > 80);
        assert_eq!(r.loss_up.expected, r.loss_up.received);
        assert!(
            r.loss_up.expected > 20,
            "inputs aged: {}",
            r.loss_up.expected
        );
        let lat = extra(r, "input_ack_latency_us").expect("acks");
        assert!(lat.min() >= 39_900, "input to ack is a round trip");
        // The server's tick and the bot's estimate agree within one tick.
        let off = extra(r, "clock_offset_us").expect("offset");
        assert!(off.max() <= 50_100, "clock offset {}", off.max());
        assert_eq!(r.events.get("baseline_misses"), 0);
        assert_eq!(r.decode_errors.total(), 0, "{:?}", r.decode_errors);
        assert!(r.snapshots_applied > 80);
    }
}

#[test]
fn downstream_loss_equals_the_links_drops_exactly() {
    let mut sim = Sim::new(ZergCityServerConfig::default(), ms(5));
    sim.drop_down = Some(Box::new(|p, _| p.order % 7 == 3));
    for i in 0..3 {
        sim.add_bot(ZergCityOptions::default(), params(i));
    }
    sim.run_until(Duration::from_secs(6));
    for i in 0..3 {
        let r = sim.rec(i);
        // Ground truth: the bot's session runs from sequence 0 (ServerHello); losses after
        // the last message it received cannot be seen yet.
        let mut dec = Decompressor::default();
        let seq_of = |p: &Pkt, dec: &mut Decompressor| {
            codec::decode(&p.bytes, dec)
                .map(|d| d.header.sequence)
                .unwrap_or(0)
        };
        let last = sim
            .delivered_down
            .iter()
            .filter(|p| p.bot == i)
            .map(|p| seq_of(p, &mut dec))
            .max()
            .unwrap();
        let lost = sim
            .dropped
            .iter()
            .filter(|p| p.bot == i && seq_of(p, &mut dec) < last)
            .count() as u64;
        assert!(lost > 10, "the rule dropped {lost}");
        assert_eq!(r.loss_down.expected - r.loss_down.received, lost, "bot {i}");
        assert_eq!(r.loss_down.expected, u64::from(last) + 1);
        // Dropped deltas are not acked, yet every applied state was the server's.
        assert!(r.snapshots_applied > 50);
    }
}

#[test]
fn the_server_deltas_against_each_clients_newest_ack() {
    let mut sim = Sim::new(ZergCityServerConfig::default(), ms(100));
    sim.add_bot(ZergCityOptions::default(), params(0));
    sim.add_bot(ZergCityOptions::default(), params(1));
    sim.run_until(Duration::from_secs(4));
    assert!(sim.delta_bases.len() > 80);
    for &(bot, base, target, acked) in &sim.delta_bases {
        assert_eq!(Some(base), acked, "bot {bot}: delta {base}->{target}");
        // An ack takes a round trip (200 ms = 4 ticks) to come back.
        assert!(target - base >= 4, "{base}->{target}");
    }
    assert_eq!(sim.rec(0).events.get("baseline_misses"), 0);
}

#[test]
fn lost_and_reordered_deltas_never_meet_the_wrong_baseline_and_a_full_snapshot_recovers() {
    let cfg = ZergCityServerConfig {
        max_delta_age: 10,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg, ms(10));
    sim.sequenced = false;
    // Random-looking loss and hold-back; then a blackout of the unreliable channel longer
    // than the server's delta age, which only a FullSnapshot can heal.
    sim.drop_down = Some(Box::new(|p, t| {
        (p.order * 2_654_435_761) % 10 < 2 || (ms(2000)..ms(3000)).contains(&t)
    }));
    sim.hold_down = Some((Box::new(|p, _| p.order % 5 == 1), ms(120)));
    for i in 0..4 {
        let mut p = params(i);
        p.input_rate_hz = 20.0;
        sim.add_bot(ZergCityOptions::default(), p);
    }
    sim.run_until(Duration::from_secs(6));
    for i in 0..4 {
        let r = sim.rec(i);
        // Every state a bot applied equalled the server's (checked on every delivery).
        assert!(r.snapshots_applied > 50, "bot {i}: {}", r.snapshots_applied);
        assert!(
            r.events.get("delta_stale") > 0,
            "reordered deltas arrived late"
        );
        assert!(
            r.events.get("full_snapshot_fallbacks") >= 1,
            "bot {i}: {:?}",
            r.events
        );
        assert_eq!(r.decode_errors.total(), 0, "{:?}", r.decode_errors);
        let newest = sim.bots[i].bot.newest_tick().unwrap();
        assert!(
            newest + 5 >= sim.server.tick(),
            "bot {i} caught up: {newest}"
        );
    }
    // A delta against a baseline the bot does not hold is counted and not acked.
    let newest = sim.bots[0].bot.newest_tick().unwrap();
    let mut buf = vec![0u8; 4096];
    let n = codec::Encoder::new()
        .encode(
            &mut buf,
            60_000,
            &Message::DeltaSnapshot(codec::DeltaSnapshot {
                base_tick: newest - 40,
                target_tick: newest + 1,
                entity_count: 0,
                component_count: 0,
                payload: &[],
            }),
        )
        .unwrap();
    let b = &mut sim.bots[0];
    let misses = b.rec.events.get("baseline_misses");
    b.bot.handle_datagram(sim.now, &buf[..n], &mut b.rec);
    assert_eq!(b.rec.events.get("baseline_misses"), misses + 1);
    assert_eq!(b.bot.newest_tick(), Some(newest), "not applied, not acked");
    assert!(b.bot.poll_transmit(&mut buf).is_none(), "no SnapshotAck");
}

#[test]
fn reconnection_restores_the_slot_and_resyncs_through_a_full_snapshot() {
    let mut sim = Sim::new(ZergCityServerConfig::default(), ms(15));
    for i in 0..3 {
        sim.add_bot(ZergCityOptions::default(), params(i));
    }
    sim.run_until(Duration::from_secs(2));
    let slot = sim.bots[1].bot.slot();
    let token = sim.bots[1].bot.token();
    assert!(slot.is_some());
    let (now, b) = (sim.now, &mut sim.bots[1]);
    b.bot.reconnect_now(now, &mut b.rec);
    sim.drain_bot(1);
    sim.run_until(Duration::from_secs(4));
    let r = sim.rec(1);
    assert_eq!(r.events.get("reconnect_attempts"), 1);
    assert_eq!(r.events.get("reconnect_slot_restored"), 1, "{:?}", r.events);
    assert_eq!(sim.bots[1].bot.slot(), slot);
    assert_eq!(sim.bots[1].bot.token(), token, "the same token");
    let resync = extra(r, "resync_us").expect("resync");
    assert_eq!(resync.len(), 1);
    // Drop, connect (a round trip), hello and full snapshot: at least two round trips.
    assert!(resync.min() >= 60_000, "resync {}", resync.min());
    assert_eq!(sim.server.players(), 3);
    let newest = sim.bots[1].bot.newest_tick().unwrap();
    assert!(newest + 3 >= sim.server.tick());
    // A new player while the slot is held gets another slot; the fifth is refused.
    sim.add_bot(ZergCityOptions::default(), params(3));
    sim.add_bot(ZergCityOptions::default(), params(4));
    sim.run_until(Duration::from_secs(5));
    assert_eq!(sim.bots[3].bot.phase(), BotPhase::Connected);
    assert_eq!(sim.bots[4].bot.phase(), BotPhase::Failed);
    assert_eq!(sim.rec(4).connect_failures.get("server_full"), 1);
    assert_eq!(sim.server.stats().refused, 1);
}

#[test]
fn inputs_beyond_sixty_a_second_are_rate_limited() {
    let mut sim = Sim::new(ZergCityServerConfig::default(), ms(5));
    let mut p = params(0);
    p.input_rate_hz = 100.0;
    sim.add_bot(ZergCityOptions::default(), p);
    sim.run_until(Duration::from_secs(4));
    let r = sim.rec(0);
    let limited = r.events.get("input_result.rate_limited");
    let total: u64 = r.events.get_prefix("input_result");
    assert!(limited > 0);
    // At most 60 accepted-or-rejected-on-merit per second.
    assert!(total - limited <= 60 * 4 + 1, "{total} - {limited}");
    assert_eq!(
        r.loss_up.expected, r.loss_up.received,
        "rate-limited inputs are acked too"
    );
}

#[test]
fn ten_invalid_messages_end_the_session() {
    let mut sim = Sim::new(ZergCityServerConfig::default(), ms(5));
    sim.add_bot(ZergCityOptions::default(), params(0));
    sim.run_until(Duration::from_secs(1));
    let conn = sim.bots[0].conn;
    for _ in 0..10 {
        sim.server
            .handle_datagram(sim.now, conn, b"not zergcity at all");
    }
    sim.drain_server();
    sim.run_until(Duration::from_secs(2));
    let r = sim.rec(0);
    assert_eq!(
        r.events.get("server_disconnect.protocol_error"),
        1,
        "{:?}",
        r.events
    );
    assert_eq!(r.events.get("error_message.invalid_message"), 1);
    assert_eq!(sim.bots[0].bot.phase(), BotPhase::Closed);
}

// ---- interop with another implementation's layouts (scripts/zergcity-peer) -----------------

/// A FullSnapshot payload in the layout of scripts/zergcity-peer (its D9): a 36-byte
/// Metadata, `count u32` Players, and Components as `count u32` of `entity_id u32` + §7.2
/// record. The section table is sound (§5.1); the contents are not in our layout.
fn foreign_full_payload(tick: u64) -> Vec<u8> {
    let mut meta = Vec::new();
    meta.extend_from_slice(&tick.to_le_bytes());
    for v in [20u32, 128, 128] {
        meta.extend_from_slice(&v.to_le_bytes());
    }
    meta.extend_from_slice(&7u64.to_le_bytes());
    meta.extend_from_slice(&1u32.to_le_bytes());
    meta.extend_from_slice(&4u32.to_le_bytes());
    let players = 0u32.to_le_bytes().to_vec();
    let mut ents = 1u32.to_le_bytes().to_vec();
    ents.extend_from_slice(&1u32.to_le_bytes());
    ents.extend_from_slice(&1u32.to_le_bytes());
    ents.push(1);
    ents.push(1);
    let mut comps = 1u32.to_le_bytes().to_vec();
    comps.extend_from_slice(&1u32.to_le_bytes());
    comps.extend_from_slice(&1u16.to_le_bytes());
    comps.extend_from_slice(&1u16.to_le_bytes());
    comps.extend_from_slice(&12u16.to_le_bytes());
    comps.extend_from_slice(&[0; 12]);
    let sections: [(u32, &[u8]); 4] = [(1, &meta), (2, &players), (4, &ents), (5, &comps)];
    let mut out = (sections.len() as u32).to_le_bytes().to_vec();
    let mut off = 0u32;
    for (ty, d) in &sections {
        for v in [*ty, off, d.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        off += d.len() as u32;
    }
    for (_, d) in &sections {
        out.extend_from_slice(d);
    }
    out
}

/// A delta as the peer writes it: one created entity (archetype = component bitmask) with a
/// Position added, raw §7.3 data.
fn peer_delta(id: u32) -> Vec<u8> {
    let mut p = id.to_le_bytes().to_vec();
    p.push(0);
    p.extend_from_slice(&1u32.to_le_bytes());
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(&1u16.to_le_bytes());
    p.push(0);
    p.extend_from_slice(&12u16.to_le_bytes());
    p.extend_from_slice(&[0; 12]);
    p
}

/// Everything the bot sent, decoded: (type, acked tick or input sequence).
fn drain_sent(bot: &mut ZergCityBot, buf: &mut [u8]) -> Vec<(codec::MsgType, u64)> {
    let mut out = Vec::new();
    let mut dec = Decompressor::new(codec::MAX_PAYLOAD);
    while let Some(t) = bot.poll_transmit(buf) {
        let d = codec::decode(&buf[..t.len], &mut dec).expect("the bot sends valid messages");
        let m = d.message.expect("a known type");
        let v = match m {
            Message::SnapshotAck { acked_tick, .. } => acked_tick,
            Message::InputMessage { input_sequence, .. } => u64::from(input_sequence),
            _ => 0,
        };
        out.push((m.msg_type(), v));
    }
    out
}

#[test]
fn a_full_snapshot_in_a_foreign_layout_is_an_opaque_baseline_that_deltas_and_inputs_use() {
    let t0 = Instant::now();
    let mut bot = ZergCityBot::new(params(0), ZergCityOptions::default());
    let mut rec = Recorder::new();
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut pkt = vec![0u8; MAX_MESSAGE];
    let mut enc = codec::Encoder::new();
    bot.start(t0, &mut rec);
    assert_eq!(
        drain_sent(&mut bot, &mut buf)[0].0,
        codec::MsgType::ClientHello
    );
    // The peer numbers its messages from 1 (its D2).
    let hello = Message::ServerHello {
        server_version: 0x0001_0000,
        result: 0,
        assigned_slot: 0,
        session_token: [9; codec::TOKEN_LEN],
        tick_rate: 20,
        current_tick: 99,
        map_width: 128,
        map_height: 128,
        num_players: 1,
    };
    let n = enc.encode(&mut pkt, 1, &hello).unwrap();
    bot.handle_datagram(t0, &pkt[..n], &mut rec);
    let n = codec::encode_full(&mut pkt, 2, 100, &foreign_full_payload(100)).unwrap();
    bot.handle_datagram(t0 + ms(5), &pkt[..n], &mut rec);
    assert_eq!(rec.events.get("full_snapshot.foreign_layout"), 1);
    assert_eq!(rec.decode_errors.total(), 0, "{:?}", rec.decode_errors);
    assert!(bot.is_opaque(100));
    assert_eq!(
        drain_sent(&mut bot, &mut buf),
        vec![(codec::MsgType::SnapshotAck, 100)]
    );

    // Deltas 101, 102, (103 dropped by the server: its sequence 5 never arrives), 104.
    let mut acked = Vec::new();
    for (seq, base, target) in [(3u32, 100u64, 101u64), (4, 101, 102), (6, 102, 104)] {
        let payload = peer_delta(1000 + target as u32);
        let d = Message::DeltaSnapshot(codec::DeltaSnapshot {
            base_tick: base,
            target_tick: target,
            entity_count: 1,
            component_count: 1,
            payload: &payload,
        });
        let n = enc.encode(&mut pkt, seq, &d).unwrap();
        bot.handle_datagram(t0 + ms(50 * (target - 99)), &pkt[..n], &mut rec);
        acked.extend(drain_sent(&mut bot, &mut buf));
    }
    let acks: Vec<u64> = acked
        .iter()
        .filter(|(t, _)| *t == codec::MsgType::SnapshotAck)
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(acks, vec![101, 102, 104]);
    assert!(bot.is_opaque(104));
    assert_eq!(rec.events.get("delta_applied_opaque"), 3);
    assert_eq!(rec.events.get("deltas_expected"), 4);
    assert_eq!(rec.events.get("deltas_missing"), 1);
    assert_eq!((rec.loss_down.expected, rec.loss_down.received), (6, 5));

    // A delta onto an opaque baseline is still held to §5.2: a bad operation is a decode
    // error and is not acknowledged.
    let mut bad = peer_delta(7);
    bad[4] = 9;
    let d = Message::DeltaSnapshot(codec::DeltaSnapshot {
        base_tick: 104,
        target_tick: 105,
        entity_count: 1,
        component_count: 1,
        payload: &bad,
    });
    let n = enc.encode(&mut pkt, 7, &d).unwrap();
    bot.handle_datagram(t0 + ms(310), &pkt[..n], &mut rec);
    assert_eq!(rec.decode_errors.get("delta_snapshot.bad_operation"), 1);
    assert!(drain_sent(&mut bot, &mut buf).is_empty());

    // Play goes on: inputs on the grid.
    let mut inputs = 0;
    let mut now = t0 + ms(320);
    while now < t0 + ms(1500) {
        bot.handle_timeout(now, &mut rec);
        inputs += drain_sent(&mut bot, &mut buf)
            .iter()
            .filter(|(t, _)| *t == codec::MsgType::InputMessage)
            .count();
        now += ms(10);
    }
    assert!(inputs >= 8, "inputs sent: {inputs}");
    assert_eq!(rec.inputs_sent, inputs as u64);
}

/// 30 deltas creating 7,000 entities each, every id below all held (the order that made a
/// per-entity insert move the whole world): the bot stops at 65,536 entities per world,
/// refuses the rest by reason without acknowledging them, keeps its worlds within
/// `max_state_bytes` by dropping the oldest baselines, and stays fast.
#[test]
fn a_bot_flooded_with_new_low_ids_refuses_past_the_limit_within_its_budget() {
    use tickswarm::protocol::zergcity::world::{self, Metadata};
    let opts = ZergCityOptions {
        max_state_bytes: tickswarm::protocol::zergcity::MIN_STATE_BYTES,
        ..ZergCityOptions::default()
    };
    let t0 = Instant::now();
    let mut bot = ZergCityBot::new(params(0), opts.clone());
    let mut rec = Recorder::new();
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut pkt = vec![0u8; 2 * MAX_MESSAGE];
    let mut enc = codec::Encoder::new();
    bot.start(t0, &mut rec);
    drain_sent(&mut bot, &mut buf);
    let hello = Message::ServerHello {
        server_version: 0x0001_0000,
        result: 0,
        assigned_slot: 0,
        session_token: [9; codec::TOKEN_LEN],
        tick_rate: 20,
        current_tick: 99,
        map_width: 4,
        map_height: 4,
        num_players: 1,
    };
    let n = enc.encode(&mut pkt, 0, &hello).unwrap();
    bot.handle_datagram(t0, &pkt[..n], &mut rec);
    let meta = Metadata {
        tick: 100,
        tick_rate: 20,
        map_width: 4,
        map_height: 4,
        rng_state: 1,
    };
    let mut full = vec![0u8; 4096];
    let len =
        world::write_full(&mut full, &meta, &[], &[0; 16], &[0; 16], &World::default()).unwrap();
    let n = codec::encode_full(&mut pkt, 1, 100, &full[..len]).unwrap();
    bot.handle_datagram(t0, &pkt[..n], &mut rec);
    assert_eq!(bot.newest_tick(), Some(100));
    let started = std::time::Instant::now();
    let mut next_id = 0xF000_0000u32;
    for k in 0..30u32 {
        next_id -= 7_000;
        let mut payload = Vec::with_capacity(7_000 * 9);
        for id in next_id..next_id + 7_000 {
            payload.extend_from_slice(&id.to_le_bytes());
            payload.push(0);
            payload.extend_from_slice(&4u32.to_le_bytes());
        }
        let base = bot.newest_tick().unwrap();
        let d = Message::DeltaSnapshot(codec::DeltaSnapshot {
            base_tick: base,
            target_tick: 101 + u64::from(k),
            entity_count: 7_000,
            component_count: 0,
            payload: &payload,
        });
        let n = enc.encode(&mut pkt, 2 + k, &d).unwrap();
        bot.handle_datagram(t0 + ms(u64::from(k) * 50), &pkt[..n], &mut rec);
    }
    let took = started.elapsed();
    // 9 deltas fit (63,000 entities), the other 21 are refused and not acknowledged.
    assert_eq!(bot.world().map(World::len), Some(9 * 7_000));
    assert_eq!(bot.newest_tick(), Some(109));
    assert_eq!(
        rec.decode_errors.get("delta_snapshot.too_many_entities"),
        21
    );
    assert!(rec.events.get("baseline_evicted") > 0, "{:?}", rec.events);
    assert!(!bot.has_baseline(101), "the oldest baselines were dropped");
    assert!(took < Duration::from_secs(20), "{took:?}");
}
