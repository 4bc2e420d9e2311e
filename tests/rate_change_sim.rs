//! A server that halves its snapshot rate for a while is not a lossy link.
//!
//! Every protocol whose bot counts downstream loss from snapshot ticks (`TickStep`, see
//! `src/protocol/seqwindow.rs`) is driven here, bots and reference server together, in the
//! crate's deterministic simulation (`tickswarm::protocol::sim`), through a down path that
//! plays "a server that halves its snapshot rate between t = 3 s and t = 7 s, then restores
//! it": inside that window every snapshot whose `tick / step` is odd (tick decoded with the
//! protocol's own codec, `step` the server's snapshot step) is dropped, so the ones that pass
//! lie on a regular grid twice as coarse. Nothing but snapshots is ever dropped.
//!
//! For each protocol, two specifications:
//! - **no real loss**: the bot counts nothing lost (`expected == received`, and both equal
//!   the snapshots the server sent at the rate it was sending), reports the rate going down
//!   and coming back (`snapshot_rate_down`, `snapshot_rate_up`), and its `snapshots_sent`
//!   reads, second by second, the base rate outside the window and half of it inside;
//! - **real loss too**: 5 % of the other snapshots are dropped at random (seeded); the bot's
//!   loss rate is within 0.5 percentage points of those drops over the snapshots the server
//!   sent at its effective rate, and the rate changes and per-second rates still read right.
//!
//! Cafe's spec dialect counts loss by header `seq`, which a server sending fewer snapshots
//! does not disturb (it numbers what it sends). Dropping on the link would put gaps in `seq`,
//! so for that path the *server* halves its rate: a wrapper withholds the same snapshots and
//! numbers the rest without a gap, as such a server would.
//!
//! ZergCity is not here: it counts loss by a per-datagram sequence, not by snapshot ticks,
//! so it has no notion of a snapshot rate to get wrong.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use tickswarm::games::cafe::{
    self, CafeBot, CafeOptions, CafeServer, CafeServerConfig, LossSource,
};
use tickswarm::games::city::{self, CityBot, CityOptions, CityServer, CityServerConfig};
use tickswarm::games::darkages::dialects::implementation::{
    self as da_impl, ImplementationBot, ImplementationServer,
};
use tickswarm::games::darkages::{
    self, DarkAgesBot, DarkAgesOptions, DarkAgesServer, DarkAgesServerConfig,
};
use tickswarm::games::rtype::{self, RtypeBot, RtypeOptions, RtypeServer, RtypeServerConfig};
use tickswarm::protocol::sim::{self, rule, Sim};
use tickswarm::protocol::{
    Bot, BotParams, BotPhase, ConnId, InputPattern, Server, ServerStats, Transmit,
};

// ---------------------------------------------------------------------------------------
// The scenario, common to every protocol.
// ---------------------------------------------------------------------------------------

