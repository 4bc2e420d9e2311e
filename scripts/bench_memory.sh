#!/usr/bin/env bash
# Memory per bot: the generator's resident memory (summary.json's generator.rss_max_bytes, the
# highest of its once-a-second /proc readings) at two populations, for cafe (raw UDP, one
# socket per bot) and City (ENet: one host per bot, then 50 bots per host), and the marginal
# KiB per added bot between them: what one more bot costs, without the process's fixed part.
#
# The targets are separate, cheap processes, so only the swarm is in the figure:
#   cafe  `tickswarm serve cafe --tick-rate 10 --client-timeout 60s` (a real server; snapshots
#         at 10 Hz so it keeps up on a small machine, and clients kept through its stalls; a
#         bot's state does not depend on the rate)
# Only bots that connected are in a figure; on a busy machine some of the larger population
# may not (the "connected" column): the marginal then counts bots that connected.
#   City  `tickswarm serve city --sink` (admits, answers pings, drops inputs, sends no world)
# Goals (issue 24): at most 8 KiB per raw-UDP bot and 12 KiB per ENet bot.
# Bounded: 6 runs of 12 s plus start-up, loopback only.
#
# Usage: scripts/bench_memory.sh [LOW=1000] [HIGH=4000]
# SWARMS="cafe city" (the default) or one of them: which swarms to run.
set -euo pipefail
cd "$(dirname "$0")/.."
LOW=${1:-1000}
HIGH=${2:-4000}
SWARMS=${SWARMS:-cafe city}
# TICKSWARM_BIN=path runs another build (e.g. the one before a change) instead of this tree's.
if [ -z "${TICKSWARM_BIN:-}" ]; then cargo build --release -q; fi
BIN=${TICKSWARM_BIN:-${CARGO_TARGET_DIR:-target}/release/tickswarm}
# SERVE_BIN=path: the build that serves (the sink needs one that has `serve city --sink`).
SERVE_BIN=${SERVE_BIN:-$BIN}
WORK=$(mktemp -d)
SERVER=
cleanup() {
    if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# City at 50 bots per ENet host: the same scenario with engine.bots_per_socket changed.
sed 's/^  bots_per_socket: 1 .*/  bots_per_socket: 50/' scenarios/city.yaml >"$WORK/city-50.yaml"
grep -q 'bots_per_socket: 50' "$WORK/city-50.yaml"

# start_server PORT ARGS...: a reference server in the background, until the script ends.
start_server() {
    local port=$1
    shift
    "$SERVE_BIN" serve "$@" --port "$port" --duration 10m >"$WORK/server.log" 2>&1 &
    SERVER=$!
    sleep 1
}
stop_server() {
    kill "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    SERVER=
}

# run NAME SCENARIO PORT BOTS: one 12 s run; prints "NAME BOTS CONNECTED RSS_BYTES".
run() {
    local name=$1 scenario=$2 port=$3 bots=$4 out="$WORK/$1-$4"
    timeout 90 "$BIN" run "$scenario" --target "127.0.0.1:$port" --bots "$bots" \
        --duration 12s --out "$out" >/dev/null 2>&1 || true
    python3 - "$out/summary.json" "$name" "$bots" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except OSError:
    print(sys.argv[2], sys.argv[3], 0, 0)
    sys.exit()
print(sys.argv[2], sys.argv[3], s["bots"]["connected"], s["generator"].get("rss_max_bytes") or 0)
PY
}

{
  if [[ " $SWARMS " == *" cafe "* ]]; then
    start_server 17801 cafe --tick-rate 10 --client-timeout 60s --max-clients $((HIGH + 100))
    run cafe scenarios/quickstart.yaml 17801 "$LOW"
    run cafe scenarios/quickstart.yaml 17801 "$HIGH"
    stop_server
  fi
  if [[ " $SWARMS " == *" city "* ]]; then
    # An ENet host takes at most 4095 peers (ENet's peer id is 12 bits): instances of up to
    # 2,000 players on consecutive ports, the bots spread over them.
    local_n=$(((HIGH + 1999) / 2000))
    start_server 17802 city --sink --instances "$local_n" --max-players 2100
    city="17802-$((17802 + local_n - 1))"
    run "city(1/socket)" scenarios/city.yaml "$city" "$LOW"
    run "city(1/socket)" scenarios/city.yaml "$city" "$HIGH"
    run "city(50/socket)" "$WORK/city-50.yaml" "$city" "$LOW"
    run "city(50/socket)" "$WORK/city-50.yaml" "$city" "$HIGH"
    stop_server
  fi
} >"$WORK/results"

python3 - "$WORK/results" "$LOW" "$HIGH" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
low, high = int(sys.argv[2]), int(sys.argv[3])
goal = {"cafe": 8.0}
print(f"generator resident memory (summary.json generator.rss_max_bytes), {low} and {high} bots")
print(f"{'swarm':<16} {'bots':>6} {'connected':>9} {'RSS MiB':>8} {'KiB/bot':>8}")
by = {}
for name, bots, conn, rss in rows:
    bots, conn, rss = int(bots), int(conn), int(rss)
    by.setdefault(name, {})[bots] = (conn, rss)
    print(f"{name:<16} {bots:>6} {conn:>9} {rss / 2**20:>8.1f} {rss / 1024 / max(bots, 1):>8.1f}")
print()
print(f"{'swarm':<16} {'marginal KiB per added bot':>27} {'per connected bot':>18}  goal")
for name, runs in by.items():
    if low in runs and high in runs and runs[low][1] and runs[high][1]:
        d = (runs[high][1] - runs[low][1]) / 1024
        m = d / (high - low)
        mc = d / max(runs[high][0] - runs[low][0], 1)
        g = goal.get(name, 12.0)
        verdict = "ok" if mc <= g else "OVER"
        print(f"{name:<16} {m:>27.1f} {mc:>18.1f}  <= {g:.0f} KiB: {verdict}")
    else:
        print(f"{name:<16} {'(a run failed)':>27}")
PY
