#!/bin/sh
# SPDX-License-Identifier: MIT
# test_gdb.sh - debugs tests/gdb_target in gdb's batch mode with the gdb
# extension (gdb/shmap-gdb.py) loaded, in four sessions: started under gdb
# and attached to a running process (gdb -p), each with a thread per device
# (SHMAP_SCHED=threads) and with devices as fibers on worker threads
# (SHMAP_SCHED=fibers), and a fifth session attached to the hung program on
# eight devices in fiber mode (GDB_TARGET_MESH="i=4, j=2", two workers; see
# eight_checks).  In each it checks what gdb shows:
#   - started: "break ... if $shmap_device() == 3" stops device 3 only (in
#     its thread "d3(1,1)", or in a worker thread running its fiber), and
#     $shmap_device() is 3 there; attached: the hung map (device 3 sleeping
#     in its body, device 2 waiting for it in psum) is found as it is;
#   - "shmap meshes" shows the mesh running a map, and "shmap devices" lists
#     the 4 devices with their coordinates, their thread (or "parked" for a
#     fiber no thread runs) and their state, and where each waiting body is
#     ("body() at gdb_target.c:LINE (frame N)");
#   - "shmap device 2" selects device 2, waiting in its psum (in fiber mode
#     a parked fiber, shown from its saved registers), "bt" ends cleanly (no
#     "?? ()" frame), "frame N" with the number "shmap devices" gave lands
#     in body(), and "print *y" and "info locals" show device 2's block and
#     locals; $shmap_device() is then 2;
#   - "shmap device 3" selects device 3 again, and "next" over its psum (in
#     the started sessions) stops at the next line with the sums in y;
#   - the printers show blocks, arrays and contexts;
#   - the program then ends normally ("gdb_target: ok", exit status 0):
#     continued (started) or detached (attached) after a parked fiber was
#     shown, so the registers the extension borrowed were given back.
# Skipped (exit 77) when gdb, its Python support, or ptrace is not available
# (a container without CAP_SYS_PTRACE, a kernel.yama.ptrace_scope that
# forbids it); the attached sessions alone are skipped when attaching is
# not permitted.  The automake harness exports top_srcdir and top_builddir
# and runs the test from the top of the build tree.
# Exit status: 0 pass, 1 fail, 77 skip, 99 hard error.

top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
prog=$top_builddir/tests/gdb_target
ext=$top_srcdir/gdb/shmap-gdb.py
src=$top_srcdir/tests/gdb_target.c

gdb_test=test_gdb
. "$top_srcdir/tests/gdbutil.sh"
gdb_require
if test ! -f "$prog" || test ! -f "$ext" || test ! -f "$src"; then
  echo "test_gdb: $prog, $ext or $src not found" >&2
  exit 99
fi

# No user gdbinit (-nx), no debuginfod downloads, and none of the library's
# own debugging switches from the caller's environment (each session sets
# the scheduling it tests).
unset SHMAP_WATCHDOG SHMAP_TRACE SHMAP_SCHED SHMAP_WORKERS

# The program is linked with -no-install (no wrapper script); going through
# libtool anyway keeps working if that changes.
if test -x "$top_builddir/libtool"; then
  run_gdb="$to $top_builddir/libtool --mode=execute gdb"
else
  run_gdb="$to gdb"
fi

