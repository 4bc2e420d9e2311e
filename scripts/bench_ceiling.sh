#!/usr/bin/env bash
# The generator against this machine's naive ceiling, in one run (issue 24).
#
#   1. The ceiling: one thread doing a plain send() per datagram over SOCKETS connected UDP
#      sockets into a sink that only counts (scripts/bench/send_loop.c, cafe_sink.c drain).
#   2. The cafe swarm at increasing populations against a cheap cafe target in its own process
#      (scripts/bench/cafe_sink.c: Welcome and pong only, no snapshots, so the target is not
#      the limit), each population twice: "before" (TICKSWARM_IO=plain: one send() per
#      datagram, the path before batching), "after" (the default: io_uring batches) and
#      "coalesced" (io_uring, and `engine.timer_coalesce: STEP`: bots due within one step
#      are served by one wake-up, so their datagrams share a batch; STEP=default leaves
#      the key out, so the engine picks the step for the population).
#      Printed as datagrams/s and as a ratio to the ceiling, with skipped grid slots, send
#      lateness p99, send system calls per second and datagrams per call, and the generator's
#      CPU per datagram sent (`generator.cpu_ns_per_datagram_sent`: the workers' thread CPU
#      over the datagrams they sent) beside the naive loop's own (its CPU time over its
#      datagrams, measured with the ceiling just before): "x naive" is their ratio. The same
#      loop again with its sockets registered for reading in an epoll instance, as every bot's
#      socket is (`send_loop ... watched`): the cheapest loop whose sockets could receive, so
#      the floor of a generator whose bots do; "x watched" is the ratio to it. "KiB/bot": the
#      generator's highest resident memory (`generator.rss_max_bytes`) over the bots, its
#      fixed part included.
#   3. The largest population on its 60 Hz grid (0 slots skipped, lateness p99 < one tick,
#      16,667 us, every bot connected, the target received 99 % or more) for each path.
#   4. Both paths at about 0.8x the ceiling (bots = 0.8 x ceiling / 61 datagrams per bot per
#      second), with their send lateness p99.
#   5. With `perf` (and PROFILE=1, the default): where the worker's time per datagram goes at
#      0.8x, by kind (syscall entry, kernel network stack, io_uring, timers and wake-ups,
#      histograms, protocol, engine), for both paths.
#
# The target (cafe_sink) runs at idle priority (`chrt --idle 0`) in every step, the ceiling's
# and the swarm's alike: it stands in for a server on another machine, which would not take
# the generator's cores. At normal priority it is a third runnable thread on a 2-core machine
# beside the two workers, and the scheduler's time slices (milliseconds) showed up as the
# generator's send lateness (p99 7-10 ms at 0.8x with the workers themselves idle half the
# time). At idle priority it gets what the generator leaves (the kernel still delivers every
# datagram into its socket, in the sender's time). When the generator leaves it nothing (the
# per-datagram paths at high load), it falls behind, its socket drops datagrams, and sends
# that are dropped cost less than delivered ones: the "target rx" column (received / sent)
# shows it, and such a row never counts as on the grid. IDLE_TARGET=0: normal priority.
#
# Numbers vary with the machine and its load; compare the ratios within one run. Every step
# is bounded by `timeout`; loopback only. Takes about 2 minutes with the defaults.
#
# Usage: scripts/bench_ceiling.sh [POPULATIONS="1000 2000 3000 4000 5000"] [RUN=5]
#   env: SOCKETS=3000 (ceiling sockets), SINK_THREADS=1, PROFILE=1, PORT=39240, STEP=1ms,
#        TICKSWARM_BIN (a release binary already built: skips the build),
#        BEFORE_BIN (an older binary: each population also runs it, in the paths of
#        BEFORE_MODES="coalesced", one row beside the other, for an A/B in one run),
#        IDLE_TARGET=1, AT08=1 (0: no run at 0.8x the ceiling, no profile),
#        WORKERS (engine.workers; default one per core. WORKERS=1 pits one worker against the
#        one-thread ceiling loop, the target on the other core: the cost per datagram alone)
set -euo pipefail
cd "$(dirname "$0")/.."
POPS=${1:-"1000 2000 3000 4000 5000"}
RUN=${2:-5}
SOCKETS=${SOCKETS:-3000}
SINK_THREADS=${SINK_THREADS:-1}
PROFILE=${PROFILE:-1}
PORT=${PORT:-39240}
STEP=${STEP:-1ms}
MODES=${MODES:-"plain auto coalesced"}
BEFORE_BIN=${BEFORE_BIN:-}
BEFORE_MODES=${BEFORE_MODES:-coalesced}
IDLE_TARGET=${IDLE_TARGET:-1}
# The target at idle priority (see above), where chrt exists.
TARGET_PRIO=()
if [ "$IDLE_TARGET" = 1 ] && command -v chrt >/dev/null; then
    TARGET_PRIO=(chrt --idle 0)
