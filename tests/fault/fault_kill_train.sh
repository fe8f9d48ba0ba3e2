#!/usr/bin/env bash
# fault_kill_train.sh — a rank killed with SIGKILL in the middle of training, at a random step and on a
# random rank, repeated: the job ends non-zero in bounded time; the checkpoint `latest` names loads;
# resuming from it reproduces the uninterrupted run's loss and gradient norm bit for bit, and the
# same final checkpoint files. MODE lora: the same with LoRA adapters on a frozen base (--lora-rank 4):
# the checkpoint holds the adapters alone, the resume restores the base from --seed.
# usage: fault_kill_train.sh FSDP_TRAIN MPIRUN_SH WORKDIR FAULT_LIB [MODE]
BIN=$1 MPIRUN=$2 WORK=$3 FAULT_LIB=$4 MODE=${5:-full}
source "$(dirname "$0")/lib.sh"
NP=2
STEPS=2000 # the LR schedule's length; runs end earlier with --stop-at
REF=120    # the reference run's last step
EVERY=5
BOUND=15 # seconds from the kill to the end of the job
REPEATS=${FSDP_FAULT_REPEATS:-3}
seed=${FSDP_FAULT_SEED:-$$}
RANDOM=$seed
echo "random seed $seed (FSDP_FAULT_SEED=$seed reproduces the kill points)"
RUN=("${TINY[@]}" --steps $STEPS --checkpoint-every $EVERY)
EXPORT=()
if [ "$MODE" = lora ]; then
    RUN+=(--lora-rank 4)
    EXPORT=(--merge)
    REPEATS=${FSDP_FAULT_REPEATS:-1}
fi

"$MPIRUN" $NP "$BIN" "${RUN[@]}" --stop-at $REF --checkpoint-dir ck_ref --metrics ref.jsonl >ref.log 2>&1 ||
    bad "reference run: $(tail -3 ref.log)"

for rep in $(seq 1 "$REPEATS"); do
    at=$((7 + RANDOM % 40)) victim=$((RANDOM % NP)) name=kill$rep
    rm -f pid.*
    timeout 300 "$MPIRUN" $NP ./launch.sh "$BIN" "${RUN[@]}" --checkpoint-dir "ck_$name" --metrics "$name.jsonl" >"$name.log" 2>&1 &
    job=$!
    i=0
    while ! grep -q "\"step\": $at," "$name.jsonl" 2>/dev/null && [ $i -lt 6000 ]; do sleep 0.01; i=$((i + 1)); done
    pid=$(cat "pid.$victim" 2>/dev/null)
    [ -n "$pid" ] && kill -KILL "$pid" && ok || bad "$name: could not kill rank $victim"
    t0=$(date +%s.%N)
    wait $job
    rc=$?
    el=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
    last=$(grep -o '"step": [0-9]*' "$name.jsonl" | tail -1 | grep -o '[0-9]*$')
    latest=$(cat "ck_$name/latest" 2>/dev/null)
    echo "$name: rank $victim killed after step ${at} (metrics reached ${last:-none}); job exit $rc after ${el}s; latest $latest"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && ok || bad "$name: the job exited $rc after a rank was killed (124: it hung)"
    python3 -c "import sys; sys.exit(0 if $el <= $BOUND else 1)" && ok || bad "$name: the job took ${el}s to end, more than $BOUND s"
    [ -n "$latest" ] && [ -f "ck_$name/$latest/manifest.json" ] && ok || bad "$name: latest '$latest' names no checkpoint"
    loads "ck_$name" "${EXPORT[@]}" && ok || bad "$name: the latest checkpoint does not load: $(tail -2 "ck_$name.export.log")"
    from=$((10#${latest#step_}))
    [ "$from" -lt $REF ] || { bad "$name: latest $latest is past the reference's $REF steps"; continue; }
    # The killed run's own steps were already the reference's.
    same_losses ref.jsonl "$name.jsonl" 1 "$from" && ok || bad "$name: steps 1..$from differ from the reference"
    "$MPIRUN" $NP "$BIN" "${RUN[@]}" --stop-at $REF --checkpoint-dir "ck_$name" --metrics "$name.resume.jsonl" --resume \
        >"$name.resume.log" 2>&1 || bad "$name: resume: $(tail -3 "$name.resume.log")"
    grep -q "resumed from ck_$name/$latest" "$name.resume.log" && ok || bad "$name: did not resume from $latest"
    same_losses ref.jsonl "$name.resume.jsonl" $((from + 1)) $REF && ok || bad "$name: resumed steps $((from + 1))..$REF differ from the reference"
    final=$(printf 'step_%06d' $REF)
    for r in $(seq 0 $((NP - 1))); do
        f=$(printf 'rank_%05d.bin' "$r")
        cmp -s "ck_ref/$final/$f" "ck_$name/$final/$f" && ok || bad "$name: final $f differs from the reference's"
    done
done
finish
