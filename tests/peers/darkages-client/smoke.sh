#!/usr/bin/env bash
# Smoke test of the independent DarkAges servers (tests/peers/darkages-impaired-server/darkages_impaired_server.py) with
# the independent client (tests/peers/darkages-client/darkages_client_smoke.py); no tickswarm code involved.
#
# Runs zone server B (--accept-tokens) and zone server A (--handoff-after 4 --handoff-to B,
# --drop-every K, --pong-delay-ms D), both on 127.0.0.1 with --debug-state-hash, then the
# smoke client, which joins A, is handed off to B, and leaves. Both servers are stopped with
# SIGTERM and their TRUTH lines checked against what the client saw:
#   client RESULT ok; A: handoffs_sent=1, invalid_inputs=2 (yaw_range=1,
#   flags_forward_backward=1), snapshots_dropped within 1 of the client's tick gaps,
#   pongs >= 10; B: handoffs_arrived=1, refusals version_mismatch=1 and auth_failed=1
#   (token reuse), handoff_tokens ok=1 reused=1; no malformed datagrams on either.
#
# Usage: tests/peers/darkages-client/smoke.sh [--drop-every K] [--pong-delay-ms D] [--keep DIR]
# Exit 0 = PASS, 1 = FAIL, 2 = could not run. Every process is bounded by timeout(1).
set -euo pipefail

K=7
D=30
KEEP=""
while [ $# -gt 0 ]; do
    case "$1" in
        --drop-every) K="$2"; shift 2 ;;
        --pong-delay-ms) D="$2"; shift 2 ;;
        --keep) KEEP="$2"; shift 2 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

cd "$(dirname "$0")/../../.."
SERVER=tests/peers/darkages-impaired-server/darkages_impaired_server.py
CLIENT=tests/peers/darkages-client/darkages_client_smoke.py
OUT="${KEEP:-$(mktemp -d /tmp/darkages-smoke.XXXXXX)}"
mkdir -p "$OUT"
SECRET="smoke-secret-$$"

pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

wait_port() {  # file -> port from "listening on 127.0.0.1:PORT"
    for _ in $(seq 1 100); do
        if grep -q '^listening on ' "$1" 2>/dev/null; then
            sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$1" | head -1
            return 0
        fi
        sleep 0.05
    done
    return 1
}

timeout --signal=TERM --kill-after=5 60 python3 -u "$SERVER" --zone-id 2 --accept-tokens \
    --secret "$SECRET" --debug-state-hash --duration 45 --heartbeat-interval 1 \
    >"$OUT/b.out" 2>"$OUT/b.err" &
pids+=($!); pid_b=$!
PORT_B=$(wait_port "$OUT/b.out") || { echo "server B did not start" >&2; cat "$OUT/b.err"; exit 2; }

timeout --signal=TERM --kill-after=5 60 python3 -u "$SERVER" --zone-id 1 \
    --handoff-after 4 --handoff-to "$PORT_B" --handoff-zone 2 --handoff-timeout-ms 3000 \
    --secret "$SECRET" --drop-every "$K" --pong-delay-ms "$D" --debug-state-hash \
    --heartbeat-interval 1 --duration 45 \
    >"$OUT/a.out" 2>"$OUT/a.err" &
pids+=($!); pid_a=$!
PORT_A=$(wait_port "$OUT/a.out") || { echo "server A did not start" >&2; cat "$OUT/a.err"; exit 2; }
echo "== A on $PORT_A (drop-every $K, pong-delay $D ms) hands off to B on $PORT_B; logs in $OUT"

set +e
timeout --signal=TERM --kill-after=5 30 python3 -u "$CLIENT" --server "$PORT_A" \
    --expect-min-rtt-ms "$D" --expect-hashes >"$OUT/client.out" 2>"$OUT/client.err"
crc=$?
set -e
sleep 0.3
kill -TERM "$pid_a" "$pid_b" 2>/dev/null || true
wait "$pid_a" 2>/dev/null || true
wait "$pid_b" 2>/dev/null || true
pids=()

