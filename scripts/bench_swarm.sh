#!/usr/bin/env bash
# Whole-swarm throughput on this machine: N bots at 60 Hz against the embedded cafe server for
# D, then the figures that say whether the generator kept up (send lateness, skipped grid
# slots) and what it measured. Bounded: one run, D long, loopback only.
#
# Usage: scripts/bench_swarm.sh [BOTS=1000] [DURATION=20s]
set -euo pipefail
cd "$(dirname "$0")/.."
BOTS=${1:-1000}
DURATION=${2:-20s}
OUT=$(mktemp -d)
cargo build --release -q
timeout 300 ./target/release/tickswarm run scenarios/quickstart.yaml \
    --bots "$BOTS" --duration "$DURATION" --out "$OUT" >/dev/null 2>&1 || true
python3 - "$OUT/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
g = s["generator"]; l = g["send_lateness_us"]; r = s["rtt_us"]; d = s["loss"]["downstream"]
dur = s["duration_s"]
print(f"bots            {s['bots']['connected']}/{s['bots']['planned']} connected, {g['workers']} workers, {dur:.1f}s")
print(f"inputs          {s['inputs_sent']} sent = {s['inputs_sent'] / max(s['bots']['connected'], 1) / dur:.1f} per bot per second")
print(f"send lateness   p50 {l['p50']}us p99 {l['p99']}us max {l['max']}us; {g['inputs_skipped']} grid slots skipped")
print(f"rtt             p50 {r['p50']}us p99 {r['p99']}us ({r['count']} samples)")
print(f"downstream      {d['received']}/{d['expected']} received; {s['bandwidth']['down_packets'] / dur:.0f} pkt/s down, {s['bandwidth']['up_packets'] / dur:.0f} pkt/s up")
PY
rm -rf "$OUT"
