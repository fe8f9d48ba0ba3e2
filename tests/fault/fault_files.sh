#!/usr/bin/env bash
# fault_files.sh — files that are not what they seem, concurrent runs, outputs that must not be lost
# (issue 14), one part per ctest:
#   inputs     a FIFO or a folder as every kind of input (token files, meta.json, prepare --text, a
#              checkpoint's latest, manifest and shard) fails at once, naming it (a timeout guards
#              against the old blocking open: exit 124 is a failure)
#   outputs    export/prepare/train outputs onto a private mknod device node or a FIFO are refused and
#              the node is untouched; export onto a file of the checkpoint it reads is refused and the
#              checkpoint is unchanged; a write that fails (injected ENOSPC) leaves no temporary
#   lock       one run per --checkpoint-dir: a run holding the folder (stopped with SIGSTOP once its lock
#              file names it) makes a second run fail at once naming the folder and the holder's pid,
#              fresh, --resume and on 2 ranks; a lock held for rank 1 only stops a 2-rank run; pairs
#              started together, repeated, always give exactly one writer and a bit-exact checkpoint;
#              stale .tmp_step_* folders of other steps are removed by the next save
#   preflight  unwritable destinations (a file or a read-only folder as --checkpoint-dir, --report,
#              --trace or --metrics in a missing folder) fail before step 1, on 1 and 2 ranks
#   metrics    a full disk under --metrics (injected, and a real small tmpfs where mounting is allowed)
#              is an error with a non-zero exit, never lost lines with exit 0
#   noop       --steps 0 and a resume at or past --steps say "nothing to do" and change nothing
#   symlinks   nothing is deleted or written through a symbolic link: symlinked stale temporary and
#              set-aside entries of a checkpoint folder are removed themselves (their targets keep
#              their files); --metrics, --report, --trace, export --out and config.json beside it as a
#              symlink are refused naming the path and O_NOFOLLOW, and the target is unchanged
#   conflicts  no output is an input or another output, nor among the entries a folder flag owns:
#              --report onto the checkpoint's latest, --report = --metrics (also by a hard link),
#              --export-final inside a step folder, export --out inside --init-from or --checkpoint's
#              step folder are refused naming both flags before anything is written; outputs beside
#              them (ck/report.json, ck/exp/m.safetensors) are fine
#   interrupt  an export stopped by SIGTERM or SIGINT (raised at a write of its model file) removes its
#              new folder and ends by that signal; one killed by SIGKILL leaves only its .NAME.export.XXXXXX
#              beside --out's folder, which the next export of the same folder removes (and nothing else
#              of a like name); export --init-from's temporary checkpoint, inside it, goes the same way
#   exitcodes  a bad command line exits 2 before and after launch, under mpirun with one message and
#              no MPI_ABORT banner; other failures exit 1; the small message fixes of the issue
# usage: fault_files.sh FSDP_TRAIN MPIRUN_SH WORKDIR FAULT_LIB PART
BIN=$1 MPIRUN=$2 WORK=$3 FAULT_LIB=$4 PART=$5
source "$(dirname "$0")/lib.sh"
T=30 # seconds any single command here may take (they take well under one); 124 = it hung

# run_ck NAME CMD...: runs CMD under `timeout $T` with output in NAME.log; sets rc.
run_ck() {
    local name=$1
    shift
    timeout $T "$@" >"$name.log" 2>&1
    rc=$?
}
# fails_with NAME NEEDLE CMD...: CMD exits non-zero (not 124: a hang) and says NEEDLE.
fails_with() {
    local name=$1 needle=$2
    shift 2
    run_ck "$name" "$@"
    if [ $rc -eq 124 ]; then bad "$name: hung (killed after $T s)"; return; fi
    [ $rc -ne 0 ] && ok || bad "$name: exit 0"
    grep -qF -- "$needle" "$name.log" && ok || bad "$name: message lacks '$needle': $(grep -v '^  ' "$name.log" | tail -3)"
}
# errors NAME: number of error lines in NAME.log
errors() { grep -c "error:" "$1.log"; }
no_abort_banner() {
    ! grep -qE "MPI_ABORT|ORTE_ERROR_LOG|MPI_Abort" "$1.log" && ok || bad "$1: Open MPI abort banner: $(grep -m2 -E 'MPI_ABORT|ORTE_ERROR_LOG' "$1.log")"
}
not_trained() { ! grep -q "^step 1/" "$1.log" && ok || bad "$1: step 1 ran before the error"; }

"$BIN" "${TINY[@]}" --steps 4 --checkpoint-dir ck4 >ck4.log 2>&1 || bad "4-step run: $(tail -3 ck4.log)"

