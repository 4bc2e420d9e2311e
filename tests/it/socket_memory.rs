//! `tickswarm validate` says what the bots' sockets commit of kernel memory, and
//! `engine.socket_buffer` changes it (that a socket gets what it asks for is tested beside
//! the code, in `engine/io/socket/mod.rs`).

use std::process::Command;

/// quickstart: 100 cafe bots, 48,000 bytes each way per socket (32 datagrams of 1500 bytes),
/// and the embedded server's socket.
#[test]
fn validate_prints_the_kernel_memory_the_bots_sockets_commit() {
    let v = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("validate")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scenarios/quickstart.yaml"
        ))
        .output()
        .unwrap();
    assert_eq!(v.status.code(), Some(0));
    let out = String::from_utf8_lossy(&v.stdout);
    assert!(
        out.contains(
            "sockets    100 bot sockets × (receive 46.9 KiB + send 46.9 KiB) = 9.2 MiB asked \
             of the kernel (32 datagrams of 1500 B); Linux doubles each request, so at most \
             18.3 MiB if every buffer filled\n           plus 1 embedded server socket × 2 × \
             8.0 MiB: at most 32.0 MiB\n"
        ),
        "{out}"
    );
}

/// `engine.socket_buffer` replaces the derived size, and a bad one is refused by name.
#[test]
fn the_scenario_sets_the_socket_buffer() {
    let tmp = tempfile::tempdir().unwrap();
    let text = |b: &str| {
        format!(
            "name: sb\nprotocol:\n  cafe: {{}}\npopulation:\n  stages:\n    - ramp_to: 10\n      over: 0s\nduration: 2s\nengine:\n  socket_buffer: {b}\n"
        )
    };
    let ok = tmp.path().join("ok.yaml");
    std::fs::write(&ok, text("256KiB")).unwrap();
    let v = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("validate")
        .arg(&ok)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&v.stdout);
    assert!(
        out.contains(
            "sockets    10 bot sockets × (receive 256.0 KiB + send 256.0 KiB) = 5.0 MiB asked \
             of the kernel (engine.socket_buffer)"
        ),
        "{out}"
    );
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(&bad, text("1KiB")).unwrap();
    let v = Command::new(env!("CARGO_BIN_EXE_tickswarm"))
        .arg("validate")
        .arg(&bad)
        .output()
        .unwrap();
    assert_ne!(v.status.code(), Some(0));
    let err = String::from_utf8_lossy(&v.stderr);
    assert!(
        err.contains("engine.socket_buffer: 1024 bytes is outside 4096 B to 256 MiB"),
        "{err}"
    );
}
