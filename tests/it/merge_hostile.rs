//! Run folders from elsewhere are untrusted input: `tickswarm merge` and `tickswarm compare`
//! refuse a hostile `histograms.hlog` or `summary.json` with exit 2 and a message naming the
//! file, within bounded memory and time, and merge long logs of honest small entries in
//! memory that follows the file, not seconds × tags × a histogram's counts array.
//!
//! The hostile entries are built by hand (header bytes, zlib, base64), not by the crate's
//! serializer: the point is a header that lies. Peak RSS is the child's own `ru_maxrss`
//! (wait4), so a process that fails in a millisecond is measured too.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use flate2::write::ZlibEncoder;
use flate2::Compression;
use serde_json::{json, Value};

use crate::common::summary::summary_in;

/// Peak RSS allowed for any merge or compare here (debug build).
const RSS_BOUND_KIB: u64 = 300 * 1024;
/// Wall time allowed for any merge or compare here: a guard against a hang or work that
/// grows with the square of a hostile input (hours at these sizes), not a measure of speed
/// (a debug build beside a 2-core busy loop took 23 s for the 100,000 seconds; about 6 s on
/// a quiet machine).
const TIME_BOUND: Duration = Duration::from_secs(120);

const V2_COOKIE: u32 = 0x1c84_9313;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
const PROJECT_HIGH: u64 = 60_000_000;

/// An inner V2 histogram: header fields as given, then `payload`.
fn v2(payload_len: u32, digits: u32, low: u64, high: u64, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&V2_COOKIE.to_be_bytes());
    b.extend_from_slice(&payload_len.to_be_bytes());
    b.extend_from_slice(&0u32.to_be_bytes());
    b.extend_from_slice(&digits.to_be_bytes());
    b.extend_from_slice(&low.to_be_bytes());
    b.extend_from_slice(&high.to_be_bytes());
    b.extend_from_slice(&1.0f64.to_bits().to_be_bytes());
    b.extend_from_slice(payload);
    b
}

/// The compressed V2 wrapper around a zlib stream.
fn wrap(body: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&V2_COMPRESSED_COOKIE.to_be_bytes());
    b.extend_from_slice(&(body.len() as u32).to_be_bytes());
    b.extend_from_slice(body);
    b
}

fn compressed(inner: &[u8]) -> Vec<u8> {
    let mut z = ZlibEncoder::new(Vec::new(), Compression::default());
    z.write_all(inner).unwrap();
    wrap(&z.finish().unwrap())
}

