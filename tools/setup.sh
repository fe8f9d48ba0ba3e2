#!/usr/bin/env bash
# setup.sh — the README's first command: installs the Debian packages fsdp.c needs
# (tools/install-deps.sh), configures and builds into build/, and prepares the default training
# corpus (the text fortune files of Debian's `fortunes` package) into data/fortunes. Safe to run again:
# each step is skipped or redone cheaply when its result is already there. Then run build/fsdp-train.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${FSDP_SKIP_DEPS:-0}" != 1 ]; then
    tools/install-deps.sh
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target fsdp-train

corpus=/usr/share/games/fortunes
if [ -f data/fortunes/train.bin ] && [ -f data/fortunes/val.bin ] && [ -f data/fortunes/meta.json ]; then
    echo "data/fortunes is already prepared"
else
    # The plain-text fortune files: not the .dat indexes, not the .u8 copies, not links.
    texts=()
    for f in "$corpus"/*; do
        case "$f" in *.dat | *.u8) continue ;; esac
        [ -f "$f" ] && [ ! -L "$f" ] && texts+=("$f")
    done
    if [ ${#texts[@]} -eq 0 ]; then
        echo "no fortune files in $corpus: install Debian's fortunes package (tools/install-deps.sh)" >&2
        exit 1
    fi
    # Fortunes are separated by lines holding only "%": each one becomes a document.
    build/fsdp-train prepare --text "${texts[@]}" --out data/fortunes --doc-sep % --val-fraction 0.05
fi
echo "ready: run build/fsdp-train (or build/fsdp-train --help)"
