#!/usr/bin/env bash
# Check tickswarm's ZergCity bot against an INDEPENDENT peer (tests/peers/zergcity-peer/zc_peer.c,
# written from the protocol's description (docs/protocols/zergcity.md) alone, with its own layouts D1-D18 where the spec
# is silent), and the peer's client against tickswarm's reference server.
#
# Check 1, bots -> zc_peer server: the peer drops every K-th DeltaSnapshot per client after
# consuming its header sequence, delays every Pong D ms, and prints its ground truth (TRUTH
# lines) at exit. Its FullSnapshot sections are in its own layout, so the bots keep them as
# opaque baselines (full_snapshot.foreign_layout) and still ack, play and measure. Judged:
#   - bots connected = N, none failed; decode errors = 0 (foreign layouts are not errors);
#   - delta loss: deltas_missing / deltas_expected against truth = dropped / generated
#     (summed over TRUTH client lines). Bound: the bot counts a dropped delta only when a
#     later delta arrives, and stops reading a few ticks before the peer stops generating for
#     it (deltas in flight, and those generated until the peer handles the bot's Disconnect).
#     With a tail of at most T = 10 ticks (500 ms) per client, c clients, g generated and d
#     dropped: up to U = c*ceil(T/K) drops and V = c*T deltas go unseen, so
#       -U/g <= measured - truth <= d*V/(g*(g-V));
#     the check allows that plus 0.001 (about 0.006 for 4 bots, 10 s, K = 10);
#   - header-sequence loss (loss.downstream: gaps in the peer's per-connection sequence over
#     every message) against the exact truth dropped / (1 ServerHello + fulls + deltas
#     generated + pongs + input acks) per client; same bound with V = c*(T + 5) (pongs and
#     input acks in the tail too);
#   - rtt_us.min >= D ms (every Pong leaves the peer at least D ms after its Ping arrived);
#   - inputs acked by the peer > 0 (TRUTH inputs_acked, our action payloads) and the peer
#     counted no invalid message from the bots (TRUTH invalid = 0).
# Check 2, zc_peer client -> tickswarm serve zergcity: RESULT ok passes. The peer's client
# rejects our FullSnapshot sections (its Players/Components layouts differ, both undefined by
# the spec) and, as it only pings and sends inputs once it holds a state, exercises the
# handshake only; that exact outcome (handshake ok, every invalid message a FullSnapshot
# bad_payload, no other error) is reported as "PASS (limited)". Anything else fails.
#
# Usage: scripts/verify_external_zergcity.sh [--drop-every K] [--pong-delay-ms D] [--bots N]
#            [--duration 10s] [--out DIR] [--no-build] [--skip-client | --skip-server]
# Defaults: K=10, D=20, N=4 (one game), 10s, DIR=reports/verify-external-zergcity-<timestamp>.
# Exit status 0 = PASS, 1 = FAIL, 2 = could not run. Loopback only; every step bounded.
set -euo pipefail

K=10
D=20
BOTS=4
DURATION=10s
OUT=""
BUILD=1
CLIENT=1
SERVER=1

while [ $# -gt 0 ]; do
    case "$1" in
        --drop-every) K="$2"; shift 2 ;;
        --pong-delay-ms) D="$2"; shift 2 ;;
        --bots) BOTS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --skip-client) CLIENT=0; shift ;;
        --skip-server) SERVER=0; shift ;;
        -h|--help) sed -n '2,38p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

cd "$(dirname "$0")/.."
PEER=tests/peers/zergcity-peer/zc_peer
BIN=target/release/tickswarm
OUT="${OUT:-reports/verify-external-zergcity-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"

. scripts/lib/verify_common.sh
dur_s=$(duration_seconds "$DURATION")

echo "== building the peer (make -C tests/peers/zergcity-peer)"
timeout 300 make -s -C tests/peers/zergcity-peer >/dev/null || { echo "peer build failed" >&2; exit 2; }
build_release "$BUILD" "$BIN"

# ---------------------------------------------------------------- check 1: bots -> peer server
if [ "$SERVER" = 1 ]; then
# The scenario: one game of four, no reconnections (each ENet connection is one TRUTH line),
# chat on (the peer ignores ChatMessage and counts it "ignored").
cat >"$OUT/scenario.yaml" <<EOF
name: verify-external-zergcity
protocol:
  zergcity:
    reconnect_share: 0
    chat_rate: 2
    input_ack_timeout_ms: 2000
target: embedded
server:
  players_per_instance: 4
population:
  stages:
    - ramp_to: $BOTS
      over: 1s
    - hold: ${dur_s}s
behaviour:
  input_rate: 5
  ping_interval: 250ms
  handshake_timeout: 10s
duration: ${dur_s}s
seed: 42
thresholds:
  - decode_errors <= 0
EOF

