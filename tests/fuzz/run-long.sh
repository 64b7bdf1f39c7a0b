#!/usr/bin/env bash
# The long fuzz run: every target run for EXECS executions (default 10,000,000) or at most
# MAX_SECONDS (default 43,200: 12 hours), over its committed corpus plus what earlier long
# runs found (<dir>/long/corpus/<target>, <dir> being target/fuzz, or target/fuzz-asan with
# AddressSanitizer). Prints a table: target, executions, time, result. Crashing inputs go to
# <dir>/long/artifacts/<target>/.
#
#   bash tests/fuzz/run-long.sh [EXECS] [MAX_SECONDS]
#
# SANITIZER=none (the default) builds the targets without a sanitizer, as the smoke run does:
# Hearth's crates have no unsafe code, so what the fuzzer looks for is a panic, an overflow
# (the targets build with overflow checks and debug assertions), a target's own assertion, a
# hang or runaway memory, at two to three times the speed. SANITIZER=address adds
# AddressSanitizer, for the unsafe code in dependencies. TARGETS="a b" runs only those.
# JOBS=2 runs two targets at once (one per core). Exits non-zero when any target failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
execs="${1:-10000000}"
max_seconds="${2:-43200}"
jobs="${JOBS:-1}"

# shellcheck source=../tools/toolchain.sh
source tests/tools/toolchain.sh
# shellcheck source=../tools/fuzz.sh
source tests/tools/fuzz.sh
hearth_install_cargo_fuzz

sanitizer="${SANITIZER:-none}"
case "$sanitizer" in
    none) export HEARTH_FUZZ_TARGET_DIR="$PWD/target/fuzz" ;;
    address) export HEARTH_FUZZ_TARGET_DIR="$PWD/target/fuzz-asan" ;;
    *) echo "run-long: SANITIZER must be none or address" >&2; exit 2 ;;
esac
hearth_fuzz build --sanitizer "$sanitizer"
bin="$(_hearth_fuzz_bin_dir "$HEARTH_FUZZ_TARGET_DIR")"
work="$HEARTH_FUZZ_TARGET_DIR/long"
mkdir -p "$work"

run_one() {
    local target="$1" log="$work/$1.log" start end result
    mkdir -p "$work/corpus/$target" "$work/artifacts/$target"
    start="$(date +%s)"
    if "$bin/$target" "$work/corpus/$target" "tests/fuzz/corpus/$target" -runs="$execs" \
        -max_total_time="$max_seconds" -timeout=30 -rss_limit_mb=2048 \
        -artifact_prefix="$work/artifacts/$target/" -print_final_stats=1 </dev/null >"$log" 2>&1; then
        result="no crash"
    else
        result="FAILED (see $log)"
    fi
    end="$(date +%s)"
    local done_runs
    done_runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
    [ -n "$done_runs" ] || done_runs="$(grep -o '^#[0-9]*' "$log" | tail -n 1 | tr -d '#')"
    if [ "$result" = "no crash" ] && [ "${done_runs:-0}" -lt "$execs" ]; then
        result="no crash (stopped at the time limit)"
    fi
    printf '%s\t%s\t%s\t%s\n' "$target" "${done_runs:-?}" "$((end - start))" "$result" >"$work/$target.row"
}

targets="${TARGETS:-$(hearth_fuzz list)}"
running=0
for target in $targets; do
    run_one "$target" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait

status=0
printf '\n%-16s %14s %10s  %s\n' target executions seconds result
for target in $targets; do
    IFS=$'\t' read -r name runs seconds result <"$work/$target.row"
    printf '%-16s %14s %10s  %s\n' "$name" "$runs" "$seconds" "$result"
    case "$result" in FAILED*) status=1 ;; esac
done
printf '\n(%s executions per target asked, sanitizer: %s, %s)\n' "$execs" "$sanitizer" "$(date -u +%Y-%m-%d)"
exit "$status"
