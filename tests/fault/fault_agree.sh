#!/usr/bin/env bash
# fault_agree.sh BIN MPIRUN WORK FAULT_LIB — the ranks of one job agree on what they run (issue 28
# item 4): a setting given differently to one rank (mpirun's MPMD form, `-np 1 A : -np 1 B`), a data
# folder (or a folder of shards) with other contents on one rank, and a checkpoint folder the ranks do not share are named
# errors before any model is built, with nothing trained or saved; the settings a rank may hold its
# own value of (--threads) still train. A resume with another model shape, vocabulary or data
# tokenizer than the checkpoint's is refused naming the field.
BIN=$1 MPIRUN=$2 WORK=$3 FAULT_LIB=$4
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

# refused NAME PATTERN CKPT [MPMD ARGS...]: the 2-rank job fails, both ranks' messages match PATTERN,
# and CKPT holds no checkpoint.
refused() {
    local name=$1 pat=$2 ck=$3
    shift 3
    if timeout 120 "$MPIRUN" "$@" >"$name.log" 2>&1; then
        bad "$name: a job whose ranks disagree trained"
        return
    fi
    local n
    n=$(grep -c -E -e "$pat" "$name.log")
    if [ "$n" -lt 1 ]; then
        bad "$name: no message matching '$pat': $(grep error "$name.log" | head -3)"
    elif grep -q -E 'step +1 |timed out|transport|MPI_ABORT' "$name.log"; then
        bad "$name: it trained a step, ended in a transport error or aborted: $(grep -E 'step|timed|ABORT' "$name.log" | head -2)"
    elif [ -e "$ck/latest" ] || ls "$ck"/step_* >/dev/null 2>&1; then
        bad "$name: $ck holds a checkpoint"
    else
        ok
    fi
}
A=(train "${TINY[@]}" --steps 2)

# Different --lr on rank 1.
refused lr 'the ranks disagree on 1 setting or data file: --lr \(ranks 1 differ from rank 0\)' ck_lr \
    1 "$BIN" "${A[@]}" --checkpoint-dir ck_lr --lr 1e-3 : -np 1 "$BIN" "${A[@]}" --checkpoint-dir ck_lr --lr 2e-3
# Different --layers (and --heads) on rank 1 of 3: only rank 1 is named.
refused layers 'disagree on 2 settings or data files: --layers \(ranks 1 differ from rank 0\); --heads \(ranks 1 differ from rank 0\)' ck_layers \
    1 "$BIN" "${A[@]}" --checkpoint-dir ck_layers : -np 1 "$BIN" "${A[@]}" --checkpoint-dir ck_layers --layers 3 \
    --heads 4 : -np 1 "$BIN" "${A[@]}" --checkpoint-dir ck_layers
