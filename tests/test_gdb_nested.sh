#!/bin/sh
# SPDX-License-Identifier: MIT
# test_gdb_nested.sh - debugs tests/gdb_nested_target in gdb's batch mode
# with the gdb extension loaded, stopped in the inner body of a nested map
# on device 6, and checks that "shmap devices" shows the maps devices 4 and
# 6 are in: the outer map over 'i' and the map over 'j' nested in it, and
# device 1 as a replica.
# Skipped (exit 77) when gdb, its Python support, or ptrace is not
# available.  Exit status: 0 pass, 1 fail, 77 skip, 99 hard error.

top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
prog=$top_builddir/tests/gdb_nested_target
ext=$top_srcdir/gdb/shmap-gdb.py
src=$top_srcdir/tests/gdb_nested_target.c

gdb_test=test_gdb_nested
. "$top_srcdir/tests/gdbutil.sh"
gdb_require
if test ! -f "$prog" || test ! -f "$ext" || test ! -f "$src"; then
  echo "test_gdb_nested: $prog, $ext or $src not found" >&2
  exit 99
fi
unset SHMAP_WATCHDOG SHMAP_TRACE SHMAP_SCHED

tmp=${TMPDIR:-/tmp}/test_gdb_nested.$$
mkdir "$tmp" || exit 99
trap 'rm -rf "$tmp"' 0
trap 'exit 99' 1 2 15

line=$(grep -n 'gdb-test: break here' "$src" | cut -d: -f1)
{
  printf '%s\n' 'set pagination off' 'set confirm off' 'set width 0'
  printf '%s\n' "source $ext"
  printf '%s\n' "break gdb_nested_target.c:$line if \$shmap_device() == 6"
  printf '%s\n' 'run'
  printf '%s\n' 'echo @@devices\n' 'shmap devices'
  printf '%s\n' 'echo @@end\n' 'kill'
} > "$tmp/cmds"
$to gdb -nx -batch -x "$tmp/cmds" "$prog" > "$tmp/out" 2>&1
echo "---- gdb output ----"
cat "$tmp/out"
echo "---- checks ----"
status=0
check () {
  what=$1
  shift
  if sed -n '/^@@devices$/,/^@@end$/p' "$tmp/out" | grep -E "$@" >/dev/null
  then
    echo "ok: $what"
  else
    echo "FAIL: $what"
    status=1
  fi
}
check "device 6 runs the inner body of the map nested over 'j'" \
  "^\* device 6 \(i=1, j=1, k=0\): .*running its body \[map over 'i' > nested over 'j'\]"
# Device 4 runs the outer body and offered device 6 (a replica) its part of
# the nested map: it shows that map from before the offer, however late it
# gets to its own part; the other instances may be anywhere yet.
check "device 4 shows both maps" \
  "device 4 \(i=1, j=0, k=0\): .*\[map over 'i' > nested over 'j'\]"
# Device 1 (k=1) is no member of any nested map over 'j'.
check "device 1 is a replica of device 0, which runs the body" \
  "device 1 \(i=0, j=0, k=1\): .*replica of device 0 \(i=0, j=0, k=0\), waiting for its body \[map over 'i'\]"
if grep -E 'Python Exception|Traceback' "$tmp/out" >/dev/null; then
  echo "FAIL: the extension raised a Python error"
  status=1
fi
exit $status
