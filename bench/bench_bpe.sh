#!/usr/bin/env bash
# bench_bpe.sh — BPE encoding speed, fsdp.c's encoder (build/tests/bpe_tool --bench) against the `tokenizers`
# library's Tokenizer.encode (one call per file, one thread each: RAYON_NUM_THREADS=1, best of 3), with a
# GPT-2 style BPE that tokenizers trains on two of the default corpus's files, on the same inputs:
#  corpus: the whole default corpus (the plain-text fortune files);
#  word:   one 1 MB word of random letters a-j (the merge loop's length scaling, issue 28 item 6);
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
echo "BPE vocabulary $VOCAB; CPU: $(lscpu | sed -n 's/^Model name: *//p'), one thread"
for set in corpus word; do
    ours=$("$BUILD/tests/bpe_tool" "$W/tok.json" --bench 3 "$W/$set"/* | tail -1)
    theirs=$(RAYON_NUM_THREADS=1 "$PY" "$SRC/tools/bpe_fixture.py" bench "$W/tok.json" "$W/$set"/* --reps 3)
    a=$(sed -n 's/.*= \([0-9.]*\) MB\/s.*/\1/p' <<<"$ours")
    b=$(sed -n 's/.*= \([0-9.]*\) MB\/s.*/\1/p' <<<"$theirs")
    echo "$set ($(ls "$W/$set" | wc -l) files, $(cat "$W/$set"/* | wc -c) bytes):"
    echo "  $ours"
    echo "  $theirs"
    awk -v a="$a" -v b="$b" 'BEGIN { printf "  fsdp.c / tokenizers: %.2fx\n", a / b }'
done