/// A varint as HdrHistogram writes them (zigzag, LEB128, the 9th byte whole).
fn varint(v: i64) -> Vec<u8> {
    let mut x = ((v << 1) ^ (v >> 63)) as u64;
    let mut out = Vec::new();
    for _ in 0..8 {
        if x < 0x80 {
            out.push(x as u8);
            return out;
        }
        out.push((x as u8 & 0x7f) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
    out
}

/// A project-bounds histogram with `count` samples of value 1 (counter 1).
fn samples_at_one(count: i64) -> Vec<u8> {
    let mut payload = varint(0);
    payload.extend(varint(count));
    compressed(&v2(payload.len() as u32, 3, 1, PROJECT_HIGH, &payload))
}

fn line(tag: &str, second: u64, entry: &[u8]) -> String {
    format!(
        "Tag={tag},{second}.000,1.000,1.000,{}\n",
        base64::engine::general_purpose::STANDARD.encode(entry)
    )
}

const HEADER: &str = "#[StartTime: 0.000 (seconds since epoch), Thu Jan 01 00:00:00 UTC 1970]\n\
    \"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n";

fn summary() -> Value {
    let h = json!({"count":0,"min":0,"mean":0.0,"p50":0,"p90":0,"p99":0,"p999":0,"max":0});
    json!({
        "schema": 1, "protocol": "cafe", "transport": "udp", "dialect": "", "scenario": "s",
        "scenario_file": "", "target": "127.0.0.1:1", "started_at": "2026-01-01T00:00:00Z",
        "duration_s": 1.0, "interrupted": false, "seed": 1,
        "bots": {"planned": 1, "connected": 1, "failed": 0},
        "rtt_us": h, "handshake_us": h, "snapshot_interarrival_us": h,
        "generator": {"send_lateness_us": h, "inputs_skipped": 0, "workers": 1, "send_errors": {}},
        "loss": {"downstream": null, "upstream": null},
        "loss_method": {"downstream": "", "upstream": ""},
        "bandwidth": {"up_bytes": 0, "down_bytes": 0, "up_packets": 0, "down_packets": 0},
        "inputs_sent": 0, "snapshots_applied": 0, "errors": {"decode": {}, "connect": {}},
        "protocol_metrics": {}, "thresholds": [], "verdict": "pass", "intervals": []
    })
}

/// A run folder `name` under `root` with `summary` and a log of `lines`, written as they come
/// (a long log is never held whole).
fn run_dir(
    root: &Path,
    name: &str,
    summary: &Value,
    lines: impl IntoIterator<Item = String>,
) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
    let mut f =
        std::io::BufWriter::new(std::fs::File::create(dir.join("histograms.hlog")).unwrap());
    f.write_all(HEADER.as_bytes()).unwrap();
    for l in lines {
        f.write_all(l.as_bytes()).unwrap();
    }
    f.flush().unwrap();
    dir
}

/// A small honest run: one second of one RTT sample.
fn honest(root: &Path, name: &str) -> PathBuf {
    run_dir(
        root,
        name,
        &summary(),
        [line("rtt_us", 0, &samples_at_one(1))],
    )
}

struct Outcome {
    code: Option<i32>,
    stderr: String,
    peak_kib: u64,
    wall: Duration,
}

/// The child's own high-water RSS so far (`VmHWM` of its address space), in KiB; `None` once
/// it has exited.
fn vm_hwm_kib(pid: libc::pid_t) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Run tickswarm with `args`, measuring its peak RSS and wall time.
///
/// `ru_maxrss` from wait4 is an upper bound only: Linux records, at the child's exec, the
/// high-water mark of the address space it leaves, which for a child spawned with vfork (as
/// `Command` does) is this test process's own, 300 MB on a full suite run. When it is above
/// the bound, the child's own high-water (`VmHWM`, read every millisecond while it runs)
/// decides.
// The child is reaped by wait4 (for its rusage), not by `Child::wait`.
#[allow(clippy::zombie_processes)]
fn tickswarm(args: &[&std::ffi::OsStr]) -> Outcome {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut stderr_pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr_pipe.read_to_string(&mut s);
        s
    });
    let deadline = start + Duration::from_secs(120);
    let mut own_kib = 0u64;
    let (status, usage) = loop {
        if let Some(k) = vm_hwm_kib(pid) {
            own_kib = own_kib.max(k);
        }
        let mut status = 0;
        // SAFETY: plain syscall on our own child; `usage` is a valid out-pointer.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break (status, usage);
        }
        assert!(r == 0, "wait4 failed");
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tickswarm {args:?} did not end in 120 s");
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let wall = start.elapsed();
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let stderr = reader.join().unwrap();
    let o = Outcome {
        code,
        stderr,
        peak_kib: if (usage.ru_maxrss as u64) < RSS_BOUND_KIB {
            usage.ru_maxrss as u64
        } else {
            own_kib
        },
        wall,
    };
    eprintln!(
        "{:?}: exit {:?}, peak RSS {} KiB, {:.2} s, stderr: {}",
        args.first(),
        o.code,
        o.peak_kib,
        o.wall.as_secs_f64(),
        o.stderr.trim()
    );
    o
}

