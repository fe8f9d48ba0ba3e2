#!/usr/bin/env bash
# Installs what fsdp.c needs to build, test and train, from Debian's packages. Needs root (or sudo).
set -euo pipefail
# clang + libclang-rt: libFuzzer targets; valgrind: the memcheck run; python3-torch: the PyTorch
# reference fixtures and the check that exported safetensors reproduce the C model's logits.
# iproute2 (ip, tc), procps (sysctl) and util-linux (unshare): tools/hosts.sh's namespace hosts.
pkgs=(build-essential cmake pkg-config clang libclang-rt-14-dev valgrind
      libdnnl-dev libopenmpi-dev openmpi-bin libcjson-dev iproute2 procps util-linux
      fortunes fortunes-min gnuplot-nox python3 python3-numpy python3-torch)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
