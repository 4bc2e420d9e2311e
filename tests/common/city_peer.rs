//! The City variant test peer (`tests/peers/city-variant-peer/city_variant_peer.c`, C on Debian's
//! libenet), built once per test binary with the flags its Makefile uses: no FMA contraction
//! (its mover must round as the real server's plain `float` code does) and libm.

use std::path::{Path, PathBuf};
use std::process::Command;

pub const INSTALL_HINT: &str = "run scripts/install-test-deps.sh (installs libenet-dev)";

/// Build the peer into the test temp dir as `name`; panics (never skips) when it cannot be
/// built, naming what to install.
pub fn build(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("tests/peers/city-variant-peer/city_variant_peer.c");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(dir).expect("create the test temp dir");
    let bin = dir.join(name);
    // Built under a private name and moved into place: test binaries run side by side.
    let tmp = dir.join(format!("{name}.{}.tmp", std::process::id()));
    let libs = Command::new("pkg-config")
        .args(["--cflags", "--libs", "libenet"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "-lenet".to_string());
    let out = Command::new("cc")
        .args(["-O2", "-Wall", "-ffp-contract=off", "-o"])
        .arg(&tmp)
        .arg(&src)
        .args(libs.split_whitespace())
        .arg("-lm")
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `cc` ({e}): {INSTALL_HINT}"));
    assert!(
        out.status.success(),
        "building {} failed ({INSTALL_HINT}):\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&tmp, &bin).expect("move the built peer into place");
    bin
}
