#!/usr/bin/env bash
# bench_generate.sh — sampling speed: fsdp-train sample with the KV cache, without it (a full forward over
# the context per token), and transformers' generate() (KV cache) on the same random GPT-2 folder, greedy,
# from the same single start token (<|endoftext|>, id V-1), one thread each, side by side.
# usage: bench/bench_generate.sh BUILD_DIR [L,C,NH,V,P] [TOKENS]   (default 6,512,8,50257,1024 and 256)
# Needs the test venv (tools/test-deps.sh). Writes its model to BUILD_DIR/bench_generate/.
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SHAPE=${2:-6,512,8,50257,1024}
N=${3:-256}
SRC=$(cd "$(dirname "$0")/.." && pwd)
PY="$SRC/.venv/bin/python"
W="$BUILD/bench_generate"
mkdir -p "$W"
if [ ! -f "$W/m/config.json" ] || [ "$(cat "$W/shape" 2>/dev/null)" != "$SHAPE" ]; then
    rm -rf "$W/m"
    HF_FIXTURE_SHAPE=$SHAPE "$PY" "$SRC/tools/hf_fixture.py" make "$W/m" >/dev/null 2>&1
    echo "$SHAPE" >"$W/shape"
fi
echo "model: random GPT-2 L,C,NH,V,P = $SHAPE; CPU: $(lscpu | sed -n 's/^Model name: *//p')"
export OMP_NUM_THREADS=1
# Each path at two lengths: with the cache the rate barely falls as the context grows; without it,
# each token re-runs the whole context, so the rate falls with the length.
for n in $((N / 4)) "$N"; do
    "$BUILD/fsdp-train" sample --init-from "$W/m" --tokens "$n" --temperature 0 --threads 1 --timing 2>&1 >/dev/null | sed 's/^/fsdp.c /'
done
for n in $((N / 8)) $((N / 4)); do
    "$BUILD/fsdp-train" sample --init-from "$W/m" --tokens "$n" --temperature 0 --threads 1 --kv-cache=0 --timing 2>&1 >/dev/null | sed 's/^/fsdp.c /'
done
"$PY" "$SRC/tools/hf_fixture.py" bench-generate "$W/m" --n "$N" --threads 1 2>/dev/null
