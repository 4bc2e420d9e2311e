#!/usr/bin/env bash
# Build the real ZergCity game server's network layer (Blubagoo/sims_3000, src/net and
# src/core/Logger.cpp, from its own sources) with real_server_main.cpp as its loop, so the
# `dialect: implementation` bots can be run against the real code, not only against the
# independent peer (tests/peers/zergcity-implementation). Not run in CI: it clones the
# project and needs two Debian packages.
#
#   tests/peers/zergcity-real/build.sh [SOURCE_DIR] [OUT_DIR]
#   for p in 7777 7778 7779 7780 7781; do OUT_DIR/zergcity_real_server $p 40 & done
#   cargo run --release -- run scenarios/zergcity-implementation.yaml --target 127.0.0.1:7777-7781
#
# SOURCE_DIR: a checkout of https://github.com/Blubagoo/sims_3000 (cloned at the commit the
# wire facts were read from when not given). Needs: g++, libenet-dev, liblz4-dev,
# libreaderwriterqueue-dev (apt-get install libreaderwriterqueue-dev). SDL3, which the
# layer uses only for SDL_Log, has no Debian package: a header here stands in for it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
commit=eb2f270833e8e705e60fb74b630911badf85c945
out="${2:-$here/build}"
mkdir -p "$out"
src="${1:-}"
if [ -z "$src" ]; then
    src="$out/sims_3000"
    if [ ! -d "$src/.git" ]; then
        git clone --quiet https://github.com/Blubagoo/sims_3000 "$src"
    fi
    git -C "$src" checkout --quiet "$commit"
fi
mkdir -p "$out/stub/SDL3"
cat > "$out/stub/SDL3/SDL_log.h" <<'H'
/* Stand-in for SDL3's SDL_log.h (no Debian package): log lines go to stderr. */
#pragma once
#include <cstdarg>
#include <cstdio>
#include <cstring>
typedef enum {
    SDL_LOG_PRIORITY_VERBOSE = 1, SDL_LOG_PRIORITY_DEBUG, SDL_LOG_PRIORITY_INFO,
    SDL_LOG_PRIORITY_WARN, SDL_LOG_PRIORITY_ERROR, SDL_LOG_PRIORITY_CRITICAL
} SDL_LogPriority;
enum { SDL_LOG_CATEGORY_APPLICATION = 0 };
static inline void SDL_LogMessage(int, SDL_LogPriority, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
    std::fputc('\n', stderr);
}
#define SDL_Log(...) (std::fprintf(stderr, __VA_ARGS__), std::fputc('\n', stderr))
H
units=(src/net/NetworkBuffer.cpp src/net/NetworkMessage.cpp src/net/ClientMessages.cpp
       src/net/ServerMessages.cpp src/net/ConnectionValidator.cpp src/net/RateLimiter.cpp
       src/net/ENetTransport.cpp src/net/NetworkThread.cpp src/net/NetworkServer.cpp
       src/core/Logger.cpp)
g++ -std=c++17 -O2 -I"$src/include" -I"$out/stub" -I/usr/include/readerwriterqueue \
    "$here/real_server_main.cpp" "${units[@]/#/$src/}" \
    -o "$out/zergcity_real_server" -lenet -llz4 -lpthread
echo "built $out/zergcity_real_server"
