#!/usr/bin/env bash
# Check tickswarm's DarkAges measurements against two instances of an independent zone server
# with known, injected impairments (tests/peers/darkages-impaired-server/darkages_impaired_server.py, written from
# docs/protocols/darkages.md only).
#
# Zone B (--accept-tokens) starts first; zone A hands every client off to B --handoff-after S
# seconds after it connected. Both drop every K-th snapshot per client (tick consumed) and
# answer every PING D ms late. tickswarm runs N bots against A and must then report:
#   downstream loss ~= truth = snapshots_dropped / snapshots_generated over A and B
#                     (bound explained below, printed with the figures)
#   rtt_us.min      >= D ms
#   all N bots connected, none failed
#   its handoffs    == handoffs_arrived on B (and > 0)
#   no decode errors on our side, nothing malformed on the servers' side
#   deltas flow: delta_snapshots > full_snapshots on A and on B, no baseline_miss
#
# Usage: scripts/verify_external_darkages.sh [--drop-every K] [--pong-delay-ms D] [--bots N]
#            [--duration 10s] [--handoff-after S] [--out DIR] [--scenario FILE] [--no-build]
# Defaults: K=10, D=20, N=10, 10s, S=3, DIR=reports/verify-external-darkages-<timestamp>,
#           scenarios/darkages.yaml. Exit status 0 = PASS, 1 = FAIL, 2 = could not run.
# Traffic stays on 127.0.0.1; every step is bounded with timeout(1).
set -euo pipefail

K=10
D=20
BOTS=10
DURATION=10s
HANDOFF_AFTER=3
OUT=""
SCENARIO=scenarios/darkages.yaml
BUILD=1
SECRET="verify-darkages-$$"

while [ $# -gt 0 ]; do
    case "$1" in
        --drop-every) K="$2"; shift 2 ;;
        --pong-delay-ms) D="$2"; shift 2 ;;
        --bots) BOTS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --handoff-after) HANDOFF_AFTER="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --scenario) SCENARIO="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

cd "$(dirname "$0")/.."
SERVER=tests/peers/darkages-impaired-server/darkages_impaired_server.py
OUT="${OUT:-reports/verify-external-darkages-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"

. scripts/lib/verify_common.sh
dur_s=$(duration_seconds "$DURATION")
BIN=target/release/tickswarm
build_release "$BUILD" "$BIN"

# Safety bound of each server itself (it stops and prints TRUTH then), and the outer bound.
server_max=$((dur_s + 120))
pid_a=""
pid_b=""
stop_servers() {
    stop_peer "$pid_a"
    stop_peer "$pid_b"
}
trap stop_servers EXIT

common=(--port 0 --duration "$server_max" --drop-every "$K" --pong-delay-ms "$D"
        --secret "$SECRET")

echo "== starting zone B: $SERVER --zone-id 2 --accept-tokens --drop-every $K --pong-delay-ms $D"
start_peer "$OUT/server_b.out" "$OUT/server_b.err" $((server_max + 30)) \
    python3 -u "$SERVER" "${common[@]}" --zone-id 2 --accept-tokens
pid_b=$PEER_PID
port_b=$(peer_port "$OUT/server_b.out" "$pid_b") || {
    echo "zone B did not report its port; stderr:" >&2; cat "$OUT/server_b.err" >&2; exit 2; }

echo "== starting zone A: --zone-id 1 --handoff-after $HANDOFF_AFTER --handoff-to $port_b" \
     "--handoff-zone 2 --drop-every $K --pong-delay-ms $D"
start_peer "$OUT/server_a.out" "$OUT/server_a.err" $((server_max + 30)) \
    python3 -u "$SERVER" "${common[@]}" --zone-id 1 --handoff-after "$HANDOFF_AFTER" \
    --handoff-to "$port_b" --handoff-zone 2
pid_a=$PEER_PID
port_a=$(peer_port "$OUT/server_a.out" "$pid_a") || {
    echo "zone A did not report its port; stderr:" >&2; cat "$OUT/server_a.err" >&2; exit 2; }

echo "== zones on 127.0.0.1:$port_a (A) and :$port_b (B); running $BOTS bots for $DURATION"
set +e
timeout --signal=INT --kill-after=10 $((dur_s + 60)) \
    "$BIN" run "$SCENARIO" --target "127.0.0.1:$port_a" \
    --bots "$BOTS" --duration "$DURATION" --out "$OUT" --force  # the folder holds this check's server logs
run_rc=$?
set -e
echo "== tickswarm exited with $run_rc (its own verdict; judged below on the numbers)"

stop_servers
trap - EXIT

python3 - "$OUT/summary.json" "$OUT/server_a.out" "$OUT/server_b.out" "$K" "$D" "$BOTS" <<'PY'
import json, sys

summary_path, out_a, out_b = sys.argv[1], sys.argv[2], sys.argv[3]
K, D, N = int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])


def truth(path):
    """-> (total dict, [client dicts]) from the server's TRUTH lines."""
    total, clients = None, []
    for line in open(path).read().splitlines():
        if not line.startswith("TRUTH "):
            continue
        parts = line.split()
        kv = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
        if parts[1] == "total":
            total = kv
        elif parts[1] == "client":
            clients.append(kv)
    if total is None:
        raise ValueError("no TRUTH total line")
    return total, clients


try:
    (ta, ca), (tb, cb) = truth(out_a), truth(out_b)
except (OSError, ValueError) as e:
    print(f"FAIL: no server truth: {e}")
    sys.exit(1)
try:
    summ = json.load(open(summary_path))
except (OSError, ValueError) as e:
    print(f"FAIL: cannot read {summary_path}: {e}")
    sys.exit(1)

