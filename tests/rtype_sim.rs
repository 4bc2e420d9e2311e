//! R-Type bots against the reference server over a simulated link, in simulated time: no
//! sockets, no sleeping. Time is an `Instant` base plus offsets; the link delays every
//! datagram by a fixed one-way `d` (so it stays in order) and can drop every K-th snapshot
//! to each bot, every ENTITY_DESTROY, or everything in one direction.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tickswarm::protocol::ConnId;

use tickswarm::games::rtype::codec::{self, FloatOrder, Packet};
use tickswarm::games::rtype::{RtypeBot, RtypeOptions, RtypeServer, RtypeServerConfig};
use tickswarm::metrics::Recorder;
use tickswarm::protocol::sim::{rule, Dir};
use tickswarm::protocol::{Bot, BotParams, BotPhase, InputPattern, Server, MAX_DATAGRAM};

const MS: Duration = Duration::from_millis(1);

type Harness = tickswarm::protocol::sim::Sim<RtypeBot, RtypeServer>;

/// What the downlink does to each server datagram, switched by the tests while they run.
#[derive(Debug, Default)]
struct DownRules {
    open: bool,
    /// Drop every K-th snapshot sent to each bot.
    every_snapshot: Option<u64>,
    drop_destroys: bool,
    /// Snapshots sent to each bot so far.
    snapshots: HashMap<usize, u64>,
}

/// The crate's simulation harness with R-Type's link rules and ground truth: snapshot loss
/// counted per bot, destroys dropped, either direction cut, the server's clock stopped.
struct Sim {
    h: Harness,
    delay: Duration,
    down: Rc<RefCell<DownRules>>,
    up_open: Rc<Cell<bool>>,
    order: FloatOrder,
}

/// One bot as the tests read it, with its ground truth from the link's log.
struct SimBot<'a> {
    bot: &'a RtypeBot,
    rec: &'a Recorder,
    addr: ConnId,
    /// Snapshots the server sent to this bot, in order: (tick, dropped by the link).
    sent: Vec<(u32, bool)>,
    /// Ticks of the snapshots delivered, in order.
    delivered: Vec<u32>,
}

impl SimBot<'_> {
    /// Snapshots the link dropped between the first and the last one delivered: all the bot
    /// can see as lost.
    fn visible_drops(&self) -> u64 {
        let (Some(&first), Some(&last)) = (self.delivered.first(), self.delivered.last()) else {
            return 0;
        };
        let start = self
            .sent
            .iter()
            .position(|&(t, d)| t == first && !d)
            .unwrap();
        let end = self
            .sent
            .iter()
            .rposition(|&(t, d)| t == last && !d)
            .unwrap();
        self.sent[start..=end].iter().filter(|(_, d)| *d).count() as u64
    }

    fn extra(&self, name: &str) -> &hdrhistogram::Histogram<u64> {
        &self
            .rec
            .extra
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no histogram {name}"))
            .1
    }
}

fn snapshot_tick(bytes: &[u8], order: FloatOrder) -> Option<u32> {
    match codec::decode(bytes, order) {
        Ok(Packet::Snapshot(s)) => Some(s.tick),
        _ => None,
    }
}

impl Sim {
    fn new(cfg: RtypeServerConfig, delay: Duration) -> Self {
        cfg.validate().expect("valid server config");
        let order = cfg.float_order;
        let t0 = Instant::now();
        let mut h = Harness::new(t0, RtypeServer::new(cfg, t0), Vec::new());
        h.up.delay = delay;
        h.down.delay = delay;
        let down = Rc::new(RefCell::new(DownRules {
            open: true,
            ..DownRules::default()
        }));
        let rules = down.clone();
        h.down.drop = Some(rule(move |m| {
            let mut r = rules.borrow_mut();
            if !r.open {
                return true;
            }
            match codec::decode(m.bytes, order) {
                Ok(Packet::Snapshot(_)) => {
                    let n = r.snapshots.entry(m.bot).or_default();
                    *n += 1;
                    let n = *n;
                    r.every_snapshot.is_some_and(|k| n % k == 0)
                }
                Ok(Packet::EntityDestroy { .. }) => r.drop_destroys,
                Ok(_) => false,
                Err(e) => panic!("server sent a malformed datagram: {e}"),
            }
        }));
        let up_open = Rc::new(Cell::new(true));
        let open = up_open.clone();
        h.up.drop = Some(rule(move |_| !open.get()));
        Self {
            h,
            delay,
            down,
            up_open,
            order,
        }
    }

    fn set_drop_every_snapshot(&mut self, k: Option<u64>) {
        self.down.borrow_mut().every_snapshot = k;
    }

    fn set_drop_destroys(&mut self, on: bool) {
        self.down.borrow_mut().drop_destroys = on;
    }

    fn set_down_open(&mut self, open: bool) {
        self.down.borrow_mut().open = open;
    }

    fn set_up_open(&mut self, open: bool) {
        self.up_open.set(open);
    }

    fn now(&self) -> Instant {
        self.h.now()
    }

    fn server(&self) -> &RtypeServer {
        &self.h.server
    }

    /// Add a bot and start it now.
    fn add_bot(&mut self, params: BotParams, opts: RtypeOptions) -> usize {
        let i = self.h.add_bot(RtypeBot::new(params, opts));
        self.h.start(i);
        i
    }

