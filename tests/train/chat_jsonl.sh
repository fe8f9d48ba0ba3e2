#!/usr/bin/env bash
# chat_jsonl.sh — `fsdp-train prepare --jsonl` with the real Qwen2 (ChatML) and Llama 3 tokenizers
# (llama.cpp's vocab-only GGUF files, rebuilt into tokenizer.json by tools/gguf_vocab.py, as
# tests/train/bpe_real.sh does):
#  - ids and loss mask equal to transformers' apply_chat_template and assistant_masks (chat_ref.py);
#  - --chat-format auto: from tokenizer_config.json's chat_template, else the special tokens; a clear
#    error for a template or a tokenizer of neither format;
#  - every class of malformed row refused with FILE:LINE and what is wrong, and nothing written: an
#    existing output folder stays byte for byte, a new one is not created, no temporary folder is left;
#  - an over-long --text refused from its size before it is read, bytes and BPE (issue 28 item 5).
# usage: chat_jsonl.sh FSDP_TRAIN PYTHON WORKDIR
set -uo pipefail
BIN=$(realpath "$1") PY=$2 WORK=$3
SRC=$(cd "$(dirname "$0")/../.." && pwd)
VOCAB=${FSDP_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fsdp-test}/llama-cpp-python-0.3.36
. "$SRC/tests/lib_common.sh"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
if [ ! -f "$VOCAB/complete" ]; then
    echo "FAIL: no real vocabularies in $VOCAB: run tools/test-deps.sh (tools/test.sh does)" >&2
    exit 1
fi
for m in qwen2 llama-bpe gpt-2; do
    PYTHONPATH="$VOCAB/gguf-py" "$PY" "$SRC/tools/gguf_vocab.py" json "$VOCAB/models/ggml-vocab-$m.gguf" "$m.json" \
        >"$m.conv.log" 2>&1 && ok || bad "$m: $(cat "$m.conv.log")"
done
[ "$fails" -eq 0 ] || finish

# against transformers
"$PY" "$SRC/tests/train/chat_ref.py" "$BIN" qwen2.json chatml ref >ref_chatml.log 2>&1 && ok || bad "chatml: $(tail -5 ref_chatml.log)"
"$PY" "$SRC/tests/train/chat_ref.py" "$BIN" llama-bpe.json llama3 ref >ref_llama3.log 2>&1 && ok || bad "llama3: $(tail -5 ref_llama3.log)"
cat ref_chatml.log ref_llama3.log

# --chat-format auto
printf '%s\n' '{"prompt": "Hi", "completion": "Hello"}' '{"prompt": "2+2?", "completion": "4"}' >good.jsonl
"$BIN" prepare --jsonl good.jsonl --tokenizer qwen2.json --out auto_q >auto_q.log 2>&1 &&
    grep -q '"chat_format":	"chatml"' auto_q/meta.json && ok || bad "auto, Qwen2's tokens: $(cat auto_q.log)"
"$BIN" prepare --jsonl good.jsonl --tokenizer llama-bpe.json --out auto_l >auto_l.log 2>&1 &&
    grep -q '"chat_format":	"llama3"' auto_l/meta.json && ok || bad "auto, Llama 3's tokens: $(cat auto_l.log)"
mkdir -p tq tl tx
cp qwen2.json tq/tokenizer.json && cp llama-bpe.json tl/tokenizer.json && cp llama-bpe.json tx/tokenizer.json
echo '{"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"}' >tq/tokenizer_config.json
echo '{"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"}' >tl/tokenizer_config.json
echo '{"chat_template": [{"name": "default", "template": "{{ messages }}"}]}' >tx/tokenizer_config.json
"$BIN" prepare --jsonl good.jsonl --tokenizer tq/tokenizer.json --out auto_tq >auto_tq.log 2>&1 &&
    grep -q '"chat_format":	"chatml"' auto_tq/meta.json && [ -f auto_tq/tokenizer_config.json ] && ok ||
    bad "auto from chat_template: $(cat auto_tq.log)"
"$BIN" prepare --jsonl good.jsonl --tokenizer tl/tokenizer.json --out auto_tl >auto_tl.log 2>&1
[ $? -ne 0 ] && grep -q 'the chatml chat format needs <|im_start|> as one token' auto_tl.log && [ ! -e auto_tl ] && ok ||
    bad "a ChatML template on Llama 3's tokens: $(cat auto_tl.log)"
