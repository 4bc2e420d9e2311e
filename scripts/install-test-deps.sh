#!/usr/bin/env bash
# Install the system packages the test suite needs beyond the Rust toolchain:
#   libenet-dev      C ENet 1.3.x, linked by scripts/enet-peer/enet_peer.c, the peer that the
#                    ENet interop tests (tests/enet_interop.rs) run against
#   build-essential  the C compiler (`cc`) those tests build it with
#   pkg-config       so the build line can ask for ENet's flags
#
# Idempotent: when every package is already installed it does nothing (no network, no root
# needed). Otherwise it runs `apt-get update` once and installs what is missing.
set -euo pipefail

packages=(libenet-dev build-essential pkg-config)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-test-deps: already installed: ${packages[*]}"
    exit 0
fi

echo "install-test-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
    sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update
"${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
