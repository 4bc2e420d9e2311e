//! The cafe bot and reference server, driven together through a simulated link on a
//! simulated clock (see `common/sim.rs`). Every test states one rule of the protocol (from
//! docs/protocols/cafe.md) and checks the bots' metrics against ground truth counted in the
//! link, exactly.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::sim::*;
use tickswarm::games::cafe::codec::{self, Message};
use tickswarm::games::cafe::{CafeOptions, CafeServerConfig, Dialect, LossSource};
use tickswarm::metrics::Recorder;
use tickswarm::protocol::{Bot, BotParams, BotPhase, InputPattern, Keys, Server, MAX_DATAGRAM};

/// The server's tick interval at 60 Hz: `1 s / 60` in whole nanoseconds. Tick k runs at
/// `k * TICK` after the origin.
const TICK: Duration = Duration::from_nanos(16_666_666);

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn tick_at(k: u32) -> Duration {
    TICK * k
}

/// Bot i: library defaults (60 Hz input, 1 s pings, 500 ms hello retry, 5 s handshake
/// timeout), its own seed, and a phase offset that spreads bots over the tick.
fn params(i: usize) -> BotParams {
    let mut p = BotParams::with_index(i as u32, 0x5EED_0000 + i as u64);
    p.phase_offset = Duration::from_micros(137 + 1000 * (i as u64 % 16));
    p
}

fn fleet(n: usize, opts: CafeOptions) -> Vec<(BotParams, CafeOptions)> {
    (0..n).map(|i| (params(i), opts.clone())).collect()
}

fn sim(n: usize, cfg: CafeServerConfig, delay: Duration) -> Sim {
    let mut s = new_sim(cfg, fleet(n, CafeOptions::default()));
    s.up.delay = delay;
    s.down.delay = delay;
    s
}

/// Histograms keep 3 significant figures: a value is within 0.1 % of what was recorded.
fn assert_close(got: u64, want: u64, what: &str) {
    let tol = want / 1000 + 1;
    assert!(
        got.abs_diff(want) <= tol,
        "{what}: {got} not within 0.1 % of {want}"
    );
}

/// `(count, min, max)` of a protocol-specific histogram, if recorded.
fn extra(rec: &Recorder, name: &str) -> Option<(u64, u64, u64)> {
    rec.extra
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, h)| (h.len(), h.min(), h.max()))
        .filter(|(n, _, _)| *n > 0)
}

/// Ping traffic of one bot, classified from the log in sending order: a token the bot sent
/// before the server ever used it is the bot's own; any other server Ping is a heartbeat.
#[derive(Debug, Default)]
struct Pings {
    own: HashSet<u32>,
    /// Server Pings per heartbeat token (1 unless the server answered an echo).
    heartbeats: HashMap<u32, u64>,
    heartbeats_delivered: u64,
    /// The bot's Pings carrying a heartbeat token (its echoes).
    echoes_sent: u64,
    echoes_delivered: u64,
    /// Distinct answers to the bot's own pings that arrived (first copy, first answer).
    pongs_delivered: u64,
    /// Further answers to already answered own pings (the server answered a duplicate).
    extra_pongs_delivered: u64,
}

fn pings(sim: &Sim, i: usize) -> Pings {
    let mut p = Pings::default();
    let mut answered = HashSet::new();
    for r in &sim.log {
        if r.bot != i || r.msg_type() != PING {
            continue;
        }
        let tok = r.token();
        let arrived = !r.delivered.is_empty();
        match r.dir {
            Dir::Up if p.heartbeats.contains_key(&tok) => {
                p.echoes_sent += 1;
                p.echoes_delivered += u64::from(arrived);
            }
            Dir::Up => {
                p.own.insert(tok);
            }
            Dir::Down if p.own.contains(&tok) => {
                if arrived && answered.insert(tok) {
                    p.pongs_delivered += 1;
                } else if arrived {
                    p.extra_pongs_delivered += 1;
                }
            }
            Dir::Down => {
                *p.heartbeats.entry(tok).or_default() += 1;
                p.heartbeats_delivered += u64::from(arrived);
            }
        }
    }
    p
}

/// Snapshots that reached bot i, counting each datagram once.
fn snapshots_delivered(sim: &Sim, i: usize) -> u64 {
    sim.down_to(i)
        .filter(|r| r.msg_type() == SNAPSHOT && !r.delivered.is_empty())
        .count() as u64
}

/// The bot's entity table equals the server's players of its room, record for record.
fn assert_table_matches_room(sim: &Sim, i: usize, what: &str) {
    let bot = &sim.bots[i];
    let room = sim.server.room_of(bot.player_id()).expect("the bot's room");
    let members: Vec<_> = sim.server.room_players(room).copied().collect();
    assert!(!members.is_empty());
    assert_eq!(
        bot.entity_count(),
        members.len(),
        "{what}: bot {i} holds {} entities, its room has {}",
        bot.entity_count(),
        members.len()
    );
    for m in &members {
        assert_eq!(
            bot.entity(m.entity_id),
            Some(m),
            "{what}: bot {i}, entity {}",
            m.entity_id
        );
    }
}

fn assert_no_errors(rec: &Recorder, what: &str) {
    assert_eq!(
        rec.decode_errors.total(),
        0,
        "{what}: {:?}",
        rec.decode_errors
    );
    assert_eq!(rec.connect_failures.total(), 0, "{what}");
}

/// End every bot's session now. Downstream loss by header seq is committed in chunks, each
/// checked against the snapshot ticks (a server's counter may be shared by its clients); the
/// end of a session commits what is still held, so the counts then cover every datagram up
/// to the last one received.
fn end_sessions(sim: &mut Sim) {
    for i in 0..sim.bots.len() {
        assert_eq!(sim.bots[i].phase(), BotPhase::Connected, "bot {i}");
        sim.stop(i);
    }
}

// ---------------------------------------------------------------------------------------
// (a) A clean link.
// ---------------------------------------------------------------------------------------

