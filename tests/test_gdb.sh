#!/bin/sh
# test_gdb.sh - debugs tests/gdb_target in gdb's batch mode with the gdb
# extension (gdb/shmap-gdb.py) loaded, stopped at a breakpoint inside the
# body on device 3 only, and checks what gdb shows:
#   - the breakpoint stops in thread "d3(1,1)", and $shmap_device() is 3;
#   - "shmap meshes" shows the mesh i=2, j=2 running a map;
#   - "shmap devices" lists the 4 devices with their coordinates and gdb
#     threads, device 3 (the selected one) running its body;
#   - "info threads" shows the threads d0(0,0) .. d3(1,1);
#   - "print *x" shows device 3's input block, f32[2,8] {40, 41, ...}, and
#     the array and context printers work.
# Skipped (exit 77) when gdb, its Python support, or ptrace is not available
# (a container without CAP_SYS_PTRACE, a kernel.yama.ptrace_scope that
# forbids it).  The automake harness exports top_srcdir and top_builddir
# and runs the test from the top of the build tree.
# Exit status: 0 pass, 1 fail, 77 skip, 99 hard error.

top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
prog=$top_builddir/tests/gdb_target
ext=$top_srcdir/gdb/shmap-gdb.py
src=$top_srcdir/tests/gdb_target.c

skip () {
  echo "test_gdb: SKIP: $*"
  exit 77
}

if ! command -v gdb >/dev/null 2>&1; then
  skip "gdb is not installed"
fi
if test ! -f "$prog" || test ! -f "$ext" || test ! -f "$src"; then
  echo "test_gdb: $prog, $ext or $src not found" >&2
  exit 99
fi

# No user gdbinit (-nx), no debuginfod downloads, and none of the library's
# own debugging switches from the caller's environment.  The scheduling
# stays automatic: under a debugger it gives each device a thread, which
# is what this test looks at.
DEBUGINFOD_URLS=
export DEBUGINFOD_URLS
unset SHMAP_WATCHDOG SHMAP_TRACE SHMAP_SCHED

to=
if command -v timeout >/dev/null 2>&1; then
  to="timeout 120"
fi
# The program is linked with -no-install (no wrapper script); going through
# libtool anyway keeps working if that changes.
if test -x "$top_builddir/libtool"; then
  run_gdb="$to $top_builddir/libtool --mode=execute gdb"
else
  run_gdb="$to gdb"
fi

tmp=${TMPDIR:-/tmp}/test_gdb.$$
mkdir "$tmp" || exit 99
trap 'rm -rf "$tmp"' 0
trap 'exit 99' 1 2 15

# ---- can gdb run a program here at all? -----------------------------------

$to gdb -nx -batch -ex 'python print("python-" + "ok")' > "$tmp/py.out" 2>&1
if ! grep '^python-ok$' "$tmp/py.out" >/dev/null; then
  cat "$tmp/py.out"
  skip "gdb has no Python support"
fi
$to gdb -nx -batch -ex run --args /bin/sh -c 'exit 0' > "$tmp/ptrace.out" 2>&1
if ! grep 'exited normally' "$tmp/ptrace.out" >/dev/null; then
  cat "$tmp/ptrace.out"
  skip "gdb cannot run a program here (ptrace not permitted?)"
fi

# ---- the session ------------------------------------------------------------

line=$(grep -n 'gdb-test: break here' "$src" | cut -d: -f1)
if test -z "$line"; then
  echo "test_gdb: no 'gdb-test: break here' line in $src" >&2
  exit 99
fi

