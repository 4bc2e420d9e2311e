#!/usr/bin/env bash
# Soak test (not in CI): one long-lived reference server (`tickswarm serve`) under reconnect
# storms — swarm after swarm of bots that all connect at once, play briefly and all leave
# (ramp down), back to back for the whole duration. Prints the resident set (VmRSS, and the
# peak VmHWM) and open file descriptors of the server at the start and the end, and of the
# swarm process in the first and the last storm, so a leak in either shows as growth.
# Loopback only; bounded by DURATION.
#
# Usage: scripts/soak.sh [DURATION=30m] [PROTOCOL=city] [BOTS per storm=100] [STORM=6s]
#   (a City server instance takes 100 players: more bots per storm are refused ServerFull)
#   BIN=path/to/tickswarm to skip the release build.
#   PORT_RANGE="40000 40499" (root only) runs the soak in a network namespace of its own
#   (loopback only) whose ephemeral ports are that range, so a storm's bots often get the
#   ports of the previous storm's bots: the address-reuse case ("A reused client port" in
#   docs/security/reference-servers.md) every storm or two instead of every few dozen.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${PORT_RANGE:-}" ] && [ -z "${SOAK_IN_NETNS:-}" ]; then
    exec unshare -n env SOAK_IN_NETNS=1 bash -c \
        'ip link set lo up && sysctl -q -w net.ipv4.ip_local_port_range="$PORT_RANGE" && exec bash "$0" "$@"' \
        "$0" "$@"
fi

DURATION=${1:-30m}
PROTO=${2:-city}
BOTS=${3:-100}
STORM=${4:-6s}
secs() { # 30m, 90s, 2h -> seconds
    local v=$1
    case $v in
        *h) echo $(( ${v%h} * 3600 )) ;;
        *m) echo $(( ${v%m} * 60 )) ;;
        *s) echo "${v%s}" ;;
        *) echo "$v" ;;
    esac
}
TOTAL=$(secs "$DURATION")
STORM_S=$(secs "$STORM")

if [ -z "${BIN:-}" ]; then
    cargo build --release -q
    BIN=target/release/tickswarm
fi
WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && { wait "$SERVER_PID" 2>/dev/null || true; }
    rm -rf "$WORK"
}
trap cleanup EXIT

# RSS, peak RSS and open fds of a process.
stats() {
    local pid=$1
    local rss hwm fds
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo "?")
    hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo "?")
    fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
    echo "VmRSS ${rss} kB, VmHWM ${hwm} kB, open fds ${fds}"
}

"$BIN" serve "$PROTO" --port 0 >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVER_PID=$!
for _ in $(seq 50); do
    ADDR=$(grep -o '127\.0\.0\.1:[0-9]*' "$WORK/serve.out" | head -1 || true)
    [ -n "$ADDR" ] && break
    sleep 0.1
done
[ -n "$ADDR" ] || { echo "soak: the server did not start"; cat "$WORK/serve.err"; exit 1; }

# Ramp up in 0.5 s, hold, ramp down in 0.5 s: every storm connects and disconnects BOTS bots.
HOLD=$(( STORM_S > 2 ? STORM_S - 1 : 1 ))
cat >"$WORK/storm.yaml" <<YAML
name: soak-storm
protocol:
  $PROTO: {}
population:
  stages:
    - ramp_to: $BOTS
      over: 500ms
    - hold: ${HOLD}s
    - ramp_to: 0
      over: 500ms
behaviour:
  handshake_timeout: 5s
YAML

echo "soak: $PROTO server at $ADDR (pid $SERVER_PID), storms of $BOTS bots every ~${STORM_S}s for $DURATION"
echo "soak: server at start:  $(stats "$SERVER_PID")"
start=$(date +%s)
storms=0; failed=0; connected=0; planned=0
first_swarm=; last_swarm=
while [ $(( $(date +%s) - start )) -lt "$TOTAL" ]; do
    out="$WORK/run-$storms"
    "$BIN" run "$WORK/storm.yaml" --target "$ADDR" --out "$out" >/dev/null 2>"$WORK/run.err" &
    pid=$!
    # Sample the swarm in the middle of its storm.
    sleep $(( STORM_S / 2 ))
    sample=$(stats "$pid")
    code=0; wait "$pid" || code=$?
    if [ -z "$first_swarm" ]; then
        first_swarm=$sample
        # Warm-up (tables and buffers sized by the first storm) is over: growth from here on
        # is what a leak would look like.
        echo "soak: server after the first storm: $(stats "$SERVER_PID")"
    fi
    last_swarm=$sample
    if [ -f "$out/summary.json" ]; then
        read -r c p < <(python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s['bots']['connected'], s['bots']['planned'])" "$out/summary.json")
        connected=$((connected + c)); planned=$((planned + p))
    fi
    if [ "$code" -ne 0 ]; then
        failed=$((failed + 1))
        # Say why: the checks that failed (or the exit code when no summary was written).
        why=$(python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(', '.join(f\"{t['metric']} observed {t['observed']}\" for t in s['thresholds'] if not t['ok']))" "$out/summary.json" 2>/dev/null || echo "exit $code, no summary")
        echo "soak: storm $storms failed: $why"
    fi
    # The server's memory along the way, so growth shows as a curve, not two points.
    if [ $(( storms % 50 )) -eq 49 ]; then
        echo "soak: server after $((storms + 1)) storms: $(stats "$SERVER_PID")"
    fi
    rm -rf "$out"
    storms=$((storms + 1))
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "soak: the server died"; cat "$WORK/serve.err"; exit 1; }
done
echo "soak: server at end:    $(stats "$SERVER_PID")"
# Stop the server as Ctrl-C does, so it prints its counters (e.g. enet_sessions_superseded:
# sessions dropped because a new bot reused their address and ENet peer id).
kill -INT "$SERVER_PID" 2>/dev/null || true
for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=
echo "soak: server's last word: $(grep '^served' "$WORK/serve.out" || echo '(none)')"
echo "soak: swarm, first storm: $first_swarm"
echo "soak: swarm, last storm:  $last_swarm"
echo "soak: $storms storms, $connected of $planned bots connected, $failed storms with a failing verdict"
