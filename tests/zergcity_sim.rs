//! ZergCity bots and the reference server on the crate's simulation harness over its ENet
//! link, in simulated time (see `common/zergcity.rs`): channels 0 and 1 are reliable (never
//! lost, in order), channel 2 is unreliable and subject to injected loss and hold-back; by
//! default it is delivered sequenced as ENet does (a packet older than one delivered is
//! dropped). A bot that asks for a relink gets a new connection id: the server sees the old
//! one disconnect and the bot's `handle_relinked` follows one round trip later, as ENet's
//! connect would. The link logs what it dropped; the server's world at every tick is
//! captured, so the tests compare what the bots measured and applied with ground truth.

mod common;

use std::time::{Duration, Instant};

use common::zergcity::{add_bot, new_sim};
use tickswarm::api::sim::{rule, Record};
use tickswarm::games::zergcity::codec::{self, Decompressor, Message};
use tickswarm::games::zergcity::world::World;
use tickswarm::games::zergcity::{ZergCityBot, ZergCityOptions, ZergCityServerConfig};
use tickswarm::metrics::Recorder;
use tickswarm::protocol::{Bot, BotParams, BotPhase, Server, MAX_MESSAGE};

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
    let (mut sim, _) = new_sim(ZergCityServerConfig::default(), ms(20));
    for i in 0..4 {
        add_bot(&mut sim, ZergCityOptions::default(), params(i));
    }
    sim.run_until(Duration::from_secs(5));
    for i in 0..4 {
        let r = &sim.recs[i];
        assert_eq!(sim.bots[i].phase(), BotPhase::Connected);
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
    let (mut sim, _) = new_sim(ZergCityServerConfig::default(), ms(5));
    // The 3rd, 10th, 17th ... unreliable message to each bot.
    sim.down.drop = Some(rule(|m| !m.reliable && (m.channel_index + 1) % 7 == 3));
    for i in 0..3 {
        add_bot(&mut sim, ZergCityOptions::default(), params(i));
    }
    sim.run_until(Duration::from_secs(6));
    for i in 0..3 {
        let r = &sim.recs[i];
        // Ground truth: the bot's session runs from sequence 0 (ServerHello); losses after
        // the last message it received cannot be seen yet.
        let mut dec = Decompressor::default();
        let seq_of = |p: &Record, dec: &mut Decompressor| {
            codec::decode(&p.bytes, dec)
                .map(|d| d.header.sequence)
                .unwrap_or(0)
        };
        let last = sim
            .down_to(i)
            .filter(|p| !p.delivered.is_empty())
            .map(|p| seq_of(p, &mut dec))
            .max()
            .unwrap();
        let lost = sim
            .down_to(i)
            .filter(|p| p.dropped && seq_of(p, &mut dec) < last)
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
    let (mut sim, truth) = new_sim(ZergCityServerConfig::default(), ms(100));
    add_bot(&mut sim, ZergCityOptions::default(), params(0));
    add_bot(&mut sim, ZergCityOptions::default(), params(1));
    sim.run_until(Duration::from_secs(4));
    let truth = truth.borrow();
    assert!(truth.delta_bases.len() > 80);
    for &(bot, base, target, acked) in &truth.delta_bases {
        assert_eq!(Some(base), acked, "bot {bot}: delta {base}->{target}");
        // An ack takes a round trip (200 ms = 4 ticks) to come back.
        assert!(target - base >= 4, "{base}->{target}");
    }
    assert_eq!(sim.recs[0].events.get("baseline_misses"), 0);
}

#[test]
fn lost_and_reordered_deltas_never_meet_the_wrong_baseline_and_a_full_snapshot_recovers() {
    let cfg = ZergCityServerConfig {
        max_delta_age: 10,
        ..Default::default()
    };
    let (mut sim, _) = new_sim(cfg, ms(10));
    sim.sequenced = false;
    // Random-looking loss and hold-back (by each bot's unreliable message count, from 1);
    // then a blackout of the unreliable channel longer than the server's delta age, which
    // only a FullSnapshot can heal.
    sim.down.drop = Some(rule(|m| {
        let order = m.channel_index + 1;
        !m.reliable && ((order * 2_654_435_761) % 10 < 2 || (ms(2000)..ms(3000)).contains(&m.at))
    }));
    sim.down.hold = Some((
        rule(|m| !m.reliable && (m.channel_index + 1) % 5 == 1),
        ms(120),
    ));
    for i in 0..4 {
        let mut p = params(i);
        p.input_rate_hz = 20.0;
        add_bot(&mut sim, ZergCityOptions::default(), p);
    }
    sim.run_until(Duration::from_secs(6));
    for i in 0..4 {
        let r = &sim.recs[i];
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
        let newest = sim.bots[i].newest_tick().unwrap();
        assert!(
            newest + 5 >= sim.server.tick(),
            "bot {i} caught up: {newest}"
        );
    }
    // A delta against a baseline the bot does not hold is counted and not acked.
    let newest = sim.bots[0].newest_tick().unwrap();
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
    let now = sim.now();
    let (bot, rec) = (&mut sim.bots[0], &mut sim.recs[0]);
    let misses = rec.events.get("baseline_misses");
    bot.handle_datagram(now, &buf[..n], rec);
    assert_eq!(rec.events.get("baseline_misses"), misses + 1);
    assert_eq!(bot.newest_tick(), Some(newest), "not applied, not acked");
    assert!(bot.poll_transmit(&mut buf).is_none(), "no SnapshotAck");
}

#[test]
fn reconnection_restores_the_slot_and_resyncs_through_a_full_snapshot() {
    let (mut sim, _) = new_sim(ZergCityServerConfig::default(), ms(15));
    for i in 0..3 {
        add_bot(&mut sim, ZergCityOptions::default(), params(i));
    }
    sim.run_until(Duration::from_secs(2));
    let slot = sim.bots[1].slot();
    let token = sim.bots[1].token();
    assert!(slot.is_some());
    let now = sim.now();
    sim.bots[1].reconnect_now(now, &mut sim.recs[1]);
    sim.drain_bot(1);
    sim.run_until(Duration::from_secs(4));
    let r = &sim.recs[1];
    assert_eq!(r.events.get("reconnect_attempts"), 1);
    assert_eq!(r.events.get("reconnect_slot_restored"), 1, "{:?}", r.events);
    assert_eq!(sim.bots[1].slot(), slot);
    assert_eq!(sim.bots[1].token(), token, "the same token");
    let resync = extra(r, "resync_us").expect("resync");
    assert_eq!(resync.len(), 1);
    // Drop, connect (a round trip), hello and full snapshot: at least two round trips.
    assert!(resync.min() >= 60_000, "resync {}", resync.min());
    assert_eq!(sim.server.players(), 3);
    let newest = sim.bots[1].newest_tick().unwrap();
    assert!(newest + 3 >= sim.server.tick());
    // A new player while the slot is held gets another slot; the fifth is refused.
    add_bot(&mut sim, ZergCityOptions::default(), params(3));
    add_bot(&mut sim, ZergCityOptions::default(), params(4));
    sim.run_until(Duration::from_secs(5));
    assert_eq!(sim.bots[3].phase(), BotPhase::Connected);
    assert_eq!(sim.bots[4].phase(), BotPhase::Failed);
    assert_eq!(sim.recs[4].connect_failures.get("server_full"), 1);
    assert_eq!(sim.server.stats().refused, 1);
}

#[test]
fn inputs_beyond_sixty_a_second_are_rate_limited() {
    let (mut sim, _) = new_sim(ZergCityServerConfig::default(), ms(5));
    let mut p = params(0);
    p.input_rate_hz = 100.0;
    add_bot(&mut sim, ZergCityOptions::default(), p);
    sim.run_until(Duration::from_secs(4));
    let r = &sim.recs[0];
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
    let (mut sim, _) = new_sim(ZergCityServerConfig::default(), ms(5));
    add_bot(&mut sim, ZergCityOptions::default(), params(0));
    sim.run_until(Duration::from_secs(1));
    let (now, conn) = (sim.now(), sim.addrs[0]);
    for _ in 0..10 {
        sim.server
            .handle_datagram(now, conn, b"not zergcity at all");
    }
    sim.drain_server();
    sim.run_until(Duration::from_secs(2));
    let r = &sim.recs[0];
    assert_eq!(
        r.events.get("server_disconnect.protocol_error"),
        1,
        "{:?}",
        r.events
    );
    assert_eq!(r.events.get("error_message.invalid_message"), 1);
    assert_eq!(sim.bots[0].phase(), BotPhase::Closed);
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
    use tickswarm::games::zergcity::world::{self, Metadata};
    let opts = ZergCityOptions {
        max_state_bytes: tickswarm::games::zergcity::MIN_STATE_BYTES,
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
