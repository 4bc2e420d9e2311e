#!/usr/bin/env bash
# Builds the repository's Dockerfile and uses the image the way docs/guide/containers.md
# tells a user to:
#   1. the image is small (the size is printed and bounded) and runs as uid 10001, not root;
#   2. `tickswarm serve` in one container and that page's `run` command in another (a volume
#      for /reports, the target from TICKSWARM_TARGET, an arbitrary --user as a CI runner has)
#      give exit 0, a passing summary.json, junit.xml and report.html on the host, owned by
#      that user;
#   3. the exit code crosses the container boundary: a target that never answers gives 3;
#   4. `stop` (SIGTERM to tickswarm as PID 1) ends a run within seconds, report written.
#
# Engine: Docker when a Docker daemon answers, otherwise Podman (daemonless; it, runc and
# debootstrap come from scripts/install-test-deps.sh when missing). This machine has no
# Docker daemon and reaches no container registry, so when the Dockerfile's base images
# (rust:1-slim-bookworm, debian:bookworm-slim) are neither present nor pullable, the script
# builds stand-ins under those exact names, so that the Dockerfile is built unchanged:
#   - debian:bookworm-slim: `debootstrap --variant=minbase bookworm` from Debian's mirror,
#     trimmed as the slim image is (no apt lists, docs, man pages or locales);
#   - rust:1-slim-bookworm: the same plus gcc, libc6-dev and ca-certificates (what the official
#     slim image adds), this machine's Rust toolchain at /usr/local/cargo/bin, and this
#     machine's local CA certificates (the registry proxy here presents its own CA).
# They stay in the engine's image store, so later runs reuse them (and the dependency layer).
# Loopback only (host networking); every container is removed on exit.
#
# Usage: scripts/check_container.sh   (as root, or a user who may run the engine)
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=tickswarm:check
MAX_IMAGE_MB=${MAX_IMAGE_MB:-120}
RUNTIME_BASE=docker.io/library/debian:bookworm-slim
BUILD_BASE=docker.io/library/rust:1-slim-bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

