#!/usr/bin/env bash
# Installs what fsdp.c needs to build, test and train, from Debian's packages. Needs root (or sudo).
# What only the tests use at run time (python3-torch and the transformers venv) is installed by
# tools/test-deps.sh, which tools/test.sh calls: tools/setup.sh stays light.
set -euo pipefail
# clang + libclang-rt: libFuzzer targets; valgrind: the memcheck run.
# iproute2 (ip, tc), procps (sysctl) and util-linux (unshare): tools/hosts.sh's namespace hosts.
# libtomlplusplus-dev: toml++, the TOML parser of fsdp-train --config (src/train/toml_read.h).
pkgs=(build-essential cmake pkg-config clang libclang-rt-14-dev valgrind
      libdnnl-dev libopenmpi-dev openmpi-bin libcjson-dev libtomlplusplus-dev iproute2 procps util-linux
      fortunes fortunes-min gnuplot-nox python3)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
