#!/usr/bin/env bash
# hosts.sh — several test "hosts" on this machine: Linux network namespaces on a private bridge, each
# with its own address, hostname (a UTS namespace per daemon) and link, and Open MPI jobs spread over
# them with every byte between hosts going over TCP through the veth links (no shared memory).
# Needs root and iproute2 (ip, tc), util-linux (unshare) and Open MPI's mpirun.
#
# usage: tools/hosts.sh up N                      create hosts 1..N (replaces an existing set)
#        tools/hosts.sh run N [--per-host K] [--mpi ARG]... -- CMD [ARGS...]
#                                                 mpirun -np N*K over hosts 1..N, K ranks per host
#                                                 (ranks 0..K-1 on host 1, ...); exit status of mpirun;
#                                                 --mpi ARG: one more mpirun argument (repeatable)
#        tools/hosts.sh shape RATE|off            every link limited to RATE (tc rate: 1gbit, 10gbit,
#                                                 500mbit) in both directions; off removes the limit
#        tools/hosts.sh link I up|down            take host I's link down (a cable pulled) or up
#        tools/hosts.sh kill I [ranks|all]        SIGKILL host I's ranks (default) or every process of
#                                                 it, its Open MPI daemon included (a host crashing)
#        tools/hosts.sh pids I                    "PID COMMAND" of every process in host I
#        tools/hosts.sh bytes [I]                 "HOST RX TX" byte counters of each host's link (or I's)
#        tools/hosts.sh exec I CMD [ARGS...]      run CMD inside host I's network namespace
#        tools/hosts.sh down                      remove everything (idempotent; also after a failed run)
#
# Environment: HOSTS_ID (default "fsdp"): names this set, so two sets can exist side by side: the
# namespaces are HOSTS_ID-h1.., the bridge and root-side veths HOSTS_ID-br / HOSTS_ID-v1.. (at most 6
# characters, [a-z0-9]); the subnet is 10.213.X.0/24 with X derived from the id (a clash with an
# existing route is an error); state and Open MPI's session folders live in HOSTS_DIR (default
# /run/fsdp-hosts/HOSTS_ID), never in /tmp. Inside the namespaces host I is hostname hI, address
# 10.213.X.I; mpirun runs in a launcher namespace of its own (HOSTS_ID-h0, 10.213.X.254), so the
# root namespace has no address on the bridge and none of its settings change.
# HOSTS_QUEUE (default 2ms): how long a shaped link may queue (tc tbf latency); see cmd_shape.
# HOSTS_MPI_TIMEOUT (seconds, default 0 = none): `run` kills mpirun after that long (status 124).
set -euo pipefail

ID=${HOSTS_ID:-fsdp}
[[ "$ID" =~ ^[a-z0-9]{1,6}$ ]] || { echo "hosts.sh: HOSTS_ID '$ID' must be 1-6 of [a-z0-9]" >&2; exit 2; }
DIR=${HOSTS_DIR:-/run/fsdp-hosts/$ID}
BR=$ID-br
# Third octet from the id: distinct ids almost always get distinct subnets; `up` checks for clashes.
OCT=$(($(printf '%s' "$ID" | cksum | cut -d' ' -f1) % 250 + 1))
NET=10.213.$OCT
MAXH=16
QUEUE=${HOSTS_QUEUE:-2ms}

die() { echo "hosts.sh: $*" >&2; exit 2; }
ns() { echo "$ID-h$1"; }
veth() { echo "$ID-v$1"; }
count() { cat "$DIR/count" 2>/dev/null || echo 0; }
need_host() {
    [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le "$(count)" ] || die "no host '$1' (hosts up: $(count))"
}

