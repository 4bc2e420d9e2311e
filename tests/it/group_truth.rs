//! Groups against injected ground truth on loopback: what a group's simulated link dropped
//! is what the server did not receive (upstream) and what the bots did not receive
//! (downstream), datagram for datagram; the share dropped is the configured rate; and a
//! group's own `source_addresses` is the pool its bots come from, bot for bot.
//!
//! The only other loss on loopback is the kernel's, when a receiver starved of CPU lets a
//! receive buffer fill: it is read from the kernel's own counter and bounds the difference
//! (`crate::common::kernel`). Every run is bounded: at most 50 bots for 12 s.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use std::time::Duration;

use serde_json::Value;

use crate::common::kernel::{assert_loopback_loss, UdpDrops};
use crate::common::proxy::{Impairment, Proxy};
use crate::common::summary::{run_text_in, u64_at, u64_of};

/// What a group's simulated link was given and dropped in one direction, over the run.
struct Link {
    offered: u64,
    dropped: u64,
}

fn link(g: &Value, dir: &str) -> Link {
    let m = &g["protocol_metrics"];
    assert!(m.is_object(), "a group without protocol_metrics: {g}");
    // The link's counters (src/engine/io/sim_path.rs): one that never moved is absent and
    // reads 0, so the key must be one the link records (a renamed counter fails).
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine/io/sim_path.rs"),
    )
    .expect("src/engine/io/sim_path.rs");
    let n = |k: String| {
        assert!(
            source.contains(&format!("\"{k}\"")),
            "the simulated link records no `{k}`"
        );
        m.get(&k).map_or(0, u64_of)
    };
    Link {
        offered: n(format!("netsim_{dir}_offered")),
        dropped: ["loss", "outage", "queue"]
            .iter()
            .map(|w| n(format!("netsim_{dir}_lost_{w}")))
            .sum(),
    }
}

/// `rate` within ±0.5 percentage points of `want`, over at least `min` datagrams.
fn assert_rate(what: &str, part: u64, whole: u64, want: f64, min: u64) {
    assert!(whole >= min, "{what}: only {whole} datagrams (want {min})");
    let rate = part as f64 / whole as f64;
    assert!(
        (rate - want).abs() <= 0.005,
        "{what}: {part} of {whole} = {:.3} %, configured {:.1} %",
        rate * 100.0,
        want * 100.0
    );
}

/// Two groups of 25 cafe bots (60 inputs and 4 pings a second each) on the embedded
/// server: one with 2 % uniform loss upstream only, one with 2 % downstream only. No
/// latency, so nothing is held in a link when the run ends.
const LOSSY: &str = "name: group-truth\nprotocol:\n  cafe:\n    dialect: spec\n    loss_source: sequence\ntarget: embedded\nserver:\n  tick_rate: 60\npopulation:\n  stages:\n    - ramp_to: 50\n      over: 1s\n    - hold: 11s\nbehaviour:\n  input_rate: 60\n  ping_interval: 250ms\nseed: 7\ngroups:\n  - name: up_lossy\n    count: 25\n    network:\n      up:\n        loss: 2%\n  - name: down_lossy\n    share: 100%\n    network:\n      down:\n        loss: 2%\n";

