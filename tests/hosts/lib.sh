# lib.sh — shared helpers of the multi-host tests (sourced): pass/fail counting, a namespace host set
# of this test's own (HOSTS_ID unique per test process, removed on exit whatever happens), a tiny
# data set and model, and a rank wrapper that records each rank's pid, host and exit status.
# Expects BIN (fsdp-train), WORK (a scratch folder) and NAME (2-3 letters, [a-z]) from the caller.
set -uo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HOSTS=$SRC/tools/hosts.sh
MPIRUN=$SRC/tests/mpirun.sh
# shellcheck source=../lib_common.sh
. "$SRC/tests/lib_common.sh"
export OMP_NUM_THREADS=1
BIN=$(realpath "$BIN") WORK=$(realpath -m "$WORK")
# This test's own host set: its id names the namespaces, links and subnet, so a leftover or a
# concurrent set of another test never collides with it; `down` runs on every exit. Its state stays
# in the harness default (/run/fsdp-hosts/ID): Open MPI's socket paths must stay short.
export HOSTS_ID=$NAME$(($$ % 1000))
trap '"$HOSTS" down' EXIT
# Every launched job is bounded: a hang fails the test instead of blocking the suite.
export HOSTS_MPI_TIMEOUT=${HOSTS_MPI_TIMEOUT:-60}

rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
# A test that cannot create its hosts fails (CI runs as root; nothing here is skipped).
hosts_up() {
    "$HOSTS" up "$1" >up.log 2>&1 || { echo "FAIL: tools/hosts.sh up $1: $(cat up.log)" >&2; exit 1; }
}

# Corpus: this repository's C sources, one document per file (as tests/train/trainer_cli.sh does).
prepare_data() {
    timeout 60 "$BIN" prepare --text "$SRC"/src/*/*.c --out data --val-fraction 0.1 >prep.log 2>&1 || {
        echo "FAIL: prepare: $(cat prep.log)" >&2
        exit 1
    }
}
TINY=(--data data --layers 2 --width 32 --heads 2 --seq-len 32 --batch 12 --precision fp32 --lr 3e-3
      --warmup 3 --eval-every 0 --sample-tokens 0 --log-every 1000 --threads 1)

# launch.sh: what mpirun starts for each rank. Runs the program as its child and records
# WORK/rank.R: "PID HOST" at start, "PID HOST STATUS END_TIME" at the end; a TERM from the launcher
# is passed on to the program.
cat >launch.sh <<'SH'
#!/usr/bin/env bash
r=${OMPI_COMM_WORLD_RANK:-0} host=$(hostname)
"$@" &
child=$!
echo "$child $host" >"$HOSTS_WORK/rank.$r"
trap 'kill -TERM $child 2>/dev/null' TERM
wait $child
rc=$?
while kill -0 $child 2>/dev/null; do wait $child; rc=$?; done
echo "$child $host $rc $EPOCHREALTIME" >"$HOSTS_WORK/rank.$r" # a builtin: no fork the launcher's TERM could kill
exit $rc
SH
chmod +x launch.sh
export HOSTS_WORK=$WORK

# now: seconds since the epoch with fractions; elapsed T0 [T1]: T1 (default now) - T0 in seconds, 1 decimal.
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "${2:-$(now)}"; }