fi
TARGET_DIR=${CARGO_TARGET_DIR:-target}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"; kill $(jobs -p) 2>/dev/null || true' EXIT

cc -O2 -pthread -o "$WORK/cafe_sink" scripts/bench/cafe_sink.c
cc -O2 -o "$WORK/send_loop" scripts/bench/send_loop.c
if [ -n "${TICKSWARM_BIN:-}" ]; then
    BIN=$TICKSWARM_BIN
else
    cargo build --release -q --bin tickswarm
    BIN="$TARGET_DIR/release/tickswarm"
fi
ulimit -n 65536 2>/dev/null || true

echo "== machine: $(nproc) cores, kernel $(uname -r), io_uring_disabled=$(cat /proc/sys/kernel/io_uring_disabled 2>/dev/null || echo n/a), load $(cut -d' ' -f1-3 /proc/loadavg)"

# 1. The ceiling: the best of three 1.5 s measurements (what the machine can do; a shared
#    machine's other load only ever lowers it). Measured again before each population, because
#    on a VM it moves a lot between minutes (321,000 to 867,000 datagrams/s on one 2-core VM in
#    one morning): each row's ratio is to the ceiling measured just before its population, and
#    the run ends with the spread of all of them, the noise every ratio carries.
: >"$WORK/ceilings.txt"
: >"$WORK/naive_cpus.txt"
measure_ceiling() { # [quiet]
    # Long enough for both loops, three times each.
    "${TARGET_PRIO[@]}" "$WORK/cafe_sink" "$PORT" 14 "$SINK_THREADS" drain >"$WORK/ceiling_sink.txt" &
    local sink=$! line
    sleep 0.3
    CEILINGS=""
    NAIVE_CPUS=""
    WATCHED_CPUS=""
    SENT=0
    # field NAME LINE: the number after " NAME=" in send_loop's line.
    field() { echo "$2" | sed -n "s/.* $1=\([0-9]*\).*/\1/p"; }
    for _ in 1 2 3; do
        line=$(timeout 20 "$WORK/send_loop" "$PORT" "$SOCKETS" 1.5)
        CEILINGS="$CEILINGS $(field rate "$line")"
        NAIVE_CPUS="$NAIVE_CPUS $(field cpu_ns_per_datagram "$line")"
        SENT=$((SENT + $(field datagrams "$line")))
        line=$(timeout 20 "$WORK/send_loop" "$PORT" "$SOCKETS" 1.5 watched)
        WATCHED_CPUS="$WATCHED_CPUS $(field cpu_ns_per_datagram "$line")"
        SENT=$((SENT + $(field datagrams "$line")))
    done
    CEILING=$(echo $CEILINGS | tr ' ' '\n' | sort -n | tail -1)
    # The naive loop's CPU per datagram: the cheapest of the three (a busy machine's other
    # load only adds to it, through cache and scheduler).
    NAIVE_CPU=$(echo $NAIVE_CPUS | tr ' ' '\n' | sort -n | head -1)
    WATCHED_CPU=$(echo $WATCHED_CPUS | tr ' ' '\n' | sort -n | head -1)
    echo "$NAIVE_CPU" >>"$WORK/naive_cpus.txt"
    wait "$sink" 2>/dev/null || true
    echo "$CEILING" >>"$WORK/ceilings.txt"
    # A target that did not keep up dropped datagrams at its socket, and a dropped send is
    # cheaper than a delivered one: a ceiling measured so is too high.
    local got
    got=$(sed -n 's/.*datagrams=\([0-9]*\).*/\1/p' "$WORK/ceiling_sink.txt")
    if [ -z "${1:-}" ]; then
        echo "== ceiling: plain send() loop over $SOCKETS connected sockets: $CEILING datagrams/s (best of:$CEILINGS), $NAIVE_CPU ns CPU per datagram (least of:$NAIVE_CPUS); its sockets registered for reading: $WATCHED_CPU ns (least of:$WATCHED_CPUS)"
        echo "== the target received ${got:-?} of $SENT datagrams sent (below all of them: it fell behind, the ceiling is too high)"
    elif [ -n "$got" ] && [ "$got" -lt "$SENT" ]; then
        echo "   (ceiling $CEILING/s: the target received $got of $SENT)"
    fi
}
measure_ceiling
echo "== workers: ${WORKERS:-one per core}; target priority: ${TARGET_PRIO[*]:-normal}${BEFORE_BIN:+; before binary: $BEFORE_BIN}"

