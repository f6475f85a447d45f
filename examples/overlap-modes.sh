#!/bin/sh
# SPDX-License-Identifier: MIT
# overlap-modes.sh - run the collective matmul, ring attention and ladder
# examples once with every device a thread (SHMAP_SCHED=threads) and once
# with devices as fibers on a few worker threads (SHMAP_SCHED=fibers).
# Each example checks its own results and exits non-zero on a mismatch.
# SHMAP_ASYNC_CHECK=1 makes the library check that the examples keep the
# rules of the asynchronous collectives (no write to a block being sent,
# no use of a result before its wait).
top_builddir=${top_builddir:-.}
status=0
for ex in 15_collective_matmul 16_ring_attention 17_mlp_ladder; do
  for sched in threads fibers; do
    if out=$(SHMAP_SCHED=$sched SHMAP_ASYNC_CHECK=1 timeout -k 10 120 \
               "$top_builddir/examples/$ex" 2>&1); then
      echo "PASS: $ex (SHMAP_SCHED=$sched)"
    else
      echo "FAIL: $ex (SHMAP_SCHED=$sched):"
      printf '%s\n' "$out" | sed 's/^/    /'
      status=1
    fi
  done
done
exit $status
