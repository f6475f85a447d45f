#!/bin/sh
# SPDX-License-Identifier: MIT
# test_mpi_gdb.sh - gdb attached to one process of a job of two, and the
# watchdog's report there.
#
# tests/gdb_target runs under mpirun on two processes on the mesh j=2, i=2
# (GDB_TARGET_MESH): process 0 runs devices 0 and 1 (j=0), process 1
# devices 2 and 3 (j=1); device 3 sleeps 10 s before the psum over 'j' in
# which device 1 waits for it (device 0's group, with device 2, is done).  Once process 0's watchdog (SHMAP_WATCHDOG=1) has reported,
# gdb attaches to process 0 in batch mode with the extension loaded
# (gdb/shmap-gdb.py), runs "shmap meshes" and "shmap devices", and detaches.
# In each scheduling mode (SHMAP_SCHED=threads and fibers) it checks that
#   - process 0's watchdog says devices 2 and 3 run in process 1 (with its
#     host), and never "not started yet";
#   - "shmap devices" shows device 1 waiting in the psum, and
#     devices 2 and 3 as running in process 1 (host H), never "not started
#     yet" or "parked";
#   - "shmap meshes" counts this process's bodies only (device 0 may
#     still wait for device 2 in fiber mode, whose worker device 3 holds);
#   - the job then ends normally ("gdb_target: ok" from both processes).
# Skipped (exit 77) without MPI (MPIRUN unset), gdb, gdb's Python, or
# where attaching (ptrace) is not permitted.  Every run is bounded by a
# timeout.  The automake harness exports top_srcdir and top_builddir and
# runs the test from the top of the build tree; MPIRUN and MPI_FLAVOR come
# from the environment (tests/mpi.mk).
# Exit status: 0 pass, 1 fail, 77 skip, 99 hard error.

top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
prog=$top_builddir/tests/gdb_target
ext=$top_srcdir/gdb/shmap-gdb.py

skip () {
  echo "test_mpi_gdb: SKIP: $*"
  exit 77
}

test -n "${MPIRUN:-}" || skip "MPIRUN is not set (no MPI)"
command -v timeout >/dev/null 2>&1 || skip "timeout is not installed"
command -v gdb >/dev/null 2>&1 || skip "gdb is not installed"
if test ! -x "$prog" || test ! -f "$ext"; then
  echo "test_mpi_gdb: $prog or $ext not found" >&2
  exit 99
fi

DEBUGINFOD_URLS=
export DEBUGINFOD_URLS
unset SHMAP_WATCHDOG SHMAP_TRACE SHMAP_SCHED SHMAP_WORKERS