"$BIN" prepare --jsonl good.jsonl --tokenizer tx/tokenizer.json --out auto_tx >auto_tx.log 2>&1
[ $? -ne 0 ] && grep -q 'neither ChatML (<|im_start|>) nor Llama 3' auto_tx.log && ok || bad "another template: $(cat auto_tx.log)"
"$BIN" prepare --jsonl good.jsonl --tokenizer gpt-2.json --out auto_g >auto_g.log 2>&1
[ $? -ne 0 ] && grep -q 'is not a chat tokenizer prepare --jsonl knows' auto_g.log && ok || bad "GPT-2: $(cat auto_g.log)"
"$BIN" prepare --jsonl good.jsonl --out auto_n >auto_n.log 2>&1
[ $? -ne 0 ] && grep -q 'needs --tokenizer' auto_n.log && ok || bad "no tokenizer: $(cat auto_n.log)"

# malformed rows: line 3 of rows.jsonl each time
"$BIN" prepare --jsonl good.jsonl --tokenizer qwen2.json --out keep >keep.log 2>&1 || bad "keep: $(cat keep.log)"
snapshot() { (cd "$1" && find . -print0 | sort -z | xargs -0 md5sum 2>/dev/null; find . | sort); }
snapshot keep >keep.sum
m='{"role": "user", "content": "q"}' a='{"role": "assistant", "content": "r"}'
cases=(
    '[1, 2]|a row must be a JSON object, not an array'
    '"text"|a row must be a JSON object, not a string'
    '{"prompt": "a",|not valid JSON'
    '{"prompt": "a", "completion": "b"} x|not valid JSON'
    '{"prompt": "a", "prompt": "b", "completion": "c"}|the key "prompt" appears twice'
    "{\"messages\": [{\"role\": \"user\", \"role\": \"user\", \"content\": \"q\"}, $a]}|the key \"role\" appears twice"
    '{"prompt": "a"}|missing key "completion"'
    '{"completion": "a"}|missing key "prompt"'
    '{"text": "a"}|missing key "messages"'
    "{\"messages\": [$m, $a], \"prompt\": \"a\", \"completion\": \"b\"}|a row has \"messages\" or \"prompt\" and \"completion\", not both"
    '{"prompt": 1, "completion": "b"}|"prompt" must be a string, not a number'
    '{"prompt": "a", "completion": null}|"completion" must be a string, not null'
    '{"messages": {}}|"messages" must be an array, not an object'
    '{"messages": []}|"messages" is empty'
    "{\"messages\": [$m, \"hi\"]}|messages[1] must be an object, not a string"
    "{\"messages\": [{\"role\": \"user\"}, $a]}|messages[0] has no \"content\""
    "{\"messages\": [{\"content\": \"q\"}, $a]}|messages[0] has no \"role\""
    "{\"messages\": [$m, {\"role\": \"assistant\", \"content\": [\"r\"]}]}|messages[1]'s \"content\" must be a string, not an array"
    "{\"messages\": [{\"role\": 7, \"content\": \"q\"}, $a]}|messages[0]'s \"role\" must be a string, not a number"
    "{\"messages\": [{\"role\": \"tool\", \"content\": \"q\"}, $a]}|messages[0] has the unknown role \"tool\""
    "{\"messages\": [$m, {\"role\": \"assistant\", \"content\": \"r\", \"name\": \"x\"}]}|messages[1] has the key \"name\""
    "{\"messages\": [$m]}|no assistant turn"
    "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, $m]}|no assistant turn"
    '{"prompt": "a\u0000b", "completion": "c"}|a NUL character (\u0000) at byte 14'
    '{"prompt": "\ud800", "completion": "c"}|not valid JSON'
)
n=0
for c in "${cases[@]}"; do
    n=$((n + 1))
    { cat good.jsonl; printf '%s\n' "${c%%|*}" '{"prompt": "later", "completion": "row"}'; } >rows.jsonl
    for out in keep fresh$n; do
        "$BIN" prepare --jsonl rows.jsonl --tokenizer qwen2.json --out $out >bad.log 2>&1
        rc=$?
        [ $rc -ne 0 ] && grep -qF "rows.jsonl:3: ${c#*|}" bad.log && ok || bad "case $n (${c%%|*}) into $out: rc $rc: $(cat bad.log)"
    done
    [ ! -e fresh$n ] && ok || bad "case $n: fresh$n was created"
