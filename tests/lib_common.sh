# lib_common.sh — what the fault and multi-host test libraries share (sourced by tests/fault/lib.sh
# and tests/hosts/lib.sh): pass/fail counting, metrics fields, loss comparison and checkpoint loading.
# Expects BIN (fsdp-train) to be set before loads is called.

fails=0
pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
finish() {
    echo "$pass passed, $fails failed"
    [ "$fails" -eq 0 ] && [ "$pass" -gt 0 ]
    exit $?
}

# field FILE STEP NAME: a metrics value as printed (the exact text of the float); the last line wins.
field() { grep "\"step\": $2," "$1" | tail -1 | sed -E "s/.*\"$3\": ([^,}]*).*/\1/"; }

# same_losses A B FIRST LAST: loss and grad_norm of steps FIRST..LAST identical in both metrics files.
same_losses() {
    local s f a b
    for s in $(seq "$3" "$4"); do
        for f in loss grad_norm; do
            a=$(field "$1" "$s" $f) b=$(field "$2" "$s" $f)
            if [ -z "$a" ] || [ "$a" != "$b" ]; then
                echo "  $1 vs $2: step $s $f: '$a' vs '$b'" >&2
                return 1
            fi
        done
    done
}

# loads CKPT_DIR: the checkpoint `latest` names reads back completely (every shard file's checksum
# is verified by the export), into a safetensors file; bounded to 60 s.
loads() {
    timeout 60 "$BIN" export --checkpoint "$1" --out "$1.export/model.safetensors" >"$1.export.log" 2>&1
}
