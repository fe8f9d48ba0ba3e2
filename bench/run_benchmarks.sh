#!/usr/bin/env bash
# run_benchmarks.sh — every figure of BENCHMARKS.md in one run on one machine, so the comparisons are
# side by side: per shape (GPT-2-124M at T=64 and T=1024, a 350M shape) and precision, the training
# step's share of the GEMM peak measured in the same run (the faster of f32 and bf16 GEMMs), fsdp.c's
# tokens/s against PyTorch's (the best of the builds installed) and the step split by kernel class;
# trainer throughput at world 1 and 2; the OpenMP wait policy and the launcher's CPU binding side by
# side; measured per-rank peak memory for the main_grad / accumulation / sharding policies at 1, 2
# and 4 ranks against the ZeRO formula, the upcast kernels against memcpy, and all-gather /
# reduce-scatter bus bandwidth at 2 and 4 ranks.
# Writes a markdown fragment with the machine, the load average at start and end, and the exact
# command behind every figure; raw outputs go beside it in OUT.md.logs/.
#
# usage: bench/run_benchmarks.sh [BUILD_DIR (build)] [OUT.md (BUILD_DIR/benchmarks.md)]
#   QUICK=1 bench/run_benchmarks.sh ...   tiny shapes: checks the script in about a minute (figures are
#                                         meaningless)
#   FSDP_COMMIT=abc1234                   the commit to name when the tree is not a git checkout
#   TORCH_MAX_STEP_S=30                   a PyTorch mode whose warm-up step is longer is not timed further
#                                         and skipped at the later shapes (Debian's fp32: reference BLAS)
#   SECTIONS="steps policy"               only these sections (default: steps train policy memory upcast
#                                         comm); the markdown has only theirs
#   TORCH_PYTHONS="/usr/bin/python3 /work/torch-pypi/bin/python"
#                                         the Pythons whose PyTorch builds to time (default: /usr/bin/python3,
#                                         Debian's python3-torch, and any of $TORCH_VENV/bin/python); the
#                                         best build per shape and precision is compared; missing ones
#                                         are skipped with a note
# Needs the benches and fsdp-train built in BUILD_DIR (cmake --build BUILD_DIR), python3 (stdlib), and a
# Python with torch for the PyTorch column (skipped with a note otherwise). About 20 min.
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
    # step shapes: name L C NH T B
    SHAPES=("tiny-T32 2 64 4 32 4" "tiny-T64 2 64 4 64 1" "tiny-L4 4 96 4 32 4")
    POLICY_STEPS=3
else
    L=12 C=768 NH=12 V=50257 T=64 TMAX=1024 B=4 STEPS=5 UPCAST_MIB=128 COMM_MIB=64 SQUARE=2048
    # GPT-2-124M at T=64 and at T=1024 (B=1: one sequence keeps a step near 5 s), and a GPT-2-medium
    # (350M) shape at T=64, B=4 (its fp32 run holds about 8 GB)
    SHAPES=("124M-T64 12 768 12 64 4" "124M-T1024 12 768 12 1024 1" "350M-T64 24 1024 16 64 4")
    POLICY_STEPS=4
fi
SECTIONS=${SECTIONS:-steps train policy memory upcast comm}
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
declare -A CMD_SHAPE CMD_TP CMD_POL CMD_MEM
TORCH_OK=() FIRST_SHAPE=${SHAPES[0]%% *}
TORCH_VENV=${TORCH_VENV:-/work/torch-pypi}
export TORCH_MAX_STEP_S=${TORCH_MAX_STEP_S:-30}
if [ -z "${TORCH_PYTHONS:-}" ]; then
    TORCH_PYTHONS=/usr/bin/python3
    if [ -x "$TORCH_VENV/bin/python" ]; then
        TORCH_PYTHONS="$TORCH_PYTHONS $TORCH_VENV/bin/python"
    else # said plainly: without it the PyTorch column is Debian's build, not the strongest peer
        echo "run_benchmarks: no PyPI PyTorch at $TORCH_VENV (tools/bench-deps.sh makes it): the PyTorch" \
            "column is Debian's python3-torch alone" >&2
    fi
