#!/bin/sh
# SPDX-License-Identifier: MIT
# test_tutorial.sh - every code excerpt of shmap-tutorial(7) matches the
# example it is cut from, each such example is one make check runs, and
# doc/tutorial.html holds the excerpts and the pictures
# (tests/check-tutorial.py).  The tutorial's transcripts are checked with
# the other man pages' (test_transcripts.sh).
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
if ! command -v python3 >/dev/null 2>&1; then
  echo "test_tutorial: SKIP: python3 not found"
  exit 77
fi
html=$top_builddir/doc/tutorial.html
if test ! -f "$html"; then
  echo "test_tutorial: $html is missing (make check makes it)" >&2
  exit 99
fi
exec python3 "$top_srcdir/tests/check-tutorial.py" "$top_srcdir" "$html"