/// Bots per run.
const BOTS: usize = 4;
/// The server sends at half its rate from here (simulated time of sending)...
const HALVED_FROM: Duration = Duration::from_secs(3);
/// ...until here.
const HALVED_UNTIL: Duration = Duration::from_secs(7);
/// Simulated seconds per run.
const END_S: u64 = 12;
/// One-way delay of the link, both ways.
const DELAY: Duration = Duration::from_millis(5);
/// Real loss of the lossy variant, on the snapshots the halving leaves.
const REAL_LOSS: f64 = 0.05;
/// Seed of the real loss.
const LOSS_SEED: u64 = 0x5EED_1055;
/// How far the measured loss rate may be from the injected one, in rate units.
///
/// Why any slack at all: a real drop right next to a change of rate cannot be told from the
/// change by any client, and the bot reads it one way or the other:
/// - the last full-rate snapshot before the halving lost, the next one kept: the halving
///   seems to start one snapshot earlier, and that drop is taken for a snapshot never sent
///   (one too few; seen here: cafe, ticks `178 179R 180 181h 182`);
/// - the first full-rate snapshot after it lost: the halving seems to end one snapshot
///   later, the same (one too few; cafe and city, `418 419h 420R 421R 422 423`);
/// - the last full-rate snapshot lost and the next one left out: a gap of three steps, which
///   no coarser step explains, so it is committed as loss at the old step with the left-out
///   snapshot in it (one too many; city, `179 180R 181h 182 183h`).
///
/// At most one either way per change of rate, so the count is asserted within
/// [`EDGE_SNAPSHOTS`] of the truth too. Two snapshots of 600 (60 Hz) is 0.33 points; at
/// 20 Hz one snapshot of 200 is already 0.5 points, so for those protocols this tolerance
/// holds for the seed used here (no drop falls next to a change), not for every seed.
const LOSS_RATE_TOLERANCE: f64 = 0.005;
/// Snapshots a bot may count lost wrongly, either way, next to the two changes of rate (see
/// [`LOSS_RATE_TOLERANCE`]).
const EDGE_SNAPSHOTS: u64 = 2;
/// How far a second's `snapshots_sent` may be from the rate the server sent at then: one
/// snapshot of a neighbouring second (a boundary falls between a snapshot's sending and its
/// arrival, or a held snapshot's count lands in the next second).
const PER_SECOND_TOLERANCE: u64 = 1;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Whether the server sends at half its rate at `at` (time of sending).
fn halved_at(at: Duration) -> bool {
    (HALVED_FROM..HALVED_UNTIL).contains(&at)
}

/// Whether a half-rate server leaves out the snapshot of `tick` sent at `at`: every other
/// one by its tick, so the ones it sends lie on a grid of `2 * step`.
fn left_out(tick: u32, step: u32, at: Duration) -> bool {
    halved_at(at) && (tick / step) % 2 == 1
}

/// What a test needs to know of a protocol.
#[derive(Clone, Copy)]
struct Proto {
    name: &'static str,
    /// The tick of a server datagram that is a snapshot (`None`: anything else).
    tick_of: fn(&[u8]) -> Option<u32>,
    /// Server ticks between two snapshots.
    step: u32,
    /// Snapshots a second at the server's base rate.
    rate: u64,
}

/// How the run halves the rate.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Halving {
    /// The down path drops the snapshots a half-rate server leaves out.
    OnTheLink,
    /// The server itself withholds them (the cafe wrapper below); the link leaves them be.
    AtTheServer,
}

/// One bot's figures after a run, with the ground truth from the link's log.
#[derive(Debug, Clone, Default)]
struct Figures {
    bot: usize,
    expected: u64,
    received: u64,
    rate_down: u64,
    rate_up: u64,
    /// `snapshots_sent` recorded during each simulated second (index k: second [k, k+1)).
    per_second: Vec<u64>,
    /// Snapshots the server addressed to the bot between the first and the last one it
    /// received (what the bot could know of), at the full rate.
    addressed: u64,
    /// Of those, the ones the half rate left out (the link's halving rule).
    left_out: u64,
    /// Of those, the ones dropped at random: the real loss.
    real_drops: u64,
    /// Snapshots delivered between the first and the last one received.
    delivered: u64,
    /// When the bot got its first snapshot.
    first_arrival: Duration,
}

impl Figures {
    /// Snapshots the server sent at its effective rate (what a bot should expect).
    fn sent_at_effective_rate(&self) -> u64 {
        self.addressed - self.left_out
    }

    fn measured_loss(&self) -> f64 {
        (self.expected - self.received) as f64 / self.expected as f64
    }

    fn true_loss(&self) -> f64 {
        self.real_drops as f64 / self.sent_at_effective_rate() as f64
    }
}