/// Without impairment: every bot connects once (handshake = one round trip), receives
/// everything the server sent it from its Welcome on (expected == received), sends exactly
/// one Input per slot of its 60 Hz grid (which starts at the Welcome plus its phase offset),
/// each on time and carrying its player id, and applies every snapshot it receives.
#[test]
fn clean_link_is_accounted_exactly() {
    let n = 8;
    let d = ms(5);
    let end = ms(5008);
    let mut sim = sim(n, CafeServerConfig::default(), d);
    sim.start_all();
    sim.run_until(end);
    end_sessions(&mut sim);

    let st = sim.server.stats();
    assert_eq!((st.accepted, st.refused, st.timed_out), (n as u64, 0, 0));
    assert_eq!(st.clients, n);
    assert_eq!(st.dropped.total(), 0, "{:?}", st.dropped);

    for i in 0..n {
        let rec = &sim.recs[i];
        let bot = &sim.bots[i];
        let what = format!("bot {i}");
        assert_eq!(bot.tick_rate(), 60);
        assert_no_errors(rec, &what);

        // Handshake: Hello at 0, Welcome back after one round trip.
        let welcome = sim.down_to(i).find(|r| r.msg_type() == WELCOME).unwrap();
        assert_eq!(welcome.first_arrival(), Some(2 * d));
        assert_eq!(rec.connects_ok, 1);
        assert_eq!(rec.handshake_us.len(), 1);
        assert_close(rec.handshake_us.max(), 10_000, "handshake");
        assert_close(rec.handshake_us.min(), 10_000, "handshake");

        // Inputs: slot k is due at origin + k / 60 s; all slots up to `end` were sent.
        let origin = 2 * d + params(i).phase_offset;
        let span = (end - origin).as_nanos();
        let (slots, rem) = (span * 60 / 1_000_000_000, span * 60 % 1_000_000_000);
        assert!(
            rem > 60_000 && rem < 1_000_000_000 - 60_000,
            "end too close to a grid slot"
        );
        let expected_inputs = slots as u64 + 1;
        let inputs: Vec<&Record> = sim.up_from(i).filter(|r| r.msg_type() == INPUT).collect();
        assert_eq!(rec.inputs_sent, expected_inputs, "{what}");
        assert_eq!(inputs.len() as u64, expected_inputs, "{what}");
        assert_eq!(rec.inputs_skipped, 0);
        for (k, r) in inputs.iter().enumerate() {
            // Sent on its slot (within the float rounding of the period, well under 1 µs).
            let due = origin.as_nanos() + (k as u128 * 1_000_000_000) / 60;
            assert!(
                r.sent_at.as_nanos().abs_diff(due) < 1_000,
                "{what} input {k}"
            );
            assert_eq!(le_u16(&r.bytes, 8), bot.player_id(), "player id");
            assert_eq!(
                le_u32(&r.bytes, 12),
                r.sent_at.as_millis() as u32,
                "ms clock"
            );
        }
        assert_eq!(rec.send_lateness_us.len(), expected_inputs);
        assert_eq!(rec.send_lateness_us.max(), 1, "no input was late");

        // Downstream loss: nothing missing, nothing extra.
        assert_eq!(sim.unseen_down(i), 0);
        assert_eq!(rec.loss_down.expected, rec.loss_down.received);
        assert_eq!(rec.loss_down.received, sim.received_down(i));
        for e in [
            "duplicate_datagram",
            "reordered_datagram",
            "too_old_datagram",
            "seq_reset",
        ] {
            assert_eq!(rec.events.get(e), 0, "{what}: {e}");
        }

        // Snapshots: every one applied, one per tick.
        let snaps = snapshots_delivered(&sim, i);
        assert!(snaps >= 299, "{snaps}");
        assert_eq!(rec.snapshots_applied, snaps);
        assert_close(rec.snapshot_interarrival_us.min(), 16_666, "interarrival");
        assert_close(rec.snapshot_interarrival_us.max(), 16_666, "interarrival");

        // RTT: one sample per answered ping, each a round trip.
        let p = pings(&sim, i);
        assert_eq!(p.own.len(), 5, "pings at 0..4 s after connect");
        assert_eq!(rec.rtt_us.len(), p.pongs_delivered);
        assert_close(rec.rtt_us.min(), 10_000, "rtt");
        assert_close(rec.rtt_us.max(), 10_000, "rtt");
    }

    // One worker's view: the merge of all bots.
    let all = sim.merged();
    assert_eq!(all.connects_ok, n as u64);
    assert_eq!(all.loss_down.expected, all.loss_down.received);
    assert_eq!(
        all.inputs_sent,
        sim.recs.iter().map(|r| r.inputs_sent).sum::<u64>()
    );
}

// ---------------------------------------------------------------------------------------
// (b) Loss.
// ---------------------------------------------------------------------------------------

/// Dropping every 7th server→bot datagram: each bot's `expected - received` equals the
/// number of datagrams the link dropped between its Welcome and the last datagram it got
/// (a drop after that cannot be noticed yet).
#[test]
fn dropped_downstream_datagrams_are_counted_exactly() {
    let n = 6;
    let k = 7;
    let mut sim = sim(n, CafeServerConfig::default(), ms(3));
    sim.down.drop = Some(every_kth(k));
    sim.start_all();
    sim.run_until(ms(4000));
    end_sessions(&mut sim);

    let mut counted = 0;
    for i in 0..n {
        let rec = &sim.recs[i];
        let dropped = sim.dropped_down_in_window(i);
        assert!(dropped > 0);
        assert_eq!(sim.unseen_down(i), dropped, "nothing else missing");
        assert_eq!(
            rec.loss_down.expected - rec.loss_down.received,
            dropped,
            "bot {i}"
        );
        assert_eq!(rec.loss_down.received, sim.received_down(i), "bot {i}");
        counted += dropped;
    }
    let down = sim.log.iter().filter(|r| r.dir == Dir::Down).count() as u64;
    let dropped_all = sim.log.iter().filter(|r| r.dropped).count() as u64;
    assert_eq!(dropped_all, down / k);
    // Only datagrams sent after the last one a bot received escape the count.
    assert!(dropped_all - counted <= n as u64);
    let all = sim.merged();
    assert_eq!(all.loss_down.expected - all.loss_down.received, counted);
}

// ---------------------------------------------------------------------------------------
// (c) Duplication.
// ---------------------------------------------------------------------------------------

/// Duplicated server→bot datagrams are not loss and are not processed twice: each extra copy
/// is counted as `duplicate_datagram`, snapshots are applied once, pongs give one RTT
/// sample, heartbeats are echoed once.
#[test]
fn downstream_duplicates_are_counted_not_applied() {
    let n = 4;
    let cfg = CafeServerConfig {
        heartbeat_interval: Some(ms(700)),
        ..CafeServerConfig::default()
    };
    let mut sim = sim(n, cfg, ms(3));
    sim.down.duplicate = Some((every_kth(5), ms(1)));
    sim.start_all();
    sim.run_until(ms(3000));
    end_sessions(&mut sim);

    for i in 0..n {
        let rec = &sim.recs[i];
        assert_no_errors(rec, "dup");
        assert_eq!(sim.unseen_down(i), 0);
        assert_eq!(rec.loss_down.expected, rec.loss_down.received, "bot {i}");
        assert_eq!(rec.loss_down.received, sim.received_down(i));
        let dups = sim.duplicate_deliveries(i);
        assert!(dups > 0);
        assert_eq!(rec.events.get("duplicate_datagram"), dups, "bot {i}");
        assert_eq!(rec.snapshots_applied, snapshots_delivered(&sim, i));
        let p = pings(&sim, i);
        assert_eq!(rec.rtt_us.len(), p.pongs_delivered);
        assert_eq!(rec.events.get("heartbeat_echoed"), p.heartbeats_delivered);
        assert_eq!(p.echoes_sent, p.heartbeats_delivered);
    }
}

/// Duplicated bot→server datagrams: a duplicated Hello is answered twice (idempotent
/// Welcome, the second counted as `duplicate_welcome`); a duplicated Ping is answered twice,
/// and the bot takes the first answer as its RTT sample and knows the second for its own
/// token (`pong_unmatched`): it never echoes a token it issued (docs/protocols/cafe.md).
#[test]
fn upstream_duplicates_are_answered_but_measured_once() {
    let n = 3;
    let cfg = CafeServerConfig {
        heartbeat_interval: Some(ms(700)),
        ..CafeServerConfig::default()
    };
    let mut sim = sim(n, cfg, ms(3));
    sim.up.duplicate = Some((always(), ms(1)));
    sim.start_all();
    sim.run_until(ms(3000));

    assert_eq!(sim.server.stats().accepted, n as u64);
    assert_eq!(sim.server.stats().events.get("hello_repeated"), n as u64);
    for i in 0..n {
        let rec = &sim.recs[i];
        assert_no_errors(rec, "dup up");
        assert_eq!(sim.bots[i].phase(), BotPhase::Connected);
        assert_eq!(rec.events.get("duplicate_welcome"), 1);
        assert_eq!(rec.connects_ok, 1);
        let p = pings(&sim, i);
        assert_eq!(p.own.len(), 3);
        assert_eq!(rec.rtt_us.len(), p.pongs_delivered);
        assert_eq!(
            p.extra_pongs_delivered, p.pongs_delivered,
            "two answers each"
        );
        assert_eq!(rec.events.get("pong_unmatched"), p.extra_pongs_delivered);
        // Each heartbeat echoed exactly once, never an own token.
        assert!(p.heartbeats_delivered >= 3);
        assert_eq!(p.echoes_sent, p.heartbeats_delivered);
        let up_tokens: Vec<u32> = sim
            .up_from(i)
            .filter(|r| r.msg_type() == PING)
            .map(Record::token)
            .collect();
        let distinct: HashSet<_> = up_tokens.iter().collect();
        assert_eq!(distinct.len(), up_tokens.len(), "a token sent twice");
        assert_eq!(rec.loss_down.expected, rec.loss_down.received);
    }
}

