//! ZergCity `dialect: implementation` against C libenet peers that speak the real game server
//! of Blubagoo/sims_3000 as docs/protocols/zergcity.md describes it
//! (tests/peers/zergcity-implementation/zergcity_impl_peer.c, written from the wire facts
//! alone): 5-byte envelope, ServerStatus on connect, Join/JoinAccept with a player id and a
//! token, PlayerList, Heartbeats both ways (its own every second, a client without one for
//! 10 s dropped), the 30-byte Input, StateUpdates on ticks with changes (LZ4 above 1024
//! bytes), 4 ENet peers (a fifth connect gets no reply).
//!
//! Every run uses the shipped scenarios/zergcity-implementation.yaml through the CLI's flags
//! (`--target` with the peers' ports, `--bots`, `--duration`, `--out`). The peers print their
//! own counts (STATS lines), which the tests hold the bots' figures against.
//!
//! The peer is built here with `cc`; it needs libenet-dev and liblz4-dev
//! (`scripts/install-test-deps.sh`). These tests fail (never skip) without them.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::kernel::{assert_pass_on_a_loaded_machine, UdpDrops};
use crate::common::peer::Peer;
use crate::common::summary::{
    at, crate_file, declared_counter, emitted_counter, f64_at, run_file, u64_at,
};

const INSTALL_HINT: &str = "run scripts/install-test-deps.sh (installs libenet-dev, liblz4-dev)";

fn peer_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(build_peer)
}

/// Build the peer into the test temp dir, as its Makefile does.
fn build_peer() -> PathBuf {
    crate::common::c_peer::CPeer {
        src: "tests/peers/zergcity-implementation/zergcity_impl_peer.c",
        name: "zergcity_impl_peer",
        pkgs: &["libenet", "liblz4"],
        fallback_libs: "-lenet -llz4",
        cflags: &[],
        libs: &[],
        install_hint: INSTALL_HINT,
    }
    .build()
}

/// A peer on a free port, killed on drop.
fn start_peer(args: &[&str]) -> Peer {
    Peer::c("zergcity implementation peer", peer_bin(), args)
}

/// Wait for the next STATS line (printed every second), so the counts include everything
/// the bots sent before they left.
fn settle(p: &mut Peer) {
    p.drain();
    p.wait_for(Duration::from_secs(3), |l| l.starts_with("STATS "));
}

