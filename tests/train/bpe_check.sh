#!/usr/bin/env bash
# bpe_check.sh — fsdp.c's byte-level BPE against the `tokenizers` library: a GPT-2 style BPE trained by
# tokenizers on part of the default corpus (tools/bpe_fixture.py); fsdp.c's ids equal tokenizers' on
# every file of the default corpus and on a file of hard cases, decode(encode(x)) == x on all of them and
# on invalid UTF-8; `prepare --tokenizer` writes exactly tokenizers' ids; malformed tokenizer.json files
# are refused naming the file and field, with nothing written.
# usage: bpe_check.sh FSDP_TRAIN BPE_TOOL PYTHON WORKDIR
set -uo pipefail
BIN=$1 TOOL=$2 PY=$3 WORK=$4
SRC=$(cd "$(dirname "$0")/../.." && pwd)
FIX="$SRC/tools/bpe_fixture.py"
rm -rf "$WORK" && mkdir -p "$WORK/corpus" && cd "$WORK" || exit 1
fails=0 pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
if ! "$PY" -c "import tokenizers" 2>/dev/null; then
    echo "FAIL: $PY cannot import tokenizers: run tools/test-deps.sh (tools/test.sh does)" >&2
    exit 1
fi
# The default corpus (tools/setup.sh's): the plain-text fortune files.
for f in /usr/share/games/fortunes/*; do
    case "$f" in *.dat | *.u8) continue ;; esac
    [ -f "$f" ] && [ ! -L "$f" ] && cp "$f" corpus/
done
files=(corpus/*)
[ ${#files[@]} -ge 10 ] && ok || bad "default corpus: only ${#files[@]} files in /usr/share/games/fortunes"
"$PY" "$FIX" train tok.json corpus/fortunes corpus/computers --vocab 2000 >train.log 2>&1 || bad "train: $(cat train.log)"
"$PY" "$FIX" hard . >hard.log 2>&1 || bad "hard: $(cat hard.log)"

# ids and round trips
"$TOOL" tok.json --ids "${files[@]}" hard.txt invalid.bin >rt.log 2>&1 && ok || bad "round trips: $(grep -v exact rt.log | head)"
[ "$(grep -c 'round trip exact' rt.log)" = $((${#files[@]} + 2)) ] && ok || bad "not every file round-tripped"
"$PY" "$FIX" ids tok.json "${files[@]}" hard.txt >ids.log 2>&1 && ok || bad "ids differ from tokenizers': $(grep -v '^ok' ids.log | head)"
[ "$(grep -c '^ok' ids.log)" = $((${#files[@]} + 1)) ] && ok || bad "ids checked on every file"

# prepare --tokenizer: [eot] + ids per file (no --doc-sep, --val-fraction 0)
"$BIN" prepare --tokenizer tok.json --text corpus/fortunes hard.txt corpus/linux --out data --val-fraction 0 >prep.log 2>&1 ||
    bad "prepare: $(cat prep.log)"
"$PY" "$FIX" prepared tok.json data/train.bin corpus/fortunes hard.txt corpus/linux && ok || bad "prepare's ids"
cmp -s tok.json data/tokenizer.json && ok || bad "prepare copies the tokenizer into the folder"
grep -q '"vocab":[[:space:]]*2000' data/meta.json && grep -q '"tokenizer":[[:space:]]*"tokenizer.json"' data/meta.json && ok ||
    bad "meta.json records the tokenizer and its vocabulary: $(cat data/meta.json)"
grep -q "MB/s" prep.log && ok || bad "prepare reports its speed"
# preparing again with the folder's own copy of the tokenizer works and leaves it as it is
"$BIN" prepare --tokenizer data/tokenizer.json --text hard.txt --out data --val-fraction 0 >prep2.log 2>&1 && cmp -s tok.json data/tokenizer.json &&
    ok || bad "prepare with the folder's own tokenizer: $(cat prep2.log)"

# malformed tokenizers
"$PY" "$FIX" bad tok.json badtok >badtok.log 2>&1 || bad "bad: $(cat badtok.log)"
n=0
while IFS='|' read -r file needles; do
    n=$((n + 1))
    name=$(basename "$file" .json)
    "$BIN" prepare --tokenizer "$file" --text hard.txt --out "out_$name" >"$name.log" 2>&1 </dev/null && bad "$name: exit 0" || ok
    [ ! -e "out_$name" ] && ok || bad "$name: wrote out_$name"
    grep -qF -- "$file" "$name.log" && ok || bad "$name: message does not name the file: $(cat "$name.log")"
    IFS='|' read -ra ns <<<"$needles"
    for s in "${ns[@]}"; do
        grep -qF -- "$s" "$name.log" && ok || bad "$name: message lacks '$s': $(cat "$name.log")"
    done
done <badtok/cases.txt
[ $n -ge 10 ] && ok || bad "only $n malformed cases"

echo "bpe_check: $pass checks passed, $fails failed"
[ $fails -eq 0 ] && [ $pass -gt 0 ]
