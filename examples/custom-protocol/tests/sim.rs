//! Skirmish on tickswarm's deterministic simulated link (`tickswarm::api::sim`): exact ground
//! truth from the link's log, against what the bots measured.
use std::time::{Duration, Instant};

use skirmish_swarm::{msg, Options, SkirmishBot, SkirmishServer};
use tickswarm::api::sim::{every_kth, rule, Dir, Sim};
use tickswarm::api::{BotParams, ServerParams};

const BOTS: u32 = 8;

fn sim() -> Sim<SkirmishBot, SkirmishServer> {
    let t0 = Instant::now();
    let server = SkirmishServer::new(Options::default(), &ServerParams::default(), t0);
    let bots = (0..BOTS).map(|i| SkirmishBot::new(BotParams::with_index(i, 7 + u64::from(i))));
    let mut sim = Sim::new(t0, server, bots.collect());
    sim.start_all();
    sim
}

/// Snapshots to bot `i` the link dropped, before the last one that reached it (a loss a
/// sequence counter can see).
fn dropped_snapshots_seen(sim: &Sim<SkirmishBot, SkirmishServer>, i: usize) -> u64 {
    let snaps: Vec<_> = sim.down_to(i).filter(|r| r.bytes[0] == msg::SNAPSHOT).collect();
    let last = snaps.iter().rposition(|r| !r.delivered.is_empty()).unwrap_or(0);
    snaps[..last].iter().filter(|r| r.dropped).count() as u64
}

#[test]
fn a_clean_link_measures_no_loss_and_every_bot_sees_the_servers_world() {
    let mut sim = sim();
    sim.run_for(Duration::from_secs(3));
    for (i, rec) in sim.recs.iter().enumerate() {
        assert_eq!(rec.loss_down.expected, rec.loss_down.received, "bot {i}");
        assert!(rec.snapshots_applied > 150, "bot {i}: {}", rec.snapshots_applied);
        assert!(rec.rtt_us.len() >= 2, "bot {i}: {} rtt samples", rec.rtt_us.len());
        assert_eq!(rec.decode_errors.total(), 0, "bot {i}");
        // Full until the server has the bot's first acknowledgement (a tick or two), then
        // every snapshot is a delta.
        let full = rec.events.get("full_snapshots");
        assert!((1..=3).contains(&full), "bot {i}: {full} full snapshots");
        let deltas = rec.extra.iter().find(|(k, _)| *k == "baseline_age_ticks").map(|(_, h)| h.len());
        assert_eq!(full + deltas.unwrap_or(0), rec.snapshots_applied, "bot {i}");
    }
    let bot = &sim.bots[0];
    for id in 0..BOTS as u16 {
        assert_eq!(bot.position(id), sim.server.position(bot.acked_tick(), id), "player {id}");
    }
}

#[test]
fn every_dropped_snapshot_is_counted_and_deltas_stay_exact() {
    let mut sim = sim();
    sim.down.drop = Some(every_kth(10));
    sim.run_for(Duration::from_secs(3));
    let mut dropped = 0;
    for (i, rec) in sim.recs.iter().enumerate() {
        let truth = dropped_snapshots_seen(&sim, i);
        assert_eq!(rec.loss_down.expected - rec.loss_down.received, truth, "bot {i}");
        assert_eq!(rec.decode_errors.total(), 0, "bot {i}: a delta on a baseline it lacks");
        dropped += truth;
        let bot = &sim.bots[i];
        for id in 0..BOTS as u16 {
            assert_eq!(bot.position(id), sim.server.position(bot.acked_tick(), id), "{i}/{id}");
        }
    }
    assert!(dropped > 100, "the rule dropped {dropped}");
}

#[test]
fn dropped_inputs_are_upstream_loss_exactly() {
    let mut sim = sim();
    // Every 4th input between 1 s and 2 s: later inputs and snapshots report each gap.
    let window = Duration::from_secs(1)..Duration::from_secs(2);
    sim.up.drop =
        Some(rule(move |m| m.bytes[0] == msg::INPUT && window.contains(&m.at) && m.peer_index % 4 == 0));
    sim.run_for(Duration::from_secs(3));
    for (i, rec) in sim.recs.iter().enumerate() {
        let truth = sim.up_from(i).filter(|r| r.dropped).count() as u64;
        assert!(truth > 10, "bot {i}: {truth}");
        assert_eq!(rec.loss_up.expected - rec.loss_up.received, truth, "bot {i}");
    }
    assert!(sim.log.iter().all(|r| r.dir == Dir::Down || r.bytes.len() <= 10));
}

#[test]
fn delay_shows_in_rtt_and_the_full_dialect_sends_no_deltas() {
    let t0 = Instant::now();
    let opts = Options { dialect: skirmish_swarm::Dialect::Full };
    let server = SkirmishServer::new(opts, &ServerParams::default(), t0);
    let mut sim = Sim::new(t0, server, vec![SkirmishBot::new(BotParams::with_index(0, 1))]);
    sim.up.delay = Duration::from_millis(20);
    sim.down.delay = Duration::from_millis(30);
    sim.start_all();
    sim.run_for(Duration::from_secs(3));
    let rec = &sim.recs[0];
    // 20 ms up and 30 ms down, to the histogram's precision (3 significant digits).
    for us in [rec.rtt_us.min(), rec.rtt_us.max()] {
        assert!((49_900..=50_100).contains(&us), "{us}");
    }
    assert_eq!(rec.events.get("full_snapshots"), rec.snapshots_applied);
}