/// Drive `sim` (bots not started) through the scenario: the halving (on the link when so
/// asked), real loss `loss` on the other snapshots, bots started at 0 and stopped at
/// [`END_S`] (which counts whatever is still held). Returns each bot's figures.
fn drive<B: Bot, S: Server>(
    sim: &mut Sim<B, S>,
    p: Proto,
    halving: Halving,
    loss: f64,
) -> Vec<Figures> {
    sim.up.delay = DELAY;
    sim.down.delay = DELAY;
    let (tick_of, step) = (p.tick_of, p.step);
    let mut rng = ChaCha8Rng::seed_from_u64(LOSS_SEED);
    sim.down.drop = Some(rule(move |m| {
        let Some(tick) = tick_of(m.bytes) else {
            return false;
        };
        if halving == Halving::OnTheLink && left_out(tick, step, m.at) {
            return true;
        }
        loss > 0.0 && rng.random_bool(loss)
    }));
    for i in 0..sim.bots.len() {
        sim.start_at(i, Duration::ZERO);
    }
    let mut per_second = vec![Vec::new(); sim.bots.len()];
    let mut before: Vec<u64> = vec![0; sim.bots.len()];
    for s in 1..=END_S {
        sim.run_until(secs(s));
        for (i, rec) in sim.recs.iter().enumerate() {
            per_second[i].push(rec.snapshots_sent - before[i]);
            before[i] = rec.snapshots_sent;
        }
    }
    for i in 0..sim.bots.len() {
        assert_eq!(
            sim.bots[i].phase(),
            BotPhase::Connected,
            "{}: bot {i} played the whole run",
            p.name
        );
        sim.stop(i);
    }

    // Only snapshots were dropped, by either rule.
    for r in sim.log.iter().filter(|r| r.dropped) {
        assert!(
            (p.tick_of)(&r.bytes).is_some(),
            "{}: the link dropped a datagram that is no snapshot",
            p.name
        );
    }

    (0..sim.bots.len())
        .map(|i| {
            let rec = &sim.recs[i];
            let snaps: Vec<(u32, Duration, bool, Option<Duration>)> = sim
                .down_to(i)
                .filter_map(|r| {
                    (p.tick_of)(&r.bytes).map(|t| (t, r.sent_at, r.dropped, r.first_arrival()))
                })
                .collect();
            let first = snaps
                .iter()
                .position(|s| s.3.is_some())
                .expect("a snapshot");
            let last = snaps.iter().rposition(|s| s.3.is_some()).unwrap();
            let known = &snaps[first..=last];
            let halved = |&&(t, at, dropped, _): &&(u32, Duration, bool, Option<Duration>)| {
                dropped && halving == Halving::OnTheLink && left_out(t, p.step, at)
            };
            let left = known.iter().filter(halved).count() as u64;
            let dropped = known.iter().filter(|s| s.2).count() as u64;
            Figures {
                bot: i,
                expected: rec.loss_down.expected,
                received: rec.loss_down.received,
                rate_down: rec.events.get("snapshot_rate_down"),
                rate_up: rec.events.get("snapshot_rate_up"),
                per_second: per_second[i].clone(),
                addressed: known.len() as u64,
                left_out: left,
                real_drops: dropped - left,
                delivered: known.iter().filter(|s| s.3.is_some()).count() as u64,
                first_arrival: snaps[first].3.unwrap(),
            }
        })
        .collect()
}

/// Seconds `[k, k + 1)` (at the bots) wholly inside the halved window, and wholly outside it
/// after the bots' first full second.
fn seconds() -> (Vec<usize>, Vec<usize>) {
    let inside = (HALVED_FROM.as_secs()..HALVED_UNTIL.as_secs())
        .map(|k| k as usize)
        .collect();
    let outside = (1..END_S)
        .filter(|&k| !(HALVED_FROM.as_secs()..HALVED_UNTIL.as_secs()).contains(&k))
        .map(|k| k as usize)
        .collect();
    (inside, outside)
}

/// The per-second rate each bot reports: the base rate outside the halved window, half of it
/// inside, each second within [`PER_SECOND_TOLERANCE`].
fn assert_rate_per_second(p: Proto, figs: &[Figures]) {
    let (inside, outside) = seconds();
    for f in figs {
        assert!(
            f.first_arrival < secs(1),
            "{}: bot {} got its first snapshot at {:?}, after the first second",
            p.name,
            f.bot,
            f.first_arrival
        );
        for &k in &inside {
            assert!(
                f.per_second[k].abs_diff(p.rate / 2) <= PER_SECOND_TOLERANCE,
                "{}: bot {} second {k} (halved) reads {} snapshots sent, want {} (all: {:?})",
                p.name,
                f.bot,
                f.per_second[k],
                p.rate / 2,
                f.per_second
            );
        }
        for &k in &outside {
            assert!(
                f.per_second[k].abs_diff(p.rate) <= PER_SECOND_TOLERANCE,
                "{}: bot {} second {k} (full rate) reads {} snapshots sent, want {} (all: {:?})",
                p.name,
                f.bot,
                f.per_second[k],
                p.rate,
                f.per_second
            );
        }
    }
}

