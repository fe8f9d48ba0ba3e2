#!/usr/bin/env bash
# bpe_real.sh — fsdp.c's tokenizer (src/data/bpe.c) on the pre-tokenizers of GPT-2, Llama 3, Qwen2 and
# SmolLM, against two independent references:
#  real:   the real GPT-2, Llama 3 (llama-bpe), Qwen2, StarCoder and Refact vocabularies (StarCoder's and
#          Refact's pre-tokenizer is SmolLM's: Digits then ByteLevel) that llama.cpp ships as vocab-only
#          GGUF files with test strings and the ids the original Hugging Face tokenizers gave them
#          (tools/test-deps.sh caches them; tools/gguf_vocab.py rebuilds each model's tokenizer.json);
#  random: BPEs that the `tokenizers` library trains with each of those normalizers and pre-tokenizers
#          (tools/bpe_fixture.py random), on random texts of many scripts, Unicode 15-17 letters and numbers,
#          white space, contractions, marks NFC composes and special tokens: ids equal to tokenizers'.
# Round trips are exact (on the NFC form of the text for Qwen2's normalizer).
# usage: bpe_real.sh BPE_TOOL PYTHON WORKDIR HF_PYTHON
# (PYTHON: with the tokenizers the Unicode tables follow, .venv-tok; HF_PYTHON: with transformers, which
# only writes GPT-2's tokenizer.json the way save_pretrained does)
set -uo pipefail
TOOL=$1 PY=$2 WORK=$3 HF_PY=$4
SRC=$(cd "$(dirname "$0")/../.." && pwd)
VOCAB=${FSDP_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fsdp-test}/llama-cpp-python-0.3.36
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fails=0 pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
if [ ! -f "$VOCAB/complete" ]; then
    echo "FAIL: no real vocabularies in $VOCAB: run tools/test-deps.sh (tools/test.sh does)" >&2
    exit 1
