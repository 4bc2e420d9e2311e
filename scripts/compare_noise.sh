#!/usr/bin/env bash
# How often does `tickswarm compare` cry wolf, and does it catch a real change?
#
#   bash scripts/compare_noise.sh [--no-build] [--runs N] [--bots B] [--duration D] [--delay-ms X]
#                                 [--limits L] [--bases K] [--keep DIR | --reuse DIR]
#                                 [--ping-interval D]
#
# --bases K: each run is held against K other runs at once (`compare --base ... NEW`, the
# next K runs round the list) instead of pairwise: N comparisons of identical runs, and each
# delayed run against K undelayed ones.
#
# --ping-interval D: the bots' RTT probes this often instead of quickstart's 1 s (more RTT
# samples a run: a percentile far in the tail is set by more than a handful of them).
#
# --limits: the --max-regress limits, comma-separated (default: those docs/ci/github-actions.yml
# ships). --keep DIR keeps the run folders in DIR; --reuse DIR compares the folders a --keep
# left there again without running anything (to judge another method or limit on the same runs).
#
# 1. N identical runs of scenarios/quickstart.yaml against one `tickswarm serve cafe`, compared
#    pairwise (N·(N-1)/2 pairs) with the shipped limits: every failure is a false positive.
# 2. N runs against the independent cafe server (tests/peers/cafe-impaired-server/cafe_impaired_server.py) with no pong
#    delay, and N with every pong delayed by X ms (2 by default: RTT rises by exactly X):
#    compared base i against delayed i, every pass is a missed regression.
# Prints both counts and each comparison's verdict line. Loopback only; every run is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/verify_common.sh

BUILD=1 RUNS=10 BOTS=50 DURATION=8s DELAY_MS=2 KEEP= REUSE= BASES=0 PING=
LIMITS="rtt.p50=+1ms,loss.downstream=+0.5pp"
while [ $# -gt 0 ]; do
    case "$1" in
        --limits) LIMITS=$2; shift ;;
        --bases) BASES=$2; shift ;;
        --ping-interval) PING=$2; shift ;;
        --keep) KEEP=$2; shift ;;
        --reuse) REUSE=$2; BUILD=0; shift ;;
        --no-build) BUILD=0 ;;
        --runs) RUNS=$2; shift ;;
        --bots) BOTS=$2; shift ;;
        --duration) DURATION=$2; shift ;;
        --delay-ms) DELAY_MS=$2; shift ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
# TICKSWARM_BIN: another build to run (a debug build for --reuse, say).
BIN=${TICKSWARM_BIN:-${CARGO_TARGET_DIR:-target}/release/tickswarm}
build_release "$BUILD" "$BIN"
SECS=$(duration_seconds "$DURATION")
PEER_PID=
if [ -n "$REUSE" ]; then
    WORK=$REUSE
    trap 'true' EXIT
elif [ -n "$KEEP" ]; then
    WORK=$KEEP
    mkdir -p "$WORK"
    trap 'stop_peer "$PEER_PID"' EXIT
else
    WORK=$(mktemp -d)
    trap 'stop_peer "$PEER_PID"; rm -rf "$WORK"' EXIT
fi

SCENARIO=scenarios/quickstart.yaml
if [ -n "$PING" ]; then
    SCENARIO=$WORK/quickstart-ping-$PING.yaml
    sed "s/^  ping_interval: 1s /  ping_interval: $PING /" scenarios/quickstart.yaml >"$SCENARIO"
    grep -q "ping_interval: $PING " "$SCENARIO" || { echo "cannot set ping_interval in $SCENARIO" >&2; exit 2; }
