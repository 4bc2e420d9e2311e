#!/usr/bin/env bash
# ENet bots per machine: City (spec dialect, over ENet) at increasing populations against
# `tickswarm serve city --sink` (a separate process: admits sessions, answers pings, drops
# inputs, simulates and sends no world), so the generator is what is measured. For each
# population: whether the swarm stayed on its 60 Hz input grid (0 skipped slots and send
# lateness p99 under the 16.7 ms period), the generator's CPU per bot, its resident memory per
# bot, and the sink's own CPU (near 100 % of a core: the sink, not the swarm, was the limit).
#
# CPU per bot reads true only on the grid: off it the workers had all the CPU they could get,
# and that divided by more bots only looks cheaper. Run it on a quiet machine.
#
# Bounded: each run is RUN_S seconds (ramp over its first third), killed at 90 s; loopback
# only. Stops after the first population off the grid unless KEEP_GOING=1.
#
# The send path: IO_MODES="plain auto" runs each population once per TICKSWARM_IO value,
# interleaved (plain: one send() per datagram; auto: the worker's io_uring batch), so a loaded
# machine weighs on both alike; the columns `syscalls/s` and `dgrams/call` are
# generator.send_io's. Default: one run per population with the environment's TICKSWARM_IO.
#
# CPU per datagram: `generator.cpu_ns_per_datagram_sent` (the workers' thread CPU over the
# datagrams their sockets sent, ENet's acks included), beside the naive loop's
# (scripts/bench/send_loop.c: one thread's send() round-robin over 3,000 sockets into a C
# sink, measured once before the populations): "x naive" is their ratio; "x watched" is the
# ratio to the same loop with its sockets registered for reading, as a bot's are (the floor
# of a generator whose bots receive; see scripts/bench/send_loop.c).
#
# STEP=0s (or another duration) sets engine.timer_coalesce; default: the engine's default.
#
# Usage: scripts/bench_enet.sh [BOTS_PER_SOCKET=50] [POPULATIONS="1000 2000 4000 6000 8000 10000"]
#        RUN_S=15 SINK_INSTANCES=2 IO_MODES="plain auto" IDLE_SINK=1 scripts/bench_enet.sh ...
set -euo pipefail
cd "$(dirname "$0")/.."
PER_SOCKET=${1:-50}
POPS=${2:-"1000 2000 4000 6000 8000 10000"}
RUN_S=${RUN_S:-15}
IO_MODES=${IO_MODES:-${TICKSWARM_IO:-auto}}
INSTANCES=${SINK_INSTANCES:-}
# TICKSWARM_BIN=path runs another build (e.g. the one before a change) instead of this tree's.
if [ -z "${TICKSWARM_BIN:-}" ]; then cargo build --release -q; fi
BIN=${TICKSWARM_BIN:-${CARGO_TARGET_DIR:-target}/release/tickswarm}
# SERVE_BIN=path: the build that serves (the sink needs one that has `serve city --sink`).
SERVE_BIN=${SERVE_BIN:-$BIN}
WORK=$(mktemp -d)
SINK=
cleanup() {
    if [ -n "$SINK" ]; then kill "$SINK" 2>/dev/null || true; wait "$SINK" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
PORT=17900
MAX=$(echo "$POPS" | tr ' ' '\n' | sort -n | tail -1)
# An ENet host takes at most 4095 peers (ENet's peer id is 12 bits): by default one sink
# instance (a thread and a socket of its own) per 2,500 bots of the largest population.
INSTANCES=${INSTANCES:-$(((MAX + 2499) / 2500))}

cat >"$WORK/city-bench.yaml" <<EOF
name: city-bench
protocol:
  city:
    dialect: spec
target: 127.0.0.1:$PORT
population:
  stages:
    - ramp_to: 1000
      over: $((RUN_S / 3))s
    - hold: $((RUN_S - RUN_S / 3))s
behaviour:
  input_rate: 60
  pattern:
    random_walk:
      change_every: 500ms
  ping_interval: 500ms
  handshake_timeout: 10s
engine:
  bots_per_socket: $PER_SOCKET
${STEP:+  timer_coalesce: $STEP}
duration: ${RUN_S}s
seed: 42
thresholds: []
EOF

# The sink: INSTANCES threads on consecutive ports; bots are spread over them.
# IDLE_SINK=1 runs it at idle priority (`chrt --idle 0`), as scripts/bench_ceiling.sh runs its
# target: a stand-in for a server on another machine, so that the sink's time slices on these
# same cores do not show up as the swarm's lateness and skipped slots (default 0: normal
# priority, as the figures in docs/measurements/enet-bots.md were taken).
SINK_PRIO=()
if [ "${IDLE_SINK:-0}" = 1 ] && command -v chrt >/dev/null; then SINK_PRIO=(chrt --idle 0); fi
"${SINK_PRIO[@]}" "$SERVE_BIN" serve city --sink --port "$PORT" --instances "$INSTANCES" \
    --max-players $(((MAX + INSTANCES - 1) / INSTANCES + 100)) --client-timeout 5s \
    --duration 30m >"$WORK/sink.log" 2>&1 &
SINK=$!
sleep 1
TARGETS="127.0.0.1:$PORT-$((PORT + INSTANCES - 1))"
ticks() { awk '{print $14 + $15}' "/proc/$SINK/stat"; }
HZ=$(getconf CLK_TCK)

# The naive loop's CPU per datagram, the least of three 1.5 s measurements, its sink (a C
# drain) at idle priority where chrt exists.
cc -O2 -pthread -o "$WORK/cafe_sink" scripts/bench/cafe_sink.c
cc -O2 -o "$WORK/send_loop" scripts/bench/send_loop.c
DRAIN_PRIO=()
if command -v chrt >/dev/null; then DRAIN_PRIO=(chrt --idle 0); fi
"${DRAIN_PRIO[@]}" "$WORK/cafe_sink" $((PORT + 200)) 14 1 drain >/dev/null &
drain=$!
sleep 0.3
# least_cpu [watched]: the least CPU per datagram of three runs of the loop.
least_cpu() {
    for _ in 1 2 3; do timeout 20 "$WORK/send_loop" $((PORT + 200)) 3000 1.5 "$@"; done |
        sed -n 's/.*cpu_ns_per_datagram=\([0-9]*\).*/\1/p' | sort -n | head -1
}
NAIVE_CPU=$(least_cpu)
WATCHED_CPU=$(least_cpu watched)
wait "$drain" 2>/dev/null || true
echo "naive send() loop over 3,000 sockets: ${NAIVE_CPU:-?} ns CPU per datagram; its sockets registered for reading: ${WATCHED_CPU:-?} ns"

echo "City (spec, ENet) against serve city --sink ($INSTANCES instances), $PER_SOCKET bots per socket, ${RUN_S} s runs, $(nproc) cores"
printf '%7s %6s %10s %8s %10s %10s %12s %12s %9s %11s %11s %9s %7s %7s %7s  %s\n' bots io connected skipped "late p99" "late max" "CPU µs/bot/s" "marginal" "KiB/bot" "syscalls/s" "dgrams/call" "sink CPU" "ns/dgm" "x naive" "x watch" "on 60 Hz grid"
for n in $POPS; do
  fail=0
  for io in $IO_MODES; do
    before=$(ticks)
    start=$(date +%s.%N)
    TICKSWARM_IO=$io timeout 90 "$BIN" run "$WORK/city-bench.yaml" --target "$TARGETS" --bots "$n" \
        --out "$WORK/run-$n-$io" >/dev/null 2>&1 || true
    end=$(date +%s.%N)
    after=$(ticks)
    sink_cpu=$(python3 -c "print(f'{($after - $before) / $HZ / ($end - $start) * 100:.0f} %')")
    python3 - "$WORK/run-$n-$io/summary.json" "$n" "$sink_cpu" "$RUN_S" "$WORK/verdict" "$WORK/previous-$io" "$io" "${NAIVE_CPU:-}" "${WATCHED_CPU:-}" <<'PY'
import json, sys
path, n, sink_cpu, run_s, verdict_file, prev_file, io = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7]
naive = float(sys.argv[8]) if sys.argv[8] else None
watched = float(sys.argv[9]) if sys.argv[9] else None
try:
    s = json.load(open(path))
