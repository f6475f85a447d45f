#!/bin/sh
# SPDX-License-Identifier: MIT
# test_explore_example.sh - examples/23_explore finds the order-dependent
# bug at the same schedule, replays it and passes the fix, printing exactly
# the expected text in both scheduling modes (its seeds are fixed and the
# explored maps run one device at a time in either mode); "23_explore once"
# under SHMAP_EXPLORE=200 finds the bug without a change to the program,
# and SHMAP_REPLAY=r.1 replays it.
top_builddir=${top_builddir:-.}
want='buggy kernel: SHMAP_EBODY
  schedule 1 of 200 failed: device 2 (i=2) failed: read the board before device 0 posted its step
  replay it with SHMAP_REPLAY=r.1 (or opts.replay = "r.1")
  critical step 2 of map 0: device 0 went first
replay of r.1: 10 of 10 runs failed the same way (5 choices, the same each time)
fixed kernel: passed
  200 schedules, each with the serial result'
fail='one run of the buggy kernel: device 2 (i=2) failed: read the board before device 0 posted its step'
want_env="shmap: exploring: schedule 1 of 200 failed: device 2 (i=2) failed: read the board before device 0 posted its step
shmap: SHMAP_REPLAY=r.1 replays it
shmap: critical step 4 of map 0: device 1 (i=1) went first
$fail (exploring schedule r.1)"
want_replay=$fail
prog=$top_builddir/examples/23_explore
# check NAME WANT-STATUS WANT-TEXT ENV... : the program's output and status.
check () {
  name=$1 wstatus=$2 wtext=$3
  shift 3
  out=$(env "$@" timeout 120 "$prog" $args 2>&1)
  rc=$?
  if test $rc -ne "$wstatus" || test "$out" != "$wtext"; then
    echo "23_explore $args ($name, $*): exit status $rc, output:" >&2
    echo "$out" >&2
    echo "--- expected (exit status $wstatus):" >&2
    echo "$wtext" >&2
    exit 1
  fi
}
for mode in threads fibers; do
  unset SHMAP_EXPLORE SHMAP_REPLAY SHMAP_EXPLORE_SEED
  args=
  check "the walk" 0 "$want" SHMAP_SCHED=$mode
  echo "$out"
  args=once
  check "explored" 1 "$want_env" SHMAP_SCHED=$mode SHMAP_EXPLORE=200
  echo "$out"
  check "replayed" 1 "$want_replay" SHMAP_SCHED=$mode SHMAP_REPLAY=r.1
  echo "$out"
done
