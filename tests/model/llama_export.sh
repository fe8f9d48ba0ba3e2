#!/usr/bin/env bash
# llama_export.sh BIN PY TOOL WORK VARIANT — the Llama family's Hugging Face round trip with text, against
# transformers: a random VARIANT model (llama: GQA, untied, llama3 RoPE scaling; qwen2: q/k/v biases, tied)
# saved by transformers with a byte-level BPE tokenizer (tools/llama_reference.py textmodel);
#  - greedy `sample --init-from` at 1 and 2 ranks (KV cache on and off) prints the same bytes as
#    transformers' generate(do_sample=False) after AutoTokenizer's ids of the same prompt;
#  - a 2-rank fine-tune (prepare --tokenizer, fp32) exports a folder (f32, and bf16 with --export-dtype) that
#    AutoModelForCausalLM and AutoTokenizer load as one: the f32 export reproduces fsdp.c's logits to 1e-5,
#    the bf16 one to 1.2e-2 (its weights rounded to bf16; llama_ref's mixed-precision logits tolerance), greedy generate on the export equals `sample`;
#  - `export --init-from` of the folder in bf16 is exact (its weights are bf16 values): logits to 1e-5.
set -uo pipefail
BIN=$1 PY=$2 TOOL=$3 WORK=$4 V=$5
here=$(cd "$(dirname "$0")/.." && pwd)
SRC=$(cd "$here/.." && pwd)
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
export OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore
pass=0 fails=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
run() {
    local np=$1
    shift
    if [ "$np" = 1 ]; then "$BIN" "$@" </dev/null; else "$here/mpirun.sh" "$np" "$BIN" "$@" </dev/null; fi
}
"$PY" "$SRC/tools/bpe_fixture.py" train tok.json /usr/share/games/fortunes/fortunes --vocab 300 >tok.log 2>&1 ||
    bad "tokenizer: $(cat tok.log)"
"$PY" "$TOOL" textmodel m --variant "$V" --tokenizer tok.json >make.log 2>&1 || bad "textmodel: $(tail -3 make.log)"
P="The cat"

# Greedy text of the folder: fsdp.c (1 and 2 ranks, KV cache and full forward) vs transformers.
"$PY" "$TOOL" generate m 16 --text "$P" >g0.txt 2>g0.err || bad "generate: $(tail -3 g0.err)"
for np in 1 2; do
    for kv in 1 0; do
        run $np sample --init-from m --prompt "$P" --tokens 16 --temperature 0 --kv-cache=$kv --threads 1 \
            >s0_$np$kv.txt 2>s0_$np$kv.err || bad "sample --init-from at $np ranks: $(tail -2 s0_$np$kv.err)"
        cmp -s s0_$np$kv.txt g0.txt && ok ||
            bad "greedy text at $np ranks, kv-cache $kv: fsdp.c '$(cat s0_$np$kv.txt)' vs transformers '$(cat g0.txt)'"
    done
done

# Fine-tune on text tokenized with the folder's tokenizer, then export.
head -c 300000 /usr/share/games/fortunes/fortunes >text.txt
"$BIN" prepare --tokenizer m/tokenizer.json --text text.txt --out data --doc-sep % >prep.log 2>&1 ||
    bad "prepare: $(cat prep.log)"
run 2 --init-from m --data data --seq-len 32 --batch 8 --precision fp32 --eval-every 0 --sample-tokens 0 \
    --steps 12 --warmup 2 --lr 3e-3 --checkpoint-dir ck --threads 1 >ft.log 2>&1 || bad "fine-tune: $(tail -3 ft.log)"
"$BIN" export --checkpoint ck --out x/model.safetensors --logits x.bin >x.log 2>&1 || bad "export: $(cat x.log)"
[ "$(ls x | tr '\n' ' ')" = "config.json model.safetensors special_tokens_map.json tokenizer.json tokenizer_config.json " ] &&
    ok || bad "export folder holds: $(ls x | tr '\n' ' ')"
for f in tokenizer.json tokenizer_config.json special_tokens_map.json; do
    cmp -s "m/$f" "x/$f" && ok || bad "export copies $f"
done
"$PY" "$TOOL" compare x x.bin >cmp.log 2>&1 && ok || bad "f32 export vs fsdp.c's logits: $(tail -1 cmp.log)"
"$PY" "$TOOL" compare m x.bin >moved.log 2>&1 && bad "12 steps did not change the model" || ok
# The export keeps the folder's token ids (bos/eos = <|endoftext|>, id 0 here).
"$PY" - x/config.json m/config.json <<'EOF' && ok || bad "token ids in the export's config.json"
import json, sys
x, m = (json.load(open(p)) for p in sys.argv[1:])
sys.exit(0 if all(x.get(k) == m.get(k) is not None for k in ("bos_token_id", "eos_token_id")) else 1)
EOF
run 2 sample --checkpoint ck --prompt "$P" --tokens 24 --temperature 0 --threads 1 >s1.txt 2>s1.err ||
    bad "sample --checkpoint: $(tail -2 s1.err)"
"$PY" "$TOOL" generate x 24 --text "$P" >g1.txt 2>g1.err || bad "generate on the export: $(tail -3 g1.err)"
cmp -s s1.txt g1.txt && ok || bad "greedy text after fine-tuning: fsdp.c '$(cat s1.txt)' vs transformers '$(cat g1.txt)'"
cmp -s <(head -c "$(wc -c <g0.txt)" s1.txt) g0.txt && bad "fine-tuning did not change the greedy text" || ok

# bf16: rounded weights, the bf16 tolerance; the file holds BF16 tensors and says torch_dtype bfloat16.
"$BIN" export --checkpoint ck --export-dtype bf16 --out xb/model.safetensors >xb.log 2>&1 || bad "export bf16: $(cat xb.log)"
"$PY" "$TOOL" compare xb x.bin --tol 1.2e-2 >cmpb.log 2>&1 && ok || bad "bf16 export vs fsdp.c's logits: $(tail -1 cmpb.log)"
"$PY" - xb <<'EOF' && ok || bad "bf16 export's dtypes"
import json, struct, sys
raw = open(sys.argv[1] + "/model.safetensors", "rb").read(1 << 20)
h = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
c = json.load(open(sys.argv[1] + "/config.json"))
sys.exit(0 if {v["dtype"] for k, v in h.items() if k != "__metadata__"} == {"BF16"} and
         c.get("torch_dtype") == "bfloat16" else 1)
EOF
"$BIN" export --init-from m --export-dtype bf16 --out mb/model.safetensors --logits mb.bin >mb.log 2>&1 ||
    bad "export --init-from bf16: $(cat mb.log)"
"$PY" "$TOOL" compare mb mb.bin >cmpm.log 2>&1 && "$PY" "$TOOL" compare m mb.bin >>cmpm.log 2>&1 && ok ||
    bad "bf16 export of bf16-valued weights is exact: $(tail -1 cmpm.log)"
echo "llama_export $V: $pass checks passed, $fails failed"
[ $fails -eq 0 ] && [ $pass -gt 0 ]
