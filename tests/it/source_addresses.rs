//! `engine.source_addresses`: bots bind their sockets to a pool of local addresses, spread
//! round-robin by bot index, so a server that limits connections per address or per /24
//! sees them as many players.
//!
//! The whole 127.0.0.0/8 is on Linux's loopback without set-up, so bots come from
//! 127.0.1.x and 127.0.2.x toward servers on 127.0.0.1. What the server sees is read at a
//! relay in front of it (`crate::common::proxy`, no impairment), which records every bot socket it
//! hears from. 192.0.2.1 (TEST-NET-1, on no interface) is only ever bound, never sent to.
//! Every run is bounded: at most 30 bots for two seconds.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::proxy::{Impairment, Proxy};
use crate::common::summary::{
    declared_counter, finish, run_command, run_scenario, stderr, summary_in,
};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tickswarm"))
}

fn scenario(dir: &Path, body: &str) -> std::path::PathBuf {
    let p = dir.join("s.yaml");
    std::fs::write(&p, body).expect("write scenario");
    p
}

/// summary.json with a pool still matches schemas/summary.schema.json.
fn assert_matches_schema(s: &Value) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/summary.schema.json");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("schema")).expect("JSON");
    let v = jsonschema::validator_for(&schema).expect("a valid schema");
    let errors: Vec<String> = v.iter_errors(s).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

/// summary.json's `source_addresses.rows` as address -> (planned, connected).
fn rows(s: &Value) -> BTreeMap<String, (u64, u64)> {
    s["source_addresses"]["rows"]
        .as_array()
        .expect("source_addresses.rows")
        .iter()
        .map(|r| {
            (
                r["source"].as_str().expect("source").to_string(),
                (
                    r["planned"].as_u64().expect("planned"),
                    r["connected"].as_u64().expect("connected"),
                ),
            )
        })
        .collect()
}