fn merge(dirs: &[&Path], out: &Path, extra: &[&str]) -> Outcome {
    let mut args: Vec<&std::ffi::OsStr> = vec!["merge".as_ref(), "--quiet".as_ref()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    args.extend(dirs.iter().map(|d| d.as_os_str()));
    args.push("--out".as_ref());
    args.push(out.as_os_str());
    tickswarm(&args)
}

fn assert_bounded(o: &Outcome) {
    assert!(o.peak_kib < RSS_BOUND_KIB, "peak RSS {} KiB", o.peak_kib);
    assert!(o.wall < TIME_BOUND, "took {:?}", o.wall);
    assert_ne!(o.code, Some(101), "a panic: {}", o.stderr);
}

/// Exit 2, bounded, and a message naming `file` and saying `why`.
fn assert_refused(o: &Outcome, file: &Path, why: &str) {
    assert_bounded(o);
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert!(
        o.stderr.contains(&file.display().to_string()),
        "the message names {}: {}",
        file.display(),
        o.stderr
    );
    assert!(
        o.stderr.contains(why),
        "the message says {why:?}: {}",
        o.stderr
    );
}

/// A 140-byte line whose header claims a 4 GB payload is refused before anything is
/// allocated from it (it took 4.2 GB before).
#[test]
fn a_four_gigabyte_payload_claim_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let entry = compressed(&v2(u32::MAX, 3, 1, PROJECT_HIGH, &[0, 2]));
    let bad = run_dir(tmp.path(), "bad", &summary(), [line("rtt_us", 0, &entry)]);
    let ok = honest(tmp.path(), "ok");
    let o = merge(&[&ok, &bad], &tmp.path().join("out"), &[]);
    assert_refused(
        &o,
        &bad.join("histograms.hlog"),
        "line 3 (histogram entry 1): claims a payload of 4294967295 bytes",
    );
    assert!(!tmp.path().join("out").exists(), "nothing is written");
}

/// A zlib bomb: a valid header claiming 2 payload bytes, then 256 MiB of zeros in a stream of
/// a few hundred KB. It is not inflated past its claim.
#[test]
fn a_zlib_bomb_is_refused_without_inflating_it() {
    let tmp = tempfile::tempdir().unwrap();
    let mut z = ZlibEncoder::new(Vec::new(), Compression::best());
    z.write_all(&v2(2, 3, 1, PROJECT_HIGH, &[0, 2])).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..256 {
        z.write_all(&zeros).unwrap();
    }
    let entry = wrap(&z.finish().unwrap());
    let bad = run_dir(tmp.path(), "bomb", &summary(), [line("rtt_us", 0, &entry)]);
    let o = merge(&[&bad], &tmp.path().join("out"), &[]);
    assert_refused(
        &o,
        &bad.join("histograms.hlog"),
        "inflates to more than the 2 payload bytes its header claims",
    );
}

/// Wide bounds and too many significant digits (a counts array of millions per entry; 88 KB
/// of them cost 24 s of CPU before) are refused at the header.
#[test]
fn wide_bounds_and_too_many_digits_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, digits, high, why) in [
        (
            "digits",
            5,
            1u64 << 40,
            "5 significant digits (at most 3 are read)",
        ),
        ("bounds", 3, 1u64 << 62, "bounds 1..4611686018427387904"),
    ] {
        let entry = compressed(&v2(2, digits, 1, high, &[0, 2]));
        let bad = run_dir(
            tmp.path(),
            name,
            &summary(),
            (0..200).map(|s| line("rtt_us", s, &entry)),
        );
        let o = merge(&[&bad], &tmp.path().join(format!("out-{name}")), &[]);
        assert_refused(&o, &bad.join("histograms.hlog"), why);
    }
}

