#!/usr/bin/env bash
# freeze.sh — fsdp-train --freeze end to end, on the Llama fixture's Hugging Face folder (tools/llama_reference.py):
#  - a glob that matches no tensor is refused before anything is written, naming the model's tensors;
#  - a fine-tune at 2 ranks with h0.* and root.embed_tokens frozen: the report's master, optim,
#    grad_shard, param_full and main_grad are predicted to the byte (tests/train/check_report.py);
#  - its export holds the frozen tensors bit-identical to the folder it started from and the others
#    changed; a resume from its mid-run checkpoint at 2 ranks ends in the same checkpoint files, and at
#    1 rank (another world size) it resumes too;
#  - a resume whose --freeze differs, or whose --init-from folder's frozen weights changed on disk (the
#    manifest's digest), is refused and trains nothing; a run from --seed (no folder) resumes with its
#    --seed (the frozen tensors initialised again), and `sample --checkpoint` of it loads;
#  - with weights frozen in every block the plan's `other` (GEMM workspace) is exact: no dW GEMM counted.
# usage: freeze.sh FSDP_TRAIN MPIRUN_SH PYTHON FIXTURE_DIR WORKDIR
set -uo pipefail
BIN=$1 MPIRUN=$2 PY=$3 FX=$4 WORK=$5
SRC=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
export OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore
source "$SRC/tests/lib_common.sh" # ok, bad, finish
run() {
    local np=$1
    shift
    if [ "$np" = 1 ]; then "$BIN" "$@" </dev/null; else "$MPIRUN" "$np" "$BIN" "$@" </dev/null; fi
}
[ -d "$FX/llama_f32" ] || { echo "FAIL: no fixture folder $FX/llama_f32"; exit 1; }
cp -r "$FX/llama_f32" base
head -c 100000 /usr/share/games/fortunes/fortunes >t.txt
"$BIN" prepare --text t.txt --out data --doc-sep % >prep.log 2>&1 || bad "prepare: $(tail -3 prep.log)"
A=(train --data data --batch 4 --seq-len 32 --sample-tokens 0 --eval-every 0 --threads 1 --peak-gflops -1)
F="h0.*,root.embed_tokens"

# 1. a glob that names nothing
if run 1 "${A[@]}" --init-from base --steps 2 --freeze "h0.*,root.embed" --checkpoint-dir nomatch >nm.log 2>&1; then
    bad "--freeze root.embed (no such tensor) was accepted"
elif grep -q '"root.embed" matches no tensor' nm.log && grep -q "root.embed_tokens" nm.log && [ ! -e nomatch/latest ]; then
    ok
else
    bad "no-match error: $(tail -2 nm.log)"
fi

# 2. the fine-tune, its report and its export
if run 2 "${A[@]}" --init-from base --steps 6 --checkpoint-every 3 --freeze "$F" --checkpoint-dir ck \
    --report rep.json >run.log 2>&1; then
    ok
    grep -q "^frozen (--freeze): 55424 of 110912 parameters; trainable: 55488" run.log && ok ||
        bad "frozen line: $(grep -m1 frozen run.log)"
    "$PY" "$SRC/tests/train/check_report.py" rep.json --world 2 --exact-only && ok || bad "report of the frozen run"
else
    bad "frozen fine-tune: $(tail -3 run.log)"
fi
if run 1 export --checkpoint ck --out ex/model.safetensors >ex.log 2>&1; then
    "$PY" - base/model.safetensors ex/model.safetensors <<'EOF' && ok || bad "export against the starting folder"
import sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
frozen = lambda n: n == "model.embed_tokens.weight" or n.startswith("model.layers.0.")
bad = [n for n in b if (frozen(n) != bool((a[n].float() == b[n]).all()))]
print(f"export: {sum(map(frozen, b))} frozen tensors as they started, {len(b) - sum(map(frozen, b))} trained")
sys.exit(1 if bad or set(a) != set(b) else 0)
EOF
else
    bad "export: $(tail -2 ex.log)"
fi

