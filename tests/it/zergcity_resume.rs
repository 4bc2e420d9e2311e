//! A reconnect storm resumes sessions where the protocol has a reconnect token: the real
//! binary runs ZergCity `dialect: implementation` bots against two embedded reference
//! servers over ENet on loopback. Half the population (one group) drops at 2 s without a
//! goodbye; each victim comes back with the player id and token the engine kept for it
//! (`Bot::resume_state`) and sends Reconnect. Counts are exact, per group: who resumed, who
//! was refused and joined anew, and the time from the drop to play, one sample each.

use serde_json::Value;

use crate::common::summary::{at, run_text, server_event, u64_at, u64_of};

/// 4 bots over 2 four-player servers (2 each: a refused bot's rejoin always finds a free
/// player id), half of them in the `stormy` group, whose every session drops at 2 s; 4 s
/// after it for a refused bot's second handshake on a loaded machine.
fn scenario(server_extra: &str) -> String {
    scenario_with(server_extra, "")
}

/// [`scenario`] with `stormy_extra` (indented keys) added to the `stormy` group.
fn scenario_with(server_extra: &str, stormy_extra: &str) -> String {
    format!(
        "name: zergcity-resume
protocol:
  zergcity:
    dialect: implementation
target: embedded
server:
  players_per_instance: 4
  instances: 2
{server_extra}population:
  stages:
    - ramp_to: 4
      over: 0s
    - hold: 6s
behaviour:
  input_rate: 5
  ping_interval: 250ms
  handshake_timeout: 3s
duration: 6s
seed: 11
groups:
  - name: steady
    share: 50%
  - name: stormy
    share: 50%
{stormy_extra}    lifecycle:
      reconnect_storm:
        at: 2s
        share: 100%
"
    )
}

/// The sample count of histogram `key` in `pm` (a group's `protocol_metrics`): a histogram
/// with no sample is absent and reads 0, so the key must be one the engine records (a
/// renamed histogram fails instead of reading 0).
fn samples(pm: &Value, key: &str) -> u64 {
    let worker = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine/worker.rs"),
    )
    .expect("src/engine/worker.rs");
    assert!(
        worker.contains(&format!("record_extra(\"{key}\"")),
        "the engine records no histogram `{key}`"
    );
    assert!(pm.is_object(), "no protocol_metrics: {pm}");
    pm.get(key).map_or(0, |h| u64_at(h, "count"))
}

/// Counter `key` of `pm` (a group's `protocol_metrics`): the run must declare it (in `s`'s
/// `protocol_metric_info`); a declared counter that never fired is absent and reads 0.
fn group_counter(s: &Value, pm: &Value, key: &str) -> u64 {
    assert!(
        at(s, "protocol_metric_info").get(key).is_some(),
        "`{key}` is not a counter this run declares"
    );
    assert!(pm.is_object(), "no protocol_metrics: {pm}");
    pm.get(key).map_or(0, u64_of)
}

/// The servers hold a dropped player's token for 30 s: both victims resume (JoinAccept to
/// their Reconnect, the same player id), none is refused, and each way back is timed once.
#[test]
fn every_storm_victim_resumes_with_its_token() {
    let s = run_text(&scenario(""), &["--quiet"], &[0, 1]).1;
    let g = &s["groups"]["stormy"];
    let done = &g["lifecycle"]["done"];
    assert_eq!(u64_at(done, "storm_drops"), 2, "{g:#}");
    assert_eq!(u64_at(done, "storm_reconnects"), 2, "{g:#}");
    assert_eq!(u64_at(done, "storm_resumed"), 2, "{g:#}");
    assert_eq!(u64_at(done, "storm_resume_refused"), 0, "{g:#}");
    let pm = &g["protocol_metrics"];
    assert_eq!(u64_at(pm, "lifecycle_resume_us.count"), 2, "{pm:#}");
    // Drop to play again: an ENet connect and a Reconnect on loopback, well under the
    // handshake_timeout the bots were given.
    assert!(u64_at(pm, "lifecycle_resume_us.max") < 3_000_000, "{pm:#}");
    assert_eq!(samples(pm, "lifecycle_rejoin_us"), 0, "{pm:#}");
    assert_eq!(group_counter(&s, pm, "resume_refused"), 0, "{pm:#}");
    // Two original sessions and two resumed ones, all in play; none failed.
    assert_eq!(u64_at(g, "bots.connected"), 4, "{g:#}");
    assert_eq!(u64_at(&s, "bots.connected"), 6, "{}", s["errors"]);
    assert_eq!(u64_at(&s, "bots.failed"), 0, "{}", s["errors"]);
    // The untouched group has no lifecycle and nothing to resume.
    let steady = at(&s, "groups.steady");
    assert!(
        steady.get("lifecycle").is_none_or(Value::is_null),
        "{steady:#}"
    );
    assert_eq!(
        samples(at(steady, "protocol_metrics"), "lifecycle_resume_us"),
        0,
        "{steady:#}"
    );
    // The servers: 4 Joins and 2 Reconnects accepted, nothing refused.
    let server = &s["protocol_metrics"]["embedded_server"];
    assert_eq!(u64_at(server, "accepted"), 6, "{server:#}");
    assert_eq!(u64_at(server, "refused"), 0, "{server:#}");
}

