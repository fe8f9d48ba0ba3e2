#!/usr/bin/env bash
# run_benchmarks.sh — every figure of BENCHMARKS.md in one run on one machine, so the comparisons are
# side by side: training throughput (world 1 and 2, fp32 and mixed, GPT-2-124M shape) with its share of
# the measured GEMM peak, PyTorch on the same model and batch, measured per-rank peak memory for the
# main_grad / accumulation / sharding policies at 1, 2 and 4 ranks against the ZeRO formula, the
# upcast kernels against memcpy, and all-gather / reduce-scatter bus bandwidth at 2 and 4 ranks.
# Writes a markdown fragment with the machine, the load average at start and end, and the exact
# command behind every figure; raw outputs go beside it in OUT.md.logs/.
#
# usage: bench/run_benchmarks.sh [BUILD_DIR (build)] [OUT.md (BUILD_DIR/benchmarks.md)]
#   QUICK=1 bench/run_benchmarks.sh ...   tiny shapes: checks the script in about a minute (figures are
#                                         meaningless)
#   FSDP_COMMIT=abc1234                   the commit to name when the tree is not a git checkout
# Needs the benches and fsdp-train built in BUILD_DIR (cmake --build BUILD_DIR), python3 (stdlib), and
# /usr/bin/python3 with torch for the PyTorch column (skipped with a note otherwise). About 10-15 min.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
OUT=${2:-$BUILD/benchmarks.md}
LOGS=$OUT.logs
MPIRUN=$SRC/tests/mpirun.sh
TRAIN=$BUILD/fsdp-train
B_DIR=$BUILD/bench
for x in "$TRAIN" "$B_DIR/bench_train_step" "$B_DIR/bench_plan" "$B_DIR/bench_upcast" "$B_DIR/bench_comm"; do
    [ -x "$x" ] || { echo "run_benchmarks: $x is missing: build first (cmake --build $BUILD)" >&2; exit 2; }
done
rm -rf "$LOGS" && mkdir -p "$LOGS"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fsdp_bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# ---------------------------------------------------------------- settings
if [ "${QUICK:-0}" = 1 ]; then
    L=2 C=64 NH=4 V=512 T=32 TMAX=64 B=4 STEPS=3 UPCAST_MIB=8 COMM_MIB=4 SQUARE=256
else
    L=12 C=768 NH=12 V=50257 T=64 TMAX=1024 B=4 STEPS=5 UPCAST_MIB=128 COMM_MIB=64 SQUARE=2048
