#!/bin/sh
# SPDX-License-Identifier: MIT
# test_gdb_async.sh - "shmap devices" in gdb lists a device's open
# asynchronous request (tests/gdb_async_target stopped in device 0's body
# right after shmap_ppermute_start, device 1 not there yet), in thread and
# fiber mode; the device itself shows as running its body.  Skipped (exit
# 77) without gdb, its Python support or ptrace.
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
prog=$top_builddir/tests/gdb_async_target
ext=$top_srcdir/gdb/shmap-gdb.py
src=$top_srcdir/tests/gdb_async_target.c

gdb_test=test_gdb_async
. "$top_srcdir/tests/gdbutil.sh"
gdb_require
if test ! -f "$prog" || test ! -f "$ext" || test ! -f "$src"; then
  echo "test_gdb_async: $prog, $ext or $src not found" >&2
  exit 99
fi
unset SHMAP_WATCHDOG SHMAP_TRACE SHMAP_SCHED SHMAP_ASYNC_CHECK

tmp=${TMPDIR:-/tmp}/test_gdb_async.$$
mkdir "$tmp" || exit 99
trap 'rm -rf "$tmp"' 0
trap 'exit 99' 1 2 15

line=$(grep -n 'gdb-test: break here' "$src" | cut -d: -f1)
status=0
for sched in threads fibers; do
  {
    printf '%s\n' 'set pagination off' 'set confirm off' 'set width 0'
    printf '%s\n' "source $ext"
    printf '%s\n' "break gdb_async_target.c:$line if \$shmap_device() == 0"
    printf '%s\n' 'run'
    printf '%s\n' 'echo @@devices\n' 'shmap devices'
    printf '%s\n' 'echo @@end\n' 'kill'
  } > "$tmp/cmds"
  SHMAP_SCHED=$sched SHMAP_WORKERS=2 $to gdb -nx -batch -x "$tmp/cmds" \
    "$prog" > "$tmp/out" 2>&1
  echo "---- gdb output ($sched) ----"
  cat "$tmp/out"
  check () {
    what=$1
    shift
    if sed -n '/^@@devices$/,/^@@end$/p' "$tmp/out" | grep -E "$@" >/dev/null
    then
      echo "ok ($sched): $what"
    else
      echo "FAIL ($sched): $what"
      status=1
    fi
  }
  check "the open request is listed" \
    "device 0 \(i=0\) request 0: ppermute over 'i' \(call #1, shmap_ppermute_start\), started [0-9.]+ s ago: (in transfer|queued)"
  check "device 0 runs its body meanwhile" \
    "device 0 \(i=0\): .*running its body"
  if grep -E 'Python Exception|Traceback' "$tmp/out" >/dev/null; then
    echo "FAIL ($sched): the extension raised a Python error"
    status=1
  fi
done
exit $status