case $PART in
inputs)
    mkfifo fifo.txt
    fails_with prep_fifo "fifo.txt is a FIFO" "$BIN" prepare --text fifo.txt --out p
    for f in train.bin val.bin meta.json; do
        rm -rf "d_$f" && cp -r data "d_$f" && rm "d_$f/$f" && mkfifo "d_$f/$f"
        fails_with "data_$f" "d_$f/$f is a FIFO" "$BIN" "${TINY[@]}" --eval-every 2 --steps 2 --data "d_$f" --checkpoint-dir "ck_$f"
    done
    rm -rf d_dir && cp -r data d_dir && rm d_dir/train.bin && mkdir d_dir/train.bin
    fails_with data_dir "d_dir/train.bin is a folder" "$BIN" "${TINY[@]}" --steps 2 --data d_dir --checkpoint-dir ck_dir
    for f in latest step_000004/manifest.json step_000004/rank_00000.bin; do
        n=${f//\//_}
        rm -rf "ck_$n" && cp -r ck4 "ck_$n" && rm "ck_$n/$f" && mkfifo "ck_$n/$f"
        fails_with "resume_$n" "ck_$n/$f is a FIFO" "$BIN" "${TINY[@]}" --steps 6 --checkpoint-dir "ck_$n" --resume
        fails_with "export_$n" "ck_$n/$f is a FIFO" "$BIN" export --checkpoint "ck_$n" --out "exp_$n/m.safetensors"
        fails_with "sample_$n" "ck_$n/$f is a FIFO" "$BIN" sample --checkpoint "ck_$n" --tokens 2
        [ -p "ck_$n/$f" ] && ok || bad "$n: the FIFO was replaced"
    done
    # 2 ranks: every rank refuses the FIFO; one message, the run ends through MPI_Finalize
    fails_with data_fifo_np2 "d_train.bin/train.bin is a FIFO" "$MPIRUN" 2 "$BIN" "${TINY[@]}" --steps 2 --data d_train.bin --checkpoint-dir ck_np2
    [ "$(errors data_fifo_np2)" = 1 ] && ok || bad "data_fifo_np2: $(errors data_fifo_np2) error lines, want 1"
    no_abort_banner data_fifo_np2
    ;;
outputs)
    # A private device node with /dev/null's numbers: the test never touches the real /dev.
    if mknod node c 1 3 2>mknod.err; then
        for t in "export --checkpoint ck4 --out node" "export --checkpoint ck4 --out e1/m.safetensors --logits node" \
                 "train ${TINY[*]} --steps 2 --checkpoint-dir ck_m --metrics node" \
                 "train ${TINY[*]} --steps 2 --checkpoint-dir ck_r --report node" \
                 "train ${TINY[*]} --steps 2 --checkpoint-dir ck_t --trace node"; do
            fails_with node_case "node is a character device" "$BIN" $t
            not_trained node_case
            [ -c node ] && [ "$(stat -c %t:%T node)" = 1:3 ] && ok || bad "'$t' replaced the device node: $(ls -l node)"
        done
        [ ! -e e1/m.safetensors ] && ok || bad "export wrote --out although --logits was refused"
    else
        bad "cannot create a device node with mknod (root needed: CI runs as root): $(cat mknod.err)"
    fi
    mkfifo outfifo
    fails_with export_fifo "outfifo is a FIFO" "$BIN" export --checkpoint ck4 --out outfifo
    [ -p outfifo ] && ok || bad "export replaced the FIFO"
    # prepare into a folder whose train.bin is a FIFO: refused before anything is written there
    mkdir -p pf && mkfifo pf/train.bin
    fails_with prep_out_fifo "pf/train.bin is a FIFO" "$BIN" prepare --text "$SRC"/src/io/io.c --out pf
    [ -p pf/train.bin ] && [ ! -e pf/val.bin ] && [ ! -e pf/meta.json ] && ok || bad "prepare wrote into pf: $(ls pf)"
    # self-overwrite: export onto the checkpoint it reads, prepare onto its own input
    before=$(snapshot ck4)
    for f in step_000004/rank_00000.bin step_000004/manifest.json latest; do
        fails_with self_export "ck4/$f is a file this command reads" "$BIN" export --checkpoint ck4 --out "ck4/$f"
    done
    [ "$before" = "$(snapshot ck4)" ] && ok || bad "export onto its own checkpoint changed it"
    loads ck4 && ok || bad "ck4 does not load after the refused exports: $(tail -2 ck4.export.log)"
    cp -r data pself && md5=$(md5sum <pself/train.bin)
    fails_with self_prepare "pself/train.bin is a file this command reads" "$BIN" prepare --text pself/train.bin --out pself
    [ "$md5" = "$(md5sum <pself/train.bin)" ] && ok || bad "prepare replaced its own input"
    fails_with self_metrics "data/train.bin is a file this command reads" "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ck_sm --metrics data/train.bin
    fails_with self_report "data/val.bin is a file this command reads" "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ck_sr --report data/val.bin
    [ "$(md5sum <data/val.bin)" = "$(md5sum <pself/val.bin)" ] && ok || bad "--report replaced val.bin"
    # a write that fails part-way (ENOSPC after 4 KiB of the export) leaves neither file nor temporary
    mkdir -p full
    LD_PRELOAD=$FAULT_LIB FSDP_FAULT_MATCH=.full.export. FSDP_FAULT_ENOSPC_AFTER=4096 \
        fails_with export_full "disk full" "$BIN" export --checkpoint ck4 --out full/m.safetensors
    [ -z "$(ls -A full)" ] && ok || bad "a failed export left files: $(ls -A full)"
    [ -z "$(ls -A | grep '^\.full\.export\.')" ] && ok || bad "a failed export left its new folder: $(ls -A)"
    # the folders a failed export created for --out go too
    LD_PRELOAD=$FAULT_LIB FSDP_FAULT_MATCH=newd/.sub.export. FSDP_FAULT_ENOSPC_AFTER=4096 \
        fails_with export_full_new "disk full" "$BIN" export --checkpoint ck4 --out newd/sub/m.safetensors
    [ ! -e newd ] && ok || bad "a failed export left the folders it made: $(find newd)"
    ;;
