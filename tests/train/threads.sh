#!/usr/bin/env bash
# threads.sh — the trainer's thread policy, without timing anything: --threads 0 follows the CPU
# affinity (taskset) and the ranks on the node; more threads than allowed cores warns; a launcher
# binding that leaves cores unused is noted; idle OpenMP threads sleep (OMP_WAIT_POLICY=passive) unless
# the environment says otherwise, as libgomp itself reports it (OMP_DISPLAY_ENV), after exactly one
# re-execution.
# usage: threads.sh FSDP_TRAIN_BINARY MPIRUN_SH WORKDIR
set -uo pipefail
BIN=$1
MPIRUN=$2
WORK=$3
SRC=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fails=0 pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
unset OMP_NUM_THREADS OMP_WAIT_POLICY OMP_DISPLAY_ENV
ONLINE=$(getconf _NPROCESSORS_ONLN)

"$BIN" prepare --text "$SRC"/src/core/*.c --out data --val-fraction 0.1 >prep.log 2>&1 || bad "prepare: $(cat prep.log)"
TINY=(--data data --layers 1 --width 16 --heads 2 --seq-len 16 --batch 4 --steps 1 --eval-every 0 --sample-tokens 0)
n=0
# run LOG ARGS...: one tiny training run (fresh checkpoint folder), stdout+stderr to LOG; exit status 0.
run() {
    local log=$1; shift
    n=$((n + 1))
    "$@" "${TINY[@]}" --checkpoint-dir "ck$n" >"$log" 2>&1 && ok || bad "$log: exit $?: $(tail -3 "$log")"
}
threads_of() { sed -nE 's/.* ([0-9]+) OpenMP threads? per rank.*/\1/p' "$1" | head -1; }

# --threads 0 under an affinity mask of one core: one thread, no warning, and a note that cores are unused
run one_core.log taskset -c 0 "$BIN" train --threads 0
[ "$(threads_of one_core.log)" = 1 ] && ok || bad "taskset -c 0, --threads 0: $(threads_of one_core.log) threads, want 1"
grep -q "warning:" one_core.log && bad "one_core.log warns: $(grep warning: one_core.log)" || ok
if [ "$ONLINE" -gt 1 ]; then
    grep -q "note: rank 0 may run on 1 of the $ONLINE cores online" one_core.log && ok || bad "one_core.log: no note on unused cores"
fi
# more threads than the mask allows: a warning naming the counts
run two_on_one.log taskset -c 0 "$BIN" train --threads 2
grep -q "warning: rank 0 runs 2 OpenMP threads on 1 core" two_on_one.log && ok || bad "two_on_one.log: no warning"
# no mask: every online core, no warning, no note
run all.log "$BIN" train --threads 0
[ "$(threads_of all.log)" = "$ONLINE" ] && ok || bad "--threads 0: $(threads_of all.log) threads, want $ONLINE"
grep -qE "warning:|note:" all.log && bad "all.log: $(grep -E 'warning:|note:' all.log)" || ok
# two ranks (tests/mpirun.sh: --bind-to none) split the cores
run mpi2.log "$MPIRUN" 2 "$BIN" train --threads 0
want=$((ONLINE / 2)); [ $want -lt 1 ] && want=1
[ "$(threads_of mpi2.log)" = $want ] && ok || bad "2 ranks, --threads 0: $(threads_of mpi2.log) threads, want $want"

# OMP_WAIT_POLICY: unset -> passive, in the trainer's own report and in libgomp's (GOMP_SPINCOUNT 0
# means passive; libgomp's default spins 300000 times): the program ran twice, the second time passive.
run wait_default.log env OMP_DISPLAY_ENV=verbose "$BIN" train --threads 1
grep -q "OpenMP thread per rank (OMP_WAIT_POLICY passive)" wait_default.log && ok || bad "wait_default.log: not passive"
if grep -q "GOMP_SPINCOUNT" wait_default.log; then # libgomp (GCC's OpenMP runtime)
    [ "$(grep -c "GOMP_SPINCOUNT" wait_default.log)" = 2 ] && ok || bad "wait_default.log: not exactly one re-execution"
    [ "$(grep "GOMP_SPINCOUNT" wait_default.log | tail -1 | tr -d " '")" = "GOMP_SPINCOUNT=0" ] && ok ||
        bad "wait_default.log: libgomp does not run passive: $(grep GOMP_SPINCOUNT wait_default.log | tail -1)"
fi
# the user's setting stands, and there is no re-execution
run wait_active.log env OMP_WAIT_POLICY=active OMP_DISPLAY_ENV=verbose "$BIN" train --threads 1
grep -q "(OMP_WAIT_POLICY active)" wait_active.log && ok || bad "wait_active.log: the user's OMP_WAIT_POLICY was replaced"
if grep -q "GOMP_SPINCOUNT" wait_active.log; then
    [ "$(grep -c "GOMP_SPINCOUNT" wait_active.log)" = 1 ] && ok || bad "wait_active.log: re-executed"
fi
# under mpirun every rank runs passive
run wait_mpi.log env OMP_DISPLAY_ENV=verbose "$MPIRUN" 2 "$BIN" train --threads 1
if grep -q "GOMP_SPINCOUNT" wait_mpi.log; then
    [ "$(grep -c "GOMP_SPINCOUNT = '0'" wait_mpi.log)" = 2 ] && ok || bad "wait_mpi.log: not 2 passive ranks"
fi
grep -q "(OMP_WAIT_POLICY passive)" wait_mpi.log && ok || bad "wait_mpi.log: not passive"

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
