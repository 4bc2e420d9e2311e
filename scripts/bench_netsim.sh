#!/usr/bin/env bash
# The largest cafe population that stays on its 60 Hz grid with every bot impaired by the
# network model, beside the same search without impairment. "On the grid": 99 % of the bots
# connected (the injected loss may take a handshake), no grid slot skipped, send lateness p99 under one tick (16.7 ms).
#
# The search doubles the population from FROM until a run falls off the grid or MAX is
# reached, then halves the gap STEPS times (bisection). Each run lasts DURATION and is killed
# after 300 s: at most (log2(MAX/FROM) + 1 + STEPS) runs per mode, two modes.
#
# Usage: scripts/bench_netsim.sh [FROM=500] [MAX=16000] [DURATION=15s] [STEPS=3]
# TICKSWARM=path/to/binary skips the release build (e.g. a debug binary for a smoke run).
# Loopback only; run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
FROM=${1:-500}
MAX=${2:-16000}
DURATION=${3:-15s}
STEPS=${4:-3}
if [ -z "${TICKSWARM:-}" ]; then
    cargo build --release -q --bin tickswarm
    TICKSWARM=${CARGO_TARGET_DIR:-target}/release/tickswarm
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The quickstart scenario as it is, and with every bot on a mobile link both ways: the
# figures a 60 Hz game sees on a phone (60 ms, jitter, bursty loss, a little duplication and
# reordering). Thresholds off: only whether the generator kept up matters here.
grep -v -e '^thresholds:' -e '^  - ' scenarios/quickstart.yaml >"$WORK/clean.yaml"
cp "$WORK/clean.yaml" "$WORK/impaired.yaml"
cat >>"$WORK/impaired.yaml" <<'YAML'
network:
  latency: 60ms
  jitter: { normal: 8ms }
  loss: { rate: 2%, mean_burst: 4 }
  duplicate: 0.5%
  reorder: 1%
YAML

# Prints "ok" or "off" and the figures of one run.
run() {
    local mode=$1 bots=$2 out="$WORK/$1-$2"
    timeout 300 "$TICKSWARM" -q run "$WORK/$mode.yaml" --bots "$bots" --duration "$DURATION" \
        --out "$out" >/dev/null 2>&1 || true
    python3 - "$out/summary.json" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except Exception:
    print("off (no summary)"); sys.exit()
g = s["generator"]; l = g["send_lateness_us"]; b = s["bots"]
# A handshake may be lost to the injected loss: 99 % connected counts as all.
ok = b["connected"] >= 0.99 * b["planned"] and g["inputs_skipped"] == 0 and l["p99"] < 16667
print(("ok " if ok else "off"), f"connected {b['connected']}/{b['planned']}, "
      f"skipped {g['inputs_skipped']}, lateness p99 {l['p99']}us, rtt p50 {s['rtt_us']['p50']}us")
PY
}

search() {
    local mode=$1 good=0 bad=0 n=$FROM r
    while [ "$n" -le "$MAX" ]; do
        r=$(run "$mode" "$n"); echo "  $mode $n bots: $r" >&2
        if [ "${r:0:2}" = "ok" ]; then good=$n; n=$((n * 2)); else bad=$n; break; fi
    done
    for _ in $(seq "$STEPS"); do
        [ "$bad" -gt 0 ] && [ $((bad - good)) -gt 1 ] || break
        n=$(((good + bad) / 2))
        r=$(run "$mode" "$n"); echo "  $mode $n bots: $r" >&2
        if [ "${r:0:2}" = "ok" ]; then good=$n; else bad=$n; fi
    done
    echo "$mode: largest on the 60 Hz grid ${good} bots$([ "$bad" -gt 0 ] && echo " (off at ${bad})" || echo " (MAX reached)")"
}

search clean
search impaired