    fn bot(&self, i: usize) -> SimBot<'_> {
        let order = self.order;
        let sent = self
            .h
            .down_to(i)
            .filter_map(|r| snapshot_tick(&r.bytes, order).map(|t| (t, r.dropped)))
            .collect();
        let delivered = self
            .h
            .deliveries
            .iter()
            .map(|&idx| &self.h.log[idx])
            .filter(|r| r.dir == Dir::Down && r.bot == i)
            .filter_map(|r| snapshot_tick(&r.bytes, order))
            .collect();
        SimBot {
            bot: &self.h.bots[i],
            rec: &self.h.recs[i],
            addr: self.h.addrs[i],
            sent,
            delivered,
        }
    }

    fn views(&self) -> impl Iterator<Item = SimBot<'_>> + '_ {
        (0..self.h.bots.len()).map(|i| self.bot(i))
    }

    fn run_for(&mut self, d: Duration) {
        self.h.run_for(d);
    }

    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Sim) -> bool) -> bool {
        let end = self.now() + limit;
        while !done(self) {
            if !self.h.advance(end) {
                return done(self);
            }
        }
        true
    }

    /// Stop the server's clock right after a snapshot tick, then deliver everything in
    /// flight: every bot's view is then the server's current world.
    fn quiesce(&mut self) {
        // Stop dropping first: the snapshot of the tick waited for below must arrive.
        self.set_drop_every_snapshot(None);
        let step = self.server().snapshot_step();
        let start = self.server().tick();
        assert!(
            self.run_until(Duration::from_secs(1), |s| s.server().tick() != start
                && s.server().tick() % step == 0)
        );
        self.h.server_paused = true;
        self.run_for(self.delay * 3);
    }

    fn stop_bot(&mut self, i: usize) {
        self.h.stop(i);
    }

    /// The bot's table must equal the server's view of its room, bit for bit.
    fn assert_table_matches_server(&self, i: usize) {
        let b = self.bot(i);
        let room = self.server().room_of(b.addr).expect("bot in a room");
        let mut want: Vec<_> = self
            .server()
            .room_entities(room)
            .map(|e| {
                (
                    e.id,
                    e.x.to_bits(),
                    e.y.to_bits(),
                    e.vx.to_bits(),
                    e.vy.to_bits(),
                    e.sprite,
                )
            })
            .collect();
        let mut got: Vec<_> = b
            .bot
            .entities()
            .map(|(id, e)| {
                (
                    id,
                    e.x.to_bits(),
                    e.y.to_bits(),
                    e.vx.to_bits(),
                    e.vy.to_bits(),
                    e.sprite,
                )
            })
            .collect();
        want.sort_unstable();
        got.sort_unstable();
        assert!(!want.is_empty());
        assert_eq!(got, want, "bot {i}'s entity table");
    }
}

fn params(index: u32, pattern: InputPattern) -> BotParams {
    BotParams {
        pattern,
        // Spread the bots over the input tick like the engine does.
        phase_offset: Duration::from_micros(u64::from(index) * 4_100),
        ..BotParams::with_index(index, 0xB07 + u64::from(index))
    }
}

fn walk() -> InputPattern {
    InputPattern::RandomWalk {
        change_every: Duration::from_millis(300),
    }
}

/// Histogram precision: `v` and `want` are in the same bucket.
fn same_bucket(h: &hdrhistogram::Histogram<u64>, v: u64, want: u64) -> bool {
    h.equivalent(v, want)
}

#[test]
fn injected_loss_and_delay_are_reported_exactly() {
    let d = 20 * MS;
    let mut sim = Sim::new(RtypeServerConfig::default(), d);
    sim.set_drop_every_snapshot(Some(7));
    for i in 0..4 {
        sim.add_bot(params(i, walk()), RtypeOptions::default());
    }
    sim.run_for(Duration::from_secs(10));
    for (i, b) in sim.views().enumerate() {
        assert_eq!(b.bot.phase(), BotPhase::Connected, "bot {i}");
    }
    // The count is whole when the session ends: a last gap of two steps may still be held as
    // a possible change of the server's snapshot rate until then.
    for i in 0..4 {
        sim.stop_bot(i);
    }

    for (i, b) in sim.views().enumerate() {
        assert_eq!(
            b.bot.tick_step(),
            Some(3),
            "bot {i} learned the 20 Hz step of a 60 Hz server"
        );
        let loss = b.rec.loss_down;
        let dropped = b.visible_drops();
        assert!(dropped >= 20, "bot {i}: only {dropped} drops");
        assert_eq!(loss.expected - loss.received, dropped, "bot {i} loss");
        assert_eq!(loss.received, b.delivered.len() as u64, "bot {i} received");
        assert_eq!(b.rec.snapshots_applied, b.delivered.len() as u64);
        assert!(b.rec.decode_errors.total() == 0);

        // RTT: one PING in flight, answered at once by the server: 2d.
        let rtt = &b.rec.rtt_us;
        assert!(rtt.len() >= 9, "bot {i}: {} rtt samples", rtt.len());
        assert!(
            same_bucket(rtt, rtt.min(), 40_000) && same_bucket(rtt, rtt.max(), 40_000),
            "bot {i} rtt {}..{}",
            rtt.min(),
            rtt.max()
        );
        let hs = &b.rec.handshake_us;
        assert_eq!(hs.len(), 1);
        assert!(same_bucket(hs, hs.max(), 40_000));
        assert_eq!(
            b.rec.events.get("pong_late") + b.rec.events.get("ping_timeout"),
            0
        );

        // A steady 20 Hz stream with every 7th snapshot missing.
        let ia = &b.rec.snapshot_interarrival_us;
        assert!(same_bucket(ia, ia.min(), 50_000) && same_bucket(ia, ia.max(), 100_000));
        let jitter = b.extra("snapshot_jitter_us");
        assert!(jitter.len() > 100);
        assert!(
            jitter.max() <= 1,
            "fixed delay has no jitter, got {}",
            jitter.max()
        );
        let interp = b.extra("interp_delay_us");
        assert!(
            same_bucket(interp, interp.min(), 50_000),
            "{}",
            interp.min()
        );
        assert!(
            same_bucket(interp, interp.max(), 100_000),
            "{}",
            interp.max()
        );
        let age = b.extra("snapshot_age_ticks");
        assert_eq!(age.max(), 1, "in order: age 0 (the histogram floor is 1)");
        assert_eq!(age.len(), b.delivered.len() as u64);
        assert_eq!(b.extra("entities").len(), b.delivered.len() as u64);
        assert_eq!(b.extra("snapshot_tick_step").max(), 3);

        // Inputs at 60 Hz on the grid, none late in simulated time.
        assert!(
            (590..=601).contains(&b.rec.inputs_sent),
            "bot {i}: {}",
            b.rec.inputs_sent
        );
        assert!(b.rec.send_lateness_us.max() <= 1);
        assert!(b.bot.entity_id().is_some(), "bot {i} learned its ship");
        assert_eq!(
            b.bot.entity_id(),
            sim.server().ship_of(b.addr),
            "bot {i} learned the ship the server gave it"
        );
    }
}

