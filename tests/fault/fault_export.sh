#!/usr/bin/env bash
# fault_export.sh — `export` writes --out's folder as one unit (issue 28 item 1): killed (SIGKILL,
# fault_inject.c's FSDP_FAULT_KILL_AT_OP) at every write, rename, unlink, rmdir and on both sides of the
# folder swap, the folder is byte for byte the old export or the new one (model, config.json and --logits
# inside it), never a mix, over an existing export and into a new folder; after each kill the next export
# removes the .NAME.export.XXXXXX folder the kill left. A folder holding a file export does not write is
# refused naming it, and is left as it was.
# usage: fault_export.sh FSDP_TRAIN MPIRUN WORKDIR FAULT_LIB
BIN=$1 MPIRUN=$2 WORK=$3 FAULT_LIB=$4
source "$(dirname "$0")/lib.sh"

"$BIN" "${TINY[@]}" --steps 4 --checkpoint-every 2 --checkpoint-dir ck >ck.log 2>&1 || bad "4-step run: $(tail -3 ck.log)"
[ -d ck/step_000002 ] && [ -d ck/step_000004 ] || bad "ck: $(ls ck)"
NEW=(export --checkpoint ck/step_000004 --out x/m.safetensors --logits x/logits.bin)
make_old() { "$BIN" export --checkpoint ck/step_000002 --export-dtype bf16 --out x/m.safetensors --logits x/logits.bin >old.log 2>&1; }
no_old() { true; }

# after_kill N: the next export (from the old state, so both cases reach the swap) gives the new folder
# and leaves no temporary folder beside it.
setup=make_old
after_kill() {
    if [ $setup = make_old ]; then make_old || bad "export of the old state after the kill at op $1: $(cat old.log)"; fi
    "$BIN" "${NEW[@]}" >again.log 2>&1 || bad "export after the kill at op $1: $(cat again.log)"
    dir_snapshot x >now.sum
    cmp -s now.sum new.sum && [ -z "$(ls -A | grep '^\.x\.export\.')" ] && ok ||
        bad "after the kill at op $1 the next export left $(ls -A | grep '^\.x\.')"
}
run_kills() { setup=$2 && kill_points "$1" "$2" x after_kill "$BIN" "${NEW[@]}"; }
run_kills "over an existing export" make_old
run_kills "into a new folder" no_old

# a folder holding a file export does not write: refused naming it, the folder unchanged
rm -rf x .x.export.* && make_old && echo mine >x/notes.txt && dir_snapshot x >old.sum
"$BIN" "${NEW[@]}" >foreign.log 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "holds notes.txt, which export does not write" foreign.log && ok || bad "foreign file: rc $rc: $(cat foreign.log)"
dir_snapshot x >now.sum
cmp -s old.sum now.sum && [ -z "$(ls -A | grep '^\.x\.export\.')" ] && ok || bad "a refused export changed x: $(ls -A x)"
finish
