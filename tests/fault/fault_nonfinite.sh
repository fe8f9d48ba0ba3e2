#!/usr/bin/env bash
# fault_nonfinite.sh BIN MPIRUN WORK FAULT_LIB — a non-finite loss or grad norm (issue 28 item 3): the
# run stops at that step with an error naming the step and which value, on 1 and 2 ranks (no hang),
# before the update and before anything is saved (no checkpoint of that step, no --export-final); with
# --skip-nonfinite the update is skipped and counted, the run finishes, and --metrics stays strict JSON
# (null for the NaN, never 0). The NaN comes from the FSDP_TEST_NONFINITE switch (docs/ENV.md).
BIN=$1 MPIRUN=$2 WORK=$3 FAULT_LIB=$4
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

# strict FILE: every line parses as JSON with NaN/Infinity refused (Python accepts them by default).
strict() {
    python3 -c '
import json, sys
def no(c): raise ValueError("non-standard constant " + c)
for l in open(sys.argv[1]): json.loads(l, parse_constant=no)' "$1"
}

# stops NP WHICH STEP NAME: the run fails (exit 1) with the named error; steps before STEP were saved,
# STEP and later not, no export; the metrics hold only the steps before STEP and are strict JSON.
stops() {
    local np=$1 which=$2 at=$3 name=$4 rc
    FSDP_TEST_NONFINITE=$at:$which timeout 120 "$MPIRUN" "$np" "$BIN" train "${TINY[@]}" --steps 5 \
        --checkpoint-every 1 --checkpoint-dir "ck_$name" --metrics "m_$name.jsonl" \
        --export-final "ex_$name" >"$name.log" 2>&1
    rc=$?
    local text="the ${which/norm/grad norm} is NaN"
    if [ "$rc" != 1 ]; then
        bad "$name: exit status $rc, expected 1: $(tail -3 "$name.log")"
    elif [ "$(grep -c "step $at: $text (non-finite)" "$name.log")" -lt 1 ]; then
        bad "$name: no 'step $at: $text' error: $(grep -i error "$name.log" | head -3)"
    elif grep -q -E 'timed out|MPI_ABORT' "$name.log"; then
        bad "$name: a rank hung or aborted: $(grep -E 'timed|ABORT' "$name.log" | head -2)"
    elif [ ! -d "ck_$name/step_$(printf %06d $((at - 1)))" ]; then
        bad "$name: step $((at - 1)) was not saved: $(ls "ck_$name")"
    elif ls -d "ck_$name"/step_* | grep -q -E "step_0*($at|[$((at + 1))-9])$"; then
        bad "$name: a checkpoint of step $at or later exists: $(ls "ck_$name")"
    elif [ -e "ex_$name/model.safetensors" ]; then
        bad "$name: the model was exported"
    elif [ "$(wc -l <"m_$name.jsonl")" != $((at - 1)) ] || ! strict "m_$name.jsonl"; then
        bad "$name: metrics: $(cat "m_$name.jsonl" | cut -c 1-80)"
    else
        ok
    fi
}
stops 1 loss 3 loss1
stops 2 norm 2 norm2
stops 2 loss 4 loss2

# --skip-nonfinite: step 2's update is skipped and counted, the run finishes and exports (2 ranks; 1
# rank run directly, its step lines not a terminal's).
FSDP_TEST_NONFINITE=2:norm timeout 120 "$MPIRUN" 2 "$BIN" train "${TINY[@]}" --steps 4 --skip-nonfinite \
    --checkpoint-dir ck_skip --metrics m_skip.jsonl --export-final ex_skip >skip.log 2>&1
rc=$?
FSDP_TEST_NONFINITE=2:norm timeout 120 "$BIN" train "${TINY[@]}" --steps 4 --skip-nonfinite \
    --checkpoint-dir ck_skip1 >skip1.log 2>&1
rc1=$?
if [ "$rc" != 0 ] || [ "$rc1" != 0 ]; then
    bad "skip: exit status $rc and $rc1: $(tail -3 skip.log skip1.log)"
elif ! strict m_skip.jsonl; then
    bad "skip: metrics are not strict JSON"
elif [ "$(field m_skip.jsonl 2 grad_norm)" != null ] || [ "$(field m_skip.jsonl 2 skipped)" != 1 ] ||
    [ "$(field m_skip.jsonl 3 skipped)" != 0 ] || [ "$(field m_skip.jsonl 4 skipped_total)" != 1 ]; then
    bad "skip: metrics do not count the skip: $(grep -o '"step": [0-9]*.*"grad_norm": [^,]*' m_skip.jsonl)"
elif grep -q 'grad_norm 0.0000' skip1.log || ! grep -q -E '^step 2/4 .*grad_norm nan .*skipped 1 \(this\)' skip1.log; then
    bad "skip: step 2's line: $(grep '^step 2/' skip1.log)"
elif [ ! -e ex_skip/model.safetensors ]; then
    bad "skip: no export: $(ls ex_skip)"
else
    ok
fi

# A malformed switch is an error naming it.
FSDP_TEST_NONFINITE=x "$BIN" train "${TINY[@]}" --steps 1 --checkpoint-dir ck_bad >bad.log 2>&1
rc=$?
[ "$rc" = 2 ] && grep -q "FSDP_TEST_NONFINITE='x'" bad.log && ok || bad "malformed switch: exit $rc: $(tail -2 bad.log)"
finish