// ---------------------------------------------------------------------------------------
// (d) Reordering.
// ---------------------------------------------------------------------------------------

/// Holding back every 6th server→bot datagram by 20 ms (more than a tick) reorders it behind
/// the next: no loss, one `reordered_datagram` per late arrival. A late snapshot older
/// than one already applied is not applied (`snapshot_out_of_order`): it would roll the
/// table back.
#[test]
fn reordered_datagrams_are_not_loss() {
    // 5 bots and every 6th datagram (coprime): every bot gets some of the held ones.
    let n = 5;
    let mut sim = sim(n, CafeServerConfig::default(), ms(2));
    // Stop holding before the end so nothing is still in flight when we look.
    sim.down.hold = Some((rule(|m| m.at < ms(2800) && (m.index + 1) % 6 == 0), ms(20)));
    sim.start_all();
    sim.run_until(ms(3000));
    end_sessions(&mut sim);

    for i in 0..n {
        let rec = &sim.recs[i];
        assert_no_errors(rec, "reorder");
        assert_eq!(sim.unseen_down(i), 0);
        assert_eq!(rec.loss_down.expected, rec.loss_down.received, "bot {i}");
        assert_eq!(rec.loss_down.received, sim.received_down(i));
        let reordered = sim.reordered_deliveries(i);
        assert!(reordered > 0);
        assert_eq!(rec.events.get("reordered_datagram"), reordered, "bot {i}");
        assert_eq!(rec.events.get("too_old_datagram"), 0);
        assert_eq!(rec.events.get("duplicate_datagram"), 0);

        // Ground truth for snapshots: in arrival order, the ones older than a tick already
        // seen.
        let mut newest: Option<u32> = None;
        let mut stale = 0;
        let mut fresh = 0;
        for &idx in &sim.deliveries {
            let r = &sim.log[idx];
            if r.dir != Dir::Down || r.bot != i || r.msg_type() != SNAPSHOT {
                continue;
            }
            if newest.is_some_and(|t| r.tick() < t) {
                stale += 1;
            } else {
                fresh += 1;
                newest = Some(r.tick());
            }
        }
        assert!(stale > 0);
        assert_eq!(rec.events.get("snapshot_out_of_order"), stale, "bot {i}");
        assert_eq!(rec.snapshots_applied, fresh, "bot {i}");
    }
}

// ---------------------------------------------------------------------------------------
// (e) RTT.
// ---------------------------------------------------------------------------------------

/// With a one-way delay d each way (and a server that answers at once), every RTT sample is
/// 2d; with different delays per direction it is their sum.
#[test]
fn rtt_is_the_round_trip_of_the_link() {
    for (up, down) in [(ms(25), ms(25)), (ms(7), ms(13))] {
        let n = 3;
        let mut sim = sim(n, CafeServerConfig::default(), up);
        sim.down.delay = down;
        sim.start_all();
        sim.run_until(ms(4500));
        let want = (up + down).as_micros() as u64;
        for i in 0..n {
            let rec = &sim.recs[i];
            let p = pings(&sim, i);
            assert_eq!(rec.rtt_us.len(), p.pongs_delivered);
            assert_eq!(rec.rtt_us.len(), 5, "pings at 0..4 s after connect");
            assert_close(rec.rtt_us.min(), want, "rtt min");
            assert_close(rec.rtt_us.max(), want, "rtt max");
            assert_close(rec.handshake_us.max(), want, "handshake");
            assert_eq!(rec.events.get("pong_late"), 0);
        }
    }
}

/// A pong that arrives later than the silence timeout is no RTT sample (`pong_late`). At
/// 10 Hz the 6 s delay stays inside the 128-datagram sequence window.
#[test]
fn late_pongs_are_not_samples() {
    let cfg = CafeServerConfig {
        tick_rate: 10,
        ..CafeServerConfig::default()
    };
    let mut sim = sim(1, cfg, ms(2));
    // Pongs (and heartbeats) held 6 s; snapshots keep the session alive meanwhile.
    sim.down.hold = Some((rule(|m| m.msg_type() == PING), ms(6000)));
    sim.start_all();
    sim.run_until(ms(10_500));
    let rec = &sim.recs[0];
    assert_eq!(sim.bots[0].phase(), BotPhase::Connected);
    // Ping k leaves at 4.137 ms + k s, its answer is back 6.004 s later: k = 0..=4 by 10.5 s.
    let p = pings(&sim, 0);
    assert_eq!(p.own.len(), 11);
    assert_eq!(p.pongs_delivered, 5);
    assert_eq!(rec.events.get("pong_late"), 5);
    assert_eq!(rec.rtt_us.len(), 0);
    assert_eq!(
        rec.events.get("ping_lost"),
        0,
        "never more than 7 in flight"
    );
    assert_eq!(rec.events.get("too_old_datagram"), 0);
}

/// A datagram more than 128 sequence numbers late cannot be told from a duplicate
/// (seqwindow.rs): for loss it is `too_old_datagram` and stays counted as lost. A pong is
/// matched to the bot's own ping by its token BEFORE that bookkeeping (docs/protocols/cafe.md),
/// so a pong 6 s late is still recognised: `pong_late` (past the silence timeout), not a sample,
/// and never taken for a heartbeat.
#[test]
fn pongs_older_than_the_window_are_matched_first() {
    let mut sim = sim(1, CafeServerConfig::default(), ms(2));
    sim.down.hold = Some((rule(|m| m.msg_type() == PING), ms(6000)));
    sim.start_all();
    sim.run_until(ms(10_500));
    end_sessions(&mut sim);
    let rec = &sim.recs[0];
    let p = pings(&sim, 0);
    let held_arrived = sim
        .down_to(0)
        .filter(|r| r.msg_type() == PING && !r.delivered.is_empty())
        .count() as u64;
    assert_eq!(p.pongs_delivered, 5);
    assert_eq!(rec.events.get("too_old_datagram"), held_arrived);
    assert_eq!(rec.events.get("pong_late"), p.pongs_delivered);
    // Held heartbeats are not the bot's: too old, dropped, not echoed.
    assert_eq!(rec.events.get("heartbeat_echoed"), 0);
    assert_eq!(rec.rtt_us.len(), 0);
    assert_eq!(
        rec.loss_down.expected - rec.loss_down.received,
        sim.unseen_down(0) + held_arrived
    );
}

