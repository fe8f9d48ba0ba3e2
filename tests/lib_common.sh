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
loads() { # DIR [EXPORT FLAGS...]
    local d=$1
    shift
    timeout 60 "$BIN" export --checkpoint "$d" --out "$d.export/model.safetensors" "$@" >"$d.export.log" 2>&1
}

# dir_snapshot DIR: every file's checksum and every name under DIR ("absent" when there is none).
dir_snapshot() { [ -e "$1" ] && (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum; find . | sort) || echo absent; }

# kill_points NAME SETUP DIR AFTER CMD...: the kill loop of the one-unit folder writers (prepare, export).
# SETUP (a function) makes DIR's old state, CMD run whole then gives the new one; then CMD is killed
# (FAULT_LIB's FSDP_FAULT_KILL_AT_OP, FSDP_FAULT_MATCH=DIR) at its 1st, 2nd, ... watched operation until it
# completes, and after each kill DIR must be byte for byte the old state or the new one; AFTER N (a
# function, or true) runs after the kill at op N. At least 5 kill points, both states seen.
kill_points() {
    local name=$1 mk=$2 dir=$3 after=$4
    shift 4
    rm -rf "$dir" ".$dir".* && $mk && dir_snapshot "$dir" >old.sum
    "$@" >full.log 2>&1 || bad "$name: uninterrupted: $(cat full.log)"
    dir_snapshot "$dir" >new.sum
    cmp -s old.sum new.sum && bad "$name: the new folder equals the old one"
    local n=0 kills=0 saw_old=0 saw_new=0 rc
    while [ $n -lt 400 ]; do
        n=$((n + 1))
        rm -rf "$dir" ".$dir".* && $mk
        FSDP_FAULT_MATCH=$dir FSDP_FAULT_KILL_AT_OP=$n LD_PRELOAD=$FAULT_LIB "$@" >kill.log 2>&1
        rc=$?
        dir_snapshot "$dir" >now.sum
        if [ $rc -eq 0 ]; then
            cmp -s now.sum new.sum && ok || bad "$name: completed at op $n with another folder"
            break
        fi
        [ $rc -eq 137 ] || { bad "$name: op $n: rc $rc: $(cat kill.log)"; break; }
        kills=$((kills + 1))
        if cmp -s now.sum old.sum; then
            saw_old=1
        elif cmp -s now.sum new.sum; then
            saw_new=1
        else
            bad "$name: killed at op $n ($(grep -o 'at [a-z0-9 ()]*' kill.log | head -1)): a mix of old and new: $(diff old.sum now.sum | head -4)"
        fi
        $after $n
    done
    [ $kills -ge 5 ] && [ $saw_old = 1 ] && [ $saw_new = 1 ] && ok ||
        bad "$name: $kills kill points, old state seen $saw_old, new state seen $saw_new"
    echo "$name: killed at $kills points, every time the old or the new folder"
    rm -rf ".$dir".*
}
