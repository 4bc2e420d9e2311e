#!/usr/bin/env bash
# What `run --dashboard` costs the bots: the same swarm (N bots at 60 Hz against the embedded
# cafe server for D) run in pairs, once without the dashboard and once with it and its eight
# viewers (the most it serves) reading every update, alternating so that drift on the machine
# falls on both. Prints each run's send lateness, skipped grid slots, RTT and the busiest
# worker's CPU, then the medians of each side. Bounded: 2 × PAIRS runs, D each, loopback only.
#
# Usage: scripts/bench_dashboard.sh [BOTS=1000] [DURATION=20s] [PAIRS=3]
#        TICKSWARM_BIN=path/to/tickswarm scripts/bench_dashboard.sh ...
set -euo pipefail
cd "$(dirname "$0")/.."
BOTS=${1:-1000}
DURATION=${2:-20s}
PAIRS=${3:-3}
VIEWERS=8
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
# TICKSWARM_BIN: a binary already built (else the release build of this checkout).
if [ -z "${TICKSWARM_BIN:-}" ]; then
    cargo build --release -q
fi
BIN=${TICKSWARM_BIN:-./target/release/tickswarm}

run_once() { # $1 = label, $2 = with (1) or without (0) the dashboard
    local out="$WORK/$1" log="$WORK/$1.log"
    if [ "$2" = 1 ]; then
        timeout 300 "$BIN" run scenarios/quickstart.yaml --bots "$BOTS" --duration "$DURATION" \
            --dashboard=127.0.0.1:0 -v --out "$out" >/dev/null 2>"$log" &
        local pid=$! addr=""
        for _ in $(seq 100); do
            addr=$(grep -o 'dashboard http://[0-9.:]*' "$log" 2>/dev/null | cut -d/ -f3 || true)
            [ -n "$addr" ] && break
            sleep 0.1
        done
        [ -n "$addr" ] || { echo "no dashboard address in $log" >&2; exit 1; }
        for _ in $(seq "$VIEWERS"); do
            timeout 300 curl -sN "http://$addr/events" >/dev/null 2>&1 &
        done
        wait "$pid" || true
        grep '^dashboard: ' "$log" | sed "s/^/  $1 /" >&2 || true
    else
        timeout 300 "$BIN" run scenarios/quickstart.yaml --bots "$BOTS" --duration "$DURATION" \
            --out "$out" >/dev/null 2>"$log" || true
    fi
}

for i in $(seq "$PAIRS"); do
    run_once "without-$i" 0
    run_once "with-$i" 1
done

python3 - "$WORK" "$PAIRS" <<'PY'
import json, statistics, sys
work, pairs = sys.argv[1], int(sys.argv[2])
def figures(name):
    s = json.load(open(f"{work}/{name}/summary.json"))
    g = s["generator"]
    return {
        "lateness p99 us": g["send_lateness_us"]["p99"],
        "slots skipped": g["inputs_skipped"],
        "rtt p50 us": s["rtt_us"]["p50"],
        "rtt p99 us": s["rtt_us"]["p99"],
        "worker cpu max": g["worker_cpu_max"],
    }
rows = {side: [figures(f"{side}-{i}") for i in range(1, pairs + 1)] for side in ("without", "with")}
keys = list(rows["without"][0])
print("run".ljust(12) + "".join(k.rjust(17) for k in keys))
for side in ("without", "with"):
    for i, r in enumerate(rows[side], 1):
        print(f"{side}-{i}".ljust(12) + "".join(f"{r[k]:>17.3f}" if isinstance(r[k], float) else f"{r[k]:>17}" for k in keys))
for side in ("without", "with"):
    med = {k: statistics.median(r[k] for r in rows[side] if r[k] is not None) for k in keys}
    print(f"median {side}".ljust(12) + "".join(f"{med[k]:>17.3f}" if isinstance(med[k], float) else f"{med[k]:>17}" for k in keys))
PY