scenario() { # bots seconds [timer step, or "default"]
    local engine=""
    [ "${3:-0s}" = default ] || engine="  timer_coalesce: ${3:-0s}"$'\n'
    [ -n "${WORKERS:-}" ] && engine="$engine  workers: $WORKERS"$'\n'
    cat >"$WORK/scenario.yaml" <<EOF
name: bench-ceiling
protocol:
  cafe:
    dialect: spec
    loss_source: sequence
target: 127.0.0.1:$PORT
population:
  stages:
    - ramp_to: $1
      over: 1s
    - hold: $(($2 - 1))s
behaviour:
  input_rate: 60
  pattern:
    random_walk:
      change_every: 500ms
  ping_interval: 1s
duration: $2s
seed: 42
${engine:+engine:
$engine}
EOF
}

# One swarm run: mode (plain|auto|coalesced, or before:MODE for BEFORE_BIN) bots seconds
# [perf]; prints one line, appends to results.
swarm() {
    local mode=$1 bots=$2 secs=$3 prof=${4:-}
    local bin=$BIN path=$mode
    if [ "${mode#before:}" != "$mode" ]; then
        bin=$BEFORE_BIN path=${mode#before:}
    fi
    local out="$WORK/run-${mode/:/-}-$bots"
    rm -rf "$out"
    local io=$path step=0s
    [ "$path" = coalesced ] && io=auto step=$STEP
    scenario "$bots" "$secs" "$step"
    "${TARGET_PRIO[@]}" "$WORK/cafe_sink" "$PORT" $((secs + 4)) "$SINK_THREADS" cafe >"$out.sink" &
    local sink=$!
    sleep 0.2
    # Under perf when profiling: the whole run, ramp included.
    local perf=()
    [ -n "$prof" ] && perf=(perf record -q -F 999 -g -o "$out.perf" --)
    TICKSWARM_IO=$io timeout $((secs + 30)) "${perf[@]}" "$bin" run "$WORK/scenario.yaml" \
        --out "$out" >"$out.log" 2>&1 || true
    kill -TERM "$sink" 2>/dev/null || true
    wait "$sink" 2>/dev/null || true
    [ -n "$prof" ] && return 0
    python3 - "$out/summary.json" "$mode" "$bots" "$CEILING" "$WORK/results.tsv" "$out.sink" "$NAIVE_CPU" "$WATCHED_CPU" <<'PY'
import json, re, sys
path, mode, bots, ceiling, results = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
naive = float(sys.argv[7]) if sys.argv[7] else None
watched = float(sys.argv[8]) if sys.argv[8] else None
try:
    m = re.search(r"datagrams=(\d+)", open(sys.argv[6]).read())
    received = int(m.group(1)) if m else None
except OSError:
    received = None
labels = {"plain": "before (send per datagram)", "auto": "after (io_uring batches)",
          "coalesced": "coalesced (+ timer step)"}
label = labels.get(mode) or "BEFORE_BIN " + labels[mode.split(":", 1)[1]].split(" (")[0]
try:
    s = json.load(open(path))
except Exception as e:
    print(f"{bots:>6} {label:<27} no summary ({e})")
    sys.exit(0)
g = s["generator"]
# What the target received of what the generator put on the wire: below 1.00 it fell behind
# and dropped datagrams at its socket (cheaper sends than into a server that keeps up).
sent = s["bandwidth"]["wire_up_packets"]
target_rx = f"{received / sent:.3f}" if received is not None and sent else "-"
# The hold: whole seconds after the ramp's second.
held = [p for p in s["intervals"] if p["t"] >= 2 and not p.get("partial")]
rate = sum(p["packets_up"] for p in held) / len(held) if held else \
    s["bandwidth"]["wire_up_packets"] / max(s["duration_s"], 1e-9)
io = g.get("send_io") or {}
p99 = g["send_lateness_us"]["p99"]
skipped = g["inputs_skipped"]
# A row counts only if the target kept up (received 99 % or more): a starved target's
# dropped datagrams cost the generator less than delivered ones.
kept_up = received is None or (sent and received / sent >= 0.99)
on_grid = skipped == 0 and p99 < 16667 and s["bots"]["connected"] == bots and kept_up
# The workers' CPU per datagram sent, beside the naive loop's (absent in a binary before it
# was measured: "-").
cpu = g.get("cpu_ns_per_datagram_sent")
cpu_col = f"{cpu:>7.0f}" if cpu is not None else f"{'-':>7}"
x_naive = f"{cpu / naive:>6.2f}x" if cpu is not None and naive else f"{'-':>7}"
x_watched = f"{cpu / watched:>6.2f}x" if cpu is not None and watched else f"{'-':>7}"
rss = g.get("rss_max_bytes")
kib_bot = f"{rss / 1024 / bots:>7.1f}" if rss else f"{'-':>7}"
print(f"{bots:>6} {label:<27} {rate:>9.0f} {rate / ceiling:>6.2f}x {skipped:>8} {p99:>9} "
      f"{'yes' if on_grid else 'NO':>7} {io.get('path', '-'):>8} {io.get('syscalls_per_s', 0):>10.0f} "
      f"{io.get('batch_mean') or 0:>6.1f} {g.get('worker_cpu_max', 0):>5.2f} "
      f"{s['bots']['connected']:>5}/{bots:<5} {target_rx:>9} {cpu_col} {x_naive} {x_watched} {kib_bot}")
with open(results, "a") as f:
    f.write(f"{mode}\t{bots}\t{rate}\t{int(on_grid)}\t{p99}\t{skipped}\t{ceiling}\t{cpu or ''}\t{naive or ''}\n")
PY
}

header() {
    printf '%6s %-27s %9s %7s %8s %9s %7s %8s %10s %6s %5s %11s %9s %7s %7s %7s %7s\n' bots path "dgram/s" "x ceil" skipped \
        "late p99" "on grid" send_io "syscalls/s" "/call" cpu connected "target rx" "ns/dgm" "x naive" "x watch" "KiB/bot"
}

# 2. Increasing populations, each path in turn.
echo "== the cafe swarm against a cheap cafe target (own process), ${RUN}s per run, ratios to the ceiling measured just before each population"
header
: >"$WORK/results.tsv"
# With BEFORE_BIN, its runs interleave with this binary's.
if [ -n "$BEFORE_BIN" ]; then
    for m in $BEFORE_MODES; do MODES="$MODES before:$m"; done
fi
# Alternating which path goes first, so a load change on a shared machine does not always
# fall on the same one.
order=$MODES
first=1
for bots in $POPS; do
    [ -z "$first" ] && measure_ceiling quiet
    first=
    printf '%6s %-27s %9s %s\n' "" "(ceiling just before)" "$CEILING" "(naive loop: $NAIVE_CPU ns CPU per datagram; watched: $WATCHED_CPU ns)"
    for mode in $order; do swarm "$mode" "$bots" "$RUN"; done
    # Rotate the order, so a load change on a shared machine does not always fall on one path.
    read -r head rest <<<"$order"
    order="$rest $head"
done

# 3. The largest population on the grid, per path.
echo "== largest population on its 60 Hz grid (0 skipped, lateness p99 < 16,667 us, target rx >= 0.99)"
python3 - "$WORK/results.tsv" $BEFORE_MODES <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
paths = [("plain", "before (send per datagram)"), ("auto", "after (io_uring batches)"),
         ("coalesced", "coalesced (+ timer step)")]
if any(r[0].startswith("before:") for r in rows):
    paths += [("before:" + m, "BEFORE_BIN " + m) for m in sys.argv[2:]]
for mode, label in paths:
    on = [(int(r[1]), float(r[2]), float(r[6])) for r in rows if r[0] == mode and r[3] == "1"]
    if on:
        bots, rate, ceiling = max(on)
        print(f"   {label:<27} {bots} bots, {rate:.0f} datagrams/s = {rate / ceiling:.2f}x the ceiling measured before it")
    else:
        print(f"   {label:<27} none of the populations tried")
PY

# 4. About 0.8x the ceiling (61 datagrams per bot per second: 60 inputs and a ping), the
#    ceiling measured again just before. AT08=0 leaves it (and the profile) out: the low
#    populations' CPU per datagram alone.
if [ "${AT08:-1}" = 1 ]; then
measure_ceiling quiet
AT=$(python3 -c "print(max(100, round(0.8 * $CEILING / 61 / 100) * 100))")
echo "== at ~0.8x the ceiling ($CEILING/s just before): $AT bots"
header
for mode in $MODES; do swarm "$mode" "$AT" "$RUN"; done
else
    PROFILE=0
fi

# 5. Where the time goes: the same runs again under perf (kept apart from the lateness
#    figures above, which perf would disturb).
if [ "$PROFILE" = 1 ] && command -v perf >/dev/null; then
    echo "== where the generator's time goes at $AT bots (perf samples of the tickswarm process, by kind)"
    for mode in $MODES; do
        swarm "$mode" "$AT" "$RUN" prof
        f="$WORK/run-${mode/:/-}-$AT.perf"
        [ -s "$f" ] || { echo "   $mode: no profile (perf refused?)"; continue; }
        timeout 60 perf report -i "$f" --no-children --sort sym -g none --stdio 2>/dev/null |
            python3 -c '
import re, sys
mode = sys.argv[1]
kinds = [
    ("syscalls (entry/exit, fd lookup)", r"entry_SYSCALL|do_syscall|syscall_exit|__x64_sys|syscall_return|exit_to_user|^fget|^fdget|__sys_sendto|^__send$|^send$|__sys_recvmmsg|recvmmsg"),
    ("io_uring", r"io_uring|io_issue|io_send|io_submit|__io_|io_req|io_cq|io_queue|io_submit_sqes|io_cqring"),
    ("kernel UDP/IP + loopback delivery", r"udp|ip_|__ip|inet_|sock_|skb|__dev_|dev_|net_rx|netif|loopback|nf_|sendmsg|recvmsg|release_sock|lock_sock|kmem_cache|slab|memcpy|copy_user|_copy_|csum|__put_user|__get_user|ipv4|raw_v4|rt_|dst_|fib_|neigh|validate_xmit|__local_bh|do_softirq|net_"),
    ("scheduler, timers, wake-ups", r"epoll|ep_|hrtimer|timerfd|clock_gettime|clock_nanosleep|vdso|read_tsc|futex|schedule|tokio::runtime::time|tokio::time|PreciseTimer|finish_task_switch|pick_next|enqueue|dequeue|try_to_wake|_raw_spin_unlock|tokio::runtime::io|mio::|update_curr|ktime"),
    ("histograms", r"hdrhistogram|Histogram|saturating_record|record_lateness"),
    ("protocol (bots)", r"tickswarm::protocol"),
    ("engine (worker, transport, counters)", r"tickswarm::engine|tickswarm::metrics|BinaryHeap|binary_heap"),
    ("tokio (tasks)", r"tokio::"),
]
totals = {k: 0.0 for k, _ in kinds}
other = 0.0
for line in sys.stdin:
    m = re.match(r"\s*([0-9.]+)%\s+\[(.)\]\s+(.*)", line)
    if not m:
        continue
    pct, sym = float(m.group(1)), m.group(3)
    for k, pat in kinds:
        if re.search(pat, sym):
            totals[k] += pct
            break
    else:
        other += pct
label = {"plain": "before", "auto": "after", "coalesced": "coalesced"}.get(mode, mode)
print(f"   {label:<18}" + "  ".join(f"{k} {v:.0f}%" for k, v in totals.items()) + f"  other {other:.0f}%")
' "$mode"
    done
fi
echo "== the ceiling through this run: $(sort -n "$WORK/ceilings.txt" | awk '{v[NR]=$1} END {printf "%d measurements, min %d, median %d, max %d datagrams/s", NR, v[1], v[int((NR+1)/2)], v[NR]}')"
echo "== the naive loop's CPU per datagram through this run: $(sort -n "$WORK/naive_cpus.txt" | awk '{v[NR]=$1} END {printf "%d measurements, min %d, median %d, max %d ns", NR, v[1], v[int((NR+1)/2)], v[NR]}')"
echo "== done (each ratio carries the ceiling's spread above; compare paths within one population)"