#[test]
fn configured_tick_step_and_loss_of_the_first_snapshots() {
    // With the step configured, loss counts from the first snapshot (no learning phase).
    let mut sim = Sim::new(
        RtypeServerConfig {
            snapshot_hz: 30,
            ..RtypeServerConfig::default()
        },
        5 * MS,
    );
    // Every third snapshot: gaps of 2, 2, 4. (Dropping every other one would leave only gaps
    // of 4, which is a server that halved its snapshot rate as far as a client can tell.)
    sim.set_drop_every_snapshot(Some(3));
    let opts = RtypeOptions {
        snapshot_tick_step: Some(2),
        ..RtypeOptions::default()
    };
    sim.add_bot(params(0, InputPattern::Idle), opts);
    sim.run_for(Duration::from_secs(3));
    sim.stop_bot(0);
    let b = &sim.bot(0);
    let loss = b.rec.loss_down;
    assert_eq!(loss.expected - loss.received, b.visible_drops());
    assert!((0.30..0.37).contains(&loss.rate()), "{}", loss.rate());
    assert_eq!(b.rec.events.get("snapshot_rate_down"), 0);
    assert_eq!(b.bot.tick_step(), Some(2));
}

#[test]
fn reject_when_full() {
    let cfg = RtypeServerConfig {
        max_clients: 2,
        ..RtypeServerConfig::default()
    };
    let mut sim = Sim::new(cfg, 10 * MS);
    for i in 0..3 {
        sim.add_bot(params(i, InputPattern::Idle), RtypeOptions::default());
    }
    sim.run_for(Duration::from_secs(1));
    let phases: Vec<_> = sim.views().map(|b| b.bot.phase()).collect();
    assert_eq!(
        phases,
        [BotPhase::Connected, BotPhase::Connected, BotPhase::Failed]
    );
    let third = &sim.bot(2).rec;
    assert_eq!(third.connect_failures.get("rejected"), 1);
    assert_eq!(third.events.get("reject_received"), 1);
    assert_eq!(third.connects_ok, 0);
    assert_eq!(sim.server().stats().refused, 1);
    assert_eq!(sim.server().stats().clients, 2);
}

#[test]
fn rejected_bot_retries_with_backoff_until_a_place_frees_up() {
    let cfg = RtypeServerConfig {
        max_clients: 1,
        ..RtypeServerConfig::default()
    };
    let mut sim = Sim::new(cfg, 10 * MS);
    sim.add_bot(params(0, InputPattern::Idle), RtypeOptions::default());
    sim.run_for(100 * MS);
    let retrying = RtypeOptions {
        retry_on_reject: true,
        retry_backoff_ms: 100,
        retry_backoff_max_ms: 400,
        retry_limit: 100,
        ..RtypeOptions::default()
    };
    sim.add_bot(params(1, InputPattern::Idle), retrying);
    sim.run_for(Duration::from_secs(2));
    assert_eq!(sim.bot(1).bot.phase(), BotPhase::Connecting);
    let rejects = sim.bot(1).rec.events.get("reject_received");
    // Waits of 50–100, 100–200, then 200–400 ms (+ a round trip each): 5 to 9 in 2 s.
    assert!((5..=9).contains(&rejects), "{rejects} rejections");
    sim.stop_bot(0);
    sim.run_for(Duration::from_secs(1));
    let b = &sim.bot(1);
    assert_eq!(b.bot.phase(), BotPhase::Connected);
    assert_eq!(b.rec.connects_ok, 1);
    assert_eq!(b.rec.connect_failures.total(), 0);
    assert_eq!(sim.server().stats().disconnected, 1);
    assert!(b.bot.entity_id().is_some());
    assert_eq!(sim.server().ship_of(b.addr), b.bot.entity_id());
}

#[test]
fn rejected_bot_gives_up_after_its_retry_limit() {
    let cfg = RtypeServerConfig {
        max_clients: 1,
        ..RtypeServerConfig::default()
    };
    let mut sim = Sim::new(cfg, 10 * MS);
    sim.add_bot(params(0, InputPattern::Idle), RtypeOptions::default());
    let opts = RtypeOptions {
        retry_on_reject: true,
        retry_backoff_ms: 50,
        retry_limit: 3,
        ..RtypeOptions::default()
    };
    sim.add_bot(params(1, InputPattern::Idle), opts);
    sim.run_for(Duration::from_secs(2));
    let b = &sim.bot(1);
    assert_eq!(b.bot.phase(), BotPhase::Failed);
    assert_eq!(b.rec.events.get("reject_received"), 3);
    assert_eq!(b.rec.connect_failures.get("rejected"), 1);
    assert_eq!(sim.server().stats().refused, 3);
}

/// Enemies everywhere, one touch kills: idle ships die quickly.
fn deadly() -> RtypeServerConfig {
    RtypeServerConfig {
        enemy_spawn_interval: 50 * MS,
        max_enemies_per_room: 40,
        player_hp: 25,
        contact_damage: 25,
        seed: 7,
        ..RtypeServerConfig::default()
    }
}