lock)
    # A holds the folder: it is stopped (SIGSTOP) once its lock file names it, so the overlap does not
    # depend on timing; it is killed at the end and the kernel releases its lock.
    "$BIN" "${TINY[@]}" --steps 100000 --checkpoint-dir ckl >a.log 2>&1 &
    A=$!
    for _ in $(seq 600); do grep -q "pid $A " ckl/.lock.rank_00000 2>/dev/null && break; sleep 0.1; done
    kill -STOP $A
    grep -q "pid $A " ckl/.lock.rank_00000 && ok || bad "A's lock file does not name it: $(cat ckl/.lock.rank_00000)"
    fails_with lock_fresh "checkpoint folder ckl is in use by another run (pid $A on host" "$BIN" "${TINY[@]}" --steps 4 --checkpoint-dir ckl
    fails_with lock_resume "checkpoint folder ckl is in use by another run (pid $A on host" "$BIN" "${TINY[@]}" --steps 4 --checkpoint-dir ckl --resume
    not_trained lock_resume
    fails_with lock_np2 "checkpoint folder ckl is in use by another run (pid $A on host" "$MPIRUN" 2 "$BIN" "${TINY[@]}" --steps 4 --checkpoint-dir ckl
    [ "$(errors lock_np2)" = 1 ] && ok || bad "lock_np2: $(errors lock_np2) error lines, want 1"
    no_abort_banner lock_np2
    [ ! -e ckl/latest ] && [ -z "$(find ckl -name '.tmp_*')" ] && ok || bad "a refused run wrote into ckl: $(ls -A ckl)"
    kill -CONT $A
    kill -KILL $A
    wait $A 2>/dev/null
    run_ck after_kill "$BIN" "${TINY[@]}" --steps 4 --checkpoint-dir ckl
    [ $rc = 0 ] && ok || bad "the lock of a killed run was not released: $(grep error after_kill.log)"
    # Rank 1's lock held by another process (flock(1)): rank 0 says which rank failed, rank 1 why.
    rm -rf ck1 && mkdir ck1
    exec {hold}>ck1/.lock.rank_00001
    flock -n $hold || bad "flock(1) could not take ck1's rank-1 lock"
    fails_with lock_rank1 "locking the checkpoint folder failed on rank 1" "$MPIRUN" 2 "$BIN" "${TINY[@]}" --steps 4 --checkpoint-dir ck1
    grep -q "\[rank 1\] error: checkpoint folder ck1 is in use by another run" lock_rank1.log && ok || bad "lock_rank1: rank 1's own message missing"
    [ "$(errors lock_rank1)" = 2 ] && ok || bad "lock_rank1: $(errors lock_rank1) error lines, want 2"
    no_abort_banner lock_rank1
    exec {hold}>&-
    # Pairs started together, fresh and resumed, repeated: exactly one trains, and the checkpoint it
    # commits is bit for bit the one run alone would (a shard that does not match its manifest, or
    # interleaved steps, would not be).
    "$BIN" "${TINY[@]}" --steps 8 --checkpoint-dir ck_ref >ref.log 2>&1 || bad "reference run"
    "$BIN" "${TINY[@]}" --steps 8 --stop-at 4 --checkpoint-dir ck_s4 >s4.log 2>&1 || bad "run to step 4 of 8"
    for i in 1 2 3 4 5; do
        for mode in fresh resume; do
            d=ck_pair_${mode}_$i
            if [ $mode = resume ]; then
                cp -r ck_s4 $d
                args=(--resume)
            else
                args=()
            fi
            timeout $T "$BIN" "${TINY[@]}" --steps 8 --checkpoint-dir $d "${args[@]}" >$d.a.log 2>&1 &
            pa=$!
            timeout $T "$BIN" "${TINY[@]}" --steps 8 --checkpoint-dir $d "${args[@]}" >$d.b.log 2>&1 &
            pb=$!
            wait $pa
            ra=$?
            wait $pb
            rb=$?
            trained=$(cat $d.a.log $d.b.log | grep -c "^saved $d/step_000008")
            [ "$trained" = 1 ] && ok || bad "$d: $trained runs saved step 8 (exits $ra, $rb)"
            for x in a b; do # the other one was refused (lock or an existing run) or had nothing to do
                grep -qE "^saved $d/step_000008|is in use by another run|already holds checkpoints|nothing to do" $d.$x.log && ok || bad "$d.$x: $(grep -m2 error $d.$x.log)"
            done
            [ "$(cat $d/latest)" = step_000008 ] && cmp -s ck_ref/step_000008/rank_00000.bin $d/step_000008/rank_00000.bin && ok || bad "$d: step 8 differs from a lone run's"
            [ -z "$(find $d -name '.tmp_*')" ] && ok || bad "$d: temporary folder left"
        done
    done
    # Stale temporary folders of other steps (saves killed before their rename) go at the next save.
    cp -r ck4 ck_stale && mkdir -p ck_stale/.tmp_step_000002 ck_stale/.tmp_step_000099 && echo x >ck_stale/.tmp_step_000099/rank_00000.bin
    echo step_000002 >ck_stale/latest.tmp.abc123
    run_ck stale "$BIN" "${TINY[@]}" --steps 6 --checkpoint-dir ck_stale --resume
    [ $rc = 0 ] && [ -z "$(find ck_stale -name '.tmp_*' -o -name 'latest.tmp.*')" ] && ok || bad "stale temporaries left (exit $rc): $(ls -A ck_stale)"
    ;;
