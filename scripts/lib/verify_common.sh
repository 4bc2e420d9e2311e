# Sourced by the scripts that run tickswarm against a server process (scripts/verify_external_*.sh,
# scripts/check_container.sh, scripts/check_ci_examples.sh): run-length parsing, the release
# build, starting a peer under timeout(1), finding the port it reports, stopping it so it
# prints its ground truth, a free port. The checks themselves, and how each judges its
# figures, stay in their own scripts.

# duration_seconds D: whole seconds of a run length (15, 15s, 2m, 1500ms, 1h), rounded up,
# for the time bounds around every step. Exits 2 on a malformed length.
duration_seconds() {
    python3 -c '
import math, re, sys
m = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|m|h)?\s*", sys.argv[1])
if not m: sys.exit("bad --duration: " + sys.argv[1])
mult = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
print(math.ceil(float(m.group(1)) * mult))' "$1" || exit 2
}

# build_release BUILD BIN: with BUILD=1, build tickswarm (release) first, so compile time is
# not spent while a peer runs; either way BIN must exist. Exits 2 otherwise.
build_release() {
    if [ "$1" = 1 ]; then
        echo "== building tickswarm (release)"
        timeout 1800 cargo build --release -q || { echo "build failed" >&2; exit 2; }
    fi
    [ -x "$2" ] || { echo "$2 missing (build it, or drop --no-build)" >&2; exit 2; }
}

# start_peer OUT_FILE ERR_FILE MAX_SECONDS COMMAND...: run COMMAND in the background under
# timeout(1) (TERM after MAX_SECONDS, KILL 5 s later), its stdout and stderr to the files.
# Sets PEER_PID to the timeout(1) process, which forwards SIGTERM to the peer.
start_peer() {
    local out=$1 err=$2 max=$3
    shift 3
    timeout --signal=TERM --kill-after=5 "$max" "$@" >"$out" 2>"$err" &
    PEER_PID=$!
}

# stop_peer PID: SIGTERM, then up to 10 s for the peer to print its totals and exit, then
# SIGKILL. Safe to call twice, and with an empty PID.
stop_peer() {
    local pid=$1
    [ -n "$pid" ] || return 0
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

# peer_port OUT_FILE PID: print the UDP port the peer announced on stdout, as "listening on
# 127.0.0.1:PORT" (the Python servers, `tickswarm serve`) or "LISTENING port=PORT" (the C
# peers). Waits up to 10 s, less if the peer exits; returns 1 when no port came.
peer_port() {
    local port
    for _ in $(seq 1 100); do
        port=$(sed -n -e 's/.*listening on [^ ]*:\([0-9][0-9]*\).*/\1/p' \
            -e 's/^LISTENING port=\([0-9][0-9]*\).*/\1/p' "$1" 2>/dev/null | head -n1)
        [ -n "$port" ] && { echo "$port"; return 0; }
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
    done
    return 1
}

# free_udp_port: print a UDP port on 127.0.0.1 that nothing listens on (just now).
free_udp_port() {
    python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
