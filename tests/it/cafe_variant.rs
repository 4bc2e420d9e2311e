//! The cafe bot against datagrams shaped like the implementation dialect
//! (docs/protocols/cafe.md), fed by hand on a made-up clock: a header sequence counter shared by
//! all clients, pings echoed back whole, `last_input`.

use std::time::{Duration, Instant};

use tickswarm::games::cafe::bot::loss::CHUNK;
use tickswarm::games::cafe::codec::{self, GameStats, Message, SnapshotEncoder};
use tickswarm::games::cafe::{CafeBot, CafeOptions, Dialect};
use tickswarm::metrics::Recorder;
use tickswarm::protocol::{Bot, BotParams, BotPhase, MAX_MESSAGE};

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn welcome(seq: u32) -> Vec<u8> {
    let mut buf = vec![0u8; 64];
    let msg = Message::Welcome {
        player_id: 1,
        tick_rate: 60,
    };
    let n = codec::encode(&mut buf, seq, &msg).expect("fits");
    buf.truncate(n);
    buf
}

fn snapshot(seq: u32, tick: u32, last_input: Option<u32>) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let e = SnapshotEncoder::begin(&mut buf, seq, tick, tick % 3 == 0, false, last_input)
        .expect("fits");
    let n = e.finish(&GameStats::default()).expect("fits");
    buf.truncate(n);
    buf
}

/// Drain the bot's datagrams.
fn drain(bot: &mut CafeBot) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; MAX_MESSAGE];
    while let Some(t) = bot.poll_transmit(&mut buf) {
        out.push(buf[..t.len].to_vec());
    }
    out
}

fn connected(dialect: Dialect, t0: Instant, rec: &mut Recorder) -> CafeBot {
    let opts = CafeOptions {
        dialect,
        ..CafeOptions::default()
    };
    let mut bot = CafeBot::new(BotParams::with_index(0, 1), opts);
    bot.start(t0, rec);
    drain(&mut bot);
    bot.handle_datagram(t0 + ms(1), &welcome(1000), rec);
    assert_eq!(bot.phase(), BotPhase::Connected);
    bot
}

/// Spec dialect, a server whose one counter numbers the datagrams of 20 clients: each bot sees
/// gaps of 19. Nothing of that reaches the loss counters: the first chunk of header-seq
/// accounting (half a second) is not explained by the snapshot ticks, so the bot says so
/// (`shared_sequence_detected`) and commits the tick counts instead: nothing lost, then
/// exactly the one snapshot withheld.
#[test]
fn shared_sequence_counter_falls_back_to_ticks() {
    let t0 = Instant::now();
    let mut rec = Recorder::new();
    let mut bot = connected(Dialect::Spec, t0, &mut rec);
    let clients = 20u32;
    let mut now = t0 + ms(2);
    for k in 1..=200u32 {
        now += Duration::from_micros(16_667);
        if k == 150 {
            continue; // withheld: one snapshot lost
        }
        let seq = 1000 + k * clients;
        bot.handle_datagram(now, &snapshot(seq, k, None), &mut rec);
        // Never a phantom loss, not even before the sharing is known.
        assert!(
            rec.loss_down.expected - rec.loss_down.received <= u64::from(k >= 150),
            "k {k}: {:?}",
            rec.loss_down
        );
        if now < t0 + CHUNK {
            assert_eq!(rec.loss_down.expected, 0, "held until settled, k {k}");
        }
    }
    assert_eq!(rec.events.get("shared_sequence_detected"), 1);
    assert_eq!(rec.snapshots_applied, 199);
    assert_eq!(
        (rec.loss_down.expected, rec.loss_down.received),
        (200, 199),
        "tick loss: one snapshot missing"
    );
    bot.stop(now, &mut rec);
    assert_eq!((rec.loss_down.expected, rec.loss_down.received), (200, 199));
    assert_eq!(rec.decode_errors.total(), 0);
}

/// A per-connection counter is not taken for a shared one, even at 50 % loss: seqs and ticks
/// are thinned alike, and the header seq (Welcome included) is what is counted.
#[test]
fn per_connection_counter_with_loss_is_kept() {
    let t0 = Instant::now();
    let mut rec = Recorder::new();
    let mut bot = connected(Dialect::Spec, t0, &mut rec);
    let mut now = t0 + ms(2);
    let mut sent = 0u64;
    for k in 1..=200u32 {
        now += Duration::from_micros(16_667);
        if k % 4 >= 2 {
            continue; // two of every four lost: 50 % (ticks 1, 4, 5, 8, ...: step 1)
        }
        sent += 1;
        bot.handle_datagram(now, &snapshot(1000 + k, k, None), &mut rec);
    }
    bot.stop(now, &mut rec);
    assert_eq!(rec.events.get("shared_sequence_detected"), 0);
    // Welcome (1000) and seqs 1001..=1200 expected.
    assert_eq!(rec.loss_down.expected, 201);
    assert_eq!(rec.loss_down.received, 1 + sent);
}

/// The implementation echoes a Ping whole, the bot's own header seq included, which is far
/// behind the server's shared counter: matched by its token first, an RTT sample, not loss.
/// `last_input` (the header seq of the bot's Input) gives `input_to_snapshot_us`.
#[test]
fn whole_ping_echo_and_last_input() {
    let t0 = Instant::now();
    let mut rec = Recorder::new();
    let mut bot = connected(Dialect::Implementation, t0, &mut rec);
    let mut now = t0 + ms(2);
    let mut server_seq = 50_000u32;
    let mut tick = 0u32;
    let mut samples = 0;
    while now < t0 + ms(5000) {
        now += ms(4);
        bot.handle_timeout(now, &mut rec);
        for d in drain(&mut bot) {
            let (seq, msg) = codec::decode(&d, Dialect::Implementation).expect("bot datagram");
            match msg {
                // Echo whole after 3 ms.
                Message::Ping { .. } => {
                    samples += 1;
                    bot.handle_datagram(now + ms(3), &d, &mut rec);
                }
                // A snapshot naming this Input 5 ms later.
                Message::Input { .. } => {
                    tick += 1;
                    server_seq += 20;
                    bot.handle_datagram(
                        now + ms(5),
                        &snapshot(server_seq, tick, Some(seq)),
                        &mut rec,
                    );
                }
                _ => {}
            }
        }
    }
    assert!(samples >= 4, "pings {samples}");
    assert_eq!(rec.rtt_us.len(), samples);
    assert_eq!(rec.events.get("pings_sent"), samples);
    assert!(rec.rtt_us.min() >= 2900 && rec.rtt_us.max() <= 3100);
    assert_eq!(rec.loss_down.expected, rec.loss_down.received);
    assert_eq!(rec.events.get("heartbeat_echoed"), 0);
    let h = rec
        .extra
        .iter()
        .find(|(n, _)| *n == "input_to_snapshot_us")
        .map(|(_, h)| h.clone())
        .expect("input_to_snapshot_us recorded");
    assert_eq!(h.len(), u64::from(tick));
    assert!(
        h.min() >= 4990 && h.max() <= 5010,
        "{} {}",
        h.min(),
        h.max()
    );
}
