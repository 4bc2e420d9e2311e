//! City bots and the reference server on the crate's simulation harness, in simulated time
//! (nothing sleeps, no sockets; see `common/city.rs`).
//!
//! The link works at the ENet-message level, the way ENet presents it to the protocol: the
//! reliable channel (0) is delivered in order and never lost; the unreliable channel (1) is
//! subject to injected loss and delay, and delivered sequenced (ENet drops a packet older
//! than one already delivered on the channel). Every packet on the link is checked: at most
//! 1400 bytes (1200 unreliable), and each message in it on the channel city.md assigns to its
//! type. The link logs what it dropped, so the tests compare the bots' measurements with
//! ground truth. Two in-test pieces run on the same harness: the variant's server (an
//! in-test `Server`), and a bot and the server behind real ENet hosts (adapters whose
//! datagrams are ENet's own, on the harness's datagram link).

mod common;

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use common::city::{new_sim, new_sim_seeded, Link};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tickswarm::api::sim::rule;
use tickswarm::games::city::bot::Stage;
use tickswarm::games::city::codec::{self, Dialect, Message};
use tickswarm::games::city::{CityBot, CityOptions, CityServer, CityServerConfig, Vec2f};
use tickswarm::metrics::Recorder;
use tickswarm::protocol::{
    Bot, BotParams, BotPhase, ConnId, InputPattern, Keys, Server, ServerStats, Transmit,
    MAX_DATAGRAM,
};
use tickswarm::transport::{
    EnetClient, EnetConfig, EnetEvent, EnetHost, PeerId, MAX_ENET_DATAGRAM,
};

fn params(i: u32) -> BotParams {
    BotParams::with_index(i, 1000 + u64::from(i))
}

/// A square walk around the spawn point: right, down, left, up, 0.5 s each.
fn square_walk() -> InputPattern {
    let step = Duration::from_millis(500);
    InputPattern::Scripted {
        steps: vec![
            (Keys(Keys::RIGHT), step),
            (Keys(Keys::DOWN), step),
            (Keys(Keys::LEFT), step),
            (Keys(Keys::UP), step),
        ],
    }
}

fn small_content() -> CityServerConfig {
    CityServerConfig {
        content_assets: 3,
        content_asset_size: 2048,
        ..CityServerConfig::default()
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn extra<'a>(rec: &'a Recorder, name: &str) -> Option<&'a hdrhistogram::Histogram<u64>> {
    rec.extra.iter().find(|(n, _)| *n == name).map(|(_, h)| h)
}

// ---- content ------------------------------------------------------------------------------

#[test]
fn content_download_completes_and_checksums_match() {
    let cfg = CityServerConfig {
        content_assets: 12,
        content_asset_size: 16 * 1024,
        ..CityServerConfig::default()
    };
    let mut sim = new_sim(
        cfg,
        Link {
            delay: ms(20),
            ..Link::default()
        },
    );
    let shares = [0.0, 0.5, 1.0];
    for (i, &share) in shares.iter().enumerate() {
        let opts = CityOptions {
            cached_content_share: share,
            ..CityOptions::default()
        };
        sim.add_bot(opts, params(i as u32), ms(i as u64 * 5));
    }
    sim.run_for(Duration::from_secs(4));
    // Ground truth: the server's assets, checksummed here independently.
    let truth: HashMap<u64, (u64, u64)> = sim
        .server
        .assets()
        .iter()
        .map(|a| {
            (
                a.resource_id,
                (a.data.len() as u64, codec::Fnv64::hash(&a.data)),
            )
        })
        .collect();
    let total: u64 = truth.values().map(|v| v.0).sum();
    for (i, &share) in shares.iter().enumerate() {
        let bot = sim.bot(i);
        let c = bot.content();
        eprintln!(
            "share {share}: {} assets, {} cached, {} requested, {} verified, {} bytes, content time {} µs",
            c.assets,
            c.cached,
            c.requested,
            c.verified,
            c.bytes,
            extra(sim.rec(i), "content_time_us").map_or(0, |h| h.max())
        );
        assert!(c.complete, "bot {i} content complete");
        assert_eq!(c.assets, 12);
        assert_eq!(c.failed, 0);
        assert_eq!(c.verified, c.requested, "every requested asset verified");
        assert_eq!(c.cached + c.requested, 12);
        for a in bot.assets() {
            let (size, sum) = truth[&a.resource_id];
            assert_eq!(
                (a.size, a.checksum),
                (size, sum),
                "manifest matches the data"
            );
            if !a.cached {
                assert_eq!(a.received, size, "asset fully received");
            }
        }
        assert_eq!(bot.stage(), Stage::Playing);
        assert_eq!(
            extra(sim.rec(i), "content_time_us").map(|h| h.len()),
            Some(1)
        );
        assert_eq!(sim.rec(i).events.get("content_checksum_mismatch"), 0);
    }
    assert_eq!(sim.bot(0).content().requested, 12);
    assert_eq!(sim.bot(0).content().bytes, total);
    assert_eq!(sim.bot(2).content().requested, 0);
    let half = sim.bot(1).content().cached;
    assert!((2..=10).contains(&half), "share 0.5 cached {half} of 12");
    // Nothing missing: ServerHello to ContentComplete is one request round trip (2 × 20 ms).
    let t = extra(sim.rec(2), "content_time_us").unwrap().max();
    assert!((39_900..=40_100).contains(&t), "content time {t} µs");
    // Everything missing: ~200 KiB at 4 chunks of 1 KiB per tick (~240 KiB/s).
    let t = extra(sim.rec(0), "content_time_us").unwrap().max();
    assert!(t > 500_000 && t < 2_000_000, "content time {t} µs");
}

#[test]
fn corrupted_chunk_fails_the_checksum() {
    // A bot fed a manifest and a chunk whose bytes do not match.
    let now = Instant::now();
    let mut rec = Recorder::new();
    let mut bot = CityBot::new(params(0), CityOptions::default());
    bot.start(now, &mut rec);
    let mut buf = [0u8; 1500];
    let mut packet = Vec::new();
    let hello = Message::ServerHello {
        protocol_version: 1,
        server_id: "s",
        server_name: "s",
        session_id: 1,
        player_entity: 1,
    };
    let n = codec::encode(&mut buf, 0, &hello).unwrap();
    packet.extend_from_slice(&buf[..n]);
    let assets = [codec::AssetEntry {
        resource_id: 5,
        asset_type: 0,
        path: "x",
        size: 3,
        checksum: codec::Fnv64::hash(b"abc"),
    }];
    let n = codec::encode_content_manifest(&mut buf, 1, "s", "s", 1, 3, &assets).unwrap();
    packet.extend_from_slice(&buf[..n]);
    let chunk = Message::ContentChunk {
        resource_id: 5,
        chunk_index: 0,
        total_chunks: 1,
        data: b"abd",
    };
    let n = codec::encode(&mut buf, 2, &chunk).unwrap();
    packet.extend_from_slice(&buf[..n]);
    bot.handle_datagram(now, &packet, &mut rec);
    assert_eq!(rec.events.get("content_checksum_mismatch"), 1);
    assert_eq!(bot.content().failed, 1);
}

// ---- RTT ----------------------------------------------------------------------------------

