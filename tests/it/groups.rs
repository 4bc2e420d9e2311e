//! `groups:` and `lifecycle:` end to end: the real binary against the embedded cafe server on
//! loopback. Each group's figures are checked against what it was given (its bot count, the
//! latency and loss its simulated link applied, the storm's reconnections), the whole run
//! against the sum of its groups, the summary against the schema, and a merge of two shards
//! against the groups of both.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::summary::{assert_absent, at, opt_u64_at, run_scenario, summary_in, u64_at};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tickswarm"))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The link's own drops of a group in one direction (by loss, outage and queue).
fn link_drops(g: &Value, dir: &str) -> u64 {
    ["loss", "outage", "queue"]
        .iter()
        .filter_map(|w| g["protocol_metrics"][format!("netsim_{dir}_lost_{w}")].as_u64())
        .sum()
}

/// The shipped example, short: 20 bots (14 broadband, 4 mobile, 2 Wi-Fi) for 8 s, the storm
/// at 6 s. Each group's figures are its injected truth: bot counts exact, no mobile round
/// trip under the link's 150 ms, downstream loss what the link dropped (less at most one
/// trailing drop per bot no later datagram revealed), the storm's one reconnection (50 % of
/// two bots) exact and back in, and the whole run the sum of its groups.
#[test]
fn the_mixed_population_example_measures_what_each_group_was_given() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("mixed");
    let (o, s) = run_scenario(
        &root().join("scenarios/mixed-population.yaml"),
        &["--quiet", "--bots", "20", "--duration", "8s"],
        &out,
        &[0, 1],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{stderr}");
    let groups = s["groups"].as_object().expect("a groups block");
    let names: Vec<&str> = groups.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["broadband", "mobile", "wifi"],
        "in the scenario's order"
    );
    let g = |n: &str| &s["groups"][n];

    // Bots per group: 70/20/10 % of 20, and the storm's reconnection as a session more.
    assert_eq!(u64_at(g("broadband"), "bots.planned"), 14);
    assert_eq!(u64_at(g("mobile"), "bots.planned"), 4);
    assert_eq!(u64_at(g("wifi"), "bots.planned"), 3);
    for n in ["broadband", "mobile", "wifi"] {
        assert_eq!(g(n)["bots"]["connected"], g(n)["bots"]["planned"], "{n}");
    }
    let storm = &g("wifi")["lifecycle"];
    assert_eq!(u64_at(storm, "planned.storm_drops"), 1, "{storm}");
    assert_eq!(u64_at(storm, "done.storm_drops"), 1, "{storm}");
    assert_eq!(u64_at(storm, "done.storm_reconnects"), 1, "{storm}");
    // No lifecycle block for a group without one (left out, not null).
    assert_absent(g("broadband"), "lifecycle");

    // The injected conditions are written beside the figures.
    assert_eq!(g("mobile")["network"]["latency"], "75ms");
    assert!(
        at(g("broadband"), "network").is_null(),
        "the real link: null"
    );

    // Round trips: the link's fixed latency both ways is a floor no sample goes under.
    assert!(
        u64_at(g("mobile"), "rtt_us.min") >= 150_000,
        "{}",
        g("mobile")["rtt_us"]
    );
    assert!(
        u64_at(g("wifi"), "rtt_us.min") >= 8_000,
        "{}",
        g("wifi")["rtt_us"]
    );
    assert!(u64_at(g("broadband"), "rtt_us.p50") < 150_000);

    // Downstream loss per group is what its link dropped: for mobile, exactly so but for
    // at most one trailing drop per bot; for Wi-Fi, whose link also drops what the server
    // still sends to the storm's dropped session (no bot counts that), never more, and near
    // the 5 % it was given.
    let down = &g("mobile")["loss"]["downstream"];
    let missing = u64_at(down, "expected") - u64_at(down, "received");
    let dropped = link_drops(g("mobile"), "down");
    assert!(dropped > 0, "mobile: the link dropped nothing");
    assert!(
        missing <= dropped && dropped - missing <= 4,
        "mobile: bots saw {missing} missing, the link dropped {dropped}"
    );
    let down = &g("wifi")["loss"]["downstream"];
    let missing = u64_at(down, "expected") - u64_at(down, "received");
    assert!(missing <= link_drops(g("wifi"), "down"));
    let rate = down["rate"].as_f64().unwrap();
    assert!(
        u64_at(down, "expected") > 300 && (0.02..0.08).contains(&rate),
        "{down}"
    );
    assert_eq!(link_drops(g("broadband"), "down"), 0);
    // The counter exists (the lossy groups have it), and the real link never fired it.
    assert!(u64_at(g("mobile"), "protocol_metrics.netsim_down_lost_loss") > 0);
    assert_absent(g("broadband"), "protocol_metrics.netsim_down_lost_loss");

    // The whole run is the sum of its groups.
    let sum = |path: &[&str]| -> u64 { groups.values().map(|v| u64_at(v, &path.join("."))).sum() };
    for path in [
        &["bots", "planned"][..],
        &["bots", "connected"],
        &["rtt_us", "count"],
        &["handshake_us", "count"],
        &["bandwidth", "up_bytes"],
        &["bandwidth", "down_bytes"],
        &["inputs_sent"],
        &["snapshots_applied"],
    ] {
        let whole = u64_at(&s, &path.join("."));
        assert_eq!(sum(path), whole, "{path:?}");
    }
    // The group thresholds read the groups' figures; the injected floor holds.
    let th = s["thresholds"].as_array().unwrap();
    let floor = th
        .iter()
        .find(|t| t["condition"] == "rtt{group=mobile} min >= 150ms")
        .expect("the mobile floor threshold");
    assert_eq!(floor["metric"], "groups.mobile.rtt_us.min");
    assert_eq!(
        floor["observed"].as_f64(),
        g("mobile")["rtt_us"]["min"].as_f64()
    );
    assert_eq!(floor["ok"], true);

    // report.html has the per-group table; junit.xml the groups' figures.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<h2>Per group</h2>") && html.contains("latency: 75ms"));
    // Each group's seconds are the run's seconds; the report charts them per group, with
    // the injected latency both ways (2 x 75 ms) under mobile's RTT and the injected loss
    // rates beside the measured loss.
    let times = |iv: &Value| -> Vec<f64> {
        iv.as_array()
            .unwrap()
            .iter()
            .map(|p| p["t"].as_f64().unwrap())
            .collect()
    };
    for n in ["broadband", "mobile", "wifi"] {
        assert_eq!(times(&g(n)["intervals"]), times(&s["intervals"]), "{n}");
        for chart in ["rtt", "loss"] {
            assert!(
                html.contains(&format!("data-chart=\"group-{chart}-{n}\"")),
                "{chart} {n}"
            );
        }
    }
    assert!(html.contains("data-expected=\"injected-latency\" data-value=\"150000\""));
    assert!(html.contains("data-expected=\"injected-loss-down\" data-value=\"0.03"));
    assert!(html.contains("data-expected=\"injected-loss\" data-value=\"0.05\""));
    // Wi-Fi's link, second by second, adds up to its whole-run drops.
    let per_second: u64 = g("wifi")["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u64_at(p, "link.down_dropped"))
        .sum();
    assert_eq!(per_second, link_drops(g("wifi"), "down"));
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(
        junit.contains("name=\"groups.mobile.rtt_us.p99\""),
        "{junit}"
    );
    assert!(junit.contains("rtt{group=mobile} min &gt;= 150ms"));

    // The summary is what the schema says, group paths included.
    let schema = json(&root().join("schemas/summary.schema.json"));
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let errors: Vec<String> = validator
        .iter_errors(&s)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    for t in th {
        let path = t["metric"].as_str().unwrap();
        let found = path
            .split('.')
            .try_fold(&s, |v, k| v.get(k))
            .unwrap_or_else(|| panic!("{path} is not in the summary"));
        let value = match found {
            Value::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
            v => v.as_f64(),
        };
        assert_eq!(value, t["observed"].as_f64(), "{path}");
    }
}

