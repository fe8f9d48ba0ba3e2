#!/usr/bin/env bash
# bench_bpe.sh — BPE encoding speed, fsdp.c's encoder (build/tests/bpe_tool --bench) against the `tokenizers`
# library's Tokenizer.encode (one call per file, one thread each: RAYON_NUM_THREADS=1, best of 3), with a
# GPT-2 style BPE that tokenizers trains on two of the default corpus's files, on the same inputs:
#  corpus: the whole default corpus (the plain-text fortune files);
#  word:   one 1 MB word of random letters a-j (the merge loop's length scaling, issue 28 item 6);
#  added:  the corpus with the same BPE plus 2000 added tokens (<|tok_N|>, a few hundred of them in the
#          text): the added-token matching's scaling;
#  llama3: the corpus with the real Llama 3 tokenizer (128256 tokens, its Split pattern, ignore_merges),
#          when tools/test-deps.sh has cached llama.cpp's vocabularies (tests/train/bpe_real.sh);
# and prints each side's MB/s and fsdp.c's speed as a multiple of tokenizers'. Both sides' ids are the
# same (test train/bpe checks it).
# usage: bench/bench_bpe.sh BUILD_DIR [VOCAB]   (default 2000; needs the test venv, tools/test-deps.sh)
set -euo pipefail
BUILD=$(cd "$1" && pwd)
VOCAB=${2:-2000}
SRC=$(cd "$(dirname "$0")/.." && pwd)
PY="$SRC/.venv/bin/python"
W="$BUILD/bench_bpe"
rm -rf "$W" && mkdir -p "$W/corpus" "$W/word"
for f in /usr/share/games/fortunes/*; do
    case "$f" in *.dat | *.u8) continue ;; esac
    [ -f "$f" ] && [ ! -L "$f" ] && cp "$f" "$W/corpus/"
done
"$PY" -c "import random; random.seed(1); open('$W/word/word1m.txt', 'w').write(''.join(random.choice('abcdefghij') for _ in range(1 << 20)))"
"$PY" "$SRC/tools/bpe_fixture.py" train "$W/tok.json" "$W/corpus/fortunes" "$W/corpus/computers" --vocab "$VOCAB" >/dev/null
mkdir -p "$W/added"
"$PY" - "$W" <<'PYEOF'
import glob, json, os, random, sys
w = sys.argv[1]
j = json.load(open(w + "/tok.json", encoding="utf-8"))
base = max(j["model"]["vocab"].values()) + 1
j["added_tokens"] += [{"id": base + k, "content": f"<|tok_{k}|>", "single_word": False, "lstrip": False,
                       "rstrip": False, "normalized": False, "special": True} for k in range(2000)]
json.dump(j, open(w + "/added.json", "w", encoding="utf-8"), ensure_ascii=False)
rng = random.Random(1)
for p in glob.glob(w + "/corpus/*"):
    t = open(p, encoding="utf-8", errors="surrogateescape").read().split("\n")
    t = [line + (f"<|tok_{rng.randrange(2000)}|>" if rng.random() < 0.01 else "") for line in t]
    open(w + "/added/" + os.path.basename(p), "w", encoding="utf-8", errors="surrogateescape").write("\n".join(t))
PYEOF
VOCABS=${FSDP_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fsdp-test}/llama-cpp-python-0.3.36
sets="corpus word added"
if [ -f "$VOCABS/complete" ]; then
    PYTHONPATH="$VOCABS/gguf-py" "$PY" "$SRC/tools/gguf_vocab.py" json "$VOCABS/models/ggml-vocab-llama-bpe.gguf" "$W/llama3.json" >/dev/null
    ln -s corpus "$W/llama3"
    sets="$sets llama3"
fi
echo "BPE vocabulary $VOCAB; CPU: $(lscpu | sed -n 's/^Model name: *//p'), one thread"
for set in $sets; do
    tok="$W/tok.json"
    [ "$set" = added ] && tok="$W/added.json"
    [ "$set" = llama3 ] && tok="$W/llama3.json"
    ours=$("$BUILD/tests/bpe_tool" "$tok" --bench 3 "$W/$set"/* | tail -1)
    theirs=$(RAYON_NUM_THREADS=1 "$PY" "$SRC/tools/bpe_fixture.py" bench "$tok" "$W/$set"/* --reps 3)
    a=$(sed -n 's/.*= \([0-9.]*\) MB\/s.*/\1/p' <<<"$ours")
    b=$(sed -n 's/.*= \([0-9.]*\) MB\/s.*/\1/p' <<<"$theirs")
    echo "$set ($(ls "$W/$set" | wc -l) files, $(cat "$W/$set"/* | wc -c) bytes):"
    echo "  $ours"
    echo "  $theirs"
    awk -v a="$a" -v b="$b" 'BEGIN { printf "  fsdp.c / tokenizers: %.2fx\n", a / b }'
done
