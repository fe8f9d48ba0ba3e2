#!/usr/bin/env bash
# hosts_bench.sh — the GPT-2-124M-shape training step across namespace hosts (tools/hosts.sh) on
# links shaped to each rate: step time, and bytes on the wire per step from the veth counters against
# the prediction from the sharding (all-gathers + reduce-scatters per step), as a markdown table.
# Needs root and build/fsdp-train. About 3-4 minutes on 2 cores with the defaults.
#
# usage: bench/hosts_bench.sh [BUILD_DIR (build)] [-- EXTRA fsdp-train FLAGS...]
#   HOSTS_LIST="2 4"        numbers of hosts (1 rank each)
#   RATES="local 1gbit 10gbit"  link rates (tc tbf, both directions); "none" = links without a limit;
#                           "local" = the same world on this one host, shared memory, no links (the
#                           reference: compute plus intra-host communication)
#   STEPS=3                 steps per run; step 1 (warm-up) is left out of every figure
#   SHAPE="--layers 12 --width 768 --heads 12 --vocab 50257 --seq-len 64"; BATCH_PER_RANK=4
# Extra flags go to every fsdp-train run (e.g. -- --max-inflight 0, --precision fp32, --strategy
# grad-op); the prediction follows --precision, --strategy and --reduce-dtype given there.
#
# Bytes per step: each host's link counters (rx + tx, summed over hosts, halved: a byte between two
# hosts leaves one and enters another) are read when rank 0 logs step 1 and when it logs the last
# step (polled every 20 ms: fine for steps of seconds, as here), so they cover steps 2..STEPS;
# divided by STEPS-1. Predicted, per step and over all links, 1 rank per host, from the units: the
# root unit (wte/lm_head, wpe, ln_f) is all-gathered once per step (kept from forward to backward),
# each block twice with --strategy full (but the first --max-inflight blocks of backward once: they
# stay gathered from forward), once with grad-op; an all-gather moves (W-1) x the unit's
# bytes over the links. Gradients: "ideal" counts a bandwidth-optimal reduce-scatter ((W-1) x the
# gradient bytes; none: all-reduce, twice that); "libnbc" counts what Open MPI 4.1's non-blocking
# reduce-scatter did with f32 (MPI_Ireduce_scatter_block: a binomial reduce of the whole buffer to
# rank 0, then a scatter: (W-1)(1 + 1/W) x the gradient bytes), kept for comparison with older runs;
# both dtypes now go through comm_mpi.c's all-to-all, which is ideal.
#
# Communication-only: after each run, build/bench/bench_step_comm issues the same step's all-gathers
# and reduce-scatters (same units, dtypes, strategy and --max-inflight) with no compute, on the same
# hosts and links: "comm-only s" is its step time. The compute-only time is the "local" row (the same
# world on one host). "step / max" divides the step by the larger of the two (issue 16's goal: <= 1.15
# with overlap); it needs RATES to include local.
#
# CPU: the machine's CPU seconds per step (all cores, from /proc/stat over the same steps 2..STEPS):
# user, kernel (system + irq + softirq) and idle. The namespace hosts share this machine's cores, and
# their TCP and veth work is kernel time taken from the same cores the ranks compute on; when user +
# kernel fill the cores, the step is bound by the CPU, not by the links or by the overlap.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$SRC/build
if [ $# -gt 0 ] && [ "$1" != -- ]; then BUILD=$(cd "$1" && pwd); shift; fi
[ "${1:-}" = -- ] && shift
EXTRA=("$@")
TRAIN=$BUILD/fsdp-train
COMM=$BUILD/bench/bench_step_comm
for x in "$TRAIN" "$COMM"; do [ -x "$x" ] || { echo "hosts_bench: $x is missing: build first" >&2; exit 2; }; done
HOSTS=$SRC/tools/hosts.sh
HOSTS_LIST=${HOSTS_LIST:-2 4}
RATES=${RATES:-local 1gbit 10gbit}
STEPS=${STEPS:-3}
SHAPE=${SHAPE:---layers 12 --width 768 --heads 12 --vocab 50257 --seq-len 64}
BATCH_PER_RANK=${BATCH_PER_RANK:-4}
[ "$STEPS" -ge 2 ] || { echo "hosts_bench: STEPS must be >= 2" >&2; exit 2; }
export HOSTS_ID=${HOSTS_ID:-hb$(($$ % 1000))} HOSTS_MPI_TIMEOUT=${HOSTS_MPI_TIMEOUT:-900}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fsdp_hosts_bench.XXXXXX")
trap '"$HOSTS" down; rm -rf "$WORK"' EXIT
cd "$WORK"
"$TRAIN" prepare --text "$SRC"/src/*/*.c --out data --val-fraction 0.1 >prep.log 2>&1

# The sharding's collectives, from the flags (defaults: mixed, full, f32).
flag() { local f=$1 d=$2 i; for ((i = 0; i < ${#EXTRA[@]}; i++)); do [ "${EXTRA[$i]}" = "$f" ] && d=${EXTRA[$((i + 1))]:-$d}; done; echo "$d"; }
prec=$(flag --precision mixed) strat=$(flag --strategy full) rdt=$(flag --reduce-dtype f32)
inflight=$(flag --max-inflight 2)
# The model shape for bench_step_comm, from SHAPE (the trainer's flag names).
sflag() { local f=$1 d=$2 a; read -r -a a <<<"$SHAPE"; for ((i = 0; i < ${#a[@]}; i++)); do [ "${a[$i]}" = "$f" ] && d=${a[$((i + 1))]}; done; echo "$d"; }
tmax=$(sflag --max-seq-len 0); [ "$tmax" = 0 ] && tmax=$(sflag --seq-len 64)
COMM_ARGS=(--layers "$(sflag --layers 12)" --embd "$(sflag --width 768)" --heads "$(sflag --heads 12)"
    --vocab "$(sflag --vocab 50257)" --max-seq "$tmax" --precision "$prec" --strategy "$strat"
    --reduce-dtype "$rdt" --max-inflight "$inflight" --steps 3)
case $strat in full | grad-op | none) ;; *) echo "hosts_bench: unknown --strategy $strat" >&2; exit 2 ;; esac

sum_bytes() { "$HOSTS" bytes | awk '{s += $2 + $3} END {printf "%.0f\n", s / 2}'; } # not %d: mawk clamps it to 2^31-1

echo "# hosts_bench: $(lscpu | sed -n 's/^Model name: *//p'), $(getconf _NPROCESSORS_ONLN) cores; fsdp-train $SHAPE, batch $BATCH_PER_RANK per rank, $STEPS steps; extra flags: ${EXTRA[*]:-(none)}; $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo
echo "| hosts x ranks | link | step time (s, mean of steps 2..$STEPS) | tokens/s | comm-only s | step / max(compute, comm) | on the wire per step (MB) | predicted, ideal (MB) | predicted, libnbc (MB) | measured / libnbc | CPU s per step, all $(getconf _NPROCESSORS_ONLN) cores: user / kernel / idle |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for n in $HOSTS_LIST; do
    "$HOSTS" up "$n" >/dev/null
    for rate in $RATES; do
        launch=("$HOSTS" run "$n" --)
        case $rate in
        none) "$HOSTS" shape off ;;
        local) launch=(timeout "$HOSTS_MPI_TIMEOUT" "$SRC/tests/mpirun.sh" "$n") ;;
        *) "$HOSTS" shape "$rate" ;;
        esac
        tag=${n}_$rate
        rm -f "$tag.jsonl"
        # shellcheck disable=SC2086
        "${launch[@]}" "$TRAIN" --data data $SHAPE --batch $((BATCH_PER_RANK * n)) --steps "$STEPS" \
            --eval-every 0 --sample-tokens 0 --log-every 1 --threads 1 --checkpoint-dir "ck_$tag" \
            --metrics "$tag.jsonl" "${EXTRA[@]}" >"$tag.log" 2>&1 &
        job=$!
        b1="" b2="" c1="" c2=""
        while kill -0 $job 2>/dev/null; do
            if [ -z "$b1" ] && grep -q '"step": 1,' "$tag.jsonl" 2>/dev/null; then b1=$(sum_bytes) c1=$(head -1 /proc/stat); fi
            if [ -z "$b2" ] && grep -q "\"step\": $STEPS," "$tag.jsonl" 2>/dev/null; then b2=$(sum_bytes) c2=$(head -1 /proc/stat); fi
            sleep 0.02
        done
        wait $job || { echo "hosts_bench: run on $n hosts at $rate failed:" >&2; tail -5 "$tag.log" >&2; exit 1; }
        "${launch[@]}" "$COMM" "${COMM_ARGS[@]}" >"$tag.comm" 2>&1 ||
            { echo "hosts_bench: bench_step_comm on $n hosts at $rate failed:" >&2; tail -5 "$tag.comm" >&2; exit 1; }
        python3 - "$tag.jsonl" "$tag.log" "$STEPS" "$n" "$rate" "$b1" "$b2" "$prec" "$strat" "$rdt" "$tag.comm" "${n}_local.jsonl" "$inflight" "$c1" "$c2" <<'PY'