# 3. resumes: same world (bit-identical), another world
mkdir -p ck2 && cp -r ck/step_000003 ck2/ && echo step_000003 >ck2/latest
if run 2 "${A[@]}" --init-from base --steps 6 --checkpoint-every 3 --freeze "$F" --checkpoint-dir ck2 --resume \
    >res.log 2>&1; then
    cmp -s ck/step_000006/rank_00000.bin ck2/step_000006/rank_00000.bin &&
        cmp -s ck/step_000006/rank_00001.bin ck2/step_000006/rank_00001.bin && ok ||
        bad "resumed run's step 6 shards differ from the uninterrupted run's"
else
    bad "resume at 2 ranks: $(tail -3 res.log)"
fi
mkdir -p ck3 && cp -r ck/step_000003 ck3/ && echo step_000003 >ck3/latest
run 1 "${A[@]}" --init-from base --steps 4 --freeze "$F" --checkpoint-dir ck3 --resume >res1.log 2>&1 && ok ||
    bad "resume at 1 rank: $(tail -3 res1.log)"

# 4. refusals: another --freeze; the frozen weights changed on disk
mkdir -p ck4 && cp -r ck/step_000003 ck4/ && echo step_000003 >ck4/latest
if run 1 "${A[@]}" --init-from base --steps 6 --freeze "h0.*" --checkpoint-dir ck4 --resume >rf.log 2>&1; then
    bad "a resume with another --freeze was accepted"
else
    grep -q "use the --freeze the checkpoint was trained with" rf.log && ok || bad "another --freeze: $(tail -2 rf.log)"
fi
"$PY" - base/model.safetensors <<'EOF' || bad "editing the base"
import sys
from safetensors.torch import load_file, save_file
t = load_file(sys.argv[1])
t["model.layers.0.mlp.down_proj.weight"][3, 5] += 0.25
save_file(t, sys.argv[1], metadata={"format": "pt"})
EOF
if run 1 "${A[@]}" --init-from base --steps 6 --freeze "$F" --checkpoint-dir ck4 --resume >rd.log 2>&1; then
    bad "a resume over changed frozen weights was accepted"
else
    grep -q "unit h0's frozen weights are not those the checkpoint was trained with" rd.log && ok ||
        bad "changed frozen weights: $(tail -2 rd.log)"
    [ ! -e ck4/step_000006 ] && ok || bad "the refused resume wrote a checkpoint"
fi

# 5. frozen weights from --seed (no folder)
S=(--model llama --layers 2 --width 64 --heads 4 --kv-heads 2 --vocab 300 --freeze "h1.*")
run 1 "${A[@]}" "${S[@]}" --seed 7 --steps 2 --checkpoint-dir cs >s1.log 2>&1 && ok || bad "seed run: $(tail -2 s1.log)"
if run 1 "${A[@]}" "${S[@]}" --seed 8 --steps 3 --checkpoint-dir cs --resume >s2.log 2>&1; then
    bad "a resume with another --seed was accepted"
else
    grep -q "resume with --seed 7" s2.log && ok || bad "another --seed: $(tail -2 s2.log)"
fi
run 1 "${A[@]}" "${S[@]}" --seed 7 --steps 3 --checkpoint-dir cs --resume >s3.log 2>&1 && ok ||
    bad "seed resume: $(tail -2 s3.log)"
run 2 sample --checkpoint cs --logits cs.bin >s4.log 2>&1 && [ -s cs.bin ] && ok || bad "sample of the seed run: $(tail -2 s4.log)"

# 6. the memory plan's `other` (the GEMM workspace) to the byte when --freeze drops weight-gradient GEMMs:
# GPT-2 with the MLP's weights frozen in every block (before: the plan counted their dW GEMMs, whose
# workspace is the largest, and predicted 133380 bytes against 100612 measured in fp32)
for p in fp32 mixed; do
    run 1 "${A[@]}" --model gpt2 --layers 2 --width 64 --heads 4 --vocab 300 --seed 3 --steps 2 --precision $p \
        --freeze "h*.fc_w,h*.fcproj_w" --checkpoint-dir cg$p --report g$p.json >g$p.log 2>&1 &&
        "$PY" "$SRC/tests/train/check_report.py" g$p.json --world 1 && ok || bad "GPT-2 MLP frozen ($p): plan of other"
done

finish