preflight)
    echo x >afile
    fails_with ck_file "afile exists but is not a folder" "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir afile
    not_trained ck_file
    fails_with report_missing "folder nodir does not exist" "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ck_p1 --report nodir/r.json
    not_trained report_missing
    fails_with trace_missing "folder nodir does not exist" "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ck_p2 --trace nodir/t.json
    not_trained trace_missing
    fails_with metrics_missing "cannot open --metrics nodir/m.jsonl" "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ck_p3 --metrics nodir/m.jsonl
    not_trained metrics_missing
    fails_with report_missing_np2 "folder nodir does not exist" "$MPIRUN" 2 "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ck_p4 --report nodir/r.json
    not_trained report_missing_np2
    [ "$(errors report_missing_np2)" = 1 ] && ok || bad "report_missing_np2: $(errors report_missing_np2) error lines, want 1"
    no_abort_banner report_missing_np2
    fails_with plan_report_missing "folder nodir does not exist" "$BIN" "${TINY[@]}" --plan --report nodir/r.json
    # A read-only checkpoint folder: a read-only tmpfs where mounting is allowed (root with
    # CAP_SYS_ADMIN), a folder without write permission for other users.
    mkdir -p ro
    if [ "$(id -u)" = 0 ] && mount -t tmpfs -o ro,size=64k fsdp_fault_ro ro 2>/dev/null; then
        trap 'umount "$WORK/ro" 2>/dev/null' EXIT
        fails_with ck_readonly "Read-only file system" "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ro
        umount ro && trap - EXIT
    elif [ "$(id -u)" != 0 ]; then
        chmod 555 ro
        fails_with ck_readonly "Permission denied" "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ro
    else
        echo "ck_readonly: root cannot mount a read-only tmpfs here; /proc stands in (mkdir fails there)"
        fails_with ck_readonly "/proc/fsdp_ck" "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir /proc/fsdp_ck
    fi
    not_trained ck_readonly
    ;;
