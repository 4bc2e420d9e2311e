//! A stop is never lost: not one that comes before the workers subscribed, not `serve`'s.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tickswarm::engine::{self, StopSignal};
use tickswarm::scenario::{self, Overrides, Plan};

use crate::common::summary::{run_command, run_scenario, summary_in};

#[test]
fn a_stop_before_the_run_starts_ends_it_at_once_and_marks_it_interrupted() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.yaml");
    let file = scenario::load(&path).expect("the quickstart scenario parses");
    let ov = Overrides {
        bots: Some(5),
        duration: Some(Duration::from_secs(20)),
        ..Overrides::default()
    };
    let plan = Plan::build(file, &path, &ov).expect("a valid plan");
    let stop = StopSignal::new();
    // Ctrl-C lands before any worker subscribed to the signal.
    stop.stop();
    assert!(stop.is_stopped());
    let t0 = Instant::now();
    let outcome = engine::run(&plan, &stop, |_, _, _| {}).expect("the run starts");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "a 20 s run stopped before it began took {:?}",
        t0.elapsed()
    );
    assert!(outcome.interrupted);
}

#[test]
fn serve_stops_on_the_first_sigint_with_its_summary_line() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .args(["serve", "cafe", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start serve");
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling our own child process by its pid.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(rc, 0);
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for serve") {
            break Some(s);
        }
        if t0.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let status = status.expect("serve exits within 5 s of one SIGINT");
    assert!(status.success(), "serve exited with {status}");
    let out = child.wait_with_output().expect("serve output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("served 0 clients"), "{stdout}");
}

/// A `tickswarm run` of the embedded cafe server, `bots` bots for `duration`, into `out`.
fn start_run(dir: &Path, bots: u32, duration: &str, stderr: Stdio) -> std::process::Child {
    start_run_with(dir, bots, duration, stderr, "")
}

/// [`start_run`] with `extra` appended to the scenario.
fn start_run_with(
    dir: &Path,
    bots: u32,
    duration: &str,
    stderr: Stdio,
    extra: &str,
) -> std::process::Child {
    let scenario = dir.join("s.yaml");
    std::fs::write(
        &scenario,
        format!(
            "name: stop\nprotocol:\n  cafe: {{}}\npopulation:\n  stages:\n    - ramp_to: {bots}\n      over: 0s\nduration: {duration}\n{extra}"
        ),
    )
    .expect("write the scenario");
    run_command(&scenario, &[], &dir.join("out"))
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start tickswarm run")
}

/// Wait at most `limit` for `child` to end.
fn wait_for(child: &mut std::process::Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("wait for the run") {
            return Some(s);
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM is what `docker stop`, Kubernetes and CI runners send: it stops the run as the first
/// Ctrl-C does, with the whole report written and `interrupted: true`, and the exit code is the
/// verdict's, not 143. With `interrupted: pass` the thresholds alone decide it (the default,
/// `fail`, is `e2e_cafe::ctrl_c_still_writes_the_report`).
#[test]
fn sigterm_stops_a_run_with_its_report_written() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut child = start_run_with(tmp.path(), 5, "60s", Stdio::null(), "interrupted: pass\n");
    // Let the swarm start playing (a debug build on a busy machine: a few seconds).
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: signalling our own child process by its pid.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let status = wait_for(&mut child, Duration::from_secs(20))
        .expect("the run ends within 20 s of one SIGTERM");
    let out = tmp.path().join("out");
    for f in ["summary.json", "report.html", "histograms.hlog"] {
        assert!(out.join(f).is_file(), "{f} written after SIGTERM");
    }
    let s = summary_in(&out);
    assert_eq!(s["interrupted"], true, "{s}");
    let check = s["thresholds"]
        .as_array()
        .expect("thresholds")
        .iter()
        .find(|t| t["metric"] == "duration_s")
        .expect("the interruption's row");
    assert_eq!(check["ok"], true, "interrupted: pass");
    let verdict = s["verdict"].as_str().expect("a verdict");
    let others_held = s["thresholds"]
        .as_array()
        .expect("thresholds")
        .iter()
        .all(|t| t["ok"] == true);
    assert_eq!(
        verdict == "pass",
        others_held,
        "the thresholds alone decide"
    );
    let expected = if verdict == "pass" { 0 } else { 1 };
    assert_eq!(status.code(), Some(expected), "exit by verdict ({verdict})");
    assert!(
        s["duration_s"].as_f64().expect("duration") < 30.0,
        "stopped long before its 60 s"
    );
}

/// `tickswarm run … 2>&1 | head -1`: stderr closes after the first line. The run goes on and
/// writes its report; a reader that went away is not an error of the run (it panicked with
/// exit 101 and left only the hlog).
#[test]
fn a_closed_stderr_does_not_stop_the_run_or_lose_the_report() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut child = start_run(tmp.path(), 3, "2s", Stdio::piped());
    // Read nothing and close the pipe: every later write to stderr fails with EPIPE.
    drop(child.stderr.take());
    let status = wait_for(&mut child, Duration::from_secs(30)).expect("the run ends on its own");
    assert_eq!(
        status.code(),
        Some(0),
        "the run passed and said so by its exit code, without stderr"
    );
    let out = tmp.path().join("out");
    for f in [
        "summary.json",
        "report.html",
        "junit.xml",
        "histograms.hlog",
    ] {
        assert!(out.join(f).is_file(), "{f} written with stderr closed");
    }
}

/// An output folder that cannot be written is an I/O error: exit 2, never 1 (which CI reads as
/// "the thresholds failed").
#[test]
fn an_unwritable_out_folder_exits_2() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let scenario = tmp.path().join("s.yaml");
    std::fs::write(
        &scenario,
        "name: io\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 1\n      over: 0s\nduration: 1s\n",
    )
    .expect("write the scenario");
    // sysfs refuses new files even to root, after the folder check found nothing there: the
    // failure comes when the first file is created (it exited 1 here before).
    // No summary can be written: only the exit code and stderr are judged.
    let o = run_command(&scenario, &[], Path::new("/sys/kernel/tickswarm-test-out"))
        .output()
        .expect("run tickswarm");
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("error:"));
}