/// At most 8 pings are tracked: a 9th evicts the oldest (`ping_lost`); an answer that comes
/// for an evicted ping is recognised as one of the bot's own tokens (`pong_unmatched`), not
/// taken for a heartbeat and echoed.
#[test]
fn unanswered_pings_are_given_up() {
    // 10 Hz keeps the 9 s delay inside the sequence window (see above).
    let cfg = CafeServerConfig {
        tick_rate: 10,
        ..CafeServerConfig::default()
    };
    let mut sim = sim(1, cfg, ms(2));
    sim.down.hold = Some((rule(|m| m.msg_type() == PING), ms(9000)));
    sim.start_all();
    sim.run_until(ms(10_500));
    let rec = &sim.recs[0];
    // Pings at 4.137 ms + k s, k = 0..=10. Pings 8, 9, 10 each evict the oldest (0, 1, 2);
    // the answers to pings 0 and 1 arrive at 9.008 s and 10.008 s, after their eviction.
    let p = pings(&sim, 0);
    assert_eq!(p.own.len(), 11);
    assert_eq!(rec.events.get("ping_lost"), 3);
    assert_eq!(p.pongs_delivered, 2);
    assert_eq!(rec.events.get("pong_unmatched"), 2);
    assert_eq!(rec.events.get("pong_late"), 0);
    assert_eq!(rec.events.get("heartbeat_echoed"), 0);
    assert_eq!(p.echoes_sent, 0);
    assert_eq!(rec.rtt_us.len(), 0);
}

// ---------------------------------------------------------------------------------------
// (f) Heartbeats.
// ---------------------------------------------------------------------------------------

/// The server pings each client every `heartbeat_interval` with a token the bot did not
/// issue; the bot echoes each heartbeat exactly once, unchanged; the server takes the echo
/// as such (`heartbeat_echo_received`) and does not answer it (else the two would ping-pong
/// forever).
#[test]
fn heartbeats_are_echoed_once() {
    let n = 3;
    let cfg = CafeServerConfig {
        heartbeat_interval: Some(ms(500)),
        ..CafeServerConfig::default()
    };
    let mut sim = sim(n, cfg, ms(4));
    sim.start_all();
    sim.run_until(ms(3000));

    let mut echoes = 0;
    for i in 0..n {
        let rec = &sim.recs[i];
        let p = pings(&sim, i);
        assert_eq!(p.heartbeats.len(), 5, "at 0.5, 1, 1.5, 2, 2.5 s");
        assert!(
            p.heartbeats.values().all(|&c| c == 1),
            "server answered an echo: {:?}",
            p.heartbeats
        );
        assert_eq!(p.heartbeats_delivered, 5);
        assert_eq!(rec.events.get("heartbeat_echoed"), 5);
        assert_eq!(p.echoes_sent, 5);
        // The RTT histogram holds only the bot's own pings.
        assert_eq!(rec.rtt_us.len(), p.pongs_delivered);
        echoes += p.echoes_delivered;
    }
    assert_eq!(
        sim.server.stats().events.get("heartbeat_echo_received"),
        echoes
    );
}

/// Against a server that answers every Ping, echoes included, the bot echoes a heartbeat
/// once and recognises the answer to its echo (`heartbeat_echo_answered`) instead of
/// echoing it again.
#[test]
fn bot_does_not_echo_the_answer_to_its_own_echo() {
    let mut sim = sim(1, CafeServerConfig::default(), ms(1));
    sim.start_all();
    sim.run_until(ms(100));
    assert_eq!(sim.bots[0].phase(), BotPhase::Connected);
    let next_seq = sim.down_to(0).last().unwrap().seq().wrapping_add(1);
    let before = sim.up_from(0).count();

    let mut buf = [0u8; MAX_DATAGRAM];
    let hb = Message::Ping {
        timestamp_ms: 0x8000_1234,
    };
    let len = codec::encode(&mut buf, next_seq, &hb).unwrap();
    sim.inject_to_bot(0, &buf[..len]);
    let sent: Vec<&Record> = sim.up_from(0).skip(before).collect();
    assert_eq!(sent.len(), 1);
    assert_eq!((sent[0].msg_type(), sent[0].token()), (PING, 0x8000_1234));

    // The same token again, as a server answering the echo would send it.
    let len = codec::encode(&mut buf, next_seq.wrapping_add(1), &hb).unwrap();
    sim.inject_to_bot(0, &buf[..len]);
    assert_eq!(sim.up_from(0).count(), before + 1, "echoed the echo");
    assert_eq!(sim.recs[0].events.get("heartbeat_echoed"), 1);
    assert_eq!(sim.recs[0].events.get("heartbeat_echo_answered"), 1);
}

// ---------------------------------------------------------------------------------------
// (g) Handshake.
// ---------------------------------------------------------------------------------------

/// A lost Hello is resent after `handshake_retry`; the handshake time then includes the
/// wait.
#[test]
fn handshake_retries_a_lost_hello() {
    let d = ms(10);
    let mut sim = sim(1, CafeServerConfig::default(), d);
    sim.up.drop = Some(at_indices(&[0]));
    sim.start_all();
    sim.run_until(ms(1000));
    let rec = &sim.recs[0];
    assert_eq!(sim.bots[0].phase(), BotPhase::Connected);
    assert_eq!(rec.events.get("hello_retry"), 1);
    let hellos: Vec<Duration> = sim
        .up_from(0)
        .filter(|r| r.msg_type() == HELLO)
        .map(|r| r.sent_at)
        .collect();
    assert_eq!(hellos, vec![ms(0), ms(500)]);
    assert_eq!(rec.connects_ok, 1);
    assert_close(rec.handshake_us.max(), 520_000, "handshake");
    assert_eq!(sim.server.stats().accepted, 1);
}

/// When no Hello gets through, the bot resends every 500 ms and gives up at the 5 s
/// handshake timeout: `connect_failures.timeout`, phase Failed, no more timers.
#[test]
fn handshake_times_out() {
    let mut sim = sim(1, CafeServerConfig::default(), ms(10));
    sim.up.drop = Some(always());
    sim.start_all();
    sim.run_until(ms(4999));
    assert_eq!(sim.bots[0].phase(), BotPhase::Connecting);
    sim.run_until(ms(5000));
    let rec = &sim.recs[0];
    assert_eq!(sim.bots[0].phase(), BotPhase::Failed);
    assert_eq!(rec.connect_failures.get("timeout"), 1);
    assert_eq!(rec.connects_ok, 0);
    let hellos: Vec<Duration> = sim.up_from(0).map(|r| r.sent_at).collect();
    assert_eq!(hellos, (0..10).map(|k| ms(500 * k)).collect::<Vec<_>>());
    assert_eq!(rec.events.get("hello_retry"), 9);
    assert_eq!(sim.bots[0].poll_timeout(), None);
    sim.run_until(ms(8000));
    assert_eq!(sim.up_from(0).count(), 10);
    assert_eq!(sim.server.stats().datagrams_in, 0);
}

/// A full server (`max_clients`) answers Hello with Disconnect in the spec dialect: the bot
/// fails at once with `connect_failures.refused`.
#[test]
fn full_server_refuses() {
    let cfg = CafeServerConfig {
        max_clients: 2,
        ..CafeServerConfig::default()
    };
    let mut sim = sim(3, cfg, ms(5));
    sim.start_all();
    sim.run_until(ms(11));
    // Hellos arrive in bot order: the third is refused.
    assert_eq!(sim.bots[0].phase(), BotPhase::Connected);
    assert_eq!(sim.bots[1].phase(), BotPhase::Connected);
    assert_eq!(sim.bots[2].phase(), BotPhase::Failed);
    assert_eq!(sim.recs[2].connect_failures.get("refused"), 1);
    assert_eq!(sim.recs[2].connects_ok, 0);
    let refusal: Vec<&Record> = sim.down_to(2).collect();
    assert_eq!(refusal.len(), 1);
    assert_eq!(refusal[0].msg_type(), DISCONNECT);
    assert_eq!(refusal[0].first_arrival(), Some(ms(10)));
    let st = sim.server.stats();
    assert_eq!((st.accepted, st.refused, st.clients), (2, 1, 2));
    sim.run_until(ms(2000));
    assert_eq!(sim.up_from(2).count(), 1, "no retry after a refusal");
}