WORK=$(mktemp -d)
CONTAINERS=()
cleanup() {
    local rc=$? c
    for c in "${CONTAINERS[@]}"; do $ENGINE rm -f "$c" >/dev/null 2>&1 || true; done
    rm -rf "$WORK"
    exit "$rc"
}
ENGINE=true
trap cleanup EXIT
fail() { echo "check_container: FAIL: $*" >&2; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# --- the engine ------------------------------------------------------------------------
# podman, runc and debootstrap come with the test packages (a no-op when present).
bash scripts/install-test-deps.sh >/dev/null
. scripts/lib/verify_common.sh
. scripts/lib/container_engine.sh
select_engine "$WORK"
echo "check_container: engine $ENGINE ($($ENGINE --version))"

have_image() { $ENGINE image inspect "$1" >/dev/null 2>&1; }

# --- stand-in base images (only when the real ones can't be had) --------------------------
debian_rootfs() { # $1: folder
    as_root debootstrap --variant=minbase bookworm "$1" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
        { tail -20 "$WORK/debootstrap.log"; fail "debootstrap failed"; }
}
trim_rootfs() { # what the slim image leaves out
    as_root rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/archives/*.deb \
        "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/locale/* "$1"/usr/share/info/*
}
import_rootfs() { # $1: folder, $2: image name, then --change arguments
    local dir=$1 name=$2
    shift 2
    as_root tar -C "$dir" -c . | $ENGINE import -q "$@" --change 'CMD ["bash"]' - "$name" >/dev/null
}

if ! have_image "$RUNTIME_BASE" || ! have_image "$BUILD_BASE"; then
    if timeout 30 $ENGINE pull -q "$RUNTIME_BASE" >/dev/null 2>&1 &&
        timeout 300 $ENGINE pull -q "$BUILD_BASE" >/dev/null 2>&1; then
        echo "check_container: pulled the Dockerfile's base images"
    else
        echo "check_container: no registry has the base images here; building stand-ins (debootstrap bookworm)"
        started=$SECONDS
        debian_rootfs "$WORK/rootfs"
        cp -a "$WORK/rootfs" "$WORK/rust-rootfs"
        trim_rootfs "$WORK/rootfs"
        import_rootfs "$WORK/rootfs" "$RUNTIME_BASE" \
            --change 'LABEL org.tickswarm.stand-in=debootstrap-bookworm-minbase'

        R=$WORK/rust-rootfs
        cp /etc/resolv.conf "$R/etc/resolv.conf"
        as_root chroot "$R" /bin/sh -c 'apt-get update -q &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends gcc libc6-dev ca-certificates' \
            >"$WORK/chroot.log" 2>&1 || { tail -20 "$WORK/chroot.log"; fail "installing gcc in the builder stand-in failed"; }
        if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
            cp /usr/local/share/ca-certificates/*.crt "$R/usr/local/share/ca-certificates/"
            as_root chroot "$R" update-ca-certificates >/dev/null 2>&1
        fi
        rm -f "$R/etc/resolv.conf"
        trim_rootfs "$R"
        SYSROOT=$(rustc --print sysroot)
        mkdir -p "$R/usr/local/rust/bin" "$R/usr/local/cargo/bin"
        cp -a "$SYSROOT/lib" "$R/usr/local/rust/"
        for b in cargo rustc rustdoc; do
            cp "$SYSROOT/bin/$b" "$R/usr/local/rust/bin/"
            ln -s "/usr/local/rust/bin/$b" "$R/usr/local/cargo/bin/$b"
        done
        import_rootfs "$R" "$BUILD_BASE" \
            --change 'ENV RUSTUP_HOME=/usr/local/rustup' --change 'ENV CARGO_HOME=/usr/local/cargo' \
            --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change "LABEL org.tickswarm.stand-in=debootstrap-bookworm-minbase+$(rustc --version | tr ' ' '-')"
        echo "check_container: stand-ins built in $((SECONDS - started)) s"
    fi
fi
for base in "$RUNTIME_BASE" "$BUILD_BASE"; do
    label=$($ENGINE image inspect --format '{{index .Config.Labels "org.tickswarm.stand-in"}}' "$base" 2>/dev/null || true)
    echo "check_container: base $base${label:+ (stand-in: $label)}"
done

# --- build -------------------------------------------------------------------------------
started=$SECONDS
if [ "$ENGINE" = podman ]; then pull=(--pull=never); else pull=(); fi
$ENGINE build "${pull[@]}" -t "$IMAGE" . >"$WORK/build.log" 2>&1 ||
    { tail -40 "$WORK/build.log"; fail "the Dockerfile did not build"; }
echo "check_container: built $IMAGE in $((SECONDS - started)) s"

# --- 1. small, non-root ------------------------------------------------------------------
size=$($ENGINE image inspect --format '{{.Size}}' "$IMAGE")
size_mb=$((size / 1000000))
echo "check_container: image size ${size_mb} MB (bound ${MAX_IMAGE_MB} MB)"
[ "$size_mb" -le "$MAX_IMAGE_MB" ] || fail "image is ${size_mb} MB, over ${MAX_IMAGE_MB} MB"
user=$($ENGINE image inspect --format '{{.Config.User}}' "$IMAGE")
[ "$user" = 10001 ] || fail "image USER is '$user', not 10001"
uid=$($ENGINE run --rm --entrypoint id "$IMAGE" -u)
[ "$uid" = 10001 ] || fail "a container runs as uid $uid, not 10001"
version=$($ENGINE run --rm "$IMAGE" --version)
echo "check_container: runs as uid $uid; $version"

# --- 2. a reference server in one container, the book's run in another ---------------------
PORT=$(free_udp_port)
SERVER=tickswarm-check-serve-$$
CONTAINERS+=("$SERVER")
$ENGINE run -d --name "$SERVER" --network host "$IMAGE" serve cafe --bind 127.0.0.1 --port "$PORT" >/dev/null
# Up to 30 s: a container's start on a loaded 2-core machine has taken over 10 s.
for _ in $(seq 150); do
    $ENGINE logs "$SERVER" 2>&1 | grep -q "127.0.0.1:$PORT" && break
    sleep 0.2
done
$ENGINE logs "$SERVER" 2>&1 | grep -q "127.0.0.1:$PORT" ||
    { $ENGINE logs "$SERVER"; fail "the reference server in the container did not start"; }

# A CI runner's uid is not 10001 (GitHub's is 1001): the book's command passes --user so the
# mounted folder stays the runner's. 4242 stands for such a uid.
RUN_UID=4242
mkdir -p "$WORK/reports"
chown "$RUN_UID:$RUN_UID" "$WORK/reports"
set +e
$ENGINE run --rm --network host --user "$RUN_UID:$RUN_UID" -v "$WORK/reports:/reports" \
    -e TICKSWARM_TARGET="127.0.0.1:$PORT" -e TICKSWARM_OUT=/reports/run -e TICKSWARM_DURATION=5s \
    -e TICKSWARM_BOTS=50 "$IMAGE" run /scenarios/quickstart.yaml >"$WORK/run.out" 2>&1
rc=$?
set -e
cat "$WORK/run.out"
[ "$rc" = 0 ] || fail "run in the container exited $rc, not 0"
for f in summary.json junit.xml report.html histograms.hlog; do
    [ -s "$WORK/reports/run/$f" ] || fail "$f was not written to the mounted folder"
done
owner=$(stat -c %u "$WORK/reports/run/summary.json")
[ "$owner" = "$RUN_UID" ] || fail "summary.json is owned by uid $owner, not the --user $RUN_UID"
python3 - "$WORK/reports/run/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
v = s["verdict"]
connected = s["bots"]["connected"]
print(f"check_container: summary.json verdict {v}, bots connected {connected}, "
      f"protocol {s['protocol']} over {s['transport']}")
assert v == "pass", f"verdict {v}"
assert connected == 50, f"{connected} bots connected, 50 expected"
EOF
$ENGINE inspect --format '{{.State.Running}}' "$SERVER" | grep -q true ||
    fail "the reference server container stopped during the run"

# --- 3. exit codes cross the container boundary --------------------------------------------
DEAD_PORT=$(free_udp_port)
set +e
$ENGINE run --rm --network host "$IMAGE" run /scenarios/quickstart.yaml \
    --target "127.0.0.1:$DEAD_PORT" --duration 3s --bots 5 --out /tmp/run >"$WORK/dead.out" 2>&1
rc=$?
set -e
[ "$rc" = 3 ] || { cat "$WORK/dead.out"; fail "a run against nothing exited $rc, not 3"; }
echo "check_container: a run against a silent address exits 3 from the container, as on the host"

# --- 4. `stop` (SIGTERM to PID 1) ends a run with its report -------------------------------
# tickswarm is the image's entrypoint, so it is PID 1, which the kernel gives no default action
# for SIGTERM: without a handler `stop` waited its grace period and killed it, report lost.
STOPPED=tickswarm-check-stop-$$
CONTAINERS+=("$STOPPED")
mkdir -p "$WORK/reports/stopped"
chown "$RUN_UID:$RUN_UID" "$WORK/reports/stopped"
$ENGINE run -d --name "$STOPPED" --network host --user "$RUN_UID:$RUN_UID" \
    -v "$WORK/reports:/reports" -e TICKSWARM_TARGET="127.0.0.1:$PORT" \
    -e TICKSWARM_OUT=/reports/stopped -e TICKSWARM_DURATION=120s -e TICKSWARM_BOTS=20 \
    "$IMAGE" run /scenarios/quickstart.yaml >/dev/null
sleep 4
t0=$(date +%s)
$ENGINE stop -t 30 "$STOPPED" >/dev/null
took=$(( $(date +%s) - t0 ))
rc=$($ENGINE inspect --format '{{.State.ExitCode}}' "$STOPPED")
$ENGINE logs "$STOPPED" 2>&1 | tail -3
[ "$took" -lt 15 ] || fail "stop took ${took} s: SIGTERM was ignored and the grace period ran out"
[ -s "$WORK/reports/stopped/summary.json" ] || fail "no summary.json after stop"
[ -s "$WORK/reports/stopped/report.html" ] || fail "no report.html after stop"
python3 - "$WORK/reports/stopped/summary.json" "$rc" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
rc = int(sys.argv[2])
assert s["interrupted"] is True, "interrupted is not true"
want = 0 if s["verdict"] == "pass" else 1
assert rc == want, f"exit {rc} after stop, verdict {s['verdict']} wants {want}"
print(f"check_container: stop ended the run after {s['duration_s']:.1f} s with its report "
      f"(interrupted, verdict {s['verdict']}, exit {rc})")
EOF

echo "check_container: PASS"
