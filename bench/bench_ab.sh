#!/usr/bin/env bash
# bench_ab.sh — is a change free? Times two fsdp-train binaries (say, main's and yours) side by side on
# the same jobs, alternating old and new round by round so both see the same machine load, and prints
# each job's median step time (steps after the first two, pooled over the rounds) and the ratio
# new / old. Jobs: GPT-2 shapes at 1 and 2 ranks, fp32 and mixed precision, one of them
# optimizer-bound (wide, few tokens: AdamW, clipping and the reductions weigh most there).
#
# usage: bench/bench_ab.sh OLD_FSDP_TRAIN NEW_FSDP_TRAIN [ROUNDS (default 3)] [WORKDIR]
# Prints the CPU first (lscpu model name and SIMD flags): state it beside any figure quoted.
set -uo pipefail
OLD=$(readlink -f "$1") NEW=$(readlink -f "$2")
ROUNDS=${3:-3}
WORK=${4:-$(mktemp -d)}
SRC=$(cd "$(dirname "$0")/.." && pwd)
MPIRUN="$SRC/tests/mpirun.sh"
mkdir -p "$WORK" && cd "$WORK" || exit 2
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores," \
    "flags: $(grep -o -w 'avx2\|avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
"$NEW" prepare --text "$SRC"/src/*/*.c --out data --val-fraction 0.05 >prep.log 2>&1 || { cat prep.log; exit 2; }

# one BIN NP OUT ARGS...: one run; its --metrics lines into OUT
one() {
    local bin=$1 np=$2 out=$3
    shift 3
    rm -rf ck
    if [ "$np" = 1 ]; then
        "$bin" "$@" --checkpoint-dir ck --metrics "$out" >run.log 2>&1
    else
        "$MPIRUN" "$np" "$bin" "$@" --checkpoint-dir ck --metrics "$out" >run.log 2>&1
    fi || { echo "FAIL: $bin $*: $(tail -3 run.log)"; exit 1; }
}
# median of the step_s values of steps > 2 in the given metrics files, in ms
median_ms() {
    cat "$@" | python3 -c '
import json, sys, statistics
v = [json.loads(l)["step_s"] for l in sys.stdin if l.startswith("{\"step\"") and json.loads(l)["step"] > 2]
print("%.2f" % (1000 * statistics.median(v)))'
}

COMMON=(--data data --steps 12 --eval-every 0 --sample-tokens 0 --lr 1e-3 --warmup 2 --model gpt2)
job() { # NAME NP ARGS...
    local name=$1 np=$2
    shift 2
    rm -f "$name".old.* "$name".new.*
    for r in $(seq "$ROUNDS"); do
        one "$OLD" "$np" "$name.old.$r" "$@"
        one "$NEW" "$np" "$name.new.$r" "$@"
    done
    local o n
    o=$(median_ms "$name".old.*) n=$(median_ms "$name".new.*)
    printf '%-28s old %8s ms  new %8s ms  new/old %s\n' "$name" "$o" "$n" \
        "$(python3 -c "print('%.3f' % ($n / $o))")"
}
SMALL=(--layers 4 --width 256 --heads 4 --seq-len 64 --batch 8)
WIDE=(--layers 2 --width 768 --heads 12 --seq-len 16 --batch 2)
job gpt-small-fp32-np1 1 "${COMMON[@]}" "${SMALL[@]}" --precision fp32
job gpt-small-mixed-np1 1 "${COMMON[@]}" "${SMALL[@]}" --precision mixed
job gpt-small-mixed-np2 2 "${COMMON[@]}" "${SMALL[@]}" --precision mixed --threads 1
job gpt-wide-optimizer-np1 1 "${COMMON[@]}" "${WIDE[@]}" --precision mixed
job gpt-wide-optimizer-np2 2 "${COMMON[@]}" "${WIDE[@]}" --precision fp32 --threads 1
