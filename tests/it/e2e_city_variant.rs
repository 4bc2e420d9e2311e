//! City `dialect: implementation` against a C libenet peer that speaks the public server's
//! variant exactly as docs/protocols/city.md describes
//! (tests/peers/city-variant-peer/city_variant_peer.c): one message per packet read, four-field chat (a
//! three-field one crashes it), no Pong, no InputAck, 46-byte DeltaState records at its tick rate,
//! header sequence 0, a peer table past which a connect gets no reply, and the variant's grid mover
//! (f32, tile centres, walls that refuse moves) at its 60 Hz.
//!
//! The peer is built here with `cc`; it needs libenet-dev (`scripts/install-test-deps.sh`).
//! These tests fail (never skip) without it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::peer::Peer;
use crate::common::summary::{at, declared_counter, run_text, u64_at};

fn peer_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(build_peer)
}

fn build_peer() -> PathBuf {
    crate::common::city_peer::build("city_variant_peer")
}

/// A peer on a free port, killed on drop.
fn start_peer(args: &[&str]) -> Peer {
    Peer::c("city variant peer", peer_bin(), args)
}

fn scenario(bots: u32, hold: &str, input_rate: u32) -> String {
    format!(
        "name: city-variant\nprotocol:\n  city:\n    dialect: implementation\n    chat_rate: 30\n\
         population:\n  stages:\n    - ramp_to: {bots}\n      over: 500ms\n    - hold: {hold}\n\
         behaviour:\n  input_rate: {input_rate}\n  pattern:\n    random_walk:\n      \
         change_every: 500ms\n  ping_interval: 250ms\n  handshake_timeout: 2s\n\
         engine:\n  enet_throttle: false\n"
    )
}

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// 20 bots, chat on, random walks at 60 inputs a second against the peer's 60 Hz ticks, 20 s
/// in play: all in play, inputs sent, DeltaStates applied, no decode errors, chat relayed
/// (four fields), the peer still up (nothing the bots sent crashed it), and the prediction
/// follows the variant's mover: at most one correction per bot-minute, refused moves counted
/// on their own. The bots ask the peer not to throttle their unreliable traffic (ENet's
/// throttle drops DeltaStates on a busy loopback), so the link loses nothing.
#[test]
fn implementation_dialect_plays_against_the_variant_peer() {
    let _one = one_at_a_time();
    let mut peer = start_peer(&["--seconds", "40", "--tick-rate", "60"]);
    let s = run_text(
        &scenario(20, "20s", 60),
        &["--target", &format!("127.0.0.1:{}", peer.listening_port())],
        &[0, 1],
    )
    .1;
    std::thread::sleep(Duration::from_millis(1200));
    peer.drain();
    let alive = peer.alive();
    eprintln!("summary: {s:#}");
    eprintln!("peer: alive={alive} {:?}", peer.log.last());
    assert!(alive, "the peer crashed: {:?}", peer.log);
    assert!(
        !peer.log.iter().any(|l| l.starts_with("crashed")),
        "{:?}",
        peer.log
    );
    assert_eq!(s["bots"]["connected"], 20, "{}", s["errors"]);
    assert_eq!(peer.stat("hellos"), 20, "{:?}", peer.log);
    assert!(peer.stat("inputs") > 20 * 20 * 3, "{:?}", peer.log);
    assert!(peer.stat("chats") >= 20, "{:?}", peer.log);
    assert_eq!(
        peer.stat("pings"),
        0,
        "no Ping to a server that never answers"
    );
    let pm = &s["protocol_metrics"];
    assert_eq!(
        declared_counter(&s, "dialect_hint.implementation"),
        0,
        "{pm}"
    );
    assert!(u64_at(&s, "inputs_sent") > 20 * 20 * 3, "{s}");
    assert!(u64_at(&s, "snapshots_applied") > 20 * 20 * 3, "{s}");
    // No decode error (this read `s["decode_errors"]`, a key summary.json never had).
    assert_eq!(u64_at(&s, "errors.decode_total"), 0, "{}", s["errors"]);
    // Prediction with the variant's mover, reconciled without acks against the record's own
    // fields: every DeltaState is compared, and one the prediction missed because an input
    // landed a tick earlier or later, or because a wall refused a move, is explained by the
    // record (timing slips, `move_refused`), not corrected. Time in play is the DeltaStates
    // applied: one per 1/60 s tick per bot.
    let pe = at(&s, "protocol_metrics.prediction_error");
    let corrections = declared_counter(&s, "corrections");
    let applied = u64_at(&s, "snapshots_applied");
    let bot_minutes = applied as f64 / 60.0 / 60.0;
    let per_bot_minute = corrections as f64 / bot_minutes;
    let refused = declared_counter(&s, "move_refused");
    let slips = declared_counter(&s, "prediction_timing_slips");
    eprintln!(
        "prediction_error: {pe}; corrections {corrections} in {applied} DeltaStates \
         ({bot_minutes:.2} bot-minutes, {per_bot_minute:.2} per bot-minute); timing slips \
         {slips}; move_refused {refused}, peer refused {}",
        peer.stat("refused")
    );
    assert!(
        bot_minutes > 20.0 * 19.0 / 60.0,
        "{applied} DeltaStates applied"
    );
    assert!(u64_at(pe, "count") + 20 >= applied, "{pe}");
    assert!(u64_at(pe, "p50") <= 1, "{pe}");
    assert!(u64_at(pe, "p99") <= 1, "{pe}");
    assert!(
        per_bot_minute <= 1.0,
        "{corrections} corrections in {bot_minutes:.2} bot-minutes"
    );
    // The peer's walls refuse moves; the bots count each refusal the peer counted, apart from
    // those in a DeltaState still on the wire when they stopped.
    let peer_refused = peer.stat("refused");
    assert!(refused > 0, "the walks meet the peer's walls");
    assert!(
        refused <= peer_refused + 20 && peer_refused <= refused + 20,
        "bots {refused}, peer {peer_refused}"
    );
}

/// A peer table of 5 and 8 bots: the 3 left over get no reply at all and are counted failed
/// ("transport connect timed out") within the scenario's handshake_timeout.
#[test]
fn bots_beyond_the_peer_table_are_failures() {
    let _one = one_at_a_time();
    let mut peer = start_peer(&["--seconds", "40", "--tick-rate", "20", "--max-peers", "5"]);
    let s = run_text(
        &scenario(8, "3500ms", 20),
        &["--target", &format!("127.0.0.1:{}", peer.listening_port())],
        &[0, 1],
    )
    .1;
    peer.drain();
    eprintln!("summary: {s:#}");
    assert!(peer.alive());
    assert_eq!(s["bots"]["connected"], 5, "{}", s["errors"]);
    assert_eq!(s["bots"]["failed"], 3, "{}", s["bots"]);
}
