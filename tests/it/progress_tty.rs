//! The progress line as a person sees it in a terminal, and as CI sees it in a log.
//!
//! In a terminal the line is rewritten in place each second (`\r`, clear line); a line wider
//! than the terminal wraps, and `\r` then returns only to the start of its last row, leaving a
//! cut-off fragment on screen at every update (seen in a 100-column terminal). Here a real run
//! goes through a pseudo-terminal of 100 columns (`script` from util-linux, which Debian
//! always has) and every rewritten line must fit in 99 columns. Without a terminal (a pipe,
//! as in CI) each second is a whole plain line, with no control characters.

use std::process::Command;

use crate::common::summary::run_scenario;

fn scenario(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("s.yaml");
    std::fs::write(
        &p,
        "name: tty\nprotocol:\n  cafe: {}\ntarget: embedded\npopulation:\n  stages:\n    \
         - ramp_to: 10\n      over: 0s\nduration: 3s\n",
    )
    .unwrap();
    p
}

/// The updates of the progress line: what follows each "carriage return, clear line".
fn updates(out: &str) -> Vec<String> {
    out.split("\r\x1b[2K")
        .skip(1)
        .map(|s| {
            // An update ends where the next one starts, or at the line break after the last.
            s.split(['\r', '\n']).next().unwrap_or("").to_string()
        })
        .collect()
}

#[test]
fn in_a_100_column_terminal_every_update_fits() {
    let tmp = tempfile::tempdir().unwrap();
    let s = scenario(tmp.path());
    let out_dir = tmp.path().join("out");
    let cmd = format!(
        "stty cols 100 rows 40; exec {} run {} --out {}",
        env!("CARGO_BIN_EXE_tickswarm"),
        s.display(),
        out_dir.display()
    );
    let o = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .expect("run `script` (util-linux)");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let ups = updates(&text);
    assert!(ups.len() >= 3, "progress updates in:\n{text:?}");
    for u in &ups {
        let cols = u.chars().count();
        assert!(cols <= 99, "{cols} columns: {u:?}");
        assert!(u.starts_with('['), "{u:?}");
    }
    // Cut by whole parts: the line still ends with a complete figure, never mid-word.
    assert!(ups.iter().all(|u| !u.ends_with(' ') && !u.ends_with('·')));
    // Elapsed of the total, with its percentage, first.
    assert!(ups.iter().all(|u| u.contains("s/3s ")), "{ups:?}");
    // The verdict in colour: a terminal, and NO_COLOR unset.
    assert!(text.contains("verdict  \x1b[1;32mPASS\x1b[0m"), "{text:?}");
}

/// NO_COLOR (no-color.org) turns the colour off on a terminal too.
#[test]
fn no_color_keeps_a_terminal_plain() {
    let tmp = tempfile::tempdir().unwrap();
    let s = scenario(tmp.path());
    let cmd = format!(
        "stty cols 100 rows 40; NO_COLOR=1 exec {} run {} --out {}",
        env!("CARGO_BIN_EXE_tickswarm"),
        s.display(),
        tmp.path().join("out").display()
    );
    let o = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .expect("run `script` (util-linux)");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("verdict  PASS"), "{text:?}");
    assert!(
        !text.contains("\x1b[1;3"),
        "colour under NO_COLOR: {text:?}"
    );
}

#[test]
fn without_a_terminal_each_second_is_a_plain_whole_line() {
    let tmp = tempfile::tempdir().unwrap();
    let s = scenario(tmp.path());
    let (o, _) = run_scenario(&s, &[], &tmp.path().join("out"), &[0, 1]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with('[')).collect();
    assert!(lines.len() >= 3, "{err}");
    for l in &lines {
        // Whole: every part, down to the last one, is there.
        assert!(l.contains(" · lateness p99 "), "{l}");
        // Its one stage (a ramp over 0 s) is over at once; the run holds its 10 bots.
        assert!(
            l.contains("s/3s ") && l.contains("s left · after the stages"),
            "{l}"
        );
    }
    // No colour and no bar in a log.
    assert!(!err.contains('▕'), "{err}");
}
