#!/bin/sh
# SPDX-License-Identifier: MIT
# test_gdb_explore.sh - a hunt for an order-dependent bug, as
# shmap-debugging(7) ("Hunting an interleaving") shows it.
# tests/gdb_explore_target passes a value between devices through host
# memory with no collective between the write and the read:
#   - SHMAP_EXPLORE=50 finds a failing schedule and prints the
#     SHMAP_REPLAY line and the critical step;
#   - SHMAP_REPLAY with that text fails the same way every time (10 runs);
#   - under gdb with the extension, "shmap schedule step 2" stops at the
#     schedule's second choice and names the device that runs next and
#     those that could have, "shmap schedule" shows it again, a breakpoint
#     "if $shmap_device() == 2" stops device 2 where it reads its
#     neighbour's slot, "print slot" shows the stale value, "shmap devices"
#     shows device 2 running and the others parked; two sessions print
#     the same;
#   - "shmap schedule" outside an exploring schedule says so.
# Each in both scheduling modes (the mode of the runtime the replayed maps
# run in).  Skipped (exit 77) when gdb, its Python support, or ptrace is not
# available.  Exit status: 0 pass, 1 fail, 77 skip, 99 hard error.

top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
prog=$top_builddir/tests/gdb_explore_target
ext=$top_srcdir/gdb/shmap-gdb.py

gdb_test=test_gdb_explore
. "$top_srcdir/tests/gdbutil.sh"

if test ! -f "$prog" || test ! -f "$ext"; then
  echo "test_gdb_explore: $prog or $ext not found" >&2
  exit 99
fi

unset SHMAP_WATCHDOG SHMAP_TRACE SHMAP_SCHED SHMAP_WORKERS SHMAP_ASYNC_CHECK \
  SHMAP_EXPLORE SHMAP_REPLAY SHMAP_EXPLORE_SEED

tmp=${TMPDIR:-/tmp}/test_gdb_explore.$$
mkdir "$tmp" || exit 99
trap 'rm -rf "$tmp"' 0
trap 'exit 99' 1 2 15

status=0
fail () {
  echo "FAIL: $*"
  status=1
}

# Without gdb: finding and replaying.
want_fail='device 2 (i=2) failed: read 1 from device 1'"'"'s slot, expected 11'
for sched in threads fibers; do
  SHMAP_SCHED=$sched SHMAP_EXPLORE=50 $to "$prog" > "$tmp/find.out" \
    2> "$tmp/find.err"
  rc=$?
  test $rc = 1 || fail "$sched: SHMAP_EXPLORE=50 exited with $rc"
  for line in \
    "shmap: exploring: schedule 1 of 50 failed: $want_fail" \
    "shmap: SHMAP_REPLAY=r.1 replays it" \
    "shmap: critical step 2 of map 0: device 0 (i=0) went first"; do
    grep -Fx "$line" "$tmp/find.err" >/dev/null ||
      fail "$sched: SHMAP_EXPLORE=50 did not print: $line"
  done
  i=0
  while test $i -lt 10; do
    SHMAP_SCHED=$sched SHMAP_REPLAY=r.1 $to "$prog" > "$tmp/replay.out" 2>&1
    rc=$?
    if test $rc != 1 ||
       ! grep -Fx "gdb_explore_target: $want_fail" "$tmp/replay.out" \
         >/dev/null; then
      fail "$sched: replay $i gave status $rc:"
      cat "$tmp/replay.out"
      break
    fi
    i=$((i + 1))
  done
  test $i = 10 && echo "ok: $sched: found within 50 schedules, replayed 10 of 10"
done

gdb_require

line=$(grep -n 'int seen = slot' "$top_srcdir/tests/gdb_explore_target.c" |
       cut -d: -f1)
test -n "$line" || exit 99
line=$((line + 1))

session () {
  SHMAP_SCHED=$1 SHMAP_REPLAY=r.1 $to gdb -nx -batch \
    -ex "source $ext" -ex 'shmap schedule' -ex 'break main' -ex run \
    -ex 'shmap schedule step 2' -ex 'shmap schedule' \
    -ex "break gdb_explore_target.c:$line if \$shmap_device() == 2" \
    -ex continue -ex 'print slot' -ex 'shmap devices' \
    "$prog" 2>&1 |
    grep -v -e '^\[' -e '^Using host libthread_db' -e '^Breakpoint [0-9]* at'
}

s1='schedule r.1 (SHMAP_REPLAY=r.1), map 0, step 1: device 3 (i=3) runs next; could run: device 0 (i=0), device 2 (i=2), device 3 (i=3)'
for sched in threads fibers; do
  out=$tmp/gdb-$sched.out
  session $sched > "$out"
  session $sched > "$out.2"
  ok=1
  for re in \
    '^shmap: no exploring schedule is choosing now' \
    "^Thread 1 .* hit Breakpoint 2, body \\(.*gdb_explore_target\\.c:$line\$" \
    '^\$1 = \{0, 1, 12, 3\}$' \
    '^\* device 2 \(i=2\): +thread 1 .*running its body .* body\(\) at gdb_explore_target\.c:[0-9]+ \(frame 0\)$' \
    "^  device 1 \\(i=1\\): +parked +waiting in psum over 'i' \\(call #1\\)"; do
    if ! grep -E "$re" "$out" >/dev/null; then
      echo "FAIL ($sched): no line matches: $re"
      ok=0
    fi
  done
  if test "$(grep -Fxc "$s1" "$out")" != 2; then
    echo "FAIL ($sched): \"shmap schedule step 2\" and \"shmap schedule\" did not both print: $s1"
    ok=0
  fi
  for re in 'Traceback' 'exited normally' 'Python Exception'; do
    if grep -E "$re" "$out" >/dev/null; then
      echo "FAIL ($sched): a line matches: $re"
      ok=0
    fi
  done
  # Two sessions of one schedule show the same (up to times).
  sed -e 's/for [0-9.]* s/for T s/' -e 's/0x[0-9a-f]*/0xADDR/g' "$out" > "$out.n"
  sed -e 's/for [0-9.]* s/for T s/' -e 's/0x[0-9a-f]*/0xADDR/g' "$out.2" > "$out.2.n"
  if ! cmp -s "$out.n" "$out.2.n"; then
    echo "FAIL ($sched): two sessions of SHMAP_REPLAY=r.1 differ:"
    diff "$out.n" "$out.2.n"
    ok=0
  fi
  if test $ok = 1; then
    echo "ok: $sched: gdb steps the replayed schedule and stops device 2 at the stale read"
  else
    status=1
    cat "$out"
  fi
done
exit $status