#[test]
fn gameover_is_counted_and_rejoin_brings_a_new_ship() {
    let mut sim = Sim::new(deadly(), 10 * MS);
    let rejoin = RtypeOptions {
        rejoin_on_gameover: true,
        ..RtypeOptions::default()
    };
    sim.add_bot(params(0, InputPattern::Idle), RtypeOptions::default());
    sim.add_bot(params(1, InputPattern::Idle), rejoin);
    let all_died = sim.run_until(Duration::from_secs(60), |s| {
        s.bot(0).bot.gameovers() >= 1 && s.bot(1).rec.events.get("rejoined") >= 1
    });
    assert!(all_died, "no gameover within 60 s of simulated time");
    sim.run_for(100 * MS);

    // The spectator: dead, no ship, no inputs since.
    let spectator = &sim.bot(0);
    assert!(spectator.bot.is_dead());
    assert_eq!(spectator.bot.entity_id(), None);
    assert_eq!(sim.server().ship_of(spectator.addr), None);
    assert_eq!(spectator.bot.phase(), BotPhase::Connected);
    let inputs = spectator.rec.inputs_sent;
    sim.run_for(Duration::from_secs(1));
    assert_eq!(
        sim.bot(0).rec.inputs_sent,
        inputs,
        "a dead bot sends no input"
    );
    assert!(sim.bot(0).rec.snapshots_applied > 0);

    // The rejoiner: alive again with the server's new ship as its entity, rejoin time
    // recorded.
    let b = &sim.bot(1);
    if !b.bot.is_dead() {
        assert!(b.bot.entity_id().is_some());
        assert_eq!(sim.server().ship_of(b.addr), b.bot.entity_id());
    }
    assert!(!b.extra("rejoin_us").is_empty());
    let gameovers: u64 = sim.views().map(|b| u64::from(b.bot.gameovers())).sum();
    assert_eq!(sim.server().stats().events.get("gameover"), gameovers);
    assert_eq!(
        sim.bot(1).rec.connects_ok,
        1,
        "a rejoin is not a second handshake"
    );
    assert!(sim.bot(0).rec.events.get("damage_taken") >= 25);
}

#[test]
fn entity_tables_match_the_server_after_loss() {
    for order in [FloatOrder::Big, FloatOrder::Little] {
        let cfg = RtypeServerConfig {
            enemy_spawn_interval: 200 * MS,
            float_order: order,
            ..RtypeServerConfig::default()
        };
        let mut sim = Sim::new(cfg, 15 * MS);
        sim.set_drop_every_snapshot(Some(5));
        let opts = RtypeOptions {
            float_order: order,
            rejoin_on_gameover: true,
            ..RtypeOptions::default()
        };
        for i in 0..5 {
            sim.add_bot(params(i, walk()), opts.clone());
        }
        sim.run_for(Duration::from_secs(6));
        sim.quiesce();
        let mut damage = 0;
        for i in 0..5 {
            sim.assert_table_matches_server(i);
            let r = &sim.bot(i).rec;
            // Creates and destroys all arrived: snapshots never had to repair the table.
            assert_eq!(r.events.get("snapshot_unannounced"), 0, "{order:?} bot {i}");
            assert_eq!(
                r.events.get("snapshot_stale_removed"),
                0,
                "{order:?} bot {i}"
            );
            assert_eq!(r.events.get("entity_destroy_unknown"), 0);
            assert_eq!(r.decode_errors.total(), 0);
            damage += r.events.get("damage_events");
        }
        assert!(damage > 0, "shots hit enemies");
        let shots = sim
            .bot(0)
            .bot
            .entities()
            .filter(|(_, e)| e.sprite == 3)
            .count();
        let enemies = sim
            .bot(0)
            .bot
            .entities()
            .filter(|(_, e)| e.sprite == 2)
            .count();
        assert!(enemies > 0, "{order:?}: {shots} shots, {enemies} enemies");
    }
}

#[test]
fn snapshots_repair_lost_destroys() {
    let cfg = RtypeServerConfig {
        enemy_spawn_interval: 100 * MS,
        ..RtypeServerConfig::default()
    };
    let mut sim = Sim::new(cfg, 10 * MS);
    sim.set_drop_destroys(true);
    for i in 0..3 {
        sim.add_bot(
            params(i, walk()),
            RtypeOptions {
                rejoin_on_gameover: true,
                ..RtypeOptions::default()
            },
        );
    }
    sim.run_for(Duration::from_secs(6));
    sim.quiesce();
    for i in 0..3 {
        sim.assert_table_matches_server(i);
        assert!(
            sim.bot(i).rec.events.get("snapshot_stale_removed") > 0,
            "bot {i}"
        );
    }
}

#[test]
fn joining_late_sees_the_room_and_leaving_destroys_the_ship() {
    let mut sim = Sim::new(RtypeServerConfig::default(), 10 * MS);
    sim.add_bot(params(0, walk()), RtypeOptions::default());
    sim.run_for(Duration::from_secs(3));
    sim.add_bot(params(1, walk()), RtypeOptions::default());
    // Before its first snapshot the newcomer's table is already complete from the creates,
    // which follow the proof of its address (an INPUT echoing the id of its previewed ship):
    // CONNECT at 0, ACCEPT back at 20 ms, its first inputs pay for the preview, the next
    // input proves, and the creates are sent before any snapshot.
    let first_ship = sim.bot(0).bot.entity_id().expect("bot 0 knows its ship");
    let mut waited = Duration::ZERO;
    while sim.bot(1).bot.entity(first_ship).is_none() {
        assert!(waited < 200 * MS, "the newcomer got the room's creates");
        sim.run_for(MS);
        waited += MS;
    }
    assert_eq!(sim.bot(1).rec.snapshots_applied, 0);
    sim.run_for(Duration::from_secs(1));
    let leaving = first_ship;
    sim.stop_bot(0);
    sim.run_for(100 * MS);
    assert_eq!(sim.server().stats().disconnected, 1);
    assert_eq!(sim.bot(0).bot.phase(), BotPhase::Closed);
    assert!(sim.bot(1).bot.entity(leaving).is_none());
    sim.quiesce();
    sim.assert_table_matches_server(1);
}

