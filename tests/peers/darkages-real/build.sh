#!/usr/bin/env bash
# Build the real DarkAges zone server (11hideout11/DarkAges, src/server, from its own sources)
# in its plain-UDP configuration, so the `dialect: implementation` bots can be run against the
# real code, not only against the independent peer (tests/peers/darkages-implementation).
# Not run in CI: it clones two projects and compiles ~80 C++20 files (about 10 minutes on 2 cores).
#
#   tests/peers/darkages-real/build.sh [SOURCE_DIR] [OUT_DIR]
#   OUT_DIR/darkages_server --port 7777 &         # UDP 0.0.0.0:7777, Prometheus on 8080
#   cargo run --release -- run scenarios/darkages-implementation.yaml --target 127.0.0.1:7777
#
# SOURCE_DIR: a checkout of https://github.com/11hideout11/DarkAges (cloned at the commit below
# when not given; it is copied, never changed). ENTT_DIR (environment): a checkout of
# https://github.com/skypjack/entt at v3.13.0, the project's submodule pin fedcb920 (cloned when
# not given; Debian has no EnTT package). JOBS: parallel compile jobs (default 2).
# Needs: g++ (C++20), cmake, make, git and Debian's libprotobuf-dev, protobuf-compiler,
# nlohmann-json3-dev, libglm-dev:
#   apt-get install -y g++ cmake make git libprotobuf-dev protobuf-compiler nlohmann-json3-dev libglm-dev
#
# Built with GameNetworkingSockets, Redis, ScyllaDB, FlatBuffers, profiling and tests off, so
# nothing is downloaded by CMake. The pinned commit needs three fixes, applied to the copy:
#   1. protobuf is taken from Debian (find_package) before the project would fetch its own;
#   2. netcode/Protocol.cpp, the real wire code (it uses protobuf only), replaces the stub the
#      project compiles when FlatBuffers is off;
#   3. netcode/Protocol.hpp uses std::span without including <span>.
# (The two newer commits on the project's default branch do not compile.)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
commit=b747536f3294a7e4629755115550cbeef147b79b
entt_tag=v3.13.0
out="${2:-$here/build}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

src="${1:-}"
if [ -z "$src" ]; then
    src="$out/DarkAges"
    if [ ! -d "$src/.git" ]; then
        git clone --quiet https://github.com/11hideout11/DarkAges "$src"
    fi
    git -C "$src" checkout --quiet "$commit"
fi
src="$(cd "$src" && pwd)"
head=""
[ -e "$src/.git" ] && head="$(git -C "$src" rev-parse HEAD 2>/dev/null || true)"
if [ -n "$head" ] && [ "$head" != "$commit" ]; then
    echo "warning: $src is at $head, not $commit (the fixes below are made for $commit)" >&2
fi

entt="${ENTT_DIR:-}"
if [ -z "$entt" ]; then
    entt="$out/entt"
    if [ ! -d "$entt/.git" ]; then
        git clone --quiet --depth 1 --branch "$entt_tag" https://github.com/skypjack/entt "$entt"
    fi
fi
entt="$(cd "$entt" && pwd)"
[ -f "$entt/src/entt/entt.hpp" ] || { echo "no EnTT in $entt" >&2; exit 1; }

# A fresh copy of the sources, without .git and the (empty or heavy) submodules in deps/.
work="$out/src"
rm -rf "$work"
mkdir -p "$work/deps/glm" "$work/deps/json/include"
tar -C "$src" --exclude=./.git --exclude=./deps -cf - . | tar -C "$work" -xf -
ln -s "$entt" "$work/deps/entt"
ln -s /usr/include/glm "$work/deps/glm/glm"
ln -s /usr/include/nlohmann "$work/deps/json/include/nlohmann"

# Fix 1: Debian's protobuf (CMake's FindProtobuf), and skip both the subdirectory and the fetch.
sed -i 's|^if(EXISTS "${CMAKE_SOURCE_DIR}/deps/protobuf/cmake/CMakeLists.txt")$|find_package(Protobuf REQUIRED)\nset(protobuf_FOUND TRUE)\nif(FALSE)|' \
    "$work/CMakeLists.txt"
# Fix 2: the real Protocol.cpp in the FlatBuffers-off branch.
sed -i 's|^\( *list(APPEND SERVER_SOURCES src/server/src/netcode/\)Protocol_stub\.cpp)$|\1Protocol.cpp)|' \
    "$work/CMakeLists.txt"
# Fix 3: the missing header.
sed -i '0,/^#include <vector>$/s||#include <span>\n#include <vector>|' \
    "$work/src/server/include/netcode/Protocol.hpp"
grep -q '^find_package(Protobuf REQUIRED)$' "$work/CMakeLists.txt"
grep -q 'netcode/Protocol\.cpp)$' "$work/CMakeLists.txt"
grep -q '^#include <span>$' "$work/src/server/include/netcode/Protocol.hpp"

cmake -S "$work" -B "$out/cmake" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_TESTS=OFF -DENABLE_GNS=OFF -DENABLE_REDIS=OFF -DENABLE_SCYLLA=OFF \
    -DENABLE_FLATBUFFERS=OFF -DENABLE_PROFILING=OFF \
    -DFETCH_DEPENDENCIES=OFF -DFETCHCONTENT_FULLY_DISCONNECTED=ON
nice -n 10 cmake --build "$out/cmake" --target darkages_server -j "${JOBS:-2}"
cp "$out/cmake/darkages_server" "$out/darkages_server"
echo "built $out/darkages_server"