/// `serve --scenario /dev/zero` (or any endless or huge file) is refused with a message; it
/// read without limit before.
#[test]
fn an_endless_scenario_file_is_refused() {
    for cmd in [
        vec!["serve", "cafe", "--scenario", "/dev/zero"],
        vec!["validate", "/dev/zero"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
            .args(&cmd)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tickswarm");
        let status = wait_for(&mut child, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("`{}` ends on its own", cmd.join(" ")));
        assert_eq!(status.code(), Some(2), "{}", cmd.join(" "));
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err)
            .expect("read stderr");
        assert!(err.contains("longer than 1024 KiB"), "{err}");
    }
}

/// A scenario name with terminal escape sequences (a window-title OSC, a line clear) is shown,
/// not obeyed: no ESC or BEL byte reaches the console.
#[test]
fn escape_sequences_in_a_scenario_never_reach_the_terminal() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let scenario = tmp.path().join("s.yaml");
    std::fs::write(
        &scenario,
        "name: \"evil\\e]0;pwned\\a\\e[2Kname\"\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 1\n      over: 0s\nduration: 1s\n",
    )
    .expect("write the scenario");
    let (o, _) = run_scenario(&scenario, &[], &tmp.path().join("out"), &[0, 1]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("evil\\u{1b}]0;pwned\\u{7}"), "{err}");
    for (what, bytes) in [("stderr", &o.stderr), ("stdout", &o.stdout)] {
        assert!(
            !bytes.iter().any(|&b| b == 0x1b || b == 0x07),
            "a raw ESC or BEL on {what}: {err}"
        );
    }
}

/// `serve -q` prints no progress line, and its closing line is words, not Rust's debug output
/// (it ended in `malformed dropped: []; events: [("heartbeat_echo_received", 40)]`).
#[test]
fn serve_quiet_is_quiet_and_its_last_line_is_plain() {
    let out = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .args(["serve", "cafe", "--port", "0", "--duration", "2500ms", "-q"])
        .output()
        .expect("run serve");
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "serve -q wrote to stderr: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("a closing line");
    assert!(
        last.starts_with("served 0 clients") && last.contains("malformed dropped: none"),
        "{last}"
    );
    for shape in ["[(", "{", "[]", "(\""] {
        assert!(
            !stdout.contains(shape),
            "debug formatting `{shape}` in {stdout}"
        );
    }
}