const SHARDED: &str = "name: groups-shards\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 12\n      over: 300ms\n    - hold: 2500ms\nbehaviour:\n  ping_interval: 200ms\nseed: 5\ngroups:\n  - name: near\n    count: 4\n  - name: far\n    share: 1\n    network:\n      latency: 20ms\nthresholds:\n  - rtt{group=far} min >= 40ms\n  - rtt{group=near} p95 < 40ms\n";

/// Two shards of a grouped run merge into the whole run's groups: every bot in one shard,
/// counts added, percentiles read again from the groups' histograms, group thresholds
/// judged again on the merged groups.
#[test]
fn shards_merge_into_the_whole_runs_groups() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let file = t.join("s.yaml");
    std::fs::write(&file, SHARDED).unwrap();
    let mut parts = Vec::new();
    for shard in ["0/2", "1/2"] {
        let out = t.join(shard.replace('/', "of"));
        let (o, s) = run_scenario(&file, &["--quiet", "--shard", shard], &out, &[0, 1]);
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        parts.push((out, s));
    }
    let merged = t.join("merged");
    let o = bin()
        .args(["merge", "--quiet"])
        .arg(&parts[0].0)
        .arg(&parts[1].0)
        .arg("--out")
        .arg(&merged)
        .output()
        .unwrap();
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let m = summary_in(&merged);
    for (n, bots) in [("near", 4), ("far", 8)] {
        let g = &m["groups"][n];
        assert_eq!(u64_at(g, "bots.planned"), bots, "{n}");
        let rtt: u64 = parts
            .iter()
            .map(|(_, s)| u64_at(s, &format!("groups.{n}.rtt_us.count")))
            .sum();
        assert_eq!(
            u64_at(g, "rtt_us.count"),
            rtt,
            "{n}: samples of both shards"
        );
        let min = parts
            .iter()
            .map(|(_, s)| u64_at(s, &format!("groups.{n}.rtt_us.min")))
            .min()
            .unwrap();
        assert_eq!(u64_at(g, "rtt_us.min"), min, "{n}");
    }
    assert!(u64_at(&m, "groups.far.rtt_us.min") >= 40_000);

    // Each group's seconds merge exactly: counts second by second are the shards' sums,
    // and each second's RTT p50/p99 is that of both shards' samples of the second (from
    // their logs' `rtt_us{group=NAME}` entries), not either shard's figure.
    for n in ["near", "far"] {
        let merged = m["groups"][n]["intervals"].as_array().expect("intervals");
        let shard_points: Vec<&Vec<Value>> = parts
            .iter()
            .map(|(_, s)| s["groups"][n]["intervals"].as_array().unwrap())
            .collect();
        let key = |p: &Value| {
            (
                p["partial"] == true,
                p["t"].as_f64().unwrap().round() as u64,
            )
        };
        let mut seconds: Vec<(bool, u64)> = shard_points
            .iter()
            .flat_map(|v| v.iter().map(key))
            .collect();
        seconds.sort_unstable();
        seconds.dedup();
        assert_eq!(
            merged.len(),
            seconds.len(),
            "{n}: one point per second of either shard"
        );
        for p in merged {
            let of = |path: &[&str]| -> u64 {
                shard_points
                    .iter()
                    .flat_map(|v| v.iter().filter(|q| key(q) == key(p)))
                    .map(|q| u64_at(q, &path.join(".")))
                    .sum()
            };
            for path in [
                &["bots_connected"][..],
                &["packets_up"],
                &["bytes_down"],
                &["loss_down", "expected"],
                &["loss_down", "received"],
                &["link", "up_offered"],
                &["link", "down_dropped"],
            ] {
                assert_eq!(
                    u64_at(p, &path.join(".")),
                    of(path),
                    "{n} {path:?} at {}",
                    p["t"]
                );
            }
        }
        let tag = format!("rtt_us{{group={n}}}");
        let mut by_second: std::collections::BTreeMap<u64, hdrhistogram::Histogram<u64>> =
            Default::default();
        for (dir, _) in &parts {
            tickswarm::report::hlog_read::read(&dir.join("histograms.hlog"), |e| {
                if e.tag == tag {
                    let h = by_second
                        .entry(e.second)
                        .or_insert_with(tickswarm::metrics::new_histogram);
                    for &(v, c) in e.counts {
                        h.record_n(v, c).unwrap();
                    }
                }
                Ok(())
            })
            .unwrap();
        }
        assert!(
            !by_second.is_empty(),
            "{n}: the shards' logs hold the group's RTT"
        );
        for p in merged.iter().filter(|p| p["partial"] != true) {
            let start = p["t"].as_f64().unwrap().round() as u64 - 1;
            match by_second.get(&start) {
                Some(h) => {
                    assert_eq!(
                        p["rtt_p50_us"].as_u64(),
                        Some(h.value_at_quantile(0.5)),
                        "{n} at {start}"
                    );
                    assert_eq!(
                        p["rtt_p99_us"].as_u64(),
                        Some(h.value_at_quantile(0.99)),
                        "{n} at {start}"
                    );
                }
                None => assert_eq!(opt_u64_at(p, "rtt_p99_us"), None, "{n} at {start}: {p}"),
            }
        }
    }
    let th: Vec<(&str, Option<f64>)> = m["thresholds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["metric"].as_str().unwrap(), t["observed"].as_f64()))
        .collect();
    let far_min = m["groups"]["far"]["rtt_us"]["min"].as_f64();
    assert!(th.contains(&("groups.far.rtt_us.min", far_min)), "{th:?}");
    assert!(th
        .iter()
        .any(|(p, v)| *p == "groups.near.rtt_us.p95" && v.is_some()));
}

