//! The City variant test peer (`tests/peers/city-variant-peer/city_variant_peer.c`, C on Debian's
//! libenet), built once per test binary with the flags its Makefile uses: no FMA contraction
//! (its mover must round as the real server's plain `float` code does) and libm.

use std::path::PathBuf;

pub const INSTALL_HINT: &str = "run scripts/install-test-deps.sh (installs libenet-dev)";

/// Build the peer into the test temp dir as `name`; panics (never skips) when it cannot be
/// built, naming what to install.
pub fn build(name: &str) -> PathBuf {
    super::c_peer::CPeer {
        src: "tests/peers/city-variant-peer/city_variant_peer.c",
        name,
        pkgs: &["libenet"],
        fallback_libs: "-lenet",
        cflags: &["-ffp-contract=off"],
        libs: &["-lm"],
        install_hint: INSTALL_HINT,
    }
    .build()
}
