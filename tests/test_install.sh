#!/bin/sh
# SPDX-License-Identifier: MIT
# test_install.sh - what "make install" puts where, and linking against it
# as a user would: with pkg-config, dynamically and statically, with gcc
# and with clang.  See tests/package.mk.  Run by make check (which exports
# SHMAPTEST_MAKE, SHMAPTEST_CC, SHMAPTEST_VERSION, SHMAPTEST_SO_VERSION,
# SHMAPTEST_LIB_FILE, SHMAPTEST_LIB_SONAME, SHMAPTEST_STATIC_LINK,
# SHMAPTEST_MPI_PKG, SHMAPTEST_PYTHON3 and the sanitizer flags of the build).
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
make=${SHMAPTEST_MAKE:-make}
version=${SHMAPTEST_VERSION:?run me from make check}
so_version=${SHMAPTEST_SO_VERSION:?run me from make check}
lib_file=${SHMAPTEST_LIB_FILE:?run me from make check}
lib_soname=${SHMAPTEST_LIB_SONAME:?run me from make check}
static_link=${SHMAPTEST_STATIC_LINK:?run me from make check}
mpi_pkg=$(echo "${SHMAPTEST_MPI_PKG:-}" | sed 's/^, *//')
with_mpi=
grep -q '^#define SHMAP_HAVE_MPI' "$top_builddir/config.h" 2>/dev/null && with_mpi=yes
LC_ALL=C
export LC_ALL

tmp=${TMPDIR:-/tmp}/shmap-install.$$
mkdir "$tmp" || exit 99
trap 'rm -rf "$tmp"' 0
trap 'exit 99' 1 2 15
status=0
fail () {
  echo "test_install: FAIL: $*"
  status=1
}
if ! command -v pkg-config >/dev/null 2>&1; then
  echo "test_install: pkg-config not found"
  exit 77
fi

dest=$tmp/dest
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL $make -C "$top_builddir" install DESTDIR="$dest" > "$tmp/install.log" 2>&1; then
  echo "test_install: FAIL: make install DESTDIR=$dest failed:"
  tail -n 30 "$tmp/install.log"
  exit 1
fi

# ---- the files ------------------------------------------------------------
pc=$(find "$dest" -name shmap.pc | sed -n 1p)
test -n "$pc" || { fail "no shmap.pc installed"; exit 1; }
# The installed shmap.pc, moved under $dest: absolute paths get the prefix.
mkdir "$tmp/pc"
sed -E "s|^([A-Za-z_]+)=/|\\1=$dest/|" "$pc" > "$tmp/pc/shmap.pc"
PKG_CONFIG_PATH=$tmp/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export PKG_CONFIG_PATH
var () { pkg-config --variable="$1" shmap; }
libdir=$(var libdir)
includedir=$(var includedir)
test "$(pkg-config --modversion shmap)" = "$version" ||
  fail "pkg-config --modversion shmap says $(pkg-config --modversion shmap), configure.ac says $version"
for f in "$includedir/shmap.h" "$includedir/shmap_version.h" \
         "$libdir/$lib_file" "$libdir/libshmap.a"; do
  test -f "$f" || fail "${f#$dest} is not installed"
done
# A build with MPI has a soname of its own (README.md, "ABI policy").
case $with_mpi:$lib_file in
  yes:libshmap-mpi.so.$so_version|:libshmap.so.$so_version) ;;
  *) fail "the library's file is $lib_file in a build ${with_mpi:+with}${with_mpi:-without} MPI" ;;
esac
test "$(var library_file)" = "$libdir/$lib_file" ||
  fail "shmap.pc's library_file is $(var library_file), not $libdir/$lib_file"
