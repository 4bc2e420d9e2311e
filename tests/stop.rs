//! A stop is never lost: not one that comes before the workers subscribed, not `serve`'s.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tickswarm::engine::{self, StopSignal};
use tickswarm::scenario::{self, Overrides, Plan};

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
