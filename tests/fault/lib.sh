# lib.sh — shared helpers of the fault tests (sourced): pass/fail counting, a tiny data set and model,
# a launcher wrapper that records each rank's pid, metrics field extraction, and loading a checkpoint.
# Expects BIN (fsdp-train), MPIRUN (tests/mpirun.sh), WORK (a scratch folder) and FAULT_LIB (the
# fault_inject.so preload) to be set by the caller.
set -uo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fails=0
pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
finish() {
    echo "$pass passed, $fails failed"
    [ "$fails" -eq 0 ] && [ "$pass" -gt 0 ]
    exit $?
}
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

# field FILE STEP NAME: a metrics value as printed (the exact text of the float); the last line wins.
field() { grep "\"step\": $2," "$1" | tail -1 | sed -E "s/.*\"$3\": ([^,}]*).*/\1/"; }

# same_losses A B FIRST LAST: loss and grad_norm of steps FIRST..LAST identical in both metrics files.
same_losses() {
    local s f
    for s in $(seq "$3" "$4"); do
        for f in loss grad_norm; do
            local a b
            a=$(field "$1" "$s" $f) b=$(field "$2" "$s" $f)
            if [ -z "$a" ] || [ "$a" != "$b" ]; then
                echo "step $s $f: '$a' vs '$b'" >&2
                return 1
            fi
        done
    done
}

# loads CKPT_DIR: the checkpoint `latest` names reads back completely (every shard file's checksum
# is verified by the export), into a safetensors file.
loads() {
    "$BIN" export --checkpoint "$1" --out "$1.export/model.safetensors" >"$1.export.log" 2>&1
}

# snapshot DIR: checksums of every file under DIR.
snapshot() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum); }