#[test]
fn rtt_follows_injected_delay() {
    for one_way in [0u64, 15, 60] {
        let mut sim = new_sim(
            small_content(),
            Link {
                delay: ms(one_way),
                ..Link::default()
            },
        );
        let mut p = params(0);
        p.ping_interval = ms(200);
        sim.add_bot(CityOptions::default(), p, Duration::ZERO);
        sim.run_for(Duration::from_secs(4));
        let rec = sim.rec(0);
        let h = &rec.rtt_us;
        let want = 2 * one_way * 1000;
        eprintln!(
            "one-way {one_way} ms: {} RTT samples, min {} µs, p50 {} µs, max {} µs; \
             input→ack p50 {} µs",
            h.len(),
            h.min(),
            h.value_at_quantile(0.5),
            h.max(),
            extra(rec, "input_ack_latency_us").map_or(0, |h| h.value_at_quantile(0.5))
        );
        assert!(h.len() >= 15, "{} samples", h.len());
        // Every sample is exactly 2d, within the histogram's 3 significant figures.
        let tol = want / 1000 + 1;
        assert!(h.min() + tol >= want.max(1) && h.max() <= want.max(1) + tol);
        // Input to InputAck: the round trip plus the wait for the server's next tick.
        let ack = extra(rec, "input_ack_latency_us").unwrap();
        assert!(ack.min() + tol >= want && ack.max() <= want + 17_000 + tol);
        assert_eq!(rec.events.get("ping_timeout"), 0);
        assert_eq!(rec.events.get("pong_late"), 0);
    }
}

// ---- loss ----------------------------------------------------------------------------------

#[test]
fn unreliable_loss_is_reported_exactly() {
    let mut sim = new_sim(
        small_content(),
        Link {
            delay: ms(10),
            loss_up: 0.1,
            loss_down: 0.1,
            ..Link::default()
        },
    );
    for i in 0..3 {
        sim.add_bot(CityOptions::default(), params(i), ms(u64::from(i) * 3));
    }
    sim.run_for(Duration::from_secs(8));
    // A lossless tail longer than the ack timeout, so every lossy input has been judged.
    sim.set_loss(0.0, 0.0);
    sim.run_for(Duration::from_secs(3));
    let mut total_lost_down = 0;
    for i in 0..3 {
        let rec = sim.rec(i);
        // Downstream: DeltaState ticks lost between the first and the last one delivered.
        let got = sim.delivered_delta_ticks(i);
        let (first, last) = (got[0], *got.last().unwrap());
        let lost_down = sim
            .dropped_delta_ticks(i)
            .into_iter()
            .filter(|t| *t > first && *t < last)
            .count() as u64;
        assert_eq!(rec.loss_down.expected, u64::from(last - first) + 1);
        assert_eq!(
            rec.loss_down.expected - rec.loss_down.received,
            lost_down,
            "bot {i} downstream"
        );
        // Upstream: PlayerInputs the link dropped, all judged by now.
        let lost_up = sim.dropped_input_ticks(i).len() as u64;
        assert_eq!(
            rec.loss_up.expected - rec.loss_up.received,
            lost_up,
            "bot {i} upstream"
        );
        eprintln!(
            "bot {i}: downstream {}/{} lost (link dropped {lost_down}), upstream {}/{} lost \
             (link dropped {lost_up}), {} corrections",
            rec.loss_down.expected - rec.loss_down.received,
            rec.loss_down.expected,
            rec.loss_up.expected - rec.loss_up.received,
            rec.loss_up.expected,
            rec.events.get("corrections"),
        );
        assert!(lost_down > 20 && lost_up > 20);
        total_lost_down += lost_down;
    }
    // The server saw the same upstream gaps.
    let server_missing = sim.server.stats().events.get("inputs_missing");
    let link_up: usize = (0..3).map(|i| sim.dropped_input_ticks(i).len()).sum();
    assert!(server_missing <= link_up as u64 && server_missing + 3 >= link_up as u64);
    assert!(total_lost_down > 0);
}

// ---- prediction ----------------------------------------------------------------------------

fn prediction_run(link: Link, pattern: InputPattern, nudges: &[(u64, f32)]) -> (Recorder, u64) {
    let mut sim = new_sim(small_content(), link);
    let mut p = params(0);
    p.pattern = pattern;
    sim.add_bot(CityOptions::default(), p, Duration::ZERO);
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.bot(0).stage(), Stage::Playing);
    let addr = sim.addrs[0];
    for &(at_ms, dx) in nudges {
        sim.run_until(ms(at_ms));
        assert!(sim.server.nudge_player(addr, dx, 0.0));
    }
    sim.run_until(Duration::from_secs(6));
    // Converged: after the last correction the prediction matches the server again.
    let predicted = sim.bot(0).predicted_position().unwrap();
    let server = sim.server.player_position(addr).unwrap();
    assert!(predicted.distance(server) < 2.0);
    let c = sim.bot(0).corrections();
    (sim.recs.swap_remove(0), c)
}

fn error_stats(rec: &Recorder) -> (u64, u64, u64) {
    let h = extra(rec, "prediction_error").expect("prediction errors recorded");
    (h.len(), h.value_at_quantile(0.99), h.max())
}

#[test]
fn prediction_is_exact_without_loss_even_with_delay() {
    for delay in [0u64, 50, 150] {
        let link = Link {
            delay: ms(delay),
            ..Link::default()
        };
        let (rec, corrections) = prediction_run(link, square_walk(), &[]);
        let (n, p99, max) = error_stats(&rec);
        eprintln!(
            "delay {delay} ms: {n} comparisons, prediction error p99 {p99} max {max} milli-tiles, \
             {corrections} corrections"
        );
        assert!(n > 250, "{n} comparisons");
        // 1 milli-tile is the histogram's floor: every comparison found 0.
        assert_eq!(max, 1);
        assert_eq!(corrections, 0);
        assert_eq!(rec.events.get("corrections"), 0);
    }
}

#[test]
fn lost_inputs_cause_corrections() {
    let link = Link {
        delay: ms(30),
        loss_up: 0.05,
        ..Link::default()
    };
    let (rec, corrections) = prediction_run(link, square_walk(), &[]);
    let (n, p99, max) = error_stats(&rec);
    eprintln!(
        "5% upstream loss: {n} comparisons, prediction error p99 {p99} max {max} milli-tiles, \
         {corrections} corrections"
    );
    assert!(corrections > 5);
    assert_eq!(rec.events.get("corrections"), corrections);
    // One lost step at 5 tiles/s is 83 milli-tiles.
    assert!(max >= 80, "max error {max}");
}

#[test]
fn server_side_nudges_cause_one_correction_each() {
    let link = Link {
        delay: ms(30),
        ..Link::default()
    };
    let (rec, corrections) = prediction_run(
        link,
        square_walk(),
        &[(1500, 0.5), (2500, -0.3), (4000, 0.25)],
    );
    let (n, _, max) = error_stats(&rec);
    eprintln!("3 nudges: {n} comparisons, max error {max} milli-tiles, {corrections} corrections");
    assert_eq!(corrections, 3);
    assert!(
        (495..=505).contains(&max),
        "largest error is the 0.5-tile nudge: {max}"
    );
}

#[test]
fn downstream_loss_does_not_disturb_prediction() {
    let link = Link {
        delay: ms(30),
        loss_down: 0.2,
        ..Link::default()
    };
    let (rec, corrections) = prediction_run(link, square_walk(), &[]);
    let (_, _, max) = error_stats(&rec);
    assert_eq!(corrections, 0);
    assert_eq!(max, 1);
    assert!(rec.loss_down.expected > rec.loss_down.received);
}