server_max=$((dur_s + 60))
echo "== starting zc_peer server 0 --drop-every $K --pong-delay-ms $D"
start_peer "$OUT/peer-server.out" "$OUT/peer-server.err" $((server_max + 30)) \
    "$PEER" server 0 --drop-every "$K" --pong-delay-ms "$D" --duration "$server_max"
server_pid=$PEER_PID
trap 'stop_peer "$server_pid"' EXIT

port=$(peer_port "$OUT/peer-server.out" "$server_pid") || {
    echo "peer server did not report its port; stderr:" >&2
    cat "$OUT/peer-server.err" >&2
    exit 2
}
echo "== peer on 127.0.0.1:$port; running $BOTS bots for $DURATION"

set +e
timeout --signal=INT --kill-after=10 $((dur_s + 60)) \
    "$BIN" run "$OUT/scenario.yaml" --target "127.0.0.1:$port" --bots "$BOTS" \
    --duration "$DURATION" --out "$OUT/run" >"$OUT/run.log" 2>&1
run_rc=$?
set -e
tail -n 14 "$OUT/run.log"
echo "== tickswarm exited with $run_rc (its own verdict; judged below on the numbers)"
sleep 0.5   # let the peer handle the Disconnects before it stops
stop_peer "$server_pid"
trap - EXIT
fi

# ---------------------------------------------------------------- check 2: peer client -> us
client_line=""
if [ "$CLIENT" = 1 ]; then
    echo "== starting tickswarm serve zergcity --port 0; zc_peer client for 3 s"
    timeout --signal=INT --kill-after=5 60 "$BIN" serve zergcity --port 0 \
        >"$OUT/serve.out" 2>"$OUT/serve.err" &
    serve_pid=$!
    if sport=$(peer_port "$OUT/serve.out" "$serve_pid"); then
        set +e
        timeout 30 "$PEER" client 127.0.0.1 "$sport" --seconds 3 >"$OUT/peer-client.out" 2>&1
        set -e
        client_line=$(grep '^RESULT' "$OUT/peer-client.out" | tail -n1 || true)
    fi
    kill -INT "$serve_pid" 2>/dev/null || true
    wait "$serve_pid" 2>/dev/null || true
fi

# ---------------------------------------------------------------- judge
python3 - "$OUT/run/summary.json" "$OUT/peer-server.out" "$K" "$D" "$BOTS" "$CLIENT" \
    "$client_line" "$SERVER" <<'PY'
import json, math, sys

summary_path, server_out, K, D, N = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    float(sys.argv[4]), int(sys.argv[5])
want_client, client_line = sys.argv[6] == "1", sys.argv[7]
want_server = sys.argv[8] == "1"
results = []

def check(name, ok, detail):
    results.append((name, ok))
    print(f"{'PASS' if ok else 'FAIL'}: {name}: {detail}")

def kv(line):
    return {k: v for k, _, v in (t.partition("=") for t in line.split()[1:]) if _}

try:
    truth_lines = [l for l in open(server_out).read().splitlines() if l.startswith("TRUTH ")]
except OSError as e:
    truth_lines = []
clients = [kv(l) for l in truth_lines if l.startswith("TRUTH client=")]
total = next((kv(l) for l in truth_lines if l.startswith("TRUTH total")), None)
summ = None
if want_server:
    try:
        summ = json.load(open(summary_path))
    except (OSError, ValueError) as e:
        print(f"FAIL: cannot read {summary_path}: {e}")

if not want_server:
    pass
elif summ is None or total is None or not clients:
    print("no TRUTH lines from the peer" if total is None else "")
    check("check 1 ran", False, "summary or TRUTH lines missing")
