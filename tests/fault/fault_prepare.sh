#!/usr/bin/env bash
# fault_prepare.sh — `prepare` writes its data folder as one unit (issue 28 item 1): killed (SIGKILL,
# fault_inject.c's FSDP_FAULT_KILL_AT_OP) at every write, rename, unlink, rmdir and on both sides of the
# folder swap, the output is byte for byte the old folder or the new one, never a mix, both with an
# existing folder and without one; a failed write (a full disk) leaves the old folder and no temporary.
# --text and --jsonl share the writer; --jsonl (train.mask, val.mask) is killed too.
# usage: fault_prepare.sh FSDP_TRAIN MPIRUN WORKDIR FAULT_LIB
set -uo pipefail
BIN=$(realpath "$1") WORK=$(realpath -m "$3") FAULT_LIB=$(realpath "$4")
SRC=$(cd "$(dirname "$0")/../.." && pwd)
. "$SRC/tests/lib_common.sh"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1

snapshot() { [ -e "$1" ] && (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum; find . | sort) || echo absent; }
printf 'old text %d\n' $(seq 1 300) >old.txt
printf 'new text, longer %d\n' $(seq 1 3000) >new.txt

# run_kills NAME OLD_SETUP ARGS...: the kill loop for `prepare ARGS --out pdata`, pdata set up by
# OLD_SETUP (a function) before each try.
run_kills() {
    local name=$1 setup=$2
    shift 2
    rm -rf pdata && $setup && snapshot pdata >old.sum
    "$BIN" prepare "$@" --out pdata >full.log 2>&1 || bad "$name: uninterrupted: $(cat full.log)"
    snapshot pdata >new.sum
    cmp -s old.sum new.sum && bad "$name: the new folder equals the old one"
    local n=0 kills=0 saw_old=0 saw_new=0 rc
    while [ $n -lt 400 ]; do
        n=$((n + 1))
        rm -rf pdata .pdata.prepare.* && $setup
        FSDP_FAULT_MATCH=pdata FSDP_FAULT_KILL_AT_OP=$n LD_PRELOAD=$FAULT_LIB "$BIN" prepare "$@" --out pdata >kill.log 2>&1
        rc=$?
        snapshot pdata >now.sum
        if [ $rc -eq 0 ]; then
            cmp -s now.sum new.sum && ok || bad "$name: completed at op $n with another folder"
            break
        fi
        [ $rc -eq 137 ] || { bad "$name: op $n: rc $rc: $(cat kill.log)"; break; }
        kills=$((kills + 1))
        if cmp -s now.sum old.sum; then
            saw_old=1
        elif cmp -s now.sum new.sum; then
            saw_new=1
        else
            bad "$name: killed at op $n ($(grep -o 'at [a-z0-9 ()]*' kill.log | head -1)): a mix of old and new: $(diff old.sum now.sum | head -4)"
        fi
    done
    [ $kills -ge 5 ] && [ $saw_old = 1 ] && [ $saw_new = 1 ] && ok ||
        bad "$name: $kills kill points, old state seen $saw_old, new state seen $saw_new"
    echo "$name: killed at $kills points, every time the old or the new folder"
    rm -rf .pdata.prepare.*
}
make_old() { "$BIN" prepare --text old.txt --out pdata --val-fraction 0.2 >old.log 2>&1; }
no_old() { true; }
run_kills "text over an existing folder" make_old --text new.txt --val-fraction 0.1
run_kills "text into a new folder" no_old --text new.txt --val-fraction 0.1

# a full disk: the old folder stays, the temporary folder is removed
rm -rf pdata && make_old && snapshot pdata >old.sum
FSDP_FAULT_MATCH=pdata FSDP_FAULT_ENOSPC_AFTER=3000 LD_PRELOAD=$FAULT_LIB "$BIN" prepare --text new.txt --out pdata >full.log 2>&1
rc=$?
snapshot pdata >now.sum
[ $rc -ne 0 ] && grep -q "disk full" full.log && cmp -s old.sum now.sum && ok || bad "disk full: rc $rc: $(cat full.log)"
ls -a | grep -q '\.pdata\.prepare\.' && bad "disk full: temporary left: $(ls -a)" || ok

# --jsonl with a hand-made ChatML tokenizer (bytes and the two special tokens)
"$SRC/.venv/bin/python" - <<'PY' || bad "tokenizer"
import json
from tokenizers import Tokenizer, models, pre_tokenizers
from tokenizers.pre_tokenizers import ByteLevel
alpha = sorted(ByteLevel.alphabet())
vocab = {c: i for i, c in enumerate(alpha)}
t = Tokenizer(models.BPE(vocab=vocab, merges=[]))
t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
t.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
t.save("chatml.json")
PY
for i in $(seq 1 40); do printf '{"prompt": "question %d", "completion": "answer %d"}\n' $i $i; done >rows.jsonl
make_old_jsonl() { head -5 rows.jsonl >few.jsonl && "$BIN" prepare --jsonl few.jsonl --tokenizer chatml.json --out pdata >old.log 2>&1; }
run_kills "jsonl over an existing folder" make_old_jsonl --jsonl rows.jsonl --tokenizer chatml.json --val-fraction 0.1
[ -f pdata/train.mask ] && [ -f pdata/val.mask ] && ok || bad "jsonl: no masks"
finish