/// The implementation dialect has no Disconnect: a full server ignores the Hello, so the bot
/// can only time out; every retry is refused again.
#[test]
fn full_server_in_the_implementation_dialect_is_silent() {
    let cfg = CafeServerConfig {
        max_clients: 1,
        ..CafeServerConfig::for_dialect(Dialect::Implementation)
    };
    let opts = CafeOptions {
        dialect: Dialect::Implementation,
        ..CafeOptions::default()
    };
    let mut sim = new_sim(cfg, fleet(2, opts));
    sim.up.delay = ms(5);
    sim.down.delay = ms(5);
    sim.start_all();
    sim.run_until(ms(6000));
    assert_eq!(sim.bots[1].phase(), BotPhase::Failed);
    assert_eq!(sim.recs[1].connect_failures.get("timeout"), 1);
    assert_eq!(sim.recs[1].connect_failures.get("refused"), 0);
    assert_eq!(sim.down_to(1).count(), 0);
    assert_eq!(sim.server.stats().refused, 10);
}

// ---------------------------------------------------------------------------------------
// (h) Full and delta snapshots.
// ---------------------------------------------------------------------------------------

/// On a clean link the bot's entity table equals its room on the server after every
/// snapshot: fulls replace the set, deltas carry every entity that moved. Rooms are
/// `room_size` consecutive player slots, and a bot sees only its own room.
#[test]
fn entity_table_follows_the_room_after_every_snapshot() {
    for (n, room_size) in [(5, 32), (6, 3)] {
        let d = ms(2);
        let cfg = CafeServerConfig {
            room_size,
            ..CafeServerConfig::default()
        };
        let mut sim = sim(n, cfg, d);
        sim.start_all();
        for k in 1..=130 {
            sim.run_until(tick_at(k) + d);
            for i in 0..n {
                assert_table_matches_room(&sim, i, &format!("tick {k}"));
            }
        }
        let full_ticks = sim
            .down_to(0)
            .filter(|r| r.msg_type() == SNAPSHOT && r.is_full())
            .map(Record::tick)
            .collect::<Vec<_>>();
        assert_eq!(
            full_ticks,
            vec![1, 60, 120],
            "first snapshot, then every 60"
        );
    }
}

/// Keys that walk right for `walk`, then stand still.
fn walk_then_stop(walk: Duration) -> InputPattern {
    InputPattern::Scripted {
        steps: vec![
            (Keys(Keys::RIGHT), walk),
            (Keys::default(), Duration::from_secs(1000)),
        ],
    }
}

/// Record `n` of a spec-dialect snapshot, read by hand: (entity_id, vx).
fn record_id_vx(bytes: &[u8], n: usize) -> (u16, f32) {
    let at = 8 + 6 + 33 * n;
    (le_u16(bytes, at), le_f32(bytes, at + 10))
}

fn snapshot_records(bytes: &[u8]) -> usize {
    (bytes.len() - 8 - 6 - 14) / 33
}

/// A lost delta leaves the table stale (deltas carry only what changed, there is no
/// baseline) until the next full snapshot repairs it; the bot records how long it may have
/// been stale (`stale_us`: from noticing the gap to the full).
#[test]
fn lost_delta_is_stale_until_the_next_full() {
    let d = ms(2);
    let mut p1 = params(1);
    p1.pattern = walk_then_stop(ms(300));
    let mut p0 = params(0);
    p0.pattern = InputPattern::Idle;
    let opts = CafeOptions::default();
    let mut sim = new_sim(
        CafeServerConfig::default(),
        vec![(p0, opts.clone()), (p1, opts)],
    );
    sim.up.delay = d;
    sim.down.delay = d;
    sim.start_all();
    sim.run_until(ms(10));
    let walker = sim.bots[1].player_id();
    // Drop, once, the delta to bot 0 that says the walker stopped.
    let mut done = false;
    sim.down.drop = Some(rule(move |m| {
        let hit = !done
            && m.bot == 0
            && m.msg_type() == SNAPSHOT
            && m.bytes[12] == 0
            && (0..snapshot_records(m.bytes)).any(|n| record_id_vx(m.bytes, n) == (walker, 0.0));
        done |= hit;
        hit
    }));
    sim.run_until(ms(600));

    let lost = sim
        .log
        .iter()
        .position(|r| r.dropped)
        .expect("delta dropped");
    assert!(sim.log[lost].tick() < 59);
    let truth = *sim
        .server
        .players()
        .find(|(_, r)| r.entity_id == walker)
        .unwrap()
        .1;
    assert_eq!(truth.vx, 0.0);
    let seen = *sim.bots[0].entity(walker).unwrap();
    assert_eq!(seen.vx, PLAYER_SPEED, "bot 0 still sees the walker walking");
    assert_ne!(seen, truth);
    assert_eq!(
        extra(&sim.recs[0], "stale_us"),
        None,
        "not until a full arrives"
    );
    // Bot 1 itself lost nothing.
    assert_table_matches_room(&sim, 1, "bot 1");

    sim.run_until(tick_at(60) + d);
    assert_table_matches_room(&sim, 0, "after the full");
    // Stale from the first datagram after the lost one to the full at tick 60.
    let noticed = sim
        .down_to(0)
        .filter(|r| r.peer_index > sim.log[lost].peer_index)
        .find_map(Record::first_arrival)
        .unwrap();
    let want = (tick_at(60) + d - noticed).as_micros() as u64;
    let (count, min, max) = extra(&sim.recs[0], "stale_us").expect("stale recorded");
    assert_eq!(count, 1);
    assert_close(min, want, "stale min");
    assert_close(max, want, "stale max");
    assert_eq!(extra(&sim.recs[1], "stale_us"), None);
    let r0 = &sim.recs[0];
    assert_eq!(r0.loss_down.expected - r0.loss_down.received, 1);
}

/// The per-connection `seq` numbers every server datagram, so a lost Pong leaves a gap too;
/// but the next snapshot's tick follows the last one, so no snapshot was lost and the table
/// is as right as it was: no staleness (`seq_gap_not_a_snapshot`), while the loss is counted.
#[test]
fn a_lost_pong_does_not_make_the_table_stale() {
    let d = ms(2);
    let mut sim = sim(1, CafeServerConfig::default(), d);
    sim.start_all();
    // Drop the first Pong to arrive after the tick step is learned (8 snapshots).
    let mut done = false;
    sim.down.drop = Some(rule(move |m| {
        let hit = !done && m.msg_type() == PING && m.at > ms(400);
        done |= hit;
        hit
    }));
    // Past the next two fulls (ticks 60 and 120): a stale table would be recorded by then.
    sim.run_until(tick_at(130) + d);
    let lost = sim.log.iter().filter(|r| r.dropped).count();
    assert_eq!(lost, 1, "one Pong dropped");
    let r = &sim.recs[0];
    assert_eq!(r.loss_down.expected - r.loss_down.received, 1);
    assert_eq!(r.events.get("seq_gap_not_a_snapshot"), 1);
    assert_eq!(extra(r, "stale_us"), None);
    assert_table_matches_room(&sim, 0, "after the lost pong");
}

const PLAYER_SPEED: f32 = tickswarm::games::cafe::server::PLAYER_SPEED;