/// Upstream: the embedded server received exactly what the bots handed their links less
/// what the up-lossy group's link dropped (less at most the kernel's own drops), so the
/// server's count against the bots' gives the loss the seeded model applied: 2 % ± 0.5 pp
/// over more than 12,000 datagrams. Downstream: the down-lossy group's bots got exactly what
/// their link let through, their own sequence count of the missing matches the link's drops
/// (but for at most one trailing drop per bot that no later datagram revealed), and the
/// share dropped is 2 % ± 0.5 pp. Each group's other direction lost nothing.
#[test]
fn a_groups_link_loss_is_what_the_server_and_the_bots_miss_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let kernel = UdpDrops::now();
    let (o, s) = run_text_in(tmp.path(), LOSSY, &["--quiet"], &[0, 1]);
    let kernel = kernel.since();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{stderr}");
    let g = |n: &str| &s["groups"][n];
    for n in ["up_lossy", "down_lossy"] {
        assert_eq!(u64_at(g(n), "bots.connected"), 25, "{n}");
        let sent = u64_at(g(n), "bandwidth.up_packets");
        let up = link(g(n), "up");
        // Everything the link let through crossed the bot's socket (no send failed).
        assert_eq!(sent, up.offered - up.dropped, "{n}: sent past the link");
        let down = link(g(n), "down");
        assert_eq!(
            u64_at(g(n), "bandwidth.down_packets"),
            down.offered - down.dropped,
            "{n}: delivered past the link"
        );
    }
    assert!(s["generator"]["send_errors"]
        .as_object()
        .unwrap()
        .is_empty());

    // Upstream, at the server.
    let (lossy, clean) = (link(g("up_lossy"), "up"), link(g("down_lossy"), "up"));
    assert_eq!(
        clean.dropped, 0,
        "no upstream loss configured for down_lossy"
    );
    let received = u64_at(&s, "protocol_metrics.embedded_server.datagrams_in");
    let handed = lossy.offered + clean.offered;
    let missing = handed - received;
    assert!(
        missing >= lossy.dropped && missing - lossy.dropped <= kernel,
        "the bots handed their links {handed} datagrams, the server received {received}: \
         {missing} missing, the link dropped {}, the kernel {kernel}",
        lossy.dropped
    );
    // What the server missed of the up-lossy group's datagrams, as a share.
    let lossy_received = received - clean.offered;
    assert_rate(
        "up_lossy: missing at the server",
        lossy.offered - lossy_received.min(lossy.offered),
        lossy.offered,
        0.02,
        12_000,
    );
    assert_rate(
        "up_lossy: dropped by the link",
        lossy.dropped,
        lossy.offered,
        0.02,
        12_000,
    );

    // Downstream, at the bots.
    let down = link(g("down_lossy"), "down");
    assert_rate(
        "down_lossy: dropped by the link",
        down.dropped,
        down.offered,
        0.02,
        12_000,
    );
    let measured = &g("down_lossy")["loss"]["downstream"];
    let bots_missing = u64_at(measured, "expected") - u64_at(measured, "received");
    assert!(
        bots_missing <= down.dropped && down.dropped - bots_missing <= 25 + kernel,
        "down_lossy: the bots counted {bots_missing} missing, the link dropped {}",
        down.dropped
    );
    assert_eq!(link(g("up_lossy"), "down").dropped, 0);
    assert_loopback_loss(
        &g("up_lossy")["loss"]["downstream"],
        kernel,
        1,
        "up_lossy downstream",
    );

    // The per-second series add up to the run's: the link's counts second by second.
    for (n, dir) in [("up_lossy", "up"), ("down_lossy", "down")] {
        let iv = g(n)["intervals"].as_array().expect("intervals");
        let sum = |k: &str| -> u64 { iv.iter().map(|p| u64_at(p, &format!("link.{k}"))).sum() };
        let l = link(g(n), dir);
        assert_eq!(sum(&format!("{dir}_offered")), l.offered, "{n}");
        assert_eq!(sum(&format!("{dir}_dropped")), l.dropped, "{n}");
        assert_eq!(
            iv.last().unwrap()["t"],
            s["intervals"].as_array().unwrap().last().unwrap()["t"]
        );
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

/// Bot sockets per source address, as the relay in front of the server saw them.
fn per_address(seen: &[SocketAddr]) -> BTreeMap<IpAddr, u64> {
    let mut by = BTreeMap::new();
    for s in seen {
        *by.entry(s.ip()).or_default() += 1;
    }
    by
}

/// A table of summary.json (`source_addresses` or a group's) as address -> (planned,
/// connected).
fn rows(t: &Value) -> BTreeMap<IpAddr, (u64, u64)> {
    t["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("no rows: {t}"))
        .iter()
        .map(|r| {
            (
                ip(r["source"].as_str().unwrap()),
                (u64_at(r, "planned"), u64_at(r, "connected")),
            )
        })
        .collect()
}

/// Three groups, three pools, on loopback: `near` (10 bots) its own 127.0.3.0/29 (six
/// hosts: bot k of the group on host 1 + k mod 6), `far` (8 bots) its own three addresses,
/// `rest` (4 bots) the scenario's `engine.source_addresses`. The server sees each group's
/// bots on its own pool exactly so, and summary.json and report.html count them per group
/// and over the whole run.
#[test]
fn each_groups_bots_come_from_its_own_pool() {
    let (mut server, addr) = crate::common::serve::serve("cafe", &[]);
    let proxy = Proxy::start(
        addr.parse().expect("server address"),
        Impairment::default(),
        Duration::from_secs(20),
    );
    let tmp = tempfile::tempdir().unwrap();
    let body = format!(
        "name: group-pools\nprotocol:\n  cafe: {{}}\ntarget: {}\npopulation:\n  stages:\n    - ramp_to: 22\n      over: 500ms\n    - hold: 1500ms\nengine:\n  workers: 2\n  source_addresses: [127.0.5.1]\ngroups:\n  - name: near\n    count: 10\n    source_addresses: 127.0.3.0/29\n  - name: far\n    count: 8\n    source_addresses: [127.0.4.1, 127.0.4.2, 127.0.4.3]\n  - name: rest\n    share: 100%\n",
        proxy.addr
    );
    let (o, s) = run_text_in(tmp.path(), &body, &["--quiet"], &[0]);
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    let near: BTreeMap<IpAddr, u64> = (1..=6u8)
        .map(|h| (ip(&format!("127.0.3.{h}")), if h <= 4 { 2 } else { 1 }))
        .collect();
    let far: BTreeMap<IpAddr, u64> = [("127.0.4.1", 3), ("127.0.4.2", 3), ("127.0.4.3", 2)]
        .into_iter()
        .map(|(a, n)| (ip(a), n))
        .collect();
    let rest: BTreeMap<IpAddr, u64> = [(ip("127.0.5.1"), 4)].into();
    let mut all = near.clone();
    all.extend(far.clone());
    all.extend(rest.clone());

    let seen = proxy.counts.bot_sockets.lock().unwrap().clone();
    assert_eq!(per_address(&seen), all, "what the server saw: {seen:?}");

    let both = |m: &BTreeMap<IpAddr, u64>| -> BTreeMap<IpAddr, (u64, u64)> {
        m.iter().map(|(a, n)| (*a, (*n, *n))).collect()
    };
    for (name, want, pool) in [("near", &near, 6), ("far", &far, 3), ("rest", &rest, 1)] {
        let t = &s["groups"][name]["source_addresses"];
        assert_eq!(rows(t), both(want), "{name}: {t}");
        assert_eq!(u64_at(t, "pool_size"), pool, "{name}");
    }
    assert_eq!(rows(&s["source_addresses"]), both(&all));
    assert_eq!(u64_at(&s, "source_addresses.pool_size"), 10);

    let html = std::fs::read_to_string(tmp.path().join("out/report.html")).unwrap();
    for name in ["near", "far", "rest"] {
        assert!(
            html.contains(&format!("data-group-sources=\"{name}\"")),
            "{name}"
        );
    }
    assert!(html.contains(
        "<tr><td><code>127.0.3.6</code></td><td class=\"num\">1</td><td class=\"num\">1</td></tr>"
    ));
}
