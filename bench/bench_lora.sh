#!/usr/bin/env bash
# bench_lora.sh — LoRA against full fine-tuning in fsdp.c on a real model's shape (random weights: the
# cost does not depend on their values): median step time and tokens/s (steps after the first, rounds
# alternating full and LoRA so both see the same machine load), and per-rank memory from the run's
# --report (measured peaks; master + optim + grad_shard is the model state the ZeRO formula counts).
# LoRA: rank 16 on all seven projections, alpha 32; the base frozen in bf16 (--precision mixed).
#
# usage: bench/bench_lora.sh FSDP_TRAIN [SHAPE (qwen0.5b | llama1b | small, default qwen0.5b)]
#                            [NPS (default "1 2")] [ROUNDS (default 2)] [WORKDIR]
# Prints the CPU first (lscpu model name and SIMD flags): state it beside any figure quoted.
set -uo pipefail
BIN=$(readlink -f "$1")
SHAPE=${2:-qwen0.5b}
NPS=${3:-1 2}
ROUNDS=${4:-2}
WORK=${5:-$(mktemp -d)}
SRC=$(cd "$(dirname "$0")/.." && pwd)
MPIRUN="$SRC/tests/mpirun.sh"
mkdir -p "$WORK" && cd "$WORK" || exit 2
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores," \
    "flags: $(grep -o -w 'avx2\|avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
case $SHAPE in
qwen0.5b) # Qwen2.5-0.5B
    M=(--model llama --layers 24 --width 896 --intermediate 4864 --heads 14 --kv-heads 2 --vocab 151936
        --tie-embeddings 1 --qkv-bias --rope-theta 1000000) ;;
llama1b) # Llama-3.2-1B (without its rope scaling: the same cost)
    M=(--model llama --layers 16 --width 2048 --intermediate 8192 --heads 32 --kv-heads 8 --vocab 128256
        --tie-embeddings 1 --rope-theta 500000) ;;
small)
    M=(--model llama --layers 4 --width 256 --intermediate 768 --heads 8 --kv-heads 2 --vocab 4096) ;;
*) echo "unknown shape $SHAPE" >&2; exit 2 ;;
esac
"$BIN" prepare --text "$SRC"/src/*/*.c --out data --val-fraction 0.05 >prep.log 2>&1 || { cat prep.log; exit 2; }
COMMON=(train --data data "${M[@]}" --seq-len 256 --batch 4 --steps 4 --eval-every 0 --sample-tokens 0
    --peak-gflops -1 --precision mixed --lr 1e-4 --min-lr 1e-5 --warmup 1)

one() { # NP TAG ARGS...: one run; metrics into m_TAG.jsonl, report into r_TAG.json
    local np=$1 tag=$2
    shift 2
    rm -rf ck
    if [ "$np" = 1 ]; then
        "$BIN" "${COMMON[@]}" "$@" --checkpoint-dir ck --metrics "m_$tag.jsonl" --report "r_$tag.json" >run.log 2>&1
    else
        "$MPIRUN" "$np" "$BIN" "${COMMON[@]}" "$@" --checkpoint-dir ck --metrics "m_$tag.jsonl" \
            --report "r_$tag.json" >run.log 2>&1
    fi || { echo "FAIL: $*: $(tail -3 run.log)"; exit 1; }
}
for np in $NPS; do
    rm -f m_full_$np.jsonl m_lora_$np.jsonl
    for r in $(seq "$ROUNDS"); do
        one "$np" "full_$np" --steps 4
        one "$np" "lora_$np" --lora-rank 16 --lora-alpha 32
    done
done
python3 - "$SHAPE" "$NPS" <<'EOF'
import json, statistics, sys
shape, nps = sys.argv[1], sys.argv[2].split()
def med(tag):
    v = [json.loads(l) for l in open(f"m_{tag}.jsonl") if l.startswith('{"step"')]
    return statistics.median(x["step_s"] for x in v if x["step"] > 1)
MiB = 1 << 20
print(f"{shape}: seq 256 x batch 4 (1024 tokens a step), mixed precision; LoRA rank 16 on q,k,v,o,gate,up,down")
print(f"{'ranks':>5} {'mode':>5} {'step s':>8} {'tok/s':>8} {'state MiB/rank':>15} {'peak MiB/rank':>14} {'trainable':>12}")
for np in nps:
    row = {}
    for mode in ("full", "lora"):
        tag = f"{mode}_{np}"
        rep = json.load(open(f"r_{tag}.json"))["measured"]
        rp = json.load(open(f"r_{tag}.json"))
        state = rep["master"] + rep["optim"] + rep["grad_shard"]
        s = med(tag)
        row[mode] = (s, state, rep["total"])
        print(f"{np:>5} {mode:>5} {s:8.2f} {1024 / s:8.0f} {state / MiB:15.1f} {rep['total'] / MiB:14.1f} "
              f"{rp['n_params'] - rp['n_frozen']:>12}")
    print(f"{np:>5} ratio LoRA/full: tokens/s {row['full'][0] / row['lora'][0]:.2f}x, model state "
          f"{row['lora'][1] / row['full'][1]:.3f}x, peak {row['lora'][2] / row['full'][2]:.3f}x")
EOF