fi
# PyTorch's bf16 autocast only where the CPU has bf16 instructions (on AVX2 alone it is ~50x slower).
TORCH_MODES=fp32
grep -qwE "avx512_bf16|amx_bf16" /proc/cpuinfo && TORCH_MODES=fp32,bf16
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

# ---------------------------------------------------------------- 1. per shape: GEMM peak, step, breakdown, PyTorch
if want steps; then
    # fsdp.c's step (bench_train_step: world 1, fp32 and mixed, with the f32 and bf16 GEMM peaks between
    # its steps) and then PyTorch's (every build) on the same shape and batch, one shape after the other.
    # A build whose step took over TORCH_MAX_STEP_S in a mode at one shape (Debian's fp32: its torch links the
    # reference BLAS, minutes per step at the larger shapes) runs the later shapes without that mode.
    for py in $TORCH_PYTHONS; do
        if "$py" -c "import torch" >/dev/null 2>&1; then TORCH_OK+=("$py"); else echo "run_benchmarks: no torch in $py: skipped" >&2; fi
    done
    declare -A TMODES
    for k in "${!TORCH_OK[@]}"; do TMODES[$k]=$TORCH_MODES; done
    : >"$WORK/shapes.txt"
    for sh in "${SHAPES[@]}"; do
        read -r name sL sC sNH sT sB <<<"$sh"
        CMD_SHAPE[$name]=$(run "step_$name.log" "$B_DIR/bench_train_step" --L $sL --C $sC --NH $sNH --V $V --T $sT --B $sB \
            --steps 2 --square $SQUARE --json "$WORK/step_$name.json")
        cp "$WORK/step_$name.json" "$LOGS/"
        for i in "${!TORCH_OK[@]}"; do
            k=$((i + 1))
            [ -n "${TMODES[$i]}" ] || continue
            c=$(run "torch_${name}_$k.log" "${TORCH_OK[$i]}" "$SRC/tools/bench_torch.py" --L $sL --C $sC --NH $sNH --V $V \
                --T $sT --B $sB --steps 2 --modes "${TMODES[$i]}" --max-step-s $TORCH_MAX_STEP_S --json "$WORK/torch_${name}_$k.json")
            cp "$WORK/torch_${name}_$k.json" "$LOGS/"
            echo "$name torch $k $c" >>"$WORK/shapes.txt"
            TMODES[$i]=$(python3 -c 'import json, sys; print(",".join(m for m, r in json.load(open(sys.argv[1]))["modes"].items() if not r["warmup_only"]))' "$WORK/torch_${name}_$k.json")
        done
        echo "$name step ${CMD_SHAPE[$name]}" >>"$WORK/shapes.txt"
    done
fi

# ---------------------------------------------------------------- 2. throughput: fsdp-train, world 1 and 2
# (TRAIN_BASE: the model and data of sections 2 and 3)
TRAIN_BASE=(--data "$WORK/data" --vocab $V --layers $L --width $C --heads $NH --seq-len $T --max-seq-len $TMAX
            --batch $B --warmup 1 --eval-every 0 --sample-tokens 0)
