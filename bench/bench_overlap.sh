#!/usr/bin/env bash
# bench_overlap.sh — what communication costs a training step on one host: GPT-2-124M shape (T 64,
# B 4) at world 1 (every core) against world 2 on the same cores (one thread per rank), with overlap
# off (--max-inflight 0: every collective completes in its hook) and on (the default, 2), fp32 and
# mixed, side by side in one run; the shared-memory transport against Open MPI's collectives
# (FSDP_COMM_SHM=0) at world 2. tokens/s is the mean over the steps after the first (the first
# records the hook order); exposed communication is the time hooks spent waiting for collectives
# inside those steps (bench/trace_comm.py on --trace). Prints a markdown table; logs in OUT_DIR.
# usage: bench/bench_overlap.sh [BUILD_DIR (build)] [OUT_DIR (BUILD_DIR/bench_overlap)]
#   QUICK=1: a tiny model (checks the script; figures meaningless)
#   WORLDS="2 4": the multi-rank world sizes (default 2; 4 ranks on 2 cores oversubscribe them)
#   PRECISIONS="fp32 mixed" (default both)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
OUT=${2:-$BUILD/bench_overlap}
TRAIN=$BUILD/fsdp-train
MPIRUN=$SRC/tests/mpirun.sh
[ -x "$TRAIN" ] || { echo "bench_overlap: build first ($TRAIN missing)" >&2; exit 2; }
mkdir -p "$OUT"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if [ "${QUICK:-0}" = 1 ]; then
    M=(--layers 2 --width 64 --heads 4 --vocab 512 --seq-len 32 --max-seq-len 32 --batch 4)
    STEPS=3
else
    M=(--layers 12 --width 768 --heads 12 --vocab 50257 --seq-len 64 --max-seq-len 1024 --batch 4)
    STEPS=${STEPS:-5}
fi
"$TRAIN" prepare --text "$SRC"/src/*/*.c "$SRC"/src/*/*.h --out "$OUT/data" --val-fraction 0.05 >"$OUT/prepare.log" 2>&1
echo "# bench_overlap: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo
echo "| precision | world | transport | max-inflight | tokens/s | vs world 1 | exposed comm / step | step s |"
echo "|---|---|---|---|---|---|---|---|"
declare -A W1
run() { # run NAME PRECISION WORLD TRANSPORT INFLIGHT
    local name=$1 p=$2 w=$3 tr=$4 inf=$5
    local args=("${M[@]}" --data "$OUT/data" --precision "$p" --steps $STEPS --warmup 1 --eval-every 0 --sample-tokens 0
                --max-inflight "$inf" --checkpoint-dir "$OUT/ck_$name" --checkpoint-every 0 --metrics "$OUT/$name.jsonl"
                --trace "$OUT/$name.trace.json")
    rm -f "$OUT/$name.jsonl"
    if [ "$w" = 1 ]; then
        "$TRAIN" "${args[@]}" >"$OUT/$name.log" 2>&1
    elif [ "$tr" = mpi ]; then
        FSDP_COMM_SHM=0 "$MPIRUN" "$w" "$TRAIN" "${args[@]}" >"$OUT/$name.log" 2>&1
    else
        "$MPIRUN" "$w" "$TRAIN" "${args[@]}" >"$OUT/$name.log" 2>&1
    fi
    rm -rf "$OUT/ck_$name"
    local tps
    tps=$(python3 -c "
import json, sys
v = [json.loads(l) for l in open('$OUT/$name.jsonl') if '\"tokens_per_s\"' in l]
v = [x['tokens_per_s'] for x in v[1:]] or [x['tokens_per_s'] for x in v]
print(f'{sum(v) / len(v):.1f}')")
    local comm
    comm=$(python3 "$SRC/bench/trace_comm.py" "$OUT/$name.trace.json" | awk -F'|' 'NR > 2 { s += $4; c += $5; n++ } END { if (n) printf "%.3f %.3f", s / n, c / n }')
    local st=${comm% *} cm=${comm#* }
    [ "$w" = 1 ] && W1[$p]=$tps
    local ratio
    ratio=$(python3 -c "print(f'{$tps / ${W1[$p]}:.2f}')")
    local share
    share=$(python3 -c "print(f'{$cm:.3f} s ({100 * $cm / $st:.1f}%)' if $st > 0 else 'n/a')")
    echo "| $p | $w | $tr | $inf | $tps | $ratio | $share | $st |"
}
for p in ${PRECISIONS:-fp32 mixed}; do
    run w1_$p $p 1 self 2
    for w in ${WORLDS:-2}; do
        run w${w}_${p}_sync $p "$w" shm 0
        run w${w}_${p}_overlap $p "$w" shm 2
        run w${w}_${p}_mpi $p "$w" mpi 2
    done
done
echo
echo "Commands: build/fsdp-train ${M[*]} --data DATA --precision P --steps $STEPS --warmup 1 --eval-every 0 --sample-tokens 0 --max-inflight K --trace T.json --metrics M.jsonl; world 2 under tests/mpirun.sh 2 (FSDP_COMM_SHM=0 for Open MPI's collectives); exposed communication: bench/trace_comm.py T.json"
