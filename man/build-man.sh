#!/bin/sh
# SPDX-License-Identifier: MIT
# build-man.sh VERSION OUTDIR PAGE... - the manual pages as installed.
#
# For each source page man/NAME.S it writes OUTDIR/manS/NAME.S with the
# version filled into the .TH line's source field ("libshmap" becomes
# "libshmap VERSION"), and for every other name listed in the page's NAME
# section, OUTDIR/manS/OTHER.S holding ".so manS/NAME.S", so that
# "man shmap_pmax" shows the page of shmap_psum.  The source pages carry no
# version and no links: they are written once, and "man -l man/NAME.S"
# reads any of them from the source tree.
set -e
if test $# -lt 3; then
  echo "usage: $0 VERSION OUTDIR PAGE..." >&2
  exit 2
fi
version=$1
out=$2
shift 2
rm -rf "$out"
for page in "$@"; do
  base=${page##*/}
  name=${base%.*}
  sect=${base##*.}
  mkdir -p "$out/man$sect"
  sed "/^\.TH /s/\"libshmap[^\"]*\"/\"libshmap $version\"/" "$page" > "$out/man$sect/$base"
  if ! grep '^\.TH ' "$out/man$sect/$base" | grep "\"libshmap $version\"" >/dev/null; then
    echo "build-man.sh: $page: no .TH line with a \"libshmap\" source field" >&2
    exit 1
  fi
  # The names before "\-" in the NAME section.
  others=$(sed -n '/^\.SH  *"*NAME/,/^\.SH/p' "$page" | sed '1d;$d' |
           tr '\n' ' ' | sed 's/\\-.*//; s/,/ /g')
  for other in $others; do
    test "$other" = "$name" && continue
    case $other in *[!a-z0-9_-]*) continue ;; esac
    if test -f "$out/man$sect/$other.$sect" && ! grep '^\.so ' "$out/man$sect/$other.$sect" >/dev/null; then
      continue # a page of its own wins over a link
    fi
    echo ".so man$sect/$base" > "$out/man$sect/$other.$sect"
  done
done