if command -v readelf >/dev/null 2>&1; then
  soname=$(readelf -d "$libdir/$lib_file" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  test "$soname" = "$lib_soname" || fail "the soname of $lib_file is '$soname', not $lib_soname"
fi
# shmap.pc names MPI through its implementation's own module.
if test -n "$mpi_pkg"; then
  pkg-config --print-requires-private shmap | grep -q "^$mpi_pkg\b" ||
    fail "shmap.pc does not require $mpi_pkg privately: $(pkg-config --print-requires-private shmap | tr '\n' ' ')"
fi
test "$(var static_link)" = "$static_link" ||
  fail "shmap.pc's static_link is '$(var static_link)', configure found '$static_link'"
# Only a build with MPI may say that programs link dynamically only.
test "$static_link" = yes || test -n "$with_mpi" ||
  fail "shmap.pc says static_link=$static_link for a build without MPI"

# README, NEWS, LICENSE and every example's source in the docdir.
docdir=$(find "$dest" -type d -path '*/share/doc/libshmap' | sed -n 1p)
if test -z "$docdir"; then
  fail "no share/doc/libshmap installed"
else
  for f in README.md NEWS LICENSE "$top_srcdir"/examples/[0-9][0-9]_*.c; do
    f=${f#"$top_srcdir"/}
    cmp -s "$top_srcdir/$f" "$docdir/$f" || fail "$f is not installed as ${docdir#$dest}/$f"
  done
fi
grep "#define SHMAP_VERSION_STRING \"$version\"" "$includedir/shmap_version.h" >/dev/null ||
  fail "the installed shmap_version.h does not say version $version"

# Man pages: one per public function (a page or a link), the version in
# every footer, links that resolve.
man3=$(find "$dest" -type d -name man3 | sed -n 1p)
if test -z "$man3"; then
  fail "no man3 directory installed"
else
  nfunc=0
  for f in $(sed -n 's/^SHMAP_EXTERN[^(]*[ *]\(shmap_[a-z0-9_]*\)(.*/\1/p' "$top_srcdir/include/shmap.h"); do
    nfunc=$((nfunc + 1))
    page=$man3/$f.3
    if ! test -f "$page"; then
      fail "no installed man page for $f"
      continue
    fi
    first=$(sed -n 1p "$page")
    case $first in
      .so\ man3/*)
        target=$man3/${first#.so man3/}
        test -f "$target" || fail "man3/$f.3 links to a page not installed: $first" ;;
      *)
        grep "^\\.TH .*\"libshmap $version\"" "$page" >/dev/null ||
          fail "man3/$f.3: the .TH line does not carry version $version: $(grep '^\.TH' "$page")" ;;
    esac
  done
  test $nfunc -gt 50 || fail "found only $nfunc functions in shmap.h"
  if command -v man >/dev/null 2>&1; then
    # man resolves the link from the man directory it was installed in.
    out=$(MANPATH=${man3%/man3} MANWIDTH=80 man -P cat shmap_pmax 2>&1)
    case $out in
      "SHMAP_PSUM(3)"*"libshmap $version"*) ;;
      *) fail "man shmap_pmax (a link to shmap_psum.3) does not show the page with the version:
$out" ;;
    esac
  fi
fi

# The gdb extension: where shmap.pc says, named after the real library.
script=$dest$(PKG_CONFIG_PATH=${pc%/*} pkg-config --variable=gdb_autoload_script shmap)
real=$(cd "$libdir" && readlink -f libshmap.so)
case $script in
  */gdb/auto-load"${real#$dest}"-gdb.py) ;;
  *) fail "gdb_autoload_script is ${script#$dest}; gdb looks for <data>/gdb/auto-load${real#$dest}-gdb.py" ;;
esac
if ! cmp -s "$script" "$top_srcdir/gdb/shmap-gdb.py"; then
  fail "the installed ${script#$dest} is not gdb/shmap-gdb.py"
elif command -v gdb >/dev/null 2>&1 &&
     gdb -nx -batch -ex 'python print("py-ok")' 2>/dev/null | grep py-ok >/dev/null; then
  # gdb loads <dir>/<real path of the objfile>-gdb.py by itself; opening
  # the library as gdb's program needs no ptrace.  The installed tree is
  # under $dest, so the auto-load directory is made to mirror that.
  al=$tmp/auto-load
  mkdir -p "$al$(dirname "$real")"
  cp "$script" "$al$real-gdb.py"
  gdb -nx -batch -iex "set auto-load scripts-directory $al" \
      -iex "set auto-load safe-path $al" "$real" \
      -ex 'info auto-load python-scripts' -ex 'help shmap devices' > "$tmp/gdb.out" 2>&1
  grep -E '^Yes +.*libshmap(-mpi)?\.so\..*-gdb\.py' "$tmp/gdb.out" >/dev/null &&
    grep -i 'device' "$tmp/gdb.out" >/dev/null ||
    { fail "gdb did not load the extension by itself for ${real#$dest}:"; sed 's/^/  /' "$tmp/gdb.out"; }
else
  echo "test_install: gdb with Python not found: auto-loading not tried"
fi

# The trace merger: in bindir, executable, with its page in man1; with
# python3 at hand, it runs and merges a trace of two processes.
merge=$(var exec_prefix)/bin/shmap-trace-merge
if ! test -x "$merge"; then
  fail "shmap-trace-merge is not installed in the bindir (${merge#$dest})"
elif test "$(sed -n 1p "$merge")" != "#!${SHMAPTEST_PYTHON3:-}"; then
  fail "the installed shmap-trace-merge starts with $(sed -n 1p "$merge"), not #!${SHMAPTEST_PYTHON3:-} (configure's python3)"
