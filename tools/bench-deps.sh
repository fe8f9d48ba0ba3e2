#!/usr/bin/env bash
# bench-deps.sh — the strongest PyTorch a user would install, for the benchmarks' peer columns (never for
# CI or the tests, which use Debian's python3-torch): a virtual environment of its own with PyPI's torch
# 2.x (the CUDA-enabled Linux wheel, which runs on the CPU too; its CPU kernels are oneDNN/MKL), numpy,
# transformers 4.46 and PEFT 0.13 (tools/bench_torch_llama.py, tools/bench_fsdp2_llama.py). About 5.4 GB; 1-2 minutes
# where the package index is near.
#
# usage: tools/bench-deps.sh [VENV (default: $TORCH_VENV, else /work/torch-pypi)]
# bench/run_benchmarks.sh takes $TORCH_VENV/bin/python (default /work/torch-pypi) when it exists and says
# so when it does not; bench/bench_llama.sh takes the Python as an argument: VENV/bin/python.
set -euo pipefail
VENV=${1:-${TORCH_VENV:-/work/torch-pypi}}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" # not --system-site-packages: Debian's torch must not shadow PyPI's
fi
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q torch numpy "transformers==4.46.3" "peft==0.13.2"
"$VENV/bin/python" - <<'PY'
import peft, torch, transformers
print(f"bench-deps: torch {torch.__version__} (oneDNN {torch.backends.mkldnn.is_available()}), "
      f"transformers {transformers.__version__}, peft {peft.__version__}, {torch.get_num_threads()} threads")
PY