#[test]
fn silence_times_out_both_sides() {
    let mut sim = Sim::new(RtypeServerConfig::default(), 10 * MS);
    sim.add_bot(params(0, walk()), RtypeOptions::default());
    sim.run_for(Duration::from_secs(2));
    // Cut the uplink: the server drops the client after 5 s, then the bot hears nothing.
    sim.set_up_open(false);
    sim.run_for(Duration::from_secs(6));
    assert_eq!(sim.server().stats().timed_out, 1);
    assert_eq!(sim.server().stats().clients, 0);
    assert_eq!(sim.bot(0).bot.phase(), BotPhase::Connected);
    sim.run_for(Duration::from_secs(5));
    let b = &sim.bot(0);
    assert_eq!(b.bot.phase(), BotPhase::Closed);
    assert_eq!(b.rec.events.get("server_silence_timeout"), 1);
    assert_eq!(b.bot.poll_timeout(), None);
}

#[test]
fn lost_pongs_time_out_and_late_ones_are_not_sampled() {
    let mut sim = Sim::new(RtypeServerConfig::default(), 10 * MS);
    sim.add_bot(params(0, InputPattern::Idle), RtypeOptions::default());
    sim.run_for(Duration::from_millis(1500));
    // Downlink off for 2.5 s (longer than the 2 s pong timeout, shorter than the 5 s
    // silence timeout): the ping in flight times out.
    sim.set_down_open(false);
    sim.run_for(Duration::from_millis(2500));
    sim.set_down_open(true);
    sim.run_for(Duration::from_secs(4));
    let b = &sim.bot(0);
    assert_eq!(b.bot.phase(), BotPhase::Connected);
    assert!(b.rec.events.get("ping_timeout") >= 1);
    assert!(b.rec.events.get("ping_skipped_in_flight") >= 1);
    let rtt = &b.rec.rtt_us;
    assert!(
        same_bucket(rtt, rtt.max(), 20_000),
        "no stale sample: max {}",
        rtt.max()
    );
}

#[test]
fn malformed_datagrams_are_counted_not_fatal() {
    let mut sim = Sim::new(RtypeServerConfig::default(), 10 * MS);
    sim.add_bot(params(0, InputPattern::Idle), RtypeOptions::default());
    sim.run_for(Duration::from_secs(1));
    let now = sim.now();
    let (bot, rec) = (&mut sim.h.bots[0], &mut sim.h.recs[0]);
    bot.handle_datagram(now, &[0x17, 0x01, 0x00, 0x0B, 0, 0, 0, 9, 0, 1, 0], rec); // count 1, no entity
    bot.handle_datagram(now, &[0x63, 0x01, 0x00, 0x04], rec); // unknown type
    bot.handle_datagram(now, &[0x0C, 0x02, 0x00, 0x08, 0, 0, 0, 0], rec); // version 2
    bot.handle_datagram(now, &[0x03, 0x01, 0x00, 0x04], rec); // a PING, server-bound
    assert_eq!(rec.decode_errors.get("snapshot.count_mismatch"), 1);
    // An unknown type is ignored and counted (§8, docs/protocols/rtype.md), not a decode error.
    assert_eq!(rec.decode_errors.get("header.unknown_type"), 0);
    assert_eq!(rec.events.get("unknown_message_type"), 1);
    assert_eq!(rec.decode_errors.get("header.bad_version"), 1);
    assert_eq!(rec.decode_errors.get("ping.wrong_direction"), 1);
    let addr = sim.h.addrs[0];
    sim.h
        .server
        .handle_datagram(now, addr, &[0x0A, 0x01, 0x00, 0x04]); // ACCEPT, client-bound
    sim.h
        .server
        .handle_datagram(now, addr, &[0x02, 0x01, 0x00, 0x11, 0]); // INPUT cut short
    let other = ConnId(9_999);
    sim.h
        .server
        .handle_datagram(now, other, &[0x03, 0x01, 0x00, 0x04]); // PING from a stranger
    let dropped = &sim.server().stats().dropped;
    assert_eq!(dropped.get("accept.wrong_direction"), 1);
    assert_eq!(dropped.get("input.truncated"), 1);
    assert_eq!(dropped.get("ping.unknown_client"), 1);
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.bot(0).bot.phase(), BotPhase::Connected);
}

#[test]
fn the_server_is_deterministic() {
    let run = || {
        let mut sim = Sim::new(
            RtypeServerConfig {
                seed: 42,
                id_seed: Some(7),
                ..deadly()
            },
            10 * MS,
        );
        for i in 0..3 {
            sim.add_bot(
                params(i, walk()),
                RtypeOptions {
                    rejoin_on_gameover: true,
                    ..RtypeOptions::default()
                },
            );
        }
        sim.run_for(Duration::from_secs(4));
        let s = sim.server().stats();
        let mut world: Vec<_> = sim
            .server()
            .room_entities(0)
            .map(|e| (e.id, e.x.to_bits(), e.y.to_bits()))
            .collect();
        world.sort_unstable();
        (
            s.bytes_out,
            s.datagrams_out,
            s.events.get("gameover"),
            world,
        )
    };
    assert_eq!(run(), run());
}

#[test]
fn rooms_split_players_and_cap_snapshots() {
    let cfg = RtypeServerConfig {
        room_size: 4,
        enemy_spawn_interval: 20 * MS,
        max_enemies_per_room: 100,
        contact_damage: 0,
        ..RtypeServerConfig::default()
    };
    let mut sim = Sim::new(cfg, 5 * MS);
    let shoot = InputPattern::Scripted {
        steps: vec![(
            tickswarm::protocol::Keys(tickswarm::protocol::Keys::SHOOT),
            Duration::from_secs(1),
        )],
    };
    for i in 0..10 {
        sim.add_bot(params(i, shoot.clone()), RtypeOptions::default());
    }
    sim.run_for(Duration::from_secs(4));
    let rooms: Vec<_> = sim
        .views()
        .map(|b| sim.server().room_of(b.addr).unwrap())
        .collect();
    assert_eq!(rooms, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]);
    for b in sim.views() {
        let ships = b.bot.entities().filter(|(_, e)| e.sprite == 1).count();
        let room = sim.server().room_of(b.addr).unwrap();
        assert_eq!(ships, rooms.iter().filter(|&&r| r == room).count());
        let entities = b.extra("entities");
        assert!(entities.max() <= 63, "a snapshot fits 1400 bytes");
        assert!(b.rec.bytes_down > 0);
    }
    assert!(
        sim.bot(0).extra("entities").max() >= 60,
        "the cap was reached"
    );
    assert!(
        sim.server().stats().events.get("shot_suppressed")
            + sim.server().stats().events.get("spawn_suppressed")
            > 0
    );
}

