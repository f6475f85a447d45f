#!/bin/sh
# SPDX-License-Identifier: MIT
# test_rehearse_calibrate.sh - bench/calibrate measures this machine (quick
# mode, about a second) and writes a fabric file; the file loads and prices
# collectives to its alpha and beta (tests/test_rehearse_calibrate), in
# both scheduling modes (the tool takes threads mode unless told).
top_builddir=${top_builddir:-.}
file=${TMPDIR:-/tmp}/shmap-calibrate-$$.json
trap 'rm -f "$file"' EXIT
for run in threads:2 threads:8 fibers:2 fibers:8; do
  mode=${run%:*} n=${run#*:}
  SHMAP_SCHED=$mode "$top_builddir/bench/calibrate" -q -n $n -o "$file" \
      2>/dev/null || {
    echo "bench/calibrate -n $n ($mode) failed" >&2
    exit 1
  }
  grep -q "\"name\": \"this-machine-$n\"" "$file" || {
    echo "bench/calibrate -n $n: unexpected file:" >&2
    cat "$file" >&2
    exit 1
  }
  "$top_builddir/tests/test_rehearse_calibrate" "$file" || exit 1
done
if "$top_builddir/bench/calibrate" -n 9 2>"$file"; then
  echo "bench/calibrate -n 9 did not fail" >&2
  exit 1
fi
grep -q 'calibrate: -n 9: the mesh takes 2 to 8 devices' "$file" || {
  echo "bench/calibrate -n 9: wrong message:" >&2
  cat "$file" >&2
  exit 1
}
echo "calibration round trip: ok"
