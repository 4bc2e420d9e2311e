#!/usr/bin/env bash
# System packages the test suite needs, on Debian. Idempotent; run as root (scripts/test does
# it for you, with sudo when needed). `--check` only reports what is missing (exit 1 if any).
#   libenet-dev, build-essential, pkg-config: the C ENet peer used by the ENet interop tests
#   liblz4-dev: the independent ZergCity peer (tests/peers/zergcity-peer, tests/peers/zergcity-peer/smoke.sh)
#   python3: the independent cafe server used by scripts/verify_external_cafe.sh
#   prometheus: tests/it/prometheus.rs scrapes a run with a real Prometheus server and promtool
#   cmake, libprotobuf-dev, protobuf-compiler, libssl-dev, libclang-dev (and pkg-config):
#     what `--features gns` needs to build Valve's GameNetworkingSockets from source (the
#     game-networking-sockets crate; no registry ships GNS itself). The default build needs
#     none of them; .ci/run builds and tests the gns feature.
#   chromium: opens report.html headless at desktop and phone widths (tests/it/report_browser.rs)
#   podman, runc, debootstrap: build and run the Dockerfile's image without a Docker daemon
#     (scripts/check_container.sh, .ci/run step 12; it uses Docker instead when one answers)
#   python3-venv: the schema and Kubernetes validators scripts/check_ci_examples.sh installs
#     from PyPI into a venv (.ci/run step 13)
set -euo pipefail
pkgs=(libenet-dev liblz4-dev build-essential pkg-config python3 prometheus chromium
      cmake libprotobuf-dev protobuf-compiler libssl-dev libclang-dev
      podman runc debootstrap python3-venv)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-test-deps: all present (${pkgs[*]})"
  exit 0
fi
if [ "${1:-}" = "--check" ]; then
  echo "install-test-deps: missing ${missing[*]}"
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-test-deps: missing ${missing[*]}; run as root: sudo $0" >&2
  exit 1
fi
echo "install-test-deps: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