cmd_down() {
    local i
    # Processes left in the namespaces (a killed or hung run) go first, by pid: a namespace with live
    # processes would outlive `ip netns del`.
    for i in $(seq 0 $MAXH); do
        if ip netns list 2>/dev/null | grep -qw "$(ns "$i")"; then
            local pids
            pids=$(ip netns pids "$(ns "$i")" 2>/dev/null || true)
            [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
        fi
        # Delete each veth explicitly: namespace deletion removes it asynchronously.
        ip link del "$(veth "$i")" 2>/dev/null || true
        ip netns del "$(ns "$i")" 2>/dev/null || true
    done
    ip link del "$BR" 2>/dev/null || true
    rm -rf "$DIR"
}

cmd_up() {
    local n=${1:-}
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le $MAXH ] || die "up N: N must be 1..$MAXH"
    [ "$(id -u)" = 0 ] || die "up needs root (network namespaces)"
    cmd_down
    if ip route show | grep -q "^$NET\.0/24" || ip -o addr show | grep -q " $NET\."; then
        die "subnet $NET.0/24 is already in use; choose another HOSTS_ID"
    fi
    mkdir -p "$DIR/tmp"
    ip link add "$BR" type bridge
    ip link set "$BR" up
    local i
    # Host 0 is the launcher's (mpirun runs there, address .254); hosts 1..N run the ranks.
    for i in $(seq 0 "$n"); do
        local h v a=$i
        h=$(ns "$i") v=$(veth "$i")
        [ "$i" = 0 ] && a=254
        ip netns add "$h"
        ip link add "$v" type veth peer name eth0 netns "$h"
        ip link set "$v" master "$BR" up
        ip -n "$h" addr add "$NET.$a/24" dev eth0
        ip -n "$h" link set eth0 up
        # The daemon talks to its ranks over 127.0.0.1: with lo down a launch hangs silently.
        ip -n "$h" link set lo up
    done
    # The launcher gives up on an unreachable daemon after ~6 s of retransmissions instead of TCP's
    # default ~15 min (mpirun, aborting a job, waits for every daemon it sent the kill order to).
    ip netns exec "$(ns 0)" sysctl -qw net.ipv4.tcp_retries2=4
    # And a connection it would open again to such a daemon gives up after 3 SYNs (~7 s) instead of 7
    # (~127 s). Not seen in the cut tests (no SYN-SENT socket in the launcher's namespace after a cut,
    # polled every 0.2 s in 3 loaded runs), but the one other kernel wait with no bound of ours.
    ip netns exec "$(ns 0)" sysctl -qw net.ipv4.tcp_syn_retries=2
    echo "$n" >"$DIR/count"
    write_agent
    echo "hosts.sh: $n hosts up ($NET.1-$NET.$n, launcher $NET.254, bridge $BR, state in $DIR)"
}

# The launcher agent Open MPI's rsh starter calls as `AGENT [ssh options] HOST COMMAND...` (for ssh
# the command is one shell line): runs the line inside HOST's network namespace with a UTS namespace
# of its own whose hostname is HOST (with one shared hostname the daemons race on the same session
# folder and some launches fail).
write_agent() {
    cat >"$DIR/agent" <<SH
#!/usr/bin/env bash
# Written by tools/hosts.sh: Open MPI's launcher agent for the namespace hosts of set "$ID".
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do
    case \$1 in -o|-p|-l|-i|-F|-J) shift 2 ;; *) shift ;; esac
done
host=\$1; shift
[[ "\$host" =~ ^h([0-9]+)\$ ]] || { echo "hosts agent: unknown host '\$host'" >&2; exit 255; }
exec ip netns exec "$ID-h\${BASH_REMATCH[1]}" unshare --uts /bin/sh -c 'hostname "\$1" && eval "\$2"' sh "\$host" "\$*"
SH
    chmod +x "$DIR/agent"
}

cmd_run() {
    local n=${1:-} k=1 mpi=()
    shift || true
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] || die "run N: N must be a number of hosts"
    [ "$n" -le "$(count)" ] || die "run $n: only $(count) hosts are up (tools/hosts.sh up $n)"
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        case $1 in
        --per-host) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || die "--per-host needs a positive number"; k=$2; shift 2 ;;
        --mpi) [ $# -ge 2 ] || die "--mpi needs an argument"; mpi+=("$2"); shift 2 ;;
        *) die "run: unknown option '$1' (CMD goes after --)" ;;
        esac
    done
    [ "${1:-}" = "--" ] && [ $# -ge 2 ] || die "run N [--per-host K] -- CMD [ARGS...]"
    shift
    local hf=$DIR/hostfile.$$ i
    : >"$hf"
    for i in $(seq 1 "$n"); do echo "h$i slots=$k" >>"$hf"; done
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
    local to=()
    [ "${HOSTS_MPI_TIMEOUT:-0}" != 0 ] && to=(timeout -k 5 "$HOSTS_MPI_TIMEOUT")
    local rc=0
    # SIGPIPE ignored, for mpirun and (inherited through the daemons) the ranks: when a host's ranks or
    # daemon die, mpirun itself sometimes died of SIGPIPE (status 141, writing to the lost daemon's
    # connection) before it reported which rank had failed (hosts/fail, "killed", once in ~15 runs);
    # with SIGPIPE ignored such a write fails with EPIPE and mpirun goes on to report.
    trap '' PIPE
    # pml ob1 + btl tcp,self,vader: between hosts only TCP, on the bridge subnet only (vader, shared
    # memory, serves ranks of one host, as on a real machine). OOB keepalive: a daemon whose link is
    # gone is declared lost after ~10 s instead of TCP's minutes of retries. No tree spawn: mpirun
    # starts every daemon itself. orte_tmpdir_base: session folders under DIR, not /tmp.
    "${to[@]}" ip netns exec "$(ns 0)" mpirun --hostfile "$hf" -np $((n * k)) --bind-to none --oversubscribe \
        --mca plm_rsh_agent "$DIR/agent" --mca plm_rsh_no_tree_spawn 1 \
        --mca orte_tmpdir_base "$DIR/tmp" \
        --mca pml ob1 --mca btl self,vader,tcp --mca btl_vader_single_copy_mechanism none \
        --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24" \
        --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 \
        "${mpi[@]}" "$@" || rc=$?
    rm -f "$hf"
    return $rc
}

