#!/usr/bin/env bash
# hosts_fail.sh — a host failing under a training job on namespace hosts (tools/hosts.sh), 2 hosts x
# 2 ranks, --comm-timeout 3, a checkpoint every 4 steps; the fault comes once step 9 is done.
#  link:   host 2's link goes down. Host 1's ranks time out, name the collective (rank, host, unit,
#          phase, collective) and end within the timeout + SLACK; mpirun ends with the documented
#          status 1 (it waits for the lost daemon: ~6 s of retransmissions, tools/hosts.sh); the same
#          twice more while a compiler loop and another MPI job load both cores.
#  ranks:  host 2's ranks killed, with the launcher's abort-on-failure off, so nothing but the
#          surviving ranks' own timeout path ends the job: same named error, status 1, same bound.
# A surviving rank ends either by itself with status 1 (it reported, called fsdp_comm_abort and
# MPI_Abort returned or its watchdog fired) or by the launcher's TERM/KILL (143/137) once another
# rank's MPI_Abort started ending the job; at least one rank of host 1 reports and exits with 1.
#  killed: host 2's ranks killed, default launcher: Open MPI sees them die and ends the job (non-zero)
#          within the bound, naming a rank of host 2 and the host.
#  crash:  every process of host 2, its Open MPI daemon included, killed (default launcher): Open MPI
#          notices the lost daemon, names host 2 and ends the job (non-zero) within the bound.
#  frozen: host 2's daemon and rank 0 (host 1) frozen (SIGSTOP): host 2's ranks time out and call
#          MPI_Abort, which cannot reach the frozen daemon; the abort watchdog (comm_mpi_abort) ends
#          them with status 1 within the timeout + 3 s + SLACK. A rank whose MPI call itself waits on
#          the frozen daemon (Open MPI reporting a TCP error through it, about 1 run in 8) never gets
#          to its timeout: the stuck watchdog (stuck_exit) ends it, status 1, timeout + 0.1 s after.
# Every case: the latest complete checkpoint loads. Exit statuses and end times come from each rank's
# wrapper (lib.sh's launch.sh), not from the launcher.
# usage: hosts_fail.sh FSDP_TRAIN WORKDIR
BIN=$1 WORK=$2 NAME=fl
source "$(dirname "$0")/lib.sh"
TIMEOUT=3
SLACK=8 # MPI_Abort and process teardown on a shared, possibly loaded 2-core machine
prepare_data
printf '| fault | rank | host | exit status | ended after fault (s) |\n|---|---|---|---|---|\n' >table.md
printf '| fault | mpirun status | mpirun ended after fault (s) | message |\n|---|---|---|---|\n' >jobs.md

# [WRAP=""] start NAME [--mpi ARG]...: on a fresh set of 2 hosts (a daemon cut off by the previous case may
# linger on its host), a long training job on 2 hosts x 2 ranks in the background (JOB = its pid);
# returns once step 9 is in the metrics.
start() {
    local name=$1; shift
    rm -f rank.* "$name.jsonl"
    "$HOSTS" down && hosts_up 2
    "$HOSTS" run 2 --per-host 2 "$@" -- ${WRAP-./launch.sh} "$BIN" "${TINY[@]}" --steps 100000 --checkpoint-every 4 \
        --comm-timeout $TIMEOUT --checkpoint-dir "ck_$name" --metrics "$name.jsonl" >"$name.log" 2>&1 &
    JOB=$!
    local i=0
    while ! grep -q '"step": 9,' "$name.jsonl" 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
    grep -q '"step": 9,' "$name.jsonl" || bad "$name: the job did not reach step 9: $(tail -3 "$name.log")"
}

# finish_job NAME T0 WANT_RC MAX_S: waits for mpirun; records its status and time.
finish_job() {
    local name=$1 t0=$2 want=$3 max=$4
    wait "$JOB"
    local rc=$? el
    el=$(elapsed "$t0")
    local msg
    msg=$(tr '\r' '\n' <"$name.log" | grep -o -m1 -E "\[rank [0-9]+\] error: .*not complete after|ORTE has lost communication.*|mpirun noticed.*|Primary job  terminated normally, but 1 process returned" | cut -c1-100)
    echo "| $name | $rc | $el | $msg |" >>jobs.md
    echo "$name: mpirun exit $rc after ${el}s"
    [ "$rc" = "$want" ] || { [ "$want" = nonzero ] && [ "$rc" != 0 ] && [ "$rc" != 124 ]; } && ok ||
        bad "$name: mpirun exit $rc (want $want)"
    python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$el" "$max" && ok ||
        bad "$name: mpirun ended ${el}s after the fault (bound ${max}s)"
}

