#!/usr/bin/env bash
# Run a test program under Open MPI with N ranks on this machine: usage mpirun.sh N PROGRAM [ARGS...]
# Sets what Open MPI needs to run as root and with more ranks than cores.
set -euo pipefail
np=$1; shift
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
# One OpenMP thread per rank unless the caller says otherwise: ranks share 2 cores here.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# ASan builds: Open MPI keeps some allocations until exit on purpose (and its dlopened plugins leave
# unsymbolised leaks), so leak detection is off under mpirun even when the caller (tools/test.sh)
# turns it on for unit tests; a later flag in ASAN_OPTIONS wins.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# Each launch gets a session folder of its own (TMPDIR/fsdp-mpi/PID, PID being this script's, which
# exec makes mpirun's): Open MPI 4.1 creates and removes its shared TMPDIR/ompi.HOST.UID without
# tolerating another launch doing the same at that moment, and two tests starting together under
# ctest -j failed with "mkdir ... /tmp/ompi.vm.0: File exists". Folders of launches that have ended
# (empty: mpirun removes what it made) are removed here.
runs="${TMPDIR:-/tmp}/fsdp-mpi"
mkdir -p "$runs"
for d in "$runs"/*; do [ -e "$d" ] && [ ! -e "/proc/${d##*/}" ] && rmdir "$d" 2>/dev/null || true; done
mkdir -p "$runs/$$"
export OMPI_MCA_orte_tmpdir_base="$runs/$$"
exec mpirun --oversubscribe --bind-to none -np "$np" "$@"