// ------------------------------------------------ the bot alone, fed by hand

fn snapshot_bytes(tick: u32) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let enc = codec::SnapshotEncoder::begin(&mut buf, tick, FloatOrder::Big).unwrap();
    let n = enc.finish().unwrap();
    buf[..n].to_vec()
}

fn accepted_bot(t0: Instant) -> (RtypeBot, Recorder) {
    let mut rec = Recorder::new();
    let mut bot = RtypeBot::new(params(0, InputPattern::Idle), RtypeOptions::default());
    bot.start(t0, &mut rec);
    bot.handle_datagram(t0 + 10 * MS, &[0x0A, 0x01, 0x00, 0x04], &mut rec); // ACCEPT
    assert_eq!(bot.phase(), BotPhase::Connected);
    (bot, rec)
}

fn hist<'r>(rec: &'r Recorder, name: &str) -> &'r hdrhistogram::Histogram<u64> {
    &rec.extra.iter().find(|(n, _)| *n == name).unwrap().1
}

#[test]
fn reordered_duplicate_and_late_snapshots_are_measured() {
    let t0 = Instant::now();
    let (mut bot, mut rec) = accepted_bot(t0);
    // Snapshot k carries tick 3k and is due at t0 + 100 ms + k × 50 ms.
    let due = |k: u32| t0 + 100 * MS + 50 * MS * k;
    let mut feed =
        |at: Instant, tick: u32| bot.handle_datagram(at, &snapshot_bytes(tick), &mut rec);
    for k in 1..=8 {
        feed(due(k), 3 * k);
    }
    feed(due(10), 30); // 27 is late...
    feed(due(10) + 5 * MS, 27); // ...arrives after 30: one snapshot (3 ticks) old
    feed(due(10) + 6 * MS, 27); // and again: a duplicate
    feed(due(11) + 10 * MS, 33); // 10 ms late
    feed(due(12), 36);

    assert_eq!(bot.tick_step(), Some(3));
    assert_eq!((rec.loss_down.expected, rec.loss_down.received), (12, 12));
    assert_eq!(rec.snapshots_applied, 11, "the late 27 is not applied");
    assert_eq!(rec.events.get("snapshot_reordered"), 1);
    assert_eq!(rec.events.get("snapshot_duplicate"), 1);
    let age = hist(&rec, "snapshot_age_ticks");
    assert_eq!(age.max(), 3);
    assert_eq!(age.len(), 12);
    let jitter = hist(&rec, "snapshot_jitter_us");
    assert!((9_000..=12_000).contains(&jitter.max()), "{}", jitter.max());
    let interp = hist(&rec, "interp_delay_us");
    assert!(interp.equivalent(interp.max(), 100_000), "the 24 → 30 gap");
}

/// §9's rendering at the default 100 ms behind the newest snapshot: with snapshots every
/// 50 ms the client always interpolates; two snapshots lost in a row make a 150 ms gap, of
/// which the last 50 ms are drawn from extrapolation, and a 10 ms late one adds nothing.
#[test]
fn time_spent_extrapolating_is_what_a_gap_exceeds_the_render_delay_by() {
    let t0 = Instant::now();
    let (mut bot, mut rec) = accepted_bot(t0);
    let due = |k: u32| t0 + 100 * MS + 50 * MS * k;
    for k in 1..=10 {
        bot.handle_datagram(due(k), &snapshot_bytes(k), &mut rec);
    }
    // 11 and 12 lost; 13 on time; 14 10 ms late (a 60 ms gap, inside the delay).
    bot.handle_datagram(due(13), &snapshot_bytes(13), &mut rec);
    bot.handle_datagram(due(14) + 10 * MS, &snapshot_bytes(14), &mut rec);
    bot.handle_datagram(due(15), &snapshot_bytes(15), &mut rec);

    let ex = hist(&rec, "extrapolation_us");
    assert_eq!(ex.len(), 1, "one stretch");
    assert!(ex.equivalent(ex.max(), 50_000), "{}", ex.max());
    assert_eq!(rec.events.get("render_extrapolating_us"), 50_000);
    // Rendered from the first snapshot (due(1)) to the last (due(15)): 14 × 50 ms.
    assert_eq!(rec.events.get("render_us"), 700_000);
}

#[test]
fn the_tick_step_is_learned_through_loss() {
    let t0 = Instant::now();
    let (mut bot, mut rec) = accepted_bot(t0);
    for (k, tick) in [3, 6, 12, 15, 18, 21, 24, 27].into_iter().enumerate() {
        bot.handle_datagram(
            t0 + 100 * MS + 50 * MS * k as u32,
            &snapshot_bytes(tick),
            &mut rec,
        );
    }
    assert_eq!(bot.tick_step(), Some(3));
    assert_eq!((rec.loss_down.expected, rec.loss_down.received), (9, 8));
}

#[test]
fn a_short_session_still_counts_its_snapshots() {
    let t0 = Instant::now();
    let (mut bot, mut rec) = accepted_bot(t0);
    for (k, tick) in [100, 102, 106].into_iter().enumerate() {
        bot.handle_datagram(
            t0 + 100 * MS + 33 * MS * k as u32,
            &snapshot_bytes(tick),
            &mut rec,
        );
    }
    assert_eq!(bot.tick_step(), None);
    bot.stop(t0 + Duration::from_secs(1), &mut rec);
    assert_eq!(bot.tick_step(), Some(2));
    assert_eq!((rec.loss_down.expected, rec.loss_down.received), (4, 3));
    let mut buf = [0u8; MAX_DATAGRAM];
    let mut last = None;
    while let Some(t) = bot.poll_transmit(&mut buf) {
        last = Some(buf[..t.len].to_vec());
    }
    assert_eq!(
        last.as_deref(),
        Some(&[0x04, 0x01, 0x00, 0x04][..]),
        "DISCONNECT on stop"
    );
}

