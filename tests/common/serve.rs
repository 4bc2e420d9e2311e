//! A reference server as its own process (`tickswarm serve PROTOCOL --port 0`), and the
//! address it printed on its first line.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// Starts `tickswarm serve <protocol> --port 0 <extra...>`; the caller kills the child.
pub fn serve(protocol: &str, extra: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .args(["serve", protocol, "--port", "0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start serve");
    let stdout = child.stdout.take().expect("serve stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("serve prints its address");
    let addr = line
        .split_whitespace()
        .find(|w| w.starts_with("127.0.0.1:"))
        .expect("an address in the first line")
        .to_string();
    (child, addr)
}