if want train; then
    for w in 1 2; do
        for p in fp32 mixed; do
            args=("${TRAIN_BASE[@]}" --steps $STEPS --precision $p --checkpoint-dir "$WORK/ck_${w}_$p" --metrics "$WORK/m_${w}_$p.jsonl"
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
fi

# ---------------------------------------------------------------- 3. thread policy and CPU binding
if want policy; then
    # fsdp-train at world 1 and 2: OMP_WAIT_POLICY passive (the trainer's default) against active (spin),
    # alternating, and a world-1 run under plain `mpirun -np 1` (Open MPI binds the rank to one core)
    # against `--bind-to none`. Same model, batch and steps as section 2.
        for w in 1 2; do
        for pol in passive active; do
            args=("${TRAIN_BASE[@]}" --steps $POLICY_STEPS --precision mixed --checkpoint-dir "$WORK/ckp" --metrics "$WORK/pol_${w}_$pol.jsonl")
            if [ $w = 1 ]; then
                CMD_POL[$w,$pol]=$(run "pol_${w}_$pol.log" env OMP_WAIT_POLICY=$pol "$TRAIN" "${args[@]}")
            else
                CMD_POL[$w,$pol]=$(run "pol_${w}_$pol.log" env OMP_WAIT_POLICY=$pol "$MPIRUN" $w "$TRAIN" "${args[@]}")
            fi
            cp "$WORK/pol_${w}_$pol.jsonl" "$LOGS/"
            rm -rf "$WORK/ckp"
        done
    done
    MPIRUN_RAW=(mpirun --allow-run-as-root -np 1)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    for bind in core none; do
        args=("${TRAIN_BASE[@]}" --steps $POLICY_STEPS --precision mixed --checkpoint-dir "$WORK/ckp" --metrics "$WORK/bind_$bind.jsonl")
        if [ $bind = core ]; then
            CMD_POL[bind,$bind]=$(run "bind_$bind.log" "${MPIRUN_RAW[@]}" "$TRAIN" "${args[@]}")
        else
            CMD_POL[bind,$bind]=$(run "bind_$bind.log" "${MPIRUN_RAW[@]}" --bind-to none "$TRAIN" "${args[@]}")
        fi
        cp "$WORK/bind_$bind.jsonl" "$LOGS/"
        rm -rf "$WORK/ckp"
    done
fi

# ---------------------------------------------------------------- 4. peak memory per rank, measured
if want memory; then
    # One real training step (2 micro-batches of 1 sequence per rank) per policy, one factor at a time
    # from FULL_SHARD + LAZY + ACCUM_SHARDED.
    MEM_CONFIGS=("full_shard lazy sharded" "full_shard eager sharded" "full_shard lazy no_sync"
                 "full_shard eager no_sync" "shard_grad_op lazy sharded" "no_shard lazy sharded")
    : >"$WORK/mem_index.txt"
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
fi

# ---------------------------------------------------------------- 5. upcast kernels vs memcpy
if want upcast; then
    CMD_UP=$(run upcast.log "$B_DIR/bench_upcast" $UPCAST_MIB 5)
fi

# ---------------------------------------------------------------- 6. collectives
if want comm; then
    CMD_COMM2=$(run comm2.log "$MPIRUN" 2 "$B_DIR/bench_comm" $COMM_MIB)
    CMD_COMM4=$(run comm4.log "$MPIRUN" 4 "$B_DIR/bench_comm" $COMM_MIB)
fi

LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$(($(date +%s) - T_START))

# ---------------------------------------------------------------- the markdown
export L C NH V VP T TMAX B STEPS SHAPE LOGS WORK LOAD_START LOAD_END ELAPSED SRC SQUARE FIRST_SHAPE
export SECTIONS TORCH_PYTHONS TORCH_MODES POLICY_STEPS TORCH_FOUND="${TORCH_OK[*]:-}"
export CMD_PREP CMD_UP="${CMD_UP:-}" CMD_COMM2="${CMD_COMM2:-}" CMD_COMM4="${CMD_COMM4:-}"
export CMD_POL_1_passive="${CMD_POL[1,passive]:-}" CMD_POL_1_active="${CMD_POL[1,active]:-}"
export CMD_POL_2_passive="${CMD_POL[2,passive]:-}" CMD_POL_2_active="${CMD_POL[2,active]:-}"
export CMD_POL_bind_core="${CMD_POL[bind,core]:-}" CMD_POL_bind_none="${CMD_POL[bind,none]:-}"
export CMD_TP_1_fp32="${CMD_TP[1,fp32]:-}" CMD_TP_1_mixed="${CMD_TP[1,mixed]:-}"
export CMD_TP_2_fp32="${CMD_TP[2,fp32]:-}" CMD_TP_2_mixed="${CMD_TP[2,mixed]:-}"
export CMD_MEM_1="${CMD_MEM[1]:-}" CMD_MEM_2="${CMD_MEM[2]:-}" CMD_MEM_4="${CMD_MEM[4]:-}"
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
ms = lambda s: "%.0f" % (s * 1e3) if s >= 0.1 else "%.1f" % (s * 1e3)
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
SEC = E["SECTIONS"].split()
want = lambda x: x in SEC
first_path = os.path.join(logs, "step_%s.json" % E["FIRST_SHAPE"])
first = json.load(open(first_path)) if want("steps") else None


def mean_step(path):
    steps = [json.loads(l) for l in open(path) if '"step_s"' in l]
    timed = [s["step_s"] for s in steps if s["step"] > 1] or [steps[-1]["step_s"]]
    return sum(timed) / len(timed), len(timed)

flags = sh("grep -m1 '^flags' /proc/cpuinfo")
simd = " ".join(f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16",
                            "avx512_vnni", "amx_bf16", "amx_tile") if re.search(r"\b%s\b" % f, flags))