except OSError:
    print(f"{n:>7} {io:>6} {'(no summary.json: the run failed)':>40}")
    open(verdict_file, "w").write("FAIL")
    sys.exit()
g = s["generator"]
late = g["send_lateness_us"]
conn = s["bots"]["connected"]
# CPU per bot: the workers' CPU in the seconds after the ramp, over the bots then in play.
hold = [p for p in s["intervals"][run_s // 3 + 1:] if p.get("generator")]
cpu_s = sum(sum(c or 0 for c in p["generator"]["worker_cpu"]) for p in hold)
cores = cpu_s / max(len(hold), 1)
cpu_per_bot = cores / max(conn, 1) * 1e6
# Marginal: the CPU the bots added since the previous population, per added bot (the workers'
# fixed cost, such as the per-second recorders, drops out).
try:
    pc, pn = (float(x) for x in open(prev_file).read().split())
    marginal = f"{(cores - pc) / max(conn - pn, 1) * 1e6:12.1f}"
except (OSError, ValueError):
    marginal = f"{'-':>12}"
open(prev_file, "w").write(f"{cores} {conn}")
rss = g.get("rss_max_bytes") or 0
p99, mx = late.get("p99") or 0, late.get("max") or 0
on_grid = conn == n and g["inputs_skipped"] == 0 and p99 < 16_667
verdict = "yes" if on_grid else "NO"
sio = g.get("send_io") or {}
calls_s = f"{sio.get('syscalls_per_s', 0):11.0f}" if sio else f"{'-':>11}"
per_call = f"{sio.get('batch_mean') or 0:11.2f}" if sio else f"{'-':>11}"
cpu = g.get("cpu_ns_per_datagram_sent")
cpu_col = f"{cpu:>7.0f}" if cpu is not None else f"{'-':>7}"
x_naive = f"{cpu / naive:>6.2f}x" if cpu is not None and naive else f"{'-':>7}"
x_watched = f"{cpu / watched:>6.2f}x" if cpu is not None and watched else f"{'-':>7}"
print(f"{n:>7} {io:>6} {conn:>10} {g['inputs_skipped']:>8} {p99 / 1000:>8.1f}ms {mx / 1000:>8.1f}ms {cpu_per_bot:>12.1f} {marginal} {rss / 1024 / max(n, 1):>9.1f} {calls_s} {per_call} {sink_cpu:>9} {cpu_col} {x_naive} {x_watched}  {verdict}")
open(verdict_file, "w").write("OK" if on_grid else "FAIL")
PY
    if [ "$(cat "$WORK/verdict")" = FAIL ]; then fail=1; fi
  done
  if [ "$fail" = 1 ] && [ "${KEEP_GOING:-0}" != 1 ]; then
      echo "stopped: $n bots are off the grid (KEEP_GOING=1 runs the rest)"
      break
  fi
done