else:
    I = lambda d, k: int(d.get(k, 0))
    c = len(clients)
    g = sum(I(x, "deltas_generated") for x in clients)
    d = sum(I(x, "deltas_dropped") for x in clients)
    seq_sent = sum(1 + I(x, "fulls") + I(x, "deltas_generated") + I(x, "pongs")
                   + I(x, "inputs_acked") for x in clients)
    pm = summ.get("protocol_metrics") or {}
    num = lambda k: pm.get(k) if isinstance(pm.get(k), (int, float)) else 0
    bots = summ.get("bots") or {}
    dec = (summ.get("errors") or {}).get("decode") or {}
    dec_total = sum(v for v in dec.values() if isinstance(v, (int, float))) \
        if isinstance(dec, dict) else 0
    print(f"peer truth: clients={c} deltas_generated={g} deltas_dropped={d} "
          f"fulls={total.get('fulls')} pongs={total.get('pongs')} "
          f"inputs_acked={total.get('inputs_acked')} inputs_ok={total.get('inputs_ok')} "
          f"inputs_rejected={total.get('inputs_rejected')} "
          f"rate_limited={total.get('inputs_rate_limited')} acks={total.get('acks')} "
          f"invalid={total.get('invalid')} ignored={total.get('ignored')} "
          f"warn_wrong_channel={total.get('warn_wrong_channel')}")
    print(f"bots: full_snapshot.foreign_layout={num('full_snapshot.foreign_layout')} "
          f"delta_applied_opaque={num('delta_applied_opaque')} "
          f"baseline_misses={num('baseline_misses')} "
          f"input_result.accepted={num('input_result.accepted')} "
          f"snapshots_applied={summ.get('snapshots_applied')} inputs_sent={summ.get('inputs_sent')}")

    check("bots connected", bots.get("connected") == N and not bots.get("failed"),
          f"{bots.get('connected')} of {N} connected, {bots.get('failed')} failed")
    check("no decode errors", dec_total == 0, f"{dec_total} {dec if dec else ''}")

    T = 10
    def bound(gen, drop, v_per_client):
        U, V = c * math.ceil(T / K), c * v_per_client
        lo = U / gen if gen else 1.0
        hi = drop * V / (gen * (gen - V)) if gen > V else 1.0
        return lo + 0.001, hi + 0.001

    exp_, miss = num("deltas_expected"), num("deltas_missing")
    truth = d / g if g else float("nan")
    meas = miss / exp_ if exp_ else None
    lo, hi = bound(g, d, T)
    ok = meas is not None and -lo <= meas - truth <= hi
    print(f"delta loss: truth dropped/generated = {d}/{g} = {truth:.6f} (nominal 1/K = "
          f"{1 / K:.6f}); measured deltas_missing/deltas_expected = {miss}/{exp_} = "
          + (f"{meas:.6f}; diff {meas - truth:+.6f}; unseen tail {g - exp_} deltas"
             if meas is not None else "n/a"))
    check("delta loss matches the peer's drops", ok,
          f"allowed [-{lo:.6f}, +{hi:.6f}] around the truth")

    down = (summ.get("loss") or {}).get("downstream")
    truth_s = d / seq_sent if seq_sent else float("nan")
    meas_s = down.get("rate") if down else None
    lo, hi = bound(seq_sent, d, T + 5)
    ok = meas_s is not None and -lo <= meas_s - truth_s <= hi
    print(f"header-sequence loss: truth dropped/messages = {d}/{seq_sent} = {truth_s:.6f}; "
          f"measured loss.downstream = "
          + (f"{meas_s:.6f} (expected {down.get('expected')}, received "
             f"{down.get('received')}); diff {meas_s - truth_s:+.6f}" if down else "null"))
    check("header-sequence loss matches", ok,
          f"allowed [-{lo:.6f}, +{hi:.6f}] around the truth")

    rtt = summ.get("rtt_us") or {}
    check("rtt floor", bool(rtt.get("count")) and rtt.get("min") is not None
          and rtt["min"] >= D * 1000,
          f"rtt_us.min = {rtt.get('min')} (p50 {rtt.get('p50')}, {rtt.get('count')} samples) "
          f">= {D * 1000:.0f}")
    check("inputs acked by the peer", I(total, "inputs_acked") > 0
          and I(total, "inputs_ok") > 0,
          f"inputs_acked={total.get('inputs_acked')} ok={total.get('inputs_ok')} "
          f"(bots sent {summ.get('inputs_sent')})")
    check("peer saw no invalid message", I(total, "invalid") == 0,
          f"invalid={total.get('invalid')}")

if want_client:
    f = kv(client_line) if client_line else {}
    words = client_line.split()
    if client_line.startswith("RESULT ok"):
        check("peer client vs our server", True, client_line[:160])
    else:
        inv = {k: int(v) for k, v in f.items() if k.startswith("inv_") and v.isdigit()}
        other = {k: v for k, v in inv.items() if k != "inv_bad_payload" and v}
        limited = (len(words) >= 3 and words[1] == "fail" and words[2] == "no_full_snapshot"
                   and f.get("handshake") == "ok" and inv.get("inv_bad_payload", 0) >= 1
                   and int(f.get("invalid", -1)) == inv.get("inv_bad_payload", 0)
                   and not other and f.get("server_disconnect") == "-1")
        if limited:
            print("PASS (limited): peer client vs our server: handshake ok (ServerHello "
                  f"slot {f.get('slot')}); {inv['inv_bad_payload']} FullSnapshot(s) rejected "
                  "by the peer as bad_payload (its Players/Components layouts differ from ours; "
                  "both undefined by the spec), so it never acks, gets no deltas, sends no "
                  "pings or inputs; no other invalid message")
            results.append(("peer client vs our server (limited)", True))
        else:
            check("peer client vs our server", False, client_line or "no RESULT line")

passed = sum(1 for _, ok in results if ok)
failed = len(results) - passed
print(f"{passed} passed, {failed} failed")
print("VERIFY " + ("PASS" if not failed else
                   "FAIL (" + ", ".join(n for n, ok in results if not ok) + ")"))
sys.exit(1 if failed else 0)
PY
