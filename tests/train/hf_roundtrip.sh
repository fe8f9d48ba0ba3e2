#!/usr/bin/env bash
# hf_roundtrip.sh — the Hugging Face round trip (--init-from) against transformers itself: small random
# GPT-2s saved by transformers (tools/hf_fixture.py: one file F32, sharded, BF16, F16 without the
# "transformer." prefix, a stored lm_head) load at 1, 2 and 3 ranks with logits equal to transformers' to
# 1e-5 relative; a 20-step fine-tune from one of them exports a folder transformers reloads to fsdp.c's
# logits; damaged folders fail with the file and field named and nothing written (a config.json far
# larger than its weights before anything is allocated: under ulimit -v, small peak RSS).
# Part text: a model with its own BPE tokenizer (trained by tokenizers): prepare --tokenizer, fine-tune,
# sample text; the export folder (with tokenizer.json) loads in AutoTokenizer + GPT2LMHeadModel, whose
# greedy generate() gives the same text as fsdp-train sample.
# usage: hf_roundtrip.sh FSDP_TRAIN MPIRUN_SH PYTHON WORKDIR PART   PART: load | finetune | damaged | text | mask | pack
# PYTHON: the test venv's python (tools/test-deps.sh); without transformers the test fails.
set -uo pipefail
BIN=$1 MPIRUN=$2 PY=$3 WORK=$4 PART=$5
SRC=$(cd "$(dirname "$0")/../.." && pwd)
FIX="$SRC/tools/hf_fixture.py"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fails=0 pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
export OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore
if ! "$PY" -c "import transformers, safetensors" 2>/dev/null; then
    echo "FAIL: $PY cannot import transformers: run tools/test-deps.sh (tools/test.sh does)" >&2
    exit 1
fi
# run NP ARGS...: fsdp-train on NP ranks (1: without the launcher)
run() {
    local np=$1
    shift
    if [ "$np" = 1 ]; then "$BIN" "$@" </dev/null; else "$MPIRUN" "$np" "$BIN" "$@" </dev/null; fi
}
# no_checkpoint DIR: DIR holds no checkpoint (no `latest`, no step folder; a lock file may be there)
no_checkpoint() { [ ! -e "$1/latest" ] && ! compgen -G "$1/step_*" >/dev/null; }
make_model() { "$PY" "$FIX" make "$1" --variant "$2" >"make_$2.log" 2>&1 || bad "make $2: $(tail -3 "make_$2.log")"; }

# The default corpus's first 200 kB as byte-level data (the random models have GPT-2's layout, vocab 257).
prepare_data() {
    head -c 200000 /usr/share/games/fortunes/fortunes >text.txt
    "$BIN" prepare --text text.txt --out data --doc-sep % >prep.log 2>&1 || bad "prepare: $(cat prep.log)"
}

if [ "$PART" = load ]; then
    make_model m single,sharded,bf16,bare,lmhead
    for v in single sharded bf16 bare lmhead; do
        for np in 1 2 3; do
            run $np sample --init-from "m_$v" --logits "l_${v}_$np.bin" >"s_${v}_$np.log" 2>&1 ||
                bad "sample --init-from m_$v at $np ranks: $(tail -3 "s_${v}_$np.log")"
        done
        "$PY" "$FIX" compare "m_$v" "l_${v}"_[123].bin && ok || bad "logits of $v at 1, 2 and 3 ranks"
    done
    # export --init-from converts a folder (BF16; F16 without the prefix) to fsdp.c's F32 export.
    for v in bf16 bare; do
        "$BIN" export --init-from "m_$v" --out "x_$v/model.safetensors" --logits "x_$v.bin" >"x_$v.log" 2>&1 || bad "export --init-from m_$v: $(cat "x_$v.log")"
        "$PY" "$FIX" compare "x_$v" "x_$v.bin" && "$PY" "$FIX" compare "m_$v" "x_$v.bin" && ok || bad "export --init-from m_$v"
        [ "$(ls "x_$v")" = "$(printf 'config.json\nmodel.safetensors')" ] && ok || bad "export --init-from left files: $(ls "x_$v")"
    done
    [ -f m_sharded/model.safetensors.index.json ] && [ ! -f m_sharded/model.safetensors ] && ok || bad "sharded fixture has an index"
    # The comparison can fail: another model's logits do not pass.
    "$PY" "$FIX" compare m_single l_bf16_1.bin >neg.log 2>&1 && bad "compare accepted another model's logits" || ok
