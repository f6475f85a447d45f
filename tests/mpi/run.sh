#!/bin/sh
# SPDX-License-Identifier: MIT
# run.sh NP - the MPI tests on NP processes (NP=1: without mpirun), in both
# scheduling modes, each run bounded by a timeout.  Started by the wrappers
# np1.sh, np2.sh and np4.sh (tests/mpi.mk), which `make check` runs when
# configure found MPI; MPIRUN and MPI_FLAVOR come from the environment.
#
# Runs: tests/mpi/test_mpi_proc (placement, maps over processes, host
# data, a failure on another process's device), tests/mpi/test_mpi_coll
# (random collectives of every dtype against the serial model, failures on
# a device of another process), tests/mpi/test_mpi_map_prop (random maps,
# resharding and partial-manual and nested maps against the serial model
# tests/refmodel.c), tests/mpi/test_mpi_parts (resharding, the replication
# check, sub-meshes, transfers, partial-manual and nested maps over
# processes, traced and the traces merged), tests/mpi/test_mpi_groups
# (grouped collectives, pbroadcast, ragged_all_to_all, preduce),
# tests/mpi/test_mpi_mismatch (the randomized mismatch test over
# processes), tests/mpi/test_mpi_badinput (one process's bad argument to
# a map, reshard, transfer, copy to the host or collective: the same
# error on every process, and the next call works; randomized),
# tests/mpi/test_mpi_meshes (several meshes driven at once by threads of
# their own: maps, to_host, resharding, transfers, and reading another
# process's block), tests/mpi/test_mpi_async (started collectives, their failures
# and mismatches over processes), tests/mpi/test_mpi_level
# (a program that initialised MPI itself, with enough and too low a thread
# level), tests/mpi/test_mpi_spread (a small psum over a group spread
# over the processes: the serial fold bit for bit, and messages per call
# that grow with the processes, not the group),
# tests/mpi/test_mpi_smallperm (ppermute of a few hundred bytes over
# processes: exact values, mismatch messages as a large one's, a failure
# during the call), tests/mpi/test_mpi_allocfail (every library
# allocation of one process made to fail in turn during a map over
# processes: the same error everywhere, never a hang, and the next map
# works), tests/mpi/test_mpi_watchdog (the watchdog's report of other
# processes' devices and its fiber-mode hint), tests/mpi/test_mpi_exit (processes that stop making the same
# library calls: a mismatch error everywhere, or the job aborted with a
# message, never a hang), and every example, unchanged, whose output must
# be the single-process output (byte for byte for 18_processes, the
# example written to run both ways).
set -u
np=${1:?usage: run.sh NP}
b=${top_builddir:-.}
: "${MPIRUN:=mpirun}"
limit=${SHMAPTEST_MPI_TIMEOUT:-300}

launch() {
  if [ "$np" = 1 ]; then
    timeout -k 10 "$limit" "$@"
    return
  fi
  set -- -np "$np" "$@"
  if [ "${MPI_FLAVOR:-}" = openmpi ]; then
    # Two cores here: more processes than cores must be allowed.
    set -- --oversubscribe "$@"
    [ "$(id -u)" = 0 ] && set -- --allow-run-as-root "$@"
  fi
  timeout -k 10 "$limit" "$MPIRUN" "$@"
}

