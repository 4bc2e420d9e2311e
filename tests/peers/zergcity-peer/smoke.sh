#!/usr/bin/env bash
# Smoke test of the independent ZergCity peer (tests/peers/zergcity-peer/zc_peer.c): builds it, runs
# its server and its client against each other on 127.0.0.1 and checks the RESULT and TRUTH
# lines. Every process runs under `timeout`; servers listen on ephemeral ports. Exit 0 = pass.
#   tests/peers/zergcity-peer/smoke.sh          all scenarios (about 12 s, run in parallel) + fuzz
#   tests/peers/zergcity-peer/smoke.sh --quick  only the basic 3 s server/client run
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$here"
work="$(mktemp -d /tmp/zc_smoke.XXXXXX)"
trap 'rm -rf "$work"' EXIT
quick=0
[ "${1:-}" = "--quick" ] && quick=1

# ZC_SMOKE_CFLAGS="-O1 -g -fsanitize=address,undefined" runs everything under the sanitizers
cflags="-O2 -g -std=c99 -Wall -Wextra -Werror ${ZC_SMOKE_CFLAGS:-}"
rm -f "$src/zc_peer"
make -s -C "$src" CFLAGS="$cflags" zc_peer >"$work/build.log" 2>&1 || {
  cat "$work/build.log"; echo "SMOKE FAIL build"; exit 1; }
peer="$src/zc_peer"

# start_server NAME ARGS... : starts a server, waits for its LISTENING line, sets PORT_<NAME>
start_server() {
  local name="$1"; shift
  timeout 40 "$peer" server 0 "$@" >"$work/$name.server" 2>&1 &
  echo $! >"$work/$name.pid"
  for _ in $(seq 1 100); do
    grep -q '^LISTENING' "$work/$name.server" 2>/dev/null && break
    sleep 0.05
  done
  local port
  port="$(sed -n 's/^LISTENING port=\([0-9]*\).*/\1/p' "$work/$name.server")"
  [ -n "$port" ] || { echo "SMOKE FAIL $name: server did not start"; cat "$work/$name.server"; return 1; }
  echo "$port" >"$work/$name.port"
}
port_of() { cat "$work/$1.port"; }
# wait for a server to exit (by --duration or after SIGTERM), at most ~15 s
wait_server() {
  local pid; pid="$(cat "$work/$1.pid")"
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  wait "$pid" 2>/dev/null
}
client() { # NAME TAG PORT ARGS...
  local name="$1" tag="$2" port="$3"; shift 3
  timeout 30 "$peer" client 127.0.0.1 "$port" "$@" >"$work/$name.$tag.client" 2>&1
  echo $? >"$work/$name.$tag.rc"
}
kv() { # FILE LINE-PREFIX KEY -> value of KEY= on the first line starting with PREFIX
  grep -m1 "^$2" "$1" | tr ' ' '\n' | sed -n "s/^$3=//p"
}
fails=0
check() { # DESCRIPTION CONDITION...
  local d="$1"; shift
  if "$@"; then echo "  ok   $d"; else echo "  FAIL $d"; fails=$((fails + 1)); fi
}
eq() { [ "$1" = "$2" ]; }
ge() { [ -n "$1" ] && [ "$1" -ge "$2" ]; }
near() { [ -n "$1" ] && [ -n "$2" ] && [ $(( $1 > $2 ? $1 - $2 : $2 - $1 )) -le "$3" ]; }

# ---------------------------------------------------------------- scenario: basic (3 s)
basic() {
  start_server basic --duration 20 || return
  client basic c "$(port_of basic)" --seconds 3
  kill -TERM "$(cat "$work/basic.pid")" 2>/dev/null # also checks the signal path
  wait_server basic
}
# ---------------------------------------------------------------- scenario: drops + pong delay
drops() {
  start_server drops --duration 5 --drop-every 5 --pong-delay-ms 30 --start-tick 5000000000 || return
  client drops c "$(port_of drops)" --seconds 3
  wait_server drops
}
# ---------------------------------------------------------------- scenario: five players
full() {
  start_server full --duration 5 || return
  local p; p="$(port_of full)"
  for i in 1 2 3 4 5; do client full "c$i" "$p" --seconds 2.5 --name "bot$i" & done
  wait
  wait_server full
}
# ---------------------------------------------------------------- scenario: invalid input
invalid() {
  start_server invalid --duration 5 || return
  local p; p="$(port_of invalid)"
  client invalid once "$p" --seconds 2 --send-invalid 1 --name once &
  client invalid kick "$p" --seconds 2 --send-invalid 2 --name kick &
  client invalid ver "$p" --seconds 1 --proto-version 2 --name ver &
  client invalid rate "$p" --seconds 2 --inputs 64 --input-interval-ms 5 --name rate &
  wait
  wait_server invalid
}
# ---------------------------------------------------------------- scenario: acks paused
paused() {
  start_server paused --duration 11 || return
  local p; p="$(port_of paused)"
  client paused short "$p" --seconds 4 --pause-acks-ms 1500 --name short &
  client paused long "$p" --seconds 9 --pause-acks-ms 6000 --name long &
  wait
  wait_server paused
}

fuzz() {
  timeout 60 "$peer" fuzz 20000 1 >"$work/fuzz.client" 2>&1
  echo $? >"$work/fuzz.rc"
}

if [ $quick -eq 1 ]; then
  basic
