#!/bin/sh
# SPDX-License-Identifier: MIT
# test_rehearse_example.sh - examples/22_rehearse prints a rehearsal on
# every preset and a correct result, in both scheduling modes.
top_builddir=${top_builddir:-.}
for mode in threads fibers; do
  out=$(SHMAP_SCHED=$mode "$top_builddir/examples/22_rehearse") || {
    echo "22_rehearse failed in $mode mode: $out" >&2
    exit 1
  }
  for want in "tpu-v5e-16x16  predicted" "h100-8         predicted" \
      "h100-multinode predicted" "result matches the serial matmul"; do
    case $out in
      *"$want"*) ;;
      *) echo "22_rehearse ($mode): no \"$want\" in:" >&2
         echo "$out" >&2
         exit 1 ;;
    esac
  done
done
echo "$out"