/// A full snapshot that arrives after newer deltas is older than the table: applying it
/// would roll entities back (and cull ones that joined since). It is counted
/// (`snapshot_out_of_order`) and not applied; staleness ends only at the next full that
/// arrives in order.
#[test]
fn late_full_snapshot_does_not_roll_back() {
    let d = ms(2);
    let mut p1 = params(1);
    p1.pattern = InputPattern::Scripted {
        steps: vec![(Keys(Keys::RIGHT), Duration::from_secs(1000))],
    };
    let mut p0 = params(0);
    p0.pattern = InputPattern::Idle;
    let opts = CafeOptions::default();
    let mut sim = new_sim(
        CafeServerConfig::default(),
        vec![(p0, opts.clone()), (p1, opts)],
    );
    sim.up.delay = d;
    sim.down.delay = d;
    sim.down.hold = Some((
        rule(|m| {
            m.bot == 0 && m.msg_type() == SNAPSHOT && m.bytes[12] == 1 && le_u32(m.bytes, 8) == 60
        }),
        ms(40),
    ));
    sim.start_all();
    // Ticks 61 and 62 arrive before the held full of tick 60 (at 60 ticks + 42 ms).
    sim.run_until(tick_at(60) + ms(43));
    let held = sim
        .down_to(0)
        .find(|r| r.msg_type() == SNAPSHOT && r.tick() == 60)
        .unwrap();
    assert_eq!(held.first_arrival(), Some(tick_at(60) + ms(42)));
    assert_eq!(sim.server.tick(), 62);
    assert_table_matches_room(&sim, 0, "after the late full");
    let rec = &sim.recs[0];
    assert_eq!(rec.events.get("snapshot_out_of_order"), 1);
    assert_eq!(rec.events.get("reordered_datagram"), 1);
    assert_eq!(rec.loss_down.expected, rec.loss_down.received);

    let held_at = held.peer_index;
    sim.run_until(tick_at(120) + d);
    assert_table_matches_room(&sim, 0, "after the next full");
    // Stale from the first datagram that overtook the held full to the full of tick 120.
    let noticed = sim
        .down_to(0)
        .filter(|r| r.peer_index > held_at)
        .find_map(Record::first_arrival)
        .unwrap();
    let (count, min, _) = extra(&sim.recs[0], "stale_us").expect("stale recorded");
    assert_eq!(count, 1);
    assert_close(
        min,
        (tick_at(120) + d - noticed).as_micros() as u64,
        "stale",
    );
}

// ---------------------------------------------------------------------------------------
// (i) Server-side session end.
// ---------------------------------------------------------------------------------------

/// The server drops a client that stays silent for `client_timeout` (2 s in the
/// implementation dialect, whose bots leave without a word): at the first tick at least
/// that long after the last datagram it got, and sends it nothing after.
#[test]
fn server_times_out_silent_clients() {
    let cfg = CafeServerConfig::for_dialect(Dialect::Implementation);
    assert_eq!(cfg.client_timeout, ms(2000));
    let opts = CafeOptions {
        dialect: Dialect::Implementation,
        ..CafeOptions::default()
    };
    let mut sim = new_sim(cfg, fleet(3, opts));
    sim.up.delay = ms(3);
    sim.down.delay = ms(3);
    sim.start_all();
    sim.run_until(ms(1000));
    let sent_before = sim.up_from(2).count();
    sim.stop(2);
    assert_eq!(sim.bots[2].phase(), BotPhase::Closed);
    assert_eq!(
        sim.up_from(2).count(),
        sent_before,
        "no Disconnect in this dialect"
    );
    sim.run_until(ms(4000));

    let st = sim.server.stats();
    assert_eq!((st.timed_out, st.disconnected, st.clients), (1, 0, 2));
    let last_heard = sim
        .up_from(2)
        .filter_map(Record::first_arrival)
        .max()
        .unwrap();
    let deadline = last_heard + ms(2000);
    let k = deadline.as_nanos().div_ceil(TICK.as_nanos()) as u32;
    let last_sent = sim.down_to(2).map(|r| r.sent_at).max().unwrap();
    assert_eq!(
        last_sent,
        tick_at(k - 1),
        "served until the tick before the timeout"
    );
    for i in 0..2 {
        assert_eq!(sim.bots[i].phase(), BotPhase::Connected);
    }
}

/// In the spec dialect a stopping bot sends Disconnect; the server forgets it on arrival and
/// sends it nothing more.
#[test]
fn disconnect_ends_the_session_at_once() {
    let mut sim = sim(2, CafeServerConfig::default(), ms(3));
    sim.start_all();
    sim.run_until(ms(1000));
    sim.stop(1);
    let last_up = sim.up_from(1).last().unwrap();
    assert_eq!(last_up.msg_type(), DISCONNECT);
    sim.run_until(ms(2000));
    let st = sim.server.stats();
    assert_eq!((st.disconnected, st.timed_out, st.clients), (1, 0, 1));
    let arrived = sim.up_from(1).last().unwrap().first_arrival().unwrap();
    assert!(sim.down_to(1).all(|r| r.sent_at <= arrived));
    assert_eq!(sim.up_from(1).last().unwrap().msg_type(), DISCONNECT);
    assert_eq!(sim.bots[1].phase(), BotPhase::Closed);
}

/// "The server updates `last_seen` on any packet": a client whose Welcomes keep getting lost
/// keeps itself alive with its Hello retries; it is not timed out and re-admitted.
#[test]
fn hello_retries_keep_a_client_alive() {
    let cfg = CafeServerConfig {
        client_timeout: ms(1000),
        ..CafeServerConfig::default()
    };
    let mut sim = sim(1, cfg, ms(2));
    // Every Welcome sent before 1.4 s is lost: those answering the Hellos of 0, 0.5 and 1 s.
    sim.down.drop = Some(rule(|m| m.at < ms(1400)));
    sim.start_all();
    sim.run_until(ms(2000));
    let st = sim.server.stats();
    assert_eq!((st.accepted, st.timed_out), (1, 0));
    assert_eq!(st.events.get("hello_repeated"), 3);
    assert_eq!(sim.bots[0].phase(), BotPhase::Connected);
    assert_eq!(sim.recs[0].events.get("hello_retry"), 3);
    assert_close(sim.recs[0].handshake_us.max(), 1_504_000, "handshake");
}

// ---------------------------------------------------------------------------------------
// (j) Sequence numbers.
// ---------------------------------------------------------------------------------------

/// `seq` is per connection: the server numbers each client's datagrams on their own, one
/// apart, from the client's Welcome on.
#[test]
fn server_seq_is_per_connection() {
    let n = 4;
    let mut sim = sim(n, CafeServerConfig::default(), ms(2));
    sim.start_all();
    sim.run_until(ms(1500));
    for i in 0..n {
        let seqs: Vec<u32> = sim.down_to(i).map(Record::seq).collect();
        assert_eq!(sim.down_to(i).next().unwrap().msg_type(), WELCOME);
        assert_eq!(seqs, (0..seqs.len() as u32).collect::<Vec<_>>(), "bot {i}");
    }
}

/// The per-client sequence wraps from u32::MAX to 0 without loss, reset or reordering being
/// counted; losses across the wrap are counted exactly.
#[test]
fn seq_wraps_around() {
    for drop_every in [None, Some(5)] {
        let n = 2;
        let first = u32::MAX - 40;
        let mut sim = sim(n, CafeServerConfig::default(), ms(2));
        sim.server.set_first_client_seq(first);
        sim.down.drop = drop_every.map(every_kth);
        sim.start_all();
        sim.run_until(ms(2000));
        end_sessions(&mut sim);
        for i in 0..n {
            let rec = &sim.recs[i];
            let seqs: Vec<u32> = sim.down_to(i).map(Record::seq).collect();
            assert_eq!(seqs[0], first);
            assert!(seqs.len() > 100);
            let want: Vec<u32> = (0..seqs.len() as u32)
                .map(|k| first.wrapping_add(k))
                .collect();
            assert_eq!(seqs, want);
            assert!(*seqs.last().unwrap() < 1000, "wrapped");
            for e in ["seq_reset", "too_old_datagram", "reordered_datagram"] {
                assert_eq!(rec.events.get(e), 0, "{e}");
            }
            let lost = rec.loss_down.expected - rec.loss_down.received;
            assert_eq!(
                lost,
                sim.dropped_down_in_window(i),
                "{drop_every:?} bot {i}"
            );
            assert_eq!(rec.loss_down.received, sim.received_down(i));
            assert_eq!(lost > 0, drop_every.is_some());
        }
    }
}

