#!/usr/bin/env bash
# run_fuzz.sh — one fixed-time libFuzzer run of a target from its seed corpus; fails (non-zero) on a
# crash, leak, sanitizer report, timeout or out-of-memory, and prints one summary line with the
# executions, executions/s, new corpus units and findings.
# usage: run_fuzz.sh FUZZER SEED_DIR WORK_DIR SECONDS
set -uo pipefail
bin=$1 seeds=$2 work=$3 secs=$4
name=$(basename "$bin")
rm -rf "$work" && mkdir -p "$work/corpus" "$work/artifacts" || exit 1
# New inputs go to WORK_DIR/corpus (the repository's seeds stay as they are); findings to artifacts/.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:halt_on_error=1"
"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" "$work/corpus" "$seeds" >"$work/log" 2>&1
rc=$?
getstat() { sed -n "s/^stat::$1: *\([0-9]*\).*/\1/p" "$work/log" | tail -1; }
execs=$(getstat number_of_executed_units) rate=$(getstat average_exec_per_sec) added=$(getstat new_units_added)
findings=$(find "$work/artifacts" -type f | wc -l)
echo "fuzz $name: ${execs:-?} executions in ${secs}s (${rate:-?}/s), ${added:-?} new corpus units, $findings findings, exit $rc"
if [ "$rc" -ne 0 ] || [ "$findings" -ne 0 ] ||
    grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|property violated' "$work/log"; then
    echo "FAIL: $name found a problem; the input is in $work/artifacts/ (add it to $seeds once fixed)" >&2
    tail -60 "$work/log" >&2
    exit 1
fi
