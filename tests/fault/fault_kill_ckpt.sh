#!/usr/bin/env bash
# fault_kill_ckpt.sh — a rank killed (SIGKILL, placed exactly by the fault_inject.so preload) in the
# middle of writing the step-10 checkpoint, at each stage of the commit protocol: inside a shard file
# (rank 1), inside the manifest (rank 0), just before the temporary folder is renamed (rank 0), and
# while `latest` is being replaced (rank 0). Every time: the job ends non-zero in bounded time,
# `latest` still names step 5, which loads, and resuming reproduces the uninterrupted run bit for bit.
# Killed while `latest` is replaced, step_000010 is complete but never committed: the resumed run sets
# it aside as .uncommitted_step_000010 when it saves step 10 again (the case checks that too).
# usage: fault_kill_ckpt.sh FSDP_TRAIN MPIRUN_SH WORKDIR FAULT_LIB
BIN=$1 MPIRUN=$2 WORK=$3 FAULT_LIB=$4
source "$(dirname "$0")/lib.sh"
NP=2
BOUND=15
RUN=("${TINY[@]}" --steps 15 --checkpoint-every 5)
"$MPIRUN" $NP "$BIN" "${RUN[@]}" --checkpoint-dir ck_ref --metrics ref.jsonl >ref.log 2>&1 || bad "reference run: $(tail -3 ref.log)"

# kill_case NAME RANK MATCH SETTING: FSDP_FAULT_MATCH=ck_NAME/MATCH and SETTING (VAR=value) on RANK.
kill_case() {
    local name=$1 rank=$2 match=$3 setting=$4 uncommitted=${5:-0} t0=$SECONDS
    env FAULT_PRELOAD_RANK="$rank" FSDP_FAULT_MATCH="ck_$name/$match" "$setting" \
        timeout 300 "$MPIRUN" $NP ./launch.sh "$BIN" "${RUN[@]}" --checkpoint-dir "ck_$name" --metrics "$name.jsonl" >"$name.log" 2>&1
    local rc=$? el=$((SECONDS - t0))
    echo "$name: exit $rc after ${el}s; latest $(cat "ck_$name/latest" 2>/dev/null); $(grep -o 'fault_inject: .*' "$name.log" | head -1)"
    grep -q "fault_inject: .* killed" "$name.log" && ok || bad "$name: the fault was not injected"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && ok || bad "$name: exit $rc after a rank was killed (124: it hung)"
    [ $el -le $BOUND ] && ok || bad "$name: the job took ${el}s, more than $BOUND s"
    [ "$(cat "ck_$name/latest" 2>/dev/null)" = step_000005 ] && ok || bad "$name: latest is '$(cat "ck_$name/latest" 2>/dev/null)', not step_000005"
    loads "ck_$name" && ok || bad "$name: step 5 does not load: $(tail -2 "ck_$name.export.log")"
    "$MPIRUN" $NP "$BIN" "${RUN[@]}" --checkpoint-dir "ck_$name" --metrics "$name.resume.jsonl" --resume \
        >"$name.resume.log" 2>&1 || bad "$name: resume: $(grep -m1 error "$name.resume.log")"
    grep -q "resumed from ck_$name/step_000005" "$name.resume.log" && ok || bad "$name: did not resume from step 5"
    same_losses ref.jsonl "$name.resume.jsonl" 6 15 && ok || bad "$name: resumed steps 6..15 differ from the reference"
    cmp -s ck_ref/step_000015/rank_00001.bin "ck_$name/step_000015/rank_00001.bin" && ok || bad "$name: final shard differs"
    if [ "$uncommitted" = 1 ]; then
        [ -f "ck_$name/.uncommitted_step_000010/manifest.json" ] && ok || bad "$name: the interrupted step 10 was not set aside"
        [ "$(cat "ck_$name/latest")" = step_000015 ] && ok || bad "$name: latest is not step_000015 after the resume"
    fi
}
kill_case shard 1 .tmp_step_000010/rank_00001.bin FSDP_FAULT_KILL_AT_WRITE=3
kill_case manifest 0 .tmp_step_000010/manifest.json FSDP_FAULT_KILL_AT_WRITE=1
kill_case rename 0 step_000010 FSDP_FAULT_KILL_AT_RENAME=1 # the folder's rename (its target)
kill_case latest 0 latest FSDP_FAULT_KILL_AT_WRITE=2 1 # step 5's `latest` is write 1
finish
