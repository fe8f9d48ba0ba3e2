#!/usr/bin/env bash
# fault_signal.sh — SIGINT while training or sampling (issue 39 item 8): the run stops after the step in
# which it came, on every rank alike (a SIGINT to one rank of two stops both: an agreement), saying so
# on stderr with the newest checkpoint; the log lines printed so far are all there (stdout is a file,
# fully buffered: the default action used to lose them); no .tmp_step_* folder is left; `latest` names
# a complete checkpoint from which --resume continues; `sample` stops between tokens with its text so
# far printed. SIGTERM keeps its default (launchers end ranks with it, at once): the run ends by it,
# and the "saved" line of the checkpoint latest names is in the log all the same (flushed as printed).
# usage: fault_signal.sh FSDP_TRAIN MPIRUN_SH WORKDIR FAULT_LIB
BIN=$1 MPIRUN=$2 WORK=$3 FAULT_LIB=$4
source "$(dirname "$0")/lib.sh"
RUN=("${TINY[@]}" --steps 100000 --checkpoint-every 3)
# A background job of a script starts with SIGINT ignored (POSIX), which fsdp-train keeps ignored, as
# it should: dfl starts a program with SIGINT and SIGTERM at their default, as from a terminal.
cat >dfl.sh <<'SH'
#!/bin/sh
exec python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL); signal.signal(signal.SIGTERM, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' "$@"
SH
chmod +x dfl.sh

# wait_step FILE N: until --metrics FILE holds step N (at most 60 s)
wait_step() {
    local i=0
    while ! grep -q "\"step\": $2," "$1" 2>/dev/null && [ $i -lt 6000 ]; do sleep 0.01; i=$((i + 1)); done
}
# check NAME RC SIGNAME: the stopped run's exit code, message, log, folder and resume
check() {
    local name=$1 rc=$2 sig=$3
    [ "$rc" = 1 ] && ok || bad "$name: exit code $rc, want 1"
    grep -q "error: stopped by $sig after step [0-9]*: the newest checkpoint is ck_$name/step_[0-9]* (continue with --resume)" "$name.err" &&
        ok || bad "$name: no stop message: $(tail -2 "$name.err")"
    local last
    last=$(cat "ck_$name/latest" 2>/dev/null)
    [ -n "$last" ] && [ -f "ck_$name/$last/manifest.json" ] && ok || bad "$name: latest ($last) names no complete checkpoint"
    grep -q "^saved ck_$name/$last\$" "$name.log" && ok || bad "$name: the log lacks 'saved ck_$name/$last' (lost lines?)"
    [ -z "$(find "ck_$name" -maxdepth 1 -name '.tmp_step_*')" ] && ok || bad "$name: a .tmp_step_* folder is left"
    "$BIN" "${TINY[@]}" --steps 100000 --stop-at $((10#${last#step_} + 2)) --checkpoint-every 3 --checkpoint-dir "ck_$name" --resume \
        >"$name.resume.log" 2>&1 && ok || bad "$name: --resume after the stop: $(tail -2 "$name.resume.log")"
}

# 1 rank, SIGINT (Ctrl-C) after a few saved steps
for sig in INT; do
    name=one_$sig
    ./dfl.sh "$BIN" "${RUN[@]}" --checkpoint-dir "ck_$name" --metrics "$name.jsonl" >"$name.log" 2>"$name.err" &
    job=$!
    wait_step "$name.jsonl" 7
    kill -$sig $job
    (sleep 30; kill -9 $job) >/dev/null 2>&1 & # a stop that never comes fails, in bounded time
    guard=$!
    wait $job
    rc=$?
    kill $guard 2>/dev/null
    check $name $rc SIG$sig
done

# 1 rank, SIGTERM: ends at once by the signal (143), the saved lines in the log, latest complete
name=one_TERM
./dfl.sh "$BIN" "${RUN[@]}" --checkpoint-dir "ck_$name" --metrics "$name.jsonl" >"$name.log" 2>"$name.err" &
job=$!
wait_step "$name.jsonl" 7
kill -TERM $job
wait $job
rc=$?
last=$(cat "ck_$name/latest" 2>/dev/null)
[ "$rc" = 143 ] && [ -f "ck_$name/$last/manifest.json" ] && grep -q "^saved ck_$name/$last\$" "$name.log" && ok ||
    bad "$name: exit $rc, latest $last, log: $(grep saved "$name.log" | tail -1)"

# 2 ranks, SIGINT to rank 1 alone: both stop at the same step (rank 0 learns it from the agreement)
name=two_INT
rm -f pid.*
timeout 120 ./dfl.sh "$MPIRUN" 2 ./launch.sh ./dfl.sh "$BIN" "${RUN[@]}" --checkpoint-dir "ck_$name" --metrics "$name.jsonl" >"$name.log" 2>"$name.err" &
job=$!
wait_step "$name.jsonl" 7
kill -INT "$(cat pid.1)"
wait $job
rc=$?
[ "$rc" = 1 ] && ok || bad "$name: exit code $rc, want 1"
grep -q "stopped by SIGINT after step [0-9]*: the newest checkpoint is ck_$name/step_" "$name.err" && ok ||
    bad "$name: no stop message: $(tail -3 "$name.err")"
[ -z "$(find "ck_$name" -maxdepth 1 -name '.tmp_step_*')" ] && [ -f "ck_$name/$(cat "ck_$name/latest")/manifest.json" ] &&
    ok || bad "$name: the checkpoint folder is not clean"

# sample: stopped between tokens, the text so far printed
./dfl.sh "$BIN" sample --checkpoint ck_one_INT --tokens 1000000 --prompt "int " --kv-cache=0 >sample.out 2>sample.err &
job=$!
i=0 # (the file appears once the background job's redirection ran)
while [ "$(stat -c %s sample.out 2>/dev/null || echo 0)" -lt 50 ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i + 1)); done
kill -INT $job
(sleep 30; kill -9 $job) >/dev/null 2>&1 &
guard=$!
wait $job
rc=$?
kill $guard 2>/dev/null
[ "$rc" = 1 ] && grep -q "stopped by SIGINT after [0-9]* sampled tokens" sample.err && ok ||
    bad "sample: exit $rc, $(tail -2 sample.err)"
[ "$(head -c 4 sample.out)" = "int " ] && [ "$(wc -c <sample.out)" -ge 50 ] && ok || bad "sample: its text is lost"
finish fault_signal