/// No real loss: nothing counted lost, the expected count is what the server sent at its
/// effective rate, one rate change down and one up, the per-second rates right.
fn assert_halving_is_no_loss(p: Proto, figs: &[Figures], halving: Halving) {
    for f in figs {
        eprintln!("{}: {f:?}", p.name);
        if halving == Halving::OnTheLink {
            assert!(
                f.left_out > 0,
                "{}: bot {}: the halving rule dropped nothing",
                p.name,
                f.bot
            );
        }
        assert_eq!(f.real_drops, 0, "{}: bot {}", p.name, f.bot);
        assert_eq!(
            (f.expected, f.received),
            (f.sent_at_effective_rate(), f.delivered),
            "{}: bot {} expected/received vs snapshots sent at the effective rate/delivered",
            p.name,
            f.bot
        );
        assert_eq!(
            (f.rate_down, f.rate_up),
            (1, 1),
            "{}: bot {} rate changes (down, up)",
            p.name,
            f.bot
        );
    }
    assert_rate_per_second(p, figs);
}

/// Real loss too: the loss rate within [`LOSS_RATE_TOLERANCE`] of the real drops over the
/// snapshots sent at the effective rate, the rate changes still reported, the per-second
/// rates still right.
fn assert_real_loss_is_measured(p: Proto, figs: &[Figures], halving: Halving) {
    for f in figs {
        let (measured, truth) = (f.measured_loss(), f.true_loss());
        eprintln!(
            "{}: bot {}: measured {:.4} ({} of {}), truth {:.4} ({} of {}); rate down {}, up {}",
            p.name,
            f.bot,
            measured,
            f.expected - f.received,
            f.expected,
            truth,
            f.real_drops,
            f.sent_at_effective_rate(),
            f.rate_down,
            f.rate_up
        );
        if halving == Halving::OnTheLink {
            assert!(
                f.left_out > 0,
                "{}: bot {}: the halving rule dropped nothing",
                p.name,
                f.bot
            );
        }
        assert!(
            f.real_drops > 0,
            "{}: bot {}: the random rule dropped nothing",
            p.name,
            f.bot
        );
        let counted = f.expected - f.received;
        match halving {
            // Ticks: every real drop counted but those next to a change of rate; the snapshots
            // received are exactly those delivered.
            Halving::OnTheLink => {
                assert!(
                    counted.abs_diff(f.real_drops) <= EDGE_SNAPSHOTS,
                    "{}: bot {}: counted {counted} lost, {} real drops",
                    p.name,
                    f.bot,
                    f.real_drops
                );
                assert_eq!(f.received, f.delivered, "{}: bot {}", p.name, f.bot);
            }
            // Header seq: a lost datagram is a gap whatever the snapshot rate, so every real
            // drop is counted, exactly.
            Halving::AtTheServer => {
                assert_eq!(counted, f.real_drops, "{}: bot {}", p.name, f.bot);
            }
        }
        assert!(
            (measured - truth).abs() <= LOSS_RATE_TOLERANCE,
            "{}: bot {}: measured loss {measured:.4} ({} of {}) vs injected {truth:.4} \
             ({} of {}); {f:?}",
            p.name,
            f.bot,
            f.expected - f.received,
            f.expected,
            f.real_drops,
            f.sent_at_effective_rate()
        );
        assert!(
            f.rate_down >= 1 && f.rate_up >= 1,
            "{}: bot {} rate changes: down {}, up {}",
            p.name,
            f.bot,
            f.rate_down,
            f.rate_up
        );
    }
    assert_rate_per_second(p, figs);
}

fn params(i: usize, seed: u64) -> BotParams {
    let mut p = BotParams::with_index(i as u32, seed + i as u64);
    p.phase_offset = Duration::from_micros(137 + 1_700 * i as u64);
    p.pattern = InputPattern::RandomWalk {
        change_every: Duration::from_millis(300),
    };
    p
}

