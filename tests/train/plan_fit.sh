#!/usr/bin/env bash
# plan_fit.sh — the memory plan as a solver and as a guard (issue 29 item 5): `--plan --fit BYTES` picks,
# in the documented order (the given --strategy then more sharded ones; the given --recompute then on;
# the fewest --micro-batches dividing the per-rank batch), the first setting whose plan fits — checked
# here against a brute force over `--plan --report` of every candidate — and prints that plan; no
# setting fitting is an error naming the largest category; a run whose plan exceeds --mem-limit is
# refused before the model is allocated, naming the same category as --plan's report.
# usage: plan_fit.sh FSDP_TRAIN_BINARY MPIRUN_SH WORKDIR
set -uo pipefail
BIN=$1 MPIRUN=$2 WORK=$3
SRC=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
source "$SRC/tests/lib_common.sh"
export OMP_NUM_THREADS=1
PY=/usr/bin/python3

"$BIN" prepare --text "$SRC"/src/*/*.c --out data --val-fraction 0.1 >prep.log 2>&1 || bad "prepare: $(cat prep.log)"
M=(--data data --layers 2 --width 64 --heads 2 --seq-len 64 --batch 16 --world 2 --threads 1 --mixed-compute f32)
# total KEY... : the predicted total (or a category) of --plan with these flags
total() { "$BIN" --plan "${M[@]}" "$@" --report p.json >p.log 2>&1 && $PY -c "import json; print(json.load(open('p.json'))['predicted']['total'])"; }
largest() { $PY -c "import json; p=json.load(open('p.json'))['predicted']; p.pop('total'); print(max(p, key=p.get))"; }
# expected STRATEGY... -- BUDGET: the first (strategy, recompute, micro-batches) fitting, by brute force
expected() {
    local budget=$1 s r m t; shift
    for s in "$@"; do for r in 0 1; do for m in 1 2 4 8; do
        t=$(total --strategy "$s" --recompute=$r --micro-batches $m) || { echo "plan failed"; return; }
        [ "$t" -le "$budget" ] && { echo "$m $r $s $t"; return; }
    done; done; done
    echo none
}
# fit BUDGET FLAGS...: "micro recompute strategy total" of --plan --fit's choice (its report)
fit() {
    local b=$1; shift
    "$BIN" --plan "${M[@]}" "$@" --fit "$b" --report f.json >f.log 2>&1 || { echo "failed"; return; }
    $PY -c "import json; p=json.load(open('f.json')); print(p['n_micro'], end=' ')"
    sed -nE 's/^--fit [0-9]+ B per rank: --micro-batches ([0-9]+) --recompute ([01]) --strategy ([a-z-]+) fits \(([0-9]+) B.*/\1 \2 \3 \4/p' f.log
}
P4=$(total --micro-batches 4) P8=$(total --micro-batches 8) P8R=$(total --micro-batches 8 --recompute)
[ -n "$P4" ] && [ "$P8" -lt "$P4" ] && [ "$P8R" -lt "$P8" ] && ok || bad "plans do not shrink with micro-batches and recompute: $P4 $P8 $P8R"
# exactly P4: 4 micro-batches, no recompute
for budget in "$P4" $((P8 - 1)) $((P8R + 1)); do
    want=$(expected "$budget" full) got=$(fit "$budget")
    w=($want)
    [ "$got" = "${w[0]} ${w[0]} ${w[1]} ${w[2]} ${w[3]}" ] && ok || bad "--fit $budget: got '$got', brute force '$want': $(tail -2 f.log)"
done
# from --strategy none the solver may move to grad-op, then full (and reads --fit from a TOML file)
NONE4=$(total --strategy none --micro-batches 4)
budget=$((NONE4 - 1))
want=$(expected "$budget" none grad-op full)
printf 'fit = %s\nstrategy = "none"\n' "$budget" >fit.toml
"$BIN" --plan "${M[@]}" --config fit.toml --report f.json >f.log 2>&1 || bad "TOML fit: $(tail -2 f.log)"
w=($want)
grep -q -- "--micro-batches ${w[0]} --recompute ${w[1]} --strategy ${w[2]} fits (${w[3]} B" f.log && grep -q "asked: --micro-batches 1 --recompute 0 --strategy none" f.log && ok ||
    bad "--fit from --strategy none: want '$want': $(grep fit f.log)"
grep -q "^total " f.log && ok || bad "the fitted plan is not printed"
# nothing fits: an error naming the smallest plan's largest category
"$BIN" --plan "${M[@]}" --fit 1000 >n.log 2>&1 && bad "--fit 1000 succeeded" || {
    small=$(total --micro-batches 8 --recompute) cat=$(largest)
    grep -q -- "--fit 1000: no setting fits: the smallest plan (--micro-batches 8, --recompute 1, --strategy full, 2 ranks) needs $small B per rank, its largest category $cat" n.log && ok || bad "no fit: $(cat n.log)"; }
"$BIN" --data data --fit 5 >x.log 2>&1 && bad "--fit without --plan ran" || { grep -q -- "--fit 5 needs --plan" x.log && ok || bad "$(cat x.log)"; }

# the guard: a run over --mem-limit is refused before the model exists; under it, it runs
R=(--data data --layers 2 --width 64 --heads 2 --seq-len 64 --batch 16 --threads 1 --mixed-compute f32 --steps 1 --eval-every 0 --sample-tokens 0)
need=$("$BIN" --plan "${R[@]}" --report r.json >r.log 2>&1 && $PY -c "import json; print(json.load(open('r.json'))['predicted']['total'])")
cat=$(cp r.json p.json && largest)
"$MPIRUN" 1 "$BIN" "${R[@]}" --mem-limit $((need - 1)) --checkpoint-dir ck_refused >g.log 2>&1 && bad "a run over --mem-limit ran" || {
    grep -q "the memory plan of this run needs $need B per rank, more than the $((need - 1)) B of --mem-limit: its largest category is $cat" g.log &&
        ! grep -q "^model:" g.log && [ -z "$(ls ck_refused 2>/dev/null | grep step_)" ] && ok || bad "refusal: $(tail -3 g.log)"; }
"$BIN" --plan "${R[@]}" --mem-limit $((need - 1)) >pl.log 2>&1 && grep -q "note: this plan exceeds the $((need - 1)) B per rank of --mem-limit: a run of it would be refused (largest category $cat" pl.log && ok ||
    bad "--plan over --mem-limit: $(tail -2 pl.log)"
"$BIN" --plan "${R[@]}" --mem-limit "$need" >pm.log 2>&1 && ! grep -q "note: this plan exceeds" pm.log && ok || bad "--plan within --mem-limit notes an excess"
"$BIN" "${R[@]}" --mem-limit "$need" --checkpoint-dir ck_ok >h.log 2>&1 && [ -f ck_ok/latest ] && ok || bad "a run within --mem-limit: $(tail -3 h.log)"
finish