// ---------------------------------------------------------------------------------------
// Dialects, loss source, garbage.
// ---------------------------------------------------------------------------------------

/// Implementation dialect end to end: snapshots carry `last_input` = the header seq of the
/// latest Input the server had from that client when it sent the snapshot
/// (docs/protocols/cafe.md), and a `count` equal to the records present; the bot pairs them with
/// its Inputs (`input_to_snapshot_us`) and reconciles its prediction (`prediction_error`).
#[test]
fn implementation_dialect_snapshots_carry_last_input() {
    let n = 3;
    let opts = CafeOptions {
        dialect: Dialect::Implementation,
        ..CafeOptions::default()
    };
    let mut sim = new_sim(
        CafeServerConfig::for_dialect(Dialect::Implementation),
        fleet(n, opts),
    );
    sim.up.delay = ms(3);
    sim.down.delay = ms(4);
    sim.start_all();
    sim.run_until(ms(2000));
    for i in 0..n {
        let inputs: Vec<(Duration, u32)> = sim
            .up_from(i)
            .filter(|r| r.msg_type() == INPUT)
            .filter_map(|r| r.first_arrival().map(|t| (t, r.seq())))
            .collect();
        let mut checked = 0;
        for s in sim.down_to(i).filter(|r| r.msg_type() == SNAPSHOT) {
            let want = inputs
                .iter()
                .filter(|(t, _)| *t <= s.sent_at)
                .map(|(_, ms)| *ms)
                .next_back()
                .unwrap_or(0);
            assert_eq!(s.u32_at(14), want, "bot {i} tick {}", s.tick());
            let count = usize::from(le_u16(&s.bytes, 18));
            assert_eq!(s.bytes.len(), 8 + 12 + 33 * count + 14);
            checked += 1;
        }
        assert!(checked > 100);
        let rec = &sim.recs[i];
        assert_no_errors(rec, "implementation");
        assert_eq!(rec.loss_down.expected, rec.loss_down.received);
        assert_eq!(rec.snapshots_applied, snapshots_delivered(&sim, i));
        let (n, _, _) = extra(rec, "input_to_snapshot_us").expect("inputs paired");
        assert!(n > 100, "bot {i}: {n} inputs paired");
    }
}

/// Prediction against the implementation dialect's `last_input`: a bot holding `right`
/// against a server that applies one Input a tick (inputs on the tick grid, fixed delay)
/// predicts exactly (0, the histogram's floor of 1 milli-unit at most); a bot that believes
/// players move at 200 units/s where the server moves them at 240 is off by the difference,
/// 40 / 60 = 0.667 units, at every reconciliation (the prediction restarts from the server's
/// position each time, so the error does not pile up).
#[test]
fn prediction_is_reconciled_against_last_input() {
    let hold_right = || InputPattern::Scripted {
        steps: vec![(Keys(Keys::RIGHT), ms(60_000))],
    };
    let opts = |speed: f32| CafeOptions {
        dialect: Dialect::Implementation,
        player_speed: speed,
        ..CafeOptions::default()
    };
    let (mut p0, mut p1) = (params(0), params(1));
    p0.pattern = hold_right();
    p1.pattern = hold_right();
    let mut sim = new_sim(
        CafeServerConfig::for_dialect(Dialect::Implementation),
        vec![(p0, opts(240.0)), (p1, opts(200.0))],
    );
    sim.up.delay = ms(3);
    sim.down.delay = ms(3);
    sim.start_all();
    sim.run_until(ms(3000));
    let (n, _, max) = extra(&sim.recs[0], "prediction_error").expect("reconciled");
    assert!(n > 100, "{n} reconciliations");
    assert!(max <= 1, "exact prediction: max {max} milli-units");
    let (n, min, max) = extra(&sim.recs[1], "prediction_error").expect("reconciled");
    assert!(n > 100, "{n} reconciliations");
    assert_close(min, 667, "min error");
    assert_close(max, 667, "max error");
}

/// `loss_source: tick` (for servers whose `seq` is global): downstream loss counts missing
/// snapshot ticks only; lost pongs and heartbeats do not count.
#[test]
fn tick_loss_source_counts_missing_snapshots() {
    let n = 3;
    let opts = CafeOptions {
        loss_source: LossSource::Tick,
        ..CafeOptions::default()
    };
    let cfg = CafeServerConfig {
        heartbeat_interval: Some(ms(300)),
        ..CafeServerConfig::default()
    };
    let mut sim = new_sim(cfg, fleet(n, opts));
    sim.up.delay = ms(2);
    sim.down.delay = ms(2);
    // Every Ping (pongs and heartbeats) and every 5th datagram.
    sim.down.drop = Some(rule(|m| m.msg_type() == PING || (m.index + 1) % 5 == 0));
    sim.start_all();
    sim.run_until(ms(3000));
    for i in 0..n {
        let snaps: Vec<&Record> = sim
            .down_to(i)
            .filter(|r| r.msg_type() == SNAPSHOT)
            .collect();
        let first = snaps.iter().position(|r| !r.delivered.is_empty()).unwrap();
        let last = snaps.iter().rposition(|r| !r.delivered.is_empty()).unwrap();
        let window = &snaps[first..=last];
        let dropped = window.iter().filter(|r| r.dropped).count() as u64;
        assert!(dropped > 0);
        let rec = &sim.recs[i];
        assert_eq!(
            rec.loss_down.expected,
            u64::from(window[window.len() - 1].tick() - window[0].tick()) + 1
        );
        assert_eq!(
            rec.loss_down.expected - rec.loss_down.received,
            dropped,
            "bot {i}"
        );
        // Pings were dropped too, and did not count.
        assert!(sim.down_to(i).any(|r| r.dropped && r.msg_type() == PING));
    }
}

/// Malformed datagrams are counted by `message.reason` and dropped; they neither end the
/// session nor touch the loss counters, on the bot or on the server.
#[test]
fn garbage_is_counted_and_ignored() {
    let mut sim = sim(1, CafeServerConfig::default(), ms(2));
    sim.start_all();
    sim.run_until(ms(500));
    let loss_before = sim.recs[0].loss_down;
    let garbage: [&[u8]; 4] = [
        &[],
        &[0xCA, 0xFE, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0],
        &[0xFE, 0xCA, 1, 9, 0, 0, 0, 0],
        &[0xFE, 0xCA, 1, 3, 0, 0, 0, 0, 1, 2, 3],
    ];
    for g in garbage {
        sim.inject_to_bot(0, g);
    }
    let rec = &sim.recs[0];
    assert_eq!(rec.decode_errors.get("header.truncated"), 1);
    assert_eq!(rec.decode_errors.get("header.bad_magic"), 1);
    // An unknown type is a newer server's message: counted and ignored, not malformed.
    assert_eq!(rec.decode_errors.get("header.unknown_type"), 0);
    assert_eq!(rec.events.get("unknown_message_type"), 1);
    assert_eq!(rec.decode_errors.get("snapshot.truncated"), 1);
    assert_eq!(rec.loss_down, loss_before);

    // The server, from a client it knows and from a stranger.
    let known = sim.addrs[0];
    let stranger = bot_addr(77);
    let t = sim.at(ms(500));
    sim.server
        .handle_datagram(t, known, &[0xFE, 0xCA, 2, 2, 0, 0, 0, 0]);
    let ping = [0xFE, 0xCA, 1, 4, 0, 0, 0, 0, 1, 0, 0, 0];
    sim.server.handle_datagram(t, stranger, &ping);
    let st = sim.server.stats();
    assert_eq!(st.dropped.get("header.bad_version"), 1);
    assert_eq!(st.dropped.get("ping.unknown_client"), 1);
    let mut buf = [0u8; MAX_DATAGRAM];
    assert!(
        sim.server.poll_transmit(&mut buf).is_none(),
        "no answer to garbage"
    );

    sim.run_until(ms(1500));
    assert_eq!(sim.bots[0].phase(), BotPhase::Connected);
    let rec = &sim.recs[0];
    assert_eq!(rec.loss_down.expected, rec.loss_down.received);
}

