#!/bin/sh
# SPDX-License-Identifier: MIT
# test_explore_example.sh - examples/23_explore finds the order-dependent
# bug at the same schedule, replays it and passes the fix, printing exactly
# the expected text in both scheduling modes (its seeds are fixed and the
# explored maps run one device at a time in either mode).
top_builddir=${top_builddir:-.}
want='buggy kernel: SHMAP_EBODY
  schedule 1 of 200 failed: device 2 (i=2) failed: read the board before device 0 posted its step
  replay it with SHMAP_REPLAY=r.1 (or opts.replay = "r.1")
  critical step 2 of map 0: device 0 went first
replay of r.1: 10 of 10 runs failed the same way (5 choices, the same each time)
fixed kernel: passed
  200 schedules, each with the serial result'
for mode in threads fibers; do
  out=$(SHMAP_SCHED=$mode timeout 120 "$top_builddir/examples/23_explore" 2>&1)
  rc=$?
  if test $rc -ne 0 || test "$out" != "$want"; then
    echo "23_explore ($mode): exit status $rc, output:" >&2
    echo "$out" >&2
    echo "--- expected:" >&2
    echo "$want" >&2
    exit 1
  fi
done
echo "$out"
