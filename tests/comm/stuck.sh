#!/usr/bin/env bash
# stuck.sh — a rank stuck inside a call into MPI ends itself (fsdp_comm_config.stuck_exit): rank 1 of
# stuck_prog hangs in its second collective holding the MPI lock (the ":hang" test fault); its watchdog
# must end it with status 7 and a message naming the rank, the collective, its label and the timeout,
# and mpirun must report that status. Twice: with the shared-memory transport (no progress thread)
# and without it (FSDP_COMM_SHM=0: the progress thread runs and waits on the held lock, as across hosts).
# usage: stuck.sh MPIRUN_SH STUCK_PROG
set -uo pipefail
MPIRUN=$1 PROG=$2
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
for shm in 1 0; do
    out=$(FSDP_COMM_SHM=$shm FSDP_TEST_SKIP_COLLECTIVE=1:1:hang timeout 15 "$MPIRUN" 2 "$PROG" 2>&1)
    rc=$?
    echo "--- FSDP_COMM_SHM=$shm: mpirun exit $rc"
    echo "$out" | grep -E "^rank|fsdp_comm:|FAIL" | head -8
    [ "$rc" = 7 ] || bad "shm $shm: mpirun exit $rc (want 7, the stuck rank's status)"
    grep -q FAIL <<<"$out" && bad "shm $shm: a rank printed FAIL"
    re='fsdp_comm: rank 1 of 2 on host [^:]+: all-reduce \(label "unit block7 / stuck", 1 x f32\) has been inside one call into MPI for ([0-9.]+) s \(timeout_s 1\.000\).*ending the process with status 7'
    if [[ "$out" =~ $re ]]; then
        # (>= on the printed value: the watchdog fires past 1 s, and 1.0004 s prints as 1.000)
        python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 1.0 else 1)" "${BASH_REMATCH[1]}" ||
            bad "shm $shm: reported ${BASH_REMATCH[1]} s inside MPI, less than the 1 s timeout"
    else
        bad "shm $shm: no stuck message from rank 1"
    fi
    want_thr=$([ $shm = 0 ] && echo 1 || echo 0)
    grep -q "^rank 1: progress thread $want_thr" <<<"$out" || bad "shm $shm: rank 1's progress thread is not $want_thr"
done
[ $fails = 0 ] && echo "stuck: all checks passed" || { echo "stuck: $fails failed"; exit 1; }