fi
for m in gpt-2 llama-bpe qwen2 starcoder refact; do
    g="$VOCAB/models/ggml-vocab-$m.gguf"
    PYTHONPATH="$VOCAB/gguf-py" "$PY" "$SRC/tools/gguf_vocab.py" json "$g" "$m.json" >"$m.conv.log" 2>&1 && ok || bad "$m: $(cat "$m.conv.log")"
    "$PY" "$SRC/tools/gguf_vocab.py" cases "$g" "$m" >/dev/null && ok || bad "$m: cases"
    "$TOOL" "$m.json" --ids "$m"/*.txt >"$m.log" 2>&1 && ok || bad "$m: round trips: $(grep -v exact "$m.log" | head -3)"
    "$PY" "$SRC/tools/gguf_vocab.py" check "$m" >"$m.check.log" 2>&1 && ok || bad "$m: ids differ from the real tokenizer's: $(head -5 "$m.check.log")"
    grep -q "of 4[0-9] cases equal" "$m.check.log" && ok || bad "$m: fewer cases than llama.cpp's 46: $(tail -1 "$m.check.log")"
done
# GPT-2's tokenizer.json as the Hub publishes it (<|endoftext|> "normalized": true, ByteLevel
# post_processor, merges as "a b") and as transformers' save_pretrained writes it (merges as pairs,
# "ignore_merges": false): the same ids
"$HF_PY" - <<'PYEOF' >forms.log 2>&1 && ok || bad "GPT-2 forms: $(cat forms.log)"
import json
from transformers import GPT2TokenizerFast
j = json.load(open("gpt-2.json", encoding="utf-8"))
j["added_tokens"][0]["normalized"] = True
j["post_processor"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
json.dump(j, open("gpt2_hub.json", "w", encoding="utf-8"), ensure_ascii=False)
GPT2TokenizerFast(tokenizer_file="gpt2_hub.json").save_pretrained("gpt2_saved")
s = json.load(open("gpt2_saved/tokenizer.json", encoding="utf-8"))
assert isinstance(s["model"]["merges"][0], list) and s["model"]["ignore_merges"] is False, "not the pair form"
PYEOF
for form in gpt2_hub.json gpt2_saved/tokenizer.json; do
    rm -f gpt-2/*.ids
    "$TOOL" "$form" --ids gpt-2/*.txt >/dev/null 2>&1 && "$PY" "$SRC/tools/gguf_vocab.py" check gpt-2 >form.log 2>&1 && ok || bad "$form: $(head -3 form.log)"
done
# the end-of-document tokens and special tokens by name
"$PY" - <<'PYEOF' && ok || bad "special token ids"
import json
for m, names in {"llama-bpe": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
                 "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]}.items():
    j = json.load(open(m + ".json", encoding="utf-8"))
    ids = {a["content"]: a["id"] for a in j["added_tokens"]}
    assert all(n in ids for n in names), (m, names)
PYEOF
# the end-of-document token each exposes, and ids by name (fsdp_bpe_eot, fsdp_bpe_token_id)
[ "$("$TOOL" llama-bpe.json --eot --id '<|eot_id|>' --id '<|begin_of_text|>' --id 'Hello' --id '<|nope|>')" = "eot 128001
<|eot_id|> 128009
<|begin_of_text|> 128000
Hello 9906
<|nope|> -1" ] && ok || bad "Llama 3's eot / ids by name: $("$TOOL" llama-bpe.json --eot --id '<|eot_id|>' --id 'Hello')"
for m in gpt-2:50256 qwen2:151643 starcoder:0; do
    [ "$("$TOOL" "${m%%:*}.json" --eot)" = "eot ${m##*:}" ] && ok || bad "${m%%:*}: eot $("$TOOL" "${m%%:*}.json" --eot)"
done
printf 'a<|eot_id|>b<|begin_of_text|><|end_of_text|>' >special.txt
"$TOOL" llama-bpe.json --ids special.txt >/dev/null 2>&1 &&
    [ "$("$PY" -c "import numpy; print(numpy.fromfile('special.txt.ids', '<i4').tolist())")" = "[64, 128009, 65, 128000, 128001]" ] && ok ||
    bad "Llama 3's special tokens: $("$PY" -c "import numpy; print(numpy.fromfile('special.txt.ids', '<i4').tolist())")"

# random BPEs of each pre-tokenizer against tokenizers
"$PY" "$SRC/tools/bpe_fixture.py" random rnd >rnd.log 2>&1 && ok || bad "random: $(cat rnd.log)"
for m in gpt2 llama3 qwen2 smollm; do
    if [ $m = qwen2 ]; then # NFC changes some texts: the round trip is checked on their NFC form
        "$TOOL" rnd/$m.json --ids rnd/${m}_*.txt >/dev/null 2>&1
        mkdir -p nfc && "$PY" -c "
import glob, os, unicodedata
for p in glob.glob('rnd/qwen2_*.txt'):
    open('nfc/' + os.path.basename(p), 'w', encoding='utf-8', newline='').write(unicodedata.normalize('NFC', open(p, encoding='utf-8', newline='').read()))"
        "$TOOL" rnd/$m.json nfc/*.txt >nfc.log 2>&1 && ok || bad "qwen2: NFC round trips: $(grep -v exact nfc.log | head -3)"
        [ "$(grep -c 'round trip exact' nfc.log)" = 40 ] && ok || bad "qwen2: not every NFC text round-tripped"
        cmp -s rnd/qwen2_0.txt nfc/qwen2_0.txt && bad "qwen2: the random text needs no NFC (the test would not see it)" || ok
    else
        "$TOOL" rnd/$m.json --ids rnd/${m}_*.txt >rt_$m.log 2>&1 && ok || bad "$m: round trips: $(grep -v exact rt_$m.log | head -3)"
    fi
    "$PY" "$SRC/tools/bpe_fixture.py" ids rnd/$m.json rnd/${m}_*.txt >ids_$m.log 2>&1 && ok || bad "$m: ids differ from tokenizers': $(grep -v '^ok' ids_$m.log | head -3)"
    [ "$(grep -c '^ok' ids_$m.log)" = 40 ] && ok || bad "$m: ids checked on every text"
done
echo "bpe_real: $pass checks passed, $fails failed"
[ $fails -eq 0 ] && [ $pass -gt 0 ]
