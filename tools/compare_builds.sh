#!/usr/bin/env bash
# compare_builds.sh — is a refactor bit for bit? Runs two fsdp-train binaries (say, main's and yours) on
# the same small jobs and compares what they write: every --metrics line but the timings (loss,
# grad_norm, lr, val_loss...), each rank's checkpoint shard and the manifest's checksums (cmp), and the
# text sampled after training (greedy and with the KV cache: the decode path) and without it.
#
# Jobs: GPT-2 and Llama (GQA, untied head, and a Qwen2-like one with q/k/v biases), fp32 and mixed
# precision (--mixed-compute on every path this CPU has), 1 and 2 ranks, with recompute and with
# packed documents (--pack doc: document masks and restarting positions).
#
# usage: tools/compare_builds.sh OLD_FSDP_TRAIN NEW_FSDP_TRAIN [WORKDIR]
# MEMORY_CHANGES="master ..." names memory categories a change is meant to move: their predicted and
# measured bytes are printed per job ("moved") instead of failing it; everything else must still match.
# Exit 0 when every job matches; each difference is printed. Takes about a minute on 2 cores.
set -uo pipefail
OLD=$(readlink -f "$1") NEW=$(readlink -f "$2")
WORK=${3:-$(mktemp -d)}
SRC=$(cd "$(dirname "$0")/.." && pwd)
MPIRUN="$SRC/tests/mpirun.sh"
mkdir -p "$WORK" && cd "$WORK" || exit 2
export OMP_NUM_THREADS=1
"$NEW" prepare --text "$SRC"/src/*/*.c --out data --val-fraction 0.1 --doc-sep '}' >prep.log 2>&1 ||
    { cat prep.log; exit 2; }

fails=0 jobs=0
run() { # dir np bin flags...
    local dir=$1 np=$2 bin=$3
    shift 3
    rm -rf "$dir" && mkdir -p "$dir"
    if [ "$np" = 1 ]; then
        "$bin" "$@" --checkpoint-dir "$dir/ck" --metrics "$dir/m.jsonl" >"$dir/log" 2>&1
    else
        "$MPIRUN" "$np" "$bin" "$@" --checkpoint-dir "$dir/ck" --metrics "$dir/m.jsonl" >"$dir/log" 2>&1
    fi
}
# the metrics without what a clock or the machine decides (times, rates, MFU, RSS); tracked memory stays,
# but for the total peak when MEMORY_CHANGES names categories that move (it moves with them)
strip() { python3 -c '
import json, sys
skip = ("_s", "rss", "flops", "mfu", "mem_total", "mem_pct", "straggler") + (("peak_mem",) if sys.argv[2].strip() else ())
for line in open(sys.argv[1]):
    o = json.loads(line)
    print(json.dumps({k: v for k, v in o.items() if not any(w in k for w in skip)}, sort_keys=True))
' "$1" "${MEMORY_CHANGES:-}" 2>/dev/null; }
# the sampled text; the memory report's rows (category, predicted and measured bytes)
sample() { sed -n '/^sample (/,/^done:/p' "$1" | grep -av '^done:'; }
memory() { grep -aE '^(master|optim|grad_shard|param_full|main_grad|activation|other) ' "$1" | awk '{print $1, $2, $4}'; }

compare() { # name np flags...
    local name=$1 np=$2
    shift 2
    jobs=$((jobs + 1))
    run "$name.old" "$np" "$OLD" "$@" || { echo "FAIL $name: the old binary failed: $(tail -3 "$name.old/log")"; fails=$((fails + 1)); return; }
    run "$name.new" "$np" "$NEW" "$@" || { echo "FAIL $name: the new binary failed: $(tail -3 "$name.new/log")"; fails=$((fails + 1)); return; }
    local bad=""
    cmp -s <(strip "$name.old/m.jsonl") <(strip "$name.new/m.jsonl") || bad+=" metrics"
    for f in $(cd "$name.old/ck" && find . -type f -name '*.bin' | sort); do
        cmp -s "$name.old/ck/$f" "$name.new/ck/$f" || bad+=" $f"
    done
    [ -n "$(cd "$name.old/ck" && find . -type f -name '*.bin')" ] || bad+=" (no checkpoint shards)"
    cmp -s <(sample "$name.old/log") <(sample "$name.new/log") || bad+=" sample"
    [ "$(sample "$name.new/log" | wc -l)" -ge 2 ] || bad+=" (no sample)"
    [ "$(memory "$name.new/log" | wc -l)" = 7 ] || bad+=" (no memory report)"
    local moved
    bad+=$(join <(memory "$name.old/log") <(memory "$name.new/log") | awk -v ok=" ${MEMORY_CHANGES:-} " \
        '($2 != $4 || $3 != $5) && index(ok, " " $1 " ") == 0 {printf " memory:%s(predicted %s->%s, measured %s->%s)", $1, $2, $4, $3, $5}')
    moved=$(join <(memory "$name.old/log") <(memory "$name.new/log") | awk -v ok=" ${MEMORY_CHANGES:-} " \
        '($2 != $4 || $3 != $5) && index(ok, " " $1 " ") > 0 {printf " %s %s->%s (measured %s->%s)", $1, $2, $4, $3, $5}')
    [ -n "$moved" ] && echo "moved $name:$moved"
    if [ -n "$bad" ]; then
        echo "FAIL $name:$bad"
        fails=$((fails + 1))
    else
        echo "same $name ($(wc -l <"$name.new/m.jsonl") metric lines, $(cd "$name.new/ck" && find . -name '*.bin' | wc -l) shard files)"
    fi
}

COMMON=(--data data --layers 2 --seq-len 32 --batch 8 --micro-batches 2 --steps 30 --eval-every 15 --threads 1
        --lr 3e-3 --warmup 3 --sample-tokens 24 --temperature 0)
GPT=(--model gpt2 --width 64 --heads 4)
LLAMA=(--model llama --width 64 --heads 4 --kv-heads 2 --tie-embeddings 0 --intermediate 96)
QWEN=(--model llama --width 48 --heads 4 --kv-heads 1 --qkv-bias --tie-embeddings 1 --intermediate 80)
for np in 1 2; do
    for m in GPT LLAMA QWEN; do
        declare -n shape=$m
        compare "$m-fp32-np$np" $np "${COMMON[@]}" "${shape[@]}" --precision fp32
        for mc in bf16 f32; do
            compare "$m-mixed-$mc-np$np" $np "${COMMON[@]}" "${shape[@]}" --precision mixed --mixed-compute $mc
        done
        compare "$m-recompute-doc-np$np" $np "${COMMON[@]}" "${shape[@]}" --precision mixed --mixed-compute f32 \
            --recompute --pack doc --kv-cache=0
    done
done
echo "compare_builds: $((jobs - fails)) same, $fails different (old $OLD, new $NEW)"
[ "$fails" = 0 ]
