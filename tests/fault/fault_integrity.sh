#!/usr/bin/env bash
# fault_integrity.sh BIN MPIRUN WORK FAULT_LIB PART — files that are not what they were (issue 28 item 2,
# 3a): PART manifest: 200 single-bit flips spread over a checkpoint's manifest.json (every byte region,
# every bit position) each make `export` fail with "manifest.json: manifest checksum" and write
# nothing, and the restored manifest exports bit for bit what it did before; a manifest without its
# checksum (an older one) is refused by resume and export alike. PART nonfinite: a NaN behind right
# checksums in a checkpoint shard, refused by export and resume naming the tensor.
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

# PART nonfinite: a NaN written into a real checkpoint's shard with every checksum recomputed (payload,
# header, the manifest's record, the manifest's own), so only the value check can find it: export and
# resume (2 ranks, re-slicing) refuse it naming the shard file, the tensor and the element.
if [ "$PART" = nonfinite ]; then
    "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ck >ck.log 2>&1 || bad "2-step run: $(tail -3 ck.log)"
    S=ck/step_000002
    # plant UNIT_INDEX ELEMENT VALUE: prints the tensor (unit.tensor) and its element index
    plant() {
        python3 - "$S" "$@" <<'PY'
import json, struct, sys
d, u, e, v = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    T.append(c)
def crc(b, c=0):
    c ^= 0xFFFFFFFF
    for x in b:
        c = T[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
m = json.load(open(d + "/manifest.json"))
f = bytearray(open(d + "/rank_00000.bin", "rb").read())
nu = len(m["units"])
off = 128 + 24 * nu
for k in range(u):
    off += 12 * struct.unpack_from("<Q", f, 128 + 24 * k + 8)[0]
start, numel = struct.unpack_from("<QQ", f, 128 + 24 * u)
assert start <= e < start + numel, "element not in rank 0's shard"
struct.pack_into("<f", f, off + 4 * (e - start), v)
struct.pack_into("<I", f, 28, crc(f[128:]))
struct.pack_into("<I", f, 124, crc(f[:124]))
open(d + "/rank_00000.bin", "wb").write(f)
m["shards"][0]["crc32c"] = struct.unpack_from("<I", f, 28)[0]
del m["manifest_crc32c"]
body = json.dumps(m, indent="\t").rstrip()[:-1].rstrip() + ",\n\t"
open(d + "/manifest.json", "w").write(body + '"manifest_crc32c": "%08x"\n}\n' % crc(body.encode()))
U = m["units"][u]
t = [t for t in U["tensors"] if t["alias_of"] is None and t["offset"] <= e < t["offset"] + t["numel"]][0]
print("%s.%s element %d" % (U["name"], t["name"], e - t["offset"]))
PY
    }
    where=$(plant 1 5 nan) || bad "plant"
    "$BIN" export --checkpoint ck --out x/model.safetensors >x.log 2>&1 </dev/null && bad "export of a NaN checkpoint: exit 0" || ok
    grep -qF "$S/rank_00000.bin: tensor $where of the master weights is NaN: non-finite" x.log && ok || bad "export: wants '$where': $(tail -1 x.log)"
    grep -q "checksum" x.log && bad "a checksum caught it (the test must get past them): $(tail -1 x.log)" || ok
    # no file (the empty folder export_open made is item 1's business: interrupted exports)
    [ -z "$(find x -type f 2>/dev/null)" ] && ok || bad "the refused export wrote $(find x -type f)"
    "$MPIRUN" 2 "$BIN" "${TINY[@]}" --steps 3 --checkpoint-dir ck --resume >r.log 2>&1 </dev/null && bad "resume from a NaN checkpoint: exit 0" || ok
    grep -qF "tensor $where of the master weights is NaN" r.log && ok || bad "resume: wants '$where': $(grep -i error r.log | head -2)"
    [ ! -e ck/step_000003 ] && ok || bad "the refused resume saved step 3"
    ! grep -q "^step 3/" r.log && ok || bad "the refused resume trained"
    # The planting itself leaves a readable checkpoint: a finite value planted the same way exports.
    where=$(plant 1 5 0.5) || bad "plant"
    "$BIN" export --checkpoint ck --out y/model.safetensors >y.log 2>&1 </dev/null && ok || bad "export after planting 0.5: $(tail -1 y.log)"
fi

# PART shrink: a Hugging Face folder's model.safetensors truncated to half just after the n-th time it
# is mapped (fault_inject.so, as another process would): export, sample and train --init-from (1 and
# 2 ranks) end in an error naming the file, never in a SIGBUS death; at least one truncation lands
# between the map and the reads ("shrank while it was being read"); untouched, they all succeed.
if [ "$PART" = shrink ]; then
    "$BIN" "${TINY[@]}" --steps 1 --checkpoint-dir ck >ck.log 2>&1 || bad "1-step run: $(tail -3 ck.log)"
    "$BIN" export --checkpoint ck --out m/model.safetensors >m.log 2>&1 || bad "export: $(cat m.log)"
    cp m/model.safetensors whole.safetensors
    half=$(($(stat -c %s whole.safetensors) / 2))
    shrank=0 truncated=0
    # try NAME NP N ARGS...: the command with the N-th mapping of the file truncated
    try() {
        local name=$1 np=$2 n=$3 rc
        shift 3
        cp whole.safetensors m/model.safetensors
        if [ "$np" = 1 ]; then
            FSDP_FAULT_MATCH=m/model.safetensors FSDP_FAULT_TRUNCATE_AT_MMAP=$n FSDP_FAULT_TRUNCATE_TO=$half \
                LD_PRELOAD=$FAULT_LIB timeout 120 "$BIN" "$@" >"$name.log" 2>&1 </dev/null
        else
            FSDP_FAULT_MATCH=m/model.safetensors FSDP_FAULT_TRUNCATE_AT_MMAP=$n FSDP_FAULT_TRUNCATE_TO=$half \
                FAULT_PRELOAD_RANK=1 timeout 120 "$MPIRUN" "$np" ./launch.sh "$BIN" "$@" >"$name.log" 2>&1 </dev/null
        fi
        rc=$?
        if ! grep -q "fault_inject: truncated" "$name.log"; then
            [ $rc = 0 ] && ok || bad "$name: not truncated, yet exit $rc: $(tail -2 "$name.log")"
            return
        fi
        truncated=$((truncated + 1))
        if [ $rc = 0 ] || [ $rc -ge 124 ]; then
            bad "$name: exit $rc after the truncation (want an error, not a signal or a hang): $(tail -2 "$name.log")"
        elif grep -qiE "bus error|signal 7|SIGBUS \(" "$name.log" && ! grep -q "shrank while" "$name.log"; then
            bad "$name: died of the signal: $(tail -2 "$name.log")"
        elif ! grep -qE "error: .*m/model.safetensors" "$name.log"; then
            bad "$name: the error does not name the file: $(grep -m2 error "$name.log")"
        else
            ok
        fi
        grep -q "m/model.safetensors shrank while it was being read (SIGBUS at byte" "$name.log" && shrank=$((shrank + 1))
    }
    for n in 1 2 3 4; do
        try "export_$n" 1 "$n" export --init-from m --out "x_$n/model.safetensors"
        try "sample_$n" 1 "$n" sample --init-from m --logits "l_$n.bin"
        try "train_$n" 1 "$n" "${TINY[@]}" --init-from m --steps 1 --checkpoint-dir "ck_$n"
        try "train2_$n" 2 "$n" "${TINY[@]}" --init-from m --steps 1 --checkpoint-dir "ck2_$n"
    done
    [ $truncated -ge 6 ] && ok || bad "only $truncated runs truncated the file"
    [ $shrank -ge 4 ] && ok || bad "only $shrank errors came from the guarded reads (SIGBUS caught)"
    cp whole.safetensors m/model.safetensors
    "$BIN" export --init-from m --out again/model.safetensors >again.log 2>&1 && ok || bad "export of the whole file: $(tail -2 again.log)"
fi

finish