// ---------------------------------------------------------------------------------------
// Cafe: 60 Hz, a snapshot every tick.
// ---------------------------------------------------------------------------------------

fn cafe_tick(b: &[u8]) -> Option<u32> {
    match cafe::codec::decode(b, cafe::Dialect::Spec) {
        Ok((_, cafe::codec::Message::Snapshot(s))) => Some(s.tick),
        _ => None,
    }
}

const CAFE: Proto = Proto {
    name: "cafe",
    tick_of: cafe_tick,
    step: 1,
    rate: 60,
};

fn cafe_cfg() -> CafeServerConfig {
    CafeServerConfig {
        id_seed: Some(7),
        ..CafeServerConfig::default()
    }
}

/// Cafe counting loss from snapshot ticks (`loss_source: tick`).
fn cafe_by_tick(loss: f64) -> Vec<Figures> {
    let t0 = Instant::now();
    let opts = CafeOptions {
        loss_source: LossSource::Tick,
        ..CafeOptions::default()
    };
    let bots = (0..BOTS)
        .map(|i| CafeBot::new(params(i, 0xCAFE), opts.clone()))
        .collect();
    let mut sim = Sim::new(t0, CafeServer::new(cafe_cfg(), t0), bots);
    drive(&mut sim, CAFE, Halving::OnTheLink, loss)
}

/// A cafe server that halves its snapshot rate itself: it withholds the snapshots a
/// half-rate server leaves out and numbers the rest per connection without a gap (header
/// `seq` moved down by the snapshots withheld so far), as a server that never sent them would.
struct HalvingCafe {
    inner: CafeServer,
    t0: Instant,
    now: Instant,
    /// Snapshots withheld per connection.
    withheld: HashMap<ConnId, u32>,
}

impl Server for HalvingCafe {
    fn handle_datagram(&mut self, now: Instant, from: ConnId, data: &[u8]) {
        self.now = now;
        self.inner.handle_datagram(now, from, data);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        self.inner.handle_timeout(now);
    }
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
        loop {
            let (to, t) = self.inner.poll_transmit(buf)?;
            let at = self.now - self.t0;
            let w = self.withheld.entry(to).or_default();
            if cafe_tick(&buf[..t.len]).is_some_and(|tick| left_out(tick, CAFE.step, at)) {
                *w += 1;
                continue;
            }
            let seq = u32::from_le_bytes(buf[4..8].try_into().unwrap());
            cafe::codec::patch_seq(&mut buf[..t.len], seq.wrapping_sub(*w));
            return Some((to, t));
        }
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.inner.poll_timeout()
    }
    fn stats(&self) -> &ServerStats {
        self.inner.stats()
    }
    fn poll_close(&mut self) -> Option<ConnId> {
        self.inner.poll_close()
    }
}

/// Cafe counting loss by header `seq` (`loss_source: sequence`, the spec dialect's
/// default), the server halving its own rate. Returns the figures, the snapshots withheld
/// per bot, and per bot whether it took the server's counter for a shared one.
fn cafe_by_seq(loss: f64) -> (Vec<Figures>, Vec<u32>, Vec<u64>) {
    let t0 = Instant::now();
    let server = HalvingCafe {
        inner: CafeServer::new(cafe_cfg(), t0),
        t0,
        now: t0,
        withheld: HashMap::new(),
    };
    let opts = CafeOptions {
        loss_source: LossSource::Sequence,
        ..CafeOptions::default()
    };
    let bots = (0..BOTS)
        .map(|i| CafeBot::new(params(i, 0xCAFE), opts.clone()))
        .collect();
    let mut sim = Sim::new(t0, server, bots);
    let figs = drive(&mut sim, CAFE, Halving::AtTheServer, loss);
    let w = &sim.server.withheld;
    let per_bot = (0..BOTS)
        .map(|i| {
            // Every bot played through the halving: one that had nothing withheld means the
            // wrapper never halved its stream, and the test would check nothing.
            *w.get(&sim::bot_addr(i))
                .unwrap_or_else(|| panic!("bot {i}: the server withheld no snapshot"))
        })
        .collect();
    let shared = sim
        .recs
        .iter()
        .map(|r| r.events.get("shared_sequence_detected"))
        .collect();
    (figs, per_bot, shared)
}

