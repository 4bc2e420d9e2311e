//! The test-peer helper (`tests/common/peer.rs`) keeps its promises: a peer that dies before
//! its ready line is reported with what it wrote to stderr, and a dropped peer is killed.

use std::process::Command;

use crate::common::peer::Peer;

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", script]);
    c
}

#[test]
#[should_panic(expected = "no port today")]
fn a_peer_that_exits_before_its_ready_line_is_reported_with_its_stderr() {
    Peer::start("failing peer", sh("echo 'no port today' >&2; exit 3"));
}

/// The ready line and the lines after it are the peer's stdout in order; dropping the peer
/// ends the process (it would otherwise sleep for a minute).
#[test]
fn lines_arrive_in_order_and_a_dropped_peer_is_killed() {
    let mut peer = Peer::start(
        "sleeping peer",
        sh("echo LISTENING 4242; echo $$; echo STATS a=1 b=2; sleep 60"),
    );
    assert_eq!(peer.listening_port(), 4242);
    assert!(peer.wait_for(std::time::Duration::from_secs(10), |l| l
        .starts_with("STATS ")));
    assert_eq!((peer.stat("a"), peer.stat("b")), (1, 2));
    let pid: u32 = peer.log[1].parse().expect("the shell's pid");
    assert!(peer.alive());
    drop(peer);
    // Killed and reaped: the process is gone.
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}
