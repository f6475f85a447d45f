#!/bin/sh
# SPDX-License-Identifier: MIT
# test_rehearse_mpi.sh - tests/mpi/test_mpi_rehearse prints the same
# predictions on 1 process, under mpirun with 2 and with 4 processes, in
# both scheduling modes (devices are named with the process that runs
# them under mpirun: that suffix is left out of the comparison).  Skipped
# (77) without MPI.
b=${top_builddir:-.}
prog=$b/tests/mpi/test_mpi_rehearse
[ -x "$prog" ] || { echo "no MPI build: skipped"; exit 77; }
: "${MPIRUN:=mpirun}"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
launch() {
  np=$1
  shift
  if [ "$np" = 1 ]; then
    timeout -k 10 120 "$@"
    return
  fi
  set -- -np "$np" "$@"
  if [ "${MPI_FLAVOR:-}" = openmpi ]; then
    set -- --oversubscribe "$@"
    [ "$(id -u)" = 0 ] && set -- --allow-run-as-root "$@"
  fi
  timeout -k 10 120 "$MPIRUN" "$@"
}
for sched in threads fibers; do
  export SHMAP_SCHED=$sched
  launch 1 "$prog" > "$tmp/np1" || { echo "FAIL: np=1 $sched"; exit 1; }
  for np in 2 4; do
    launch "$np" "$prog" > "$tmp/out" || { echo "FAIL: np=$np $sched"; exit 1; }
    sed 's/ on process [0-9]* (host [^)]*)//' "$tmp/out" > "$tmp/np$np"
    if ! cmp -s "$tmp/np1" "$tmp/np$np"; then
      echo "FAIL: np=$np ($sched) differs from one process:"
      diff "$tmp/np1" "$tmp/np$np"
      exit 1
    fi
  done
done
cat "$tmp/np1"
