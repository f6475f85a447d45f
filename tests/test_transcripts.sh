#!/bin/sh
# SPDX-License-Identifier: MIT
# test_transcripts.sh - the transcripts of README.md and the manual pages
# (blocks marked "transcript", see tests/transcripts.py) against fresh runs:
# the gdb sessions, the watchdog report, the trace and the error messages.
# A block that no longer matches what the programs print fails the test;
# "tests/transcripts.py --update README.md man/*.[37]" (from the top of the
# build tree) rewrites the blocks from fresh runs.
#
# The transcripts were made in a plain (no sanitizer) in-tree GCC build on
# x86-64 Linux, with gdb and libc's debug information: frame numbers and
# source paths depend on all of that, so the test is skipped (exit 77)
# elsewhere: without python3 or gdb, when gdb cannot run programs (ptrace),
# without libc's debug information, in a build tree apart from the source
# tree, in a sanitizer build, or with a compiler other than GCC.
# Exit status: 0 pass, 1 fail, 77 skip, 99 hard error.

top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}

skip () {
  echo "test_transcripts: SKIP: $*"
  exit 77
}

command -v python3 >/dev/null 2>&1 || skip "python3 is not installed"
command -v gdb >/dev/null 2>&1 || skip "gdb is not installed"
test "$(uname -m)" = x86_64 || skip "not an x86-64 machine"
src=$(cd "$top_srcdir" && pwd -P) || exit 99
build=$(cd "$top_builddir" && pwd -P) || exit 99
test "$src" = "$build" || skip "the build tree is not the source tree"
mk=$top_builddir/Makefile
test -f "$mk" || skip "no Makefile in $top_builddir"
if grep -E '^(SAN_CFLAGS|CFLAGS) = .*-fsanitize' "$mk" >/dev/null; then
  skip "a sanitizer build"
fi
cc=$(sed -n 's/^CC = //p' "$mk")
case $($cc --version 2>/dev/null | head -n 1) in
  *clang*) skip "the compiler is clang, not GCC" ;;
esac
$cc --version 2>/dev/null | grep 'Free Software Foundation' >/dev/null ||
  skip "the compiler is not GCC"
out=$(DEBUGINFOD_URLS= gdb -nx -batch -ex run --args /bin/sh -c 'exit 0' 2>&1)
case $out in
  *"exited normally"*) ;;
  *) skip "gdb cannot run a program here (ptrace not permitted?)" ;;
esac
# The gdb sessions show libc's frames with their source lines, which gdb
# knows only with libc's debug information (Debian: libc6-dbg).
libc=$(ldd /bin/sh 2>/dev/null | awk '/libc\.so/ { print $3 }')
out=$(DEBUGINFOD_URLS= gdb -nx -batch -ex 'info line syscall' "$libc" 2>&1)
case $out in
  *"syscall.S"*) ;;
  *) skip "no debug information for libc (${libc:-not found})" ;;
esac
for prog in tests/gdb_target examples/02_shapes; do
  test -x "$top_builddir/$prog" || {
    echo "test_transcripts: $top_builddir/$prog is not built" >&2
    exit 99
  }
done

cd "$top_srcdir" || exit 99
exec python3 tests/transcripts.py README.md man/*.3 man/*.7