I = lambda d, k: int(d.get(k, 0))
for name, t in (("A", ta), ("B", tb)):
    print(f"zone {name}: clients={t['clients']} snapshots_generated={t['snapshots_generated']} "
          f"snapshots_dropped={t['snapshots_dropped']} full={t['full_snapshots']} "
          f"delta={t['delta_snapshots']} acks_valid={t['acks_valid']} "
          f"ack_not_sent={t['ack_not_sent']} pongs={t['pongs']} inputs={t['inputs']} "
          f"invalid_inputs={t['invalid_inputs']} handoffs_sent={t['handoffs_sent']} "
          f"handoffs_arrived={t['handoffs_arrived']} handoffs_rejected={t['handoffs_rejected']} "
          f"handoffs_late={t['handoffs_late']} malformed={t['malformed']} "
          f"send_errors={t['send_errors']}")

gen = I(ta, "snapshots_generated") + I(tb, "snapshots_generated")
dropped = I(ta, "snapshots_dropped") + I(tb, "snapshots_dropped")
sessions = len(ca) + len(cb)          # one loss-counting session per client per zone
true_rate = dropped / gen if gen else 0.0

down = (summ.get("loss") or {}).get("downstream") or {}
expected, received = down.get("expected"), down.get("received")
pm = summ.get("protocol_metrics") or {}
ev = lambda k: int(pm.get(k, 0) or 0)

fails = []


def judge(ok, what, name):
    print(f"{'PASS' if ok else 'FAIL'}: {what}")
    if not ok:
        fails.append(name)


# 1) Loss. The bot counts, per zone session, the ticks from the first snapshot it received to
#    the last one. The server's first snapshot per client is never dropped (the K-th is), so
#    the head is exact; the tail is not: snapshots generated after the last one the bot read
#    (in flight when it stopped, or sent while it was leaving the zone on a handoff, which
#    it ignores) are in the truth and not in our count. That tail is at most TAIL snapshots
#    per session, of which at most one is a drop (K >= TAIL). So per session:
#      0 <= generated - expected <= TAIL   and   0 <= dropped - (expected - received) <= 1
#    and the rate difference is bounded by the worst corner of those two ranges.
TAIL = 3
if expected is None:
    judge(False, "loss.downstream missing from the summary", "loss")
else:
    missing = expected - received
    m_rate = missing / expected if expected else 0.0
    lo_e, lo_d = sessions * TAIL, sessions
    bound = max(abs((dropped - a) / (gen - b) - true_rate)
                for a in (0, lo_d) for b in (0, lo_e) if gen - b > 0) + 1e-9
    print(f"truth: snapshots_dropped/snapshots_generated = {dropped}/{gen} = {true_rate:.6f} "
          f"over {sessions} zone sessions")
    print(f"measured: loss.downstream = ({expected} - {received})/{expected} = {m_rate:.6f}; "
          f"measured - truth = {m_rate - true_rate:+.6f}; bound {bound:.6f}")
    judge(0 <= gen - expected <= lo_e,
          f"generated - expected = {gen - expected} within 0..={lo_e} ({TAIL} per session)",
          "loss_expected")
    judge(0 <= dropped - missing <= lo_d,
          f"dropped - missing = {dropped - missing} within 0..={lo_d} (1 per session)",
          "loss_missing")
    judge(abs(m_rate - true_rate) <= bound,
          f"|measured - truth| = {abs(m_rate - true_rate):.6f} <= {bound:.6f}", "loss_rate")

# 2) RTT floor: every PONG leaves the server at least D ms after its PING arrived.
rtt = summ.get("rtt_us") or {}
rtt_min, rtt_n = rtt.get("min"), rtt.get("count")
judge(bool(rtt_n) and rtt_min is not None and rtt_min >= D * 1000,
      f"rtt_us.min = {rtt_min} >= {D * 1000:.0f} (count {rtt_n}, p50 {rtt.get('p50')})", "rtt")

# 3) Every bot connected, none failed.
bots = summ.get("bots") or {}
judge(bots.get("connected") == N and not bots.get("failed"),
      f"bots connected {bots.get('connected')}/{N}, failed {bots.get('failed')}", "connect")

# 4) Handoffs: ours == arrivals at B == clients A told, and there were some.
ours, arrived, told = ev("handoffs"), I(tb, "handoffs_arrived"), I(ta, "handoffs_sent")
failed = {k: v for k, v in pm.items() if k.startswith("handoff_failed")}
judge(ours > 0 and ours == arrived == told,
      f"handoffs: ours {ours} == B handoffs_arrived {arrived} == A handoffs_sent {told} "
      f"(our failures {failed or 0}, B rejected {tb['handoffs_rejected']}, "
      f"late {tb['handoffs_late']})", "handoffs")

# 5) No decode errors either way.
dec = sum((summ.get("errors") or {}).get("decode", {}).values())
malformed = I(ta, "malformed") + I(tb, "malformed")
judge(dec == 0 and malformed == 0,
      f"decode errors: ours {dec}, servers' malformed {malformed}", "decode")

# 6) Deltas flow against acknowledged baselines, and we apply them all.
judge(all(I(t, "delta_snapshots") > I(t, "full_snapshots") for t in (ta, tb))
      and ev("baseline_miss") == 0,
      f"deltas: A {ta['delta_snapshots']} delta / {ta['full_snapshots']} full, "
      f"B {tb['delta_snapshots']} / {tb['full_snapshots']}; baseline_miss {ev('baseline_miss')}, "
      f"snapshot_duplicate {ev('snapshot_duplicate')}", "deltas")

print("VERIFY " + ("PASS" if not fails else "FAIL (" + ", ".join(fails) + ")"))
sys.exit(1 if fails else 0)
PY