// ---- interpolation, interest ------------------------------------------------------------

#[test]
fn remote_entities_interpolate_and_gaps_follow_loss() {
    for (loss, want_gaps) in [(0.0, false), (0.6, true)] {
        let mut sim = new_sim(
            small_content(),
            Link {
                delay: ms(20),
                loss_down: loss,
                ..Link::default()
            },
        );
        for i in 0..3 {
            let mut p = params(i);
            p.pattern = square_walk();
            sim.add_bot(CityOptions::default(), p, Duration::ZERO);
        }
        sim.run_for(Duration::from_secs(5));
        let gaps: u64 = (0..3)
            .map(|i| sim.rec(i).events.get("extrapolation_gaps"))
            .sum();
        eprintln!("downstream loss {loss}: {gaps} extrapolation gaps");
        assert_eq!(gaps > 0, want_gaps);
        // Bot 0 draws bot 1 near where the server has it (100 ms + delay behind, 5 tiles/s).
        let b1 = sim.bot(1).player_entity();
        let drawn = sim
            .bot(0)
            .rendered_position(b1)
            .expect("bot 1 visible to bot 0");
        let truth = sim.server.player_position(sim.addrs[1]).unwrap();
        assert!(drawn.distance(truth) < 1.5, "{drawn:?} vs {truth:?}");
    }
}

#[test]
fn interest_tiers_near_every_tick_mid_every_third_far_never() {
    let cfg = CityServerConfig {
        npc_count: 0,
        ..small_content()
    };
    let mut sim = new_sim(
        cfg,
        Link {
            delay: ms(5),
            ..Link::default()
        },
    );
    // Everyone wiggles, so every entity changes every tick.
    let wiggle = InputPattern::Scripted {
        steps: vec![(Keys(Keys::RIGHT), ms(100)), (Keys(Keys::LEFT), ms(100))],
    };
    for i in 0..4 {
        let mut p = params(i);
        p.pattern = wiggle.clone();
        sim.add_bot(CityOptions::default(), p, Duration::ZERO);
    }
    sim.run_for(Duration::from_secs(1));
    let spots = [(50.0, 50.0), (55.0, 50.0), (70.0, 50.0), (100.0, 50.0)];
    for (i, (x, y)) in spots.iter().enumerate() {
        let addr = sim.addrs[i];
        assert!(sim.server.teleport_player(addr, Vec2f::new(*x, *y)));
    }
    // Let spawns and despawns settle, then watch bot 0.
    sim.run_for(ms(500));
    let mark = sim.deliveries.len();
    sim.run_for(Duration::from_secs(2));
    let ids: Vec<u32> = (0..4).map(|i| sim.bot(i).player_entity()).collect();
    let mut deltas = 0;
    for (b, bytes) in sim.delivered_since(mark) {
        if b != 0 {
            continue;
        }
        for (_, m) in codec::decode_all(bytes, Dialect::Spec).unwrap() {
            match m {
                Message::DeltaState(d) => {
                    deltas += 1;
                    let has = |id| d.updates().any(|u| u.net_entity_id == id);
                    assert!(has(ids[0]), "own entity in every delta");
                    assert!(has(ids[1]), "near (5 tiles) every tick, tick {}", d.tick);
                    assert_eq!(
                        has(ids[2]),
                        d.tick % 3 == 0,
                        "mid (20 tiles), tick {}",
                        d.tick
                    );
                    assert!(!has(ids[3]), "far (50 tiles) never");
                }
                Message::EntitySpawn(e) => {
                    assert_ne!(e.net_entity_id, ids[3], "far entity never spawned")
                }
                _ => {}
            }
        }
    }
    assert!(deltas >= 110, "{deltas} deltas in 2 s");
    let a = sim.bot(0);
    assert!(a.knows_entity(ids[1]) && a.knows_entity(ids[2]));
    assert!(!a.knows_entity(ids[3]), "far entity despawned");
    assert_eq!(sim.server.visible_to(sim.addrs[0]), Some(3)); // own, near, mid
}

// ---- refusals, timeouts -------------------------------------------------------------------

#[test]
fn full_server_refuses_the_101st_player() {
    let cfg = CityServerConfig {
        content_assets: 1,
        content_asset_size: 256,
        npc_count: 0,
        ..CityServerConfig::default()
    };
    assert_eq!(cfg.max_players, 100);
    let mut sim = new_sim(
        cfg,
        Link {
            delay: ms(5),
            ..Link::default()
        },
    );
    for i in 0..101 {
        // The default random walk: players keep changing, so deltas carry them.
        sim.add_bot(CityOptions::default(), params(i), ms(u64::from(i) * 2));
    }
    sim.run_for(ms(500));
    let connected = (0..101)
        .filter(|&i| sim.bot(i).phase() == BotPhase::Connected)
        .count();
    let failed: Vec<usize> = (0..101)
        .filter(|&i| sim.bot(i).phase() == BotPhase::Failed)
        .collect();
    assert_eq!(connected, 100);
    assert_eq!(failed, [100]);
    assert_eq!(sim.rec(100).connect_failures.get("server_full"), 1);
    assert_eq!(sim.server.stats().accepted, 100);
    assert_eq!(sim.server.stats().refused, 1);
    assert_eq!(sim.server.players(), 100);
    assert!((0..100).all(|i| sim.bot(i).stage() == Stage::Playing));

    // Crowd all 100 into a few tiles: everyone is near everyone, and a DeltaState holds at most
    // what fits an unreliable packet (the link asserts 1200 bytes), nearest first.
    for i in 0..100 {
        let addr = sim.addrs[i];
        let pos = Vec2f::new(60.0 + (i % 10) as f32 * 0.5, 60.0 + (i / 10) as f32 * 0.5);
        assert!(sim.server.teleport_player(addr, pos));
    }
    sim.run_for(ms(300));
    let mark = sim.deliveries.len();
    sim.run_for(ms(100));
    let most = sim
        .delivered_since(mark)
        .into_iter()
        .flat_map(|(_, bytes)| codec::decode_all(bytes, Dialect::Spec).unwrap())
        .filter_map(|(_, m)| match m {
            Message::DeltaState(d) => Some(d.len()),
            _ => None,
        })
        .max()
        .unwrap();
    assert_eq!(most, (codec::MAX_UNRELIABLE_PACKET - 13) / 20);
    assert!((0..100).all(|i| sim.bot(i).remote_count() == 99));
    assert!((0..100).all(|i| sim.rec(i).decode_errors.total() == 0));
}

#[test]
fn version_mismatch_is_a_connect_failure() {
    let mut sim = new_sim(small_content(), Link::default());
    let opts = CityOptions {
        protocol_version: 2,
        ..CityOptions::default()
    };
    sim.add_bot(opts, params(0), Duration::ZERO);
    sim.run_for(ms(100));
    assert_eq!(sim.bot(0).phase(), BotPhase::Failed);
    assert_eq!(sim.rec(0).connect_failures.get("version_mismatch"), 1);
    assert_eq!(sim.server.stats().events.get("refused.version_mismatch"), 1);
    // The engine closed the ENet session; the server forgot it.
    assert_eq!(sim.server.stats().clients, 0);
}

