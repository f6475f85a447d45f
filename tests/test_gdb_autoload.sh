#!/bin/sh
# SPDX-License-Identifier: MIT
# test_gdb_autoload.sh - the crash-report idiom "gdb -batch -ex run -ex bt
# PROG" with the gdb extension auto-loaded, as gdb loads it for a program
# linked against an installed library: the extension is put where gdb looks
# for <real path of the library>-gdb.py under its auto-load scripts
# directory (a directory of this test, made safe with
# add-auto-load-safe-path), not sourced.  tests/gdb_crash_target writes
# to an unmapped address in device 1's body; in both scheduling modes the
# session must stop at the SIGSEGV, "bt" must show crash_here and body, the
# extension must have been auto-loaded ("info auto-load python-scripts"
# says Yes) and its commands must work ("shmap devices" after the crash).
# Skipped (exit 77) when gdb, its Python support, or ptrace is not
# available.  Exit status: 0 pass, 1 fail, 77 skip, 99 hard error.

top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
prog=$top_builddir/tests/gdb_crash_target
ext=$top_srcdir/gdb/shmap-gdb.py

gdb_test=test_gdb_autoload
. "$top_srcdir/tests/gdbutil.sh"
gdb_require
lib=
for f in "$top_builddir"/src/.libs/libshmap.so; do
  if test -e "$f"; then
    lib=$(readlink -f "$f")
  fi
done
if test ! -f "$prog" || test ! -f "$ext" || test -z "$lib"; then
  echo "test_gdb_autoload: $prog, $ext or the shared library not found" >&2
  exit 99
fi

unset SHMAP_WATCHDOG SHMAP_TRACE SHMAP_SCHED SHMAP_WORKERS SHMAP_ASYNC_CHECK

tmp=${TMPDIR:-/tmp}/test_gdb_autoload.$$
mkdir "$tmp" || exit 99
trap 'rm -rf "$tmp"' 0
trap 'exit 99' 1 2 15

# Where gdb looks for the library's script: the scripts directory, then the
# library's real path, then "-gdb.py".
dir=$tmp/auto-load
mkdir -p "$dir$(dirname "$lib")" || exit 99
cp "$ext" "$dir$lib-gdb.py" || exit 99

status=0
for sched in threads fibers; do
  out=$tmp/$sched.out
  SHMAP_SCHED=$sched $to gdb -nx -batch \
    -iex "set auto-load scripts-directory $dir" \
    -iex "add-auto-load-safe-path $dir" \
    -ex run -ex bt -ex 'info auto-load python-scripts' \
    -ex 'shmap devices' "$prog" > "$out" 2>&1
  ok=1
  for re in 'received signal SIGSEGV' \
            '^#0 .* crash_here \(dev=1\) at .*gdb_crash_target\.c:[0-9]+$' \
            '^#[0-9]+ .* body \(ctx=.*gdb_crash_target\.c:[0-9]+$' \
            "^Yes +$dir.*-gdb\\.py *\$" \
            '^\* device 1 \(i=1\): .*crash_here\(\) at gdb_crash_target\.c:[0-9]+'; do
    if ! grep -E "$re" "$out" >/dev/null; then
      echo "FAIL ($sched): no line matches: $re"
      ok=0
    fi
  done
  for re in 'Selected thread is running' 'Traceback' 'exited normally' \
            'gdb_crash_target: map returned'; do
    if grep -E "$re" "$out" >/dev/null; then
      echo "FAIL ($sched): a line matches: $re"
      ok=0
    fi
  done
  if test $ok = 1; then
    echo "ok: $sched: batch run + bt stops at the crash, extension auto-loaded"
  else
    status=1
    cat "$out"
  fi
done
exit $status