tmp=${TMPDIR:-/tmp}/test_mpi_gdb.$$
mkdir "$tmp" || exit 99
bgpid=
cleanup () {
  if test -n "$bgpid"; then
    kill "$bgpid" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup 0
trap 'exit 99' 1 2 15

timeout 60 gdb -nx -batch -ex 'python print("python-" + "ok")' \
  > "$tmp/py.out" 2>&1
grep '^python-ok$' "$tmp/py.out" >/dev/null || skip "gdb has no Python support"

set -- -np 2
if test "${MPI_FLAVOR:-}" = openmpi; then
  set -- --oversubscribe "$@"
  test "$(id -u)" = 0 && set -- --allow-run-as-root "$@"
fi
mpiopts="$*"

status=0
check () {
  what=$1
  shift
  if "$@" >/dev/null; then
    echo "ok: $what"
  else
    echo "FAIL: $what"
    status=1
  fi
}
part () {
  sed -n "/^@@$1\$/,/^@@/p" "$tmp/gdb.out"
}
has () {
  part "$1" | grep -E "$2"
}
hasnt () {
  ! part "$1" | grep -E "$2"
}

for sched in threads fibers; do
  echo "==== SHMAP_SCHED=$sched ===="
  rm -f "$tmp"/pid.* "$tmp"/out.* "$tmp"/err.*
  # Each process writes its pid (sh execs the program) and its own output.
  T=$tmp P=$prog GDB_TARGET_MESH="j=2, i=2" SHMAP_SCHED=$sched \
    SHMAP_WATCHDOG=1 timeout -k 10 120 "$MPIRUN" $mpiopts \
    sh -c 'r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-x}}}
           echo $$ > "$T/pid.$r"
           exec "$P" 10 > "$T/out.$r" 2> "$T/err.$r"' \
    > "$tmp/mpirun.out" 2>&1 &
  bgpid=$!
  i=0
  while ! grep 'has run for' "$tmp/err.0" >/dev/null 2>&1; do
    i=$((i + 1))
    if test $i -gt 300 || ! kill -0 "$bgpid" 2>/dev/null; then
      echo "FAIL: $sched: no watchdog report from process 0"
      cat "$tmp/mpirun.out" "$tmp"/err.* 2>/dev/null
      status=1
      continue 2
    fi
    sleep 0.1
  done
  printf '%s\n' 'set pagination off' 'set confirm off' 'set width 0' \
    "source $ext" 'echo @@meshes\n' 'shmap meshes' \
    'echo @@devices\n' 'shmap devices' 'echo @@detach\n' 'detach' \
    'echo @@end\n' > "$tmp/cmds"
  timeout 60 gdb -nx -batch -x "$tmp/cmds" -p "$(cat "$tmp/pid.0")" \
    > "$tmp/gdb.out" 2>&1
  if grep -E 'ptrace: Operation not permitted|Could not attach' \
      "$tmp/gdb.out" >/dev/null; then
    cat "$tmp/gdb.out"
    kill "$bgpid" 2>/dev/null
    wait "$bgpid"
    bgpid=
    skip "attaching is not permitted here"
  fi
  wait "$bgpid"
  rc=$?
  bgpid=
  echo "---- process 0's standard error ----"
  cat "$tmp/err.0"
  echo "---- gdb output ----"
  cat "$tmp/gdb.out"
  echo "---- checks ($sched) ----"
  for d in "2 0" "3 1"; do
    set -- $d
    check "$sched: the watchdog says device $1 runs in process 1" \
      grep -E "^  device $1 \(j=1, i=$2\): runs in process 1 \(host [^)]+\)\$" "$tmp/err.0"
    check "$sched: shmap devices says device $1 runs in process 1" \
      has devices "^  device $1 \(j=1, i=$2\): +runs in process 1 \(host [^)]+\)\$"
  done
  check "$sched: the watchdog says no device has not started" \
    sh -c "! grep 'not started yet' '$tmp/err.0'"
  check "$sched: the watchdog names the process it reports on" \
    grep -E '^shmap watchdog: a map on mesh j=2, i=2 has run for [0-9.]+ s in process 0 \(host [^)]+\); devices:$' "$tmp/err.0"
  check "$sched: shmap devices shows device 1 waiting in the psum" \
    has devices "^[* ] device 1 \(j=0, i=1\): .*waiting in psum over 'j' \(call #1\) for [0-9.]+ s"
  check "$sched: the watchdog shows device 1 waiting in the psum" \
    grep -E "^  device 1 \(j=0, i=1\) on process 0 \(host [^)]+\): waiting in psum over 'j' \(call #1\) for [0-9.]+ s" "$tmp/err.0"
  check "$sched: shmap devices says no device has not started" \
    hasnt devices 'not started yet'
  check "$sched: shmap meshes counts the bodies of this process" \
    has meshes '^mesh #[0-9]+ j=2, i=2 \(4 devices\): a map is running \([01] of 2 bodies in this process returned\)'
  check "$sched: the extension raised no Python error" \
    sh -c "! grep -E 'Python Exception|Traceback|Error occurred in Python' '$tmp/gdb.out'"
  check "$sched: gdb detached" has detach 'Inferior 1 \(process [0-9]+\) detached'
  check "$sched: the job ends normally" \
    sh -c "test $rc -eq 0 && grep '^gdb_target: ok\$' '$tmp/out.0' && grep '^gdb_target: ok\$' '$tmp/out.1'"
done
exit $status