/// `validate` shows the groups and their bot counts, and names the line of a mistake.
#[test]
fn validate_shows_the_groups_and_refuses_mistakes_at_their_line() {
    let o = bin()
        .arg("validate")
        .arg(root().join("scenarios/mixed-population.yaml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}");
    for line in [
        "broadband      35 bots (share 70%)",
        "mobile         10 bots (share 20%)",
        "wifi            8 sessions (share 10%)",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(
        &bad,
        SHARDED.replace("rtt{group=far} min", "rtt{group=farr} min"),
    )
    .unwrap();
    let o = bin().arg("validate").arg(&bad).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        err.contains("bad.yaml:20:5:") && err.contains("names group `farr`"),
        "{err}"
    );
}

/// Over ENet, bots of different groups never share a host (`bots_per_socket: 4`): the far
/// group's link delays its ENet handshake and every round trip, the near group's none.
#[test]
fn enet_groups_get_hosts_of_their_own() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("c.yaml");
    std::fs::write(
        &file,
        "name: city-groups\nprotocol:\n  city: {}\npopulation:\n  stages:\n    - ramp_to: 8\n      over: 300ms\n    - hold: 2500ms\nbehaviour:\n  ping_interval: 200ms\nengine:\n  bots_per_socket: 4\ngroups:\n  - name: near\n    share: 50%\n  - name: far\n    share: 50%\n    network:\n      latency: 25ms\n",
    )
    .unwrap();
    let (o, s) = run_scenario(&file, &["--quiet"], &tmp.path().join("o"), &[0]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let g = |n: &str| &s["groups"][n];
    for n in ["near", "far"] {
        assert_eq!(u64_at(g(n), "bots.connected"), 4, "{n}");
    }
    assert!(
        u64_at(g("far"), "rtt_us.min") >= 50_000,
        "{}",
        g("far")["rtt_us"]
    );
    let hs = &g("far")["protocol_metrics"]["transport_handshake_us"];
    assert!(u64_at(hs, "min") >= 50_000, "{hs}");
    assert!(
        u64_at(g("near"), "rtt_us.min") < 50_000,
        "{}",
        g("near")["rtt_us"]
    );
}
