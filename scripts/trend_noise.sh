#!/usr/bin/env bash
# How often `tickswarm trend` calls identical runs a change (false alarms), and whether it
# finds a known injected one. Runs N identical short cafe runs against the embedded server
# (8 bots, 3 s, release build), then the same N with one extra run carrying injected
# latency at the end, and prints what trend says of each.
#
# Usage: scripts/trend_noise.sh [--runs N] [--latency-ms D] [--out DIR]
# Defaults: N=30, D=1 (each way: +2 ms of RTT), DIR=target/trend-noise.
# Traffic stays on 127.0.0.1; every run is bounded (3 s, timeout 60 s).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=30 latency=1 out=target/trend-noise
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --latency-ms) latency=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
bin=${TICKSWARM_BIN:-target/release/tickswarm}
[ -x "$bin" ] || cargo build --release --quiet
rm -rf "$out" && mkdir -p "$out/runs"
scenario() {
  printf 'name: trend-noise\nprotocol:\n  cafe: {}\ntarget: embedded\npopulation:\n  stages:\n    - ramp_to: 8\n      over: 0s\n    - hold: 3s\nbehaviour:\n  input_rate: 30\n  ping_interval: 100ms\nseed: 3\n%s' "$1"
}
scenario "" > "$out/same.yaml"
scenario "$(printf 'network:\n  latency: %sms\n' "$latency")" > "$out/slow.yaml"
for i in $(seq 1 "$runs"); do
  timeout 60 "$bin" run "$out/same.yaml" --label "$i" --quiet --out "$out/runs/$(printf %03d "$i")" || true
done
echo "== $runs identical runs"
"$bin" trend "$out/runs" --order label --out "$out/identical" --force 2>&1 | grep -E "^(REGRESSED|IMPROVED|CHANGED|runs) " || true
changes=$(python3 -c "import json,sys; t=json.load(open('$out/identical/trend.json')); print(sum(1 for r in t['runs'] for _,j in r['judged'] if j['state']!='within'), sum(len(r['judged']) for r in t['runs']))")
echo "false alarms, judgements: $changes"
timeout 60 "$bin" run "$out/slow.yaml" --label "$((runs + 1))" --quiet --out "$out/runs/$(printf %03d $((runs + 1)))" || true
echo "== the same $runs, then one with ${latency} ms injected each way"
"$bin" trend "$out/runs" --order label --out "$out/injected" --force 2>&1 | grep -E "^(REGRESSED|IMPROVED|CHANGED) " || echo "(no change found)"
python3 - "$out/injected/trend.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
last = t["runs"][-1]
values = dict((k, v["value"]) for k, v in last["values"])
for k, j in last["judged"]:
    print(f"last run {k}: {values[k]:.1f} against {j['expected']:.1f} ± {j['band']:.1f}: {j['state']}")
PY