# Rank 1 reads a data folder of other contents (prepared with another validation share: train.bin's
# size and header differ); the folders' paths may differ, their contents may not.
"$BIN" prepare --text "$SRC"/src/*/*.c --out data2 --val-fraction 0.2 >prep2.log 2>&1 || bad "prepare data2"
D2=(train "${TINY[@]/#data/data2}" --steps 2)
refused data 'data2?/train\.bin \(ranks 1 differ from rank 0\); data2?/val\.bin \(ranks 1 differ' ck_data \
    1 "$BIN" "${A[@]}" --checkpoint-dir ck_data : -np 1 "$BIN" "${D2[@]}" --checkpoint-dir ck_data
# Shard folders (*_train_*.bin) whose second training shard differs on rank 1: the shards are named.
mkdir -p shA shB
cp data/train.bin shA/a_train_000.bin && cp data/train.bin shA/a_train_001.bin && cp data/val.bin shA/a_val_000.bin &&
    cp shA/* shB/ && cp data2/train.bin shB/a_train_001.bin && cp data/meta.json shA/ && cp data/meta.json shB/ || bad "shard folders"
refused shards 'the shards of --data sh[AB] \(names, sizes, first KiB\) \(ranks 1 differ from rank 0\)' ck_shards \
    1 "$BIN" "${A[@]}" --data shA --checkpoint-dir ck_shards : -np 1 "$BIN" "${A[@]}" --data shB --checkpoint-dir ck_shards
# A checkpoint folder the ranks do not share (each host its own disk: here two folders).
mkdir -p ck_own1
refused shared "ck_own1 is not the folder rank 0 sees: rank 1 cannot find rank 0's ck_own1/.shared-test" ck_own0 \
    1 "$BIN" "${A[@]}" --checkpoint-dir ck_own0 : -np 1 "$BIN" "${A[@]}" --checkpoint-dir ck_own1
[ ! -e ck_own0/.shared-test ] || bad "shared: rank 0 left its shared-test file behind"

# A per-rank setting (--threads) and an identical copy of the data at another path: trains, and
# leaves no shared-test file.
cp -r data data_copy
if timeout 300 "$MPIRUN" 1 "$BIN" "${A[@]}" --checkpoint-dir ck_ok : -np 1 "$BIN" \
    train "${TINY[@]/#data/data_copy}" --steps 2 --threads 2 --checkpoint-dir ck_ok >ok.log 2>&1 &&
    [ -e ck_ok/latest ] && [ ! -e ck_ok/.shared-test ]; then
    ok
else
    bad "per-rank --threads or a copy of the data: $(grep error ok.log | head -3)"
fi

# Resume refuses drift from the checkpoint's model, vocabulary and tokenizer, naming the field, and
# leaves the checkpoint folder as it was (checksums of every file).
# drift NAME PATTERN ARGS...: `train --resume ARGS` on ck_ok fails with PATTERN, ck_ok unchanged.
drift() {
    local name=$1 pat=$2
    shift 2
    local before
    before=$(snapshot ck_ok)
    if timeout 120 "$BIN" train "${TINY[@]}" --steps 4 --checkpoint-dir ck_ok --resume "$@" >"$name.log" 2>&1; then
        bad "$name: a resume with another model or data trained"
    elif ! grep -q -E -e "$pat" "$name.log"; then
        bad "$name: no message matching '$pat': $(grep error "$name.log" | head -3)"
    elif [ "$before" != "$(snapshot ck_ok)" ] || [ -e ck_ok/step_000004 ]; then
        bad "$name: the checkpoint folder changed"
    else
        ok
    fi
}
drift heads 'differs from the checkpoint.s in n_head \(--heads: 2 in ck_ok/step_000002/manifest.json, 4 in this run\)' \
    --heads 4
drift layers 'in n_layer \(--layers: 2 in ck_ok/step_000002/manifest.json, 3 in this run\)' --layers 3
drift vocab 'in vocab_size \(--vocab: 257 in ck_ok/step_000002/manifest.json, 300 in this run\)' --vocab 300
# A tokenizer.json appears in the data folder (the run was byte-level): its crc32c against "none".
printf '{"model": {"type": "BPE"}}' >data/tokenizer.json
drift tokenizer "--data data's tokenizer.json \(crc32c:[0-9a-f]{8}\) is not the one the checkpoint was trained with \(ck_ok/step_000002/manifest.json records none\)"
rm -f data/tokenizer.json
# Before step 1 (issue 28 item 5): a data folder whose tokenizer.json the end-of-run sample cannot
# load fails before training, not after it: no step, no checkpoint.
printf '{"model": {"type": "BPE"}}' >data/tokenizer.json
if timeout 120 "$BIN" train "${TINY[@]}" --steps 2 --sample-tokens 4 --checkpoint-dir ck_tok >tok.log 2>&1; then
    bad "a run with a broken data tokenizer.json succeeded"
elif ! grep -q 'error: data/tokenizer.json: "pre_tokenizer" is missing' tok.log; then
    bad "tokenizer: $(grep error tok.log | head -2)"
elif grep -q -E 'step +1 ' tok.log || [ -e ck_tok/latest ]; then
    bad "tokenizer: it trained or saved before refusing the tokenizer"
else
    ok
fi
rm -f data/tokenizer.json
# The same settings resume.
if timeout 120 "$BIN" train "${TINY[@]}" --steps 3 --checkpoint-dir ck_ok --resume >resume.log 2>&1 &&
    [ -e ck_ok/step_000003 ]; then
    ok
else
    bad "resume with the checkpoint's settings: $(grep error resume.log | head -3)"
fi
finish