/// 20,000 seconds of one-sample entries (5.5 GB before) merge in bounded memory, and the
/// merged report draws its per-second percentiles from the merged log.
#[test]
fn twenty_thousand_seconds_merge_and_the_report_has_its_per_second_chart() {
    let tmp = tempfile::tempdir().unwrap();
    let entry = samples_at_one(1);
    let long = run_dir(
        tmp.path(),
        "long",
        &summary(),
        (0..20_000).map(|s| line("rtt_us", s, &entry)),
    );
    let ok = honest(tmp.path(), "ok");
    let out = tmp.path().join("out");
    let o = merge(&[&long, &ok], &out, &[]);
    assert_bounded(&o);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let s: Value = summary_in(&out);
    assert_eq!(s["rtt_us"]["count"], 20_001);
    let log = std::fs::read_to_string(out.join("histograms.hlog")).unwrap();
    assert_eq!(
        log.lines().filter(|l| l.starts_with("Tag=rtt_us,")).count(),
        20_000
    );
    // Second 0 holds both runs' samples: one line, two samples.
    assert!(
        log.contains("Tag=rtt_us,0.000,1.000,1.000,"),
        "{}",
        &log[..400]
    );
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        report.contains("p50, p90, p99 and max of each second."),
        "the merged report draws the percentiles over time from the merged log"
    );
}

/// 100,000 seconds (8 GB and an abort before) merge in bounded memory and time.
#[test]
fn a_hundred_thousand_seconds_merge_in_bounded_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let entry = samples_at_one(2);
    let long = run_dir(
        tmp.path(),
        "long",
        &summary(),
        (0..100_000).map(|s| line("rtt_us", s, &entry)),
    );
    let out = tmp.path().join("out");
    let o = merge(&[&long], &out, &[]);
    assert_bounded(&o);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let s: Value = summary_in(&out);
    assert_eq!(s["rtt_us"]["count"], 200_000);
    assert_eq!(
        (s["rtt_us"]["p50"].as_u64(), s["rtt_us"]["max"].as_u64()),
        (Some(1), Some(1))
    );
}

/// 50,000 distinct tags in one second (8 GB before) are refused at the 257th.
#[test]
fn fifty_thousand_tags_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let entry = samples_at_one(1);
    let bad = run_dir(
        tmp.path(),
        "tags",
        &summary(),
        (0..50_000).map(|t| line(&format!("t{t}_us"), 0, &entry)),
    );
    let o = merge(&[&bad], &tmp.path().join("out"), &[]);
    assert_refused(
        &o,
        &bad.join("histograms.hlog"),
        "line 259 (histogram entry 257): more than 256 distinct tags",
    );
}

/// Counters that would wrap when added up (they wrapped silently before, or panicked a debug
/// build) are refused: a summary counter, and histogram sample counts.
#[test]
fn counters_that_would_overflow_u64_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = summary();
    s["bandwidth"]["up_bytes"] = json!(1u64 << 63);
    let a = run_dir(tmp.path(), "a", &s, [line("rtt_us", 0, &samples_at_one(1))]);
    let b = run_dir(tmp.path(), "b", &s, [line("rtt_us", 0, &samples_at_one(1))]);
    let o = merge(&[&a, &b], &tmp.path().join("out-a"), &[]);
    assert_refused(
        &o,
        &b.join("summary.json"),
        "bandwidth.up_bytes added up overflows u64",
    );

    let big = samples_at_one(i64::MAX);
    let c = run_dir(
        tmp.path(),
        "c",
        &summary(),
        (0..3).map(|sec| line("rtt_us", sec, &big)),
    );
    let o = merge(&[&c], &tmp.path().join("out-c"), &[]);
    assert_refused(
        &o,
        &c.join("histograms.hlog"),
        "line 5 (histogram entry 3): sample counts added up overflow u64",
    );
}

/// Not hostile, but a counter the merge must add like the others: bots lost and bots silent
/// at the end are every run's (they were the first run's alone).
#[test]
fn lost_and_silent_bots_of_every_run_add_up() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = summary();
    s["bots"]["lost"] = json!(3);
    s["bots"]["silent_at_end"] = json!(2);
    let a = honest(tmp.path(), "a");
    let b = run_dir(tmp.path(), "b", &s, [line("rtt_us", 0, &samples_at_one(1))]);
    let out = tmp.path().join("out");
    let o = merge(&[&a, &b], &out, &[]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let m: Value = summary_in(&out);
    assert_eq!(
        (&m["bots"]["lost"], &m["bots"]["silent_at_end"]),
        (&json!(3), &json!(2))
    );
}

