//! `tickswarm inspect` and `tickswarm relay --record`: a real run recorded by the relay and
//! read back names the protocol and dialect of every flow and counts the inputs the bots
//! say they sent; a capture of the wrong dialect shows the first byte where it fails; hostile
//! capture files give a clear error.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

use crate::common::peer::Peer;
use crate::common::serve::serve;
use crate::common::summary::{at, f64_at, run_scenario, str_at, u64_at, u64_of};

fn tickswarm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tickswarm"))
}

/// A relay with no conditions (no `--profile`) recording to `file`; its listening address.
fn relay(target: &str, file: &Path) -> (Child, String) {
    let mut child = tickswarm()
        .args(["relay", "--listen", "127.0.0.1:0", "--target", target])
        .arg("--record")
        .arg(file)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start relay");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("first line");
    let addr = first
        .split_whitespace()
        .nth(3)
        .map(|a| a.trim_end_matches(',').to_string())
        .unwrap_or_else(|| panic!("no address in {first:?}"));
    (child, addr)
}

fn stop(mut child: Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let _ = child.wait();
}

fn inspect_json(file: &Path) -> Value {
    let o = tickswarm()
        .arg("inspect")
        .arg(file)
        .arg("--json")
        .output()
        .expect("inspect runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("inspect --json is JSON")
}

fn inspect_err(bytes: &[u8]) -> (Output, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("c.pcap");
    std::fs::write(&file, bytes).expect("write");
    let o = tickswarm()
        .arg("inspect")
        .arg(&file)
        .output()
        .expect("inspect runs");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    (o, err)
}

#[test]
fn a_recorded_cafe_run_is_named_per_flow_and_its_inputs_are_the_bots_own_count() {
    for dialect in ["spec", "implementation"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (summary, ins) = record_game(dir.path(), "cafe", "dialect", dialect);
        let flows = at(&ins, "flows").as_array().expect("flows");
        assert_eq!(flows.len(), 3, "one flow per bot");
        let mut inputs = 0;
        for f in flows {
            assert_eq!(str_at(f, "protocol"), "cafe");
            assert_eq!(str_at(f, "dialect"), dialect);
            inputs += u64_at(f, "behaviour.inputs");
            let rate = f64_at(f, "behaviour.input_rate_hz");
            assert!((rate - 20.0).abs() < 1.0, "input rate {rate}");
            assert!(u64_of(at(f, "behaviour.rtt_ms.0")) > 0, "ping/pong pairs");
            // The other dialect fails, and says at which byte and what it expected.
            let other = at(f, "candidates.1");
            assert_eq!(str_at(other, "protocol"), "cafe");
            assert_ne!(str_at(other, "dialect"), dialect);
            assert!(f64_at(other, "share") < 0.9);
            let offset = u64_at(other, "first_failure.offset");
            // Where the other dialect's records would start (header 8 + fixed part 6 in spec,
            // 12 in implementation), or the implementation dialect's count (18).
            assert!(
                [14, 18, 20].contains(&offset),
                "the snapshot's records or count: {offset}"
            );
            assert!(str_at(other, "first_failure.expected").contains(dialect));
        }
        let sent = u64_at(&summary, "inputs_sent");
        let diff = (inputs as f64 - sent as f64).abs() / sent as f64;
        assert!(
            diff <= 0.01,
            "capture {inputs} inputs, the bots sent {sent}"
        );
    }
}

#[test]
fn a_flow_no_protocol_reads_says_so_with_its_rates() {
    // A pcap by hand: header (µs, link type raw IPv4), two UDP datagrams of "hello" 127.0.0.1
    // 5000 → 127.0.0.2 6000, 0.1 s apart.
    let mut f = vec![0xD4, 0xC3, 0xB2, 0xA1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    f.extend_from_slice(&[0xFF, 0xFF, 0, 0, 101, 0, 0, 0]);
    for usec in [0u32, 100_000] {
        f.extend_from_slice(&[0x10, 0, 0, 0]);
        f.extend_from_slice(&usec.to_le_bytes());
        f.extend_from_slice(&[33, 0, 0, 0, 33, 0, 0, 0]);
        // IPv4: 45 00, length 33, id, flags, ttl 64, UDP (17), checksum 0 (not checked).
        f.extend_from_slice(&[
            0x45, 0, 0, 33, 0, 0, 0, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2,
        ]);
        f.extend_from_slice(&[0x13, 0x88, 0x17, 0x70, 0, 13, 0, 0]);
        f.extend_from_slice(b"hello");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("unknown.pcap");
    std::fs::write(&file, &f).expect("write");
    let ins = inspect_json(&file);
    let flow = at(&ins, "flows.0");
    assert!(at(flow, "protocol").is_null(), "no protocol named");
    assert_eq!(u64_at(flow, "to_server.datagrams"), 2);
    assert!((f64_at(flow, "to_server.rate_hz") - 20.0).abs() < 1e-6);
    let text = tickswarm()
        .arg("inspect")
        .arg(&file)
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("none tickswarm knows reads this flow"),
        "{text}"
    );
}

#[test]
fn hostile_captures_give_clear_errors() {
    // Not a capture at all.
    let (o, err) = inspect_err(b"this is not a capture file at all, just text");
    assert!(
        !o.status.success() && err.contains("not a pcap or pcapng"),
        "{err}"
    );
    // A pcap header of link type 105 (IEEE 802.11).
    let mut h = vec![0xD4, 0xC3, 0xB2, 0xA1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    h.extend_from_slice(&[0xFF, 0xFF, 0, 0, 105, 0, 0, 0]);
    let (o, err) = inspect_err(&h);
    assert!(
        !o.status.success() && err.contains("link type 105"),
        "{err}"
    );
    // A raw-IP pcap whose one record claims 4 GiB and ends: truncated, refused without
    // allocating what it claims.
    let mut t = h.clone();
    t[20] = 101;
    t.extend_from_slice(&[
        0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
    ]);
    t.extend_from_slice(&[0x45, 0, 0]);
    let (o, err) = inspect_err(&t);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("truncated") || err.contains("unreadable block"),
        "{err}"
    );
}

/// `tickswarm inspect CAPTURE --write-scenario FILE`.
fn write_scenario(capture: &Path, file: &Path) -> Output {
    tickswarm()
        .arg("inspect")
        .arg(capture)
        .arg("--write-scenario")
        .arg(file)
        .output()
        .expect("inspect runs")
}

/// The address in the cafe peer's ready line (`listening on 127.0.0.1:PORT`).
fn peer_addr(peer: &Peer) -> String {
    let line = peer.ready_line();
    line.rsplit(' ')
        .next()
        .filter(|a| a.starts_with("127.0.0.1:"))
        .unwrap_or_else(|| panic!("no address in the cafe peer's {line:?}"))
        .to_string()
}

/// The masks an input log (the cafe peer's `--log-inputs`) holds per client, in order.
fn inputs_per_client(log: &Path) -> Vec<Vec<u16>> {
    let text = std::fs::read_to_string(log).expect("the peer's input log");
    let mut clients: Vec<(String, Vec<u16>)> = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(client), Some(_), Some(mask)) = (f.next(), f.next(), f.next()) else {
            panic!("input log line {line:?}");
        };
        let mask: u16 = mask.parse().expect("a mask");
        match clients.iter_mut().find(|(c, _)| c == client) {
            Some((_, v)) => v.push(mask),
            None => clients.push((client.to_string(), vec![mask])),
        }
    }
    clients.into_iter().map(|(_, v)| v).collect()
}

