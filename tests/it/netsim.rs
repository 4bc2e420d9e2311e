//! `network:` end to end: the real binary and the embedded servers on loopback, with the
//! simulated link inside the engine. Loss and delay the bots report must be the ones the link
//! applied (its own counts are in the summary), over raw UDP and over ENet.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::summary::{emitted_counter, run_text_in, u64_at};

/// A link counter the run must have written.
fn count(s: &Value, name: &str) -> u64 {
    u64_at(s, &format!("protocol_metrics.{name}"))
}

/// cafe over raw UDP: 15 ms each way, 10 % of the server's datagrams lost. The bots' header-
/// sequence loss is what the link dropped, less at most one trailing drop per bot that no
/// later datagram revealed; no round trip is shorter than the 30 ms the link adds.
#[test]
fn udp_loss_and_delay_are_what_the_link_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let (o, s) = run_text_in(tmp.path(), "name: netsim-udp\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 20\n      over: 500ms\n    - hold: 4s\nbehaviour:\n  ping_interval: 200ms\nnetwork:\n  latency: 15ms\n  down:\n    loss: 10%\n", &[], &[0]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let dropped = count(&s, "netsim_down_lost_loss");
    assert_eq!(
        emitted_counter(&s, "netsim_up_lost_loss"),
        0,
        "no upstream loss set"
    );
    let down = &s["loss"]["downstream"];
    let missing = down["expected"].as_u64().unwrap() - down["received"].as_u64().unwrap();
    assert!(dropped > 100, "link dropped {dropped}");
    assert!(
        missing <= dropped && dropped - missing <= 20,
        "bots saw {missing} missing, the link dropped {dropped}"
    );
    let rate = down["rate"].as_f64().unwrap();
    assert!((rate - 0.10).abs() < 0.015, "loss rate {rate}");
    let rtt = &s["rtt_us"];
    assert!(rtt["min"].as_u64().unwrap() >= 30_000, "{rtt}");
    let hs = &s["handshake_us"];
    assert_eq!(hs["count"], 20);
    assert!(hs["min"].as_u64().unwrap() >= 30_000, "{hs}");
    assert_eq!(s["bots"]["connected"], 20);
    // The summary says what link the run simulated.
    assert_eq!(s["network"]["latency"], "15ms", "{}", s["network"]);
    assert_eq!(s["network"]["down"]["loss"], "10%", "{}", s["network"]);
}

/// City over ENet: 20 ms each way and 5 % loss both ways, applied below ENet, so ENet's
/// acknowledgements and retransmissions see it: every bot connects (the handshake is
/// retransmitted), both round-trip sources are at least 40 ms, and the protocol's own loss
/// figures see roughly the injected 5 % on the unreliable channel.
#[test]
fn enet_sees_the_simulated_link_below_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (o, s) = run_text_in(tmp.path(), "name: netsim-enet\nprotocol:\n  city: {}\npopulation:\n  stages:\n    - ramp_to: 10\n      over: 500ms\n    - hold: 4s\nbehaviour:\n  ping_interval: 200ms\nnetwork:\n  latency: 20ms\n  loss: 5%\n", &[], &[0]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(s["bots"]["connected"], 10);
    assert!(count(&s, "netsim_down_lost_loss") > 20);
    assert!(count(&s, "netsim_up_lost_loss") > 5);
    assert!(
        s["rtt_us"]["min"].as_u64().unwrap() >= 40_000,
        "{}",
        s["rtt_us"]
    );
    let ack = &s["protocol_metrics"]["enet_ack_rtt_us"];
    assert!(ack["min"].as_u64().unwrap() >= 40_000, "{ack}");
    for dir in ["downstream", "upstream"] {
        let rate = s["loss"][dir]["rate"].as_f64().unwrap();
        assert!((0.01..=0.10).contains(&rate), "{dir} loss {rate}");
    }
}

/// `tickswarm validate` on `scenario`: it must refuse it (exit 2); its stderr.
fn refused(dir: &Path, scenario: &str) -> String {
    let file = dir.join("bad.yaml");
    std::fs::write(&file, scenario).expect("write scenario");
    let o = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("validate")
        .arg(&file)
        .output()
        .expect("run tickswarm");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    err
}

/// A bad value is reported at its line, and a transport that does its own I/O refuses the key.
#[test]
fn bad_network_sections_are_refused_with_their_place() {
    let tmp = tempfile::tempdir().unwrap();
    let err = refused(
        tmp.path(),
        "name: bad\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - hold: 1s\nnetwork:\n  outage: { every: 1s, down_for: 2s }\n",
    );
    assert!(err.contains("bad.yaml:8:"), "{err}");
    assert!(err.contains("down_for must be shorter than every"), "{err}");
    let err = refused(
        tmp.path(),
        "name: bad\nprotocol:\n  rtype:\n    dialect: implementation\ntarget: 127.0.0.1:8080\npopulation:\n  stages:\n    - ramp_to: 1\n      over: 100ms\n    - hold: 1s\nnetwork:\n  latency: 5ms\n",
    );
    assert!(err.contains("does its own I/O"), "{err}");
}
