#!/usr/bin/env bash
# fault_prepare.sh — `prepare` writes its data folder as one unit (issue 28 item 1): killed (SIGKILL,
# fault_inject.c's FSDP_FAULT_KILL_AT_OP) at every write, rename, unlink, rmdir and on both sides of the
# folder swap, the output is byte for byte the old folder or the new one, never a mix, both with an
# existing folder and without one; the next prepare removes a killed one's temporary folder (and nothing of
# another name); a failed write (a full disk) leaves the old folder and no temporary.
# --text and --jsonl share the writer; --jsonl (train.mask, val.mask) is killed too.
# usage: fault_prepare.sh FSDP_TRAIN MPIRUN WORKDIR FAULT_LIB
set -uo pipefail
BIN=$(realpath "$1") WORK=$(realpath -m "$3") FAULT_LIB=$(realpath "$4")
SRC=$(cd "$(dirname "$0")/../.." && pwd)
. "$SRC/tests/lib_common.sh"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1

printf 'old text %d\n' $(seq 1 300) >old.txt
printf 'new text, longer %d\n' $(seq 1 3000) >new.txt

# run_kills NAME OLD_SETUP ARGS...: the kill loop (lib_common.sh) for `prepare ARGS --out pdata`.
run_kills() { kill_points "$1" "$2" pdata true "$BIN" prepare "${@:3}" --out pdata; }
make_old() { "$BIN" prepare --text old.txt --out pdata --val-fraction 0.2 >old.log 2>&1; }
no_old() { true; }
run_kills "text over an existing folder" make_old --text new.txt --val-fraction 0.1
run_kills "text into a new folder" no_old --text new.txt --val-fraction 0.1

# what a killed prepare left beside --out (mkdtemp's pattern) is removed by the next one; nothing else is
mkdir -p .pdata.prepare.AbC123 .pdata.prepare.keep && touch .pdata.prepare.AbC123/train.bin .pdata.prepare.keep/x
"$BIN" prepare --text new.txt --out pdata >stale.log 2>&1 || bad "prepare after a kill: $(cat stale.log)"
[ "$(ls -A | grep '^\.pdata\.')" = .pdata.prepare.keep ] && ok || bad "stale temporaries: $(ls -A | grep '^\.pdata\.')"
rm -rf .pdata.prepare.keep

# a full disk: the old folder stays, the temporary folder is removed
rm -rf pdata && make_old && dir_snapshot pdata >old.sum
FSDP_FAULT_MATCH=pdata FSDP_FAULT_ENOSPC_AFTER=3000 LD_PRELOAD=$FAULT_LIB "$BIN" prepare --text new.txt --out pdata >full.log 2>&1
rc=$?
dir_snapshot pdata >now.sum
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