/// Cafe, loss from snapshot ticks: a server halving its snapshot rate for 4 s loses nothing
/// (expected == received == snapshots sent at the effective rate), is reported as one
/// `snapshot_rate_down` and one `snapshot_rate_up`, and `snapshots_sent` reads 60 a second
/// outside the window and 30 inside.
#[test]
fn cafe_by_tick_a_halved_snapshot_rate_is_no_loss() {
    assert_halving_is_no_loss(CAFE, &cafe_by_tick(0.0), Halving::OnTheLink);
}

/// Cafe, loss from snapshot ticks: with 5 % real loss on top of the halving, the measured
/// loss rate is the real drops over the snapshots sent at the effective rate (within
/// 0.5 points), and the rate changes and per-second rates still read right.
#[test]
fn cafe_by_tick_real_loss_across_a_halved_rate_is_measured() {
    assert_real_loss_is_measured(CAFE, &cafe_by_tick(REAL_LOSS), Halving::OnTheLink);
}

/// Cafe, loss by header `seq`: a server that sends half its snapshots for 4 s (and numbers
/// what it sends without a gap) shows no loss, the bot keeps trusting its `seq` (no
/// `shared_sequence_detected`), and the ticks still report the rate going down and back up
/// and the per-second rates.
#[test]
fn cafe_by_seq_a_server_halving_its_rate_shows_no_phantom_loss() {
    let (figs, withheld, shared) = cafe_by_seq(0.0);
    for f in &figs {
        eprintln!("cafe by seq: {f:?}, withheld {withheld:?}, shared {shared:?}");
        assert!(
            withheld[f.bot] > 0,
            "bot {}: the server withheld nothing",
            f.bot
        );
        assert_eq!(f.expected, f.received, "bot {}: phantom loss by seq", f.bot);
        assert_eq!(
            shared[f.bot], 0,
            "bot {}: seq taken for a shared counter",
            f.bot
        );
        assert_eq!((f.rate_down, f.rate_up), (1, 1), "bot {}", f.bot);
    }
    assert_rate_per_second(CAFE, &figs);
}

/// Cafe, loss by header `seq`, the server halving its own rate and 5 % of the snapshots it
/// sends lost: every drop is counted, exactly, and the measured loss rate is within 0.5
/// points of the real drops over the snapshots the server sent (the `seq` count also holds
/// its few pongs and heartbeats, none of them lost).
#[test]
fn cafe_by_seq_real_loss_across_a_server_halving_its_rate_is_measured() {
    let (figs, withheld, shared) = cafe_by_seq(REAL_LOSS);
    for f in &figs {
        assert!(
            withheld[f.bot] > 0,
            "bot {}: the server withheld nothing",
            f.bot
        );
        assert_eq!(
            shared[f.bot], 0,
            "bot {}: seq taken for a shared counter",
            f.bot
        );
    }
    assert_real_loss_is_measured(CAFE, &figs, Halving::AtTheServer);
}

// ---------------------------------------------------------------------------------------
// R-Type: 60 Hz simulation, a snapshot every 3rd tick (20 Hz); the bot learns the step.
// ---------------------------------------------------------------------------------------

fn rtype_tick(b: &[u8]) -> Option<u32> {
    match rtype::codec::decode(b, rtype::FloatOrder::Big) {
        Ok(rtype::codec::Packet::Snapshot(s)) => Some(s.tick),
        _ => None,
    }
}

const RTYPE: Proto = Proto {
    name: "rtype",
    tick_of: rtype_tick,
    step: 3,
    rate: 20,
};