#[test]
fn inputs_carry_the_pattern_and_the_learned_entity() {
    let t0 = Instant::now();
    let mut rec = Recorder::new();
    let keys = tickswarm::protocol::Keys(
        tickswarm::protocol::Keys::RIGHT
            | tickswarm::protocol::Keys::UP
            | tickswarm::protocol::Keys::SHOOT,
    );
    let pattern = InputPattern::Scripted {
        steps: vec![(keys, Duration::from_secs(1))],
    };
    let mut bot = RtypeBot::new(params(4, pattern), RtypeOptions::default());
    let mut buf = [0u8; MAX_DATAGRAM];
    bot.start(t0, &mut rec);
    let n = bot.poll_transmit(&mut buf).unwrap().len;
    // CONNECT with clientId = client_id_base (1) + index 4.
    assert_eq!(&buf[..n], &[0x01, 0x01, 0x00, 0x08, 0x00, 0x00, 0x00, 0x05]);
    bot.handle_datagram(t0 + MS, &[0x0A, 0x01, 0x00, 0x04], &mut rec);
    // Before the ship is known, INPUT names the clientId.
    let first = bot.poll_timeout().unwrap();
    bot.handle_timeout(first, &mut rec);
    let n = bot.poll_transmit(&mut buf).unwrap().len;
    #[rustfmt::skip]
    assert_eq!(&buf[..n], &[
        0x02, 0x01, 0x00, 0x11, // INPUT, v1, size 17
        0x00, 0x00, 0x00, 0x05, // entity = clientId 5
        0x3F, 0x80, 0x00, 0x00, // dx 1.0 (right)
        0xBF, 0x80, 0x00, 0x00, // dy -1.0 (up)
        0x01,                   // shooting
    ][..]);
    // The ENTITY_CREATE with id 5 is this bot's ship.
    #[rustfmt::skip]
    bot.handle_datagram(first, &[
        0x14, 0x01, 0x00, 0x12, 0x00, 0x00, 0x00, 0x05,
        0x42, 0xC8, 0x00, 0x00, 0x43, 0x48, 0x00, 0x00, 0x00, 0x01,
    ], &mut rec);
    assert_eq!(bot.entity_id(), Some(5));
    assert_eq!(
        bot.entity(5).map(|e| (e.x, e.y, e.sprite)),
        Some((100.0, 200.0, 1))
    );
    // DAMAGE_EVENT on it, then ENTITY_DESTROY and GAMEOVER.
    bot.handle_datagram(
        first,
        &[0x16, 0x01, 0x00, 0x0A, 0, 0, 0, 5, 0x00, 0x07],
        &mut rec,
    );
    assert_eq!(bot.entity(5).map(|e| e.damage), Some(7));
    assert_eq!(rec.events.get("damage_taken"), 7);
    bot.handle_datagram(first, &[0x15, 0x01, 0x00, 0x08, 0, 0, 0, 5], &mut rec);
    bot.handle_datagram(first, &[0x0D, 0x01, 0x00, 0x04], &mut rec);
    assert_eq!(
        (bot.entity_count(), bot.entity_id(), bot.gameovers()),
        (0, None, 1)
    );
    assert!(bot.is_dead());
}

/// Every session the server drops (rejected, disconnected, timed out) is handed to the
/// transport through `poll_close`, after what was queued for it.
#[test]
fn every_dropped_session_is_reported_through_poll_close() {
    let t0 = Instant::now();
    let cfg = RtypeServerConfig {
        max_clients: 1,
        client_timeout: Duration::from_secs(1),
        ..RtypeServerConfig::default()
    };
    let mut server = RtypeServer::new(cfg, t0);
    let mut buf = [0u8; MAX_DATAGRAM];
    let mut pkt = [0u8; 64];
    let mut send = |server: &mut RtypeServer, conn: u64, p: &Packet<'_>| {
        let n = codec::encode(&mut pkt, p, FloatOrder::Big).unwrap();
        server.handle_datagram(t0, ConnId(conn), &pkt[..n]);
    };
    let mut drain = |server: &mut RtypeServer| {
        let mut to = Vec::new();
        while let Some((c, _)) = server.poll_transmit(&mut buf) {
            to.push(c);
        }
        to
    };
    let connect = Packet::Connect { client_id: 0 };

    send(&mut server, 1, &connect);
    assert!(drain(&mut server).contains(&ConnId(1)), "accept");
    assert_eq!(server.poll_close(), None, "an accepted client stays");

    send(&mut server, 2, &connect);
    assert_eq!(
        drain(&mut server),
        vec![ConnId(2)],
        "the REJECT goes out first"
    );
    assert_eq!(server.poll_close(), Some(ConnId(2)), "rejected");
    assert_eq!(server.poll_close(), None);

    send(&mut server, 1, &Packet::Disconnect);
    assert_eq!(server.poll_close(), Some(ConnId(1)), "disconnected");

    send(&mut server, 3, &connect);
    drain(&mut server);
    server.handle_timeout(t0 + Duration::from_secs(2));
    drain(&mut server);
    assert_eq!(server.stats().timed_out, 1);
    assert_eq!(server.poll_close(), Some(ConnId(3)), "timed out");
    assert_eq!(server.poll_close(), None);
}

