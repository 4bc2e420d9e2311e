//! Scale-out on one machine: three `--shard I/3` processes against one `tickswarm serve`
//! process, then `tickswarm merge`. The shards together are the whole population; the merged
//! counts are the shards' sums and the merged percentiles are those of one histogram holding
//! every sample of every shard (read back from the shards' own histograms.hlog).

use std::path::Path;
use std::process::{Child, Command, Stdio};

use base64::Engine as _;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use serde_json::Value;

use crate::common::summary::{at, finish, run_command, summary_in, u64_at};

const SHARDS: u32 = 3;
const BOTS: u64 = 30;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tickswarm"))
}

/// The serve process, killed when the test ends however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve() -> (Server, String) {
    let (child, addr) = crate::common::serve::serve("cafe", &["--duration", "60s"]);
    (Server(child), addr)
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every `tag` histogram in a log, added into `into`.
fn add_tag(path: &Path, tag: &str, into: &mut Histogram<u64>) {
    let bytes = std::fs::read(path).unwrap();
    let mut de = Deserializer::new();
    for e in IntervalLogIterator::new(&bytes) {
        let LogEntry::Interval(i) = e.unwrap() else {
            continue;
        };
        if i.tag().map(|t| t.as_str()) != Some(tag) {
            continue;
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(i.encoded_histogram())
            .unwrap();
        let h: Histogram<u64> = de.deserialize(&mut raw.as_slice()).unwrap();
        into.add(&h).unwrap();
    }
}

#[test]
fn three_shards_against_one_server_merge_into_one_run() {
    let (_server, addr) = serve();
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("s.yaml");
    std::fs::write(
        &scenario,
        format!(
            "name: sharded\nprotocol:\n  cafe: {{}}\npopulation:\n  stages:\n    - ramp_to: {BOTS}\n      over: 600ms\n    - hold: 2s\nbehaviour:\n  ping_interval: 100ms\nseed: 7\n"
        ),
    )
    .unwrap();
    // The three shards run at once, as three pods would. Two take their index the Indexed
    // Job's way (JOB_COMPLETION_INDEX with --shards), one from --shard.
    let dirs: Vec<_> = (0..SHARDS)
        .map(|i| tmp.path().join(format!("shard-{i}")))
        .collect();
    let children: Vec<Child> = (0..SHARDS)
        .map(|i| {
            let mut c = run_command(
                &scenario,
                &["--target", &addr, "--quiet", "--workers", "2"],
                &dirs[i as usize],
            );
            c.stderr(Stdio::piped());
            if i == 0 {
                c.args(["--shard", "0/3"]);
            } else {
                c.env("JOB_COMPLETION_INDEX", i.to_string())
                    .env("TICKSWARM_SHARDS", SHARDS.to_string());
            }
            c.spawn().unwrap()
        })
        .collect();
    let shards: Vec<Value> = children
        .into_iter()
        .zip(&dirs)
        .map(|(c, d)| finish(&c.wait_with_output().unwrap(), d, &[0]))
        .collect();
    for (i, s) in shards.iter().enumerate() {
        // 30 bots by index % 3: ten each, every one connected.
        assert_eq!(s["bots"]["planned"], BOTS / u64::from(SHARDS), "shard {i}");
        assert_eq!(s["bots"]["connected"], s["bots"]["planned"], "shard {i}");
    }

    let merged = tmp.path().join("merged");
    let o = bin()
        .args(["merge", "--quiet", "--json"])
        .args(&dirs)
        .arg("--out")
        .arg(&merged)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let m: Value = serde_json::from_slice(&o.stdout).expect("--json prints the merged summary");
    assert_eq!(m, summary_in(&merged));

    // Counts: the shards' sums.
    let sum = |f: &dyn Fn(&Value) -> u64| shards.iter().map(f).sum::<u64>();
    assert_eq!(m["bots"]["planned"], BOTS);
    assert_eq!(m["bots"]["connected"], BOTS);
    for key in ["inputs_sent", "snapshots_applied"] {
        assert_eq!(
            m[key].as_u64().unwrap(),
            sum(&|s| s[key].as_u64().unwrap()),
            "{key}"
        );
    }
    for key in ["up_packets", "down_packets", "up_bytes", "down_bytes"] {
        assert_eq!(
            m["bandwidth"][key].as_u64().unwrap(),
            sum(&|s| s["bandwidth"][key].as_u64().unwrap()),
            "{key}"
        );
    }
    for key in ["expected", "received"] {
        assert_eq!(
            m["loss"]["downstream"][key].as_u64().unwrap(),
            sum(&|s| s["loss"]["downstream"][key].as_u64().unwrap()),
            "{key}"
        );
    }

    // Bots by phase, second by second: the shards' sums (every bot of each shard in game
    // or on its way there, none lost between the shards).
    // A shard that had not reported second `i` adds no bots to it; a second it reported
    // must name every phase.
    let phase_at = |s: &Value, i: usize, phase: &str| {
        at(s, "intervals")
            .as_array()
            .expect("intervals is a list")
            .get(i)
            .map_or(0, |p| u64_at(p, &format!("phases.{phase}")))
    };
    let whole = at(&m, "intervals").as_array().unwrap().len();
    for i in 0..whole.saturating_sub(1) {
        let got = at(&m, &format!("intervals.{i}.phases"));
        for phase in ["in_game", "protocol_handshake", "connecting"] {
            let want: u64 = shards.iter().map(|s| phase_at(s, i, phase)).sum();
            assert_eq!(u64_at(got, phase), want, "second {i}: {phase} in {got}");
        }
    }

    // The generators' health, second by second: every shard's workers side by side, and
    // the processes' resident memory added up, wherever every shard reported the second.
    let health_at = |s: &Value, i: usize| s["intervals"][i]["generator"].clone();
    let mut seconds_with_health = 0;
    for i in 0..whole.saturating_sub(1) {
        let parts: Vec<Value> = shards.iter().map(|s| health_at(s, i)).collect();
        let got = health_at(&m, i);
        if parts.iter().any(Value::is_null) {
            assert!(got.is_null(), "second {i}: a shard had no health: {got}");
            continue;
        }
        seconds_with_health += 1;
        let workers: usize = parts
            .iter()
            .map(|p| p["worker_cpu"].as_array().expect("worker_cpu").len())
            .sum();
        assert_eq!(
            got["worker_cpu"]
                .as_array()
                .expect("merged worker_cpu")
                .len(),
            workers,
            "second {i}: {got}"
        );
        let rss: u64 = parts
            .iter()
            .map(|p| p["rss_bytes"].as_u64().expect("rss_bytes"))
            .sum();
        assert_eq!(got["rss_bytes"].as_u64(), Some(rss), "second {i}");
    }
    assert!(
        seconds_with_health > 0,
        "no second had every shard's health"
    );

    // Percentiles: those of one histogram holding every shard's samples.
    for (tag, key) in [("rtt_us", "rtt_us"), ("handshake_us", "handshake_us")] {
        let mut all = tickswarm::metrics::new_histogram();
        for d in &dirs {
            add_tag(&d.join("histograms.hlog"), tag, &mut all);
        }
        let got = &m[key];
        assert_eq!(got["count"].as_u64().unwrap(), all.len(), "{tag} count");
        assert_eq!(
            got["count"].as_u64().unwrap(),
            sum(&|s| s[key]["count"].as_u64().unwrap()),
            "{tag} count is the shards' sum"
        );
        for (stat, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)] {
            assert_eq!(
                got[stat].as_u64().unwrap(),
                all.value_at_quantile(q),
                "{tag} {stat}"
            );
        }
        assert_eq!(got["max"].as_u64().unwrap(), all.max(), "{tag} max");
        assert_eq!(got["min"].as_u64().unwrap(), all.min(), "{tag} min");
    }

    // The merged log keeps the format-version header and merges again to the same figures.
    let hlog = std::fs::read_to_string(merged.join("histograms.hlog")).unwrap();
    assert!(
        hlog.contains("\n#[Histogram log format version 1.3]\n"),
        "{hlog:.400}"
    );
    let again = tmp.path().join("again");
    let o = bin()
        .args(["merge", "--quiet"])
        .arg(&merged)
        .arg("--out")
        .arg(&again)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(summary_in(&again)["rtt_us"], m["rtt_us"]);

    // A shard's folder given twice would count it twice: refused.
    let o = bin()
        .args(["merge", "--quiet"])
        .arg(&dirs[0])
        .arg(&dirs[1])
        .arg(&dirs[0])
        .arg("--out")
        .arg(tmp.path().join("twice"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("given twice"));
    assert!(!tmp.path().join("twice").exists());

    // Every shard says which it is and what was run; the merged result, which it merged.
    let hashes: Vec<Value> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let s = summary_in(d);
            assert_eq!(s["shard"]["index"], i as u64);
            assert_eq!(s["shard"]["count"], SHARDS);
            s["scenario_hash"].clone()
        })
        .collect();
    assert!(hashes[0].is_string() && hashes.iter().all(|h| *h == hashes[0]));
    assert_eq!(m["merged_shards"]["missing"], serde_json::json!([]));
    assert_eq!(m["merged_shards"]["merged"], serde_json::json!([0, 1, 2]));

    let merge = |dirs: &[&Path], out: &str, extra: &[&str]| {
        let mut c = bin();
        c.args(["merge", "--quiet"]).args(extra);
        for d in dirs {
            c.arg(d);
        }
        c.arg("--out").arg(tmp.path().join(out));
        c.output().unwrap()
    };
    // A lost pod: shard 0 alone is refused, naming what is missing...
    let o = merge(&[&dirs[0]], "partial", &[]);
    let e = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("shards 1, 2 of 3 missing"), "{e}");
    // ...or merged with --allow-missing, and the verdict fails saying so.
    let o = merge(&[&dirs[0]], "partial", &["--allow-missing"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let p = json(&tmp.path().join("partial/summary.json"));
    assert_eq!(p["merged_shards"]["missing"], serde_json::json!([1, 2]));
    assert_eq!(p["verdict"], "fail");
    let t = p["thresholds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["condition"] == "all 3 shards merged")
        .expect("the missing shards are a failed check");
    assert_eq!(
        (t["ok"].clone(), t["observed"].clone()),
        (false.into(), 2.0.into())
    );

    // Runs that are not shards of one run are refused, each with its reason.
    let edited = |name: &str, edit: &dyn Fn(&mut Value)| {
        let d = tmp.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        for f in ["summary.json", "histograms.hlog"] {
            std::fs::copy(dirs[2].join(f), d.join(f)).unwrap();
        }
        let mut s = json(&d.join("summary.json"));
        edit(&mut s);
        std::fs::write(d.join("summary.json"), s.to_string()).unwrap();
        d
    };
    let other = edited("other", &|s| s["scenario_hash"] = "0123456789abcdef".into());
    let reseeded = edited("reseeded", &|s| s["seed"] = 12345.into());
    let whole = edited("whole", &|s| {
        s.as_object_mut().unwrap().remove("shard");
    });
    for (d, why) in [
        (&other, "is a run of another scenario"),
        (&reseeded, "has seed 12345"),
        (&whole, "is a shard, and"),
    ] {
        let o = merge(&[&dirs[0], &dirs[1], d], "foreign", &[]);
        let e = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(e.contains(why), "{why}: {e}");
    }
}

#[test]
fn a_shard_count_without_an_index_is_bad_usage() {
    let s = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.yaml");
    let o = bin()
        .arg("validate")
        .arg(&s)
        .args(["--shards", "3"])
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("JOB_COMPLETION_INDEX"));
    let o = bin()
        .arg("validate")
        .arg(&s)
        .args(["--shard", "3/3"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}