elif test -x "${SHMAPTEST_PYTHON3:-}"; then
  "$merge" --help > "$tmp/merge-help.out" 2>&1 &&
    grep '^Usage: shmap-trace-merge' "$tmp/merge-help.out" >/dev/null ||
    { fail "shmap-trace-merge --help:"; sed 's/^/  /' "$tmp/merge-help.out"; }
  for r in 0 1; do
    printf '{"otherData":{"shmap_nproc":2,"shmap_rank":%d,"shmap_host":"h","shmap_clock0_ns":%d,"shmap_wall0_ns":%d},"traceEvents":[{"name":"body","ph":"X","pid":1,"tid":1,"ts":1.5,"dur":2}]}\n' \
      $r $((1000000 + r * 3000)) $((5000000 + r * 3000)) > "$tmp/t.json.$r"
  done
  if "$merge" "$tmp/merged.json" "$tmp/t.json" > "$tmp/merge.out" 2>&1; then
    # rank 1 started 3 us after rank 0: its slice moves by 3 us.
    python3 -c 'import json, sys; e = [x["ts"] for x in json.load(open(sys.argv[1]))["traceEvents"]]; sys.exit(e != [1.5, 4.5])' "$tmp/merged.json" ||
      fail "shmap-trace-merge merged two traces into: $(cat "$tmp/merged.json")"
  else
    fail "shmap-trace-merge failed:"; sed 's/^/  /' "$tmp/merge.out"
  fi
else
  echo "test_install: python3 not found: shmap-trace-merge not run"
fi
if test -n "$man3" && ! test -f "${man3%/man3}/man1/shmap-trace-merge.1"; then
  fail "man1/shmap-trace-merge.1 is not installed"
fi

# The timeline drawer: in bindir beside the merger, with its page; with
# python3 at hand, it draws a trace of one body as a page with an SVG.
timeline=$(var exec_prefix)/bin/shmap-trace-timeline
if ! test -x "$timeline"; then
  fail "shmap-trace-timeline is not installed in the bindir (${timeline#$dest})"
elif command -v python3 >/dev/null 2>&1; then
  printf '{"traceEvents":[{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"device 0 (i=0)"}},{"name":"body","cat":"body","ph":"X","pid":1,"tid":1,"ts":1.5,"dur":2}]}\n' \
    > "$tmp/one.json"
  if "$timeline" "$tmp/one.json" "$tmp/one.html" > "$tmp/timeline.out" 2>&1; then
    grep 'class="bar" data-kind="body"' "$tmp/one.html" >/dev/null ||
      fail "shmap-trace-timeline drew no body bar: $(cat "$tmp/one.html")"
  else
    fail "shmap-trace-timeline failed:"; sed 's/^/  /' "$tmp/timeline.out"
  fi
fi
if test -n "$man3" && ! test -f "${man3%/man3}/man1/shmap-trace-timeline.1"; then
  fail "man1/shmap-trace-timeline.1 is not installed"
fi

# ---- linking as a user does ------------------------------------------------
prog=$top_srcdir/tests/version_prog.c
ccs=
others="gcc clang"
# A sanitizer's run-time library belongs to its compiler: a sanitized
# libshmap links only with the compiler that built it.
test -n "$SHMAPTEST_SAN_CFLAGS" && others=
for cc in ${SHMAPTEST_CC:-cc} $others; do
  command -v "${cc%% *}" >/dev/null 2>&1 || continue
  case " $ccs " in *" $cc "*) continue ;; esac
  ccs="$ccs $cc"