cmd_shape() {
    local rate=${1:-}
    [ -n "$rate" ] || die "shape RATE|off"
    local i
    for i in $(seq 1 "$(count)"); do
        if [ "$rate" = off ]; then
            tc qdisc del dev "$(veth "$i")" root 2>/dev/null || true
            ip netns exec "$(ns "$i")" tc qdisc del dev eth0 root 2>/dev/null || true
            continue
        fi
        # tbf: burst of 1 ms at the rate (>= 64 KiB: veth hands over GSO packets up to 64 KiB); a queue
        # of HOSTS_QUEUE (default 2ms) at the rate, about a switch port's buffer. Not 100ms: with
        # both directions busy, a queue that deep holds the TCP acknowledgements and Open MPI's
        # rendezvous replies behind ~12 MB of data at 1 Gbit/s, and Open MPI's TCP transport ran at
        # half the line rate (bench_comm, 2 hosts, 16 MiB all-gather / reduce-scatter: 0.060 GB/s bus
        # bandwidth with 100ms, 0.117 with 2ms, the same minute; one plain TCP stream reached 0.95
        # Gbit/s either way). What remained of the half rate with 2ms was Open MPI's RDMA-emulation
        # protocol, which fsdp_comm_init now turns off (src/comm/comm_mpi.c, docs/MULTIHOST.md).
        local bps burst
        bps=$(tc_rate_bits "$rate")
        [[ "$QUEUE" =~ ^[0-9]+(us|ms)$ ]] || die "HOSTS_QUEUE '$QUEUE' must be a time like 2ms or 500us"
        burst=$((bps / 8 / 1000))
        [ $burst -ge 131072 ] || burst=131072
        tc qdisc replace dev "$(veth "$i")" root tbf rate "$rate" burst "$burst" latency "$QUEUE"
        ip netns exec "$(ns "$i")" tc qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency "$QUEUE"
    done
}

# tc_rate_bits RATE: bits per second of a tc rate written as N[k|m|g]bit.
tc_rate_bits() {
    [[ "$1" =~ ^([0-9]+)(k|m|g)?bit$ ]] || die "rate '$1': write N[k|m|g]bit (e.g. 1gbit)"
    local m=1
    case ${BASH_REMATCH[2]} in k) m=1000 ;; m) m=1000000 ;; g) m=1000000000 ;; esac
    echo $((BASH_REMATCH[1] * m))
}

cmd_link() {
    need_host "${1:-}"
    case ${2:-} in up | down) ip link set "$(veth "$1")" "$2" ;; *) die "link I up|down" ;; esac
}

cmd_kill() {
    need_host "${1:-}"
    local what=${2:-ranks} pids="" p
    for p in $(ip netns pids "$(ns "$1")"); do
        # ranks: every process but Open MPI's daemon (orted) and the agent's shell that started it.
        if [ "$what" = ranks ]; then
            case $(cat "/proc/$p/comm" 2>/dev/null) in orted | sh | bash | unshare) continue ;; esac
        elif [ "$what" != all ]; then
            die "kill I [ranks|all]"
        fi
        pids="$pids $p"
    done
    [ -n "$pids" ] || { echo "hosts.sh: host $1 has no processes to kill" >&2; return 1; }
    kill -KILL $pids
}

cmd_bytes() {
    local i
    for i in $(seq 1 "$(count)"); do
        [ -n "${1:-}" ] && [ "$1" != "$i" ] && continue
        # Counted on the host's side of its link: rx = into the host, tx = out of it.
        echo "h$i $(ip netns exec "$(ns "$i")" cat /sys/class/net/eth0/statistics/rx_bytes) $(ip netns exec "$(ns "$i")" cat /sys/class/net/eth0/statistics/tx_bytes)"
    done
}

cmd_pids() {
    need_host "${1:-}"
    local p
    for p in $(ip netns pids "$(ns "$1")"); do echo "$p $(cat "/proc/$p/comm" 2>/dev/null)"; done
}

cmd_exec() {
    need_host "${1:-}"
    local h=$1; shift
    ip netns exec "$(ns "$h")" "$@"
}

c=${1:-}
shift || true
case $c in
up) cmd_up "$@" ;;
down) cmd_down ;;
run) cmd_run "$@" ;;
shape) cmd_shape "$@" ;;
link) cmd_link "$@" ;;
kill) cmd_kill "$@" ;;
bytes) cmd_bytes "$@" ;;
exec) cmd_exec "$@" ;;
pids) cmd_pids "$@" ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
