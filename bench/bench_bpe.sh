#!/usr/bin/env bash
# bench_bpe.sh — BPE encoding speed on the whole default corpus (the plain-text fortune files), side by side:
# fsdp.c's encoder (build/tests/bpe_tool --bench) and the `tokenizers` library's Tokenizer.encode, one call
# per file, one thread each (RAYON_NUM_THREADS=1), best of 3, with a GPT-2 style BPE that tokenizers trains on
# two of the files. Both sides' ids are the same (test train/bpe checks it).
# usage: bench/bench_bpe.sh BUILD_DIR [VOCAB]   (default 2000; needs the test venv, tools/test-deps.sh)
set -euo pipefail
BUILD=$(cd "$1" && pwd)
VOCAB=${2:-2000}
SRC=$(cd "$(dirname "$0")/.." && pwd)
PY="$SRC/.venv/bin/python"
W="$BUILD/bench_bpe"
rm -rf "$W" && mkdir -p "$W/corpus"
for f in /usr/share/games/fortunes/*; do
    case "$f" in *.dat | *.u8) continue ;; esac
    [ -f "$f" ] && [ ! -L "$f" ] && cp "$f" "$W/corpus/"
done
"$PY" "$SRC/tools/bpe_fixture.py" train "$W/tok.json" "$W/corpus/fortunes" "$W/corpus/computers" --vocab "$VOCAB" >/dev/null
echo "corpus: $(ls "$W/corpus" | wc -l) files, $(cat "$W"/corpus/* | wc -c) bytes; BPE vocabulary $VOCAB; CPU: $(lscpu | sed -n 's/^Model name: *//p')"
"$BUILD/tests/bpe_tool" "$W/tok.json" --bench 3 "$W"/corpus/* | tail -1
RAYON_NUM_THREADS=1 "$PY" "$SRC/tools/bpe_fixture.py" bench "$W/tok.json" "$W"/corpus/* --reps 3