/// Bot sockets per source address, as the relay (the server's side) saw them.
fn sockets_per_address(seen: &[SocketAddr]) -> BTreeMap<IpAddr, usize> {
    let mut by = BTreeMap::new();
    for s in seen {
        *by.entry(s.ip()).or_default() += 1;
    }
    by
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

/// 30 raw-UDP bots over 127.0.1.0/28 (14 hosts, .1 to .14): the server sees 30 sockets,
/// bot i on 127.0.1.(1 + i % 14), so .1 and .2 carry three bots and the others two, and
/// summary.json counts the same per address.
#[test]
fn raw_udp_bots_come_from_their_planned_addresses_round_robin() {
    let (mut server, addr) = crate::common::serve::serve("cafe", &[]);
    let proxy = Proxy::start(
        addr.parse().expect("server address"),
        Impairment::default(),
        Duration::from_secs(20),
    );
    let tmp = tempfile::tempdir().unwrap();
    let sc = scenario(
        tmp.path(),
        &format!(
            "name: sources\nprotocol:\n  cafe: {{}}\ntarget: {}\npopulation:\n  stages:\n    \
             - ramp_to: 30\n      over: 500ms\n    - hold: 1500ms\nengine:\n  workers: 2\n  \
             source_addresses: [127.0.1.0/28]\n",
            proxy.addr
        ),
    );
    let out = tmp.path().join("out");
    let o = run_command(&sc, &["-q"], &out)
        .output()
        .expect("run tickswarm");
    let _ = server.kill();
    let _ = server.wait();
    let s = finish(&o, &out, &[0]);

    let seen = proxy.counts.bot_sockets.lock().unwrap().clone();
    assert_eq!(seen.len(), 30, "one socket per bot: {seen:?}");
    let expected: BTreeMap<IpAddr, usize> = (1..=14u8)
        .map(|h| (ip(&format!("127.0.1.{h}")), if h <= 2 { 3 } else { 2 }))
        .collect();
    assert_eq!(sockets_per_address(&seen), expected);

    assert_matches_schema(&s);
    assert_eq!(s["bots"]["connected"], 30);
    assert_eq!(s["source_addresses"]["grouped_by"], "address");
    assert_eq!(s["source_addresses"]["pool_size"], 14);
    let counted = rows(&s);
    assert_eq!(counted.len(), 14);
    for (a, n) in &expected {
        let n = *n as u64;
        assert_eq!(counted.get(&a.to_string()), Some(&(n, n)), "{a}");
    }
    // The report's table says the same.
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(html.contains("A pool of 14 addresses"), "no source table");
    assert!(html.contains(
        "<tr><td><code>127.0.1.14</code></td><td class=\"num\">2</td><td class=\"num\">2</td></tr>"
    ));
}

/// ENet with four bots per socket and three addresses: each address gets its four bots on
/// one shared socket, so the server sees exactly three sockets, one per address.
#[test]
fn enet_bots_sharing_a_socket_share_its_source_address() {
    let (mut server, addr) = crate::common::serve::serve("city", &["--dialect", "spec"]);
    let proxy = Proxy::start(
        addr.parse().expect("server address"),
        Impairment::default(),
        Duration::from_secs(20),
    );
    let tmp = tempfile::tempdir().unwrap();
    let sc = scenario(
        tmp.path(),
        &format!(
            "name: sources-enet\nprotocol:\n  city:\n    dialect: spec\ntarget: {}\n\
             population:\n  stages:\n    - ramp_to: 12\n      over: 300ms\n    - hold: 1500ms\n\
             engine:\n  workers: 1\n  bots_per_socket: 4\n  \
             source_addresses: [127.0.2.1, 127.0.2.2, 127.0.2.3]\n",
            proxy.addr
        ),
    );
    let out = tmp.path().join("out");
    let o = run_command(&sc, &["-q"], &out)
        .output()
        .expect("run tickswarm");
    let _ = server.kill();
    let _ = server.wait();
    let s = finish(&o, &out, &[0]);

    let seen = proxy.counts.bot_sockets.lock().unwrap().clone();
    let expected: BTreeMap<IpAddr, usize> = ["127.0.2.1", "127.0.2.2", "127.0.2.3"]
        .iter()
        .map(|a| (ip(a), 1))
        .collect();
    assert_eq!(sockets_per_address(&seen), expected, "{seen:?}");
    assert_matches_schema(&s);
    assert_eq!(s["bots"]["connected"], 12);
    let counted: Vec<(String, (u64, u64))> = rows(&s).into_iter().collect();
    assert_eq!(
        counted,
        vec![
            ("127.0.2.1".to_string(), (4, 4)),
            ("127.0.2.2".to_string(), (4, 4)),
            ("127.0.2.3".to_string(), (4, 4)),
        ]
    );
}

const EMBEDDED: &str = "name: sources-bad\nprotocol:\n  cafe: {}\ntarget: embedded\n\
                        population:\n  stages:\n    - ramp_to: 10\n      over: 200ms\n    \
                        - hold: 800ms\nengine:\n  workers: 1\n";

/// The first bot's address is on no interface: the run stops before it starts (exit 2),
/// naming the address and the command that adds it; no report is written.
#[test]
fn a_source_address_not_on_this_machine_fails_fast_saying_how_to_add_it() {
    let tmp = tempfile::tempdir().unwrap();
    let sc = scenario(
        tmp.path(),
        &format!("{EMBEDDED}  source_addresses: [192.0.2.1]\n"),
    );
    let out = tmp.path().join("out");
    // Refused before it starts: no summary to read, only the exit code and stderr.
    let o = run_command(&sc, &["-q"], &out)
        .output()
        .expect("run tickswarm");
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("cannot bind source address 192.0.2.1"), "{e}");
    assert!(e.contains("ip addr add 192.0.2.1/32 dev"), "{e}");
    assert!(!out.join("summary.json").exists());

    // The same from the command line (and IPv6's hint names `ip -6`).
    let (_, s) = run_scenario(&sc, &["-q", "--source-addresses", "127.0.1.7"], &out, &[0]);
    assert_eq!(rows(&s).get("127.0.1.7"), Some(&(10, 10)));
}

/// Later bots whose address is missing fail one by one, counted with their reason, and the
/// verdict says which address and how to add it.
#[test]
fn bots_on_a_missing_address_are_connect_failures_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let sc = scenario(
        tmp.path(),
        &format!("{EMBEDDED}  source_addresses: [127.0.1.1, 192.0.2.1]\n"),
    );
    let out = tmp.path().join("out");
    let (o, s) = run_scenario(&sc, &[], &out, &[1]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &stderr(&o);
    assert_eq!(s["errors"]["connect"]["socket.address_not_available"], 5);
    assert_eq!(s["bots"]["failed"], 5);
    assert_eq!(s["bots"]["connected"], 5);
    let counted = rows(&s);
    assert_eq!(counted.get("127.0.1.1"), Some(&(5, 5)));
    assert_eq!(counted.get("192.0.2.1"), Some(&(5, 0)));
    assert!(
        text.contains("5 bots could not bind their source address (192.0.2.1)"),
        "{text}"
    );
}