/// The servers forget a session the moment its connection drops (`session_grace: 0s`):
/// a victim's Reconnect is refused (JoinReject), counted, and the bot joins anew on a new
/// ENet session within its handshake_timeout; nobody hangs or fails.
///
/// The one exception is a race the real server has too: a Reconnect that arrives before
/// the server has seen the old connection end finds the session still held, resumes it and
/// kicks the old connection (`duplicate_session_kicked`). On a quiet machine the drop's
/// ENet disconnect is handled first and both victims are refused; on a loaded one a victim
/// can win the race. So the accounting is exact either way: every victim is resumed or
/// refused, each resumption is a kick the server counted, and each refusal one it sent.
#[test]
fn a_forgotten_token_is_refused_and_the_victim_rejoins() {
    let s = run_text(&scenario("  session_grace: 0s\n"), &["--quiet"], &[0, 1]).1;
    let g = &s["groups"]["stormy"];
    let done = &g["lifecycle"]["done"];
    let server = &s["protocol_metrics"]["embedded_server"];
    let kicked = server_event(&s, "duplicate_session_kicked");
    assert_eq!(u64_at(done, "storm_drops"), 2, "{g:#}");
    let resumed = u64_at(done, "storm_resumed");
    let refused = u64_at(done, "storm_resume_refused");
    assert_eq!(resumed + refused, 2, "{g:#}");
    assert_eq!(
        resumed, kicked,
        "each resumption took over a live session: {server:#}"
    );
    eprintln!("refused {refused}, resumed before the server saw the drop {resumed}");
    let pm = &g["protocol_metrics"];
    assert_eq!(group_counter(&s, pm, "resume_refused"), refused, "{pm:#}");
    assert_eq!(samples(pm, "lifecycle_rejoin_us"), refused, "{pm:#}");
    assert_eq!(samples(pm, "lifecycle_resume_us"), resumed, "{pm:#}");
    assert_eq!(u64_at(g, "bots.connected"), 4, "{g:#}");
    assert_eq!(u64_at(&s, "bots.failed"), 0, "{}", s["errors"]);
    assert_eq!(u64_at(&s, "bots.connected"), 6, "{}", s["errors"]);
    assert_eq!(u64_at(&s, "bots.never_connected"), 0, "{}", s["errors"]);
    assert_eq!(u64_at(server, "refused"), refused, "{server:#}");
    assert_eq!(u64_at(server, "accepted"), 6, "{server:#}");
}

/// The time from the drop to play again, against a known delay: the stormy group's link
/// holds every datagram 40 ms each way (`network:`), so a resumption, an ENet connect
/// (CONNECT, VERIFY_CONNECT) and then a Reconnect answered by JoinAccept, takes at least
/// two 80 ms round trips: no sample may be under 160 ms. The group's own RTT shows the link.
#[test]
fn resume_time_holds_the_round_trips_of_an_injected_delay() {
    let s = run_text(
        &scenario_with("", "    network:\n      latency: 40ms\n"),
        &["--quiet"],
        &[0, 1],
    )
    .1;
    let g = &s["groups"]["stormy"];
    assert_eq!(u64_at(g, "lifecycle.done.storm_resumed"), 2, "{g:#}");
    let pm = &g["protocol_metrics"];
    let resume = &pm["lifecycle_resume_us"];
    assert_eq!(u64_at(resume, "count"), 2, "{pm:#}");
    assert!(
        u64_at(resume, "min") >= 160_000,
        "resumed in {resume} µs, under 2 × 80 ms"
    );
    assert!(u64_at(resume, "max") < 3_000_000, "{resume}");
    assert!(u64_at(g, "rtt_us.min") >= 80_000, "{}", g["rtt_us"]);
    // The steady group's link adds nothing.
    assert!(u64_at(&s, "groups.steady.rtt_us.min") < 80_000);
}
