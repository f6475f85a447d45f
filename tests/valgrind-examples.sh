#!/bin/sh
# SPDX-License-Identifier: MIT
# valgrind-examples.sh - run every example program (examples/NN_*) under
# valgrind's memcheck and fail if any of them reports a memory error, leaks
# memory ("definitely lost") or fails by itself.
#
# Usage:  tests/valgrind-examples.sh [BUILDDIR]      (BUILDDIR defaults to .)
#   Build first (`make` in BUILDDIR), then for example, from a build
#   directory:  /path/to/libshmap/tests/valgrind-examples.sh .
# It is slow (valgrind runs every thread in turn), so it is not in TESTS;
# CI calls it with the build directory as its argument.
#
# Exit status: 0 when every example is clean, 1 when one is not (its
# valgrind output is printed), 77 (automake's "skipped") when valgrind is
# not installed.
#
# The examples are linked against the libtool library libshmap.la, so each
# is run through `libtool --mode=execute`, which points valgrind at the real
# binary and its uninstalled shared library.
#
# Environment given to the examples:
#   SHMAP_SPIN=0           valgrind serialises threads: a device spinning
#                          while it waits would only burn the time slice
#                          its peer needs, so waiting devices sleep at once.
#   SHMAP_SCHED=threads    one thread per device.  In fiber mode (the
#                          default when devices outnumber the cores) the
#                          library switches between stacks of its own that
#                          valgrind does not know; memcheck then warns
#                          "client switching stacks?" at every switch.
#                          --max-stackframe would silence the warning, but
#                          memcheck would still take each switch for a
#                          huge stack frame and change the addressability
#                          of the memory in between, which can hide real
#                          errors as well as invent some.  Thread stacks are
#                          fully understood by valgrind, and the fiber
#                          switches themselves are checked by the
#                          AddressSanitizer and ThreadSanitizer builds,
#                          which the library annotates.
set -u

builddir=${1:-.}
# The C library's own reports (tests/valgrind.supp says which and why).
supp="$(cd "$(dirname "$0")" && pwd)/valgrind.supp"

if ! command -v valgrind >/dev/null 2>&1; then
  echo "valgrind-examples: valgrind is not installed; skipping" >&2
  exit 77
fi

libtool_sh="$builddir/libtool"
if [ ! -x "$libtool_sh" ]; then
  echo "valgrind-examples: $builddir is not a configured build directory" \
       "(no libtool script)" >&2
  exit 1
fi

examples=
for f in "$builddir"/examples/[0-9][0-9]_*; do
  case ${f##*/} in
    *.*) continue ;;   # objects and sources
  esac
  [ -f "$f" ] && [ -x "$f" ] && examples="$examples $f"
done
if [ -z "$examples" ]; then
  echo "valgrind-examples: no example programs in $builddir/examples" \
       "(run make first)" >&2
  exit 1
fi

SHMAP_SPIN=0
SHMAP_SCHED=threads
export SHMAP_SPIN SHMAP_SCHED

log=$(mktemp "${TMPDIR:-/tmp}/valgrind-examples.XXXXXX") || exit 1
trap 'rm -f "$log"' EXIT INT TERM

failed=0
total=0
for ex in $examples; do
  total=$((total + 1))
  name=${ex##*/}
  "$libtool_sh" --mode=execute valgrind -q --error-exitcode=99 \
    --leak-check=full --errors-for-leak-kinds=definite \
    --suppressions="$supp" \
    --num-callers=30 "$ex" >"$log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ] && ! grep -q '^==[0-9]*==' "$log"; then
    echo "PASS: $name"
    continue
  fi
  failed=$((failed + 1))
  if [ "$rc" -eq 99 ]; then
    echo "FAIL: $name: valgrind reported errors"
  elif [ "$rc" -eq 0 ]; then
    echo "FAIL: $name: valgrind printed warnings"
  else
    echo "FAIL: $name: exit status $rc"
  fi
  sed 's/^/    /' "$log"
done

echo "valgrind-examples: $((total - failed)) of $total examples clean"
[ "$failed" -eq 0 ]