fn rtype_run(loss: f64) -> Vec<Figures> {
    let t0 = Instant::now();
    let cfg = RtypeServerConfig {
        // No ship dies (a GAMEOVER would end a bot's play, not what is tested here).
        contact_damage: 0,
        id_seed: Some(7),
        ..RtypeServerConfig::default()
    };
    assert_eq!(cfg.sim_hz / cfg.snapshot_hz, RTYPE.step);
    let bots = (0..BOTS)
        .map(|i| RtypeBot::new(params(i, 0xB07), RtypeOptions::default()))
        .collect();
    let mut sim = Sim::new(t0, RtypeServer::new(cfg, t0), bots);
    let figs = drive(&mut sim, RTYPE, Halving::OnTheLink, loss);
    for (i, b) in sim.bots.iter().enumerate() {
        assert_eq!(
            b.tick_step(),
            Some(3),
            "rtype: bot {i} is back at the base step"
        );
    }
    figs
}

/// R-Type (step learned, 3): a server halving its snapshot rate from 20 Hz to 10 Hz for 4 s
/// loses nothing, is reported as one rate change down and one up, and `snapshots_sent` reads
/// 20 a second outside the window and 10 inside.
#[test]
fn rtype_a_halved_snapshot_rate_is_no_loss() {
    assert_halving_is_no_loss(RTYPE, &rtype_run(0.0), Halving::OnTheLink);
}

/// R-Type: with 5 % real loss on top of the halving, the measured loss rate is the real drops
/// over the snapshots sent at the effective rate (within 0.5 points); the rate changes and
/// per-second rates still read right.
#[test]
fn rtype_real_loss_across_a_halved_rate_is_measured() {
    assert_real_loss_is_measured(RTYPE, &rtype_run(REAL_LOSS), Halving::OnTheLink);
}

// ---------------------------------------------------------------------------------------
// City: ENet, 60 Hz, one DeltaState a tick alone in its unreliable packet; step 1
// configured in the bot.
// ---------------------------------------------------------------------------------------

fn city_tick(b: &[u8]) -> Option<u32> {
    let msgs = city::codec::decode_all(b, city::Dialect::Spec).ok()?;
    let tick = msgs.iter().find_map(|(_, m)| match m {
        city::codec::Message::DeltaState(d) => Some(d.tick),
        _ => None,
    })?;
    assert_eq!(msgs.len(), 1, "a DeltaState travels alone in its packet");
    Some(tick)
}

const CITY: Proto = Proto {
    name: "city",
    tick_of: city_tick,
    step: 1,
    rate: 60,
};

fn city_run(loss: f64) -> Vec<Figures> {
    let t0 = Instant::now();
    let cfg = CityServerConfig {
        content_assets: 3,
        content_asset_size: 2048,
        seed: 7,
        ..CityServerConfig::default()
    };
    let bots = (0..BOTS)
        .map(|i| CityBot::new(params(i, 1000), CityOptions::default()))
        .collect();
    let mut sim = Sim::new(t0, CityServer::new(cfg, t0), bots);
    // ENet's channels: the drop rule is asked about unreliable packets only.
    sim.link = sim::Link::Enet;
    drive(&mut sim, CITY, Halving::OnTheLink, loss)
}

/// City (step 1 configured): a server halving its DeltaState rate from 60 to 30 a second for
/// 4 s loses nothing, is reported as one rate change down and one up, and `snapshots_sent`
/// reads 60 a second outside the window and 30 inside.
#[test]
fn city_a_halved_snapshot_rate_is_no_loss() {
    assert_halving_is_no_loss(CITY, &city_run(0.0), Halving::OnTheLink);
}

/// City: with 5 % real loss on top of the halving, the measured loss rate is the real drops
/// over the DeltaStates sent at the effective rate (within 0.5 points); the rate changes and
/// per-second rates still read right.
#[test]
fn city_real_loss_across_a_halved_rate_is_measured() {
    assert_real_loss_is_measured(CITY, &city_run(REAL_LOSS), Halving::OnTheLink);
}

// ---------------------------------------------------------------------------------------
// DarkAges, spec dialect: 60 Hz ticks, a snapshot (full or delta) every 3rd tick.
// ---------------------------------------------------------------------------------------

fn darkages_tick(b: &[u8]) -> Option<u32> {
    match darkages::codec::decode(b) {
        Ok(darkages::codec::Packet::Snapshot(s)) => Some(s.server_tick),
        _ => None,
    }
}

