#!/usr/bin/env bash
# plan_flow.sh — the memory plan holds in every phase of the default flow (issue 28 item 7): a run with
# the default model (4 layers, width 128, mixed precision, --max-inflight 2), evaluation every 2 steps,
# a checkpoint every 2 steps, the sample after the last step (its forwards run before the report), then
# a --resume of it; both --report files have master, optim, grad_shard, param_full and main_grad
# predicted == measured to the byte (tests/train/check_report.py --exact-only: activation, an estimate
# of training, also holds the sample's key/value cache). An evaluation or sampling forward has
# no backward, so no unit stays gathered for one (before the fix param_full measured 25-61% above the
# plan whenever evaluation ran). On N ranks, under LAZY and (N > 1) EAGER main_grad.
# usage: plan_flow.sh FSDP_TRAIN_BINARY MPIRUN_SH WORKDIR NRANKS
set -uo pipefail
BIN=$1 MPIRUN=$2 WORK=$3 NP=$4
SRC=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fails=0 pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
export OMP_NUM_THREADS=1
run() { if [ "$NP" = 1 ]; then "$BIN" "$@"; else "$MPIRUN" "$NP" "$BIN" "$@"; fi; }

"$BIN" prepare --text "$SRC"/src/*/*.c --out data --val-fraction 0.2 >prep.log 2>&1 || bad "prepare: $(cat prep.log)"
# The default model and schedule; a small batch so the test stays short (batch 4 = 1, 2 or 4 ranks x
# whole sequences). --mixed-compute f32: the GEMM path is the same in every process.
FLOW=(--data data --batch 4 --seq-len 32 --eval-every 2 --eval-batches 2 --checkpoint-every 2
      --sample-tokens 12 --threads 1 --mixed-compute f32)
policies=(lazy)
[ "$NP" != 1 ] && policies+=(eager)
for mg in "${policies[@]}"; do
    run "${FLOW[@]}" --main-grad "$mg" --steps 4 --checkpoint-dir "ck_$mg" --report "first_$mg.json" >"first_$mg.log" 2>&1 ||
        { bad "$mg: first run: $(tail -5 "first_$mg.log")"; continue; }
    grep -q "val loss" "first_$mg.log" && grep -q "^sample (" "first_$mg.log" && grep -q "saved ck_$mg/step_000004" "first_$mg.log" &&
        ok || bad "$mg: the first run did not evaluate, sample and checkpoint"
    python3 "$SRC/tests/train/check_report.py" "first_$mg.json" --world "$NP" --exact-only && ok || bad "$mg: first run's report"
    run "${FLOW[@]}" --main-grad "$mg" --steps 6 --resume --checkpoint-dir "ck_$mg" --report "resumed_$mg.json" >"resumed_$mg.log" 2>&1 ||
        { bad "$mg: resumed run: $(tail -5 "resumed_$mg.log")"; continue; }
    grep -q "resumed from" "resumed_$mg.log" && grep -q "val loss" "resumed_$mg.log" && ok || bad "$mg: the resume did not resume and evaluate"
    python3 "$SRC/tests/train/check_report.py" "resumed_$mg.json" --world "$NP" --exact-only && ok || bad "$mg: resumed run's report"
done
echo "plan_flow ($NP ranks): $pass passed, $fails failed"
[ $fails = 0 ]