#[test]
fn silent_server_times_out_after_five_seconds() {
    let mut sim = new_sim(small_content(), Link::default());
    sim.add_bot(CityOptions::default(), params(0), Duration::ZERO);
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.bot(0).stage(), Stage::Playing);
    sim.down.cut = true;
    let silent_from = sim.now();
    sim.run_for(Duration::from_millis(4900));
    assert_eq!(sim.bot(0).phase(), BotPhase::Connected);
    sim.run_for(ms(200));
    assert_eq!(sim.bot(0).phase(), BotPhase::Closed);
    assert_eq!(sim.rec(0).events.get("server_silence_timeout"), 1);
    assert!(sim.now() - silent_from <= Duration::from_millis(5100));
}

#[test]
fn server_drops_silent_clients_after_thirty_seconds() {
    let cfg = CityServerConfig {
        npc_count: 0,
        ..small_content()
    };
    let mut sim = new_sim(cfg, Link::default());
    sim.add_bot(CityOptions::default(), params(0), Duration::ZERO);
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.server.players(), 1);
    // Stop the bot from talking without a Disconnect: its packets vanish.
    sim.set_loss(1.0, 0.0);
    sim.bots[0] = CityBot::new(params(0), CityOptions::default());
    sim.run_for(Duration::from_secs(31));
    assert_eq!(sim.server.players(), 0);
    assert_eq!(sim.server.stats().timed_out, 1);
}

#[test]
fn stop_sends_disconnect_and_the_server_despawns_the_player() {
    let mut sim = new_sim(small_content(), Link::default());
    for i in 0..2 {
        sim.add_bot(CityOptions::default(), params(i), Duration::ZERO);
    }
    sim.run_for(Duration::from_secs(1));
    let gone = sim.bot(1).player_entity();
    assert!(sim.bot(0).knows_entity(gone));
    sim.stop(1);
    sim.run_for(ms(100));
    assert_eq!(sim.server.players(), 1);
    assert_eq!(sim.server.stats().disconnected, 1);
    assert!(
        !sim.bot(0).knows_entity(gone),
        "despawned for the other bot"
    );
}

// ---- chat, rate limits ----------------------------------------------------------------------

#[test]
fn chat_is_relayed_and_rate_limited() {
    let mut sim = new_sim(
        small_content(),
        Link {
            delay: ms(10),
            ..Link::default()
        },
    );
    let talk = CityOptions {
        chat_rate: 120.0,
        ..CityOptions::default()
    };
    let spam = CityOptions {
        chat_rate: 1200.0,
        ..CityOptions::default()
    };
    sim.add_bot(talk.clone(), params(0), Duration::ZERO);
    sim.add_bot(talk, params(1), Duration::ZERO);
    sim.add_bot(spam, params(2), Duration::ZERO);
    sim.run_for(Duration::from_secs(6));
    let ev = &sim.server.stats().events;
    let relayed = ev.get("chat_relayed");
    let limited = ev.get("chat_rate_limited");
    eprintln!("chat: {relayed} relayed, {limited} rate-limited");
    // The spammer sent ~100 in 5 s; the server relayed its first 30.
    assert!(limited >= 60, "{limited}");
    // Every bot got every relayed message (Global), its own included.
    for i in 0..3 {
        assert_eq!(sim.rec(i).events.get("chat_received"), relayed, "bot {i}");
    }
    let echo = extra(sim.rec(0), "chat_echo_us").unwrap();
    assert!(echo.len() >= 8);
    assert!(echo.max() <= 20_000 + 20, "echo {} µs", echo.max());
}

/// `chat_channel: whisper`: bots 0 and 1 whisper to each other by name; bot 2's partner (3)
/// is not there, so only its own copy comes back. Nobody else hears a whisper.
#[test]
fn whispers_reach_the_partner_and_come_back() {
    let mut sim = new_sim(
        small_content(),
        Link {
            delay: ms(10),
            ..Link::default()
        },
    );
    let whisper: CityOptions =
        serde_saphyr::from_str("chat_rate: 60\nchat_channel: whisper\n").unwrap();
    for i in 0..3 {
        sim.add_bot(whisper.clone(), params(i), Duration::ZERO);
    }
    sim.run_for(Duration::from_secs(5));
    let relayed = sim.server.stats().events.get("chat_relayed");
    assert!(relayed >= 9, "{relayed}");
    let got = |i: usize| sim.rec(i).events.get("chat_received");
    // Bots 0 and 1: their own whispers back, and each other's.
    let sent_by = |i: usize| extra(sim.rec(i), "chat_echo_us").map_or(0, |h| h.len());
    assert!(
        got(0) >= sent_by(0) + sent_by(1) - 2,
        "bot 0 got {}",
        got(0)
    );
    assert!(
        got(1) >= sent_by(0) + sent_by(1) - 2,
        "bot 1 got {}",
        got(1)
    );
    // Bot 2: only its own.
    assert_eq!(got(2), sent_by(2), "bot 2 heard someone else");
    assert!(sent_by(2) >= 3);
}

#[test]
fn inputs_beyond_the_rate_limit_are_dropped_unacknowledged() {
    let mut sim = new_sim(small_content(), Link::default());
    let mut p = params(0);
    p.input_rate_hz = 200.0;
    p.pattern = square_walk();
    sim.add_bot(CityOptions::default(), p, Duration::ZERO);
    sim.run_for(Duration::from_secs(6));
    let limited = sim.server.stats().events.get("inputs_rate_limited");
    let rec = sim.rec(0);
    eprintln!(
        "200 inputs/s: {limited} rate-limited by the server, upstream loss {:.2}, {} corrections",
        rec.loss_up.rate(),
        rec.events.get("corrections")
    );
    // ~6 s in game at 200/s against 100/s allowed.
    assert!((500..=650).contains(&limited), "{limited}");
    assert!((0.4..0.6).contains(&rec.loss_up.rate()));
    assert!(rec.events.get("corrections") > 0);
}

// ---- dialect, determinism -----------------------------------------------------------------

#[test]
fn implementation_dialect_plays_without_content() {
    let cfg = CityServerConfig::for_dialect(Dialect::Implementation);
    let mut sim = new_sim(
        cfg,
        Link {
            delay: ms(10),
            ..Link::default()
        },
    );
    let opts = CityOptions {
        dialect: Dialect::Implementation,
        ..CityOptions::default()
    };
    for i in 0..2 {
        let mut p = params(i);
        p.pattern = square_walk();
        sim.add_bot(opts.clone(), p, Duration::ZERO);
    }
    sim.run_for(Duration::from_secs(3));
    for i in 0..2 {
        let (bot, rec) = (sim.bot(i), sim.rec(i));
        assert_eq!(bot.stage(), Stage::Playing);
        assert_eq!(bot.content().assets, 0);
        assert!(rec.snapshots_applied > 100);
        assert_eq!(rec.decode_errors.total(), 0);
        assert!(bot.knows_entity(sim.bot(1 - i).player_entity()));
        // The reference server moves implementation-dialect players on the variant's grid;
        // the bot predicts with the same model and matches without acks: exact without loss.
        assert_eq!(bot.corrections(), 0);
        let h = extra(rec, "prediction_error").expect("prediction errors recorded");
        assert!(h.len() > 100, "{}", h.len());
        assert_eq!(h.max(), 1);
    }
}