p("## Machine and conditions\n")
p("| | |\n|---|---|")
p("| CPU | %s |" % (model.group(1).strip() if model else "unknown"))
p("| cores | %s usable (%s socket(s) x %s core(s) x %s thread(s)) |" % (
    cores, sockets.group(1) if sockets else "?", cps.group(1) if cps else "?", tpc.group(1) if tpc else "?"))
p("| SIMD flags | %s |" % simd)
p("| memory | %s GiB |" % mem)
if first:
  p("| oneDNN | ISA %s; f32 GEMM %s, bf16 GEMM %s (%s path) |" % (
    first["isa"], [m for m in first["modes"] if m["mode"] == "fp32"][0]["gemm_impl"] if any(m["mode"] == "fp32" for m in first["modes"]) else "?",
    [m for m in first["modes"] if m["mode"] == "mixed"][0]["gemm_impl"] if any(m["mode"] == "mixed" for m in first["modes"]) else "?",
    [m for m in first["modes"] if m["mode"] == "mixed"][0]["gemm_path"] if any(m["mode"] == "mixed" for m in first["modes"]) else "?"))
p("| commit | %s |" % (E.get("FSDP_COMMIT") or sh("git -C %s rev-parse --short HEAD" % E["SRC"]) or "unknown"))
p("| date | %s |" % sh("date -u '+%Y-%m-%d %H:%M UTC'"))
p("| load average (1/5/15 min) | start %s, end %s |" % (E["LOAD_START"], E["LOAD_END"]))
p("| OpenMP | OMP_WAIT_POLICY=%s for every program (section 3 compares) |" % E.get("OMP_WAIT_POLICY", "unset"))
p("| run time | %d s (bench/run_benchmarks.sh%s) |" % (int(E["ELAPSED"]), ", QUICK=1: tiny shapes" if E["QUICK"] == "1" else ""))
p("")