const DARKAGES: Proto = Proto {
    name: "darkages(spec)",
    tick_of: darkages_tick,
    step: 3,
    rate: 20,
};

fn darkages_run(loss: f64) -> Vec<Figures> {
    let t0 = Instant::now();
    let cfg = DarkAgesServerConfig {
        wall_epoch_ms: Some(1_000_000),
        challenge_seed: Some(7),
        ..DarkAgesServerConfig::default()
    };
    assert_eq!((cfg.tick_hz, cfg.snapshot_step), (60, DARKAGES.step));
    let bots = (0..BOTS)
        .map(|i| DarkAgesBot::new(params(i, 1000), DarkAgesOptions::default()))
        .collect();
    let mut sim = Sim::new(t0, DarkAgesServer::new(cfg, t0), bots);
    let figs = drive(&mut sim, DARKAGES, Halving::OnTheLink, loss);
    for (i, r) in sim.recs.iter().enumerate() {
        assert_eq!(r.events.get("baseline_miss"), 0, "darkages: bot {i}");
    }
    figs
}

/// DarkAges spec dialect (step learned, 3): a server halving its snapshot rate from 20 Hz to
/// 10 Hz for 4 s loses nothing, is reported as one rate change down and one up, and
/// `snapshots_sent` reads 20 a second outside the window and 10 inside.
#[test]
fn darkages_spec_a_halved_snapshot_rate_is_no_loss() {
    assert_halving_is_no_loss(DARKAGES, &darkages_run(0.0), Halving::OnTheLink);
}

/// DarkAges spec dialect: with 5 % real loss on top of the halving, the measured loss rate is
/// the real drops over the snapshots sent at the effective rate (within 0.5 points); the rate
/// changes and per-second rates still read right.
#[test]
fn darkages_spec_real_loss_across_a_halved_rate_is_measured() {
    assert_real_loss_is_measured(DARKAGES, &darkages_run(REAL_LOSS), Halving::OnTheLink);
}

// ---------------------------------------------------------------------------------------
// DarkAges, implementation dialect: 60 Hz ticks, a full snapshot every 3rd tick.
// ---------------------------------------------------------------------------------------

fn implementation_tick(b: &[u8]) -> Option<u32> {
    match da_impl::codec::decode_server(b) {
        Ok(da_impl::codec::ServerPacket::Snapshot(s)) => Some(s.server_tick),
        _ => None,
    }
}

const IMPLEMENTATION: Proto = Proto {
    name: "darkages(implementation)",
    tick_of: implementation_tick,
    step: 3,
    rate: 20,
};

fn implementation_run(loss: f64) -> Vec<Figures> {
    let t0 = Instant::now();
    let opts = DarkAgesOptions {
        dialect: darkages::Dialect::Implementation,
        ..DarkAgesOptions::default()
    };
    let bots = (0..BOTS)
        .map(|i| ImplementationBot::new(params(i, 2000), opts.clone()))
        .collect();
    let mut sim = Sim::new(t0, ImplementationServer::new(100, t0), bots);
    drive(&mut sim, IMPLEMENTATION, Halving::OnTheLink, loss)
}

/// DarkAges implementation dialect (step learned, 3): a server halving its snapshot rate
/// from 20 Hz to 10 Hz for 4 s loses nothing, is reported as one rate change down and one
/// up, and `snapshots_sent` reads 20 a second outside the window and 10 inside.
#[test]
fn darkages_implementation_a_halved_snapshot_rate_is_no_loss() {
    assert_halving_is_no_loss(IMPLEMENTATION, &implementation_run(0.0), Halving::OnTheLink);
}

/// DarkAges implementation dialect: with 5 % real loss on top of the halving, the measured
/// loss rate is the real drops over the snapshots sent at the effective rate (within 0.5
/// points); the rate changes and per-second rates still read right.
#[test]
fn darkages_implementation_real_loss_across_a_halved_rate_is_measured() {
    assert_real_loss_is_measured(
        IMPLEMENTATION,
        &implementation_run(REAL_LOSS),
        Halving::OnTheLink,
    );
}
