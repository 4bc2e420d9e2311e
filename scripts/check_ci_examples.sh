#!/usr/bin/env bash
# Checks the copy-paste CI examples in docs/ci/ as far as one machine can:
#   1. each validates against its CI system's published schema (check-jsonschema's vendored
#      SchemaStore copies of the GitHub workflow and GitLab CI schemas; from PyPI, in a venv
#      under target/);
#   2. each runs, in a scratch "game repository" holding a scenario at loadtest/swarm.yaml,
#      against a reference server on loopback (scripts/ci_example.py says how each CI system
#      is imitated): the GitHub job installs tickswarm with `cargo install --git` from this
#      repository's HEAD and passes; the GitLab job runs in the image from
#      scripts/check_container.sh and passes; both leave junit.xml and the report folder
#      where their artifact steps look;
#   3. the GitLab job pointed at an address where nothing answers fails with exit 3;
#   4. deploy/k8s: the manifests validate against Kubernetes' schemas (kubernetes-validate,
#      PyPI), and the Indexed Job is imitated with one container per completion index
#      (its env, args, user, ConfigMap and volume as written; a small population and short
#      duration for the test), then the shards' folders merge into one result whose counts
#      are the sum of the shards'. gather.sh needs a cluster and is not run.
# Needs the image tickswarm:check (scripts/check_container.sh builds it) and the engine it
# was built with. Loopback only.
#
# Usage: scripts/check_ci_examples.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
IMAGE=${IMAGE:-tickswarm:check}

WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
    local rc=$? # the script's own status, not that of the server it stops
    stop_peer "$SERVER_PID"
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
fail() { echo "check_ci_examples: FAIL: $*" >&2; exit 1; }

. scripts/lib/verify_common.sh
. scripts/lib/container_engine.sh
select_engine "$WORK"
$ENGINE image inspect "$IMAGE" >/dev/null 2>&1 ||
    fail "no image $IMAGE: run scripts/check_container.sh first"

