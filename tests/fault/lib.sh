# lib.sh — shared helpers of the fault tests (sourced): pass/fail counting, a tiny data set and model,
# a launcher wrapper that records each rank's pid, metrics field extraction, and loading a checkpoint.
# Expects BIN (fsdp-train), MPIRUN (tests/mpirun.sh), WORK (a scratch folder) and FAULT_LIB (the
# fault_inject.so preload) to be set by the caller.
set -uo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../lib_common.sh
. "$SRC/tests/lib_common.sh"
export OMP_NUM_THREADS=1
BIN=$(realpath "$BIN") MPIRUN=$(realpath "$MPIRUN") FAULT_LIB=$(realpath "$FAULT_LIB") WORK=$(realpath -m "$WORK")

rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
# Corpus: this repository's C sources, one document per file (as tests/train/trainer_cli.sh does).
"$BIN" prepare --text "$SRC"/src/*/*.c --out data --val-fraction 0.1 >prep.log 2>&1 || {
    echo "FAIL: prepare: $(cat prep.log)" >&2
    exit 1
}
TINY=(--data data --layers 2 --width 32 --heads 2 --seq-len 32 --batch 12 --precision fp32 --lr 3e-3
      --warmup 3 --eval-every 0 --sample-tokens 0 --log-every 1 --threads 1)

# launch.sh: what mpirun starts for each rank. Records the rank's pid in WORK/pid.RANK, and gives the
# fault library (FAULT_PRELOAD_RANK=r: that rank only) before exec'ing the real program.
cat >launch.sh <<'SH'
#!/usr/bin/env bash
r=${OMPI_COMM_WORLD_RANK:-0}
echo $$ >"$FAULT_WORK/pid.$r"
if [ -n "${FAULT_PRELOAD_RANK:-}" ] && [ "$FAULT_PRELOAD_RANK" = "$r" ]; then export LD_PRELOAD=$FAULT_LIB; fi
exec "$@"
SH
chmod +x launch.sh
export FAULT_WORK=$WORK FAULT_LIB

# snapshot DIR: checksums of every file under DIR.
snapshot() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum); }