fi

# Part mask: loss masks (X.mask beside X.bin) with uneven counted targets per sequence, rank and
# micro-batch: the step-1 loss and pre-clip gradient norm at 1, 2 and 3 ranks with 1 and 4 micro-batches
# equal transformers' (float64: summed cross-entropy over the counted targets / their global count) to
# 1e-5 relative, and a batch with no counted target is skipped (loss 0, no update, never NaN). The
# reference takes the first global batch in file order: the runs pass --shuffle 0.
if [ "$PART" = mask ]; then
    MR="$SRC/tests/train/mask_ref.py"
    make_model m_single single
    "$PY" "$MR" data data 4000 7 || bad "mask data"
    read -r RL RN RC < <("$PY" "$MR" ref m_single data 24 32) || bad "reference"
    [ "${RC:-0}" -gt 0 ] && ok || bad "the reference counted no target"
    for np in 1 2 3; do
        for mb in 1 4; do
            run $np --init-from m_single --data data --shuffle 0 --seq-len 32 --batch 24 --micro-batches $mb --precision fp32 \
                --eval-every 0 --sample-tokens 0 --threads 1 --steps 1 --checkpoint-dir "ck_${np}_$mb" --metrics "m_${np}_$mb.jsonl" \
                >"m_${np}_$mb.log" 2>&1 || bad "masked run at $np ranks, $mb micro-batches: $(tail -3 "m_${np}_$mb.log")"
            "$PY" "$MR" check "m_${np}_$mb.jsonl" "$RL" "$RN" && ok || bad "loss/grad norm at $np ranks, $mb micro-batches"
        done
    done
    # The check can fail: the unmasked mean (another loss) is refused.
    "$PY" "$MR" check m_1_1.jsonl "$("$PY" -c "print($RL * 1.01)")" "$RN" >neg.log 2>&1 && bad "check accepted a 1% different loss" || ok
    # No counted target in the batch: skipped, loss 0, not NaN.
    mkdir -p empty && cp data/train.bin data/val.bin data/meta.json empty/ &&
        "$PY" -c "
import numpy as np, sys
sys.path.insert(0, '$SRC/tests/train')
from mask_ref import write, read
for n in ('train', 'val'):
    write('empty/' + n + '.mask', 20241203, 1, np.zeros(len(read('empty/' + n + '.bin', np.uint16)), np.uint8))
" || bad "empty mask"
    run 2 --init-from m_single --data empty --seq-len 32 --batch 12 --precision fp32 --eval-every 1 --eval-batches 1 \
        --sample-tokens 0 --threads 1 --steps 1 --checkpoint-dir ck_e --metrics e.jsonl >e.log 2>&1 || bad "all-masked run: $(tail -3 e.log)"
    grep -q '"loss": 0,.*"skipped": 1' e.jsonl && ok || bad "all-masked step not skipped with loss 0: $(cat e.jsonl)"
    grep -qi nan e.log e.jsonl && bad "NaN in the all-masked run: $(grep -i nan e.log e.jsonl | head -3)" || ok
    # A model whose vocab_size pads its tokenizer (Qwen2.5/3: 151936 rows for 151665 ids; issue 38 item
    # 2): data of a smaller vocabulary trains (it was refused, the message asking for what was done), and
    # the export keeps every row; data of a larger vocabulary than the model's is refused by name.
    "$PY" -c "
import transformers
m = transformers.AutoModelForCausalLM.from_pretrained('m_single')
m.resize_token_embeddings(320)
m.save_pretrained('m_pad')" >pad.log 2>&1 || bad "padded model: $(tail -3 pad.log)"
    run 1 --init-from m_pad --data data --seq-len 32 --batch 12 --precision fp32 --eval-every 0 --sample-tokens 0 \
        --threads 1 --steps 2 --checkpoint-dir ck_pad >pad_run.log 2>&1 && ok || bad "padded model on 257-id data: $(tail -3 pad_run.log)"
    "$BIN" export --checkpoint ck_pad --out x_pad/model.safetensors >pad_x.log 2>&1 &&
        "$PY" -c "import json; assert json.load(open('x_pad/config.json'))['vocab_size'] == 320" && ok ||
        bad "padded export: $(tail -2 pad_x.log)"
    "$PY" -c "