# 1. per shape
if want('steps'):
    shapes = []  # (name, step json, [torch json...], commands)
    cmds = {}
    for line in open(os.path.join(work, "shapes.txt")):
        name, kind, rest = line.rstrip("\n").split(" ", 2)
        cmds.setdefault(name, []).append(rest if kind == "step" else rest.split(" ", 1)[1])
    for name in cmds:
        st = json.load(open(os.path.join(logs, "step_%s.json" % name)))
        tj = [json.load(open(os.path.join(logs, "torch_%s_%d.json" % (name, k)))) for k in range(1, 9)
              if os.path.exists(os.path.join(logs, "torch_%s_%d.json" % (name, k)))]
        shapes.append((name, st, tj))
    p("## Training step per shape: share of the GEMM peak, fsdp.c vs PyTorch\n")
    p("World 1, one process with every core, FULL_SHARD, one micro-batch; fsdp.c's step is bench_train_step "
      "(forward, backward with the main_grad reduction, clipping, AdamW), PyTorch's is tools/bench_torch.py "
      "(the same GPT-2: padded vocabulary, tied LM head, GELU tanh; forward, backward, clipping, AdamW). "
      "tokens/s = B x T / mean step time of 2 steps after a warm-up step. GEMM work per step = 6 x B x T x "
      "(12 L C^2 + C Vp) (attention's T x T products not counted). The GEMM peak is measured in the same "
      "process between the steps: the best of an f32 and of a bf16 %s^3 oneDNN GEMM through "
      "fsdp_matmul_forward; a step's share is against the faster of the two, whatever precision the step "
      "runs in. PyTorch: the best of the builds installed (%s), fp32 and bf16 autocast%s; ratio = fsdp.c / "
      "best PyTorch.\n" % (E["SQUARE"], ", ".join("torch %s" % t["torch"] for t in (shapes[0][2] if shapes else [])) or "none found",
                           "" if "bf16" in E["TORCH_MODES"] else " (not run: this CPU has no bf16 instructions)"))
    p("| shape | L | C | NH | T | B | precision | GEMM path | peak f32 / bf16 GFLOP/s | step s | GEMM GFLOP/s | share of peak | fsdp.c tokens/s | PyTorch tokens/s (build) | ratio |")
    p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, st, tj in shapes:
        for m in st["modes"]:
            tm = "fp32" if m["mode"] == "fp32" else "bf16"
            best = None
            for t in tj:
                r = t["modes"].get(tm)
                if r and (best is None or r["tokens_per_s_mean"] > best[0]):
                    best = (r["tokens_per_s_mean"], t["torch"] + (", warm-up step only" if r.get("warmup_only") else ""))
            tps = m["tokens_per_s_mean"]
            p("| %s | %d | %d | %d | %d | %d | %s | %s (%s) | %.0f / %.0f | %.3f | %.1f | **%.1f%%** | %.1f | %s | %s |" % (
                name, st["L"], st["C"], st["NH"], st["T"], st["B"], m["mode"], m["gemm_path"], m["gemm_impl"],
                m["peak_f32_gflops"], m["peak_bf16_gflops"], m["step_mean_s"], st["gemm_flop"] / m["step_mean_s"] / 1e9,
                100 * m["share_mean"], tps, "%.1f (%s %s)" % (best[0], tm, best[1]) if best else "not run",
                "%.2f" % (tps / best[0]) if best else "-"))
    p("")
    p("Every PyTorch build, tokens/s (mean of 2 steps; a mode whose warm-up step took over %s s is not "
      "timed further, its warm-up step is the figure, and the later shapes skip it: '-'):\n" % E["TORCH_MAX_STEP_S"])
    p("| shape | build | " + " | ".join(E["TORCH_MODES"].split(",")) + " |")
    p("|---|---|" + "---|" * len(E["TORCH_MODES"].split(",")))
    for name, st, tj in shapes:
        for t in tj:
            p("| %s | torch %s, %d threads | %s |" % (name, t["torch"], t["threads"], " | ".join(
                "%.1f%s" % (t["modes"][mm]["tokens_per_s_mean"], " (warm-up step only)" if t["modes"][mm].get("warmup_only") else "")
                if mm in t["modes"] else "-" for mm in E["TORCH_MODES"].split(","))))
    if not any(tj for _, _, tj in shapes):
        p("| - | no Python of TORCH_PYTHONS (%s) imports torch | |" % E["TORCH_PYTHONS"])
    p("")

    p("### Where fsdp.c's step goes\n")
    p("Mean milliseconds per step by kernel class, each class's own time (a class nested in another, such as the "
      "casts inside a GEMM or the all-reduce inside clipping, is taken out of the outer one), and its share of "
      "the step. gemm: fsdp_matmul_forward/backward (oneDNN, bias gradient), split by the parameters' dtype; "
      "cast: bf16 <-> f32 conversions (GEMM operands, the gathers' shard casts, gradient reductions); adamw: "
      "clipping and AdamW; comm: waiting for collectives (world 1: none to wait for); other: the rest of the "
      "step (engine hooks, allocation, copies, the loss bookkeeping).\n")
    classes = ["gemm_f32", "gemm_bf16", "attention", "layernorm", "gelu", "residual", "softmax_ce", "encoder", "adamw",
               "cast", "comm", "other"]
    p("| shape | precision | step ms | " + " | ".join(classes) + " |")
    p("|---|---|---|" + "---|" * len(classes))
    for name, st, tj in shapes:
        for m in st["modes"]:
            bd, step = m["breakdown_s"], m["step_mean_s"]
            p("| %s | %s | %s | %s |" % (name, m["mode"], ms(step), " | ".join(
                "%s (%.0f%%)" % (ms(bd[c]), 100 * bd[c] / step) if bd.get(c, 0) > 0 else "-" for c in classes)))
    p("\nCommands, shape by shape (fsdp.c first, then each PyTorch build):\n")
    p("```sh")
    for name in cmds:
        cl = cmds[name]
        for c in cl[-1:] + cl[:-1]:
            p(c)
    p("```\n")

