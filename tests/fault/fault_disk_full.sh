#!/usr/bin/env bash
# fault_disk_full.sh — the disk fills up while a checkpoint is saved: the job fails with a clear
# "disk full" message, `latest` still names the previous checkpoint, whose files are exactly the
# uninterrupted run's and load, no temporary folder is left behind, and (after space is freed) resume
# reproduces the uninterrupted run. Two ways to fill the disk:
#  - fault_inject.so's write budget (always): rank 1's shard file, or rank 0's manifest, of step 10;
#  - a real 1200 KiB tmpfs (when this user may mount one: root with CAP_SYS_ADMIN) that holds two
#    checkpoints of the tiny model but not a third.
# usage: fault_disk_full.sh FSDP_TRAIN MPIRUN_SH WORKDIR FAULT_LIB
BIN=$1 MPIRUN=$2 WORK=$3 FAULT_LIB=$4
source "$(dirname "$0")/lib.sh"
NP=2
RUN=("${TINY[@]}" --steps 15 --checkpoint-every 5)
"$MPIRUN" $NP "$BIN" "${RUN[@]}" --checkpoint-dir ck_ref --metrics ref.jsonl >ref.log 2>&1 || bad "reference run: $(tail -3 ref.log)"

# after_full NAME CKPT_DIR PREV: the checks once a save of the step after PREV hit a full disk.
after_full() {
    local name=$1 ck=$2 prev=$3 rc=$4
    echo "$name: exit $rc; latest $(cat "$ck/latest" 2>/dev/null); $(grep -o 'error: .*' "$name.log" | head -2 | tr '\n' ' ')"
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && ok || bad "$name: exit $rc although the disk was full (124: it hung)"
    grep -q "error: .*disk full" "$name.log" && ok || bad "$name: no 'disk full' message"
    [ "$(cat "$ck/latest" 2>/dev/null)" = "$prev" ] && ok || bad "$name: latest is not $prev"
    local f bad_files=0
    for f in rank_00000.bin rank_00001.bin; do # (manifest.json records each run's --checkpoint-dir)
        cmp -s "ck_ref/$prev/$f" "$ck/$prev/$f" || bad_files=1
    done
    [ $bad_files = 0 ] && ok || bad "$name: $prev's shard files differ from the uninterrupted run's"
    [ -z "$(find "$ck" -maxdepth 1 -name '.tmp_*')" ] && ok || bad "$name: temporary folder left: $(ls -a "$ck")"
    loads "$ck" && ok || bad "$name: $prev does not load: $(tail -2 "$ck.export.log")"
}

# Injected: FSDP_FAULT_ENOSPC_AFTER bytes for the matched file, then ENOSPC (a short write first).
budget_case() {
    local name=$1 rank=$2 match=$3 budget=$4
    FAULT_PRELOAD_RANK=$rank FSDP_FAULT_MATCH="ck_$name/$match" FSDP_FAULT_ENOSPC_AFTER=$budget \
        timeout 300 "$MPIRUN" $NP ./launch.sh "$BIN" "${RUN[@]}" --checkpoint-dir "ck_$name" --metrics "$name.jsonl" >"$name.log" 2>&1
    after_full "$name" "ck_$name" step_000005 $?
    "$MPIRUN" $NP "$BIN" "${RUN[@]}" --checkpoint-dir "ck_$name" --metrics "$name.resume.jsonl" --resume \
        >"$name.resume.log" 2>&1 || bad "$name: resume: $(grep -m1 -o 'error: .*' "$name.resume.log")"
    same_losses ref.jsonl "$name.resume.jsonl" 6 15 && ok || bad "$name: resumed steps 6..15 differ from the reference"
}
budget_case shard 1 .tmp_step_000010/rank_00001.bin 100000
budget_case manifest 0 .tmp_step_000010/manifest.json 300

# A real size-limited file system, where mounting is allowed.
mkdir -p mnt
if mount -t tmpfs -o size=1200k fsdp_fault_tmpfs mnt 2>/dev/null; then
    trap 'umount "$WORK/mnt" 2>/dev/null' EXIT
    timeout 300 "$MPIRUN" $NP "$BIN" "${RUN[@]}" --checkpoint-dir mnt/ck --metrics tmpfs.jsonl >tmpfs.log 2>&1
    after_full tmpfs mnt/ck step_000010 $?
    echo "tmpfs: $(df -k mnt | tail -1)"
    umount mnt && trap - EXIT
else
    echo "tmpfs: cannot mount here (not root or no CAP_SYS_ADMIN); the injected cases above stand in"
fi
finish