import transformers
m = transformers.AutoModelForCausalLM.from_pretrained('m_single')
m.resize_token_embeddings(200)
m.save_pretrained('m_small')" >small.log 2>&1 || bad "small model: $(tail -3 small.log)"
    run 1 --init-from m_small --data data --seq-len 32 --batch 12 --precision fp32 --eval-every 0 --sample-tokens 0 \
        --threads 1 --steps 2 --checkpoint-dir ck_small >small_run.log 2>&1 && bad "257-id data on a 200-row model was accepted" ||
        { grep -q "the data's vocabulary (257 ids) is larger than --init-from m_small's (vocab_size 200)" small_run.log && ok ||
            bad "small model's message: $(tail -2 small_run.log)"; }
fi

# Part pack: documents packed into sequences (--pack doc) train as if each document, or its piece in a
# sequence, ran alone through transformers (float64) from position 0: the step-1 loss and pre-clip gradient
# norm at 1 and 2 ranks (1 and 2 micro-batches) equal the reference to 1e-5 relative, for a GPT-2 (learned
# positions) and a Llama (RoPE), with documents marked by the end-of-text token (meta.json "eot") and by a
# mask file's document flags (with a loss mask; --pack auto picks doc there); --pack pad equals the
# documents padded, one a sequence; the validation loss (2 ranks) packs the same way. --pack concat's loss fails the doc check; data without a known
# end-of-text token are refused with the fix named.
if [ "$PART" = pack ]; then
    PR="$SRC/tests/train/pack_ref.py"
    make_model m_single single
    "$PY" "$PR" llama m_llama 5 >llama.log 2>&1 || bad "llama model: $(tail -3 llama.log)"
    "$PY" "$PR" data eot 6000 11 eot || bad "eot data"
    "$PY" "$PR" data mask 6000 12 mask || bad "mask data"
    B=8 T=32
    P1=(--seq-len $T --batch $B --precision fp32 --shuffle 0 --eval-every 0 --sample-tokens 0 --threads 1 --steps 1)
    for model in m_single m_llama; do
        for d in eot mask; do
            for mode in doc pad; do
                read -r RL RN RC < <("$PY" "$PR" ref $model $d $B $T $mode) || bad "reference $model $d $mode"
                [ "${RC:-0}" -gt 0 ] && ok || bad "the reference counted no target ($model $d $mode)"
                for np in 1 2; do
                    for mb in 1 2; do
                        [ $np = 2 ] && [ $mb = 2 ] && [ $d = eot ] && continue
                        n=${model}_${d}_${mode}_${np}_$mb
                        flag=(--pack $mode)
                        # --pack auto on data whose mask marks documents is doc
                        [ $d = mask ] && [ $mode = doc ] && [ $mb = 1 ] && flag=()
                        run $np --init-from $model --data $d "${P1[@]}" --micro-batches $mb "${flag[@]}" \
                            --checkpoint-dir "ck_$n" --metrics "$n.jsonl" >"$n.log" 2>&1 ||
                            bad "$n: $(tail -3 "$n.log")"
                        "$PY" "$PR" check "$n.jsonl" "$RL" "$RN" && ok || bad "loss/grad norm of $n"
                    done
                done
                # validation packs as training does: val.bin = train.bin, no update (--lr 0), so the
                # first validation batch's loss is the reference's
                mkdir -p "v_$d" && cp $d/* "v_$d/" && cp $d/train.bin "v_$d/val.bin" &&
                    { [ ! -f $d/train.mask ] || cp $d/train.mask "v_$d/val.mask"; }
                n=${model}_${d}_${mode}_val
                run 2 --init-from $model --data "v_$d" "${P1[@]}" --pack $mode --lr 0 --min-lr 0 --eval-every 1 \
                    --eval-batches 1 --checkpoint-dir "ck_$n" --metrics "$n.jsonl" >"$n.log" 2>&1 || bad "$n: $(tail -3 "$n.log")"
                "$PY" "$PR" checkval "$n.jsonl" "$RL" && ok || bad "validation loss of $n"
                if [ $mode = doc ] && [ $d = eot ]; then
                    # the check can fail: attention across documents (concat) is another loss
                    run 1 --init-from $model --data $d "${P1[@]}" --pack concat --checkpoint-dir "ck_${model}_c" \
                        --metrics "${model}_c.jsonl" >"${model}_c.log" 2>&1 || bad "concat run: $(tail -3 "${model}_c.log")"
                    "$PY" "$PR" check "${model}_c.jsonl" "$RL" "$RN" >neg.log 2>&1 && bad "concat passed the doc check ($model)" || ok
                fi
            done
        done
    done
    grep -q -- "; documents: --pack doc$" m_single_mask_doc_1_1.log && ok || bad "auto on DOC-flag data is not doc: $(grep '^data:' m_single_mask_doc_1_1.log)"
    # no end-of-text token known: refused, naming the fix
    mkdir -p noeot && cp eot/train.bin noeot/ && echo '{"vocab": 257}' >noeot/meta.json
    for mode in doc pad; do
        run 1 --init-from m_single --data noeot "${P1[@]}" --pack $mode --checkpoint-dir ck_n >n.log 2>&1 &&
            bad "--pack $mode without eot ran" || ok
        grep -q 'names no end-of-text token ("eot").*add "eot": ID to meta.json' n.log && ok || bad "--pack $mode without eot: $(tail -2 n.log)"
    done
    # resume refuses another --pack
    run 1 --init-from m_single --data eot "${P1[@]}" --pack doc --steps 2 --checkpoint-every 1 --stop-at 1 --checkpoint-dir ck_r >r1.log 2>&1 || bad "resume setup: $(tail -3 r1.log)"
    run 1 --init-from m_single --data eot "${P1[@]}" --pack concat --steps 2 --resume --checkpoint-dir ck_r >r2.log 2>&1 && bad "resume with another --pack ran" || ok
    grep -q -- "--pack doc in .*concat in this run" r2.log && ok || bad "resume with another --pack: $(tail -2 r2.log)"
    run 1 --init-from m_single --data eot "${P1[@]}" --pack doc --steps 2 --resume --checkpoint-dir ck_r >r3.log 2>&1 && ok || bad "resume with the same --pack: $(tail -3 r3.log)"
fi

if [ "$PART" = finetune ]; then
    make_model m_single single
    prepare_data
    FT=(--data data --seq-len 32 --batch 4 --precision fp32 --eval-every 0 --sample-tokens 0 --threads 1)
    # 20 fine-tuning steps on 2 ranks, then export: transformers reproduces fsdp.c's logits from it.
    "$MPIRUN" 2 "$BIN" --init-from m_single "${FT[@]}" --steps 20 --warmup 2 --lr 1e-3 --checkpoint-dir ck \
        --metrics ft.jsonl >ft.log 2>&1 || bad "fine-tune: $(tail -5 ft.log)"
    grep -q "initialised from $WORK/m_single: each rank read at most" ft.log && ok || bad "the run says where it started"
    grep -q "\"init-from\":[[:space:]]*\"$WORK/m_single\"" ck/step_000020/manifest.json && ok || bad "manifest records init-from"
    "$BIN" export --checkpoint ck --out ft/model.safetensors --logits ft.bin >exp.log 2>&1 || bad "export: $(cat exp.log)"
    "$PY" "$FIX" compare ft ft.bin && ok || bad "transformers reproduces the fine-tuned export's logits"
    "$PY" "$FIX" compare m_single ft.bin >moved.log 2>&1 && bad "20 steps did not change the model" || ok
    # A resumed run (the same command plus --resume) keeps the starting point in its manifest.
    "$MPIRUN" 2 "$BIN" --init-from m_single "${FT[@]}" --steps 22 --warmup 2 --lr 1e-3 --checkpoint-dir ck --resume >res.log 2>&1 || bad "resume: $(tail -3 res.log)"
    grep -q "\"init-from\":[[:space:]]*\"$WORK/m_single\"" ck/step_000022/manifest.json && ok || bad "resumed manifest keeps init-from"
    fp() { sed -n 's/.*"init-from-fingerprint":[[:space:]]*"\(crc32c:[0-9a-f]\{8\}\)".*/\1/p' "$1"; }
    [ -n "$(fp ck/step_000020/manifest.json)" ] && [ "$(fp ck/step_000020/manifest.json)" = "$(fp ck/step_000022/manifest.json)" ] &&
        ok || bad "manifest records the folder's fingerprint, kept on resume: '$(fp ck/step_000020/manifest.json)' '$(fp ck/step_000022/manifest.json)'"
    # Training starts from the loaded weights: one step at learning rate 0 exports the original model.
    "$MPIRUN" 3 "$BIN" --init-from m_single "${FT[@]}" --batch 3 --steps 1 --warmup 0 --lr 0 --min-lr 0 \
        --weight-decay 0 --checkpoint-dir ck0 >lr0.log 2>&1 || bad "lr 0 run: $(tail -3 lr0.log)"
    "$BIN" export --checkpoint ck0 --out lr0/model.safetensors --logits lr0.bin >exp0.log 2>&1 || bad "export lr0: $(cat exp0.log)"
    "$PY" "$FIX" compare m_single lr0.bin && ok || bad "train --init-from starts from the pretrained weights"
    [ "$(fp ck0/step_000001/manifest.json)" = "$(fp ck/step_000020/manifest.json)" ] && ok || bad "same folder, same fingerprint"
    # Each of the 3 ranks read only its shard: at most a little over a third of the elements, all of them together.
    python3 -c "