/// Runs of equal masks: (mask, inputs), the first and last (cut by the run's ends) left out.
fn whole_runs(masks: &[u16]) -> Vec<(u16, usize)> {
    let mut runs: Vec<(u16, usize)> = Vec::new();
    for &m in masks {
        match runs.last_mut() {
            Some((k, n)) if *k == m => *n += 1,
            _ => runs.push((m, 1)),
        }
    }
    runs.pop();
    if !runs.is_empty() {
        runs.remove(0);
    }
    runs
}

/// The script both swarms are held to: keys (cafe's mask) and inputs at 50 Hz per step.
const SCRIPT: [(u16, usize); 4] = [(0x01, 10), (0x14, 15), (0x00, 5), (0x02, 20)];

/// Every run follows the script's cyclic order from wherever it entered, each as long as its
/// step within two inputs (a capture time late by a few ms moves a step by one input).
fn assert_follows_script(runs: &[(u16, usize)], who: &str) {
    assert!(
        runs.len() >= 4,
        "{who}: at least one whole loop, got {runs:?}"
    );
    let start = SCRIPT
        .iter()
        .position(|s| s.0 == runs[0].0)
        .unwrap_or_else(|| panic!("{who}: mask {:#x} is not in the script", runs[0].0));
    for (i, &(mask, n)) in runs.iter().enumerate() {
        let (want, len) = SCRIPT[(start + i) % SCRIPT.len()];
        assert_eq!(mask, want, "{who}: run {i} of {runs:?}");
        assert!(
            n.abs_diff(len) <= 2,
            "{who}: run {i} held {n} inputs, the script {len}: {runs:?}"
        );
    }
}