tmp=${TMPDIR:-/tmp}/test_gdb.$$
mkdir "$tmp" || exit 99
bgpid=
cleanup () {
  if test -n "$bgpid"; then
    kill "$bgpid" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup 0
trap 'exit 99' 1 2 15

line=$(grep -n 'gdb-test: break here' "$src" | cut -d: -f1)
if test -z "$line"; then
  echo "test_gdb: no 'gdb-test: break here' line in $src" >&2
  exit 99
fi

status=0
out=
# The part of the output between two markers.
part () {
  sed -n "/^@@$1\$/,/^@@/p" "$out"
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
hasnt () { # hasnt SECTION REGEX
  ! part "$1" | grep -E "$2"
}

# What a device of the target can be doing, in the watchdog's words.
states="(running its body|waiting in psum over 'j' \(call #1\)"
states="$states|returned from its body|building its input blocks"
states="$states|not started yet)"

# The gdb commands of a session (printf, not echo: some shells' echo turns
# \n into a newline).  $1: started or attached.
commands () {
  printf '%s\n' 'set pagination off' 'set confirm off' 'set width 0'
  printf '%s\n' "source $ext"
  if test "$1" = started; then
    # One device only, with a condition that calls nothing in the program.
    printf '%s\n' "break gdb_target.c:$line if \$shmap_device() == 3"
    printf '%s\n' 'run'
  fi
  printf '%s\n' 'echo @@device\n' 'print $shmap_device()'
  printf '%s\n' 'echo @@meshes\n' 'shmap meshes'
  printf '%s\n' 'echo @@devices\n' 'shmap devices'
  printf '%s\n' 'echo @@threads\n' 'info threads'
  printf '%s\n' 'echo @@select2\n' 'shmap device 2'
  printf '%s\n' 'echo @@bt2\n' 'bt'
  printf '%s\n' 'echo @@device2\n' 'print $shmap_device()'
  printf '%s\n' 'echo @@devices2\n' 'shmap devices'
  # The body's frame number comes from "shmap devices" (python reads it
  # back from the listing it just printed).
  printf '%s\n' 'echo @@frame2\n' \
    'python import re; n = re.search(r"device 2 \(.*\(frame (\d+)\)", gdb.execute("shmap devices", to_string=True)); gdb.execute("frame " + (n.group(1) if n else "0"))' \
    'print *y' 'info locals'
  printf '%s\n' 'echo @@select3\n' 'shmap thread 3'
  printf '%s\n' 'echo @@device3\n' 'print $shmap_device()'
  if test "$1" = started; then
    printf '%s\n' 'echo @@print\n' 'print *x' 'print *t->host' \
      'print *t->sharded' 'print *ctx' 'print dtype_blocks'
    printf '%s\n' 'echo @@next\n' 'next' 'print *y'
    printf '%s\n' 'echo @@shown2again\n' 'shmap device 2' 'shmap thread 3'
    printf '%s\n' 'echo @@cont\n' 'continue'
  else
    printf '%s\n' 'echo @@bt3\n' 'bt'
    printf '%s\n' 'echo @@shown2again\n' 'shmap device 2'
    printf '%s\n' 'echo @@detach\n' 'print delay_seconds = 0' 'detach'
  fi
  printf '%s\n' 'echo @@end\n'
}

# session HOW SCHED [MESH]: run one session and check its output; with
# MESH (attached only) the program runs on that mesh and eight_checks
# checks the output.
session () {
  how=$1
  sched=$2
  mesh=${3:-}
  name="$how, $sched${mesh:+, mesh $mesh}"
  out=$tmp/$how-$sched${mesh:+-8}.out
  commands "$how" > "$tmp/cmds"
  echo "==== session: $name ===="
  if test "$how" = started; then
    # LeakSanitizer cannot run under ptrace (a sanitizer build's program
    # would fail at exit); the attached sessions end detached.
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    SHMAP_SCHED=$sched $run_gdb -nx -batch -x "$tmp/cmds" "$prog" \
      > "$out" 2>&1
    rc=$?
  else
    # The README's hang workflow: a map that takes long (device 3 sleeps
    # up to 100 s), the watchdog reporting it, gdb attached once it did.
    # (env execs the program: $! is its process.)
    GDB_TARGET_MESH=${mesh:-i=2, j=2} SHMAP_SCHED=$sched SHMAP_WATCHDOG=1 \
      env ${mesh:+SHMAP_WORKERS=2} \
      "$prog" 100 > "$tmp/prog.out" 2> "$tmp/prog.err" &
    bgpid=$!
    i=0
    while ! grep 'has run for' "$tmp/prog.err" >/dev/null 2>&1; do
      i=$((i + 1))
      if test $i -gt 600 || ! kill -0 "$bgpid" 2>/dev/null; then
        echo "FAIL: $name: no watchdog report from the program"
        cat "$tmp/prog.err"
        status=1
        return
      fi
      sleep 0.1
    done
    $to gdb -nx -batch -x "$tmp/cmds" -p "$bgpid" > "$out" 2>&1
    rc=$?
    if grep -E 'ptrace: Operation not permitted|Could not attach' "$out" \
        >/dev/null; then
      cat "$out"
      echo "SKIP: $name: attaching is not permitted here"
      kill "$bgpid"
      wait "$bgpid"
      bgpid=
      return
    fi
    wait "$bgpid"
    prc=$?
    bgpid=
  fi
  echo "---- gdb output (exit status $rc) ----"
  cat "$out"
  echo "---- checks ($name) ----"
  if test -n "$mesh"; then
    eight_checks
    return
  fi

  if test "$how" = started; then
    if test "$sched" = threads; then
      check "$name: the breakpoint stops device 3 in thread d3(1,1)" \
        grep -E 'Thread [0-9]+ "d3\(1,1\)" hit Breakpoint 1, body' "$out"
    else
      check "$name: the breakpoint stops device 3's fiber in a worker" \
        grep -E 'Thread [0-9]+ "(shmap-w[0-9]+|gdb_target)" hit Breakpoint 1, body' "$out"
    fi
    check "$name: the breakpoint stops once (device 3 only)" \
      test "$(grep -c 'hit Breakpoint 1' "$out")" -eq 1
    check "$name: \$shmap_device() is 3 there" has device '^\$[0-9]+ = 3$'
    check "$name: device 3 is selected and running its body" \
      has devices "^\* device 3 \(i=1, j=1\): .*running its body for [0-9.]+ s +body\(\) at gdb_target\.c:$line \(frame 0\)\$"
  else
    check "$name: \$shmap_device() is -1 in the main thread" \
      has device '^\$[0-9]+ = -1$'
    check "$name: device 3 is in its body, in sleep_delay()" \
      has devices "^  device 3 \(i=1, j=1\): .*running its body for [0-9.]+ s +sleep_delay\(\) at gdb_target\.c:[0-9]+ \(frame [0-9]+\)\$"
  fi
  check "$name: shmap meshes shows the mesh running a map" \
    has meshes '^mesh #[0-9]+ i=2, j=2 \(4 devices\): a map is running'
  for d in "0 0 0" "1 0 1" "2 1 0" "3 1 1"; do
    set -- $d
    if test "$sched" = threads; then
      t="thread [0-9]+ +\"d$1\\($2,$3\\)\""
    else
      t='(thread [0-9]+ +"(shmap-w[0-9]+|gdb_target)"|parked +"shmap-w[0-9]+")'
    fi
    check "$name: shmap devices lists device $1 at ($2,$3) with its thread" \
      has devices "^[* ] device $1 \(i=$2, j=$3\): +$t +$states"
    if test "$sched" = threads; then
      check "$name: info threads shows d$1($2,$3)" \
        has threads "\"d$1\($2,$3\)\""
    fi
  done
  if test "$sched" = fibers; then
    check "$name: device 2 is a parked fiber" \
      has devices '^  device 2 \(i=1, j=0\): +parked '
    check "$name: shmap device 2 shows the parked fiber's saved registers" \
      has select2 '^\[Device 2 \(i=1, j=0\) is a parked fiber: thread [0-9]+ "[^"]*" shows its saved registers until the program resumes\]$'
  else
    check "$name: shmap device 2 switches to thread d2(1,0)" \
      has select2 '^\[Switching to thread [0-9]+ '
  fi
  check "$name: device 2 waits in psum, called from body()" \
    has devices "^  device 2 \(i=1, j=0\): .*waiting in psum over 'j' \(call #1\) for [0-9.]+ s +body\(\) at gdb_target\.c:$line \(frame [0-9]+\)\$"
  check "$name: device 2's backtrace reaches body()" \
    has bt2 "^#[0-9]+ +0x[0-9a-f]+ in body \(ctx=0x[0-9a-f]+, arg=0x[0-9a-f]+\) at .*gdb_target\.c:$line\$"
  check "$name: device 2's backtrace ends cleanly (no ?? frame)" \
    hasnt bt2 '\?\? \(\)|Backtrace stopped'
  if test "$sched" = fibers; then
    check "$name: device 2's backtrace ends at the fiber's entry" \
      sh -c "sed -n '/^@@bt2\$/,/^@@/p' '$out' | grep '^#' | tail -n 1 | grep 'fiber_start'"
  fi
  check "$name: \$shmap_device() is 2 with device 2 selected" \
    has device2 '^\$[0-9]+ = 2$'
  check "$name: device 2 is then the selected one" \
    has devices2 '^\* device 2 \(i=1, j=0\)'
  check "$name: the frame shmap devices names is body()" \
    has frame2 "^#[0-9]+ +0x[0-9a-f]+ in body \(.*gdb_target\.c:$line\$"
  check "$name: print *y shows device 2's block" \
    has frame2 '^\$[0-9]+ = f32\[2,8\] \{32, 33, 34, 35, 36, 37, 38, 39, \.\.\.\}$'
  check "$name: info locals shows dev = 2" has frame2 '^dev = 2$'
  check "$name: shmap thread 3 selects device 3" \
    has device3 '^\$[0-9]+ = 3$'
  if test "$how" = started; then
    check "$name: print *x shows device 3's block" \
      has print '^\$[0-9]+ = f32\[2,8\] \{40, 41, 42, 43, 44, 45, 46, 47, \.\.\.\}$'
    check "$name: a host array prints its leading values" \
      has print '^\$[0-9]+ = f32\[4,16\] on the host \{0, 1, 2, 3, 4, 5, 6, 7, \.\.\.\}$'
    check "$name: a sharded array prints its mesh and spec" \
      has print "^\\\$[0-9]+ = f32\[4,16\] sharded on mesh i=2, j=2 by P\('i', 'j'\), blocks f32\[2,8\]\$"
    check "$name: blocks of other dtypes print as the library prints them" \
      has print '^\$[0-9]+ = \{bf16\[3\] \{1\.5, -2, 0\.100097656\}, f16\[2\] \{0\.25, 65504\}, bool\[3\] \{false, true, true \(byte 9\)\}, c64\[2\] \{1-2j, 0\.5\+3j\}, i8\[2\] \{-128, 127\}\}$'
    check "$name: a context prints its device" \
      has print '^\$[0-9]+ = device 3 \(i=1, j=1\) of mesh i=2, j=2'
    check "$name: next steps device 3 over its psum" \
      has next "^$((line + 1))[[:space:]]"
    check "$name: after the psum device 3's block holds the sums" \
      has next '^\$[0-9]+ = f32\[2,8\] \{72, 74, 76, 78, 80, 82, 84, 86, \.\.\.\}$'
    # (gdb may print a thread's exit inside the program's line.)
    check "$name: continued, the program ends normally" \
      sh -c "grep 'gdb_target: ok' '$out' && grep 'exited normally' '$out'"
  else
    check "$name: device 3's backtrace shows it sleeping in its body" \
      has bt3 '^#[0-9]+ +0x[0-9a-f]+ in sleep_delay \(\)'
    check "$name: device 3's backtrace ends cleanly (no ?? frame)" \
      hasnt bt3 '\?\? \(\)|Backtrace stopped'
    check "$name: gdb detached" has detach 'Inferior 1 \(process [0-9]+\) detached'
    check "$name: detached, the program ends normally" \
      sh -c "test $prc -eq 0 && grep '^gdb_target: ok\$' '$tmp/prog.out'"
  fi
  check "$name: the extension raised no Python error" \
    sh -c "! grep -E 'Python Exception|Traceback|Error occurred in Python' '$out'"
  check "$name: gdb reached the end of the session" grep '^@@end$' "$out"
}

# The hung program on eight devices, i=4, j=2, in fiber mode: devices 0
# to 3 on the first worker, 4 to 7 on the second (contiguous ranges), so
# that device 3's sleep in its body holds the first worker and device 2 is
# a parked fiber waiting for it in the psum over 'j'.
eight_checks () {
  check "$name: shmap meshes shows the eight-device mesh running a map" \
    has meshes '^mesh #[0-9]+ i=4, j=2 \(8 devices\): a map is running'
  for d in 0 1 2 3 4 5 6 7; do
    check "$name: shmap devices lists device $d at ($((d / 2)),$((d % 2)))" \
      has devices "^[* ] device $d \(i=$((d / 2)), j=$((d % 2))\): +(thread [0-9]+ +\"[^\"]*\"|parked +\"shmap-w[0-9]+\") +$states"
  done
  check "$name: exactly eight devices are listed" \
    test "$(part devices | grep -c '^[* ] device ')" -eq 8
  check "$name: device 3 is in its body, in sleep_delay()" \
    has devices "^  device 3 \(i=1, j=1\): .*running its body for [0-9.]+ s +sleep_delay\(\) at gdb_target\.c:[0-9]+ \(frame [0-9]+\)\$"
  check "$name: device 2 is a parked fiber waiting in psum, called from body()" \
    has devices "^  device 2 \(i=1, j=0\): +parked +\"shmap-w[0-9]+\" +waiting in psum over 'j' \(call #1\) for [0-9.]+ s +body\(\) at gdb_target\.c:$line \(frame [0-9]+\)\$"
  check "$name: shmap device 2 shows the parked fiber's saved registers" \
    has select2 '^\[Device 2 \(i=1, j=0\) is a parked fiber: thread [0-9]+ "[^"]*" shows its saved registers until the program resumes\]$'
  check "$name: device 2's backtrace reaches body() and ends at the fiber's entry" \
    sh -c "sed -n '/^@@bt2\$/,/^@@/p' '$out' | grep -E '^#[0-9]+ +0x[0-9a-f]+ in body \(' >/dev/null &&
           sed -n '/^@@bt2\$/,/^@@/p' '$out' | grep '^#' | tail -n 1 | grep fiber_start"
  check "$name: device 2's backtrace ends cleanly (no ?? frame)" \
    hasnt bt2 '\?\? \(\)|Backtrace stopped'
  check "$name: \$shmap_device() is 2 with device 2 selected" \
    has device2 '^\$[0-9]+ = 2$'
  check "$name: print *y shows device 2's block" \
    has frame2 '^\$[0-9]+ = f32\[1,8\] \{16, 17, 18, 19, 20, 21, 22, 23\}$'
  check "$name: info locals shows dev = 2" has frame2 '^dev = 2$'
  check "$name: shmap thread 3 selects device 3" \
    has device3 '^\$[0-9]+ = 3$'
  check "$name: device 3's backtrace shows it sleeping in its body" \
    has bt3 '^#[0-9]+ +0x[0-9a-f]+ in sleep_delay \(\)'
  check "$name: gdb detached" has detach 'Inferior 1 \(process [0-9]+\) detached'
  check "$name: detached, the program ends normally" \
    sh -c "test $prc -eq 0 && grep '^gdb_target: ok\$' '$tmp/prog.out'"
  check "$name: the extension raised no Python error" \
    sh -c "! grep -E 'Python Exception|Traceback|Error occurred in Python' '$out'"
  check "$name: gdb reached the end of the session" grep '^@@end$' "$out"
}

session started threads
session started fibers
session attached threads
session attached fibers
session attached fibers 'i=4, j=2'

if test $status -ne 0; then
  echo "test_gdb: FAIL (gdb output above)"
fi
exit $status