/// Bots at 60 Hz inputs on a random walk against the embedded implementation-dialect server,
/// whose loop wakes 0-2 ms late and stalls 40-90 ms every 2-3 s (catching up several ticks at
/// once), for a simulated minute: the bots cannot know which tick an input lands in, yet no
/// prediction is overruled; the walls of the small map refuse moves, and each refusal is
/// counted on its own, as the server counts it.
#[test]
fn implementation_dialect_predicts_the_reference_server_through_jitter_and_catch_up() {
    let cfg = CityServerConfig {
        map_width: 20,
        map_height: 20,
        npc_count: 0,
        ..CityServerConfig::for_dialect(Dialect::Implementation)
    };
    let mut sim = new_sim(
        cfg,
        Link {
            delay: Duration::from_micros(2_500),
            server_stall_every: 150,
            ..Link::default()
        },
    );
    let opts = CityOptions {
        dialect: Dialect::Implementation,
        ..CityOptions::default()
    };
    let bots = 6;
    for i in 0..bots {
        let mut p = params(i);
        p.input_rate_hz = 60.0;
        p.pattern = InputPattern::RandomWalk {
            change_every: ms(500),
        };
        sim.add_bot(opts.clone(), p, Duration::from_micros(u64::from(i) * 3_100));
    }
    sim.run_for(Duration::from_secs(61));
    let mut refused = 0;
    for i in 0..bots as usize {
        let (bot, rec) = (sim.bot(i), sim.rec(i));
        let h = extra(rec, "prediction_error").expect("prediction errors recorded");
        eprintln!(
            "bot {i}: {} DeltaStates, {} compared, max {} milli-tiles, {} corrections, {} timing \
             slips, {} refused",
            rec.snapshots_applied,
            h.len(),
            h.max(),
            bot.corrections(),
            rec.events.get("prediction_timing_slips"),
            rec.events.get("move_refused"),
        );
        assert_eq!(bot.stage(), Stage::Playing);
        assert!(h.len() > 3000, "{}", h.len());
        assert_eq!(bot.corrections(), 0, "bot {i}");
        assert_eq!(rec.events.get("corrections"), 0);
        assert_eq!(h.max(), 1, "bot {i}: every record explained exactly");
        refused += rec.events.get("move_refused");
    }
    let server_refused = sim.server.stats().events.get("moves_refused");
    let stalls = sim.server.stats().events.get("ticks_skipped");
    eprintln!("refused: bots {refused}, server {server_refused}; ticks skipped {stalls}");
    assert!(refused > 0, "the walk reaches the walls");
    // A refusal in the DeltaState still on the wire when the run ends is the only difference.
    assert!(refused <= server_refused && server_refused <= refused + u64::from(bots));
}

fn fingerprint(seed_link: u64) -> Vec<u64> {
    let mut sim = new_sim_seeded(
        small_content(),
        Link {
            delay: ms(25),
            loss_up: 0.05,
            loss_down: 0.05,
            ..Link::default()
        },
        seed_link,
    );
    for i in 0..4 {
        sim.add_bot(CityOptions::default(), params(i), ms(u64::from(i)));
    }
    sim.run_for(Duration::from_secs(3));
    let s = sim.server.stats();
    let mut v = vec![s.bytes_out, s.datagrams_out, s.bytes_in];
    for i in 0..4 {
        let r = sim.rec(i);
        v.extend([
            r.bytes_down,
            r.inputs_sent,
            r.loss_down.received,
            r.rtt_us.len(),
            r.events.get("corrections"),
        ]);
    }
    v
}

#[test]
fn runs_are_deterministic() {
    assert_eq!(fingerprint(9), fingerprint(9));
    assert_ne!(fingerprint(9), fingerprint(10));
}

// ---- through real ENet hosts ------------------------------------------------------------

/// A City bot behind a real ENet client (rusty_enet, the C ENet wire protocol), serviced every
/// millisecond: on the harness's datagram link, the datagrams are ENet's own.
struct EnetBot {
    client: EnetClient,
    bot: CityBot,
    last: Instant,
    out: std::collections::VecDeque<Vec<u8>>,
}

/// The City server behind a real ENet host, serviced every millisecond.
struct EnetServer {
    host: EnetHost,
    server: CityServer,
    peers: HashMap<ConnId, PeerId>,
    last: Instant,
    out: std::collections::VecDeque<Vec<u8>>,
}

fn enet_addrs() -> (SocketAddr, SocketAddr) {
    (
        "10.0.0.1:7777".parse().unwrap(),
        "10.0.0.2:5000".parse().unwrap(),
    )
}

impl Bot for EnetBot {
    fn start(&mut self, now: Instant, _: &mut Recorder) {
        self.last = now;
    }
    fn handle_datagram(&mut self, now: Instant, data: &[u8], _: &mut Recorder) {
        self.client.handle_datagram(now, enet_addrs().0, data);
    }
    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        self.last = now;
        self.client.service(now);
        while let Some(ev) = self.client.poll_event() {
            match ev {
                EnetEvent::Connected { .. } => self.bot.start(now, rec),
                EnetEvent::Received { packet, .. } => self.bot.handle_datagram(now, &packet, rec),
                EnetEvent::Disconnected { .. } => self.bot.handle_transport_closed(now, rec),
            }
        }
        if self.bot.poll_timeout().is_some_and(|t| t <= now) {
            self.bot.handle_timeout(now, rec);
        }
        let mut buf = vec![0u8; MAX_DATAGRAM];
        while let Some(t) = self.bot.poll_transmit(&mut buf) {
            self.client.send_transmit(&t, &buf).unwrap();
        }
        self.client.flush(now);
        let mut dgram = vec![0u8; MAX_ENET_DATAGRAM];
        while let Some((_, len)) = self.client.poll_transmit(&mut dgram) {
            self.out.push_back(dgram[..len].to_vec());
        }
    }
    fn stop(&mut self, _: Instant, _: &mut Recorder) {}
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let d = self.out.pop_front()?;
        buf[..d.len()].copy_from_slice(&d);
        Some(Transmit::datagram(d.len()))
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.last + ms(1))
    }
    fn phase(&self) -> BotPhase {
        self.bot.phase()
    }
}

impl Server for EnetServer {
    fn handle_datagram(&mut self, now: Instant, _: ConnId, data: &[u8]) {
        self.host.handle_datagram(now, enet_addrs().1, data);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.last = now;
        self.host.service(now);
        while let Some(ev) = self.host.poll_event() {
            match ev {
                EnetEvent::Connected { peer, .. } => {
                    let conn = ConnId(peer.index() as u64);
                    self.peers.insert(conn, peer);
                    self.server.handle_connect(now, conn);
                }
                EnetEvent::Received { peer, packet, .. } => {
                    let conn = ConnId(peer.index() as u64);
                    self.server.handle_datagram(now, conn, &packet);
                }
                EnetEvent::Disconnected { peer, .. } => {
                    self.server
                        .handle_disconnect(now, ConnId(peer.index() as u64));
                }
            }
        }
        if self.server.poll_timeout().is_some_and(|t| t <= now) {
            self.server.handle_timeout(now);
        }
        let mut buf = vec![0u8; MAX_DATAGRAM];
        while let Some((to, t)) = self.server.poll_transmit(&mut buf) {
            self.host.send_transmit(self.peers[&to], &t, &buf).unwrap();
        }
        self.host.flush(now);
        let mut dgram = vec![0u8; MAX_ENET_DATAGRAM];
        while let Some((_, len)) = self.host.poll_transmit(&mut dgram) {
            self.out.push_back(dgram[..len].to_vec());
        }
    }
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
        let d = self.out.pop_front()?;
        buf[..d.len()].copy_from_slice(&d);
        Some((ConnId(0), Transmit::datagram(d.len())))
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.last + ms(1))
    }
    fn stats(&self) -> &ServerStats {
        self.server.stats()
    }
}

