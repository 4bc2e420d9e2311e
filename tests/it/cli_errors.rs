//! Issue 37, "Errors that mislead": what the command line says about a mistake names the key
//! or option, the value and what is allowed, at the place it was written; what a command
//! cannot use it refuses, and what it cannot do it says in words.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::summary::run_command;

fn tickswarm() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tickswarm"));
    for (k, _) in std::env::vars() {
        if k.starts_with("TICKSWARM_") {
            c.env_remove(k);
        }
    }
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const HEAD: &str =
    "name: port0\nprotocol:\n  cafe: {}\npopulation:\n  stages:\n    - ramp_to: 3\n      over: 0s\nduration: 3s\n";

fn scenario(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("s.yaml");
    std::fs::write(&p, format!("{HEAD}{body}")).unwrap();
    p
}

const PORT0: &str = "target `127.0.0.1:0`: port 0 is not a server's port (to a server it means \
                     \"any free port\"); give the port the server listens on, 1 to 65535";

/// `target: "127.0.0.1:0"` passed validate, then a run waited out its handshakes and exited 3
/// (unreachable). Both refuse it now, at the key's line and column, and the run starts
/// nothing and writes nothing.
#[test]
fn port_zero_is_refused_by_validate_and_by_run_before_it_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let s = scenario(tmp.path(), "target: \"127.0.0.1:0\"\n");
    let want = format!("s.yaml:9:9: {PORT0}");
    let o = tickswarm().arg("validate").arg(&s).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(&want), "{}", stderr(&o));

    let out = tmp.path().join("out");
    let began = Instant::now();
    let o = run_command(&s, &[], &out).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(&want), "{}", stderr(&o));
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "refused before it starts"
    );
    assert!(!out.exists(), "nothing written");

    // --target, which replaces the scenario's, is checked the same way.
    let s = scenario(tmp.path(), "");
    let o = tickswarm()
        .arg("validate")
        .arg(&s)
        .args(["--target", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains(PORT0), "{}", stderr(&o));
}

/// `input_rate: fast` said "invalid floating point" with no key; the run refuses it the same
/// way as validate.
#[test]
fn a_value_of_the_wrong_type_names_key_value_and_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let s = scenario(tmp.path(), "behaviour:\n  input_rate: fast\n");
    for cmd in ["validate", "run"] {
        let o = tickswarm().arg(cmd).arg(&s).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{cmd}");
        let e = stderr(&o);
        assert!(
            e.contains(
                "s.yaml:10:15: input_rate: `fast` is not a number; write a number of inputs \
                 per second, above 0 and at most 1000, e.g. 60"
            ),
            "{cmd}: {e}"
        );
        assert!(!e.contains("floating point"), "{cmd}: {e}");
    }
}

/// What `tickswarm protocols` lists as each protocol's dialects.
fn listed_dialects() -> Vec<(String, String)> {
    let o = tickswarm().arg("protocols").output().unwrap();
    let mut protocol = String::new();
    let mut out = Vec::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            protocol = line.split_whitespace().next().unwrap().to_string();
        } else if let Some(rest) = line.trim_start().strip_prefix("dialect ") {
            out.push((
                protocol.clone(),
                rest.split_whitespace().next().unwrap().into(),
            ));
        }
    }
    out
}

/// `serve P --dialect D` for every dialect `protocols` lists: the server comes up, or it says
/// in words that this dialect cannot be served, naming the protocol, the dialect and the
/// dialects it serves (never a parser's message about a document the user never wrote).
#[test]
fn serve_takes_every_dialect_protocols_lists_or_says_why_not() {
    let listed = listed_dialects();
    assert!(listed.len() >= 12, "{listed:?}");
    let mut refused = Vec::new();
    for (protocol, dialect) in &listed {
        let mut child = tickswarm()
            .args(["serve", protocol, "--dialect", dialect, "--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        if first.contains("reference server listening on 127.0.0.1:") {
            child.kill().unwrap();
            child.wait().unwrap();
            continue;
        }
        let o = child.wait_with_output().unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{protocol} {dialect}: {e}");
        let plain = format!("the {protocol} reference server cannot serve dialect `{dialect}`: ");
        assert!(e.contains(&plain), "{protocol} {dialect}: {e}");
        assert!(
            e.contains(&format!("`tickswarm serve {protocol}` serves the dialect")),
            "{e}"
        );
        assert!(
            !e.contains("line 2") && !e.contains("unknown variant"),
            "{e}"
        );
        refused.push((protocol.clone(), dialect.clone(), e));
    }
    // Only R-Type's implementation dialect, whose TCP login no reference server speaks.
    let names: Vec<(&str, &str)> = refused
        .iter()
        .map(|(p, d, _)| (p.as_str(), d.as_str()))
        .collect();
    assert_eq!(names, [("rtype", "implementation")]);
    assert!(
        refused[0].2.contains(
            "error: the rtype reference server cannot serve dialect `implementation`: it logs \
             in over TCP before playing over UDP, and no reference server speaks that login: \
             point a scenario's target at the real server; `tickswarm serve rtype` serves the \
             dialects big, little"
        ),
        "{}",
        refused[0].2
    );
    // A dialect nobody lists is refused with the listed ones.
    let o = tickswarm()
        .args(["serve", "rtype", "--dialect", "fast"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(
            "--dialect fast: rtype has no dialect `fast`; its dialects are big, little, \
             implementation (see `tickswarm protocols`)"
        ),
        "{}",
        stderr(&o)
    );
}

/// `validate` writes nothing: `--out` is refused, saying so, where it was ignored (and
/// clap's own refusal suggested `--bots`). TICKSWARM_OUT, which CI sets for every step, is
/// not read.
#[test]
fn validate_refuses_out() {
    let tmp = tempfile::tempdir().unwrap();
    let s = scenario(tmp.path(), "");
    let o = tickswarm()
        .arg("validate")
        .arg(&s)
        .args(["--out", "elsewhere"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(
            "invalid value 'elsewhere' for '--out <DIR>': validate writes no files, so it \
             takes no --out; the output folder is an option of `run` and `capacity`"
        ),
        "{}",
        stderr(&o)
    );
    let o = tickswarm()
        .arg("validate")
        .arg(&s)
        .env("TICKSWARM_OUT", "elsewhere")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// `-v` changes what `run` prints and nothing else: its help about plans is on `run` alone,
/// and another command refuses it.
#[test]
fn verbose_is_an_option_of_run_only() {
    let help = |args: &[&str]| {
        let o = tickswarm().args(args).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert!(help(&["run", "--help"]).contains("-v, --verbose"));
    for cmd in [
        "serve",
        "completions",
        "man",
        "validate",
        "protocols",
        "merge",
    ] {
        let h = help(&[cmd, "--help"]);
        assert!(!h.contains("--verbose"), "{cmd}: {h}");
    }
    // The man page: only run's section has it.
    let man = help(&["man"]);
    assert!(!man.contains("verbose"), "{man}");
    let o = tickswarm().args(["serve", "cafe", "-v"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unexpected argument '-v'"),
        "{}",
        stderr(&o)
    );
}
