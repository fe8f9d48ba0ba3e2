#!/usr/bin/env bash
# hf_device.sh — Hugging Face folders load the same onto any device (src/train/hf.c through the engine's
# copies where the host cannot address the shards): fsdp-train exports a one-block GPT-2 of width 768
# (Conv1D weights stored transposed: c_fc's 2.4M elements are three 2^20-element host chunks, read
# transposed piece by piece; a tied head) and a small Llama (untied, GQA); hf_device_tool loads each on the CPU, the simulated device and the simulated
# device without host access at 1 and 2 ranks, every tensor bit for bit.
# usage: hf_device.sh FSDP_TRAIN HF_DEVICE_TOOL MPIRUN_SH WORKDIR
set -uo pipefail
BIN=$1 TOOL=$2 MPIRUN=$3 WORK=$4
SRC=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
"$BIN" prepare --text "$SRC"/src/core/*.c --out data --val-fraction 0 >prep.log 2>&1 || { cat prep.log; exit 1; }
COMMON=(--data data --layers 2 --seq-len 32 --batch 4 --steps 2 --lr 1e-3 --eval-every 0 --sample-tokens 0)
"$BIN" "${COMMON[@]}" --model gpt2 --layers 1 --width 768 --heads 4 --checkpoint-dir ck_gpt --export-final gpt2 >gpt.log 2>&1 ||
    bad "gpt2 run: $(tail -3 gpt.log)"
"$BIN" "${COMMON[@]}" --model llama --width 64 --heads 4 --kv-heads 2 --tie-embeddings 0 --intermediate 96 \
    --checkpoint-dir ck_llama --export-final llama >llama.log 2>&1 || bad "llama run: $(tail -3 llama.log)"
for m in gpt2 llama; do
    for np in 1 2; do
        "$MPIRUN" "$np" "$TOOL" "$m" >"$m.$np.log" 2>&1 && grep -q "the same on the simulated devices" "$m.$np.log" ||
            bad "$m at $np ranks: $(grep -E 'FAIL|hf_device|usage' "$m.$np.log" | head -3)"
    done
done
[ $fails = 0 ] && echo "hf_device: gpt2 and llama, 1 and 2 ranks: $(head -1 gpt2.1.log); $(head -1 llama.1.log)"
exit $fails