/// A bot and the server through two real `EnetHost`s (rusty_enet, the C ENet wire protocol)
/// on the harness's datagram link with one-way delay and datagram loss (one generator for
/// both ways, drawn in sending order), both hosts serviced every millisecond.
fn enet_run(
    one_way: Duration,
    loss: f64,
    secs: u64,
) -> (CityBot, Recorder, CityServer, Option<Duration>) {
    use tickswarm::games::city::CHANNELS;

    let base = Instant::now();
    let (server_addr, _) = enet_addrs();
    let server = EnetServer {
        host: EnetHost::new(base, &EnetConfig::with_peers(8)).unwrap(),
        server: CityServer::new(small_content(), base),
        peers: HashMap::new(),
        last: base,
        out: Default::default(),
    };
    let mut p = params(0);
    p.ping_interval = ms(200);
    p.pattern = square_walk();
    let bot = EnetBot {
        client: EnetClient::connect(base, server_addr, CHANNELS).unwrap(),
        bot: CityBot::new(p, CityOptions::default()),
        last: base,
        out: Default::default(),
    };
    let mut sim = tickswarm::api::sim::Sim::new(base, server, vec![bot]);
    sim.up.delay = one_way;
    sim.down.delay = one_way;
    let rng = Rc::new(RefCell::new(ChaCha8Rng::seed_from_u64(5)));
    let r = Rc::clone(&rng);
    sim.up.drop = Some(rule(move |_| r.borrow_mut().random_bool(loss)));
    sim.down.drop = Some(rule(move |_| rng.borrow_mut().random_bool(loss)));
    sim.start_all();
    sim.run_until(Duration::from_secs(secs));
    let (bot, rec) = (sim.bots.remove(0), sim.recs.remove(0));
    let enet_rtt = bot.client.rtt();
    (bot.bot, rec, sim.server.server, enet_rtt)
}

#[test]
fn bot_and_server_over_real_enet_hosts() {
    let (bot, rec, server, enet_rtt) = enet_run(ms(20), 0.0, 3);
    assert_eq!(bot.phase(), BotPhase::Connected);
    assert_eq!(bot.stage(), Stage::Playing);
    let c = bot.content();
    assert!(c.complete && c.verified == c.requested && c.failed == 0);
    assert_eq!(server.players(), 1);
    assert_eq!(rec.decode_errors.total(), 0);
    assert!(rec.snapshots_applied > 100);
    // No loss: every DeltaState arrived, every input acknowledged, prediction exact.
    assert_eq!(rec.loss_down.expected, rec.loss_down.received);
    assert_eq!(rec.loss_up.expected, rec.loss_up.received);
    assert_eq!(bot.corrections(), 0);
    let h = &rec.rtt_us;
    let enet_ms = enet_rtt.expect("ENet measured an RTT").as_millis();
    eprintln!(
        "over ENet, 20 ms one way: protocol RTT p50 {} µs ({} samples), ENet RTT {enet_ms} ms",
        h.value_at_quantile(0.5),
        h.len()
    );
    // 40 ms plus up to a millisecond of step granularity each way.
    assert!(h.len() >= 8 && h.min() >= 40_000 && h.max() <= 43_000);
    assert!((39..=45).contains(&enet_ms), "ENet RTT {enet_ms} ms");
}

#[test]
fn enet_datagram_loss_shows_as_delta_loss_and_corrections() {
    let (bot, rec, _server, _) = enet_run(ms(10), 0.05, 4);
    assert_eq!(bot.stage(), Stage::Playing);
    // ENet repairs the reliable channel (content, acks); the unreliable one loses packets.
    assert_eq!(bot.content().failed, 0);
    let lost = rec.loss_down.expected - rec.loss_down.received;
    eprintln!(
        "over ENet with 5% datagram loss: {lost}/{} DeltaStates lost, {} corrections",
        rec.loss_down.expected,
        bot.corrections()
    );
    assert!(lost > 0);
    assert!(bot.corrections() > 0);
}

/// Every session the server drops (refused, timed out, ended by the transport) is handed to
/// the transport through `poll_close`; a refusal's Disconnect is queued before it.
#[test]
fn every_dropped_session_is_reported_through_poll_close() {
    let t0 = Instant::now();
    let cfg = CityServerConfig {
        max_players: 1,
        client_timeout: Duration::from_secs(1),
        ..small_content()
    };
    let mut server = CityServer::new(cfg, t0);
    let mut buf = [0u8; MAX_DATAGRAM];
    let mut hello = [0u8; 128];
    let n = codec::encode(
        &mut hello,
        0,
        &Message::ClientHello {
            protocol_version: codec::PROTOCOL_VERSION,
            client_version: "test",
            player_name: "p",
        },
    )
    .unwrap();
    let hello = &hello[..n];
    let mut drain = |server: &mut CityServer| {
        let mut to = Vec::new();
        while let Some((c, _)) = server.poll_transmit(&mut buf) {
            to.push(c);
        }
        to
    };

    server.handle_connect(t0, ConnId(1));
    server.handle_datagram(t0, ConnId(1), hello);
    assert!(drain(&mut server).contains(&ConnId(1)), "server hello");
    assert_eq!(server.poll_close(), None, "an admitted player stays");

    server.handle_connect(t0, ConnId(2));
    server.handle_datagram(t0, ConnId(2), hello);
    assert_eq!(
        drain(&mut server),
        vec![ConnId(2)],
        "the refusal goes out first"
    );
    assert_eq!(server.poll_close(), Some(ConnId(2)), "refused");

    server.handle_disconnect(t0, ConnId(1));
    server.handle_disconnect(t0, ConnId(2));
    assert_eq!(
        server.poll_close(),
        Some(ConnId(1)),
        "ended by the transport"
    );
    assert_eq!(server.poll_close(), Some(ConnId(2)));
    assert_eq!(server.poll_close(), None);

    server.handle_connect(t0, ConnId(3));
    server.handle_timeout(t0 + Duration::from_secs(2));
    drain(&mut server);
    assert_eq!(server.stats().timed_out, 1);
    assert_eq!(server.poll_close(), Some(ConnId(3)), "timed out");
    assert_eq!(server.poll_close(), None);
}

// ---- the variant's grid movement, against an in-test variant server ----------------------

