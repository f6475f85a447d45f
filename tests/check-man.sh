#!/bin/sh
# check-man.sh - checks the manual pages in man/:
#  1. every public function of include/shmap.h has a page man/<name>.3
#     (a page of its own, or a ".so man3/<page>.3" link to a shared page
#     whose NAME section lists the function);
#  2. every page in man/ is listed in dist_man_MANS in man/local.mk (so that
#     "make dist" ships it and "make install" installs it), and every page
#     listed there exists;
#  3. every page formats without a warning (groff -man -ww, and mandoc -T lint
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

# Resolve a page to the file holding its text (follow one ".so" link).
resolve () {
  first=$(sed -n '1{p;q;}' "$1")
  case $first in
    .so\ *)
      target=${first#.so }
      echo "$mandir/${target##*/}" ;;
    *) echo "$1" ;;
  esac
}

missing=
for f in $(cat "$tmp/functions"); do
  page=$mandir/$f.3
  if test ! -f "$page"; then
    missing="$missing $f"
    continue
  fi
  text=$(resolve "$page")
  if test ! -f "$text"; then
    fail "man/$f.3 links to a page that does not exist: $(sed -n 1p "$page")"
    continue
  fi
  # The NAME section (from .SH NAME to the next .SH) must list the function.
  if ! sed -n '/^\.SH  *"*NAME/,/^\.SH/p' "$text" |
       grep -E "(^|[^a-z0-9_])$f([^a-z0-9_]|\$)" >/dev/null; then
    fail "the NAME section of man/${text##*/} does not list $f"
  fi
done
if test -n "$missing"; then
  fail "public functions without a man/<name>.3 page:"
  for f in $missing; do echo "  $f" >&2; done
fi
nfunc=$(wc -l < "$tmp/functions" | tr -d ' ')

# ---- 2. pages listed in man/local.mk ------------------------------------

# Words of every dist_man_MANS assignment, continuation lines included.
awk '
  /^[ \t]*dist_man_MANS[ \t]*\+?=/ { on = 1; sub(/^[^=]*=/, "") }
  on {
    cont = ($0 ~ /\\[ \t]*$/)
    sub(/#.*/, "")
    gsub(/\\/, " ")
    n = split($0, w, /[ \t]+/)
    for (k = 1; k <= n; k++) if (w[k] != "") print w[k]
    if (!cont) on = 0
  }' "$mk" | sort -u > "$tmp/listed"

(cd "$mandir" && ls) | grep '\.[37]$' | sed 's|^|man/|' | sort > "$tmp/pages"
unlisted=$(comm -23 "$tmp/pages" "$tmp/listed")
if test -n "$unlisted"; then
  fail "pages not listed in dist_man_MANS in man/local.mk:"
  for p in $unlisted; do echo "  $p" >&2; done
fi
absent=$(comm -13 "$tmp/pages" "$tmp/listed")
if test -n "$absent"; then
  fail "man/local.mk lists pages that do not exist:"
  for p in $absent; do echo "  $p" >&2; done
fi
npages=$(wc -l < "$tmp/pages" | tr -d ' ')

# Every page of its own has the sections a reader looks for.
for p in $(cat "$tmp/pages"); do
  file=$top_srcdir/$p
  case $(sed -n '1{p;q;}' "$file") in
    .so\ *) continue ;;
  esac
  case $p in
    *.3) want="NAME SYNOPSIS DESCRIPTION RETURN_VALUE SEE_ALSO" ;;
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