import json, os, re, sys
f, log, steps, n, rate, b1, b2, prec, strat, rdt, commf, localf, inflight, c1, c2 = sys.argv[1:]
steps, n, inflight = int(steps), int(n), int(inflight)
def mean_step(path):
    m = {d["step"]: d for d in map(json.loads, open(path)) if "step_s" in d}
    return sum(m[s]["step_s"] for s in range(2, steps + 1)) / (steps - 1)
t = mean_step(f)
comm = float(re.search(r"comm-only step: ([0-9.]+) s", open(commf).read()).group(1))
ratio = f"{t / max(mean_step(localf), comm):.2f}x" if os.path.exists(localf) else "- (no local run)"
text = open(log).read()
g = re.search(r"width (\d+), .*\(padded (\d+)\), (\d+) parameters", text)
C, Vp, P = (int(x) for x in g.groups())
T = int(re.search(r"--seq-len +(\d+)", text).group(1))
Tmax = int(re.search(r"--max-seq-len +(\d+)", text).group(1)) or T
batch = int(re.search(r"--batch +(\d+)", text).group(1))
root = Vp * C + Tmax * C + 2 * C          # wte (= lm_head), wpe, ln_f
blocks = P - root
pb, gb = (4 if prec == "fp32" else 2), (2 if rdt == "bf16" else 4)
L = int(re.search(r"--layers +(\d+)", text).group(1))
kept = min(inflight, L) * blocks // L     # the first blocks backward needs stay gathered from forward
ag = {"full": 2 * blocks - kept + root, "grad-op": P, "none": 0}[strat] * pb * (n - 1)
rs_ideal = (2 if strat == "none" else 1) * gb * P * (n - 1)
rs_nbc = rs_ideal if strat == "none" or gb == 2 else gb * P * (n - 1) * (1 + 1 / n)
ideal, nbc = ag + rs_ideal, ag + rs_nbc
# The machine's CPU time per measured step from /proc/stat (all cores, USER_HZ ticks): user (+nice),
# kernel (system, irq, softirq: here mostly the namespace hosts' TCP and veth work), idle (+iowait).
cpu = "-"
if c1 and c2:
    a, b = (list(map(int, c.split()[1:9])) for c in (c1, c2))
    d = [(y - x) / os.sysconf("SC_CLK_TCK") / (steps - 1) for x, y in zip(a, b)]
    cpu = f"{d[0] + d[1]:.2f} / {d[2] + d[5] + d[6]:.2f} / {d[3] + d[4]:.2f}"
if rate == "local":  # one host: nothing crosses a link
    print(f"| 1 x {n} (one host) | shared memory | {t:.2f} | {batch * T / t:.0f} | {comm:.2f} | {ratio} | - | {ideal / 1e6:.0f} | {nbc / 1e6:.0f} | - | {cpu} |")
else:
    wire = (int(b2) - int(b1)) / (steps - 1) if b1 and b2 else float("nan")
    print(f"| {n} x 1 | {rate} | {t:.2f} | {batch * T / t:.0f} | {comm:.2f} | {ratio} | {wire / 1e6:.0f} | {ideal / 1e6:.0f} | {nbc / 1e6:.0f} | {wire / nbc:.3f} | {cpu} |")
PY
    done
    "$HOSTS" down
done