/// The public server's variant reduced to what prediction sees, written out here the way its
/// server loop runs and independently of the crate's mover: a frame loop that reads the
/// network, then runs the 60 Hz fixed-step ticks due (a stalled frame catches up, at most 15
/// ticks); each tick applies the latest input received (held until the next) and moves the
/// player in `f32` by distance toward the target tile's centre at 1/0.15 tiles per second,
/// snapping within one step; a standing player with a nonzero input starts a move from
/// `floor(position)` onto a passable tile only (the map's outer ring is wall). Each tick
/// sends one implementation-dialect DeltaState (46-byte record) and nothing else: no InputAck,
/// no `last_acked_input`. The link delays both ways by `delay`; every `drop_every`-th
/// DeltaState is lost. Frames run every 1 ms, plus `stall_every`-th frame a stall of 40-400 ms
/// (beyond 250 ms the variant drops the time it cannot catch up).
struct VariantServer {
    now: Instant,
    drop_every: u32,
    stall_every: u32,
    rng: ChaCha8Rng,
    tick: u32,
    /// Simulated time not yet ticked (the variant's accumulator).
    next_tick: Instant,
    next_frame: Instant,
    frames: u32,
    entity: Option<u32>,
    map: i32,
    pos: (f32, f32),
    vel: (f32, f32),
    grid: (i32, i32),
    target: (i32, i32),
    moving: bool,
    input: (i32, i32),
    /// Refusals, counted once while the same one is held over ticks.
    refused: u64,
    refusing: Option<((i32, i32), (i32, i32))>,
    /// What arrived, read at the next frame.
    up: std::collections::VecDeque<Vec<u8>>,
    /// What the frame sent, handed to the link.
    down: std::collections::VecDeque<Vec<u8>>,
    buf: Vec<u8>,
    stats: ServerStats,
}

const VARIANT_TICK: Duration = Duration::from_nanos(16_666_667);

/// The variant server and one implementation-dialect bot on the crate's harness (a datagram
/// link: every packet `delay` one way, in order), the bot started.
type VariantSim = tickswarm::api::sim::Sim<CityBot, VariantServer>;

fn variant_sim(
    delay: Duration,
    drop_every: u32,
    pattern: InputPattern,
    input_hz: f64,
) -> VariantSim {
    let base = Instant::now();
    let mut p = params(0);
    p.pattern = pattern;
    p.input_rate_hz = input_hz;
    let opts = CityOptions {
        dialect: Dialect::Implementation,
        ..CityOptions::default()
    };
    let spawn = (12, 12);
    let server = VariantServer {
        now: base,
        drop_every,
        stall_every: 0,
        rng: ChaCha8Rng::seed_from_u64(7),
        tick: 100,
        // Ticks out of phase with the bot's inputs.
        next_tick: base + Duration::from_micros(7_300),
        next_frame: base,
        frames: 0,
        entity: None,
        map: 24,
        pos: (spawn.0 as f32 + 0.5, spawn.1 as f32 + 0.5),
        vel: (0.0, 0.0),
        grid: spawn,
        target: spawn,
        moving: false,
        input: (0, 0),
        refused: 0,
        refusing: None,
        up: Default::default(),
        down: Default::default(),
        buf: vec![0u8; MAX_DATAGRAM],
        stats: ServerStats::default(),
    };
    let mut sim = VariantSim::new(base, server, vec![CityBot::new(p, opts)]);
    sim.up.delay = delay;
    sim.down.delay = delay;
    sim.start(0);
    sim
}

impl VariantServer {
    fn passable(&self, t: (i32, i32)) -> bool {
        t.0 >= 1 && t.1 >= 1 && t.0 < self.map - 1 && t.1 < self.map - 1
    }

    fn send_down(&mut self, msg: &Message<'_>) {
        let n = codec::encode_in(&mut self.buf, 0, msg, Dialect::Implementation).unwrap();
        self.down.push_back(self.buf[..n].to_vec());
    }

    fn server_receive(&mut self, bytes: &[u8]) {
        // The variant reads the first message of a packet only.
        let Some(Ok(raw)) = codec::messages(bytes).next() else {
            return;
        };
        match raw.decode(Dialect::Implementation) {
            Ok(Some(Message::ClientHello { .. })) => {
                let id = 7;
                self.entity = Some(id);
                self.send_down(&Message::ServerHello {
                    protocol_version: 1,
                    server_id: "city",
                    server_name: "City Server",
                    session_id: id,
                    player_entity: id,
                });
                let pos = Vec2f::new(self.pos.0, self.pos.1);
                self.send_down(&Message::EntitySpawn(codec::EntityData {
                    net_entity_id: id,
                    components: codec::Components {
                        position: Some(pos),
                        name: Some("bot-0"),
                        is_player: Some(true),
                        ..Default::default()
                    },
                }));
            }
            Ok(Some(Message::PlayerInput(i))) => {
                self.input = (i32::from(i.move_x), i32::from(i.move_y))
            }
            _ => {}
        }
    }

    fn server_tick(&mut self) {
        self.tick += 1;
        let Some(id) = self.entity else { return };
        let speed = 1.0f32 / 0.15f32;
        let dt = 1.0f32 / 60.0f32;
        if self.moving {
            let (cx, cy) = (self.target.0 as f32 + 0.5, self.target.1 as f32 + 0.5);
            let (tx, ty) = (cx - self.pos.0, cy - self.pos.1);
            let dist = (tx * tx + ty * ty).sqrt();
            if dist <= speed * dt || dist < 0.001 {
                self.pos = (cx, cy);
                self.vel = (0.0, 0.0);
                self.grid = self.target;
                self.moving = false;
            } else {
                self.vel = ((tx / dist) * speed, (ty / dist) * speed);
                self.pos.0 += self.vel.0 * dt;
                self.pos.1 += self.vel.1 * dt;
            }
        }
        let mut refusal = None;
        if !self.moving && self.input != (0, 0) {
            self.grid = (self.pos.0.floor() as i32, self.pos.1.floor() as i32);
            let t = (self.grid.0 + self.input.0, self.grid.1 + self.input.1);
            if self.passable(t) {
                self.target = t;
                self.moving = true;
                let (cx, cy) = (t.0 as f32 + 0.5, t.1 as f32 + 0.5);
                let (tx, ty) = (cx - self.pos.0, cy - self.pos.1);
                let dist = (tx * tx + ty * ty).sqrt();
                if dist > 0.001 {
                    self.vel = ((tx / dist) * speed, (ty / dist) * speed);
                }
            } else {
                refusal = Some((self.grid, self.input));
            }
        }
        if refusal.is_some() && refusal != self.refusing {
            self.refused += 1;
        }
        self.refusing = refusal;
        let v2 = |p: (i32, i32)| codec::Vec2i { x: p.0, y: p.1 };
        let update = codec::EntityUpdate {
            net_entity_id: id,
            position: Vec2f::new(self.pos.0, self.pos.1),
            velocity: Vec2f::new(self.vel.0, self.vel.1),
            has_player: Some(true),
            grid: Some(codec::GridState {
                is_moving: self.moving,
                grid_pos: v2(self.grid),
                move_target: v2(self.target),
                input_direction: v2(self.input),
            }),
        };
        let (n, _) = codec::encode_delta_state(
            &mut self.buf,
            0,
            self.tick,
            0,
            &[update],
            Dialect::Implementation,
        )
        .unwrap();
        if self.drop_every == 0 || self.tick % self.drop_every != 0 {
            self.down.push_back(self.buf[..n].to_vec());
        }
    }

    /// A server-side move the bot did not ask for: whole tiles, the move under way kept.
    fn teleport(&mut self, dx: i32, dy: i32) {
        self.grid = (self.grid.0 + dx, self.grid.1 + dy);
        self.target = (self.target.0 + dx, self.target.1 + dy);
        self.pos = (self.pos.0 + dx as f32, self.pos.1 + dy as f32);
    }

