#!/usr/bin/env bash
# test-deps.sh — what only the tests need, called by tools/test.sh (not by tools/setup.sh):
#  - Debian's python3-torch (the PyTorch reference fixtures and export checks) and python3-venv;
#  - a virtual environment .venv/ (ignored by git) made by Debian's /usr/bin/python3 with
#    --system-site-packages, so it sees that torch, plus transformers from PyPI ("transformers<4.47",
#    which brings tokenizers and safetensors) and jinja2 (pinned; apply_chat_template renders with it,
#    tests/train/chat_ref.py): the Hugging Face round-trip tests run .venv/bin/python; and PEFT 0.13.2
#    with accelerate 1.0.1 (LoRA's reference, tools/llama_reference.py) installed --no-deps: their own
#    requirements (torch, psutil, pyyaml, ...) are Debian's or transformers', and pip would otherwise
#    replace the system torch with PyPI's;
#  - .venv-tok/ with tokenizers 0.23.3 alone, for the tokenizer's own tests (below).
# PyPI's torch is never installed: pip runs with the system torch already satisfying transformers.
# Idempotent: when everything is there it only checks (well under a second).
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(python3 python3-numpy python3-torch python3-venv python3-pip python3-psutil python3-yaml)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
venv=.venv
check='import torch, transformers, tokenizers, safetensors, jinja2; assert jinja2.__version__ == "3.1.4", jinja2.__version__; assert transformers.__version__ < "4.47", transformers.__version__; assert torch.__file__.startswith("/usr/lib/python3/"), torch.__file__; import peft; assert peft.__version__ == "0.13.2", peft.__version__'
if ! { [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" 2>/dev/null; }; then
  rm -rf "$venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  # --upgrade-strategy only-if-needed (the default) keeps the system torch, which satisfies transformers.
  "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --quiet "transformers<4.47" "jinja2==3.1.4"
  "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --quiet --no-deps "peft==0.13.2" \
    "accelerate==1.0.1"
  "$venv/bin/python" -c "$check"
  echo "test-deps: $venv ready ($("$venv/bin/python" -c 'import transformers, tokenizers, torch; print("transformers", transformers.__version__, "tokenizers", tokenizers.__version__, "torch", torch.__version__, "(Debian)")'))"
fi
# The tokenizer's own tests (tests/train/bpe_check.sh, bpe_real.sh, unicode_classes.sh) compare with the
# `tokenizers` that transformers 5 brings, 0.23.3 (its Unicode tables are 16.0 and 17.0; transformers<4.47
# above pins tokenizers 0.20, Unicode 14): a second venv .venv-tok/ (ignored by git), with the system
# site packages for numpy and nothing of .venv's.
tok_venv=.venv-tok
tok_check='import tokenizers, numpy; assert tokenizers.__version__ == "0.23.3", tokenizers.__version__'
if ! { [ -x "$tok_venv/bin/python" ] && "$tok_venv/bin/python" -c "$tok_check" 2>/dev/null; }; then
  rm -rf "$tok_venv"
  /usr/bin/python3 -m venv --system-site-packages "$tok_venv"
  "$tok_venv/bin/python" -m pip install --disable-pip-version-check --no-input --quiet "tokenizers==0.23.3"
  "$tok_venv/bin/python" -c "$tok_check"
  echo "test-deps: $tok_venv ready (tokenizers 0.23.3)"
fi
# The real tokenizers of GPT-2, Llama 3, Qwen2 and StarCoder/SmolLM (tests/train/bpe_real.sh): llama.cpp's
# vocab-only GGUF files with test strings and the original tokenizers' ids, and llama.cpp's GGUF reader,
# from llama-cpp-python's source distribution on PyPI; cached outside the repository (their licences are
# the models'), fetched once.
vocab_dir=${FSDP_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fsdp-test}/llama-cpp-python-0.3.36
if [ ! -f "$vocab_dir/complete" ]; then
  tmp=$(mktemp -d)
  # --no-binary for this package only: its build requirements come as wheels (for pip's metadata step)
  "$venv/bin/python" -m pip download --disable-pip-version-check --no-input --quiet --no-deps \
    --no-binary llama-cpp-python "llama-cpp-python==0.3.36" -d "$tmp"
  rm -rf "$vocab_dir" && mkdir -p "$vocab_dir"
  tar xzf "$tmp"/llama_cpp_python-0.3.36.tar.gz -C "$vocab_dir" --strip-components=3 --wildcards \
    'llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py/*' \
    'llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-*'
  rm -rf "$tmp"
  touch "$vocab_dir/complete"
  echo "test-deps: real vocabularies in $vocab_dir"
fi
