#!/usr/bin/env bash
# hosts_traffic.sh — the harness itself (tools/hosts.sh): ranks land on the hosts asked for, each host
# has its own hostname and is a node of its own for MPI (local size = ranks per host), the bytes
# between hosts cross the veth links over TCP (each host's link counters show at least the all-gather
# payload that must reach it from the other hosts: shared memory between hosts would leave them near
# zero), `shape` puts a rate limit on both ends of every link, and `down` leaves nothing behind, also
# after a failed run, and may be repeated.
# usage: hosts_traffic.sh HOSTS_TRAFFIC_BINARY WORKDIR
BIN=$1 WORK=$2 NAME=tr
source "$(dirname "$0")/lib.sh"
MIB=8 REPS=2

"$HOSTS" down && "$HOSTS" down && ok || bad "down with nothing up"
hosts_up 2
before=$("$HOSTS" bytes)
"$HOSTS" run 2 --per-host 2 -- "$BIN" $MIB $REPS >run.log 2>&1 && ok || bad "all-gather on 2 hosts x 2: $(tail -3 run.log)"
after=$("$HOSTS" bytes)
for r in 0 1 2 3; do
    h=h$((r / 2 + 1))
    grep -q "^rank $r host $h local 2$" run.log && ok || bad "rank $r: want host $h, local size 2: $(grep "^rank $r " run.log)"
done
# Per all-gather, each of the 2 blocks of the other host must reach this host at least once (min,
# whatever the algorithm); Open MPI's flat all-gather delivers them to each of the 2 local ranks
# separately (max: 2x that, plus TCP/IP headers < 10% at 1500-byte frames, ACKs and the launch).
min=$((REPS * 2 * MIB * 1024 * 1024))
max=$((2 * min * 11 / 10 + 2 * 1024 * 1024))
for h in h1 h2; do
    rx0=$(awk -v h=$h '$1 == h {print $2}' <<<"$before") rx1=$(awk -v h=$h '$1 == h {print $2}' <<<"$after")
    tx0=$(awk -v h=$h '$1 == h {print $3}' <<<"$before") tx1=$(awk -v h=$h '$1 == h {print $3}' <<<"$after")
    rx=$((rx1 - rx0)) tx=$((tx1 - tx0))
    echo "$h: link rx $rx B, tx $tx B; payload that must cross $min B, flat all-gather's $((2 * min)) B"
    [ $rx -ge $min ] && [ $rx -le $max ] && ok || bad "$h: rx $rx B, want $min .. $max"
    [ $tx -ge $min ] && [ $tx -le $max ] && ok || bad "$h: tx $tx B, want $min .. $max"
done

# A btl_tcp_flags the user gives to mpirun is kept (fsdp_comm_init sets its own only when none is set).
"$HOSTS" run 2 --mpi --mca --mpi btl_tcp_flags --mpi send,put,inplace,need-ack,need-csum \
    --mpi -x --mpi HOSTS_TCP_FLAGS_SET=1 -- "$BIN" 1 1 >flags.log 2>&1 && ok || bad "user's btl_tcp_flags: $(tail -3 flags.log)"

"$HOSTS" shape 1gbit && ok || bad "shape 1gbit"
tc qdisc show dev "$HOSTS_ID-v1" | grep -q "tbf .*rate 1Gbit" && ok || bad "no 1 Gbit tbf on the bridge side of host 1"
"$HOSTS" exec 2 tc qdisc show dev eth0 | grep -q "tbf .*rate 1Gbit" && ok || bad "no 1 Gbit tbf on host 2's side"
"$HOSTS" shape off && ! tc qdisc show dev "$HOSTS_ID-v1" | grep -q tbf && ok || bad "shape off"

# A failed run (a rank exits non-zero), then down: nothing left.
"$HOSTS" run 2 -- false >fail.log 2>&1 && bad "a failing job reported success" || ok
"$HOSTS" down && ok || bad "down after a failed run"
ip netns list | grep -q "^$HOSTS_ID-" && bad "namespaces left: $(ip netns list | grep "^$HOSTS_ID-")" || ok
ip -o link show | grep -q " $HOSTS_ID-" && bad "links left: $(ip -o link show | grep " $HOSTS_ID-")" || ok
[ ! -e "/run/fsdp-hosts/$HOSTS_ID" ] && ok || bad "state folder left"
"$HOSTS" down && ok || bad "second down"
finish