metrics)
    # Injected: the metrics file takes 6000 bytes (about 12 lines of ~480 bytes: loss, ..., gemm_path and
    # the per-kernel kernels_s), then writes fail with ENOSPC.
    for np in 1 2; do
        rm -rf ck_mi$np mi$np.jsonl
        FAULT_PRELOAD_RANK=0 FSDP_FAULT_MATCH=mi$np.jsonl FSDP_FAULT_ENOSPC_AFTER=6000 \
            fails_with metrics_inject_np$np "--metrics: cannot write mi$np.jsonl: No space left on device" \
            "$MPIRUN" $np ./launch.sh "$BIN" "${TINY[@]}" --steps 40 --checkpoint-every 5 --checkpoint-dir ck_mi$np --metrics mi$np.jsonl
        [ "$(errors metrics_inject_np$np)" = 1 ] && ok || bad "metrics_inject_np$np: $(errors metrics_inject_np$np) error lines, want 1"
        no_abort_banner metrics_inject_np$np
        n=$(wc -l <mi$np.jsonl)
        [ "$n" -ge 5 ] && [ "$n" -lt 40 ] && ok || bad "metrics_inject_np$np: $n lines"
        python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' mi$np.jsonl && ok || bad "mi$np.jsonl ends in a broken line: $(tail -c 80 mi$np.jsonl)"
    done
    # The run stopped, its last checkpoint is intact and resumes once there is space.
    loads ck_mi1 && ok || bad "ck_mi1 does not load: $(tail -2 ck_mi1.export.log)"
    run_ck metrics_resume "$BIN" "${TINY[@]}" --steps 40 --checkpoint-every 5 --checkpoint-dir ck_mi1 --metrics mi1.jsonl --resume
    [ $rc = 0 ] && ok || bad "resume after the full disk: $(grep error metrics_resume.log)"
    # A real full disk: a 64 KiB tmpfs filled up to its last 4 KiB page (about 24 lines).
    mkdir -p mnt
    if mount -t tmpfs -o size=64k fsdp_fault_metrics mnt 2>/dev/null; then
        trap 'umount "$WORK/mnt" 2>/dev/null' EXIT
        head -c $((60 * 1024)) /dev/zero >mnt/filler 2>/dev/null
        fails_with metrics_tmpfs "No space left on device" "$BIN" "${TINY[@]}" --steps 60 --checkpoint-dir ck_mt --metrics mnt/m.jsonl
        grep -q -- "--metrics: cannot write mnt/m.jsonl" metrics_tmpfs.log && ok || bad "metrics_tmpfs: the message does not name --metrics mnt/m.jsonl"
        n=$(wc -l <mnt/m.jsonl)
        echo "tmpfs: $n metrics lines fitted; $(df -k mnt | tail -1)"
        [ "$n" -lt 60 ] && ok || bad "metrics_tmpfs: $n lines on a full disk"
        python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' mnt/m.jsonl && ok || bad "mnt/m.jsonl ends in a broken line: $(tail -c 80 mnt/m.jsonl)"
        umount mnt && trap - EXIT
    else
        echo "metrics tmpfs: cannot mount here (not root or no CAP_SYS_ADMIN); the injected cases stand in"
    fi
    ;;
noop)
    run_ck steps0 "$BIN" "${TINY[@]}" --steps 0 --checkpoint-dir ck0 --metrics m0.jsonl
    [ $rc = 0 ] && grep -q "nothing to do: --steps 0 trains no step" steps0.log && ok || bad "steps0: exit $rc, $(tail -1 steps0.log)"
    [ ! -e ck0 ] && [ ! -e m0.jsonl ] && ok || bad "--steps 0 wrote files"
    before=$(snapshot ck4)
    for args in "--steps 4" "--steps 3" "--steps 8 --stop-at 4"; do
        run_ck noop_resume "$BIN" "${TINY[@]}" $args --checkpoint-dir ck4 --resume --metrics mr.jsonl --report mr.json
        [ $rc = 0 ] && grep -q "nothing to do: the checkpoint is at step 4 and this run ends at step" noop_resume.log && ok || bad "resume $args: exit $rc, $(grep -v '^  ' noop_resume.log | tail -2)"
        not_trained noop_resume
    done
    [ "$before" = "$(snapshot ck4)" ] && [ ! -e mr.jsonl ] && [ ! -e mr.json ] && ok || bad "a run with nothing to do wrote files"
    ;;