# 2. throughput
if want('train'):
    gemm_flop = 3.0 * 2.0 * B * T * (L * 12.0 * C * C + C * VP)
    peak = max(m["peak_gflops"] for m in first["modes"]) if first else None
    p("## Trainer throughput, world 1 and 2\n")
    p("fsdp-train on a GPT-2-124M-shaped model (%s), T = %d, global batch %d sequences (%d tokens) per step, one "
      "micro-batch, FULL_SHARD, LAZY main_grad; tokens/s = global tokens / mean step time of steps 2..%s "
      "(step 1 warms up), from `--metrics`. GEMM work per step %.1f GFLOP; share against the GEMM peak of "
      "the %s run above (%s).\n" % (E["SHAPE"], T, B, B * T, E["STEPS"], gemm_flop / 1e9, E["FIRST_SHAPE"],
                                             "%.1f GFLOP/s" % peak if peak else "not measured: section steps not run"))
    p("| ranks | precision | threads/rank | step s | tokens/s | GEMM GFLOP/s | share of GEMM peak |")
    p("|---|---|---|---|---|---|---|")
    for w in (1, 2):
        for prec in ("fp32", "mixed"):
            st, n = mean_step(os.path.join(logs, "m_%d_%s.jsonl" % (w, prec)))
            thr = re.search(r"(\d+) OpenMP threads? per rank", read("train_w%d_%s.log" % (w, prec)))
            p("| %d | %s | %s | %.3f | %.1f | %.1f | %s |" % (
                w, prec, thr.group(1) if thr else "?", st, B * T / st, gemm_flop / st / 1e9,
                "%.1f%%" % (100 * gemm_flop / st / 1e9 / peak) if peak else "-"))
    p("\nCommands ($TMP is a temporary folder; the rank count comes from the launcher; threads default to "
      "the cores this process may use / ranks; token data: this repository's C sources, byte-level, which "
      "any vocabulary >= 257 reads):\n")
    p("```sh")
    p(E["CMD_PREP"])
    for w in (1, 2):
        for prec in ("fp32", "mixed"):
            p(E["CMD_TP_%d_%s" % (w, prec)])
    p("```\n")

