#!/usr/bin/env bash
# perf_flow.sh — the step line's speed fields and the outlier guard (issue 29 items 1 and 4) on tiny
# runs: tflops / MFU / tokens per rank in --metrics against tests/train/check_perf.py's independent
# float64 FLOP count (gpt2 and llama), the measured GEMM peak in the manifest, --peak-cache (the best
# peak kept across runs), --peak-gflops fixed and off, the straggler figure over 2 ranks, and
# --skip-update-z: a guard that never fires changes no bit of the run; a firing one skips exactly the updates its metrics say (the exported weights of a skipped
# step equal the step before's, those of a taken step differ), also from a --config TOML file.
# usage: perf_flow.sh FSDP_TRAIN_BINARY MPIRUN_SH WORKDIR
set -uo pipefail
BIN=$1 MPIRUN=$2 WORK=$3
SRC=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
source "$SRC/tests/lib_common.sh"
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
CHECK="$SRC/tests/train/check_perf.py"

"$BIN" prepare --text "$SRC"/src/*/*.c --out data --val-fraction 0.1 >prep.log 2>&1 || bad "prepare: $(cat prep.log)"
TINY=(--data data --layers 2 --width 32 --heads 2 --seq-len 32 --batch 12 --precision fp32 --lr 3e-3
      --warmup 3 --eval-every 0 --sample-tokens 0 --log-every 1 --threads 1)

# gpt2, one rank, the measured peak
"$BIN" "${TINY[@]}" --steps 4 --peak-cache off --checkpoint-dir ck_g --metrics g.jsonl >g.log 2>&1 || bad "gpt2 run: $(tail -3 g.log)"
$PY "$CHECK" g.jsonl ck_g/step_000004/manifest.json 1 measured >g.check 2>&1 && ok || bad "gpt2: $(cat g.check)"
$PY - ck_g/step_000004/manifest.json <<'PY' && ok || bad "gpt2: manifest gemm-peak"
import json, sys
p = json.load(open(sys.argv[1]))["config"]["gemm-peak"]
assert p["source"] == "measured" and p["path"] == "f32" and p["reps"] >= 1 and p["gemm-size"] in (512, 1024), p
assert p["rank0-gflops"] > 0 and p["total-gflops"] == p["min-rank-gflops"], p
assert p["cache"] == "off" and p["probe-rank0-gflops"] == p["rank0-gflops"], p
PY
grep -q "GEMM peak (MFU's denominator): .* GFLOP/s on rank 0" g.log && grep -Eq "^step 4/4 .* TFLOPS MFU [0-9.]+% \| peak .*RSS" g.log && ok ||
    bad "gpt2: the header's peak and the step line's MFU: $(grep -E 'GEMM peak|^step' g.log | head -3)"

# --peak-cache: the first run records its probe; a cached best above the probe is the denominator
# (source "cache", the probe kept beside it); a probe above the cache raises it; a file that is not
# the cache's JSON is a warning, ignored and rewritten
pc() { "$BIN" "${TINY[@]}" --steps 2 --peak-cache cache/peak.json --checkpoint-dir "ck_$1" --metrics "$1.jsonl" >"$1.log" 2>&1 || bad "peak cache $1: $(tail -3 "$1.log")"; }
gp() { $PY -c "import json,sys; p=json.load(open('ck_$1/step_000002/manifest.json'))['config']['gemm-peak']; print(p['source'], p['rank0-gflops'], p['probe-rank0-gflops'])"; }
pc pc1
read -r src peak probe <<<"$(gp pc1)"
[ "$src" = measured ] && [ "$peak" = "$probe" ] && ok || bad "peak cache, first run: $src $peak $probe"
$PY -c "import json,sys; j=json.load(open('cache/peak.json')); (k, v), = j.items(); assert 'f32 path | 1 thread per rank | 1 rank on the host' in k and abs(v['gflops'] - float(sys.argv[1])) <= 1e-3 * v['gflops'] and v['runs'] == 1, j" "$peak" && ok || bad "peak cache: the file after one run: $(cat cache/peak.json)"
$PY -c "import json; p='cache/peak.json'; j=json.load(open(p)); k=next(iter(j)); j[k]['gflops']=1e6; j['other CPU']={'gflops': 5, 'runs': 1}; json.dump(j, open(p, 'w'))"
pc pc2
read -r src peak probe <<<"$(gp pc2)"
[ "$src" = cache ] && [ "$peak" = 1000000 ] && $PY -c "import sys; sys.exit(0 if 0 < float(sys.argv[1]) < 1e6 else 1)" "$probe" && ok || bad "peak cache, cached best: $src $peak $probe"
$PY "$CHECK" pc2.jsonl ck_pc2/step_000002/manifest.json 1 1e6 >pc2.check 2>&1 && ok || bad "peak cache: MFU against the cached peak: $(cat pc2.check)"
grep -q "the best of 1 run on this CPU (--peak-cache cache/peak.json; this run's probe" pc2.log && ok || bad "peak cache: the header: $(grep 'GEMM peak' pc2.log)"
$PY -c "import json; j=json.load(open('cache/peak.json')); assert j['other CPU']['gflops'] == 5 and [v['runs'] for k, v in j.items() if k != 'other CPU'] == [2], j" && ok || bad "peak cache: other entries kept, runs counted: $(cat cache/peak.json)"
echo 'not json' >cache/peak.json
pc pc3
grep -q "warning: --peak-cache cache/peak.json is not a JSON object: ignored (and rewritten)" pc3.log && [ "$(gp pc3 | cut -d' ' -f1)" = measured ] && $PY -c "import json; json.load(open('cache/peak.json'))" && ok || bad "peak cache: a malformed file: $(grep -i 'peak' pc3.log | head -3)"

# llama, one rank, no MFU
# (--head-dim given: with 0 the trainer keeps the llama family's default 64, not --width / --heads)
LL=(--model llama --kv-heads 1 --head-dim 16 --intermediate 48)
"$BIN" "${TINY[@]}" "${LL[@]}" --steps 3 --peak-gflops -1 --checkpoint-dir ck_l --metrics l.jsonl >l.log 2>&1 || bad "llama run: $(tail -3 l.log)"
$PY "$CHECK" l.jsonl ck_l/step_000003/manifest.json 1 off >l.check 2>&1 && ok || bad "llama: $(cat l.check)"
grep -Eq "MFU [0-9]" l.log && bad "llama: --peak-gflops -1 still prints MFU" || ok

# two ranks, a fixed peak: summed over ranks, and the straggler
"$MPIRUN" 2 "$BIN" "${TINY[@]}" "${LL[@]}" --steps 4 --peak-gflops 50 --checkpoint-dir ck_2 --metrics two.jsonl >two.log 2>&1 || bad "2 ranks: $(tail -3 two.log)"
$PY "$CHECK" two.jsonl ck_2/step_000004/manifest.json 2 100 >two.check 2>&1 && ok || bad "2 ranks: $(cat two.check)"

# the outlier guard: off and never firing are the same run, bit for bit
"$BIN" "${TINY[@]}" --steps 8 --checkpoint-dir ck_off --metrics off.jsonl >off.log 2>&1 || bad "guard off: $(tail -3 off.log)"
"$BIN" "${TINY[@]}" --steps 8 --skip-update-z 1e6 --skip-update-window 2 --checkpoint-dir ck_never --metrics never.jsonl >never.log 2>&1 || bad "guard never: $(tail -3 never.log)"
same_losses off.jsonl never.jsonl 1 8 && ok || bad "a guard that never fires changed the run"
[ "$(field never.jsonl 8 skipped_total)" = 0 ] && [ "$(field never.jsonl 8 z_loss)" != null ] && [ "$(field never.jsonl 1 z_loss)" = null ] && ok ||
    bad "never: skipped_total $(field never.jsonl 8 skipped_total), z_loss at 1 and 8: $(field never.jsonl 1 z_loss) $(field never.jsonl 8 z_loss)"
# a firing guard (z 0.3 over 3 steps), from a TOML file; every step checkpointed
printf 'skip-update-z = 0.3\nskip-update-window = 3\n' >guard.toml
"$BIN" "${TINY[@]}" --config guard.toml --steps 14 --checkpoint-every 1 --checkpoint-dir ck_z --metrics z.jsonl >z.log 2>&1 || bad "guard: $(tail -3 z.log)"
$PY "$CHECK" z.jsonl ck_z/step_000014/manifest.json 1 measured >z.check 2>&1 && ok || bad "guard: $(cat z.check)"
skips=$($PY - z.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    m = json.loads(l)
    zs = [z for z in (m["z_loss"], m["z_grad_norm"]) if z is not None]
    fire = any(z > 0.3 for z in zs)
    assert fire == bool(m["skipped"]), m
    assert m["step"] > 3 or not zs, m
    print(m["step"], m["skipped"])
PY
) || bad "guard: skipped lines disagree with their z-scores"
nskip=$(echo "$skips" | awk '$2 == 1' | wc -l)
[ "$nskip" -ge 1 ] && [ "$nskip" -lt 11 ] && ok || bad "guard: $nskip of 11 eligible steps skipped (want some, not all)"
grep -Eq "^step [0-9]+/14 .* \| skipped [1-9][0-9]* \(this\)" z.log && ok || bad "guard: the step line lacks the skip count"
# same_weights A B: the tensors' bytes of two safetensors files (the header names the step) are equal
same_weights() {
    $PY - "$1" "$2" <<'PY'
import struct, sys
def body(p):
    b = open(p, "rb").read()
    return b[8 + struct.unpack("<Q", b[:8])[0]:]
sys.exit(0 if body(sys.argv[1]) == body(sys.argv[2]) else 1)
PY
}
exported() { "$BIN" export --checkpoint "ck_z/$(printf 'step_%06d' "$1")" --out "x$1/model.safetensors" >"x$1.log" 2>&1 && echo "x$1/model.safetensors"; }
while read -r s k; do
    [ "$s" -le 4 ] && continue
    a=$(exported $((s - 1))) && b=$(exported "$s") || { bad "export of step $s: $(cat x$s.log)"; continue; }
    if [ "$k" = 1 ]; then same_weights "$a" "$b" && ok || bad "step $s was skipped but its weights moved"
    else same_weights "$a" "$b" && bad "step $s was not skipped but its weights did not move" || ok; fi
done <<<"$skips"
finish