/// A server that invents entities cannot grow a bot's memory without bound: past
/// `MAX_TRACKED_ENTITIES` new ones are refused and counted.
#[test]
fn a_flood_of_invented_entities_is_capped_and_counted() {
    use tickswarm::protocol::MAX_TRACKED_ENTITIES;
    let t0 = Instant::now();
    let (mut bot, mut rec) = accepted_bot(t0);
    let extra = 1_000;
    let mut buf = [0u8; 64];
    for id in 0..(MAX_TRACKED_ENTITIES + extra) as u32 {
        let packet = codec::Packet::EntityCreate {
            id: id + 1_000_000,
            x: 1.0,
            y: 2.0,
            sprite: 7,
        };
        let n = codec::encode(&mut buf, &packet, FloatOrder::Big).unwrap();
        bot.handle_datagram(t0 + 20 * MS, &buf[..n], &mut rec);
    }
    assert_eq!(bot.entity_count(), MAX_TRACKED_ENTITIES);
    assert_eq!(rec.events.get("entity_refused_table_full"), extra as u64);
}

/// The address proof: a new session is shown the ship it will get (an ENTITY_CREATE whose id
/// the server drew at random), once its datagrams have paid for it, and only an INPUT echoing
/// that id puts it in the game. A blind INPUT naming the clientId does not.
#[test]
fn only_the_echo_of_the_previewed_ship_id_proves_the_address() {
    let t0 = Instant::now();
    let mut server = RtypeServer::new(RtypeServerConfig::default(), t0);
    let mut buf = [0u8; MAX_DATAGRAM];
    let mut out = |server: &mut RtypeServer| {
        let mut got = Vec::new();
        while let Some((to, t)) = server.poll_transmit(&mut buf) {
            got.push((to, buf[..t.len].to_vec()));
        }
        got
    };
    let me = ConnId(9);
    // CONNECT clientId 5: only the 4-byte ACCEPT (the CONNECT paid 8).
    server.handle_datagram(t0, me, &[0x01, 0x01, 0x00, 0x08, 0, 0, 0, 5]);
    assert_eq!(out(&mut server), vec![(me, vec![0x0A, 0x01, 0x00, 0x04])]);
    // A blind INPUT naming the clientId (17 bytes): 21 bytes of budget, not enough for the
    // 18-byte preview plus room for a PONG, so nothing.
    #[rustfmt::skip]
    let blind = [
        0x02, 0x01, 0x00, 0x11, 0x00, 0x00, 0x00, 0x05,
        0x3F, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];
    server.handle_datagram(t0 + MS, me, &blind);
    assert!(out(&mut server).is_empty());
    // A second one pays for the preview: ENTITY_CREATE, size 18, id >= 0x8000_0000, sprite 1.
    server.handle_datagram(t0 + 2 * MS, me, &blind);
    let got = out(&mut server);
    assert_eq!(got.len(), 1);
    let create = &got[0].1;
    assert_eq!(&create[..4], &[0x14, 0x01, 0x00, 0x12]);
    let id = u32::from_be_bytes([create[4], create[5], create[6], create[7]]);
    assert!(
        id >= 0x8000_0000,
        "ship id {id:#x} is drawn from the upper half"
    );
    assert_eq!(&create[16..18], &[0x00, 0x01], "sprite 1: a ship");
    assert_eq!(server.ship_of(me), None, "not in the game yet");
    assert_eq!(server.room_entities(0).count(), 0, "others do not see it");
    // Blind inputs buy nothing more than the next preview.
    for k in 3..30 {
        server.handle_datagram(t0 + k * MS, me, &blind);
    }
    assert_eq!(server.ship_of(me), None);
    // The echo of the previewed id proves the address: the ship joins the room.
    let mut echo = blind;
    echo[4..8].copy_from_slice(&id.to_be_bytes());
    server.handle_datagram(t0 + 100 * MS, me, &echo);
    assert_eq!(server.ship_of(me), Some(id));
    assert_eq!(
        server.room_entities(0).map(|e| e.id).collect::<Vec<_>>(),
        vec![id]
    );
}

/// A bot against a server that chooses ship ids: the first ENTITY_CREATE after ACCEPT is its
/// ship, and its INPUTs then name it.
#[test]
fn the_bot_takes_the_first_create_after_accept_as_its_ship() {
    let t0 = Instant::now();
    let mut rec = Recorder::new();
    let mut bot = RtypeBot::new(params(4, walk()), RtypeOptions::default());
    let mut buf = [0u8; MAX_DATAGRAM];
    bot.start(t0, &mut rec);
    while bot.poll_transmit(&mut buf).is_some() {}
    bot.handle_datagram(t0 + MS, &[0x0A, 0x01, 0x00, 0x04], &mut rec);
    #[rustfmt::skip]
    bot.handle_datagram(t0 + 2 * MS, &[
        0x14, 0x01, 0x00, 0x12, 0x9A, 0xBC, 0xDE, 0xF0, // ENTITY_CREATE id 0x9ABCDEF0
        0x42, 0xC8, 0x00, 0x00, 0x43, 0x48, 0x00, 0x00, 0x00, 0x01,
    ], &mut rec);
    assert_eq!(bot.entity_id(), Some(0x9ABC_DEF0));
    // A second create (another player's ship) does not take its place.
    #[rustfmt::skip]
    bot.handle_datagram(t0 + 3 * MS, &[
        0x14, 0x01, 0x00, 0x12, 0x9A, 0xBC, 0xDE, 0xF1,
        0x42, 0xC8, 0x00, 0x00, 0x43, 0x48, 0x00, 0x00, 0x00, 0x01,
    ], &mut rec);
    assert_eq!(bot.entity_id(), Some(0x9ABC_DEF0));
    let due = bot.poll_timeout().unwrap();
    bot.handle_timeout(due, &mut rec);
    let mut saw_input = false;
    while let Some(t) = bot.poll_transmit(&mut buf) {
        if buf[0] == 0x02 {
            assert_eq!(
                &buf[4..8],
                &[0x9A, 0xBC, 0xDE, 0xF0],
                "INPUT names the ship"
            );
            saw_input = true;
        }
        let _ = t;
    }
    assert!(saw_input);
}
