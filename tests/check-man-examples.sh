#!/bin/sh
# SPDX-License-Identifier: MIT
# check-man-examples.sh - every manual page's EXAMPLE program compiles and
# runs.
#
# A page's program is the .EX ... .EE block of its EXAMPLE (or EXAMPLES)
# section that defines main(); the other blocks there may show output.  It
# is turned back into C (roff requests dropped, \e \- \(aq \(dq \& ... undone),
# compiled with -Wall -Wextra -Werror against the built library, and run in
# both scheduling modes (SHMAP_SCHED=threads and fibers) in a scratch
# directory: it must exit with status 0.  In a build with MPI (MPIRUN set
# by make check), each program also runs under mpirun with 2 and 4
# processes in both modes and must exit with 0 there too: a program that
# brings values back from its bodies by writing to globals, instead of
# through outputs and shmap_array_to_host, fails on the processes that do
# not run those devices (shmap-mpi(7)).  A program whose mesh the processes
# cannot share equally is skipped at that process count.
# Every section-3 page (a page documenting functions) needs such a program;
# a section-7 page may have none.  With ONLY=man/NAME.3 ... only those pages
# are checked.
# Exit status: 0 pass, 1 fail, 99 hard error (automake's conventions).
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
cc=${SHMAPTEST_CC:-cc}
LC_ALL=C
export LC_ALL

tmp=${TMPDIR:-/tmp}/check-man-examples.$$
mkdir "$tmp" || exit 99
trap 'rm -rf "$tmp"' 0
trap 'exit 99' 1 2 15
libtool=$top_builddir/libtool
lib=$top_builddir/src/libshmap.la
if test ! -x "$libtool" || test ! -f "$lib"; then
  echo "check-man-examples: $libtool or $lib not found (build first; set top_builddir)" >&2
  exit 99
fi
abs_srcdir=$(cd "$top_srcdir" && pwd)
abs_builddir=$(cd "$top_builddir" && pwd)

status=0
nmpi=0
# mpirun_np NP PROGRAM: PROGRAM on NP processes, as tests/mpi/run.sh does.
mpirun_np () {
  np=$1; shift
  set -- -np "$np" "$@"
  if test "${MPI_FLAVOR:-}" = openmpi; then
    set -- --oversubscribe "$@"
    test "$(id -u)" = 0 && set -- --allow-run-as-root "$@"
  fi
  timeout -k 10 120 "$MPIRUN" "$@"
}
fail () {
  echo "check-man-examples: FAIL: $*"
  status=1
}

# extract PAGE OUT: writes the EXAMPLE program of PAGE to OUT.
#   exit 0: written; 2: no EXAMPLE section; 3: no .EX block with main().
extract () {
  awk '
    /^\.SH +"?EXAMPLES?"? *$/ { insec = 1; next }
    /^\.SH/ { insec = 0 }
    !insec { next }
    /^\.EX/ { inex = 1; buf = ""; next }
    /^\.EE/ {
      inex = 0
      if (!done && buf ~ /(^|\n)[a-z][a-z ]*main\(/) { printf "%s", buf; done = 1 }
      next
    }
    inex {
      if ($0 ~ /^\.[a-zA-Z]+( |$)/) next   # a roff request, not C
      buf = buf $0 "\n"
    }
    END { if (!seen_sec) {} }
  ' "$1" | sed -e 's/\\e/\\/g' -e 's/\\(aq/'"'"'/g' -e 's/\\(dq/"/g' \
             -e 's/\\(lq/"/g' -e 's/\\(rq/"/g' -e 's/\\(ti/~/g' \
             -e 's/\\(ha/^/g' -e 's/\\(rs/\\/g' -e 's/\\-/-/g' \
             -e 's/\\&//g' -e 's/\\ / /g' > "$2"
  if ! grep -E '^\.SH +"?EXAMPLES?"? *$' "$1" >/dev/null; then
    return 2
  fi
  test -s "$2" || return 3
  return 0
}

pages=${ONLY:-$(cd "$top_srcdir" && ls man/*.3 man/*.7 2>/dev/null)}
n=0
for p in $pages; do
  page=$abs_srcdir/$p
  base=${p##*/}
  name=${base%.*}
  sect=${base##*.}
  extract "$page" "$tmp/$name.c"
  rc=$?
  if test $rc -eq 2; then
    test "$sect" = 3 &&
      fail "$p has no EXAMPLE section: add \".SH EXAMPLE\" with a complete program (#include <shmap.h> ... int main(void) { ... }) in an .EX/.EE block that uses the functions the page documents (a section-7 page may go without)"
    continue
  fi
  if test $rc -eq 3; then
    test "$sect" = 3 &&
      fail "$p: its EXAMPLE section has no complete program: none of its .EX/.EE blocks defines main(); make the example a whole program with its #include lines and main()"
    continue
  fi
  n=$((n + 1))
  mkdir "$tmp/$name.d"
  # Linked as the tree's own programs are (tools/ltlink: libtool's link,
  # without libtool's second of shell work).
  # shellcheck disable=SC2086
  if ! "$abs_srcdir/tools/ltlink" "$libtool" --silent --mode=link --tag=CC $cc -std=c11 -D_GNU_SOURCE \
        -Wall -Wextra -Wno-unused-parameter -Werror $SHMAPTEST_CFLAGS $SHMAPTEST_SAN_CFLAGS \
        -I"$abs_builddir/include" -I"$abs_srcdir/include" \
        -o "$tmp/$name.d/example" "$tmp/$name.c" "$lib" $SHMAPTEST_SAN_LDFLAGS \
        -no-install -lm > "$tmp/$name.cc" 2>&1; then
    fail "$p: the EXAMPLE program does not compile:"
    sed 's/^/  /' "$tmp/$name.cc"
    echo "  --- the program, as extracted:"
    cat -n "$tmp/$name.c" | sed 's/^/  /'
    continue
  fi
  for sched in threads fibers; do
    if ! (cd "$tmp/$name.d" && SHMAP_SCHED=$sched timeout 120 ./example) > "$tmp/$name.out" 2>&1; then
      fail "$p: the EXAMPLE program fails (SHMAP_SCHED=$sched):"
      sed 's/^/  /' "$tmp/$name.out" | head -n 40
      break
    fi
    test -n "${MPIRUN:-}" || continue
    for np in 2 4; do
      if (cd "$tmp/$name.d" && SHMAP_SCHED=$sched mpirun_np "$np" ./example) > "$tmp/$name.out" 2>&1; then
        nmpi=$((nmpi + 1))
      elif grep -q 'processes of this MPI job cannot share equally' "$tmp/$name.out"; then
        echo "check-man-examples: $p: its mesh is not for $np processes; skipped there"
      else
        fail "$p: the EXAMPLE program fails under mpirun -np $np (SHMAP_SCHED=$sched):"
        sed 's/^/  /' "$tmp/$name.out" | head -n 40
      fi
    done
  done
done
test $status -eq 0 && echo "check-man-examples: $n EXAMPLE programs compiled and ran in both scheduling modes${MPIRUN:+, and $nmpi runs of them under mpirun with 2 and 4 processes}"
exit $status