import re, sys
m = re.search(r'read at most ([0-9.]+)% .*together ([0-9.]+)%', open('lr0.log').read())
sys.exit(0 if m and float(m.group(1)) < 40 and abs(float(m.group(2)) - 100) < 0.05 else 1)" && ok ||
        bad "per-rank reads: $(grep 'initialised from' lr0.log)"
    # Data of another vocabulary is refused, naming meta.json.
    sed -i 's/"vocab":[[:space:]]*257/"vocab": 300/' data/meta.json
    "$BIN" --init-from m_single "${FT[@]}" --steps 1 --checkpoint-dir ck_v >v.log 2>&1 && bad "vocabulary mismatch accepted" ||
        { grep -q "meta.json" v.log && no_checkpoint ck_v && ok || bad "vocabulary mismatch message: $(cat v.log)"; }
fi

if [ "$PART" = text ]; then
    "$PY" "$SRC/tools/bpe_fixture.py" train tok.json /usr/share/games/fortunes/fortunes --vocab 1000 >tok.log 2>&1 || bad "tokenizer: $(cat tok.log)"
    "$PY" "$FIX" make m --variant single --tokenizer tok.json >make.log 2>&1 || bad "make: $(tail -3 make.log)"
    cat /usr/share/games/fortunes/fortunes /usr/share/games/fortunes/computers >text.txt
    "$BIN" prepare --tokenizer m/tokenizer.json --text text.txt --out data --doc-sep % >prep.log 2>&1 || bad "prepare: $(cat prep.log)"
    # Before training: fsdp-train's greedy text from the folder equals transformers'.
    run 1 sample --init-from m --prompt "The cat" --tokens 12 --temperature 0 >s0.txt 2>s0.err || bad "sample: $(cat s0.err)"
    "$PY" "$FIX" generate m "The cat" 12 >g0.txt 2>g0.err || bad "generate: $(tail -3 g0.err)"
    cmp -s s0.txt g0.txt && ok || bad "greedy text of the HF folder: fsdp.c '$(cat s0.txt)' vs transformers '$(cat g0.txt)'"
    run 2 --init-from m --data data --seq-len 32 --batch 8 --precision fp32 --eval-every 0 --sample-tokens 20 \
        --steps 20 --warmup 2 --lr 3e-3 --checkpoint-dir ck --threads 1 --prompt "The cat" >ft.log 2>&1 || bad "fine-tune: $(tail -3 ft.log)"
    grep -q "^The cat" ft.log && ok || bad "the end-of-training sample is text after the prompt: $(tail -3 ft.log)"
    run 2 sample --checkpoint ck --prompt "The cat" --tokens 24 --temperature 0 --timing >s1.txt 2>s1.err || bad "sample: $(cat s1.err)"
    # The KV cache changes nothing in the text: the same greedy tokens as a full forward per token.
    run 2 sample --checkpoint ck --prompt "The cat" --tokens 24 --temperature 0 --kv-cache=0 --timing >s1f.txt 2>s1f.err || bad "sample: $(cat s1f.err)"
    cmp -s s1.txt s1f.txt && ok || bad "KV cache vs full forward: '$(cat s1.txt)' vs '$(cat s1f.txt)'"
    grep -q "KV cache" s1.err && grep -q "full forward per token" s1f.err && ok || bad "sample reports its speed and path"
    "$BIN" export --checkpoint ck --out ft/model.safetensors >exp.log 2>&1 || bad "export: $(cat exp.log)"
    cmp -s m/tokenizer.json ft/tokenizer.json && ok || bad "export writes tokenizer.json beside the model"
    "$PY" "$FIX" generate ft "The cat" 24 >g1.txt 2>g1.err || bad "generate: $(tail -3 g1.err)"
    cmp -s s1.txt g1.txt && ok || bad "greedy text after fine-tuning: fsdp.c '$(cat s1.txt)' vs transformers '$(cat g1.txt)'"
    cmp -s s0.txt <(head -c "$(wc -c <s0.txt)" s1.txt) && bad "fine-tuning did not change the greedy text" || ok
