#!/bin/sh
# SPDX-License-Identifier: MIT
# test_ltlink.sh - tools/ltlink links the tree's programs as libtool does.
#
# The build runs libtool through tools/ltlink (LIBTOOL in Makefile.am),
# which links a program with -no-install against the tree's uninstalled
# libraries by itself and leaves everything else to libtool.  Here an
# example's object is linked both ways, against the shared library and
# against the convenience library: ltlink must take its own path (it
# prints "ltlink:" without --silent), and each pair of programs must need
# the same shared libraries, have the same run path and print the same;
# also for a library installed where the dynamic linker does not look.
# A link without -no-install and a link of a library must go to libtool
# ("libtool: link:").  Run by make check.
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
cc=${SHMAPTEST_CC:-cc}
LC_ALL=C
export LC_ALL
lt=$top_builddir/libtool
ltlink=$top_srcdir/tools/ltlink
obj=$top_builddir/examples/01_hello.o
if [ ! -x "$lt" ] || [ ! -f "$obj" ]; then
  echo "test_ltlink: $lt or $obj not found (build first)" >&2
  exit 99
fi
command -v readelf >/dev/null 2>&1 || { echo "test_ltlink: no readelf: skipped"; exit 77; }
tmp=${TMPDIR:-/tmp}/shmap-ltlink.$$
mkdir "$tmp" || exit 99
trap 'rm -rf "$tmp"' 0
trap 'exit 99' 1 2 15
status=0
fail() {
  echo "test_ltlink: FAIL: $*"
  status=1
}

# dyn PROGRAM: its NEEDED and RUNPATH entries, one a line.
dyn() {
  readelf -d "$1" | sed -n 's/.*(\(NEEDED\|RUNPATH\|RPATH\)).*\[\(.*\)\]/\1 \2/p' | sort
}

for lib in src/libshmap.la src/libshmap_core.la; do
  name=${lib#src/}
  name=${name%.la}
  # shellcheck disable=SC2086 # lists of flags
  set -- --mode=link --tag=CC $cc $SHMAPTEST_CFLAGS $SHMAPTEST_SAN_CFLAGS \
    -no-install -o "$tmp/$name" "$obj" "$top_builddir/$lib" \
    $SHMAPTEST_SAN_LDFLAGS -lm
  if ! "$lt" --silent "$@" >"$tmp/lt.out" 2>&1; then
    fail "libtool cannot link $obj against $lib:"
    cat "$tmp/lt.out"
    continue
  fi
  mv "$tmp/$name" "$tmp/$name.libtool"
  if ! "$ltlink" "$lt" "$@" >"$tmp/ltlink.out" 2>&1; then
    fail "ltlink cannot link $obj against $lib:"
    cat "$tmp/ltlink.out"
    continue
  fi
  grep -q '^ltlink: ' "$tmp/ltlink.out" ||
    fail "ltlink left the link against $lib to libtool: $(cat "$tmp/ltlink.out")"
  dyn "$tmp/$name.libtool" >"$tmp/want"
  dyn "$tmp/$name" >"$tmp/got"
  cmp -s "$tmp/want" "$tmp/got" ||
    fail "against $lib, ltlink's program differs from libtool's: $(diff "$tmp/want" "$tmp/got")"
  # The devices print in the order they run: compare the lines sorted.
  SHMAP_SCHED=threads "$tmp/$name.libtool" >"$tmp/want.run" 2>&1 ||
    fail "libtool's program against $lib fails"
  SHMAP_SCHED=threads "$tmp/$name" >"$tmp/got.run" 2>&1 ||
    fail "ltlink's program against $lib fails"
  sort "$tmp/want.run" >"$tmp/want.out"
  sort "$tmp/got.run" >"$tmp/got.out"
  cmp -s "$tmp/want.out" "$tmp/got.out" ||
    fail "against $lib, ltlink's program prints otherwise than libtool's"
done

# A library whose installation directory the dynamic linker does not
# search (a --prefix of one's own, as under make distcheck): libtool adds
# that directory to the run path after the build directory, and so must
# ltlink.  The same library, with another libdir in a copy of its .la.
abs() {
  case $1 in
    /*) echo "$1" ;;
    *) echo "$PWD/$1" ;;
  esac
}
absobj=$(abs "$obj")
abslt=$(abs "$lt")
absltlink=$(abs "$ltlink")
mkdir -p "$tmp/far/src" || exit 99
ln -s "$(abs "$top_builddir")/src/.libs" "$tmp/far/src/.libs" || exit 99
sed "s|^libdir=.*|libdir='/nonexistent/shmap-ltlink/lib'|" \
  "$top_builddir/src/libshmap.la" >"$tmp/far/src/libshmap.la" || exit 99

(
  cd "$tmp/far" || exit 1
  # shellcheck disable=SC2086
  set -- --mode=link --tag=CC $cc $SHMAPTEST_CFLAGS $SHMAPTEST_SAN_CFLAGS \
    -no-install -o prog "$absobj" src/libshmap.la $SHMAPTEST_SAN_LDFLAGS -lm
  "$abslt" --silent "$@" && mv prog prog.libtool &&
    "$absltlink" "$abslt" "$@"
) >"$tmp/far.out" 2>&1 || fail "the link against a library of another libdir fails: $(cat "$tmp/far.out")"
dyn "$tmp/far/prog.libtool" >"$tmp/want" 2>/dev/null
dyn "$tmp/far/prog" >"$tmp/got" 2>/dev/null
grep -q '/nonexistent/shmap-ltlink/lib' "$tmp/want" ||
  fail "libtool's run path lacks the library's libdir: $(cat "$tmp/want")"
cmp -s "$tmp/want" "$tmp/got" ||
  fail "against a library of another libdir, ltlink's program differs from libtool's: $(diff "$tmp/want" "$tmp/got")"

# Cases for libtool: a program without -no-install, and a library.
"$ltlink" "$lt" --mode=link --tag=CC "$cc" -o "$tmp/wrapped" "$obj" \
  "$top_builddir/src/libshmap.la" -lm >"$tmp/out" 2>&1 || fail "a link without -no-install fails: $(cat "$tmp/out")"
grep -q '^libtool: link: ' "$tmp/out" ||
  fail "a link without -no-install did not go to libtool: $(cat "$tmp/out")"
"$ltlink" "$lt" --mode=link --tag=CC "$cc" -o "$tmp/libx.la" "$obj" \
  >"$tmp/out" 2>&1 || fail "a library link fails: $(cat "$tmp/out")"
grep -q '^libtool: link: ' "$tmp/out" ||
  fail "a library link did not go to libtool: $(cat "$tmp/out")"

[ $status -eq 0 ] && echo "test_ltlink: ltlink linked as libtool does, and left the other links to libtool"
exit $status