/// The replayed runs follow the written steps in order from some step on, looped, each
/// held for its duration at the written input rate (within 1.5 inputs: the bot samples the
/// stream on its own grid).
fn assert_follows_steps(runs: &[(u16, usize)], steps: &[(u16, f64)], rate: f64, who: &str) {
    // As a loop plays them: a step with the keys of the one before it (the stream's last
    // and first) is one run.
    let mut looped: Vec<(u16, f64)> = Vec::new();
    for &(mask, ms) in steps {
        match looped.last_mut() {
            Some(l) if l.0 == mask => l.1 += ms,
            _ => looped.push((mask, ms)),
        }
    }
    if looped.len() > 1 && looped[0].0 == looped[looped.len() - 1].0 {
        let (_, ms) = looped.pop().expect("two or more");
        looped[0].1 += ms;
    }
    let steps = looped.as_slice();
    assert!(
        runs.len() >= steps.len(),
        "{who}: one whole loop at least, got {runs:?}"
    );
    let fits = |start: usize| {
        runs.iter().enumerate().all(|(i, &(mask, n))| {
            let (want, ms) = steps[(start + i) % steps.len()];
            mask == want && (n as f64 - ms * rate / 1000.0).abs() <= 1.5
        })
    };
    assert!(
        (0..steps.len()).any(fits),
        "{who}: the runs {runs:?} do not follow the written steps {steps:?} at {rate} Hz"
    );
}