cat "$OUT/client.out"
grep '^TRUTH' "$OUT/a.out" | sed 's/^/A: /'
grep '^TRUTH' "$OUT/b.out" | sed 's/^/B: /'
[ -s "$OUT/client.err" ] && { echo "-- client stderr"; cat "$OUT/client.err"; }
[ -s "$OUT/a.err" ] && { echo "-- A stderr"; cat "$OUT/a.err"; }
[ -s "$OUT/b.err" ] && { echo "-- B stderr"; cat "$OUT/b.err"; }

python3 - "$OUT" "$crc" <<'EOF'
import sys
out, crc = sys.argv[1], int(sys.argv[2])

def kv(line):
    return dict(p.split("=", 1) for p in line.split() if "=" in p)

def truth(name):
    lines = [l for l in open(f"{out}/{name}.out") if l.startswith("TRUTH ")]
    by = {}
    for l in lines:
        by.setdefault(l.split()[1], []).append(kv(l))
    return by

fails = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        fails.append(what)

res = [l for l in open(f"{out}/client.out") if l.startswith("RESULT ")]
check(crc == 0 and len(res) == 1 and res[0].split()[1] == "ok", "client RESULT ok")
cl = kv(res[0]) if res else {}
A, B = truth("a"), truth("b")
check("total" in A and "total" in B, "both servers printed TRUTH totals")
if fails:
    sys.exit(1)
ca = [c for c in A.get("client", []) if c.get("client_id") == "smoke-1"]
cb = [c for c in B.get("client", []) if c.get("client_id") == "smoke-1"]
check(len(ca) == 1 and len(cb) == 1, "one smoke-1 session on each server")
if fails:
    sys.exit(1)
ca, cb = ca[0], cb[0]
check(ca["handoffs_sent"] == "1", "A handoffs_sent=1")
check(ca["ended"] == "disconnect:5", "A session ended by DISCONNECT(5 ZONE_HANDOFF)")
check(cb["handoffs_arrived"] == "1", "B handoffs_arrived=1")
check(B["total"][0]["handoffs_late"] == "0", "B handoffs_late=0")
check(ca["invalid_inputs"] == "2", "A invalid_inputs=2")
inv = A["invalid_inputs"][0]
check(inv.get("yaw_range") == "1" and inv.get("flags_forward_backward") == "1",
      "A invalid reasons yaw_range=1 flags_forward_backward=1")
gen, drop = int(ca["snapshots_generated"]), int(ca["snapshots_dropped"])
gaps = int(cl.get("a_gaps", -1))
check(0 <= drop - gaps <= 1, f"A snapshots_dropped={drop} vs client gaps={gaps} (drop-gaps in 0..1)")
snaps = int(cl.get("a_snapshots", -1))
check(snaps == gen - drop or snaps == gen - drop - 1,
      f"client received {snaps} of A's {gen - drop} sent snapshots (last may be in flight)")
check(int(ca["pongs"]) >= 10, "A pongs >= 10")
check(int(ca["inputs"]) > 100, "A inputs > 100")
check(int(ca["delta_snapshots"]) > 0 and int(ca["full_snapshots"]) > 0, "A sent full and delta")
check(B["refusals"][0].get("version_mismatch") == "1", "B refused one version mismatch")
check(B["refusals"][0].get("auth_failed") == "1", "B refused the reused token (auth_failed)")
tok = B["handoff_tokens"][0]
check(tok.get("ok") == "1" and tok.get("reused") == "1", "B tokens ok=1 reused=1")
for n, T in (("A", A), ("B", B)):
    check(T["total"][0]["malformed"] == "0", f"{n} malformed=0")
    check(T["total"][0]["stop"] == "SIGTERM", f"{n} stopped by SIGTERM")
print("PASS" if not fails else f"FAIL ({len(fails)})")
sys.exit(1 if fails else 0)
EOF
