#!/usr/bin/env bash
# llama_hf.sh BIN PY TOOL FXDIR NP — `fsdp-train sample --init-from` on the Hugging Face folders that
# tools/llama_reference.py wrote (F32, BF16, sharded; Llama, Qwen2, Qwen3, SmolLM2-shaped, Mistral) at NP
# ranks: the logits on the trainer's fixed input must equal the reference's (transformers, or the tool's
# Qwen3) to 1e-5 relative, through the generic map-driven loader of src/train/hf.c.
set -u
BIN=$1 PY=$2 TOOL=$3 FX=$4 NP=$5
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fails=0
for m in llama_f32 llama_bf16 llama_sharded qwen2_f32 qwen2_sharded qwen3_f32 smollm_bf16 mistral_f32 mistral_sharded; do
    [ -d "$FX/$m" ] || { echo "FAIL: no fixture folder $FX/$m"; fails=$((fails + 1)); continue; }
    if "$here/mpirun.sh" "$NP" "$BIN" sample --init-from "$FX/$m" --logits "$work/$m.bin" --threads 1 >"$work/$m.log" 2>&1 &&
        "$PY" "$TOOL" compare "$FX/$m" "$work/$m.bin" >"$work/$m.cmp" 2>&1; then
        pass=$((pass + 1))
    else
        echo "FAIL: $m at $NP ranks: $(tail -2 "$work/$m.log") $(tail -1 "$work/$m.cmp" 2>/dev/null)"
        fails=$((fails + 1))
    fi
done
echo "llama_hf np$NP: $pass passed, $fails failed"
[ $fails -eq 0 ] && [ $pass -gt 0 ]
