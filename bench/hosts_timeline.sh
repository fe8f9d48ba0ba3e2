#!/usr/bin/env bash
# hosts_timeline.sh — one traced GPT-2-124M-shape run across namespace hosts (tools/hosts.sh) with
# every host's link byte counter sampled every 5 ms, then bench/link_timeline.py: per step, how much
# of the time the links carried bytes, how long they idled and what rank 0 computed meanwhile. It
# says where a step loses against max(compute, communication) (issue 16's goal), which the step
# times of hosts_bench.sh alone cannot. Needs root and build/fsdp-train; about a minute.
#
# usage: bench/hosts_timeline.sh [BUILD_DIR (build)] [-- EXTRA fsdp-train FLAGS...]
#   HOSTS=2 RATE=1gbit STEPS=4 BIN_MS=100 OUT=(a temporary folder, removed; set it to keep the trace)
#   SHAPE and BATCH_PER_RANK as in hosts_bench.sh
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$SRC/build
if [ $# -gt 0 ] && [ "$1" != -- ]; then BUILD=$(cd "$1" && pwd); shift; fi
[ "${1:-}" = -- ] && shift
TRAIN=$BUILD/fsdp-train
[ -x "$TRAIN" ] || { echo "hosts_timeline: $TRAIN is missing: build first" >&2; exit 2; }
HOSTS_N=${HOSTS:-2} RATE=${RATE:-1gbit} STEPS=${STEPS:-4} BIN_MS=${BIN_MS:-100}
SHAPE=${SHAPE:---layers 12 --width 768 --heads 12 --vocab 50257 --seq-len 64}
BATCH_PER_RANK=${BATCH_PER_RANK:-4}
case $RATE in
*gbit) bps=$((${RATE%gbit} * 1000000000 / 8)) ;;
*mbit) bps=$((${RATE%mbit} * 1000000 / 8)) ;;
*) echo "hosts_timeline: RATE must be NNgbit or NNmbit (got $RATE)" >&2; exit 2 ;;
esac
export HOSTS_ID=${HOSTS_ID:-ht$(($$ % 1000))} HOSTS_MPI_TIMEOUT=${HOSTS_MPI_TIMEOUT:-600}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
H=$SRC/tools/hosts.sh
KEEP=${OUT:-}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/fsdp_hosts_timeline.XXXXXX")}
mkdir -p "$OUT"
sampler=""
cleanup() {
    [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
    "$H" down
    [ -z "$KEEP" ] && rm -rf "$OUT"
    return 0
}
trap cleanup EXIT
cd "$OUT"
"$TRAIN" prepare --text "$SRC"/src/*/*.c --out data --val-fraction 0.1 >prep.log 2>&1
"$H" up "$HOSTS_N" >/dev/null
"$H" shape "$RATE"
# The root-side end of host i's veth: its tx counter is what host i received.
python3 - "$HOSTS_ID" "$HOSTS_N" >samples.txt <<'PY' &
import sys, time
hid, n = sys.argv[1], int(sys.argv[2])
fs = [open(f"/sys/class/net/{hid}-v{i}/statistics/tx_bytes") for i in range(1, n + 1)]
while True:
    v = []
    for f in fs:
        f.seek(0)
        v.append(f.read().strip())
    print(f"{time.monotonic():.6f} " + " ".join(v), flush=True)
    time.sleep(0.005)
PY
sampler=$!
# shellcheck disable=SC2086
"$H" run "$HOSTS_N" -- "$TRAIN" --data data $SHAPE --batch $((BATCH_PER_RANK * HOSTS_N)) --steps "$STEPS" \
    --eval-every 0 --sample-tokens 0 --log-every 1 --threads 1 --checkpoint-dir ck --trace trace.json \
    "$@" >run.log 2>&1 || { echo "hosts_timeline: the run failed:" >&2; tail -5 run.log >&2; exit 1; }
kill "$sampler"
sampler=""
echo "# hosts_timeline: $(lscpu | sed -n 's/^Model name: *//p'), $(getconf _NPROCESSORS_ONLN) cores; $HOSTS_N hosts x 1 rank at $RATE; fsdp-train $SHAPE, batch $BATCH_PER_RANK per rank; extra flags: ${*:-(none)}; $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?')"
python3 "$SRC/bench/link_timeline.py" trace.json samples.txt "$bps" "$(awk "BEGIN {print $BIN_MS / 1000}")"
