#!/usr/bin/env bash
# A self-contained Linux binary to download: tickswarm linked statically against glibc
# (`crt-static` on the GNU target, the only target this machine's toolchain has), stripped,
# with its SHA-256 beside it, in target/dist/. Then the proof it needs nothing from the host:
# it reports no dynamic dependency, and it runs `tickswarm run scenarios/quickstart.yaml`
# (100 bots against the embedded reference server) in a Debian container with no Rust and no
# extra library (debian:bookworm-slim, or the stand-in scripts/check_container.sh built under
# that name), exit 0.
#
# Usage: scripts/build_static.sh [--no-container]
#
# A static glibc binary still loads NSS modules to resolve host names (a `target:` written
# as a name rather than an address): every Debian-like system has them; a system without
# glibc (Alpine) resolves names only from /etc/hosts.
set -euo pipefail
cd "$(dirname "$0")/.."

container=1
[ "${1:-}" = "--no-container" ] && container=0

TARGET=x86_64-unknown-linux-gnu
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
name="tickswarm-$version-x86_64-linux-static"
dist=target/dist
fail() { echo "build_static: FAIL: $*" >&2; exit 1; }

# An explicit --target keeps crt-static off build scripts and proc macros (which are built
# for the host and cannot be static), and the static build in its own folder.
# The `shipped` profile (Cargo.toml), as the container image: fat LTO, symbols stripped.
RUSTFLAGS="-C target-feature=+crt-static" cargo build --profile shipped --locked --target "$TARGET"
mkdir -p "$dist"
cp "target/$TARGET/shipped/tickswarm" "$dist/$name"
(cd "$dist" && sha256sum "$name" >"$name.sha256")

# No dynamic section: nothing for the loader to find on the host.
if readelf -d "$dist/$name" 2>/dev/null | grep -q NEEDED; then
    readelf -d "$dist/$name" | grep NEEDED
    fail "$name needs shared libraries"
fi
"$dist/$name" --version >/dev/null || fail "$name does not run here"
size=$(($(stat -c %s "$dist/$name") / 1024 / 1024))
echo "build_static: $dist/$name ($size MiB, no shared library needed); sha256 $(cut -d' ' -f1 "$dist/$name.sha256")"

[ "$container" = 1 ] || exit 0
. scripts/lib/container_engine.sh
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
select_engine "$WORK"
BASE=docker.io/library/debian:bookworm-slim
$ENGINE image inspect "$BASE" >/dev/null 2>&1 ||
    fail "$BASE is not in $ENGINE's store: run scripts/check_container.sh first (it builds a stand-in when no registry has it)"
# No Rust in the image (its libgcc_s, part of Debian's base, is not needed: no NEEDED entry).
if $ENGINE run --rm "$BASE" sh -c 'command -v rustc || command -v cargo'; then
    fail "$BASE has a Rust toolchain: not the clean system this check means"
fi
mkdir -p "$WORK/out"
set +e
$ENGINE run --rm --network host \
    -v "$PWD/$dist/$name:/usr/local/bin/tickswarm:ro" \
    -v "$PWD/scenarios:/scenarios:ro" -v "$WORK/out:/out" \
    "$BASE" tickswarm run /scenarios/quickstart.yaml --out /out/run --quiet
rc=$?
set -e
[ "$rc" = 0 ] || fail "tickswarm run scenarios/quickstart.yaml exited $rc in a clean $BASE"
[ -s "$WORK/out/run/summary.json" ] && [ -s "$WORK/out/run/report.html" ] ||
    fail "no report from the run in the container"
python3 - "$WORK/out/run/summary.json" "$BASE" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["verdict"] == "pass", s["verdict"]
print(f"build_static: in a clean {sys.argv[2]}: quickstart PASS, {s['bots']['connected']} bots connected")
PY