# ranks_end NAME T0 WANT MAX_S RANK...: each rank's wrapper recorded its status and end time. WANT
# "1": status 1 for every rank; "1|launcher": 1, 143 or 137 each, and 1 for at least one of them.
ranks_end() {
    local name=$1 t0=$2 want=$3 max=$4 r ones=0; shift 4
    for r in "$@"; do
        local pid="" host="?" st="" t="" el
        [ -f "rank.$r" ] && read -r pid host st t <"rank.$r"
        el=$([ -n "${t:-}" ] && elapsed "$t0" "$t" || echo "-")
        echo "| $name | $r | $host | ${st:--} | $el |" >>table.md
        [ "${st:-}" = 1 ] && ones=$((ones + 1))
        [[ "${st:-}" =~ ^($want)$ ]] && ok || bad "$name: rank $r on $host: exit status '${st:-}' (want $want)"
        [ "$el" != - ] && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$el" "$max" && ok ||
            bad "$name: rank $r on $host ended ${el}s after the fault (bound ${max}s)"
    done
    [ $ones -ge 1 ] && ok || bad "$name: no rank exited by itself with status 1"
}

# named NAME HOST RANK...: at least one of RANKs reported a timeout, and every such message names the
# rank, its host, the unit and phase, the collective and the timeout.
named() {
    local name=$1 host=$2 r n=0; shift 2
    for r in "$@"; do
        local msg
        msg=$(tr '\r' '\n' <"$name.log" | grep -o -m1 "\[rank $r\] error: .*not complete after.*")
        [ -n "$msg" ] || continue
        n=$((n + 1))
        echo "  $msg"
        named_one "$name" "$r" "$host" "$msg"
    done
    [ $n -ge 1 ] && ok || bad "$name: no rank of $* reported the timed-out collective"
}
named_one() {
    local msg=$4
    [[ "$msg" =~ rank\ $2\ of\ 4\ on\ host\ $3: ]] && ok || bad "$1: no 'rank $2 of 4 on host $3' in '$msg'"
    [[ "$msg" =~ label\ \"(unit\ [^\"/]+|engine|train)\ /\ [^\"]+\" ]] && ok || bad "$1: no 'unit NAME / PHASE' label in '$msg'"
    [[ "$msg" =~ \ (all-gather|reduce-scatter|all-reduce|broadcast|barrier)\ \(label ]] && ok || bad "$1: no collective in '$msg'"
    [[ "$msg" =~ timeout_s\ $TIMEOUT ]] && ok || bad "$1: the timeout is not stated in '$msg'"
}

# stuck RANK...: for each rank that has not ended (no end record), where its threads wait: kernel wait
# channel and state of each, and their stacks when gdb is installed. This case failed about once in 6
# full suite runs (host 2's ranks never ended); the dump showed a rank waiting for the frozen daemon
# inside MPI_Test, which the stuck watchdog now ends. Kept for any other way of hanging.
stuck() {
    local r p
    for r in "$@"; do
        [ "$(wc -w <"rank.$r")" -lt 4 ] || continue
        read -r p _ <"rank.$r"
        echo "rank $r (pid $p) has not ended; its threads (comm, wchan, state):"
        for t in /proc/"$p"/task/*; do echo "  $(cat "$t/comm" "$t/wchan" 2>/dev/null | tr '\n' ' ') $(awk '{print $3}' "$t/stat" 2>/dev/null)"; done
        command -v gdb >/dev/null && gdb -p "$p" -batch -ex "thread apply all bt" 2>&1 | grep -E "^#|^Thread" | head -60
    done
    return 0
}

# ckpt_loads NAME: the checkpoint `latest` names is a complete one (step >= 8) and loads.
ckpt_loads() {
    local latest
    latest=$(cat "ck_$1/latest" 2>/dev/null)
    [[ "$latest" =~ step_0*([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge 8 ] && ok || bad "$1: latest is '$latest' (want step >= 8)"
    loads "ck_$1" && ok || bad "$1: the latest checkpoint does not load: $(tail -2 "ck_$1.export.log")"
}

# link: host 2's link goes down.
start link
t0=$(now)
"$HOSTS" link 2 down
finish_job link "$t0" 1 $((TIMEOUT + SLACK + 10))
ranks_end link "$t0" "1|143|137" $((TIMEOUT + SLACK)) 0 1 2 3
named link h1 0 1
ckpt_loads link

# link under load: the same cut while a compiler loop and another MPI job keep both cores busy, twice
# (once, on a machine shared with builds and MPI jobs, a cut job ran on for 116 s after its ranks'
# timeout; not seen again in 12 loaded runs). The launcher's namespace bounds TCP's waits
# (tools/hosts.sh: tcp_retries2 4, tcp_syn_retries 2).
( while :; do cc -O2 -c "$SRC/src/kernels/attention.c" -I"$SRC/src" -I"$SRC/include" -o load.o 2>/dev/null; done ) &
LOAD1=$!
( while :; do OMP_NUM_THREADS=1 "$MPIRUN" 2 "$BIN" "${TINY[@]}" --steps 200 --checkpoint-dir ck_load --metrics load.jsonl >/dev/null 2>&1; rm -rf ck_load load.jsonl; done ) &
LOAD2=$!
for rep in 1 2; do
    start "link_load$rep"
    t0=$(now)
    "$HOSTS" link 2 down
    finish_job "link_load$rep" "$t0" 1 $((TIMEOUT + SLACK + 10))
    ranks_end "link_load$rep" "$t0" "1|143|137" $((TIMEOUT + SLACK)) 0 1 2 3
done
kill $LOAD1 $LOAD2 2>/dev/null
wait $LOAD1 $LOAD2 2>/dev/null

# ranks: host 2's ranks killed; the launcher does not abort the job for it.
start ranks --mpi --mca --mpi orte_abort_on_non_zero_status --mpi 0
t0=$(now)
"$HOSTS" kill 2 ranks || bad "ranks: nothing to kill on host 2"
finish_job ranks "$t0" 1 $((TIMEOUT + SLACK))
# 141 (SIGPIPE) too: a rank that has reported its error and is still writing when rank 0's abort
# has taken down its host's daemon, which held its output pipes (seen once in ~10 runs).
ranks_end ranks "$t0" "1|141|143|137" $((TIMEOUT + SLACK)) 0 1
named ranks h1 0 1
ckpt_loads ranks

# killed: host 2's ranks killed; the launcher ends the job. No wrapper: Open MPI then sees the rank
# itself die by a signal, and names its host.
WRAP="" start killed
t0=$(now)
"$HOSTS" kill 2 ranks || bad "killed: nothing to kill on host 2"
finish_job killed "$t0" nonzero $((TIMEOUT + SLACK))
log=$(tr '\r' '\n' <killed.log)
grep -q -E "process rank [23] with PID [0-9]+ on node h2 exited on signal 9" <<<"$log" && ok ||
    bad "killed: Open MPI's message does not name rank 2 or 3 on node h2"
ckpt_loads killed

# crash: host 2 loses every process, the daemon too (default launcher).
start crash
t0=$(now)
"$HOSTS" kill 2 all || bad "crash: nothing to kill on host 2"
finish_job crash "$t0" nonzero $((TIMEOUT + SLACK))
# (not `tr | grep -q` under pipefail: grep leaving at its match can end tr with SIGPIPE mid-file, and
# the pipeline then fails although the message is there)
log=$(tr '\r' '\n' <crash.log)
grep -q -E "on node h2|Peer host: +h2" <<<"$log" && ok || bad "crash: Open MPI's message does not name host h2"
ckpt_loads crash

# frozen: host 2's Open MPI daemon and rank 0 (host 1) stopped. Ranks 1-3 time out; rank 1's abort
# reaches the launcher through host 1's daemon, but ranks 2 and 3 abort through a daemon that never
# answers: only comm_mpi_abort's watchdog ends them (status 1, about 3 s after their report), or the
# stuck watchdog when one's MPI call waits on that daemon (status 1 too).
start frozen
orted=$("$HOSTS" pids 2 | awk '$2 == "orted" {print $1}')
read -r r0 _ <rank.0
[ -n "$orted" ] && [ -n "$r0" ] && ok || bad "frozen: no daemon on host 2 ('$orted') or no rank 0 pid ('$r0')"
t0=$(now)
kill -STOP $orted "$r0"
i=0
while { [ ! -f rank.2 ] || [ "$(wc -w <rank.2)" -lt 4 ] || [ "$(wc -w <rank.3)" -lt 4 ]; } && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
stuck 2 3
ranks_end frozen "$t0" 1 $((TIMEOUT + 3 + SLACK)) 2 3
kill -KILL $orted "$r0" 2>/dev/null # the launcher, left waiting for the frozen daemon, may end now
wait "$JOB"
echo "| frozen | $? (daemon killed by the test once ranks 2, 3 had ended) | - | - |" >>jobs.md
ckpt_loads frozen

cat table.md jobs.md
finish