else
  basic & drops & full & invalid & paused & fuzz &
  wait
fi

echo "basic:"
B="$work/basic.c.client"; BS="$work/basic.server"
check "client exit 0" eq "$(cat "$work/basic.c.rc")" 0
check "RESULT ok" grep -q '^RESULT ok' "$B"
check "TRUTH client=0 line" grep -q '^TRUTH client=0 ' "$BS"
check "TRUTH total line" grep -q '^TRUTH total ' "$BS"
check "client applied deltas (~60)" ge "$(kv "$B" RESULT deltas)" 40
check "server generated what the client applied (+-2)" near "$(kv "$BS" 'TRUTH client=0' deltas_generated)" "$(kv "$B" RESULT deltas)" 2
check "inputs acked = 5" eq "$(kv "$BS" 'TRUTH client=0' inputs_acked)" 5
check "compressed deltas seen" ge "$(kv "$B" RESULT deltas_compressed)" 1
check "server saw no invalid message" eq "$(kv "$BS" 'TRUTH total' invalid)" 0

if [ $quick -eq 0 ]; then
  echo "drops (--drop-every 5 --pong-delay-ms 30, ticks above 2^32):"
  D="$work/drops.c.client"; DS="$work/drops.server"
  check "RESULT ok" grep -q '^RESULT ok' "$D"
  dropped="$(kv "$DS" 'TRUTH client=0' deltas_dropped)"
  gen="$(kv "$DS" 'TRUTH client=0' deltas_generated)"
  check "server dropped 1 in 5 ($dropped of $gen)" near "$dropped" "$((gen / 5))" 0
  check "client seq gaps = truth (+-1)" near "$(kv "$D" RESULT seq_lost)" "$dropped" 1
  check "client tick gaps = truth (+-1)" near "$(kv "$D" RESULT tick_gaps)" "$dropped" 1
  check "rtt >= pong delay" ge "$(kv "$D" RESULT rtt_min_us)" 30000
  check "state tick above 2^32" ge "$(kv "$D" RESULT state_tick)" 5000000000

  echo "full (5 players, 4 slots):"
  ok=0; refused=0
  for i in 1 2 3 4 5; do
    grep -q '^RESULT ok' "$work/full.c$i.client" && ok=$((ok + 1))
    grep -q '^RESULT fail server_full' "$work/full.c$i.client" && refused=$((refused + 1))
  done
  check "4 clients ok ($ok)" eq "$ok" 4
  check "1 client refused server_full ($refused)" eq "$refused" 1
  check "TRUTH total joined=4" eq "$(kv "$work/full.server" 'TRUTH total' joined)" 4
  check "TRUTH total refused_full=1" eq "$(kv "$work/full.server" 'TRUTH total' refused_full)" 1

  echo "invalid (one probe of each reason; twice = kicked; wrong protocol version):"
  IS="$work/invalid.server"
  check "client with probes still RESULT ok" grep -q '^RESULT ok' "$work/invalid.once.client"
  check "bad input answered with result 5" eq "$(kv "$work/invalid.once.client" RESULT probe_result)" 5
  for r in bad_magic bad_version too_large bad_length unknown_type bad_decompress bad_payload unexpected_type bad_ack; do
    check "server counted inv_$r=1" eq "$(kv "$IS" 'TRUTH client=[0-9]* slot=[0-9-]* hello=[0-9-]* name=once' "inv_$r")" 1
  done
  check "twice the probes: client told to go" grep -q '^RESULT fail server_disconnected' "$work/invalid.kick.client"
  check "twice the probes: server kicked=1" eq "$(kv "$IS" 'TRUTH client=[0-9]* slot=[0-9-]* hello=[0-9-]* name=kick' kicked)" 1
  check "wrong version: RESULT fail version_mismatch" grep -q '^RESULT fail version_mismatch' "$work/invalid.ver.client"
  check "64 inputs in 320 ms: 4 refused with result 6" eq "$(kv "$IS" 'TRUTH client=[0-9]* slot=[0-9-]* hello=[0-9-]* name=rate' inputs_rate_limited)" 4

  echo "paused (acks withheld 1.5 s -> one multi-tick delta; 6 s -> new FullSnapshot):"
  check "short pause RESULT ok" grep -q '^RESULT ok' "$work/paused.short.client"
  check "short pause: deltas ignored while paused" ge "$(kv "$work/paused.short.client" RESULT paused_ignored)" 20
  check "short pause: one FullSnapshot" eq "$(kv "$work/paused.short.client" RESULT full)" 1
  check "long pause RESULT ok" grep -q '^RESULT ok' "$work/paused.long.client"
  check "long pause: FullSnapshot resent" ge "$(kv "$work/paused.long.client" RESULT full)" 2

  echo "fuzz (20000 mutated messages into both receive paths):"
  check "FUZZ ok, exit 0" eq "$(cat "$work/fuzz.rc")" 0
fi
echo "all:"
check "no sanitizer report or crash" eval '! grep -qE "runtime error|Sanitizer|Segmentation|Aborted" "$work"/*.server "$work"/*.client'

if [ $fails -ne 0 ]; then
  echo "--- outputs"
  for f in "$work"/*.server "$work"/*.client; do echo "== $(basename "$f")"; cut -c1-400 "$f"; done
  echo "SMOKE FAIL ($fails checks)"
  exit 1
fi
echo "SMOKE OK"