/// An interval point with more targets than any run has (each merges by a search through
/// the others: 100,000 of them would take hours) is refused.
#[test]
fn an_interval_with_too_many_targets_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = summary();
    let targets: Vec<Value> = (0..1025)
        .map(|i| json!({"target": format!("10.0.{}.{}:7777", i / 256, i % 256), "phases": {}, "bytes_up": 1, "bytes_down": 1}))
        .collect();
    s["intervals"] = json!([{"t": 1.0, "bots_connected": 1, "packets_up": 1, "packets_down": 1,
        "bytes_up": 1, "bytes_down": 1, "inputs_sent": 1, "snapshots_applied": 1,
        "loss_down_rate": 0.0, "targets": targets}]);
    let a = run_dir(tmp.path(), "a", &s, [line("rtt_us", 0, &samples_at_one(1))]);
    let b = honest(tmp.path(), "b");
    let o = merge(&[&b, &a], &tmp.path().join("out"), &[]);
    assert_refused(&o, &a.join("summary.json"), "1025 targets");
}

/// A summary.json beyond 64 MiB is not read: refused from its size, and, where the size says
/// nothing (an endless device), by the limit on the read itself. An endless histograms.hlog
/// is refused at its first over-long line.
#[test]
fn oversized_and_endless_files_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = honest(tmp.path(), "big");
    let f = std::fs::File::create(dir.join("summary.json")).unwrap();
    f.set_len((64 << 20) + 1).unwrap();
    let o = merge(&[&dir], &tmp.path().join("out"), &[]);
    assert_refused(&o, &dir.join("summary.json"), "larger than 64 MiB");

    let endless = honest(tmp.path(), "endless");
    std::fs::remove_file(endless.join("summary.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", endless.join("summary.json")).unwrap();
    let o = merge(&[&endless], &tmp.path().join("out"), &[]);
    assert_refused(&o, &endless.join("summary.json"), "larger than 64 MiB");

    let endless_log = honest(tmp.path(), "endless-log");
    std::fs::remove_file(endless_log.join("histograms.hlog")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", endless_log.join("histograms.hlog")).unwrap();
    let o = merge(&[&endless_log], &tmp.path().join("out"), &[]);
    assert_refused(
        &o,
        &endless_log.join("histograms.hlog"),
        "line 1 is longer than 1024 KiB",
    );
}

/// `compare` reads base runs through the same reader: a hostile base is exit 2.
#[test]
fn compare_refuses_a_hostile_base() {
    let tmp = tempfile::tempdir().unwrap();
    let entry = compressed(&v2(u32::MAX, 3, 1, PROJECT_HIGH, &[0, 2]));
    let bad = run_dir(tmp.path(), "base", &summary(), [line("rtt_us", 0, &entry)]);
    let ok = honest(tmp.path(), "new");
    let o = tickswarm(&[
        "compare".as_ref(),
        "--quiet".as_ref(),
        bad.as_os_str(),
        ok.as_os_str(),
    ]);
    assert_refused(
        &o,
        &bad.join("histograms.hlog"),
        "claims a payload of 4294967295 bytes",
    );
}

/// `merge --force` into a folder holding an older run's histograms.hlog: the report is drawn
/// from the log this merge wrote, never from the stale one.
#[test]
fn a_forced_merge_replaces_a_stale_log_before_the_report_reads_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_dir(
        tmp.path(),
        "out",
        &summary(),
        (0..5).map(|s| line("stale_only_us", s, &samples_at_one(7))),
    );
    let a = honest(tmp.path(), "a");
    let b = honest(tmp.path(), "b");
    let o = merge(&[&a, &b], &out, &["--force"]);
    assert_bounded(&o);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let log = std::fs::read_to_string(out.join("histograms.hlog")).unwrap();
    assert!(!log.contains("stale_only_us"), "{log}");
    assert_eq!(
        log.lines().filter(|l| l.starts_with("Tag=rtt_us,")).count(),
        1
    );
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        !report.contains("stale_only_us"),
        "the report shows the stale log"
    );
    assert!(report.contains("p50, p90, p99 and max of each second."));
}
