#!/usr/bin/env bash
# Check tickswarm's R-Type measurements against an independent server with known, injected
# impairments (tests/peers/rtype-impaired-server/rtype_impaired_server.py, written from docs/protocols/rtype.md
# only, not from tickswarm's code).
#
# The server does not send every K-th snapshot per client (its tick is consumed, so the
# client sees a gap of one tick step) and answers every PING D ms late. R-Type has no header
# sequence: tickswarm measures downstream loss from snapshot ticks, so the ground truth is
# exactly the server's dropped/generated snapshots (about 1/K). tickswarm must report:
#   bots.connected        == N
#   loss.downstream.rate  ~= dropped/generated   (|measured - truth| <= 0.005)
#   rtt_us.min            >= D ms
#
# Usage: scripts/verify_external_rtype.sh [--drop-every K] [--pong-delay-ms D] [--bots N]
#            [--duration 15s] [--out DIR] [--scenario FILE] [--float-order big|little]
#            [--server-arg ARG]... [--no-build]
# Defaults: K=10, D=20, N=20, 15s, DIR=reports/verify-external-rtype-<timestamp>,
#           scenarios/rtype.yaml, big. --server-arg passes one more argument to the server
#           (e.g. --server-arg --snapshot-rate --server-arg 30).
# Exit status 0 = PASS, 1 = FAIL, 2 = could not run.
# Traffic stays on 127.0.0.1; every step is bounded with timeout(1).
set -euo pipefail

K=10
D=20
BOTS=20
DURATION=15s
OUT=""
SCENARIO=scenarios/rtype.yaml
FLOAT_ORDER=big
EXTRA=()
BUILD=1

while [ $# -gt 0 ]; do
    case "$1" in
        --drop-every) K="$2"; shift 2 ;;
        --pong-delay-ms) D="$2"; shift 2 ;;
        --bots) BOTS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --scenario) SCENARIO="$2"; shift 2 ;;
        --float-order) FLOAT_ORDER="$2"; shift 2 ;;
        --server-arg) EXTRA+=("$2"); shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

cd "$(dirname "$0")/.."
SERVER=tests/peers/rtype-impaired-server/rtype_impaired_server.py
BIN=./target/release/tickswarm
OUT="${OUT:-reports/verify-external-rtype-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"

. scripts/lib/verify_common.sh
dur_s=$(duration_seconds "$DURATION")
build_release "$BUILD" "$BIN"

# Safety bound of the server itself, and the outer bound around it.
server_max=$((dur_s + 120))
echo "== starting $SERVER --drop-every $K --pong-delay-ms $D --float-order $FLOAT_ORDER ${EXTRA[*]:-}"
start_peer "$OUT/server.out" "$OUT/server.err" $((server_max + 30)) \
    python3 -u "$SERVER" --drop-every "$K" --pong-delay-ms "$D" --float-order "$FLOAT_ORDER" \
    --max-seconds "$server_max" ${EXTRA[@]+"${EXTRA[@]}"}
server_pid=$PEER_PID
trap 'stop_peer "$server_pid"' EXIT

port=$(peer_port "$OUT/server.out" "$server_pid") || {
    echo "server did not report its port; stderr:" >&2
    cat "$OUT/server.err" >&2
    exit 2
}
echo "== server on 127.0.0.1:$port; running $BOTS bots for $DURATION"

set +e
timeout --signal=INT --kill-after=10 $((dur_s + 60)) \
    "$BIN" run "$SCENARIO" --target "127.0.0.1:$port" \
    --bots "$BOTS" --duration "$DURATION" --out "$OUT" --force  # the folder holds this check's server logs
run_rc=$?
set -e
echo "== tickswarm exited with $run_rc (its own verdict; judged below on the numbers)"

stop_peer "$server_pid"
trap - EXIT

# Judge. The server's totals are the last JSON line of its stdout.
python3 - "$OUT/summary.json" "$OUT/server.out" "$K" "$D" "$BOTS" <<'PY'
import json, sys

summary_path, server_out = sys.argv[1], sys.argv[2]
K, D, N = int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
try:
    lines = [l for l in open(server_out).read().splitlines() if l.startswith("{")]
    srv = json.loads(lines[-1])
except (OSError, IndexError, ValueError) as e:
    print(f"FAIL: no server totals in {server_out}: {e}")
    sys.exit(1)
try:
    summ = json.load(open(summary_path))
