#!/usr/bin/env bash
# bench_llama.sh BUILD TORCH_PYTHON [SHAPE...] — tokens/s of `fsdp-train --model llama` at 1 and 2 ranks
# against transformers' LlamaForCausalLM / Qwen2ForCausalLM (tools/bench_torch_llama.py, fp32 and bf16
# autocast) on the same shape, batch and CPU, one after the other in one run (the machine's load changes
# slowly, so compare the ratios of one run). Steps after the first are averaged. Peak memory per rank:
# fsdp.c's tracked peak and RSS, PyTorch's ru_maxrss. TORCH_PYTHON: a venv with PyPI's torch 2.x and
# transformers 4.46 (e.g. /tmp/torch2/bin/python); never the repository's .venv. At 2 ranks it also runs
# PyTorch FSDP2 (tools/bench_fsdp2_llama.py: fully_shard per decoder layer and root, gloo, 1 thread per
# rank) right after fsdp.c's 2-rank run and prints the ratio and both sides' peak memory per rank.
# SHAPE: smollm (SmolLM2-135M: L30 C576 9/3 heads I1536 V49152 tied) | qwen05 (Qwen2.5-0.5B: L24 C896
# 14/2 heads I4864 V151936 tied, q/k/v biases). Env: B (4), T (256), STEPS (3), MODES (fsdp.c's: mixed fp32),
# TORCH_MODES (fp32 bf16; bf16 autocast is slow on CPUs without AVX512-BF16: over 5 minutes for 3 steps here),
# FSDP2_MODES (fp32; bf16 = MixedPrecisionPolicy with bf16 parameters, equally slow there).
set -uo pipefail
BUILD=$1 PY=$2
shift 2
SHAPES=${*:-smollm}
SRC=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-4} T=${T:-256} STEPS=${STEPS:-3}
W=$(mktemp -d) RUNS=0
trap 'rm -rf "$W"' EXIT
head -c 2000000 /usr/share/games/fortunes/fortunes >"$W/t.txt"
"$BUILD/fsdp-train" prepare --text "$W/t.txt" --out "$W/data" >/dev/null || exit 1
rm -f "$W/data/meta.json" # byte tokens as ids of the larger vocabulary
lscpu | grep -E "Model name|^CPU\(s\)" | sed 's/  */ /g'
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) (B=$B T=$T, steps $STEPS, the first not counted)"
fsdp() { # NP PRECISION ARGS...
    local np=$1 prec=$2
    shift 2
    local cmd=("$BUILD/fsdp-train" "$@" --data "$W/data" --seq-len $T --batch $B --steps $STEPS --eval-every 0
               --sample-tokens 0 --checkpoint-every 0 --checkpoint-dir "$W/ck$((++RUNS))" --log-every 1 --precision $prec
               --metrics "$W/m$RUNS.jsonl")
    if [ "$np" = 1 ]; then "${cmd[@]}" >"$W/f.log" 2>&1; else "$SRC/tests/mpirun.sh" $np "${cmd[@]}" >"$W/f.log" 2>&1; fi ||
        { echo "fsdp-train failed: $(tail -3 "$W/f.log")"; return; }
    python3 - "$W/f.log" $np $prec "$W/f$np.tps" "$W/m$RUNS.jsonl" <<'PY'
import json, re, sys
t = open(sys.argv[1]).read()
tps = [float(x) for x in re.findall(r"\| ([0-9.]+) tok/s", t)][1:]
mfu = [float(x) for x in re.findall(r"MFU ([0-9.]+)%", t)][1:]
pk = re.search(r"peak memory ([0-9.]+ [GM]iB) per rank", t)
rss = re.findall(r"RSS ([0-9.]+ [GM]iB)", t)
if not rss:  # under a launcher the step lines are short: rank 0's peak RSS from its --metrics
    try:
        last = [json.loads(l) for l in open(sys.argv[5]) if l.startswith('{"step"')][-1]
        rss = ["%.2f GiB (rank 0)" % (last["peak_rss_bytes"] / 2**30)]
    except (OSError, IndexError, KeyError, ValueError):
        rss = []
print(f"fsdp.c {sys.argv[3]:5s} {sys.argv[2]} rank(s): {sum(tps)/len(tps):8.1f} tokens/s  (MFU vs the start-up "
      f"probe {sum(mfu)/len(mfu):.0f}%), tracked peak {pk.group(1) if pk else '?'}, RSS {rss[-1] if rss else '?'} per rank")
open(sys.argv[4], "w").write(str(sum(tps) / len(tps)))
PY
}
torch_run() { # MODE ARGS...
    local mode=$1
    shift
    "$PY" "$SRC/tools/bench_torch_llama.py" "$@" --B $B --T $T --steps $((STEPS - 1)) --threads 2 --mode $mode 2>"$W/t.err" |
        python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print("torch %s %-5s 1 rank   : %8.1f tokens/s  (%d threads), peak RSS %.2f GiB" % (r["torch"], r["mode"], r["tokens_per_s"], r["threads"], r["peak_rss"] / 2**30))' ||
        echo "torch failed: $(tail -2 "$W/t.err")"
}
fsdp2_run() { # MODE ARGS... (after fsdp 2: compares with its tokens/s)
    local mode=$1
    shift
    "$PY" "$SRC/tools/bench_fsdp2_llama.py" "$@" --B $B --T $T --steps $((STEPS - 1)) --world 2 --threads 1 --mode $mode \
        2>"$W/t.err" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
rss = ", ".join("%.2f" % (x / 2**30) for x in r["peak_rss"])
try:
    ratio = " (fsdp.c mixed 2 ranks: %.2fx)" % (float(open(sys.argv[1]).read()) / r["tokens_per_s"])
except (OSError, ValueError):
    ratio = ""
print("torch %s FSDP2 %-5s 2 ranks: %8.1f tokens/s  (%d thread per rank)%s, peak RSS per rank %s GiB"
      % (r["torch"], r["mode"], r["tokens_per_s"], r["threads"], ratio, rss))' "$W/f2.tps" ||
        echo "FSDP2 failed: $(tail -2 "$W/t.err")"
}
for s in $SHAPES; do
    case $s in
    smollm) F=(--model llama --layers 30 --width 576 --heads 9 --kv-heads 3 --intermediate 1536 --vocab 49152 --tie-embeddings 1)
            P=(--arch llama --L 30 --C 576 --NH 9 --NKV 3 --I 1536 --V 49152 --tie) ;;
    qwen05) F=(--model llama --hf-architecture Qwen2ForCausalLM --layers 24 --width 896 --heads 14 --kv-heads 2 --intermediate 4864
               --vocab 151936 --tie-embeddings 1 --qkv-bias --rope-theta 1000000 --norm-eps 1e-6)
            P=(--arch qwen2 --L 24 --C 896 --NH 14 --NKV 2 --I 4864 --V 151936 --tie) ;;
    *) echo "unknown shape $s"; exit 2 ;;
    esac
    echo "== $s"
    for prec in ${MODES:-mixed fp32}; do fsdp 1 $prec "${F[@]}" --threads 2; done
    for m in ${TORCH_MODES-fp32 bf16}; do torch_run $m "${P[@]}"; done
    rm -f "$W/f2.tps"
    fsdp 2 mixed "${F[@]}" --threads 1
    for m in ${FSDP2_MODES-fp32}; do fsdp2_run $m "${P[@]}"; done
done