symlinks)
    # victim folders and a victim file that symlinks point at: they must come out as they went in
    mkdir -p victim1 victim2 && echo keep >victim1/a.bin && echo keep >victim2/b.bin && echo keep >vfile
    cp -r ck4 ck_ln
    ln -s "$WORK/victim1" ck_ln/.tmp_step_000099  # a stale temporary folder: removed at the next save
    ln -s "$WORK/victim2" ck_ln/.uncommitted_step_000006 # the set-aside name the save replaces
    ln -s "$WORK/victim2" ck_ln/step_000006              # an uncommitted entry of the step being saved
    run_ck ln_resume "$BIN" "${TINY[@]}" --steps 6 --checkpoint-dir ck_ln --resume
    [ $rc = 0 ] && ok || bad "ln_resume: exit $rc: $(grep error ln_resume.log)"
    [ "$(cat victim1/a.bin)$(cat victim2/b.bin)" = keepkeep ] && ok || bad "a symlinked temporary's target lost files: $(ls victim1 victim2)"
    [ ! -L ck_ln/.tmp_step_000099 ] && [ -d ck_ln/step_000006 ] && [ ! -L ck_ln/step_000006 ] && ok || bad "ck_ln: $(ls -lA ck_ln)"
    [ "$(cat ck_ln/latest)" = step_000006 ] && ok || bad "ck_ln: latest is $(cat ck_ln/latest)"
    # outputs as symlinks onto another file: refused, the target untouched
    for flag in metrics report trace; do
        ln -sf "$WORK/vfile" "ln.$flag"
        fails_with "ln_$flag" "--$flag ln.$flag is a symbolic link: outputs are opened with O_NOFOLLOW" \
            "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir "ck_ln_$flag" "--$flag" "ln.$flag"
        not_trained "ln_$flag"
        [ "$(cat vfile)" = keep ] && [ -L "ln.$flag" ] && ok || bad "--$flag wrote through its symlink"
    done
    ln -sf "$WORK/vfile" ln.safetensors
    fails_with ln_export "--out ln.safetensors is a symbolic link: outputs are opened with O_NOFOLLOW" \
        "$BIN" export --checkpoint ck4 --out ln.safetensors
    mkdir -p lncfg && ln -sf "$WORK/vfile" lncfg/config.json
    fails_with ln_export_cfg "lncfg/config.json is a symbolic link" "$BIN" export --checkpoint ck4 --out lncfg/m.safetensors
    [ ! -e lncfg/m.safetensors ] && ok || bad "export wrote --out although config.json beside it was refused"
    [ "$(cat vfile)" = keep ] && ok || bad "export wrote through a symlink: $(head -c 40 vfile)"
    # a symlink in a folder above the output is followed: only the last component counts
    mkdir -p realdir && ln -sfn "$WORK/realdir" linkdir
    run_ck ln_parent "$BIN" export --checkpoint ck4 --out linkdir/m.safetensors
    [ $rc = 0 ] && [ -f realdir/m.safetensors ] && ok || bad "export through a symlinked parent folder: exit $rc: $(grep error ln_parent.log)"
    ;;
