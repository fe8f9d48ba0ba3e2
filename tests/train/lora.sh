#!/usr/bin/env bash
# lora.sh — fsdp-train --lora-rank end to end against PEFT, on the Hugging Face folders of
# tools/llama_reference.py (model/llama_fixtures): a Llama (GQA, untied) with adapters on all seven
# projections at 2 ranks, a Qwen2 (q/k/v biases, tied head) with adapters on q and v at 1 rank, and a
# GPT-2 (Conv1D weights, tied head) with adapters on c_attn and both c_proj at 2 ranks:
#  - the report's master, optim, grad_shard, param_full and main_grad are predicted to the byte
#    (tests/train/check_report.py), and a checkpoint holds the adapters alone (its shard files under a
#    fifth of a full fine-tune's: 12 bytes a parameter, 3 x the base's fp32 file);
#  - export --adapter writes a folder PeftModel.from_pretrained(base, DIR) loads, whose logits equal
#    fsdp.c's fp32 logits (export --logits) to 1e-5; export --merge writes a folder transformers loads
#    to the same logits; a plain export of a LoRA checkpoint is refused, naming both;
#  - a resume from the mid-run checkpoint ends in the same checkpoint files (2 ranks), and resumes at
#    1 rank; bad --lora-targets (of either family) and --lora-alpha without --lora-rank are refused;
#  - --init-adapter of PEFT's own save_pretrained folder (Llama at 2 ranks, GPT-2 at 1; one step at
#    learning rate 0): fsdp.c's fp32 logits equal PeftModel's with that folder to 1e-5; an adapter of
#    another rank is refused.
# usage: lora.sh FSDP_TRAIN MPIRUN_SH PYTHON FIXTURE_DIR WORKDIR
set -uo pipefail
BIN=$1 MPIRUN=$2 PY=$3 FX=$4 WORK=$5
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TOOL="$SRC/tools/llama_reference.py"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
export OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore HF_HUB_OFFLINE=1
source "$SRC/tests/lib_common.sh" # ok, bad, finish
run() {
    local np=$1
    shift
    if [ "$np" = 1 ]; then "$BIN" "$@" </dev/null; else "$MPIRUN" "$np" "$BIN" "$@" </dev/null; fi
}
for d in llama_lora_f32 qwen2_lora_f32 llama_lora_adapter gpt2_lora_f32 gpt2_lora_adapter; do
    [ -d "$FX/$d" ] || { echo "FAIL: no fixture folder $FX/$d"; exit 1; }
done
head -c 100000 /usr/share/games/fortunes/fortunes >t.txt
"$BIN" prepare --text t.txt --out data --doc-sep % >prep.log 2>&1 || bad "prepare: $(tail -3 prep.log)"
A=(train --data data --batch 4 --seq-len 32 --sample-tokens 0 --eval-every 0 --threads 1 --peak-gflops -1)

# lora NAME NP BASE ARGS...: a 6-step LoRA fine-tune with a checkpoint at step 3, then its exports
lora() {
    local name=$1 np=$2 base=$3
    shift 3
    if ! run "$np" "${A[@]}" --init-from "$base" --steps 6 --checkpoint-every 3 --checkpoint-dir "ck_$name" \
        --report "rep_$name.json" "$@" >"run_$name.log" 2>&1; then
        bad "$name: fine-tune: $(tail -3 "run_$name.log")"
        return
    fi
    ok
    "$PY" "$SRC/tests/train/check_report.py" "rep_$name.json" --world "$np" --exact-only && ok || bad "$name: report"
    # the checkpoint: the adapters and their AdamW state, not the base
    local got full
    got=$(cat "ck_$name"/step_000006/rank_*.bin | wc -c)
    full=$(stat -c %s "$base/model.safetensors")
    [ "$got" -lt $((3 * full / 5)) ] && ok || bad "$name: checkpoint of $got bytes against the base's $full"
    if run 1 export --checkpoint "ck_$name" --out "x_$name/model.safetensors" >"plain_$name.log" 2>&1; then
        bad "$name: a plain export of a LoRA checkpoint was accepted"
    else
        grep -q "pass --merge .* or --adapter" "plain_$name.log" && ok || bad "$name: plain export: $(tail -1 "plain_$name.log")"
    fi
    if run 1 export --checkpoint "ck_$name" --adapter --out "ad_$name/adapter_model.safetensors" \
        --logits "l_$name.bin" >"ad_$name.log" 2>&1; then
        "$PY" "$TOOL" compare "$base" "l_$name.bin" --adapter "ad_$name" && ok ||
            bad "$name: PEFT with the exported adapter"
    else
        bad "$name: export --adapter: $(tail -2 "ad_$name.log")"
    fi
    if run 1 export --checkpoint "ck_$name" --merge --out "mg_$name/model.safetensors" >"mg_$name.log" 2>&1; then
        "$PY" "$TOOL" compare "mg_$name" "l_$name.bin" && ok || bad "$name: the merged export"
    else
        bad "$name: export --merge: $(tail -2 "mg_$name.log")"
    fi
}
lora llama 2 "$FX/llama_lora_f32" --lora-rank 4 --lora-alpha 8
lora qwen2 1 "$FX/qwen2_lora_f32" --lora-rank 3 --lora-targets q,v
lora gpt2 2 "$FX/gpt2_lora_f32" --lora-rank 4 --lora-alpha 8 --lora-targets c_attn,c_proj

