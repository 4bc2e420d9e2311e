#!/usr/bin/env bash
# Coverage-guided fuzzing of every protocol's decoders, bot and reference server
# (fuzz/fuzz_targets/<protocol>.rs; what an input drives is in fuzz/src/lib.rs), and of the
# capture reader with every protocol's decode-only reader behind it (`capture`).
#
# Engine: libFuzzer through the libfuzzer-sys crate, on the STABLE toolchain. cargo-fuzz needs
# nightly (which this machine cannot fetch) only to pass the sanitizer-coverage flags; they are
# passed here by hand in RUSTFLAGS. `--target` keeps them off build scripts (which are not
# linked with libFuzzer).
#
# Seeds: real bot<->server exchanges of every protocol, written by tests/fuzz_seeds.rs (for
# `capture`, each exchange as a pcapng file).
# A crash leaves its input in $OUT/<protocol>/crashes/; turn it into a regression test in
# tests/ (the harness's modes make that a few lines: see fuzz/src/lib.rs).
#
# Usage: scripts/fuzz.sh [SECONDS per target, default 60] [protocol ...]
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(cafe rtype city zergcity darkages capture)
OUT=${FUZZ_OUT:-target/fuzz-run}
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR_FUZZ:-$PWD/target/fuzz}
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"

echo "fuzz: building ${TARGETS[*]} (release, $TRIPLE, libFuzzer via libfuzzer-sys, stable toolchain)"
BINS=()
for t in "${TARGETS[@]}"; do BINS+=(--bin "$t"); done
(cd fuzz && cargo build --release --target "$TRIPLE" "${BINS[@]}")

echo "fuzz: writing seed corpora (tests/fuzz_seeds.rs)"
rm -rf "$OUT/seeds"
(unset RUSTFLAGS CARGO_TARGET_DIR; FUZZ_SEEDS_DIR="$PWD/$OUT/seeds" \
    cargo test --quiet --test fuzz_seeds >/dev/null)

failed=0
for t in "${TARGETS[@]}"; do
    mkdir -p "$OUT/$t/corpus" "$OUT/$t/crashes"
    log="$OUT/$t/fuzz.log"
    set +e
    "$CARGO_TARGET_DIR/$TRIPLE/release/$t" "$OUT/$t/corpus" "$OUT/seeds/$t" \
        -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -artifact_prefix="$OUT/$t/crashes/" -print_final_stats=1 >"$log" 2>&1
    rc=$?
    set -e
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    if [ $rc -ne 0 ]; then
        echo "fuzz: $t FAILED (exit $rc) after ${runs:-?} runs; input in $OUT/$t/crashes/"
        grep -E "panicked|ERROR|SUMMARY" "$log" | head -5
        failed=1
    else
        echo "fuzz: $t ok: ${runs:-?} runs in ${SECS}s, ${cov:-cov ?}"
    fi
done
exit $failed
