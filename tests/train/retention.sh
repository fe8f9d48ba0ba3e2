#!/usr/bin/env bash
# retention.sh — checkpoint retention and the final export (issue 29 item 2): --keep-last K removes the
# older checkpoints beyond the newest K once a new one is complete, never the one `latest` names, and
# keeps steps that are multiples of --keep-every N forever (also from a --config TOML file); what it
# does not own (a symbolic link named like a step, other files) is left alone, a removal interrupted
# earlier (.tmp_step_*.pruned) is cleaned by the next save, a resume keeps pruning; --export-final DIR
# --export-dtype bf16 writes the model alone whose every value is the fp32 export's rounded to nearest
# even (checked here bit by bit with an independent rounding), and f32 equals `fsdp-train export`'s; a
# --export-final folder holding a file export does not write is refused before step 1.
# usage: retention.sh FSDP_TRAIN_BINARY MPIRUN_SH WORKDIR
set -uo pipefail
BIN=$1 MPIRUN=$2 WORK=$3
SRC=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
source "$SRC/tests/lib_common.sh"
export OMP_NUM_THREADS=1
PY=/usr/bin/python3

"$BIN" prepare --text "$SRC"/src/*/*.c --out data --val-fraction 0.1 >prep.log 2>&1 || bad "prepare: $(cat prep.log)"
TINY=(--data data --layers 2 --width 32 --heads 2 --seq-len 32 --batch 12 --precision fp32 --eval-every 0
      --sample-tokens 0 --log-every 100 --threads 1 --checkpoint-every 2)
steps_in() { (cd "$1" && ls -d step_* 2>/dev/null | tr '\n' ' '); }

# Things retention must not touch: a link named like an old step (to a folder with a file), a file.
mkdir -p ck outside && echo keep >outside/f && ln -s ../outside ck/step_000001 && echo x >ck/notes.txt
"$MPIRUN" 2 "$BIN" "${TINY[@]}" --steps 12 --keep-last 2 --keep-every 4 --checkpoint-dir ck >a.log 2>&1 || bad "run: $(tail -3 a.log)"
[ "$(steps_in ck)" = "step_000001 step_000004 step_000008 step_000010 step_000012 " ] && ok || bad "kept: $(steps_in ck)"
[ "$(cat ck/latest)" = step_000012 ] && [ -L ck/step_000001 ] && [ "$(cat outside/f)" = keep ] && [ -f ck/notes.txt ] && ok ||
    bad "latest, the link, its target and the file"
grep -q "removed step_000002 (--keep-last 2" a.log && grep -q "removed step_000006 " a.log && ok || bad "removals not printed: $(grep removed a.log)"
# an interrupted removal's leftover goes at the next save; a resume prunes on (from a TOML file)
mkdir ck/.tmp_step_000003.pruned && echo x >ck/.tmp_step_000003.pruned/rank_00000.bin
printf 'keep-last = 2\nkeep-every = 4\n' >keep.toml
"$BIN" "${TINY[@]}" --config keep.toml --steps 16 --resume --checkpoint-dir ck >b.log 2>&1 || bad "resume: $(tail -3 b.log)"
[ "$(steps_in ck)" = "step_000001 step_000004 step_000008 step_000012 step_000014 step_000016 " ] && [ ! -e ck/.tmp_step_000003.pruned ] && ok ||
    bad "after resume: $(steps_in ck) $(ls -a ck | grep pruned)"
# --keep-last 1: only latest; every kept checkpoint still loads
"$BIN" "${TINY[@]}" --steps 6 --keep-last 1 --checkpoint-dir ck1 >c.log 2>&1 || bad "keep-last 1: $(tail -3 c.log)"
[ "$(steps_in ck1)" = "step_000006 " ] && loads ck1 && ok || bad "keep-last 1: $(steps_in ck1)"
for s in 4 8 12 14 16; do loads "ck/$(printf step_%06d $s)" && ok || bad "step $s does not load"; done
# --keep-every alone is refused (it would keep what is kept anyway)
"$BIN" "${TINY[@]}" --steps 2 --keep-every 2 --checkpoint-dir ck2 >d.log 2>&1 && bad "--keep-every without --keep-last ran" ||
    { grep -q -- "--keep-every 2 needs --keep-last" d.log && ok || bad "message: $(tail -2 d.log)"; }

# the final export, bf16 and f32, against `export` of the same checkpoint in f32
"$BIN" "${TINY[@]}" --steps 4 --checkpoint-dir ck3 --export-final fin16 --export-dtype bf16 >e.log 2>&1 || bad "export-final bf16: $(tail -3 e.log)"
"$BIN" "${TINY[@]}" --steps 4 --checkpoint-dir ck4 --export-final fin32 >f.log 2>&1 || bad "export-final f32: $(tail -3 f.log)"
"$BIN" export --checkpoint ck3 --out ref/model.safetensors >g.log 2>&1 || bad "export: $(tail -3 g.log)"
grep -q "exported fin16/model.safetensors (step 4, .* of bf16 data)" e.log && [ -f fin16/config.json ] && ok || bad "export-final output: $(grep export e.log)"
# --export-final replaces its folder as one unit: one holding a file export does not write is refused before step 1
mkdir -p finx && echo mine >finx/notes.txt
"$BIN" "${TINY[@]}" --steps 4 --checkpoint-dir ck5 --export-final finx >x.log 2>&1 && bad "--export-final onto a foreign file ran" ||
    { grep -q "export --export-final finx holds notes.txt, which export does not write" x.log && ! grep -q "^step 1/" x.log &&
          [ "$(ls -A finx)" = notes.txt ] && ok || bad "--export-final finx: $(tail -2 x.log)"; }
$PY - ref/model.safetensors fin16/model.safetensors fin32/model.safetensors fin16/config.json <<'PY' && ok || bad "exported tensors"
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return h, b[8 + n:]
rh, rd = load(sys.argv[1]); bh, bd = load(sys.argv[2]); fh, fd = load(sys.argv[3])
assert fd == rd and {k: v["dtype"] for k, v in fh.items()} == {k: "F32" for k in rh}, "f32 export differs"
assert set(bh) == set(rh), "tensor names"
for k, v in rh.items():
    a, b = v["data_offsets"]; c, d = bh[k]["data_offsets"]
    assert bh[k]["dtype"] == "BF16" and bh[k]["shape"] == v["shape"] and d - c == (b - a) // 2, k
    f = struct.unpack("<%dI" % ((b - a) // 4), rd[a:b])
    h = struct.unpack("<%dH" % ((d - c) // 2), bd[c:d])
    want = tuple(((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF for x in f)  # round to nearest even
    assert h == want, k
assert json.load(open(sys.argv[4])).get("torch_dtype") == "bfloat16"
PY
# Rollback (issue 39 item 4): `latest` pointed back to step 6 of a 12-step run. Before, the resume trained
# on and, saving step 9 again, renamed the committed step_000009 to a hidden .uncommitted_step_000009
# (never pruned; a second rollback deleted it). Now the resume is refused before anything changes,
# naming the newer committed checkpoints; with them moved away it resumes and saves them again.
"$BIN" "${TINY[@]}" --steps 12 --checkpoint-every 3 --checkpoint-dir ck_rb >rb.log 2>&1 || bad "rollback: first run: $(tail -3 rb.log)"
printf 'step_000006\n' >ck_rb/latest
before=$(cd ck_rb && find . | sort && cat latest)
if "$BIN" "${TINY[@]}" --steps 12 --checkpoint-every 3 --checkpoint-dir ck_rb --resume >rb2.log 2>&1; then
    bad "rollback: the resume over newer committed checkpoints was accepted"
else
    grep -q "latest names step_000006, but ck_rb also holds the newer committed checkpoints step_0000\(09, step_000012\|12, step_000009\)" rb2.log &&
        ok || bad "rollback: message: $(tail -2 rb2.log)"
fi
[ "$before" = "$(cd ck_rb && find . | sort && cat latest)" ] && ok || bad "rollback: the refused resume changed ck_rb"
[ -z "$(find ck_rb -maxdepth 1 -name '.uncommitted_*')" ] && ok || bad "rollback: a committed checkpoint was set aside"
mkdir -p kept && mv ck_rb/step_000009 ck_rb/step_000012 kept/
"$BIN" "${TINY[@]}" --steps 12 --checkpoint-every 3 --checkpoint-dir ck_rb --resume >rb3.log 2>&1 &&
    [ -f ck_rb/step_000012/manifest.json ] && [ "$(cat ck_rb/latest)" = step_000012 ] && ok ||
    bad "rollback: the resume with the newer ones moved away: $(tail -2 rb3.log)"
finish
