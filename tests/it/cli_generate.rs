//! Shell completions and the man page come from the CLI definition itself, so they list
//! every command and option there is (a new option shows up without editing them).

use std::process::Command;

fn tickswarm(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .args(args)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn completions_for_each_shell_know_the_commands_and_options() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = tickswarm(&["completions", shell]);
        // Long options without their dashes: fish writes `-l max-regress`.
        for word in ["compare", "merge", "max-regress", "shard", "force"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    // The bash script is valid bash.
    let script = tickswarm(&["completions", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tickswarm.bash");
    std::fs::write(&path, script).unwrap();
    // bash is a test dependency (the scripts run under it): a machine without it fails here
    // rather than skipping the check silently.
    let status = Command::new("bash")
        .arg("-n")
        .arg(&path)
        .status()
        .expect("bash runs (the completion script is checked with `bash -n`)");
    assert!(status.success(), "bash -n rejects the completion script");
}

#[test]
fn an_unknown_shell_is_bad_usage() {
    let o = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn the_man_page_is_roff_with_the_commands() {
    let page = tickswarm(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH tickswarm"),
        "{page:.300}"
    );
    assert!(page.contains(".TH tickswarm"), "{page:.300}");
    for word in ["compare", "completions", "merge", "quiet"] {
        assert!(page.contains(word), "man page lacks {word}");
    }
}
