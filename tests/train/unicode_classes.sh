#!/usr/bin/env bash
# unicode_classes.sh — every Unicode code point (1,112,064 of them, surrogates left out) is classed by
# fsdp.c's pre-tokenizer (letter, number, white space, other; and number or not for the Digits
# pre-tokenizer) exactly as by the `tokenizers` library that tools/test-deps.sh installs for it
# (0.23.3, what transformers 5 brings): bpe_tool --classes against tools/unicode_probe.py.
# A newly assigned letter classed as "other" splits words differently from the Hub's tokenizers.
# usage: unicode_classes.sh BPE_TOOL PYTHON WORKDIR
set -uo pipefail
TOOL=$1 PY=$2 WORK=$3
SRC=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
"$PY" "$SRC/tools/unicode_probe.py" theirs.txt --version 2>version.txt || { echo "FAIL: probe: $(cat version.txt)" >&2; exit 1; }
"$TOOL" --classes >ours.txt || { echo "FAIL: bpe_tool --classes" >&2; exit 1; }
fails=0
n=$(wc -l <theirs.txt)
[ "$n" = 1112064 ] || { echo "FAIL: the probe classed $n code points, want 1112064" >&2; fails=1; }
[ "$(wc -l <ours.txt)" = 1112064 ] || { echo "FAIL: bpe_tool classed $(wc -l <ours.txt) code points" >&2; fails=1; }
grep -q "^tokenizers 0.23.3$" version.txt || { echo "FAIL: the tables follow tokenizers 0.23.3; $PY has $(cat version.txt)" >&2; fails=1; }
if ! cmp -s ours.txt theirs.txt; then
    d=$(diff ours.txt theirs.txt | grep -c '^<')
    echo "FAIL: $d code points classed otherwise than by $(cat version.txt) (ours < > theirs):" >&2
    diff ours.txt theirs.txt | head -12 >&2
    fails=1
fi
[ $fails = 0 ] && echo "unicode_classes: all $n code points as $(cat version.txt) classes them"
exit $fails
