#!/usr/bin/env bash
# fault_integrity.sh BIN MPIRUN WORK FAULT_LIB PART — files that are not what they were (issue 28 item 2,
# 3a): PART manifest: 200 single-bit flips spread over a checkpoint's manifest.json (every byte region,
# every bit position) each make `export` fail with "manifest.json: manifest checksum" and write
# nothing, and the restored manifest exports bit for bit what it did before; a manifest without its
# checksum (an older one) is refused by resume and export alike.
BIN=$1 MPIRUN=$2 WORK=$3 FAULT_LIB=$4 PART=$5
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

if [ "$PART" = manifest ]; then
    "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ck >ck.log 2>&1 || bad "2-step run: $(tail -3 ck.log)"
    M=ck/step_000002/manifest.json
    cp "$M" manifest.orig
    "$BIN" export --checkpoint ck --out ref/model.safetensors >ref.log 2>&1 || bad "export: $(cat ref.log)"
    size=$(stat -c %s "$M")
    [ "$size" -gt 1000 ] && ok || bad "manifest of $size bytes"
    refused=0 named=0 wrote=0
    for i in $(seq 0 199); do
        bit=$((i * size * 8 / 200 + i % 8)) # spread over the file, every bit position of a byte
        python3 -c '
import sys
p, b = sys.argv[1], int(sys.argv[2])
d = bytearray(open(p, "rb").read())
d[b // 8] ^= 1 << (b % 8)
open(p, "wb").write(d)' "$M" "$bit"
        "$BIN" export --checkpoint ck --out "x$i/model.safetensors" >"flip.log" 2>&1 </dev/null
        [ $? -ne 0 ] && refused=$((refused + 1))
        grep -qF "$M: manifest checksum" flip.log && named=$((named + 1)) || echo "  bit $bit: $(tail -1 flip.log)" >&2
        [ -e "x$i" ] && wrote=$((wrote + 1))
        cp manifest.orig "$M"
    done
    [ $refused = 200 ] && ok || bad "only $refused of 200 flipped manifests refused"
    [ $named = 200 ] && ok || bad "only $named of 200 refusals name $M and the checksum"
    [ $wrote = 0 ] && ok || bad "$wrote refused exports wrote their folder"
    "$BIN" export --checkpoint ck --out again/model.safetensors >again.log 2>&1 || bad "export after restoring: $(cat again.log)"
    cmp -s ref/model.safetensors again/model.safetensors && cmp -s ref/config.json again/config.json && ok ||
        bad "the restored manifest exports something else"
    # Without the field (as written before manifests were checksummed): refused by resume and export.
    python3 -c '
import sys
p = sys.argv[1]
t = open(p).read()
i = t.rindex(",\n\t\"manifest_crc32c\"")
open(p, "w").write(t[:i] + "\n}\n")' "$M"
    "$BIN" export --checkpoint ck --out old/model.safetensors >old.log 2>&1 </dev/null && bad "export of an unchecksummed manifest: exit 0" || ok
    grep -qF "$M: manifest checksum missing" old.log && ok || bad "export: $(tail -1 old.log)"
    "$BIN" "${TINY[@]}" --steps 3 --checkpoint-dir ck --resume >old_resume.log 2>&1 </dev/null && bad "resume from an unchecksummed manifest: exit 0" || ok
    grep -qF "$M: manifest checksum missing" old_resume.log && ok || bad "resume: $(tail -1 old_resume.log)"
    [ ! -e ck/step_000003 ] && ok || bad "the refused resume saved step 3"
    cp manifest.orig "$M"
fi

finish
