# SPDX-License-Identifier: MIT
# gdbutil.sh - sourced by the gdb tests (test_gdb*.sh), with gdb_test set
# to the test's name:
#   skip MESSAGE  prints "NAME: SKIP: MESSAGE" and exits 77 (automake's skip)
#   $to           "timeout 120" when timeout(1) exists, so no session hangs
#   gdb_require   skips unless gdb is installed, has its Python support and
#                 may run a program under ptrace here (a container without
#                 CAP_SYS_PTRACE, or a kernel.yama.ptrace_scope that forbids
#                 it, cannot)
# Sourcing it also clears DEBUGINFOD_URLS, so no session downloads
# debugging information.

skip () {
  echo "$gdb_test: SKIP: $*"
  exit 77
}

DEBUGINFOD_URLS=
export DEBUGINFOD_URLS

to=
if command -v timeout >/dev/null 2>&1; then
  to="timeout 120"
fi

gdb_require () {
  command -v gdb >/dev/null 2>&1 || skip "gdb is not installed"
  # "python-" + "ok" so that an error message quoting the command does not
  # match.
  gdb_out=$($to gdb -nx -batch -ex 'python print("python-" + "ok")' 2>&1)
  if ! printf '%s\n' "$gdb_out" | grep -x 'python-ok' >/dev/null; then
    printf '%s\n' "$gdb_out"
    skip "gdb has no Python support"
  fi
  gdb_out=$($to gdb -nx -batch -ex run --args /bin/sh -c 'exit 0' 2>&1)
  if ! printf '%s\n' "$gdb_out" | grep 'exited normally' >/dev/null; then
    printf '%s\n' "$gdb_out"
    skip "gdb cannot run a program here (ptrace not permitted?)"
  fi
}
