#!/bin/sh
# SPDX-License-Identifier: MIT
# explore-transport.sh - the shared-memory transport's own tests under
# exploring schedules: with SHMAP_EXPLORE_SEED set every map runs one
# device at a time, in the order a seeded random walk chooses at every
# wait of the transport (arrivals, departures, publications), whatever
# mode the test asks for.  A bounded set of the collective, asynchronous,
# small-reduction and ppermute tests, each under three seeds (1 2 3, or
# the list in SHMAPTEST_EXPLORE_SEEDS), each run time-bounded.  A failure
# prints the seed: the same SHMAP_EXPLORE_SEED runs the same schedules
# again.
top_builddir=${top_builddir:-.}
unset SHMAP_WATCHDOG SHMAP_TRACE SHMAP_REPLAY SHMAP_EXPLORE
# 120 s a run, times CK_TIMEOUT_MULTIPLIER as the sanitizer runs set for
# Check's own timeouts: under ThreadSanitizer test_small_reduce's run
# (1024 device threads, then one device at a time) takes 110-130 s alone.
to=
mult=${CK_TIMEOUT_MULTIPLIER:-1}
case $mult in '' | *[!0-9]*) mult=1 ;; esac
command -v timeout >/dev/null 2>&1 && to="timeout $((120 * mult))"
tests="test_coll test_coll_edge test_coll_jax test_async test_small_reduce
test_ppermute_inplace test_ppermute_handover test_coll_groups
test_coll_errors"
seeds=${SHMAPTEST_EXPLORE_SEEDS:-"1 2 3"}
fail=0
for t in $tests; do
  prog=$top_builddir/tests/$t
  if test ! -x "$prog"; then
    echo "explore-transport: $prog not built" >&2
    exit 99
  fi
  for s in $seeds; do
    if SHMAP_EXPLORE_SEED=$s $to "$prog" >explore-transport.out 2>&1; then
      echo "PASS: $t SHMAP_EXPLORE_SEED=$s"
    else
      echo "FAIL: $t SHMAP_EXPLORE_SEED=$s" >&2
      tail -20 explore-transport.out >&2
      fail=1
    fi
  done
done
rm -f explore-transport.out
exit $fail