    /// One frame of the variant's loop: the network, then the ticks due (at most 15).
    fn server_frame(&mut self) {
        while let Some(b) = self.up.pop_front() {
            self.server_receive(&b);
        }
        let mut ran = 0;
        while self.next_tick <= self.now {
            if ran < 15 {
                self.server_tick();
                ran += 1;
            }
            self.next_tick += VARIANT_TICK;
        }
        self.frames += 1;
        let mut gap = ms(1);
        if self.stall_every > 0 && self.frames % self.stall_every == 0 {
            gap += ms(self.rng.random_range(40..400));
        }
        self.next_frame = self.now + gap;
    }
}

/// The harness delivers each packet as it arrives; the variant reads them at its next frame.
impl Server for VariantServer {
    fn handle_datagram(&mut self, now: Instant, _: ConnId, data: &[u8]) {
        self.now = now;
        self.up.push_back(data.to_vec());
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        self.server_frame();
    }
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(ConnId, Transmit)> {
        let b = self.down.pop_front()?;
        buf[..b.len()].copy_from_slice(&b);
        Some((ConnId(0), Transmit::datagram(b.len())))
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_frame)
    }
    fn stats(&self) -> &ServerStats {
        &self.stats
    }
}

fn random_walk() -> InputPattern {
    InputPattern::RandomWalk {
        change_every: ms(500),
    }
}

#[test]
fn implementation_dialect_predicts_the_variant_grid_exactly() {
    for (delay, drop_every, input_hz) in [
        (0u64, 0u32, 60.0),
        (40, 0, 60.0),
        (120, 0, 60.0),
        (40, 7, 60.0),
        (5, 0, 20.0),
        (5, 0, 144.0),
    ] {
        let mut sim = variant_sim(ms(delay), drop_every, random_walk(), input_hz);
        sim.run_until(Duration::from_secs(20));
        assert_eq!(sim.bots[0].stage(), Stage::Playing);
        let h = extra(&sim.recs[0], "prediction_error").expect("prediction errors recorded");
        let (n, max) = (h.len(), h.max());
        let ev = |k: &str| sim.recs[0].events.get(k);
        eprintln!(
            "delay {delay} ms, every {drop_every}th DeltaState lost, inputs at {input_hz} Hz: \
             {n} comparisons, max {max} milli-tiles, {} corrections, {} timing slips, {} \
             refused (server {})",
            sim.bots[0].corrections(),
            ev("prediction_timing_slips"),
            ev("move_refused"),
            sim.server.refused
        );
        assert!(n > 1000, "{n} comparisons");
        // The floor (1 milli-tile): every DeltaState matched a prediction, or the timing
        // or the refusal it shows explained the difference exactly.
        assert_eq!(max, 1, "delay {delay}");
        assert_eq!(sim.bots[0].corrections(), 0);
        assert_eq!(sim.recs[0].decode_errors.total(), 0);
        // The walk reaches the walls of the 24-tile map: refusals are counted on their own,
        // one per refusal, as the server counts them (a lost DeltaState may hide one).
        assert!(sim.server.refused > 0);
        if drop_every == 0 {
            assert!(
                ev("move_refused") <= sim.server.refused
                    && ev("move_refused") + 1 >= sim.server.refused,
                "bot {} server {}",
                ev("move_refused"),
                sim.server.refused
            );
        } else {
            assert!(ev("move_refused") > 0);
        }
    }
}

#[test]
fn implementation_dialect_prediction_survives_server_stalls() {
    let mut sim = variant_sim(ms(3), 0, random_walk(), 60.0);
    sim.server.stall_every = 150;
    sim.run_until(Duration::from_secs(60));
    let h = extra(&sim.recs[0], "prediction_error").expect("prediction errors recorded");
    eprintln!(
        "stalls: {} comparisons, max {} milli-tiles, {} corrections, {} timing slips, {} refused",
        h.len(),
        h.max(),
        sim.bots[0].corrections(),
        sim.recs[0].events.get("prediction_timing_slips"),
        sim.recs[0].events.get("move_refused"),
    );
    assert!(h.len() > 3000);
    assert!(
        sim.recs[0].events.get("prediction_timing_slips") > 0,
        "stalls shift the timing"
    );
    assert_eq!(sim.bots[0].corrections(), 0);
}

#[test]
fn implementation_dialect_corrects_a_server_teleport_once() {
    let mut sim = variant_sim(ms(40), 0, square_walk(), 60.0);
    sim.server.map = 200;
    sim.run_until(ms(2_020));
    let before = extra(&sim.recs[0], "prediction_error").map_or(0, |h| h.len());
    assert!(before > 60);
    assert_eq!(sim.bots[0].corrections(), 0);
    sim.server.teleport(5, -3);
    sim.run_until(Duration::from_secs(6));
    let h = extra(&sim.recs[0], "prediction_error").expect("prediction errors recorded");
    eprintln!(
        "teleport (5, -3): {} comparisons, max {} milli-tiles, above the floor {}, {} corrections",
        h.len(),
        h.max(),
        h.count_between(2, h.max()),
        sim.bots[0].corrections()
    );
    assert_eq!(sim.bots[0].corrections(), 1);
    assert_eq!(sim.recs[0].events.get("corrections"), 1);
    // The one comparison that saw the teleport, then back at the floor.
    assert!(h.max() > 4000, "{}", h.max());
    assert_eq!(h.count_between(2, h.max()), 1);
    assert!(h.len() > before + 200);
}

// ---- the sink (`serve city --sink`) -------------------------------------------------------

/// The sink admits players as the server does (ServerHello, the manifest, a one-chunk
/// download, FullState) and answers their pings, but counts and drops their inputs and runs no
/// world: not one DeltaState, InputAck, EntitySpawn or ChatBroadcast goes down, and every
/// PlayerInput that arrived is counted once.
#[test]
fn the_sink_admits_and_answers_pings_but_sends_no_world() {
    let mut sim = new_sim(
        CityServerConfig::default().into_sink(),
        Link {
            delay: ms(5),
            ..Link::default()
        },
    );
    assert_eq!(sim.server.assets().len(), 1);
    for i in 0..3 {
        sim.add_bot(CityOptions::default(), params(i), ms(u64::from(i) * 10));
    }
    sim.run_for(Duration::from_secs(3));
    assert!((0..3).all(|i| sim.bot(i).stage() == Stage::Playing));
    let mut down: HashMap<&'static str, u64> = HashMap::new();
    let mut inputs_up = 0u64;
    for &idx in &sim.deliveries {
        let r = &sim.log[idx];
        for (_, m) in codec::decode_all(&r.bytes, Dialect::Spec).unwrap() {
            match r.dir {
                tickswarm::protocol::sim::Dir::Down => {
                    *down.entry(m.msg_type().name()).or_default() += 1
                }
                tickswarm::protocol::sim::Dir::Up => {
                    inputs_up += u64::from(matches!(m, Message::PlayerInput(_)));
                }
            }
        }
    }
    for silent in ["delta_state", "input_ack", "entity_spawn", "chat_broadcast"] {
        assert_eq!(down.get(silent), None, "{silent}: {down:?}");
    }
    assert_eq!(down.get("full_state"), Some(&3));
    assert!(down.get("pong").is_some_and(|&n| n >= 3), "{down:?}");
    assert!(inputs_up > 3 * 60, "bots played: {inputs_up} inputs");
    assert_eq!(sim.server.stats().events.get("sink_inputs"), inputs_up);
}
