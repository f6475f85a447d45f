#!/bin/sh
# SPDX-License-Identifier: MIT
# check-man.sh - checks the manual pages in man/:
#  1. every public function of include/shmap.h has a page man/<name>.3 of
#     its own or is listed in the NAME section of a shared page (the build
#     installs ".so" links for the other names of a shared page; man/ holds
#     no link pages, so that "man -l" reads every page from the source
#     tree), and every shmap_ name a page mentions is declared there;
#  2. every page in man/ (sections 1, 3 and 7) is listed in SHMAP_MAN_PAGES in man/local.mk (so
#     that "make dist" ships it and "make install" installs it), and every
#     page listed there exists;
#  3. every page's .TH line names the source as "libshmap", without a
#     version: the build fills in the version from configure.ac;
#  4. every page formats without a warning (groff -man -ww, and mandoc -T lint
#     when mandoc is installed).  Skipped with a message without groff.
# The automake test harness exports top_srcdir; by hand, run it from the top
# of the source tree or set top_srcdir.
# Exit status: 0 pass, 1 fail, 99 hard error (automake's conventions).

top_srcdir=${top_srcdir:-.}
# sort and comm must agree on one collation.
LC_ALL=C
export LC_ALL
header=$top_srcdir/include/shmap.h
mandir=$top_srcdir/man
mk=$mandir/local.mk

if test ! -f "$header" || test ! -f "$mk"; then
  echo "check-man: $header or $mk not found (set top_srcdir)" >&2
  exit 99
fi

tmp=${TMPDIR:-/tmp}/check-man.$$
mkdir "$tmp" || exit 99
trap 'rm -rf "$tmp"' 0
trap 'exit 99' 1 2 15

status=0
fail () {
  echo "check-man: FAIL: $*" >&2
  status=1
}

# ---- 1. public functions -------------------------------------------------

# Strip /* */ and // comments, then print each identifier shmap_... that is
# followed by "(": in the header these are exactly the declared functions
# (types such as shmap_body_fn are followed by ")", macros are upper case).
awk '
{
  line = $0; out = ""
  while (line != "") {
    if (incomment) {
      i = index(line, "*/")
      if (i == 0) { line = ""; break }
      line = substr(line, i + 2); incomment = 0
    } else {
      i = index(line, "/*"); j = index(line, "//")
      if (j > 0 && (i == 0 || j < i)) { out = out substr(line, 1, j - 1); line = "" }
      else if (i == 0) { out = out line; line = "" }
      else { out = out substr(line, 1, i - 1) " "; line = substr(line, i + 2); incomment = 1 }
    }
  }
  s = out
  while (match(s, /shmap_[a-z0-9_]+[ \t]*\(/)) {
    before = RSTART > 1 ? substr(s, RSTART - 1, 1) : " "
    name = substr(s, RSTART, RLENGTH)
    sub(/[ \t]*\($/, "", name)
    if (before !~ /[A-Za-z0-9_]/) print name
    s = substr(s, RSTART + RLENGTH)
  }
}' "$header" | sort -u > "$tmp/functions"

if test ! -s "$tmp/functions"; then
  echo "check-man: no function found in $header" >&2
  exit 99
fi

# The names each page's NAME section lists (before "\-"): "page name".
for page in "$mandir"/*.3; do
  test -f "$page" || continue
  sed -n '/^\.SH  *"*NAME/,/^\.SH/p' "$page" | sed '1d;$d' | tr '\n' ' ' |
    sed 's/\\-.*//; s/,/ /g' | tr ' ' '\n' | grep -v '^$' |
    sed "s|^|${page##*/} |"
done > "$tmp/names"

missing=
for f in $(cat "$tmp/functions"); do
  page=$mandir/$f.3
  if test -f "$page"; then
    if ! grep "^$f.3 $f\$" "$tmp/names" >/dev/null; then
      fail "the NAME section of man/$f.3 does not list $f"
    fi
  elif ! awk -v f="$f" '$2 == f { found = 1 } END { exit !found }' "$tmp/names"; then
    missing="$missing $f"
  fi
done
if test -n "$missing"; then
  fail "public functions with no man/<name>.3 page of their own and listed in no page's NAME section:"
  for f in $missing; do echo "  $f" >&2; done
fi

# No ".so" link pages in man/: the build makes them from NAME sections.
for page in "$mandir"/*.[137]; do
  test -f "$page" || continue
  case $(sed -n '1{p;q;}' "$page") in
    .so\ *)
      n=${page##*/}
      fail "man/$n is a \".so\" link page: delete it and list ${n%.*} in the NAME section of the page it links to ($(sed -n '1s/^\.so *//p' "$page")); the build installs the link" ;;
  esac
done
nfunc=$(wc -l < "$tmp/functions" | tr -d ' ')

# Every shmap_ name a page mentions (a function, type or constant of the
# API; not gdb's $shmap_ functions, not the library's internal shmap__
# names) is one the header declares: a renamed or imagined function in a
# page is an error.
awk '
{
  s = $0
  while (match(s, /shmap_[a-z0-9][a-z0-9_]*/)) {
    before = RSTART > 1 ? substr(s, RSTART - 1, 1) : " "
    if (before !~ /[$A-Za-z0-9_]/)
      print substr(s, RSTART, RLENGTH)
    s = substr(s, RSTART + RLENGTH)
  }
}' "$header" | sort -u > "$tmp/declared"
for page in "$mandir"/*.[137]; do
  test -f "$page" || continue
  awk -v page="${page##*/}" '
  {
    s = $0
    while (match(s, /shmap_[a-z0-9][a-z0-9_]*/)) {
      before = RSTART > 1 ? substr(s, RSTART - 1, 1) : " "
      if (before !~ /[$A-Za-z0-9_]/)
        print substr(s, RSTART, RLENGTH) " " page ":" FNR
      s = substr(s, RSTART + RLENGTH)
    }
  }' "$page"
