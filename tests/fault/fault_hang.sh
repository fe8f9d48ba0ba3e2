#!/usr/bin/env bash
# fault_hang.sh — hangs become errors. A rank frozen (SIGSTOP) at a random point of training: the
# other ranks' collectives time out after --comm-timeout and the job ends non-zero within the timeout
# plus a few seconds, with a message naming the rank, the unit, the phase and the collective.
# And a rank that skips one collective (the comm layer's FSDP_TEST_SKIP_COLLECTIVE switch, ":stall":
# the rank then posts nothing more, as a rank gone astray would): the job ends non-zero within the
# timeout plus a few seconds, with the same message.
# usage: fault_hang.sh FSDP_TRAIN MPIRUN_SH WORKDIR FAULT_LIB
BIN=$1 MPIRUN=$2 WORK=$3 FAULT_LIB=$4
source "$(dirname "$0")/lib.sh"
TIMEOUT=3
SLACK=12 # MPI_Abort and process teardown on an oversubscribed, shared 2-core machine
seed=${FSDP_FAULT_SEED:-$$}
RANDOM=$seed
echo "random seed $seed (FSDP_FAULT_SEED=$seed reproduces the stop points)"

# check_message NAME NP: the first timeout message names a rank, the unit and phase (the
# communicator's label "unit NAME / PHASE", "engine / PHASE" for a model-wide collective, or
# "train / PHASE" for the trainer's own per-step collectives: the straggler gather, the outlier guard), the
# collective and the timeout.
check_message() {
    local name=$1 np=$2 msg
    msg=$(grep -m1 "not complete after" "$name.log")
    echo "  $msg"
    [[ "$msg" =~ \[rank\ [0-9]+\] ]] && [[ "$msg" =~ rank\ [0-9]+\ of\ $np ]] && ok || bad "$name: no rank in '$msg'"
    # Per-unit collectives say "unit NAME / PHASE"; the model-wide ones (the clipping norm) "engine / PHASE";
    # the trainer's own (the step's straggler gather, after the step's timing) "train / PHASE".
    [[ "$msg" =~ label\ \"(unit\ [^\"/]+|engine|train)\ /\ [^\"]+\" ]] && ok || bad "$name: no 'unit NAME / PHASE' label in '$msg'"
    [[ "$msg" =~ (all-gather|reduce-scatter|all-reduce|broadcast|barrier) ]] && ok || bad "$name: no collective in '$msg'"
    [[ "$msg" =~ timeout_s\ $TIMEOUT ]] && ok || bad "$name: the timeout is not stated in '$msg'"
}

# stop_case NP RANK: freeze RANK once the run has reached a random step in 2..6.
stop_case() {
    local np=$1 victim=$2 at=$((2 + RANDOM % 5)) name=stop_np$1_r$2
    rm -f pid.* "$name.jsonl"
    timeout 120 "$MPIRUN" "$np" ./launch.sh "$BIN" "${TINY[@]}" --steps 100000 --comm-timeout $TIMEOUT \
        --checkpoint-dir "ck_$name" --metrics "$name.jsonl" >"$name.log" 2>&1 &
    local job=$!
    local i=0
    while ! grep -q "\"step\": $at," "$name.jsonl" 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
    local pid
    pid=$(cat "pid.$victim" 2>/dev/null)
    [ -n "$pid" ] && kill -STOP "$pid" && ok || bad "$name: could not stop rank $victim"
    local t0=$(date +%s.%N)
    wait $job
    local rc=$?
    local el
    el=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null # in case the launcher left it stopped
    echo "$name: rank $victim stopped at step $at; job exit $rc after ${el}s"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && ok || bad "$name: exit $rc (want a failure, not a hang)"
    python3 -c "import sys; sys.exit(0 if $el <= $TIMEOUT + $SLACK else 1)" && ok || bad "$name: ended ${el}s after the stop, more than $TIMEOUT + $SLACK s"
    check_message "$name" "$np"
}
stop_case 2 1
stop_case 3 0

# skip_case NP N: rank NP-1 returns from its N-th collective without communicating, then stalls. The
# job's time is measured from the skip: the run reaches it within the first steps (a few seconds).
skip_case() {
    local np=$1 n=$2 name=skip_np$1_$2 t0=$SECONDS
    FSDP_TEST_SKIP_COLLECTIVE=$((np - 1)):$n:stall timeout 120 "$MPIRUN" "$np" "$BIN" "${TINY[@]}" \
        --steps 100000 --comm-timeout $TIMEOUT --checkpoint-dir "ck_$name" >"$name.log" 2>&1
    local rc=$? el=$((SECONDS - t0))
    echo "$name: exit $rc after ${el}s"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && ok || bad "$name: exit $rc (want a failure, not a hang)"
    [ $el -le $((TIMEOUT + SLACK + 10)) ] && ok || bad "$name: took ${el}s, more than $TIMEOUT + $SLACK + 10 s"
    check_message "$name" "$np"
}
skip_case 2 $((20 + RANDOM % 40))
skip_case 3 $((20 + RANDOM % 40))

# prefetch_case NP: rank NP-1 skips its first prefetched all-gather (step 2, the first step that
# prefetches) and stalls. The other ranks wait for that gather in the unit's own hook, after the
# communicator's label has moved on to later prefetches: their timeout must name the request that
# timed out, "all-gather params (prefetch)" of its unit, not the communicator's latest label.
prefetch_case() {
    local np=$1 name=prefetch_np$1 t0=$SECONDS
    FSDP_TEST_SKIP_COLLECTIVE="$((np - 1)):@(prefetch):stall" timeout 120 "$MPIRUN" "$np" "$BIN" "${TINY[@]}" \
        --steps 100000 --comm-timeout $TIMEOUT --max-inflight 2 --checkpoint-dir "ck_$name" >"$name.log" 2>&1
    local rc=$? el=$((SECONDS - t0))
    echo "$name: exit $rc after ${el}s"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && ok || bad "$name: exit $rc (want a failure, not a hang)"
    [ $el -le $((TIMEOUT + SLACK + 10)) ] && ok || bad "$name: took ${el}s, more than $TIMEOUT + $SLACK + 10 s"
    check_message "$name" "$np"
    local msg
    msg=$(grep -v "^\[rank $((np - 1))\]" "$name.log" | grep -m1 "not complete after")
    echo "  $msg"
    [[ "$msg" =~ label\ \"unit\ [^\"/]+\ /\ all-gather\ params\ \(prefetch\)\" ]] && ok ||
        bad "$name: a waiting rank's timeout does not name the prefetched all-gather: '$msg'"
}
prefetch_case 2
prefetch_case 3
finish