/// `--target` for `targets`, comma-separated.
fn target_list<T: std::fmt::Display>(targets: &[T]) -> String {
    targets
        .iter()
        .map(|t| format!("127.0.0.1:{t}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

const SCENARIO: &str = "scenarios/zergcity-implementation.yaml";

fn sum(peers: &[Peer], key: &str) -> u64 {
    peers.iter().map(|p| p.stat(key)).sum()
}

/// The shipped scenario as it is (20 bots, 15 s) against five clean peers: PASS. Four bots
/// per peer joined, inputs reached them intact (30 bytes, the player id JoinAccept gave),
/// StateUpdates applied, the server's own heartbeats heard, nobody dropped for silence, and
/// the reconnections the scenario asks for got their player ids back.
#[test]
fn the_shipped_scenario_passes_against_five_peers() {
    let _one = one_at_a_time();
    let mut peers: Vec<Peer> = (0..5).map(|_| start_peer(&["--seconds", "40"])).collect();
    let ports: Vec<u16> = peers.iter().map(|p| p.listening_port()).collect();
    let kernel = UdpDrops::now();
    let (o, s) = run_file(
        &crate_file(SCENARIO),
        &["--target", &target_list(&ports)],
        &[0, 1, 3],
    );
    let code = o.status.code();
    let dropped = kernel.since();
    peers.iter_mut().for_each(settle);
    eprintln!("summary: {s:#}");
    assert!(matches!(code, Some(0 | 1)), "exit {code:?}");
    assert_pass_on_a_loaded_machine(&s, dropped);
    assert_eq!(s["dialect"], "implementation");
    assert_eq!(s["bots"]["connected"], 20, "{}", s["errors"]);
    for p in &peers {
        assert_eq!(p.stat("joins"), 4, "{:?}", p.log.last());
        assert_eq!(p.stat("bad_inputs"), 0, "{:?}", p.log.last());
        assert_eq!(p.stat("silence_drops"), 0, "{:?}", p.log.last());
        assert_eq!(p.stat("dropped"), 0);
    }
    assert_eq!(s["errors"]["decode_total"], 0, "{}", s["errors"]);
    let sent = u64_at(&s, "inputs_sent");
    let received = sum(&peers, "inputs");
    // Inputs are reliable: all arrive, bar those still queued when the bots left (one
    // second's worth at most: 20 bots at 5 a second).
    assert!(sent > 20 * 5 * 10, "{sent} inputs sent");
    assert!(
        received <= sent && received + 100 >= sent,
        "sent {sent}, peers got {received}"
    );
    let applied = u64_at(&s, "snapshots_applied");
    assert!(
        applied > 0 && applied <= 4 * sum(&peers, "updates"),
        "{applied}"
    );
    let pm = &s["protocol_metrics"];
    assert!(declared_counter(&s, "server_heartbeats") >= 20 * 10, "{pm}");
    assert_eq!(s["loss"]["upstream"]["rate"], 0.0, "{}", s["loss"]);
    assert!(
        at(&s, "loss.downstream").is_null(),
        "not measurable: {}",
        s["loss"]
    );
    // A quarter of the bots dropped their session once and came back with Reconnect and
    // their token, to the same player id.
    let reconnects = declared_counter(&s, "reconnect_attempts");
    assert!(reconnects > 0, "{pm}");
    assert_eq!(
        declared_counter(&s, "reconnect_slot_restored"),
        reconnects,
        "{pm}"
    );
    assert_eq!(
        u64_at(&s, "protocol_metrics.reconnect_us.count"),
        reconnects,
        "{pm}"
    );
    assert_eq!(sum(&peers, "reconnects"), reconnects);
}

/// Faults injected at the peers: every 10th Heartbeat lost on the way (for the first 11 s,
/// so every loss is resolved before the run ends), every echo held 30 ms, every 5th
/// StateUpdate over 1024 bytes (LZ4). 21 bots over 5 peers of 4: the 21st, dealt to the
/// first peer again, is counted failed with the reason the peer's own counts give (no reply,
/// or `server_full` when it slipped in while a player reconnected). The bots' upstream loss
/// is the peers' own drop count within ±0.5 pp; every RTT is at least the 30 ms hold.
#[test]
fn loss_and_rtt_match_the_injected_faults_and_the_fifth_bot_is_refused() {
    let _one = one_at_a_time();
    let args = [
        "--seconds",
        "40",
        "--drop-heartbeat-every",
        "10",
        "--drop-for",
        "11",
        "--heartbeat-delay-ms",
        "30",
        "--big-every",
        "5",
    ];
    let mut peers: Vec<Peer> = (0..5).map(|_| start_peer(&args)).collect();
    let ports: Vec<u16> = peers.iter().map(|p| p.listening_port()).collect();
    let (_, s) = run_file(
        &crate_file(SCENARIO),
        &["--target", &target_list(&ports), "--bots", "21"],
        &[0, 1, 3],
    );
    peers.iter_mut().for_each(settle);
    eprintln!("summary: {s:#}");
    for p in &peers {
        eprintln!("peer {}: {:?}", p.listening_port(), p.log.last());
    }

    // The 21st bot, dealt to the first peer again, is failed one of the two ways the real
    // server refuses: its ENet connect is never answered while the 4 peers are taken
    // ("transport connect timed out"); or, when a reconnecting player frees its peer for an
    // instant and the retried connect gets in, its Join is refused with `server_full` (the
    // 4 player ids are held by players in game or in their grace period) and the peer
    // counts the refusal.
    assert_eq!(s["bots"]["connected"], 20, "{}", s["errors"]);
    assert_eq!(s["bots"]["failed"], 1, "{}", s["bots"]);
    let refused_by_join = peers[0].stat("rejects");
    let expected = if refused_by_join == 1 {
        assert_eq!(peers[0].stat("joins"), 4);
        serde_json::json!({"server_full": 1})
    } else {
        assert_eq!(refused_by_join, 0);
        assert_eq!(
            peers[0].stat("connects"),
            4 + peers[0].stat("reconnects"),
            "the fifth connect never got in"
        );
        serde_json::json!({"transport connect timed out": 1})
    };
    assert_eq!(s["errors"]["connect"], expected, "{}", s["errors"]);
    for p in &peers {
        assert_eq!(p.stat("joins"), 4, "{:?}", p.log.last());
        assert_eq!(p.stat("silence_drops"), 0, "heartbeats kept every bot in");
        assert_eq!(p.stat("bad_inputs"), 0);
    }
    assert_eq!(s["bots"]["lost"], 0);
    assert_eq!(s["errors"]["decode_total"], 0, "{}", s["errors"]);

    // Upstream loss against the peers' own counts.
    let dropped = sum(&peers, "dropped");
    let heartbeats = sum(&peers, "heartbeats");
    let truth = dropped as f64 / heartbeats as f64;
    let measured = f64_at(&s, "loss.upstream.rate");
    eprintln!("upstream loss: bots {measured:.4}, peers {dropped}/{heartbeats} = {truth:.4}");
    assert!(dropped > 50, "{dropped} heartbeats dropped");
    assert!(
        (measured - truth).abs() <= 0.005,
        "bots {measured}, peers {truth}"
    );
    let pm = &s["protocol_metrics"];
    // Every drop is seen as a loss, except those still within the echo timeout when their
    // bot dropped its session on purpose (abandoned, not counted: at most the 4 heartbeats
    // of the 1 s timeout per reconnection).
    let lost = declared_counter(&s, "heartbeat_lost");
    let reconnects = declared_counter(&s, "reconnect_attempts");
    assert!(
        lost <= dropped && lost + 4 * reconnects >= dropped,
        "bots {lost}, peers {dropped}, {reconnects} reconnections"
    );
    // No echo the bots could not match (a counter the bots record undeclared, absent
    // when it never fired).
    assert_eq!(emitted_counter(&s, "heartbeat_echo_unmatched"), 0, "{pm}");

    // Reconnections (the scenario's reconnect_share): Reconnect with the token restored the
    // player id every time, as the peers counted.
    assert!(reconnects > 0, "{pm}");
    assert_eq!(
        declared_counter(&s, "reconnect_slot_restored"),
        reconnects,
        "{pm}"
    );
    assert_eq!(sum(&peers, "reconnects"), reconnects);

    // RTT from the echoes: never under the hold.
    let rtt_min = u64_at(&s, "rtt_us.min");
    assert_eq!(s["rtt_source"], "protocol_ping");
    assert!(
        rtt_min >= 30_000,
        "rtt min {rtt_min} µs under the 30 ms hold"
    );

    // StateUpdates: the LZ4 ones decoded too.
    let compressed = sum(&peers, "compressed");
    let got_compressed = declared_counter(&s, "state_update_compressed");
    assert!(compressed > 0, "the peers compressed none");
    assert!(
        got_compressed > 0 && got_compressed <= 4 * compressed,
        "bots applied {got_compressed} compressed of {compressed} sent to up to 4 each"
    );
    let sent = u64_at(&s, "inputs_sent");
    let received = sum(&peers, "inputs");
    assert!(
        received <= sent && received + 100 >= sent,
        "sent {sent}, peers got {received}"
    );
}

/// The spec dialect against the real server's bytes: every message is a decode error, and
/// the bots say which dialect the bytes fit (`dialect_hint.implementation`). No bot gets in,
/// but the server answered: tickswarm exits 1 (not 3, target unreachable), with the
/// dialect to set as the verdict's reason.
#[test]
fn the_spec_dialect_names_the_implementation() {
    let _one = one_at_a_time();
    let mut peer = start_peer(&["--seconds", "20"]);
    let (o, s) = run_file(
        &crate_file("scenarios/zergcity.yaml"),
        &[
            "--target",
            &target_list(&[peer.listening_port()]),
            "--bots",
            "2",
            "--duration",
            "3s",
        ],
        &[0, 1, 3],
    );
    let code = o.status.code();
    assert_eq!(code, Some(1), "a server that answers is reachable");
    settle(&mut peer);
    let pm = &s["protocol_metrics"];
    let hints = declared_counter(&s, "dialect_hint.implementation");
    assert!(hints >= 1, "{pm}");
    assert_eq!(
        s["errors"]["decode_total"], hints,
        "every message refused fits the implementation dialect: {}",
        s["errors"]
    );
    assert_eq!(s["bots"]["connected"], 0);
}

/// A reconnect storm against the independent peer: both bots of the `stormy` group drop
/// their ENet session at 2 s without a goodbye and come back with the player id and token
/// the engine kept for them: the peer counts two Reconnects honoured (same player ids) and
/// no new Join beyond the first two, and the bots count two resumed sessions.
#[test]
fn storm_victims_resume_on_the_peer_with_their_tokens() {
    let _one = one_at_a_time();
    let mut peer = start_peer(&["--seconds", "20"]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let scenario = tmp.path().join("storm.yaml");
    let text = "name: zergcity-implementation-storm
protocol:
  zergcity:
    dialect: implementation
target: 127.0.0.1:1
population:
  stages:
    - ramp_to: 2
      over: 0s
    - hold: 4s
behaviour:
  input_rate: 5
  ping_interval: 250ms
  handshake_timeout: 3s
duration: 4s
seed: 5
groups:
  - name: stormy
    share: 100%
    lifecycle:
      reconnect_storm:
        at: 2s
        share: 100%
";
    std::fs::write(&scenario, text).expect("write the scenario");
    let (_, s) = run_file(
        &scenario,
        &["--target", &target_list(&[peer.listening_port()])],
        &[0, 1, 3],
    );
    settle(&mut peer);
    eprintln!("peer: {:?}", peer.log.last());
    let done = &s["groups"]["stormy"]["lifecycle"]["done"];
    assert_eq!(done["storm_drops"], 2, "{done}");
    assert_eq!(done["storm_resumed"], 2, "{done}");
    assert_eq!(done["storm_resume_refused"], 0, "{done}");
    assert_eq!(peer.stat("joins"), 2, "{:?}", peer.log.last());
    assert_eq!(peer.stat("reconnects"), 2, "{:?}", peer.log.last());
    assert_eq!(peer.stat("rejects"), 0, "{:?}", peer.log.last());
    assert_eq!(s["bots"]["connected"], 4, "{}", s["errors"]);
    assert_eq!(s["errors"]["decode_total"], 0, "{}", s["errors"]);
}