done
run () { # run NAME PROGRAM: in both scheduling modes
  for sched in threads fibers; do
    rm -f "$tmp/trace.json"
    if ! out=$(SHMAP_SCHED=$sched SHMAP_TRACE="$tmp/trace.json" "$2" "$version" 2>&1); then
      fail "$1 (SHMAP_SCHED=$sched) fails: $out"
    # The debugging aids come with the library however it is linked (a
    # static link takes only the objects a program refers to).
    elif ! grep -q '"traceEvents"' "$tmp/trace.json" 2>/dev/null; then
      fail "$1 (SHMAP_SCHED=$sched) wrote no trace with SHMAP_TRACE"
    fi
  done
}
for cc in $ccs; do
  name=$(echo "$cc" | tr -c 'A-Za-z0-9\n' _)
  # shellcheck disable=SC2046
  if $cc -std=c11 $SHMAPTEST_SAN_CFLAGS "$prog" -o "$tmp/dyn_$name" \
       $(pkg-config --cflags --libs shmap) -Wl,-rpath,"$libdir" $SHMAPTEST_SAN_LDFLAGS > "$tmp/cc.log" 2>&1; then
    run "a program linked by $cc with pkg-config --libs" "$tmp/dyn_$name"
  else
    fail "$cc cannot link a program with \`pkg-config --cflags --libs shmap\`:"
    sed 's/^/  /' "$tmp/cc.log"
  fi
  if test -n "$SHMAPTEST_SAN_CFLAGS"; then
    echo "test_install: a sanitizer build: static linking not tried with $cc"
    continue
  fi
  # Where shmap.pc says static_link=no (a build with MPI whose library
  # has no static archive, as Debian's), the static link must fail as said.
  # shellcheck disable=SC2046
  if $cc -static -std=c11 "$prog" -o "$tmp/static_$name" \
       $(pkg-config --static --cflags --libs shmap) > "$tmp/cc.log" 2>&1; then
    test "$static_link" = yes ||
      fail "shmap.pc says static_link=$static_link, but $cc -static linked a program"
    if command -v readelf >/dev/null 2>&1 && readelf -d "$tmp/static_$name" 2>/dev/null | grep NEEDED >/dev/null; then
      fail "$cc -static made a program that needs shared libraries: $(readelf -d "$tmp/static_$name" | grep NEEDED)"
    fi
    run "a program linked by $cc -static with pkg-config --static --libs" "$tmp/static_$name"
  elif test "$static_link" = yes; then
    fail "$cc -static cannot link a program with \`pkg-config --static --cflags --libs shmap\` ($(pkg-config --static --libs shmap)):"
    sed 's/^/  /' "$tmp/cc.log"
  else
    echo "test_install: shmap.pc says static_link=no, and $cc -static fails: $(grep -m1 -E 'cannot find|undefined reference' "$tmp/cc.log")"
  fi
done

# ---- CMake: find_package(shmap) -------------------------------------------
cmake_done=
if test -n "$SHMAPTEST_SAN_CFLAGS"; then
  echo "test_install: a sanitizer build: the CMake package not tried"
elif ! command -v cmake >/dev/null 2>&1; then
  echo "test_install: cmake not found: the CMake package not tried"
else
  cmdir=$(var cmakedir)
  for f in shmapConfig.cmake shmapConfigVersion.cmake; do
    test -f "$cmdir/$f" || fail "${cmdir#$dest}/$f is not installed"
  done
  mkdir "$tmp/cm"
  cp "$prog" "$tmp/cm/prog.c"
  cat > "$tmp/cm/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.12)
project(uses_shmap C)
find_package(shmap 99 QUIET)
if(shmap_FOUND)
  message(FATAL_ERROR "find_package(shmap 99) accepts version $version")
endif()
find_package(shmap $version REQUIRED)
if(NOT shmap_VERSION STREQUAL "$version" OR NOT shmap_LIBRARY_FILE STREQUAL "$lib_file"
   OR NOT shmap_STATIC_LINK STREQUAL "$static_link")
  message(FATAL_ERROR "shmap \${shmap_VERSION} \${shmap_LIBRARY_FILE} \${shmap_STATIC_LINK}")
endif()
add_executable(prog_shared prog.c)
target_link_libraries(prog_shared PRIVATE shmap::shmap)
add_executable(prog_static prog.c)
target_link_libraries(prog_static PRIVATE shmap::shmap_static)
EOF
  # The installed tree is under \$dest: the package finds its directories
  # relative to itself, so CMAKE_PREFIX_PATH is all it needs.
  if (cd "$tmp/cm" && cmake -S . -B build -DCMAKE_C_COMPILER="${SHMAPTEST_CC%% *}" \
        -DCMAKE_PREFIX_PATH="$(var prefix)" -DCMAKE_BUILD_RPATH="$libdir" &&
      cmake --build build) > "$tmp/cmake.log" 2>&1; then
    run "a program built by CMake with shmap::shmap" "$tmp/cm/build/prog_shared"
    run "a program built by CMake with shmap::shmap_static" "$tmp/cm/build/prog_static"
    if command -v readelf >/dev/null 2>&1; then
      readelf -d "$tmp/cm/build/prog_shared" | grep -q "NEEDED.*\[$lib_soname\]" ||
        fail "the CMake-built program does not need $lib_soname: $(readelf -d "$tmp/cm/build/prog_shared" | grep NEEDED)"
      ! readelf -d "$tmp/cm/build/prog_static" | grep -q "NEEDED.*libshmap" ||
        fail "the program built with shmap::shmap_static needs the shared libshmap"
    fi
    cmake_done=" and CMake"
  else
    fail "a CMake project with find_package(shmap) does not build:"
    sed 's/^/  /' "$tmp/cmake.log" | tail -n 40
  fi
fi
kinds="dynamic and static"
test -n "$SHMAPTEST_SAN_CFLAGS" && kinds="dynamic only: a sanitizer build"
test "$static_link" = yes || kinds="dynamic only, as shmap.pc says: static_link=$static_link"
test $status -eq 0 && echo "test_install: installed files in place; linked and ran with:$ccs$cmake_done ($kinds)"
exit $status
