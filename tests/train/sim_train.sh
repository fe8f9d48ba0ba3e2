#!/usr/bin/env bash
# sim_train.sh — end-to-end training on the simulated device (src/core/device_sim.c) against the CPU:
# fsdp-train with FSDP_TEST_DEVICE=sim:SEED (and sim-nohost:SEED, where checkpoints, evaluation's
# gathers and the final sample go through the engine's copies) trains GPT-2 (mixed precision, f32-compute)
# and Llama (GQA, untied, fp32) at 1 and 2 ranks with 2 micro-batches, evaluation and a checkpoint
# every 5 steps: every metric line but the timings, every checkpoint shard file and the sampled text
# equal the CPU run's. The models' kernels run on the host (host_kernels): the engine's own work
# (casts, zero-fills, reductions' hand-off, AdamW, clipping, frees) is queued and reordered by the
# scheduler, and the host catches the compute stream up before it reads or writes a view.
# usage: sim_train.sh FSDP_TRAIN MPIRUN_SH WORKDIR
set -uo pipefail
BIN=$1 MPIRUN=$2 WORK=$3
SRC=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
source "$SRC/tests/lib_common.sh"
export OMP_NUM_THREADS=1
"$BIN" prepare --text "$SRC"/src/core/*.c --out data --val-fraction 0.1 >prep.log 2>&1 || { bad "prepare: $(cat prep.log)"; finish; }
COMMON=(--data data --layers 2 --seq-len 32 --batch 8 --micro-batches 2 --steps 10 --eval-every 5
        --checkpoint-every 5 --threads 1 --lr 3e-3 --warmup 3 --sample-tokens 16 --temperature 0
        --peak-gflops -1)
GPT=(--model gpt2 --width 64 --heads 4 --precision mixed --mixed-compute f32)
LLAMA=(--model llama --width 64 --heads 4 --kv-heads 2 --tie-embeddings 0 --intermediate 96 --precision fp32)
run() { # DIR NP DEVICE ARGS...
    local dir=$1 np=$2 dev=$3
    shift 3
    rm -rf "$dir" && mkdir -p "$dir"
    if [ "$np" = 1 ]; then
        FSDP_TEST_DEVICE=$dev "$BIN" "$@" --checkpoint-dir "$dir/ck" --metrics "$dir/m.jsonl" >"$dir/log" 2>&1
    else
        FSDP_TEST_DEVICE=$dev "$MPIRUN" "$np" "$BIN" "$@" --checkpoint-dir "$dir/ck" --metrics "$dir/m.jsonl" >"$dir/log" 2>&1
    fi
}
# the metric lines without the timings and memory figures
metrics() {
    /usr/bin/python3 -c '
import json, sys
keep = ("step", "loss", "lr", "grad_norm", "val_loss", "skipped", "tokens")
for l in open(sys.argv[1]):
    j = json.loads(l)
    print(json.dumps({k: j[k] for k in sorted(j) if k in keep}))' "$1"
}
sample() { sed -n '/^sample/,/^done:/p' "$1/log" | grep -v '^done:'; }
for m in GPT LLAMA; do
    declare -n shape=$m
    for np in 1 2; do
        ref="$m-np$np-cpu"
        run "$ref" "$np" "" "${COMMON[@]}" "${shape[@]}" || { bad "$ref: $(tail -3 "$ref/log")"; continue; }
        for dev in sim:1 sim:7 sim-nohost:3; do
            d="$m-np$np-${dev/:/}"
            run "$d" "$np" "$dev" "${COMMON[@]}" "${shape[@]}" || { bad "$d: $(tail -3 "$d/log")"; continue; }
            [ "$(metrics "$ref/m.jsonl")" = "$(metrics "$d/m.jsonl")" ] && [ "$(wc -l <"$d/m.jsonl")" -ge 12 ] && ok ||
                bad "$d: metrics differ from the CPU's: $(diff <(metrics "$ref/m.jsonl") <(metrics "$d/m.jsonl") | head -3)"
            n=0
            for f in "$ref"/ck/step_*/rank_*.bin; do
                g="$d/ck/${f#"$ref"/ck/}"
                cmp -s "$f" "$g" && n=$((n + 1)) || bad "$d: ${f#"$ref"/} differs"
            done
            [ "$n" -ge $((2 * np)) ] && ok || bad "$d: only $n shard files compared"
            [ -n "$(sample "$ref")" ] && [ "$(sample "$ref")" = "$(sample "$d")" ] && ok || bad "$d: the sample differs"
        done
    done
done
finish