// ---------------------------------------------------------------------------------------
// Bot-side session end, input modes, determinism.
// ---------------------------------------------------------------------------------------

/// A bot whose server falls silent closes the session `server_silence_timeout` (5 s) after
/// the last datagram it heard, and sends nothing after.
#[test]
fn bot_gives_up_on_a_silent_server() {
    let mut sim = sim(2, CafeServerConfig::default(), ms(3));
    sim.down.drop = Some(rule(|m| m.bot == 1 && m.at >= ms(1000)));
    sim.start_all();
    sim.run_until(ms(7000));
    let last_heard = sim
        .down_to(1)
        .filter_map(Record::first_arrival)
        .max()
        .unwrap();
    assert!(last_heard < ms(1004));
    let rec = &sim.recs[1];
    assert_eq!(sim.bots[1].phase(), BotPhase::Closed);
    assert_eq!(rec.events.get("server_silence_timeout"), 1);
    let last_sent = sim.up_from(1).map(|r| r.sent_at).max().unwrap();
    assert!(last_sent < last_heard + ms(5000));
    // It was still sending inputs until the timeout: the last one within a period of it.
    assert!(last_sent + TICK >= last_heard + ms(5000));
    assert_eq!(sim.bots[1].poll_timeout(), None);
    assert_eq!(sim.bots[0].phase(), BotPhase::Connected);
    assert_eq!(sim.recs[0].events.get("server_silence_timeout"), 0);
}

/// With `input_on_change` the bot still samples its pattern on the 60 Hz grid but sends an
/// Input only when the keys differ from the last ones sent (the first always goes).
#[test]
fn input_on_change_sends_only_changes() {
    let d = ms(2);
    let mut p = params(0);
    p.input_on_change = true;
    p.pattern = InputPattern::Scripted {
        steps: vec![(Keys(Keys::UP), ms(100)), (Keys(Keys::DOWN), ms(100))],
    };
    let phase = p.phase_offset;
    let mut sim = new_sim(
        CafeServerConfig::default(),
        vec![(p, CafeOptions::default())],
    );
    sim.up.delay = d;
    sim.down.delay = d;
    sim.start_all();
    let end = ms(1508);
    sim.run_until(end);

    // Slot k is due at connect + phase + k/60 s, where the pattern has run phase + k/60 s.
    let connect = 2 * d;
    let mut want = Vec::new();
    let mut last = None;
    for k in 0u128.. {
        let elapsed_ns = phase.as_nanos() + k * 1_000_000_000 / 60;
        if connect.as_nanos() + elapsed_ns > end.as_nanos() {
            break;
        }
        let keys = if (elapsed_ns / 100_000_000) % 2 == 0 {
            Keys::UP
        } else {
            Keys::DOWN
        };
        if last != Some(keys) {
            want.push(u16::from(keys));
            last = Some(keys);
        }
    }
    assert_eq!(want.len(), 16, "0, 0.1, .., 1.5 s");
    let sent: Vec<u16> = sim
        .up_from(0)
        .filter(|r| r.msg_type() == INPUT)
        .map(|r| le_u16(&r.bytes, 10))
        .collect();
    assert_eq!(sent, want);
    assert_eq!(sim.recs[0].inputs_sent, want.len() as u64);
    assert_eq!(sim.recs[0].send_lateness_us.len(), want.len() as u64);
}

/// The same scenario twice gives the same datagrams, byte for byte, at the same times, and
/// the same metrics: the bots' randomness comes from their seeds only, and the server's
/// (its player ids, drawn at random for admission) from `id_seed`.
#[test]
fn simulation_is_deterministic() {
    let run = || {
        let cfg = CafeServerConfig {
            id_seed: Some(1),
            ..CafeServerConfig::default()
        };
        let mut sim = sim(4, cfg, ms(3));
        sim.down.drop = Some(every_kth(9));
        sim.start_all();
        sim.run_until(ms(1500));
        let log: Vec<(Duration, Vec<u8>, bool)> = sim
            .log
            .iter()
            .map(|r| (r.sent_at, r.bytes.clone(), r.dropped))
            .collect();
        let m = sim.merged();
        (log, m.loss_down, m.inputs_sent, m.rtt_us.len(), m.events)
    };
    let (a, b) = (run(), run());
    assert!(a.0.len() > 500);
    assert_eq!(a, b);
}

/// Every session the server drops (refused, disconnected, timed out) is handed to the transport
/// through `poll_close`, after what was queued for it, so the transport can forget the id.
#[test]
fn every_dropped_session_is_reported_through_poll_close() {
    use tickswarm::games::cafe::CafeServer;
    use tickswarm::protocol::ConnId;
    let t0 = std::time::Instant::now();
    let cfg = CafeServerConfig {
        max_clients: 1,
        client_timeout: Duration::from_secs(1),
        ..CafeServerConfig::default()
    };
    let mut server = CafeServer::new(cfg, t0);
    let mut buf = [0u8; MAX_DATAGRAM];
    let mut msg = [0u8; 64];
    let mut send = |server: &mut CafeServer, conn: u64, m: &Message<'_>| {
        let n = codec::encode(&mut msg, 0, m).unwrap();
        server.handle_datagram(t0, ConnId(conn), &msg[..n]);
    };
    let hello = Message::Hello {
        player_name: codec::make_name("p"),
    };
    let mut drain = |server: &mut CafeServer| {
        let mut to = Vec::new();
        while let Some((c, _)) = server.poll_transmit(&mut buf) {
            to.push(c);
        }
        to
    };

    send(&mut server, 1, &hello);
    assert_eq!(drain(&mut server), vec![ConnId(1)], "welcome");
    assert_eq!(server.poll_close(), None, "an admitted client stays");

    send(&mut server, 2, &hello);
    assert_eq!(
        drain(&mut server),
        vec![ConnId(2)],
        "the refusal goes out first"
    );
    assert_eq!(server.poll_close(), Some(ConnId(2)), "refused");
    assert_eq!(server.poll_close(), None);

    send(&mut server, 1, &Message::Disconnect);
    assert_eq!(server.poll_close(), Some(ConnId(1)), "disconnected");
    assert_eq!(server.stats().clients, 0);

    send(&mut server, 3, &hello);
    drain(&mut server);
    server.handle_timeout(t0 + Duration::from_secs(2));
    drain(&mut server);
    assert_eq!(server.stats().timed_out, 1);
    assert_eq!(server.poll_close(), Some(ConnId(3)), "timed out");
    assert_eq!(server.poll_close(), None);
}
