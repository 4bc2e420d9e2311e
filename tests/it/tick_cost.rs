//! `server.tick_cost_per_player` and `serve --tick-log`: a reference server given a cost per
//! player per tick spends at least players × cost in each tick, and its tick log says so,
//! second by second. Six cafe bots play for 4 s against `tickswarm serve cafe` with 500 µs a
//! player (a tick of at least 3,000 µs), and against the same server without a cost (ticks
//! far shorter), both at once to keep the test short; the bounds are one-sided, so they hold
//! on a loaded 2-core machine in a debug build: the spin guarantees the lower bound, and a
//! cafe tick for six players takes a few hundred µs at most even there.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::summary::{finish, run_command};

const BOTS: u64 = 6;
const COST_US: u64 = 500;

/// One line of a tick log: `t_s players ticks tick_p50_us tick_p99_us tick_max_us
/// over_budget`, the percentiles `None` in a second with no tick.
#[derive(Debug, Clone, Copy)]
struct Second {
    t_s: u64,
    players: u64,
    ticks: u64,
    p50: Option<u64>,
    p99: Option<u64>,
    max: Option<u64>,
    /// Ticks longer than the tick period (16,666 µs at 60 Hz).
    over: u64,
}

/// The tick period at the reference servers' default 60 Hz, as the log's header states it.
const BUDGET_US: u64 = 1_000_000 / 60;

fn read_log(path: &Path) -> Vec<Second> {
    let text = std::fs::read_to_string(path).expect("the tick log");
    let mut lines = text.lines();
    assert!(
        lines.next().is_some_and(|l| l.starts_with('#')),
        "a header first:\n{text}"
    );
    lines
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 7, "seven columns: `{l}`");
            let n = |s: &str| {
                s.parse::<u64>()
                    .unwrap_or_else(|_| panic!("`{s}` in `{l}`"))
            };
            let q = |s: &str| (s != "-").then(|| n(s));
            Second {
                t_s: n(f[0]),
                players: n(f[1]),
                ticks: n(f[2]),
                p50: q(f[3]),
                p99: q(f[4]),
                max: q(f[5]),
                over: n(f[6]),
            }
        })
        .collect()
}

/// `serve cafe` with `serve_args` and a tick log, six bots against it for 4 s, then the log.
fn swarm_against_serve(dir: &Path, serve_args: &[&str]) -> Vec<Second> {
    let log = dir.join("ticks.log");
    let log_arg = log.to_str().expect("a UTF-8 path");
    let mut args = serve_args.to_vec();
    args.extend(["--tick-log", log_arg]);
    let (mut server, addr) = crate::common::serve::serve("cafe", &args);
    let scenario = dir.join("s.yaml");
    std::fs::write(
        &scenario,
        format!(
            "name: tick-cost\nprotocol:\n  cafe: {{}}\ntarget: {addr}\npopulation:\n  stages:\n    \
             - ramp_to: {BOTS}\n      over: 0s\nbehaviour:\n  input_rate: 10\n  \
             ping_interval: 500ms\nduration: 4s\nseed: 7\n"
        ),
    )
    .unwrap();
    let run = run_command(&scenario, &["--quiet", "--force"], &dir.join("out"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run the swarm");
    // The seconds the bots played in are over; the serve command writes each within 200 ms
    // of its end. Every line is one write, so killing the server leaves whole lines.
    std::thread::sleep(Duration::from_millis(1200));
    let _ = server.kill();
    let _ = server.wait();
    finish(&run, &dir.join("out"), &[0]);
    read_log(&log)
}

/// The seconds all `BOTS` players were in from start to end (as were they at the end of the
/// second before).
fn full_seconds(log: &[Second]) -> Vec<Second> {
    log.windows(2)
        .filter(|w| w[0].players == BOTS && w[1].players == BOTS)
        .map(|w| w[1])
        .collect()
}

#[test]
fn a_tick_costs_players_times_the_cost_and_the_tick_log_shows_it() {
    let (with, without) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cost = format!("{COST_US}us");
    let (costly, free) = std::thread::scope(|s| {
        let costly = s
            .spawn(|| swarm_against_serve(with.path(), &["--tick-cost-per-player", cost.as_str()]));
        let free = s.spawn(|| swarm_against_serve(without.path(), &[]));
        (costly.join().unwrap(), free.join().unwrap())
    });

    // Whole seconds, one a line, in order from 1.
    for log in [&costly, &free] {
        let t: Vec<u64> = log.iter().map(|s| s.t_s).collect();
        assert_eq!(t, (1..=t.len() as u64).collect::<Vec<_>>(), "{log:#?}");
    }

    let full = full_seconds(&costly);
    eprintln!("with {cost} a player, the seconds {BOTS} played through: {full:?}");
    assert!(
        !full.is_empty(),
        "no second with {BOTS} players throughout: {costly:#?}"
    );
    for s in &full {
        // At 60 Hz a tick of ~3 ms still fits its 16.7 ms: the server keeps ticking.
        assert!(s.ticks >= 10, "{s:?}");
        let (p50, p99, max) = (s.p50.unwrap(), s.p99.unwrap(), s.max.unwrap());
        assert!(
            p50 >= BOTS * COST_US,
            "tick p50 {p50} µs < {BOTS} × {COST_US} µs: {s:?}"
        );
        assert!(p50 <= p99 && p99 <= max, "{s:?}");
        // A second whose longest tick fits the period has none over it.
        assert!(max > BUDGET_US || s.over == 0, "{s:?}");
        assert!(s.over <= s.ticks, "{s:?}");
    }

    let full = full_seconds(&free);
    eprintln!("without a cost, the seconds {BOTS} played through: {full:?}");
    assert!(
        !full.is_empty(),
        "no second with {BOTS} players throughout: {free:#?}"
    );
    for s in &full {
        let p50 = s.p50.unwrap();
        assert!(p50 < 2500, "tick p50 {p50} µs with no cost: {s:?}");
    }
}

/// Ground truth for `over_budget`: at 3 ms a player, six players make every tick 18 ms, past
/// the 16.7 ms period, so in each second they played through every tick is over it.
#[test]
fn every_tick_past_the_period_is_counted_over_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let log = swarm_against_serve(dir.path(), &["--tick-cost-per-player", "3ms"]);
    let full = full_seconds(&log);
    assert!(
        !full.is_empty(),
        "no second with {BOTS} players throughout: {log:#?}"
    );
    for s in &full {
        assert!(s.p50.is_some_and(|p| p >= BOTS * 3_000), "{s:?}");
        assert_eq!(s.over, s.ticks, "every tick is over the period: {s:?}");
    }
}

#[test]
fn a_cost_above_100ms_is_refused_by_flag_and_by_scenario() {
    let o = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .args([
            "serve",
            "cafe",
            "--port",
            "0",
            "--tick-cost-per-player",
            "101ms",
        ])
        .output()
        .expect("run serve");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("server.tick_cost_per_player must be at most 100ms"),
        "{err}"
    );

    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.yaml");
    std::fs::write(
        &file,
        "name: too-costly\nprotocol:\n  cafe: {}\nserver:\n  tick_cost_per_player: 1s\n\
         population:\n  stages:\n    - ramp_to: 1\n      over: 0s\nduration: 1s\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .args(["serve", "cafe", "--port", "0", "--scenario"])
        .arg(&file)
        .output()
        .expect("run serve");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("got 1s"), "{err}");
}