/// A bad range is reported at its line and column, like any other scenario mistake; a pool
/// of the wrong family for the target is refused; `validate` shows the pool.
#[test]
fn validate_reports_the_pool_and_its_mistakes() {
    let tmp = tempfile::tempdir().unwrap();
    let validate = |body: String| {
        let sc = scenario(tmp.path(), &body);
        let o = bin().arg("validate").arg(&sc).output().expect("validate");
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned() + &stderr(&o),
        )
    };
    let (code, text) = validate(format!(
        "{EMBEDDED}  source_addresses:\n    - 127.0.1.0/24\n    - 10.0.0.1/24\n"
    ));
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("s.yaml:13:"), "{text}");
    assert!(text.contains("write `10.0.0.0/24`"), "{text}");

    let (code, text) = validate(format!("{EMBEDDED}  source_addresses: [\"fd00::/120\"]\n"));
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("is IPv6 (fd00::/120) but target embedded"),
        "{text}"
    );

    let (code, text) = validate(format!("{EMBEDDED}  source_addresses: 127.1.0.0/16\n"));
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(
            "sources    65534 addresses (first 127.1.1.0, last 127.1.254.255, consecutive \
             bots on consecutive /24s) from 127.1.0.0/16; 0 to 1 bots each"
        ),
        "{text}"
    );
}

/// Two shards keep each bot's address (bot i on address i % 14 in either shard), and their
/// merge counts exactly what the whole run would: three bots on .1 and .2, two elsewhere.
#[test]
fn shards_keep_each_bots_address_and_merge_to_the_whole_runs_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let sc = scenario(
        tmp.path(),
        "name: sources-shards\nprotocol:\n  cafe: {}\ntarget: embedded\npopulation:\n  \
         stages:\n    - ramp_to: 30\n      over: 300ms\n    - hold: 700ms\nengine:\n  \
         workers: 1\n  source_addresses: [127.0.1.0/28]\n",
    );
    let mut dirs = Vec::new();
    for shard in ["0/2", "1/2"] {
        let out = tmp.path().join(shard.replace('/', "-of-"));
        run_scenario(&sc, &["-q", "--shard", shard], &out, &[0]);
        dirs.push(out);
    }
    // Shard 0 runs the even bots, and 14 is even: bots 0, 14 and 28 on .1, the others on
    // .3, .5, ... .13, none on an even address.
    let even = rows(&summary_in(&dirs[0]));
    assert_eq!(even.len(), 7);
    assert_eq!(even.get("127.0.1.1"), Some(&(3, 3)));
    assert_eq!(even.get("127.0.1.3"), Some(&(2, 2)));
    assert_eq!(even.get("127.0.1.2"), None);
    let merged = tmp.path().join("merged");
    let o = bin()
        .args(["merge", "--quiet"])
        .args(&dirs)
        .arg("--out")
        .arg(&merged)
        .output()
        .expect("merge");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let s = summary_in(&merged);
    assert_matches_schema(&s);
    let counted = rows(&s);
    assert_eq!(counted.len(), 14);
    for h in 1..=14u64 {
        let n = if h <= 2 { 3 } else { 2 };
        assert_eq!(counted.get(&format!("127.0.1.{h}")), Some(&(n, n)), ".{h}");
    }
}

/// DarkAges handoffs move a bot to the other zone on a new socket: with a pool, handoffs
/// complete (the new socket binds the bot's own address), no relink fails on its source
/// (`errors.connect` stays empty), and a /16 pool is counted per /24, one bot in each.
#[test]
fn darkages_handoffs_keep_working_from_a_pool() {
    let tmp = tempfile::tempdir().unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/darkages.yaml");
    let out = tmp.path().join("out");
    let (_, s) = run_scenario(
        Path::new(path),
        &[
            "-q",
            "--bots",
            "20",
            "--duration",
            "5s",
            "--source-addresses",
            "127.1.0.0/16",
        ],
        &out,
        &[0],
    );
    assert_eq!(s["bots"]["connected"], 20);
    let pm = &s["protocol_metrics"];
    assert!(declared_counter(&s, "handoffs") > 0, "{pm}");
    assert!(
        s["errors"]["connect"]
            .as_object()
            .is_some_and(serde_json::Map::is_empty),
        "{}",
        s["errors"]
    );
    assert_eq!(s["source_addresses"]["grouped_by"], "/24");
    let counted = rows(&s);
    assert_eq!(counted.len(), 20);
    assert!(counted.values().all(|&c| c == (1, 1)), "{counted:?}");
    assert_eq!(counted.get("127.1.1.0/24"), Some(&(1, 1)));
}