conflicts)
    before=$(snapshot ck4)
    fails_with cf_latest "--report ck4/latest is a file this command reads" \
        "$BIN" "${TINY[@]}" --steps 6 --checkpoint-dir ck4 --resume --report ck4/latest
    not_trained cf_latest
    for e in latest .tmp_step_000002 step_000002; do # not there yet: the folder's own names all the same
        fails_with cf_managed "--report ck_cf0/$e is inside --checkpoint-dir ck_cf0's own entries ($e)" \
            "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ck_cf0 --report "ck_cf0/$e"
        not_trained cf_managed
    done
    [ "$before" = "$(snapshot ck4)" ] && ok || bad "--report onto latest changed ck4"
    fails_with cf_same "--report ./m.json is the same file as --metrics m.json: each output needs a path of its own" \
        "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ck_cf1 --metrics m.json --report ./m.json
    not_trained cf_same
    [ ! -e m.json ] && ok || bad "cf_same wrote m.json"
    echo '{}' >h1 && ln h1 h2
    fails_with cf_hardlink "--report h2 is the same file as --metrics h1" \
        "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ck_cf2 --metrics h1 --report h2
    [ "$(cat h1)" = '{}' ] && ok || bad "cf_hardlink appended to h1"
    fails_with cf_final "--export-final ck_cf3/step_000002 is inside --checkpoint-dir ck_cf3's own entries (step_000002)" \
        "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ck_cf3 --export-final ck_cf3/step_000002
    not_trained cf_final
    fails_with cf_trace_final "--trace fin/model.safetensors is inside --export-final fin's own entries" \
        "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ck_cf4 --export-final fin --trace fin/model.safetensors
    # export: an HF folder (made by export) as --init-from; --out inside it would replace its input
    run_ck cf_hf "$BIN" export --checkpoint ck4 --out hf/model.safetensors
    [ $rc = 0 ] && ok || bad "export to hf: $(grep error cf_hf.log)"
    hf_before=$(snapshot hf)
    for o in hf/model.safetensors hf/new.safetensors hf/sub/x.safetensors; do
        fails_with cf_init "--out $o is inside --init-from hf's own entries" "$BIN" export --init-from hf --out "$o"
    done
    [ "$hf_before" = "$(snapshot hf)" ] && [ -z "$(ls -A hf | grep -v '^config.json$\|^model.safetensors$')" ] && ok || bad "export --init-from changed its folder: $(ls -A hf)"
    fails_with cf_step "--out ck4/step_000004/x.safetensors is inside --checkpoint" \
        "$BIN" export --checkpoint ck4 --out ck4/step_000004/x.safetensors
    fails_with cf_ckmanaged "--out ck4/latest.tmp.x is inside the folder of --checkpoint" \
        "$BIN" export --checkpoint ck4 --out ck4/latest.tmp.x
    [ "$before" = "$(snapshot ck4)" ] && ok || bad "a refused export changed ck4"
    # beside the managed entries is fine
    run_ck cf_ok_export "$BIN" export --checkpoint ck4 --out ck4/exp/m.safetensors
    [ $rc = 0 ] && [ -f ck4/exp/m.safetensors ] && ok || bad "export into ck4/exp: exit $rc: $(grep error cf_ok_export.log)"
    run_ck cf_ok_report "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ck_cf5 --report ck_cf5/report.json --metrics ck_cf5/m.jsonl
    [ $rc = 0 ] && [ -f ck_cf5/report.json ] && ok || bad "--report inside --checkpoint-dir: exit $rc: $(grep error cf_ok_report.log)"
    # Two writers of one folder (issue 39 item 3): a prepare stopped (SIGSTOP) while it writes its staging
    # folder holds the folder's lock; a second prepare to the same --out is refused at once naming the
    # folder and the holder's pid (it used to remove the live staging folder as a killed run's leftover,
    # and the first then failed with ENOENT on its own temporary); resumed, the first completes. The
    # same for export.
    LD_PRELOAD=$FAULT_LIB FSDP_FAULT_MATCH=/.pw.prepare. FSDP_FAULT_KILL_AT_WRITE=2 FSDP_FAULT_SIGNAL=19 \
        "$BIN" prepare --text "$SRC"/src/core/*.c --out pw >pw_a.log 2>&1 &
    a=$!
    i=0
    while [ "$(ps -o stat= -p $a 2>/dev/null | cut -c1)" != T ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
    fails_with cw_prepare "prepare --out pw: another prepare is writing this folder now (pid $a" \
        "$BIN" prepare --text "$SRC"/src/io/*.c --out pw
    kill -CONT $a
    wait $a
    rc=$?
    [ $rc = 0 ] && [ -f pw/train.bin ] && [ -z "$(ls -A | grep '^\.pw\.prepare\.')" ] && ok ||
        bad "cw_prepare: the first prepare: exit $rc: $(tail -2 pw_a.log); left $(ls -A | grep '^\.pw\.')"
    LD_PRELOAD=$FAULT_LIB FSDP_FAULT_MATCH=/m.safetensors.tmp. FSDP_FAULT_KILL_AT_WRITE=2 FSDP_FAULT_SIGNAL=19 \
        "$BIN" export --checkpoint ck4 --out ew/m.safetensors >ew_a.log 2>&1 &
    a=$!
    i=0
    while [ "$(ps -o stat= -p $a 2>/dev/null | cut -c1)" != T ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
    fails_with cw_export "export --out's folder ew: another export is writing this folder now (pid $a" \
        "$BIN" export --checkpoint ck4 --out ew/m.safetensors
    kill -CONT $a
    wait $a
    rc=$?
    [ $rc = 0 ] && [ -f ew/m.safetensors ] && [ -z "$(ls -A | grep '^\.ew\.export\.')" ] && ok ||
        bad "cw_export: the first export: exit $rc: $(tail -2 ew_a.log); left $(ls -A | grep '^\.ew\.')"
    ;;
interrupt)
    mkdir -p it
    for sig in 15 2; do
        rm -rf it/* && LD_PRELOAD=$FAULT_LIB FSDP_FAULT_MATCH=/m.safetensors FSDP_FAULT_KILL_AT_WRITE=5 FSDP_FAULT_SIGNAL=$sig \
            run_ck "it_sig$sig" "$BIN" export --checkpoint ck4 --out it/m.safetensors
        [ $rc = $((128 + sig)) ] && ok || bad "it_sig$sig: exit $rc, want $((128 + sig)): $(tail -2 it_sig$sig.log)"
        grep -q "export interrupted by SIG" "it_sig$sig.log" && ok || bad "it_sig$sig: $(tail -2 it_sig$sig.log)"
        [ -z "$(ls -A it)$(ls -A | grep '^\.it\.export\.')" ] && ok || bad "an export stopped by signal $sig left: $(ls -A it) $(ls -A)"
    done
    LD_PRELOAD=$FAULT_LIB FSDP_FAULT_MATCH=/m.safetensors FSDP_FAULT_KILL_AT_WRITE=5 \
        run_ck it_kill "$BIN" export --checkpoint ck4 --out it/m.safetensors
    [ $rc = 137 ] && [ -z "$(ls -A it)" ] && ls -A | grep -q '^\.it\.export\.' && ok || bad "it_kill: exit $rc, left $(ls -A it) $(ls -A)"
    mkdir -p .it.export.keep && touch .it.export.keep/x # not of mkdtemp's pattern: left alone
    run_ck it_again "$BIN" export --checkpoint ck4 --out it/m.safetensors
    [ $rc = 0 ] && [ "$(ls -A it | tr '\n' ' ')" = "config.json m.safetensors " ] && ok || bad "the next export: exit $rc, left $(ls -A it)"
    [ "$(ls -A | grep '^\.it\.export\.')" = .it.export.keep ] && ok || bad "the next export left or removed: $(ls -A | grep '^\.it\.')"
    # --init-from: its temporary checkpoint beside --out
    run_ck it_hf "$BIN" export --checkpoint ck4 --out hf/model.safetensors
    mkdir -p ih
    LD_PRELOAD=$FAULT_LIB FSDP_FAULT_MATCH=/init-from.tmp/ FSDP_FAULT_KILL_AT_WRITE=2 \
        run_ck ih_kill "$BIN" export --init-from hf --out ih/m.safetensors
    [ $rc = 137 ] && [ -z "$(ls -A ih)" ] && [ -d "$(ls -d .ih.export.??????)/init-from.tmp" ] && ok || bad "ih_kill: exit $rc, left '$(ls -A ih)' $(ls -A)"
    LD_PRELOAD=$FAULT_LIB FSDP_FAULT_MATCH=/m.safetensors.tmp. FSDP_FAULT_KILL_AT_WRITE=3 FSDP_FAULT_SIGNAL=15 \
        run_ck ih_term "$BIN" export --init-from hf --out ih/m.safetensors
    [ $rc = 143 ] && [ -z "$(ls -A ih)$(ls -A | grep '^\.ih\.export\.')" ] && ok || bad "ih_term: exit $rc, left '$(ls -A ih)' $(ls -A): $(tail -2 ih_term.log)"
    ;;
exitcodes)
    # a bad command line: 2, found while parsing or after launch, with one message
    run_ck parse "$MPIRUN" 2 "$BIN" --bogus
    [ $rc = 2 ] && [ "$(errors parse)$(grep -c 'unknown flag --bogus' parse.log)" = 01 ] && ok || bad "parse: exit $rc"
    run_ck batch_np3 "$MPIRUN" 3 "$BIN" "${TINY[@]}" --batch 10 --steps 2 --checkpoint-dir ck_b3
    [ $rc = 2 ] && ok || bad "batch_np3: exit $rc, want 2"
    grep -q "error: --batch 10 is not divisible by --micro-batches 1 x 3 ranks" batch_np3.log && [ "$(errors batch_np3)" = 1 ] && ok || bad "batch_np3: $(errors batch_np3) error lines"
    no_abort_banner batch_np3
    run_ck world_self "$BIN" "${TINY[@]}" --world 3 --steps 2 --checkpoint-dir ck_w
    [ $rc = 2 ] && grep -q "error: --world 3 but 1 rank is running" world_self.log && ok || bad "world_self: exit $rc"
    run_ck world_np2 "$MPIRUN" 2 "$BIN" "${TINY[@]}" --world 3 --steps 2 --checkpoint-dir ck_w2
    [ $rc = 2 ] && [ "$(errors world_np2)" = 1 ] && ok || bad "world_np2: exit $rc, $(errors world_np2) error lines"
    no_abort_banner world_np2
    run_ck rerun "$BIN" "${TINY[@]}" --steps 2 --checkpoint-dir ck4
    [ $rc = 2 ] && grep -q "already holds checkpoints" rerun.log && ok || bad "rerun: exit $rc"
    # anything else: 1, still one message and no abort when every rank can end cleanly
    run_ck nodata_np2 "$MPIRUN" 2 "$BIN" "${TINY[@]}" --data nodata --steps 2 --checkpoint-dir ck_nd
    [ $rc = 1 ] && [ "$(errors nodata_np2)" = 1 ] && ok || bad "nodata_np2: exit $rc, $(errors nodata_np2) error lines"
    no_abort_banner nodata_np2
    run_ck export_np2 "$MPIRUN" 2 "$BIN" export --checkpoint nock --out x.safetensors
    [ $rc = 1 ] && [ "$(errors export_np2)" = 1 ] && ok || bad "export_np2: exit $rc, $(errors export_np2) error lines"
    no_abort_banner export_np2
    # the small ones: meta.json's vocab named as the file's; non-integers refused; 1e-310 is "too small"
    for v in 1 300.9; do
        rm -rf dv && cp -r data dv && echo "{\"vocab\": $v}" >dv/meta.json
        fails_with "meta_vocab_$v" 'dv/meta.json: "vocab" must be a whole number from 2 to 2147483647' "$BIN" "${TINY[@]}" --vocab 0 --data dv --steps 2 --checkpoint-dir ck_v
        ! grep -q -- "--vocab 1" "meta_vocab_$v.log" && ok || bad "meta_vocab_$v blames --vocab"
    done
    run_ck lr_tiny "$BIN" "${TINY[@]}" --lr 1e-310
    [ $rc = 2 ] && grep -q -- "--lr 1e-310 is too small" lr_tiny.log && ! grep -q "not a finite" lr_tiny.log && ok || bad "lr_tiny: exit $rc, $(cat lr_tiny.log)"
    ;;
*) bad "unknown part '$PART'" ;;
esac
finish