# resume: bit-identical at 2 ranks, and at 1 rank
mkdir -p ck2 && cp -r ck_llama/step_000003 ck2/ && echo step_000003 >ck2/latest
if run 2 "${A[@]}" --init-from "$FX/llama_lora_f32" --steps 6 --checkpoint-every 3 --checkpoint-dir ck2 --resume \
    --lora-rank 4 --lora-alpha 8 >res.log 2>&1; then
    cmp -s ck_llama/step_000006/rank_00000.bin ck2/step_000006/rank_00000.bin &&
        cmp -s ck_llama/step_000006/rank_00001.bin ck2/step_000006/rank_00001.bin && ok ||
        bad "the resumed LoRA run's step 6 differs from the uninterrupted one's"
else
    bad "LoRA resume at 2 ranks: $(tail -3 res.log)"
fi
mkdir -p ck3 && cp -r ck_llama/step_000003 ck3/ && echo step_000003 >ck3/latest
run 1 "${A[@]}" --init-from "$FX/llama_lora_f32" --steps 4 --checkpoint-dir ck3 --resume --lora-rank 4 --lora-alpha 8 \
    >res1.log 2>&1 && ok || bad "LoRA resume at 1 rank: $(tail -3 res1.log)"

# init_adapter NAME NP MODEL: --init-adapter of PEFT's own folder FX/MODEL_adapter on FX/MODEL_f32 (one
# step at learning rate 0); fsdp.c's fp32 logits against PeftModel with the same folder
init_adapter() {
    local name=$1 np=$2 base="$FX/$3_f32" adapter="$FX/$3_adapter"
    if run "$np" "${A[@]}" --init-from "$base" --lora-rank 4 --lora-alpha 8 --init-adapter "$adapter" --steps 1 \
        --lr 0 --min-lr 0 --checkpoint-dir "ck_$name" >"$name.log" 2>&1 &&
        run 1 export --checkpoint "ck_$name" --merge --out "$name/model.safetensors" --logits "l_$name.bin" \
            >"${name}x.log" 2>&1; then
        "$PY" "$TOOL" compare "$base" "l_$name.bin" --adapter "$adapter" && ok ||
            bad "--init-adapter ($3): logits against PeftModel with the same folder"
    else
        bad "--init-adapter ($3): $(tail -2 "$name.log") $(tail -1 "${name}x.log" 2>/dev/null)"
    fi
}
init_adapter ia 2 llama_lora
init_adapter ig 1 gpt2_lora # GPT-2's Conv1D: fan_in_fan_out

# --freeze on top of LoRA (h0's adapters kept at their initialisation): the adapter export reads the
# frozen ones from the restored model, and PEFT reproduces the logits
if run 1 "${A[@]}" --init-from "$FX/llama_lora_f32" --lora-rank 4 --lora-alpha 8 --freeze 'h0.lora_*' --steps 3 \
    --checkpoint-dir ck_fz >fz.log 2>&1 &&
    run 1 export --checkpoint ck_fz --adapter --out fz/adapter_model.safetensors --logits l_fz.bin >fzx.log 2>&1; then
    grep -q "^frozen (LoRA's base, --freeze): 114624 of 118336" fz.log && ok || bad "LoRA + --freeze: $(grep -m1 frozen fz.log)"
    "$PY" "$TOOL" compare "$FX/llama_lora_f32" l_fz.bin --adapter fz && ok || bad "LoRA + --freeze: PEFT's logits"
else
    bad "LoRA + --freeze: $(tail -2 fz.log) $(tail -1 fzx.log 2>/dev/null)"
fi

# refusals
expect_error() { # PATTERN ARGS...: the run fails, printing PATTERN
    local pat=$1
    shift
    if run 1 "${A[@]}" --steps 2 --checkpoint-dir refused "$@" >ref.log 2>&1; then
        bad "accepted: $*"
    else
        grep -q -- "$pat" ref.log && ok || bad "$*: $(tail -1 ref.log)"
    fi
}
expect_error '"vv" is none of q, k, v, o, gate, up, down' --init-from "$FX/llama_lora_f32" --lora-rank 4 --lora-targets q,vv
expect_error "lora-alpha needs --lora-rank" --init-from "$FX/llama_lora_f32" --lora-alpha 4
expect_error '"q" is none of c_attn, attn.c_proj, c_fc, mlp.c_proj, c_proj (GPT-2)' --layers 2 --width 64 --heads 4 \
    --lora-rank 4 --lora-targets q
expect_error "r is 4, this run's --lora-rank 8" --init-from "$FX/llama_lora_f32" --lora-rank 8 \
    --init-adapter "$FX/llama_lora_adapter"
cp -r "$FX/llama_lora_adapter" ad_pattern
"$PY" - ad_pattern/adapter_config.json <<'EOF2' || bad "editing adapter_config.json"
import json, sys
c = json.load(open(sys.argv[1]))
c["rank_pattern"] = {"q_proj": 8}
json.dump(c, open(sys.argv[1], "w"))
EOF2
expect_error "rank_pattern is set; only plain LoRA adapters load" --init-from "$FX/llama_lora_f32" --lora-rank 4 \
    --lora-alpha 8 --init-adapter ad_pattern
expect_error "init-adapter .* needs --lora-rank" --init-from "$FX/llama_lora_f32" --init-adapter "$FX/llama_lora_adapter"
[ ! -e refused/latest ] && ok || bad "a refused run wrote a checkpoint"

finish
