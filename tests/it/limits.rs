//! Numbers a user can get wrong are refused with exit 2 and a sentence that names the key,
//! before anything is allocated or bound, and a refused run leaves no output folder behind.

use std::path::Path;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tickswarm"))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const BASE: &str =
    "name: x\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 10\n      over: 1s\n";

/// `validate` on `BASE` plus `extra` (and `args`): exit 2 and a message containing `want`.
fn refused(extra: &str, args: &[&str], want: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("s.yaml");
    std::fs::write(&p, format!("{BASE}{extra}")).unwrap();
    let o = bin().arg("validate").arg(&p).args(args).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{extra} {args:?}: {}", stderr(&o));
    assert!(
        stderr(&o).contains(want),
        "{extra} {args:?}: {}",
        stderr(&o)
    );
}

#[test]
fn impossible_populations_are_refused_before_they_are_allocated() {
    refused("", &["--bots", "5000000000"], "at most 1000000 bots");
    refused(
        "  spawn_rate: 1e-300\n",
        &[],
        "population.spawn_rate 1e-300: less than one bot",
    );
}

#[test]
fn zero_rates_and_timeouts_are_refused() {
    refused("server:\n  tick_rate: 0\n", &[], "server.tick_rate");
    refused("server:\n  full_every: 0\n", &[], "server.full_every");
    refused(
        "server:\n  client_timeout: 0s\n",
        &[],
        "server.client_timeout",
    );
    refused(
        "behaviour:\n  silence_timeout: 0s\n",
        &[],
        "behaviour.silence_timeout",
    );
    refused(
        "behaviour:\n  handshake_timeout: 0ms\n",
        &[],
        "behaviour.handshake_timeout",
    );
}

#[test]
fn an_empty_scenario_names_its_file() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("empty.yaml");
    std::fs::write(&p, "\n").unwrap();
    let o = bin().arg("validate").arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("empty.yaml"), "{}", stderr(&o));
    assert!(stderr(&o).contains("empty"), "{}", stderr(&o));
}

#[test]
fn serve_refuses_ports_past_65535_and_ids_the_wire_cannot_carry() {
    let o = bin()
        .args(["serve", "city", "--port", "65530", "--instances", "10"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("past port 65535"), "{}", stderr(&o));
    let o = bin()
        .args(["serve", "cafe", "--port", "0", "--max-clients", "70000"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("16-bit"), "{}", stderr(&o));
}

/// A run the file-descriptor limit cannot carry is refused with exit 2, and the output folder
/// it would have written is not left behind.
#[test]
fn a_refused_run_leaves_no_output_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("s.yaml");
    std::fs::write(&p, BASE).unwrap();
    let out = tmp.path().join("out");
    let cmd = format!(
        "ulimit -Sn 64 && ulimit -Hn 64 && exec {} run {} --bots 500 --out {}",
        env!("CARGO_BIN_EXE_tickswarm"),
        p.display(),
        out.display()
    );
    let o = Command::new("bash").arg("-c").arg(&cmd).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        !Path::new(&out).exists(),
        "{} was left behind",
        out.display()
    );
}

/// A plan that needs more open files than the process may ever have (its hard limit) is
/// refused by `validate`, which says how many it needs; a plan that fits says so too.
#[test]
fn validate_names_the_open_files_a_plan_needs() {
    use std::os::unix::process::CommandExt;
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("s.yaml");
    std::fs::write(&p, format!("{BASE}duration: 2s\n")).unwrap();
    let limited = |bots: &str| {
        let mut c = bin();
        c.arg("validate").arg(&p).args(["--bots", bots]);
        // SAFETY: only async-signal-safe setrlimit runs between fork and exec.
        unsafe {
            c.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: 200,
                    rlim_max: 200,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        c.output().unwrap()
    };
    let o = limited("500");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("500 bots need about 564 open files") && e.contains("hard limit of 200"),
        "{e}"
    );
    let o = limited("50");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("files      about 114 open files needed (limit 200"),
        "{out}"
    );
}