done
# invalid UTF-8 (raw bytes): a lone continuation byte, an overlong form, a surrogate, a truncated sequence
for b in '\x80' '\xc0\xaf' '\xed\xa0\x80' '\xe4\xb8'; do
    { cat good.jsonl; printf '{"prompt": "ab'"$b"'", "completion": "c"}\n'; } >rows.jsonl
    "$BIN" prepare --jsonl rows.jsonl --tokenizer qwen2.json --out keep >bad.log 2>&1
    [ $? -ne 0 ] && grep -q "rows.jsonl:3: invalid UTF-8 at byte 15 of the line" bad.log && ok || bad "UTF-8 $b: $(cat bad.log)"
done
# the line number counts blank lines; a CRLF file is read as LF
printf '{"prompt": "a", "completion": "b"}\r\n\r\n  \r\n{"prompt": 5, "completion": "b"}\r\n' >rows.jsonl
"$BIN" prepare --jsonl rows.jsonl --tokenizer qwen2.json --out keep >bad.log 2>&1
[ $? -ne 0 ] && grep -q 'rows.jsonl:4: "prompt" must be a string' bad.log && ok || bad "line numbers: $(cat bad.log)"
printf '\n\n' >rows.jsonl
"$BIN" prepare --jsonl rows.jsonl --tokenizer qwen2.json --out keep >bad.log 2>&1
[ $? -ne 0 ] && grep -q 'holds no rows' bad.log && ok || bad "no rows: $(cat bad.log)"
snapshot keep >keep.after
cmp -s keep.sum keep.after && ok || bad "the existing folder changed: $(diff keep.sum keep.after | head -5)"
ls -a | grep -q '\.prepare\.' && bad "temporary folders left: $(ls -a | grep '\.prepare\.')" || ok

# the output folder: a symbolic link, a folder holding other files, one holding an input
ln -s keep link
"$BIN" prepare --jsonl good.jsonl --tokenizer qwen2.json --out link >bad.log 2>&1
[ $? -ne 0 ] && grep -q 'is a symbolic link' bad.log && ok || bad "symlinked --out: $(cat bad.log)"
mkdir -p other && echo mine >other/notes.txt
"$BIN" prepare --jsonl good.jsonl --tokenizer qwen2.json --out other >bad.log 2>&1
[ $? -ne 0 ] && grep -q 'holds notes.txt, which prepare does not write' bad.log && [ "$(cat other/notes.txt)" = mine ] && ok ||
    bad "--out with other files: $(cat bad.log)"
cp good.jsonl keep/meta.json
"$BIN" prepare --jsonl keep/meta.json --tokenizer qwen2.json --out keep >bad.log 2>&1
[ $? -ne 0 ] && grep -q "keep/meta.json is a file this command reads" bad.log && ok || bad "input inside --out: $(cat bad.log)"
# re-preparing with the folder's own tokenizer.json replaces the folder (the tokenizer is copied first)
"$BIN" prepare --jsonl good.jsonl --tokenizer keep/tokenizer.json --out keep >re.log 2>&1 && cmp -s keep/tokenizer.json qwen2.json &&
    [ -f keep/train.mask ] && ok || bad "re-prepare with the folder's tokenizer: $(cat re.log)"

# issue 28 item 5: a --text over the token files' int32 count is refused from its size, before reading
truncate -s 2300000000 big.txt
start=$(date +%s)
timeout 60 "$BIN" prepare --text big.txt --out bigout >big.log 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q 'at least 2185000001 tokens for train.bin, more than a token file holds (2147483647' big.log &&
    [ $(($(date +%s) - start)) -lt 10 ] && [ ! -e bigout ] && ok || bad "over-long text: rc $rc: $(cat big.log)"
rm -f big.txt
# with a BPE the bound is the bytes over the longest token's (GPT-2's: 128 bytes): a sparse 400 GB file
truncate -s 400000000000 huge.txt
timeout 60 "$BIN" prepare --text huge.txt --tokenizer gpt-2.json --out hugeout >huge.log 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q 'at least 2968750001 tokens for train.bin, more than a token file holds' huge.log &&
    [ ! -e hugeout ] && ok || bad "over-long text, BPE: rc $rc: $(cat huge.log)"
rm -f huge.txt
finish