#[test]
fn a_written_scenario_replays_the_captured_keys_and_passes_against_the_server_it_was_captured_from()
{
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let peer_script = "tests/peers/cafe-impaired-server/cafe_impaired_server.py";
    // The capture: two scripted cafe bots through the recording relay to the independent
    // cafe server, which logs every input it accepts.
    let log1 = d.join("captured-inputs.log");
    let peer = Peer::python(
        "cafe server",
        peer_script,
        &["--log-inputs", log1.to_str().expect("utf-8")],
    );
    let captured_server = peer_addr(&peer);
    let capture = d.join("clients.pcapng");
    let (relay_child, listen) = relay(&captured_server, &capture);
    let scenario = d.join("scripted.yaml");
    std::fs::write(
        &scenario,
        format!(
            "name: scripted\nprotocol:\n  cafe: {{}}\ntarget: \"{listen}\"\n\
             population:\n  stages:\n    - ramp_to: 2\n      over: 0s\n    - hold: 4s\n\
             behaviour:\n  input_rate: 50\n  ping_interval: 250ms\n  pattern:\n    scripted:\n      steps:\n\
             \x20       - {{ keys: [up], for: 200ms }}\n\
             \x20       - {{ keys: [left, shoot], for: 300ms }}\n\
             \x20       - {{ keys: [], for: 100ms }}\n\
             \x20       - {{ keys: [down], for: 400ms }}\nduration: 4s\nseed: 3\n"
        ),
    )
    .expect("scenario");
    run_scenario(&scenario, &["--quiet"], &d.join("run1"), &[0]);
    stop(relay_child);
    drop(peer);
    for (i, masks) in inputs_per_client(&log1).iter().enumerate() {
        assert_follows_script(&whole_runs(masks), &format!("captured bot {i}"));
    }

    // The scenario written from it names the protocol, the server (the relay records the
    // datagrams as between the client and its target), the rates, and one client's keys as
    // a replay.
    let written = d.join("from-capture.yaml");
    let o = write_scenario(&capture, &written);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("2 bots of cafe, dialect spec"));
    let text = std::fs::read_to_string(&written).expect("the written scenario");
    let y: Value = serde_saphyr::from_str(&text).expect("YAML");
    assert_eq!(str_at(&y, "protocol.cafe.dialect"), "spec");
    assert_eq!(str_at(&y, "target"), captured_server);
    assert_eq!(u64_at(&y, "population.stages.0.ramp_to"), 2);
    let rate = f64_at(&y, "behaviour.input_rate");
    assert!((rate - 50.0).abs() <= 1.5, "input rate {rate}");
    // The clients' median ping interval, as measured (a busy machine moves it a little).
    let ping_ms: f64 = str_at(&y, "behaviour.ping_interval")
        .strip_suffix("ms")
        .and_then(|v| v.parse().ok())
        .expect("a ping interval in ms");
    assert!((ping_ms - 250.0).abs() <= 5.0, "ping interval {ping_ms} ms");
    let steps = at(&y, "behaviour.pattern.replay.steps")
        .as_array()
        .expect("steps");
    assert!(steps.len() >= 8, "two loops of the script at least: {text}");
    // The written stream is the captured one: the script's keys in its cyclic order (its
    // durations are the relay's receive times apart, which a busy machine can stretch).
    let written_steps: Vec<(u16, f64)> = steps
        .iter()
        .map(|st| {
            let keys = at(st, "keys").as_array().expect("keys");
            let mask = keys.iter().fold(0u16, |m, k| {
                m | match k.as_str().expect("a key name") {
                    "up" => 0x01,
                    "down" => 0x02,
                    "left" => 0x04,
                    "right" => 0x08,
                    "shoot" => 0x10,
                    other => panic!("key {other}"),
                }
            });
            let ms = str_at(st, "for")
                .strip_suffix("ms")
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("a duration in ms: {st}"));
            (mask, ms)
        })
        .collect();
    let first = SCRIPT
        .iter()
        .position(|s| s.0 == written_steps[0].0)
        .expect("a key of the script");
    for (i, (mask, _)) in written_steps.iter().enumerate() {
        assert_eq!(
            *mask,
            SCRIPT[(first + i) % SCRIPT.len()].0,
            "step {i}: {text}"
        );
    }
    // A second refusal without --force, and the file is left alone.
    let again = write_scenario(&capture, &written);
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(
        std::fs::read_to_string(&written).expect("still there"),
        text
    );

    // The replay against a fresh copy of the server it was captured from (on a new port): it
    // passes, and what the server receives follows the captured keys.
    let log2 = d.join("replayed-inputs.log");
    let peer = Peer::python(
        "cafe server",
        peer_script,
        &["--log-inputs", log2.to_str().expect("utf-8")],
    );
    let server = peer_addr(&peer);
    let (_, summary) = run_scenario(
        &written,
        &["--quiet", "--target", &server],
        &d.join("run2"),
        &[0],
    );
    assert_eq!(str_at(&summary, "verdict"), "pass");
    drop(peer);
    let replayed = inputs_per_client(&log2);
    assert_eq!(replayed.len(), 2, "two bots");
    for (i, masks) in replayed.iter().enumerate() {
        assert_follows_steps(
            &whole_runs(masks),
            &written_steps,
            rate,
            &format!("replaying bot {i}"),
        );
    }
    // Each bot entered the stream at its own offset.
    assert_ne!(replayed[0][..20], replayed[1][..20], "two bots in lockstep");
}