# 3. thread policy
if want('policy'):
    p("## OpenMP wait policy and CPU binding\n")
    p("The same trainer run (mixed precision, %d steps, mean of steps 2..%d), one setting changed at a time, "
      "run one after the other. passive: idle OpenMP threads sleep (the trainer's default since it sets "
      "OMP_WAIT_POLICY when unset); active: they spin at every barrier. Binding: plain `mpirun -np 1` binds "
      "the rank to one core, so `--threads 0` gives it one thread; `--bind-to none` leaves it every core.\n" % (
          int(E["POLICY_STEPS"]), int(E["POLICY_STEPS"])))
    p("| run | ranks | threads/rank | OMP_WAIT_POLICY | binding | step s | tokens/s |")
    p("|---|---|---|---|---|---|---|")
    for key, w, pol, bind, log in (("1_passive", 1, "passive", "none (no launcher)", "pol_1_passive"),
                                   ("1_active", 1, "active", "none (no launcher)", "pol_1_active"),
                                   ("2_passive", 2, "passive", "--bind-to none", "pol_2_passive"),
                                   ("2_active", 2, "active", "--bind-to none", "pol_2_active"),
                                   ("bind_core", 1, "passive", "mpirun default (core)", "bind_core"),
                                   ("bind_none", 1, "passive", "--bind-to none", "bind_none")):
        st, n = mean_step(os.path.join(logs, log + ".jsonl"))
        thr = re.search(r"(\d+) OpenMP threads? per rank", read(log + ".log"))
        p("| %s | %d | %s | %s | %s | %.3f | %.1f |" % (key, w, thr.group(1) if thr else "?", pol, bind, st, B * T / st))
    p("\n```sh")
    for key in ("1_passive", "1_active", "2_passive", "2_active", "bind_core", "bind_none"):
        p(E["CMD_POL_" + key])
    p("```\n")

# 4. memory
if want('memory'):
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
if want('upcast'):
    p("## Upcast copy / add vs memcpy\n")
    p("`%s` — one thread; GB/s counts bytes read + written; memcpy moves the same bytes.\n" % E["CMD_UP"])
    p("```\n" + read("upcast.log").strip() + "\n```\n")

# 6. comm
if want('comm'):
    p("## All-gather / reduce-scatter bus bandwidth\n")
    p("nccl-tests definitions: size = the whole buffer, busbw = algbw x (n-1)/n; ranks are processes on this "
      "machine (shared memory). Largest size:\n")
    p("busbw in GB/s of fsdp.c's shared-memory transport out of place (shm), in the engine's form (eng), the "
      "engine's form with buffers from the shared heap (heap), out of place from the shared heap (hoop), its MPI "
      "paths (mpi), Open MPI's own blocking "
      "collective called directly (ompi; no bf16 sum in MPI), and memcpy of the same size on every rank at the "
      "same moment; heap/cpy = heap busbw / memcpy (bench/bench_comm.c says what each form does).\n")
    cols = ("shm_busbw", "eng_busbw", "heap_busbw", "hoop_busbw", "mpi_busbw", "ompi_busbw", "memcpy", "heap/cpy",
            "hoop/cpy")
    p("| ranks | collective | dtype | size MiB | shm | eng | heap | hoop | mpi | ompi | memcpy | heap/cpy | "
      "hoop/cpy |")
    p("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for w, log in ((2, "comm2.log"), (4, "comm4.log")):
        head = None
        for line in read(log).splitlines():
            f = line.split()
            if len(f) > 2 and f[0] == "#" and f[1] == "collective":
                head = f[1:]  # the column names, as bench_comm prints them
            elif head and len(f) == len(head) and f[0] in ("all-gather", "reduce-scatter") and int(f[2]) >= 1048576:
                row = dict(zip(head, f))
                p("| %d | %s | %s | %.0f | %s |" % (w, f[0], f[1], int(f[2]) / 1048576.0,
                                                   " | ".join(row[c] for c in cols)))
    p("")
    for w, log in ((2, "comm2.log"), (4, "comm4.log")):
        p("`%s`:\n" % E["CMD_COMM%d" % w])
        p("```\n" + read(log).strip() + "\n```\n")
print("\n".join(out))
PY
echo "run_benchmarks: wrote $OUT (raw outputs in $LOGS) in ${ELAPSED} s" >&2
