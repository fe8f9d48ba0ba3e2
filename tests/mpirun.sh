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
exec mpirun --oversubscribe --bind-to none -np "$np" "$@"