#[test]
fn a_tcpdump_any_capture_cut_short_is_read_up_to_where_it_ends() {
    // `tcpdump -i any` writes Linux cooked v2 (link type 276): a 20-byte header (protocol
    // 0x0800, reserved, interface 1, ARPHRD 772 loopback, packet type 0, address length 6,
    // 8 address bytes) before the IP packet. Two cafe Pings 127.0.0.1:5000 -> :6000, then a
    // record header whose packet the file no longer holds (tcpdump killed mid-write).
    let mut f = vec![0xD4, 0xC3, 0xB2, 0xA1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    f.extend_from_slice(&[0xFF, 0xFF, 0, 0, 0x14, 0x01, 0, 0]);
    let sll2 = [
        0x08, 0x00, 0, 0, 0, 0, 0, 1, 0x03, 0x04, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    for (usec, seq) in [(0u32, 1u8), (500_000, 2)] {
        // 20 + IPv4 20 + UDP 8 + cafe ping 12 = 60 bytes.
        f.extend_from_slice(&[0, 0, 0, 0]);
        f.extend_from_slice(&usec.to_le_bytes());
        f.extend_from_slice(&[60, 0, 0, 0, 60, 0, 0, 0]);
        f.extend_from_slice(&sll2);
        f.extend_from_slice(&[
            0x45, 0, 0, 40, 0, 0, 0, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1,
        ]);
        f.extend_from_slice(&[0x13, 0x88, 0x17, 0x70, 0, 20, 0, 0]);
        // cafe Ping: FE CA, version 1, type 4, seq, timestamp_ms 1000.
        f.extend_from_slice(&[0xFE, 0xCA, 1, 4, seq, 0, 0, 0, 0xE8, 0x03, 0, 0]);
    }
    f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 60, 0, 0, 0, 60, 0, 0, 0, 0x08]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("any.pcap");
    std::fs::write(&file, &f).expect("write");
    let ins = inspect_json(&file);
    assert_eq!(u64_at(&ins, "read.frames"), 2);
    assert_eq!(u64_at(&ins, "read.truncated_at"), f.len() as u64 - 17);
    let flow = at(&ins, "flows.0");
    assert_eq!(str_at(flow, "protocol"), "cafe");
    assert_eq!(u64_at(flow, "behaviour.pings"), 2);
    assert_eq!(f64_at(flow, "behaviour.ping_interval_ms"), 500.0);
}

/// Three bots of `protocol` in `dialect` (`key: dialect` in the scenario) through the
/// recording relay to `tickswarm serve`; the run's summary and the capture's inspection.
fn record_game(dir: &Path, protocol: &str, key: &str, dialect: &str) -> (Value, Value) {
    let (mut server, addr) = serve(protocol, &["--dialect", dialect]);
    let file = dir.join(format!("{protocol}-{dialect}.pcapng"));
    let (relay, listen) = relay(&addr, &file);
    let scenario = dir.join(format!("{protocol}-{dialect}.yaml"));
    std::fs::write(
        &scenario,
        format!(
            "name: capture\nprotocol:\n  {protocol}: {{ {key}: {dialect} }}\ntarget: \"{listen}\"\n\
             population:\n  stages:\n    - ramp_to: 3\n      over: 0s\n    - hold: 3s\n\
             behaviour:\n  input_rate: 20\n  ping_interval: 500ms\nduration: 3s\nseed: 1\n\
             default_checks: false\n"
        ),
    )
    .expect("scenario");
    let out = dir.join(format!("run-{protocol}-{dialect}"));
    let (_, summary) = run_scenario(&scenario, &["--quiet"], &out, &[0, 1]);
    stop(relay);
    let _ = server.kill();
    let _ = server.wait();
    (summary, inspect_json(&file))
}

/// Every protocol and dialect with a reference server and a transport a capture can read
/// (GameNetworkingSockets encrypts; R-Type's implementation dialect logs in over TCP, which
/// the relay does not carry): each flow is named right, and the inputs it holds are the
/// bots' own count.
#[test]
fn every_game_and_dialect_recorded_is_named_per_flow_with_the_bots_input_count() {
    let cases = [
        ("city", "dialect", "spec"),
        ("city", "dialect", "implementation"),
        ("zergcity", "dialect", "spec"),
        ("zergcity", "dialect", "implementation"),
        ("zergcity", "dialect", "benchmark"),
        ("rtype", "float_order", "big"),
        ("rtype", "float_order", "little"),
        ("darkages", "dialect", "spec"),
        ("darkages", "dialect", "struct_as_printed"),
        ("darkages", "dialect", "implementation"),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    for (protocol, key, dialect) in cases {
        let who = format!("{protocol} {dialect}");
        let (summary, ins) = record_game(dir.path(), protocol, key, dialect);
        assert_eq!(
            u64_at(&summary, "bots.connected"),
            3,
            "{who}: every bot connected"
        );
        let flows = at(&ins, "flows").as_array().expect("flows");
        assert_eq!(flows.len(), 3, "{who}: one flow per bot");
        let mut inputs = 0;
        for f in flows {
            assert_eq!(at(f, "protocol").as_str(), Some(protocol), "{who}: {f:#}");
            assert_eq!(at(f, "dialect").as_str(), Some(dialect), "{who}: {f:#}");
            inputs += u64_at(f, "behaviour.inputs");
            // Each other dialect of the game falls short, and says where.
            for c in at(f, "candidates").as_array().expect("candidates") {
                if str_at(c, "protocol") != protocol || str_at(c, "dialect") == dialect {
                    continue;
                }
                let other = str_at(c, "dialect");
                assert!(f64_at(c, "share") < 0.9, "{who} read as {other}: {c:#}");
                let expected = str_at(c, "first_failure.expected");
                assert!(!expected.is_empty(), "{who} as {other}: {c:#}");
                u64_at(c, "first_failure.offset");
            }
        }
        let sent = u64_at(&summary, "inputs_sent");
        assert!(
            inputs.abs_diff(sent) as f64 <= 0.01 * sent as f64,
            "{who}: the capture holds {inputs} inputs, the bots sent {sent}"
        );
    }
}

/// A client tickswarm did not write: the independent ZergCity peer's client (C, on Debian's
/// libenet, its messages encoded by its own code) through the recording relay to `tickswarm
/// serve zergcity`. Its flow is named ZergCity's spec dialect with every datagram read, and
/// its inputs and pings are the counts the client printed. (The peer's client rejects our
/// server's FullSnapshot, whose Players/Components layouts the spec leaves open and the two
/// implementations fill differently, so after its handshake it acks and sends nothing more:
/// scripts/verify_external_zergcity.sh says the same. Its counts are 0, and so are ours.)
#[test]
fn an_independent_clients_capture_is_named_and_counted_as_the_client_counted() {
    let bin = crate::common::c_peer::CPeer {
        src: "tests/peers/zergcity-peer/zc_peer.c",
        name: "zc_peer_inspect",
        pkgs: &["libenet", "liblz4"],
        fallback_libs: "-lenet -llz4",
        cflags: &["-std=c99"],
        libs: &[],
        install_hint: "run scripts/install-test-deps.sh (installs libenet-dev and liblz4-dev)",
    }
    .build();
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut server, addr) = serve("zergcity", &[]);
    let file = dir.path().join("zc-client.pcapng");
    let (relay_child, listen) = relay(&addr, &file);
    let (host, port) = listen.rsplit_once(':').expect("host:port");
    let o = Command::new(&bin)
        .args(["client", host, port, "--seconds", "3", "--inputs", "20"])
        .args(["--input-interval-ms", "100"])
        .output()
        .expect("the peer's client runs");
    stop(relay_child);
    let _ = server.kill();
    let _ = server.wait();
    let out = String::from_utf8_lossy(&o.stdout);
    let result = out
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line: {out}"));
    assert!(result.contains(" handshake=ok "), "{result}");
    let field = |k: &str| -> u64 {
        result
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k}= in {result}"))
    };
    let ins = inspect_json(&file);
    let flows = at(&ins, "flows").as_array().expect("flows");
    assert_eq!(flows.len(), 1, "one client");
    let f = &flows[0];
    assert_eq!(str_at(f, "protocol"), "zergcity");
    assert_eq!(str_at(f, "dialect"), "spec");
    assert_eq!(f64_at(f, "candidates.0.share"), 1.0, "every datagram read");
    assert!(
        u64_at(f, "to_server.datagrams") >= 2,
        "the client's ENet connect and its hello"
    );
    assert_eq!(u64_at(f, "behaviour.inputs"), field("inputs_sent"));
    assert_eq!(u64_at(f, "behaviour.pings"), field("pings"));
    let pairs = match at(f, "behaviour.rtt_ms") {
        Value::Null => 0,
        _ => u64_at(f, "behaviour.rtt_ms.0"),
    };
    assert_eq!(pairs, field("pongs"));
}