s=${top_srcdir:-.}
. "$s/tests/mpi/examples.sh"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
for sched in threads fibers; do
  export SHMAP_SCHED=$sched
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_proc"
  launch "$b/tests/mpi/test_mpi_proc" || { echo "FAIL: test_mpi_proc (np=$np, $sched)"; fail=1; }
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_parts, traced"
  # Traced: each process writes its file; tools/shmap-trace-merge makes
  # one trace of them, which must be valid, hold every device's track in
  # its process's group, and have the processes' clocks aligned.
  trace=$tmp/trace-$sched.json
  SHMAP_TRACE=$trace launch "$b/tests/mpi/test_mpi_parts" || { echo "FAIL: test_mpi_parts (np=$np, $sched)"; fail=1; }
  if ! command -v python3 >/dev/null; then
    echo "SKIP: trace checks (no python3)"
  elif [ "$np" = 1 ]; then
    python3 "$s/tests/check-trace.py" "$trace" || { echo "FAIL: trace (np=1, $sched)"; fail=1; }
  else
    { python3 "$s/tools/shmap-trace-merge" "$trace.merged" "$trace" &&
      python3 "$s/tests/check-trace.py" "$trace.merged" &&
      python3 "$s/tests/mpi/check-merged-trace.py" "$trace.merged" "$np" 3; } ||
      { echo "FAIL: merged trace (np=$np, $sched)"; fail=1; }
  fi
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_meshes"
  launch "$b/tests/mpi/test_mpi_meshes" || { echo "FAIL: test_mpi_meshes (np=$np, $sched)"; fail=1; }
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_coll"
  launch "$b/tests/mpi/test_mpi_coll" || { echo "FAIL: test_mpi_coll (np=$np, $sched)"; fail=1; }
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_map_prop"
  launch "$b/tests/mpi/test_mpi_map_prop" || { echo "FAIL: test_mpi_map_prop (np=$np, $sched)"; fail=1; }
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_groups"
  launch "$b/tests/mpi/test_mpi_groups" || { echo "FAIL: test_mpi_groups (np=$np, $sched)"; fail=1; }
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_mismatch"
  launch "$b/tests/mpi/test_mpi_mismatch" || { echo "FAIL: test_mpi_mismatch (np=$np, $sched)"; fail=1; }
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_badinput"
  launch "$b/tests/mpi/test_mpi_badinput" || { echo "FAIL: test_mpi_badinput (np=$np, $sched)"; fail=1; }
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_async"
  launch "$b/tests/mpi/test_mpi_async" || { echo "FAIL: test_mpi_async (np=$np, $sched)"; fail=1; }
  for level in multiple funneled; do
    echo "== np=$np SHMAP_SCHED=$sched: test_mpi_level $level"
    launch "$b/tests/mpi/test_mpi_level" $level || { echo "FAIL: test_mpi_level $level (np=$np, $sched)"; fail=1; }
  done
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_spread"
  launch "$b/tests/mpi/test_mpi_spread" || { echo "FAIL: test_mpi_spread (np=$np, $sched)"; fail=1; }
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_explore"
  launch "$b/tests/mpi/test_mpi_explore" || { echo "FAIL: test_mpi_explore (np=$np, $sched)"; fail=1; }
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_smallperm"
  launch "$b/tests/mpi/test_mpi_smallperm" || { echo "FAIL: test_mpi_smallperm (np=$np, $sched)"; fail=1; }
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_repeat"
  launch "$b/tests/mpi/test_mpi_repeat" || { echo "FAIL: test_mpi_repeat (np=$np, $sched)"; fail=1; }
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_allocfail"
  launch "$b/tests/mpi/test_mpi_allocfail" || { echo "FAIL: test_mpi_allocfail (np=$np, $sched)"; fail=1; }
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_watchdog"
  launch "$b/tests/mpi/test_mpi_watchdog" || { echo "FAIL: test_mpi_watchdog (np=$np, $sched)"; fail=1; }
  # Processes that stop making the same library calls: a mismatch
  # reported everywhere, or the job aborted with a message -- never a hang
  # (each run is bounded well below the suite's limit).
  echo "== np=$np SHMAP_SCHED=$sched: test_mpi_exit"
  exit_run() { # MODE EXPECTED-STATUS PATTERN
    saved=$limit limit=60
    launch "$b/tests/mpi/test_mpi_exit" "$1" >"$tmp/x.out" 2>"$tmp/x.err"
    st=$? limit=$saved
    if [ "$2" = 0 ] && [ $st != 0 ] || [ "$2" != 0 ] && { [ $st = 0 ] || [ $st = 124 ] || [ $st = 137 ]; } ||
       ! grep -q "$3" "$tmp/x.out" "$tmp/x.err"; then
      echo "FAIL: test_mpi_exit $1 (np=$np, $sched): status $st, expected ${2}, and /$3/ in:"
      cat "$tmp/x.out" "$tmp/x.err"
      fail=1
    fi
  }
  exit_run ok 0 "process 0: ok"
  if [ "$np" != 1 ]; then
    exit_run skip 0 "process $((np - 1)): recovered"
    if [ "$(grep -c 'the processes made different library calls: process 0 (host [^)]*) is in shmap_array_to_host of f32\[4\] (mesh 1: i=4), its call 5, and process '$((np - 1))' (host [^)]*) in shmap_map (mesh 1: i=4), its call 5' "$tmp/x.out")" != "$np" ]; then
      echo "FAIL: test_mpi_exit skip (np=$np, $sched): not the same mismatch in every process:"
      cat "$tmp/x.out"
      fail=1
    fi
    exit_run early 1 "process $((np - 1)) (host [^)]*) ended after 2 library calls .* waits for it in shmap_array_to_host (call 3): aborting the job"
    exit_run body 1 "process $((np - 1)) (host [^)]*) exits while a map runs"
    # _exit(0) without finalising: the launcher's business (shmap-mpi(7)).
    if [ "${MPI_FLAVOR:-}" = openmpi ]; then
      exit_run quit 1 "exiting improperly"
    else
      saved=$limit limit=60
      launch "$b/tests/mpi/test_mpi_exit" quit >"$tmp/x.out" 2>"$tmp/x.err"
      st=$? limit=$saved
      # MPICH's mpiexec reports whichever end it collects first: the
      # exited process's 0 (no message), a killed one's signal 9, or the
      # 1 its proxy records for a process whose connection closed before
      # it finalised, which mpiexec prints as signal 1.
      ok=0
      case $st in
        0) ok=1 ;;
        9) grep -q "Killed (signal 9)" "$tmp/x.out" "$tmp/x.err" && ok=1 ;;
        1) grep -q "EXIT CODE: 1$" "$tmp/x.out" &&
             grep -q "Hangup (signal 1)" "$tmp/x.out" && ok=1 ;;
      esac
      if [ $ok = 0 ]; then
        echo "FAIL: test_mpi_exit quit (np=$np, $sched): status $st, expected 0, 9 with \"Killed (signal 9)\", or 1 with \"EXIT CODE: 1\" and \"Hangup (signal 1)\" (as shmap-mpi(7) says of MPICH's mpiexec):"
        cat "$tmp/x.out" "$tmp/x.err"
        fail=1
      fi
    fi
    if grep -q "process 0: ok" "$tmp/x.out"; then
      echo "FAIL: test_mpi_exit quit (np=$np, $sched): process 0 finished:"
      cat "$tmp/x.out" "$tmp/x.err"
      fail=1
    fi
  fi
  run_examples "$np" "$sched" launch
done
exit $fail