fi
VP=$(((V + 127) / 128 * 128))
SHAPE="L $L, C $C, NH $NH, V $V (padded $VP), position table $TMAX"
unset OMP_NUM_THREADS # every core for one process; tests/mpirun.sh gives each rank one thread
# Idle OpenMP threads sleep instead of spinning: on a shared or oversubscribed machine spinning threads
# steal the cores the working ones need (bench_train_step measured 1.5-1.9 s vs 2.8-5.3 s per step).
# Every program here (and PyTorch's libgomp) gets the same policy; set OMP_WAIT_POLICY to override.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
T_START=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# Prints a command (as it would be typed from the repository root) and runs it, output to a log.
# usage: run LOG CMD...
run() {
    local log=$1; shift
    local shown="$*"
    shown=${shown//$BUILD/build}
    shown=${shown//$SRC\//}
    shown=${shown//$WORK/\$TMP}
    echo "$shown" >>"$LOGS/commands.txt"
    echo "+ $shown" >&2
    "$@" >"$LOGS/$log" 2>&1 || { echo "run_benchmarks: failed: $shown (see $LOGS/$log)" >&2; tail -5 "$LOGS/$log" >&2; exit 1; }
    echo "$shown"
}

# Token data: this repository's sources, byte-level (ids < 257 are valid in any vocabulary >= 257).
run prepare.log "$TRAIN" prepare --text "$SRC"/src/*/*.c "$SRC"/src/*/*.h --out "$WORK/data" --val-fraction 0.05 >/dev/null
CMD_PREP="build/fsdp-train prepare --text src/*/*.c src/*/*.h --out \$TMP/data --val-fraction 0.05"

# ---------------------------------------------------------------- 1. GEMM peak and world-1 step breakdown
CMD_STEP=$(run train_step.log "$B_DIR/bench_train_step" --L $L --C $C --NH $NH --V $V --T $T --B $B --steps 2 --square $SQUARE)

# ---------------------------------------------------------------- 2. throughput: fsdp-train, world 1 and 2
TRAIN_FLAGS=(--data "$WORK/data" --vocab $V --layers $L --width $C --heads $NH --seq-len $T --max-seq-len $TMAX
             --batch $B --steps $STEPS --warmup 1 --eval-every 0 --sample-tokens 0)
declare -A CMD_TP
for w in 1 2; do
    for p in fp32 mixed; do
        args=("${TRAIN_FLAGS[@]}" --precision $p --checkpoint-dir "$WORK/ck_${w}_$p" --metrics "$WORK/m_${w}_$p.jsonl"
              --report "$WORK/r_${w}_$p.json")
        if [ $w = 1 ]; then
            CMD_TP[$w,$p]=$(run "train_w${w}_$p.log" "$TRAIN" "${args[@]}")
        else
            CMD_TP[$w,$p]=$(run "train_w${w}_$p.log" "$MPIRUN" $w "$TRAIN" "${args[@]}")
        fi
        cp "$WORK/m_${w}_$p.jsonl" "$WORK/r_${w}_$p.json" "$LOGS/"
        rm -rf "$WORK/ck_${w}_$p" # the 124M checkpoint is 1.4 GB
    done
done

# ---------------------------------------------------------------- 3. PyTorch, same model and batch
TORCH=no
if /usr/bin/python3 -c "import torch" >/dev/null 2>&1; then
    TORCH=yes
    CMD_TORCH=$(run torch.log /usr/bin/python3 "$SRC/tools/bench_torch.py" --L $L --C $C --NH $NH --V $V --T $T --B $B --steps 2 --modes fp32,bf16)
fi

# ---------------------------------------------------------------- 4. peak memory per rank, measured
# One real training step (2 micro-batches of 1 sequence per rank) per policy, one factor at a time
# from FULL_SHARD + LAZY + ACCUM_SHARDED.
MEM_CONFIGS=("full_shard lazy sharded" "full_shard eager sharded" "full_shard lazy no_sync"
             "full_shard eager no_sync" "shard_grad_op lazy sharded" "no_shard lazy sharded")
: >"$WORK/mem_index.txt"
declare -A CMD_MEM
for w in 1 2 4; do
    k=0
    for cfgs in "${MEM_CONFIGS[@]}"; do
        read -r s mg ac <<<"$cfgs"
        k=$((k + 1))
        args=(--measure --layers $L --embd $C --heads $NH --vocab $V --seq $T --max-seq $TMAX --batch 1 --micro 2
              --strategy $s --main-grad $mg --accum $ac --report "$WORK/mem_${w}_$k.json")
        if [ $w = 1 ]; then
            c=$(run "mem_${w}_$k.log" "$B_DIR/bench_plan" "${args[@]}")
        else
            c=$(run "mem_${w}_$k.log" "$MPIRUN" $w "$B_DIR/bench_plan" "${args[@]}")
        fi
        [ $k = 1 ] && CMD_MEM[$w]=$c
        echo "$w $k $WORK/mem_${w}_$k.json" >>"$WORK/mem_index.txt"
        cp "$WORK/mem_${w}_$k.json" "$LOGS/"
    done
done

# ---------------------------------------------------------------- 5. upcast kernels vs memcpy
CMD_UP=$(run upcast.log "$B_DIR/bench_upcast" $UPCAST_MIB 5)

# ---------------------------------------------------------------- 6. collectives
CMD_COMM2=$(run comm2.log "$MPIRUN" 2 "$B_DIR/bench_comm" $COMM_MIB)
CMD_COMM4=$(run comm4.log "$MPIRUN" 4 "$B_DIR/bench_comm" $COMM_MIB)

LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$(($(date +%s) - T_START))

# ---------------------------------------------------------------- the markdown
export L C NH V VP T TMAX B STEPS SHAPE LOGS WORK TORCH LOAD_START LOAD_END ELAPSED SRC
export CMD_PREP CMD_STEP CMD_UP CMD_COMM2 CMD_COMM4 CMD_TORCH="${CMD_TORCH:-}"
export CMD_TP_1_fp32="${CMD_TP[1,fp32]}" CMD_TP_1_mixed="${CMD_TP[1,mixed]}"
export CMD_TP_2_fp32="${CMD_TP[2,fp32]}" CMD_TP_2_mixed="${CMD_TP[2,mixed]}"
export CMD_MEM_1="${CMD_MEM[1]}" CMD_MEM_2="${CMD_MEM[2]}" CMD_MEM_4="${CMD_MEM[4]}"
export QUICK=${QUICK:-0}
python3 - >"$OUT" <<'PY'
import json, os, re, subprocess

E = os.environ
logs, work = E["LOGS"], E["WORK"]
L, C, V, VP, T, B = (int(E[k]) for k in ("L", "C", "V", "VP", "T", "B"))


def read(name):
    with open(os.path.join(logs, name)) as f:
        return f.read()


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


mib = lambda b: b / 1048576.0
out = []
p = out.append

# machine
lscpu = sh("lscpu")
model = re.search(r"Model name:\s*(.*)", lscpu)
cores = sh("nproc")
sockets = re.search(r"Socket\(s\):\s*(\d+)", lscpu)
cps = re.search(r"Core\(s\) per socket:\s*(\d+)", lscpu)
tpc = re.search(r"Thread\(s\) per core:\s*(\d+)", lscpu)
mem = sh("free -g | awk '/Mem:/ {print $2}'")
step_log = read("train_step.log")
isa = re.search(r"# oneDNN ISA (\S+);.*bf16 GEMM path (\S+) \(([^)]*)\); f32 (\S+)", step_log)
peak = max(float(x) for x in re.findall(r"measured bf16 GEMM peak: ([\d.]+) GFLOP/s", step_log))
p("## Machine and conditions\n")
p("| | |\n|---|---|")
p("| CPU | %s |" % (model.group(1).strip() if model else "unknown"))
p("| cores | %s usable (%s socket(s) x %s core(s) x %s thread(s)) |" % (
    cores, sockets.group(1) if sockets else "?", cps.group(1) if cps else "?", tpc.group(1) if tpc else "?"))
p("| memory | %s GiB |" % mem)
if isa:
    p("| oneDNN | ISA %s; bf16 GEMM path %s (%s); f32 GEMM %s |" % isa.groups())
p("| commit | %s |" % (E.get("FSDP_COMMIT") or sh("git -C %s rev-parse --short HEAD" % E["SRC"]) or "unknown"))
p("| date | %s |" % sh("date -u '+%Y-%m-%d %H:%M UTC'"))
p("| load average (1/5/15 min) | start %s, end %s |" % (E["LOAD_START"], E["LOAD_END"]))
p("| OpenMP | OMP_WAIT_POLICY=%s for every program |" % E.get("OMP_WAIT_POLICY", "unset"))
p("| run time | %d s (bench/run_benchmarks.sh%s) |" % (int(E["ELAPSED"]), ", QUICK=1: tiny shapes" if E["QUICK"] == "1" else ""))
p("")

# 1-2. throughput
gemm_flop = 3.0 * 2.0 * B * T * (L * 12.0 * C * C + C * VP)


def mean_step(path):
    steps = [json.loads(l) for l in open(path) if '"step_s"' in l]
    timed = [s["step_s"] for s in steps if s["step"] > 1] or [steps[-1]["step_s"]]
    return sum(timed) / len(timed), len(timed)


p("## Training throughput\n")
p("GPT-2-124M-shaped model (%s), T = %d, global batch %d sequences (%d tokens) per step, one "
  "micro-batch, FULL_SHARD, LAZY main_grad; tokens/s = global tokens / mean step time of steps 2..%s "
  "(step 1 warms up), from `--metrics`. GEMM work per step = 6 x tokens x (12 L C^2 + C Vp) = %.1f GFLOP "
  "(attention's T x T products not counted); the bf16 GEMM peak, %.1f GFLOP/s, is the best %s^3 oneDNN "
  "GEMM bench_train_step measured in this run with every core, interleaved with its steps.\n" % (
      E["SHAPE"], T, B, B * T, E["STEPS"], gemm_flop / 1e9, peak, re.search(r"--square (\d+)", E["CMD_STEP"]).group(1)))
p("| ranks | precision | threads/rank | step s | tokens/s | GEMM GFLOP/s | share of bf16 GEMM peak |")
p("|---|---|---|---|---|---|---|")
tps = {}
for w in (1, 2):
    for prec in ("fp32", "mixed"):
        st, n = mean_step(os.path.join(logs, "m_%d_%s.jsonl" % (w, prec)))
        thr = re.search(r"(\d+) OpenMP threads? per rank", read("train_w%d_%s.log" % (w, prec)))
        tps[w, prec] = B * T / st
        p("| %d | %s | %s | %.3f | %.1f | %.1f | %.1f%% |" % (
            w, prec, thr.group(1) if thr else "?", st, B * T / st, gemm_flop / st / 1e9, 100 * gemm_flop / st / 1e9 / peak))
p("\nCommands ($TMP is a temporary folder; the rank count comes from the launcher; threads default to "
  "cores / ranks; token data: this repository's C sources, byte-level, which any vocabulary >= 257 "
  "reads):\n")
p("```sh")
p(E["CMD_PREP"])
for w in (1, 2):
    for prec in ("fp32", "mixed"):
        p(E["CMD_TP_%d_%s" % (w, prec)])
p("```\n")
p("World-1 step breakdown and the GEMM peak (`%s`):\n" % E["CMD_STEP"])
p("```\n" + step_log.strip() + "\n```\n")

# 3. PyTorch
p("## PyTorch on the same model and batch\n")
if E["TORCH"] == "yes":
    tl = read("torch.log")
    p("`%s` (one process, every core; fp32, and bf16 autocast for mixed). Ratio = fsdp-train world-1 "
      "tokens/s / PyTorch tokens/s (mean step times of both).\n" % E["CMD_TORCH"])
    p("| precision | fsdp-train tokens/s | PyTorch tokens/s | ratio |")
    p("|---|---|---|---|")
    for prec, tm in (("fp32", "fp32"), ("mixed", "bf16")):
        m = re.search(r"^%s: .*?; ([\d.]+) tokens/s mean" % tm, tl, re.M)
        if m:
            t = float(m.group(1))
            p("| %s / %s | %.1f | %.1f | %.2f |" % (prec, tm, tps[1, prec], t, tps[1, prec] / t))
    p("\n```\n" + tl.strip() + "\n```\n")
else:
    p("Not run: /usr/bin/python3 cannot import torch (python3-torch).\n")

# 4. memory
mem_runs = [(l.split()[0], json.load(open(l.split()[2]))) for l in open(os.path.join(work, "mem_index.txt"))]
p("## Peak memory per rank (measured)\n")
p("One real training step of the same model shape (2 micro-batches of 1 sequence of %d tokens per rank, "
  "mixed precision) under bench_plan --measure: measured peaks are the allocator's, max over ranks; "
  "the plan's prediction is beside it (exact = master, optim, grad_shard, param_full and main_grad equal "
  "the prediction to the byte). ZeRO = (2+2+12) x psi / N bytes, psi = %s parameters. "
  "'states' = master + optim + grad_shard.\n" % (T, "{:,}".format(mem_runs[0][1]["n_params"])))
rows = []
for w, r in mem_runs:
    m, pr = r["measured"], r["predicted"]
    states = m["master"] + m["optim"] + m["grad_shard"]
    exact = all(m[c] == pr[c] for c in ("master", "optim", "grad_shard", "param_full", "main_grad"))
    rows.append("| %s | %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | **%.1f** | %.1f | %.1f | %.3f | %.3f | %s |" % (
        w, r["strategy"], r["main_grad"], r["accum"].replace("ACCUM_", ""), mib(states), mib(m["param_full"]),
        mib(m["main_grad"]), mib(m["activation"]), mib(m["comm"]), mib(m["other"]), mib(m["total"]),
        mib(pr["total"]), mib(r["zero_ref_bytes"]), states / r["zero_ref_bytes"], m["total"] / r["zero_ref_bytes"],
        "exact" if exact else "DIFFERS"))
p("| ranks | strategy | main_grad | accum | states MiB | param_full MiB | main_grad MiB | activation MiB | comm MiB | other MiB | measured total MiB | predicted total MiB | ZeRO MiB | states / ZeRO | total / ZeRO | plan |")
p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
out.extend(rows)
p("\nCommands (one per row; the first of each rank count shown, the others change --strategy, "
  "--main-grad and --accum as in the table):\n")
p("```sh\n%s\n%s\n%s\n```\n" % (E["CMD_MEM_1"], E["CMD_MEM_2"], E["CMD_MEM_4"]))

# 5. upcast
p("## Upcast copy / add vs memcpy\n")
p("`%s` — one thread; GB/s counts bytes read + written; memcpy moves the same bytes.\n" % E["CMD_UP"])
p("```\n" + read("upcast.log").strip() + "\n```\n")

# 6. comm
p("## All-gather / reduce-scatter bus bandwidth\n")
p("nccl-tests definitions: size = the whole buffer, busbw = algbw x (n-1)/n; ranks are processes on this "
  "machine (shared memory). Largest size:\n")
p("busbw in GB/s of fsdp.c's shared-memory transport (shm), its MPI paths (mpi), Open MPI's own blocking "
  "collective called directly (ompi; no bf16 sum in MPI), and memcpy of the same size on every rank at the "
  "same moment; shm/cpy = shm busbw / memcpy.\n")
p("| ranks | collective | dtype | size MiB | shm | mpi | ompi | memcpy | shm/cpy |")
p("|---|---|---|---|---|---|---|---|---|")
for w, log in ((2, "comm2.log"), (4, "comm4.log")):
    for line in read(log).splitlines():
        f = line.split()
        if len(f) == 12 and f[0] in ("all-gather", "reduce-scatter") and int(f[2]) >= 1048576:
            p("| %d | %s | %s | %.0f | %s | %s | %s | %s | %s |" % (w, f[0], f[1], int(f[2]) / 1048576.0, f[7], f[8],
                                                                f[9], f[10], f[11]))
p("")
for w, log in ((2, "comm2.log"), (4, "comm4.log")):
    p("`%s`:\n" % E["CMD_COMM%d" % w])
    p("```\n" + read(log).strip() + "\n```\n")
print("\n".join(out))
PY
echo "run_benchmarks: wrote $OUT (raw outputs in $LOGS) in ${ELAPSED} s" >&2