fi
run_swarm() { # PORT OUT
    timeout $((SECS + 60)) "$BIN" run "$SCENARIO" --target "127.0.0.1:$1" \
        --bots "$BOTS" --duration "$DURATION" --out "$2" -q >/dev/null 2>&1 || true
}
compare() { # BASE NEW -> prints the verdict line, returns compare's exit code
    "$BIN" compare "$1" "$2" --max-regress "$LIMITS" 2>&1 | grep -E "REGRESSED|within|inconclusive|rtt.p99" | head -1
    return "${PIPESTATUS[0]}"
}
compare_bases() { # PREFIX I NEW -> NEW against the K runs PREFIX-(I+1).. round the list
    local args=() k j
    for k in $(seq 1 "$BASES"); do
        j=$(( (($2 - 1 + k) % RUNS) + 1 ))
        args+=(--base "$1-$j")
    done
    "$BIN" compare "${args[@]}" "$3" --max-regress "$LIMITS" 2>&1 | grep -E "REGRESSED|within|inconclusive|rtt.p99" | head -1
    return "${PIPESTATUS[0]}"
}
if [ "$BASES" -ge "$RUNS" ]; then
    echo "--bases must be below --runs (a run is never its own base)" >&2
    exit 2
fi

echo "== $RUNS identical runs against tickswarm serve cafe ($BOTS bots, $DURATION each), limits $LIMITS"
if [ -z "$REUSE" ]; then
    start_peer "$WORK/serve.out" "$WORK/serve.err" $(( (SECS + 10) * RUNS * 2 + 60 )) "$BIN" serve cafe --port 0
    PORT=$(peer_port "$WORK/serve.out" "$PEER_PID")
    for i in $(seq 1 "$RUNS"); do run_swarm "$PORT" "$WORK/same-$i"; done
    stop_peer "$PEER_PID"; PEER_PID=
fi
false_pos=0 pairs=0
for i in $(seq 1 "$RUNS"); do
    if [ "$BASES" -gt 0 ]; then
        pairs=$((pairs + 1))
        line=$(compare_bases "$WORK/same" "$i" "$WORK/same-$i") && rc=0 || rc=$?
        [ "$rc" = 0 ] || false_pos=$((false_pos + 1))
        echo "  same-$i vs $BASES others: exit $rc  $line"
        continue
    fi
    for j in $(seq $((i + 1)) "$RUNS"); do
        pairs=$((pairs + 1))
        line=$(compare "$WORK/same-$i" "$WORK/same-$j") && rc=0 || rc=$?
        [ "$rc" = 0 ] || false_pos=$((false_pos + 1))
        echo "  same-$i vs same-$j: exit $rc  $line"
    done
done

echo "== $RUNS runs without and $RUNS with every pong delayed ${DELAY_MS} ms (independent cafe server)"
caught=0
for i in $(seq 1 "$RUNS"); do
    for delay in 0 "$DELAY_MS"; do
        [ -z "$REUSE" ] || continue
        start_peer "$WORK/imp.out" "$WORK/imp.err" $((SECS + 60)) \
            python3 tests/peers/cafe-impaired-server/cafe_impaired_server.py --port 0 --pong-delay-ms "$delay" --max-seconds $((SECS + 30))
        PORT=$(peer_port "$WORK/imp.out" "$PEER_PID")
        run_swarm "$PORT" "$WORK/delay$delay-$i"
        stop_peer "$PEER_PID"; PEER_PID=
    done
done
for i in $(seq 1 "$RUNS"); do
    if [ "$BASES" -gt 0 ]; then
        line=$(compare_bases "$WORK/delay0" "$i" "$WORK/delay$DELAY_MS-$i") && rc=0 || rc=$?
    else
        line=$(compare "$WORK/delay0-$i" "$WORK/delay$DELAY_MS-$i") && rc=0 || rc=$?
    fi
    [ "$rc" = 1 ] && caught=$((caught + 1))
    echo "  delayed-$i against $([ "$BASES" -gt 0 ] && echo "$BASES bases" || echo "base-$i"): exit $rc  $line"
done

echo "compare_noise: identical runs failed $false_pos of $pairs $([ "$BASES" -gt 0 ] && echo "comparisons against $BASES bases" || echo pairs); ${DELAY_MS} ms caught $caught of $RUNS"