fi

if [ "$PART" = damaged ]; then
    make_model m_single single
    prepare_data
    "$PY" "$FIX" damage m_single bad >damage.log 2>&1 || bad "damage: $(cat damage.log)"
    n=0
    while IFS='|' read -r dir needles; do
        n=$((n + 1))
        name=$(basename "$dir")
        # every case on 1 rank; every third also on 3 ranks (one rank's failure must stop them all)
        for np in 1 $([ $((n % 3)) = 0 ] && echo 3); do
            rm -rf "ck_$name"
            run $np --init-from "$dir" --data data --seq-len 16 --batch 3 --steps 1 --threads 1 \
                --checkpoint-dir "ck_$name" >"$name.$np.log" 2>&1
            rc=$?
            [ $rc -ne 0 ] && ok || bad "$name at $np ranks: exit 0"
            no_checkpoint "ck_$name" && ok || bad "$name at $np ranks: wrote a checkpoint in ck_$name"
            IFS='|' read -ra ns <<<"$needles"
            for s in "${ns[@]}"; do
                grep -qF -- "$s" "$name.$np.log" && ok || bad "$name at $np ranks: message lacks '$s': $(tail -2 "$name.$np.log")"
            done
        done
        # export and sample report it too, and write nothing
        "$BIN" export --init-from "$dir" --out "x_$name/model.safetensors" >"$name.x.log" 2>&1 </dev/null && bad "export $name: exit 0" || ok
        [ ! -e "x_$name" ] && ok || bad "export $name wrote x_$name: $(ls "x_$name")"
        "$BIN" sample --init-from "$dir" --logits "$name.bin" >"$name.s.log" 2>&1 </dev/null && bad "sample $name: exit 0" || ok
        [ ! -e "$name.bin" ] && ok || bad "sample $name wrote logits"
    done <bad/cases.txt
    [ $n -ge 20 ] && ok || bad "only $n damaged cases"
    # config.json far too large for its weights (issue 28 item 5): refused before the model is allocated:
    # under a 4 GiB address-space limit (the model vocab_size 10^8 describes needs tens of GiB; sample,
    # which has no data folder to refuse the vocabulary first, allocated it before) the error is still
    # the named one, and the peak RSS stays small.
    for name in huge_vocab huge_width huge_layers; do
        (ulimit -v 4194304 && exec /usr/bin/time -f "%M" -o "$name.rss" "$BIN" sample --init-from "bad/$name" \
            --logits "$name.v.bin") >"$name.v.log" 2>&1 </dev/null
        rc=$?
        [ $rc = 1 ] && grep -q "config.json" "$name.v.log" && ! grep -qi "no memory\|cannot allocate" "$name.v.log" &&
            ok || bad "$name under ulimit -v: exit $rc: $(grep -v '^  ' "$name.v.log" | tail -2)"
        rss=$(tail -1 "$name.rss")
        [ "${rss:-999999}" -lt 200000 ] && ok || bad "$name: peak RSS ${rss} KiB (want < 200000)"
    done
fi

echo "hf_roundtrip $PART: $pass checks passed, $fails failed"
[ $fails -eq 0 ] && [ $pass -gt 0 ]