except (OSError, ValueError) as e:
    print(f"FAIL: cannot read {summary_path}: {e}")
    sys.exit(1)

gen, dropped, sent = srv["snapshots_generated"], srv["snapshots_dropped"], srv["snapshots_sent"]
# Ground truth. R-Type has no header sequence: the only loss source tickswarm can see is the
# snapshot tick, and every snapshot the server withheld is exactly one missing tick step.
truth = dropped / gen if gen else 0.0
nominal = 1.0 / K if K > 0 else 0.0

down = (summ.get("loss") or {}).get("downstream")
measured = down.get("rate") if down else None
rtt = summ.get("rtt_us") or {}
rtt_min, rtt_p50, rtt_n = rtt.get("min"), rtt.get("p50"), rtt.get("count")
connected = (summ.get("bots") or {}).get("connected")

print(f"server: clients_seen={srv['clients_seen']} accepted={srv['accepted']} "
      f"rejects={srv['rejects_sent']} snapshots_generated={gen} snapshots_dropped={dropped} "
      f"snapshots_sent={sent} pongs_sent={srv['pongs_sent']} "
      f"pings_received={srv.get('pings_received')} malformed={srv['malformed']} "
      f"unknown_type={srv['unknown_type']} send_errors={srv.get('send_errors', 0)}")
print(f"server: tick_step={srv.get('tick_step')} ticks={srv.get('ticks')} "
      f"max_tick_lag_ms={srv.get('max_tick_lag_ms')} ticks_late_5ms={srv.get('ticks_late_5ms')} "
      f"input_entity_mismatch={srv.get('input_entity_mismatch')} "
      f"ended_by={srv.get('ended_by')} ignored={srv.get('ignored_by_reason')}")
print(f"expected loss: truth dropped/generated = {dropped}/{gen} = {truth:.6f}  |  "
      f"nominal 1/K = {nominal:.6f}")
if down:
    print(f"measured loss.downstream: rate = {measured:.6f} "
          f"(expected {down.get('expected')}, received {down.get('received')}); "
          f"measured - truth = {measured - truth:+.6f}")
    # Finer cross-check (informational): a client cannot see a drop after the last snapshot
    # it received. A client's first snapshot is never dropped (K > 1), so per client the
    # visible ticks are all generated ones except a trailing drop (generated % K == 0).
    trailing = sum(1 for c in srv.get("per_client", [])
                   if K > 1 and c["snapshots_generated"] and c["snapshots_generated"] % K == 0)
    vis_exp, vis_miss = gen - trailing, dropped - trailing
    exact = down.get("expected") == vis_exp and down.get("received") == sent
    print(f"  cross-check: server sent {sent} snapshots, tickswarm received "
          f"{down.get('received')} ({(down.get('received') or 0) - sent:+d}); visible ticks "
          f"{vis_exp} (generated - {trailing} trailing drops) vs tickswarm expected "
          f"{down.get('expected')}; visible missing {vis_miss} -> "
          f"{vis_miss / vis_exp if vis_exp else 0:.6f}: {'exact' if exact else 'differs'}")
else:
    print("measured loss.downstream: null")
print(f"measured rtt_us: min = {rtt_min}  p50 = {rtt_p50}  (count {rtt_n}); "
      f"injected pong delay = {D * 1000:.0f} us")

fails = []
ok_conn = connected == N
print(f"{'PASS' if ok_conn else 'FAIL'}: bots.connected = {connected} == {N}")
if not ok_conn:
    fails.append("connected")
ok_loss = measured is not None and abs(measured - truth) <= 0.005
print(f"{'PASS' if ok_loss else 'FAIL'}: |measured - truth| = "
      f"{abs(measured - truth) if measured is not None else float('nan'):.6f} <= 0.005")
if not ok_loss:
    fails.append("loss")
# Every PONG leaves the server at least D ms after its PING arrived, so no RTT sample can be
# below D. (Histograms keep 3 significant figures: a reported min can sit up to ~16 us below
# the true one near 20 ms; loopback and the two event loops add more than that.)
ok_rtt = bool(rtt_n) and rtt_min is not None and rtt_min >= D * 1000
print(f"{'PASS' if ok_rtt else 'FAIL'}: rtt_us.min = {rtt_min} >= {D * 1000:.0f}")
if not ok_rtt:
    fails.append("rtt")
print("VERIFY " + ("PASS" if not fails else "FAIL (" + ", ".join(fails) + ")"))
sys.exit(1 if fails else 0)
PY