# --- 1. schemas --------------------------------------------------------------------------
VENV=target/ci-tools/venv
if [ ! -x "$VENV/bin/check-jsonschema" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q check-jsonschema==0.39.0 kubernetes-validate==1.37.0
fi
"$VENV/bin/check-jsonschema" --builtin-schema vendor.github-workflows docs/ci/github-actions.yml
"$VENV/bin/check-jsonschema" --builtin-schema vendor.gitlab-ci docs/ci/gitlab-ci.yml
echo "check_ci_examples: both examples valid against their CI system's schema"

# --- 2. run them --------------------------------------------------------------------------
BIN=target/release/tickswarm
build_release 1 "$BIN"
start_peer "$WORK/serve.out" "$WORK/serve.err" 900 "$BIN" serve cafe --port 0
SERVER_PID=$PEER_PID
PORT=$(peer_port "$WORK/serve.out" "$SERVER_PID") ||
    { cat "$WORK/serve.err"; fail "the reference server did not start"; }
ADDR=127.0.0.1:$PORT

game_repo() { # $1: folder: a game team's repository with its scenario
    mkdir -p "$1/loadtest"
    cp scenarios/quickstart.yaml "$1/loadtest/swarm.yaml"
}

# GitHub: `cargo install --git` from this repository's HEAD (committed code), into a scratch
# install root so no tickswarm already on PATH is taken. Its own target folder: with this
# checkout's, `cargo install -v` called the git package `Fresh` and installed a binary without
# the HEAD commit's change (seen with cargo 1.95). The folder is kept outside the checkout,
# like a CI cache, so its dependencies stay built between runs; tickswarm's own units are
# removed first, so the crate under test is always compiled from HEAD.
INSTALL_TARGET=${TICKSWARM_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tickswarm-ci}/install-target
if [ -d "$INSTALL_TARGET" ]; then
    cargo clean -q --release -p tickswarm --target-dir "$INSTALL_TARGET"
fi
game_repo "$WORK/gh"
REV=$(git rev-parse HEAD)
PATH="$WORK/cargo-root/bin:$PATH" CARGO_INSTALL_ROOT="$WORK/cargo-root" \
    CARGO_TARGET_DIR="$INSTALL_TARGET" TICKSWARM_DURATION=5s \
    "$VENV/bin/python" scripts/ci_example.py github docs/ci/github-actions.yml "$WORK/gh" \
    STAGING_TARGET="$ADDR" TICKSWARM_GIT="file://$REPO" TICKSWARM_REV="$REV" ||
    fail "the GitHub Actions example failed (exit $?)"
verdict() { python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["verdict"], s["bots"]["connected"], "bots")' "$1"; }
echo "check_ci_examples: GitHub Actions example: $(verdict "$WORK/gh/reports/run/summary.json")"

game_repo "$WORK/gl"
"$VENV/bin/python" scripts/ci_example.py gitlab docs/ci/gitlab-ci.yml "$WORK/gl" "$ENGINE" \
    STAGING_TARGET="$ADDR" TICKSWARM_IMAGE="$IMAGE" TICKSWARM_DURATION=5s TICKSWARM_BOTS=50 ||
    fail "the GitLab CI example failed (exit $?)"
echo "check_ci_examples: GitLab CI example: $(verdict "$WORK/gl/reports/run/summary.json")"

# --- 3. a dead target fails the job -------------------------------------------------------
DEAD=$(free_udp_port)
game_repo "$WORK/gl-dead"
set +e
"$VENV/bin/python" scripts/ci_example.py gitlab docs/ci/gitlab-ci.yml "$WORK/gl-dead" "$ENGINE" \
    STAGING_TARGET="127.0.0.1:$DEAD" TICKSWARM_IMAGE="$IMAGE" TICKSWARM_DURATION=3s TICKSWARM_BOTS=5
rc=$?
set -e
[ "$rc" = 3 ] || fail "the GitLab job against a silent address exited $rc, not 3"
echo "check_ci_examples: the GitLab job against a silent address fails with exit 3, report kept"

# --- 4. Kubernetes ------------------------------------------------------------------------
"$VENV/bin/kubernetes-validate" --strict deploy/k8s/job.yaml deploy/k8s/configmap.yaml
K8S=$WORK/k8s-reports
mkdir -p "$K8S"
set +e
"$VENV/bin/python" scripts/ci_example.py k8s deploy/k8s/job.yaml deploy/k8s/configmap.yaml \
    "$ENGINE" "$IMAGE" "$K8S" secret/tickswarm-target/target="$ADDR" \
    TICKSWARM_BOTS=400 TICKSWARM_DURATION=6s
rc=$?
set -e
# A shard that fails a threshold exits 1 and is still a result (the Job says so); only
# 2 (bad scenario) or 3 (no answer) mean the wiring is wrong.
[ "$rc" -le 1 ] || fail "a shard pod exited $rc"
shards=("$K8S"/shard-*)
[ "${#shards[@]}" = 4 ] || fail "expected 4 shard folders, found ${#shards[@]}"
# The merged verdict is the shards' (a failed threshold exits 1); the counts are judged below.
set +e
"$BIN" merge "${shards[@]}" --out "$WORK/k8s-merged" -q
set -e
python3 - "$WORK/k8s-merged/summary.json" "${shards[@]}" <<'EOF'
import json, sys
merged = json.load(open(sys.argv[1]))
shards = [json.load(open(d + "/summary.json")) for d in sys.argv[2:]]
for key in ("planned", "connected"):
    total = sum(s["bots"][key] for s in shards)
    assert merged["bots"][key] == total, (key, merged["bots"][key], total)
per = [s["bots"]["planned"] for s in shards]
print(f"check_ci_examples: Indexed Job imitated: 4 pods, bots planned per shard {per}, "
      f"merged {merged['bots']['planned']} planned / {merged['bots']['connected']} connected, "
      f"verdict {merged['verdict']}")
assert merged["bots"]["planned"] > 0
EOF

echo "check_ci_examples: PASS"