# (printf, not echo: some shells' echo turns \n into a newline.)
{
  printf '%s\n' 'set pagination off' 'set confirm off' 'set width 0'
  printf '%s\n' "source $ext"
  # One device only, with a condition that calls nothing in the program.
  printf '%s\n' "break gdb_target.c:$line if \$shmap_device() == 3"
  printf '%s\n' 'run'
  printf '%s\n' 'echo @@device\n' 'print $shmap_device()'
  printf '%s\n' 'echo @@meshes\n' 'shmap meshes'
  printf '%s\n' 'echo @@devices\n' 'shmap devices'
  printf '%s\n' 'echo @@threads\n' 'info threads'
  printf '%s\n' 'echo @@print\n' 'print *x' 'print *t->host' \
    'print *t->sharded' 'print *ctx' 'print t->blocks'
  printf '%s\n' 'echo @@end\n' 'kill'
} > "$tmp/cmds"

$run_gdb -nx -batch -x "$tmp/cmds" "$prog" > "$tmp/out" 2>&1
rc=$?
echo "---- gdb output (exit status $rc) ----"
cat "$tmp/out"
echo "---- checks ----"

status=0
# The part of the output between two markers.
part () {
  sed -n "/^@@$1\$/,/^@@/p" "$tmp/out"
}
check () {
  what=$1
  shift
  if "$@" >/dev/null; then
    echo "ok: $what"
  else
    echo "FAIL: $what"
    status=1
  fi
}
has () { # has SECTION REGEX
  part "$1" | grep -E "$2"
}

check "the breakpoint stops device 3 in thread d3(1,1)" \
  grep -E 'Thread [0-9]+ "d3\(1,1\)" hit Breakpoint 1, body' "$tmp/out"
check '$shmap_device() is 3 there' has device '^\$[0-9]+ = 3$'
check "shmap meshes shows the mesh running a map" \
  has meshes '^mesh #[0-9]+ i=2, j=2 \(4 devices\): a map is running'
# What a device of the target can be doing, in the watchdog's words.
states="(running its body|waiting in psum over 'j' \(call #1\)"
states="$states|returned from its body|building its input blocks"
states="$states|not started yet)"
for d in "0 0 0" "1 0 1" "2 1 0" "3 1 1"; do
  set -- $d
  check "shmap devices lists device $1 at ($2,$3) with its thread" \
    has devices "^[* ] device $1 \(i=$2, j=$3\): +thread [0-9]+ +\"d$1\($2,$3\)\" +$states"
  check "info threads shows d$1($2,$3)" has threads "\"d$1\($2,$3\)\""
done
check "device 3 is selected and running its body" \
  has devices "^\* device 3 \(i=1, j=1\): .*running its body for [0-9.]+ s +body\(\) at gdb_target\.c:$line \(frame 0\)\$"
check "print *x shows device 3's block" \
  has print '^\$[0-9]+ = f32\[2,8\] \{40, 41, 42, 43, 44, 45, 46, 47, \.\.\.\}$'
check "a host array prints its leading values" \
  has print '^\$[0-9]+ = f32\[4,16\] on the host \{0, 1, 2, 3, 4, 5, 6, 7, \.\.\.\}$'
check "a sharded array prints its mesh and spec" \
  has print "^\\\$[0-9]+ = f32\[4,16\] sharded on mesh i=2, j=2 by P\('i', 'j'\), blocks f32\[2,8\]\$"
check "blocks of other dtypes print their values as the library does" \
  has print '^\$[0-9]+ = \{bf16\[3\] \{1\.5, -2, 0\.100097656\}, f16\[2\] \{0\.25, 65504\}, bool\[3\] \{false, true, true \(byte 9\)\}, c64\[2\] \{1-2j, 0\.5\+3j\}, i8\[2\] \{-128, 127\}\}$'
check "a context prints its device" \
  has print '^\$[0-9]+ = device 3 \(i=1, j=1\) of mesh i=2, j=2'
check "the extension raised no Python error" \
  sh -c "! grep -E 'Python Exception|Traceback|Error occurred in Python' '$tmp/out'"
check "gdb reached the end of the session" grep '^@@end$' "$tmp/out"

if test $status -ne 0; then
  echo "test_gdb: FAIL (gdb output above)"
fi
exit $status
