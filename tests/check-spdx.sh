#!/bin/sh
# SPDX-License-Identifier: MIT
# check-spdx.sh - every source file carries an SPDX-License-Identifier line
# (naming the licence of LICENSE) in its first five lines: C sources and
# headers, shell and Python scripts, automake fragments, configure.ac,
# acinclude.m4, the manual pages and the .in templates.  In a git checkout the files are those git tracks (so a
# new file fails until it has the line); in an unpacked tarball, the same
# kinds of files found under the source tree, less what the autotools
# generate.
# Exit status: 0 pass, 1 fail, 99 hard error (automake's conventions).
top_srcdir=${top_srcdir:-.}
want="SPDX-License-Identifier: MIT"
LC_ALL=C
export LC_ALL

tmp=${TMPDIR:-/tmp}/check-spdx.$$
trap 'rm -f "$tmp"' 0
trap 'exit 99' 1 2 15

is_source='\.(c|h|sh|py|mk|am|ac|m4)$|^man/[^/]*\.[137]$|\.in$|(^|/)\.ci/run$'
if git -C "$top_srcdir" rev-parse --is-inside-work-tree >/dev/null 2>&1 &&
   test "$(git -C "$top_srcdir" rev-parse --show-toplevel)" = "$(cd "$top_srcdir" && pwd -P)"; then
  git -C "$top_srcdir" ls-files | grep -E "$is_source" > "$tmp"
  from="tracked by git"
else
  (cd "$top_srcdir" && find . -type f | sed 's|^\./||' |
     grep -E "$is_source" |
     grep -v -E '^(build-aux|m4|autom4te\.cache|_build[^/]*|_inst)/|(^|/)(Makefile\.in|config\.h\.in|config\.h|aclocal\.m4)$') > "$tmp"
  from="in the source tree"
fi
n=$(wc -l < "$tmp" | tr -d ' ')
if test "$n" -eq 0; then
  echo "check-spdx: no source file found in $top_srcdir" >&2
  exit 99
fi

status=0
while read -r f; do
  test -f "$top_srcdir/$f" || continue
  if ! head -n 5 "$top_srcdir/$f" | grep -F "$want" >/dev/null; then
    case $f in
      *.c|*.h|*.h.in) line="/* $want */" ;;
      *.ac) line="dnl $want" ;;
      *.[137]) line=".\\\" $want" ;;
      *) line="# $want" ;;
    esac
    echo "check-spdx: FAIL: $f has no \"$want\" in its first 5 lines; add the line: $line" >&2
    status=1
  fi
done < "$tmp"
test $status -eq 0 && echo "check-spdx: $n source files $from carry \"$want\""
exit $status