/// The capture's loss and RTT against known truth: the independent cafe server skips every
/// 10th snapshot of each client (its header seq still counted, so the gap is on the wire) and
/// holds every pong 20 ms. Read from a relay recording between two bots and that server:
/// the missing seqs add up to the snapshots the server skipped (up to one trailing skip per
/// client that no later datagram reveals), every pong the server sent pairs with its ping,
/// and no round trip is shorter than the 20 ms hold.
#[test]
fn the_captures_loss_and_rtt_are_the_servers_injected_loss_and_delay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut peer = Peer::python(
        "cafe server",
        "tests/peers/cafe-impaired-server/cafe_impaired_server.py",
        &["--drop-every", "10", "--pong-delay-ms", "20"],
    );
    let server = peer_addr(&peer);
    let file = dir.path().join("impaired.pcapng");
    let (relay_child, listen) = relay(&server, &file);
    let scenario = dir.path().join("s.yaml");
    std::fs::write(
        &scenario,
        format!(
            "name: impaired\nprotocol:\n  cafe: {{}}\ntarget: \"{listen}\"\n\
             population:\n  stages:\n    - ramp_to: 2\n      over: 0s\n    - hold: 3s\n\
             behaviour:\n  input_rate: 20\n  ping_interval: 250ms\nduration: 3s\nseed: 1\n\
             default_checks: false\n"
        ),
    )
    .expect("scenario");
    run_scenario(&scenario, &["--quiet"], &dir.path().join("run"), &[0, 1]);
    // The bots are gone: let the last held pongs leave the server before the relay stops.
    std::thread::sleep(std::time::Duration::from_millis(200));
    stop(relay_child);
    let totals = peer.stop_for_totals();
    let dropped = u64_at(&totals, "snapshots_dropped");
    let pongs = u64_at(&totals, "pongs_sent");
    assert!(dropped >= 10, "the server skipped snapshots: {totals}");

    let ins = inspect_json(&file);
    let flows = at(&ins, "flows").as_array().expect("flows");
    assert_eq!(flows.len(), 2, "one flow per bot");
    let (mut missing, mut pairs) = (0u64, 0u64);
    for f in flows {
        assert_eq!(str_at(f, "protocol"), "cafe");
        let received = u64_at(f, "to_client.datagrams") as f64;
        let loss = f64_at(f, "behaviour.downstream_loss");
        // loss = missing / (received + missing)
        missing += (received * loss / (1.0 - loss)).round() as u64;
        pairs += u64_at(f, "behaviour.rtt_ms.0");
        let min_ms = f64_at(f, "behaviour.rtt_ms.1");
        assert!(
            min_ms >= 20.0,
            "a round trip under the 20 ms hold: {min_ms} ms"
        );
    }
    assert!(
        missing <= dropped && dropped - missing <= 2,
        "the capture misses {missing} seqs, the server skipped {dropped}"
    );
    assert_eq!(
        pairs, pongs,
        "every pong the server sent pairs with its ping"
    );
}
