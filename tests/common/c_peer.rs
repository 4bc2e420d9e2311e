//! Building the C test peers (`tests/peers/*/`) once per test binary, as their Makefiles do:
//! compiled into the test temp dir under a private name and moved into place (test binaries
//! run side by side), with the libraries `pkg-config` names (or the plain `-l` flags when it
//! is missing). Panics, never skips, when a peer cannot be built, naming what to install.

use std::path::{Path, PathBuf};
use std::process::Command;

/// How to build one peer.
pub struct CPeer<'a> {
    /// The C source, relative to the repository root.
    pub src: &'a str,
    /// The binary's name in the test temp dir.
    pub name: &'a str,
    /// `pkg-config` packages, and the flags to use when `pkg-config` cannot answer.
    pub pkgs: &'a [&'a str],
    pub fallback_libs: &'a str,
    /// Compiler flags beyond `-O2 -Wall`, and libraries after the packages'.
    pub cflags: &'a [&'a str],
    pub libs: &'a [&'a str],
    /// What to install when the build fails.
    pub install_hint: &'a str,
}

impl CPeer<'_> {
    /// Build the peer and return the binary's path.
    pub fn build(&self) -> PathBuf {
        let hint = self.install_hint;
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(self.src);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(dir).expect("create the test temp dir");
        let bin = dir.join(self.name);
        let tmp = dir.join(format!("{}.{}.tmp", self.name, std::process::id()));
        let libs = Command::new("pkg-config")
            .args(["--cflags", "--libs"])
            .args(self.pkgs)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| self.fallback_libs.to_string());
        let out = Command::new("cc")
            .args(["-O2", "-Wall"])
            .args(self.cflags)
            .arg("-o")
            .arg(&tmp)
            .arg(&src)
            .args(libs.split_whitespace())
            .args(self.libs)
            .output()
            .unwrap_or_else(|e| panic!("cannot run the C compiler `cc` ({e}): {hint}"));
        assert!(
            out.status.success(),
            "building {} failed ({hint}):\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&tmp, &bin).expect("move the built peer into place");
        bin
    }
}
