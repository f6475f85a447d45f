#!/bin/sh
# SPDX-License-Identifier: MIT
# test_pictures.sh - the pictures the library draws, checked in a real
# headless browser (tests/check-pictures.py says how).  Skipped, with a
# message saying what is missing, where no Chromium or no python3 is
# installed; .ci/run installs Debian's chromium so that it runs there.
# SHMAP_BROWSER names the browser to use.
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
browser=${SHMAP_BROWSER:-}
if test -z "$browser"; then
  for b in chromium chromium-browser google-chrome; do
    if command -v "$b" >/dev/null 2>&1; then
      browser=$(command -v "$b")
      break
    fi
  done
fi
if test -z "$browser"; then
  echo "test_pictures: SKIP: no chromium installed (apt-get install chromium);" \
       "the SVG pictures and timelines are not checked in a browser"
  exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "test_pictures: SKIP: python3 not found"
  exit 77
fi
# Each picture is drawn twice (threads and fibers) from a run of its own.
status=0
for sched in threads fibers; do
  echo "test_pictures: SHMAP_SCHED=$sched, browser $browser"
  SHMAP_SCHED=$sched python3 "$top_srcdir/tests/check-pictures.py" \
    "$browser" "$top_builddir" "$top_srcdir"
  rc=$?
  test $rc -eq 99 && exit 99
  test $rc -ne 0 && status=1
done
exit $status