done | sort -k1,1 > "$tmp/mentioned"
join -v 1 "$tmp/mentioned" "$tmp/declared" > "$tmp/undeclared"
if test -s "$tmp/undeclared"; then
  fail "pages name what include/shmap.h does not declare:"
  sed 's/^\([^ ]*\) \(.*\)$/  \2: \1/' "$tmp/undeclared" >&2
fi

# ---- 2. pages listed in man/local.mk ------------------------------------

# The pages must not go through automake's man_MANS variables: those would
# install them as they are, without the version.
if grep -E '^[[:space:]]*(dist_|nodist_|notrans_)*man[0-9]*_MANS[[:space:]]*\+?=' "$mk" >/dev/null; then
  fail "man/local.mk lists pages in an automake *_MANS variable; list them in SHMAP_MAN_PAGES (the build installs them with the version filled in):"
  grep -n -E '^[[:space:]]*(dist_|nodist_|notrans_)*man[0-9]*_MANS' "$mk" | sed 's/^/  /' >&2
fi

# Words of every SHMAP_MAN_PAGES assignment, continuation lines included.
awk '
  /^[ \t]*SHMAP_MAN_PAGES[ \t]*\+?=/ { on = 1; sub(/^[^=]*=/, "") }
  on {
    cont = ($0 ~ /\\[ \t]*$/)
    sub(/#.*/, "")
    gsub(/\\/, " ")
    n = split($0, w, /[ \t]+/)
    for (k = 1; k <= n; k++) if (w[k] != "") print w[k]
    if (!cont) on = 0
  }' "$mk" | sort -u > "$tmp/listed"

(cd "$mandir" && ls) | grep '\.[137]$' | sed 's|^|man/|' | sort > "$tmp/pages"
unlisted=$(comm -23 "$tmp/pages" "$tmp/listed")
if test -n "$unlisted"; then
  fail "pages not listed in SHMAP_MAN_PAGES in man/local.mk:"
  for p in $unlisted; do echo "  $p" >&2; done
fi
absent=$(comm -13 "$tmp/pages" "$tmp/listed")
if test -n "$absent"; then
  fail "man/local.mk lists pages that do not exist:"
  for p in $absent; do echo "  $p" >&2; done
fi
npages=$(wc -l < "$tmp/pages" | tr -d ' ')

# Every page has the sections a reader looks for, and a .TH line whose
# source field the build can fill in.
for p in $(cat "$tmp/pages"); do
  file=$top_srcdir/$p
  case $(sed -n '1{p;q;}' "$file") in
    .so\ *) continue ;;
  esac
  th=$(grep '^\.TH ' "$file" | sed -n 1p)
  case $th in
    *'"libshmap" "libshmap Manual"'*) ;;
    *) fail "$p: its .TH line must end with \"libshmap\" \"libshmap Manual\" (no version: the build fills it in): $th" ;;
  esac
  case $p in
    *.3) want="NAME SYNOPSIS DESCRIPTION RETURN_VALUE SEE_ALSO" ;;
    *.1) want="NAME SYNOPSIS DESCRIPTION EXIT_STATUS SEE_ALSO" ;;
    *) want="NAME DESCRIPTION SEE_ALSO" ;;
  esac
  for sec in $want; do
    sec=$(echo "$sec" | tr _ ' ')
    if ! grep -E "^\.SH +\"?$sec\"? *\$" "$file" >/dev/null; then
      fail "$p has no $sec section"
    fi
  done
done

# ---- 3. formatting -------------------------------------------------------

linted=0
if command -v groff >/dev/null 2>&1; then
  for p in $(cat "$tmp/pages"); do
    file=$top_srcdir/$p
    case $(sed -n '1{p;q;}' "$file") in
      .so\ *) continue ;;   # a link: its target is checked on its own
    esac
    # -t: tables (tbl); -ww: every warning; -z: only the diagnostics.
    groff -man -t -Tutf8 -ww -z "$file" > "$tmp/groff.out" 2>&1
    if test -s "$tmp/groff.out"; then
      fail "groff warns about $p:"
      sed 's/^/  /' "$tmp/groff.out" >&2
    fi
    linted=$((linted + 1))
  done
else
  echo "check-man: groff not found: formatting not checked (Debian: apt-get install groff-base)"
fi
if command -v mandoc >/dev/null 2>&1; then
  for p in $(cat "$tmp/pages"); do
    file=$top_srcdir/$p
    case $(sed -n '1{p;q;}' "$file") in
      .so\ *) continue ;;
    esac
    # Warnings and worse; mandoc's style hints are not failures.
    mandoc -T lint -W warning "$file" > "$tmp/mandoc.out" 2>&1
    if test -s "$tmp/mandoc.out"; then
      fail "mandoc warns about $p:"
      sed 's/^/  /' "$tmp/mandoc.out" >&2
    fi
  done
fi

if test $status -eq 0; then
  echo "check-man: $nfunc functions documented, $npages pages listed, $linted formatted without warnings"
fi
exit $status
