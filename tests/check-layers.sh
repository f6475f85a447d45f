#!/bin/sh
# SPDX-License-Identifier: MIT
# The layering check: every folder of src/ is a layer, and a file may use
# only its own folder and the folders of lower layers.  The order is written
# once, in the ```layers block of ARCHITECTURE.md.  Two kinds of arrow are
# read: #include lines between the sources (from the source tree) and
# symbols one object uses and another defines (from the built objects, so
# calls made by inline functions of a header count where they are made).
# Any arrow from a folder to one of the same or a higher layer fails, and so
# does any cycle between folders.
#
#   check-layers.sh [SRCDIR [BUILDDIR]]
#
# SRCDIR holds src/ and ARCHITECTURE.md (default: $srcdir or .), BUILDDIR the
# built objects (default: .).  SHMAPTEST_LAYERS_FILE names another table file
# (the self-test uses it).
set -eu

src=${1:-${srcdir:-.}}
build=${2:-.}
table=${SHMAPTEST_LAYERS_FILE:-$src/ARCHITECTURE.md}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -f "$table" ]; then
	echo "check-layers: no table: $table" >&2
	exit 1
fi
# "level folder folder ..." lines, between ```layers and ```.
awk '/^```layers/ {on = 1; next} on && /^```/ {exit} on && NF' "$table" \
	> "$tmp/layers"
if [ ! -s "$tmp/layers" ]; then
	echo "check-layers: $table has no \`\`\`layers block" >&2
	exit 1
fi

# A file's folder: its directory relative to the top ("src", "src/coll").
folder_of() {
	d=${1%/*}
	d=${d%/.libs}
	echo "${d#"$2"/}"
}

# Arrows from #include lines: "from-file to-folder what".
(cd "$src" && find src -name '*.[ch]' | LC_ALL=C sort) > "$tmp/files"
while read -r f; do
	dir=${f%/*}
	sed -n 's/^[ \t]*#[ \t]*include[ \t]*"\([^"]*\)".*/\1/p' "$src/$f" |
	while read -r inc; do
		if [ -f "$src/$dir/$inc" ]; then
			to=$dir/$inc
		elif [ -f "$src/src/$inc" ]; then
			to=src/$inc
		else
			continue # config.h, shmap.h: not in a layer
		fi
		tod=${to%/*}
		# "src/coll/../x.h" and the like: normalise by hand.
		case $to in *..*) echo "check-layers: $f: include $inc climbs out" >&2 ;; esac
		[ "$tod" = "$dir" ] || echo "$f $tod #include \"$inc\""
	done
done < "$tmp/files" > "$tmp/arrows"

# Arrows from symbols: the objects of the library, one per source.
objs=$(cd "$build" && find src -name 'libshmap_core_la-*.o' | LC_ALL=C sort)
if [ -z "$objs" ]; then
	echo "check-layers: no objects under $build/src (build first)" >&2
	exit 1
fi
for o in $objs; do
	case $o in */.libs/*) continue ;; esac # the PIC twin, if both exist
	base=${o##*/libshmap_core_la-}
	src_file=$(folder_of "$o" "")/${base%.o}.c
	nm --defined-only "$build/$o" | awk -v f="$src_file" \
		'NF == 3 && $2 ~ /^[TDBRGSVW]$/ {print $3, f}'
done > "$tmp/defs"
if [ ! -s "$tmp/defs" ]; then # only PIC objects were built
	for o in $objs; do
		base=${o##*/libshmap_core_la-}
		src_file=$(folder_of "$o" "")/${base%.o}.c
		nm --defined-only "$build/$o" | awk -v f="$src_file" \
			'NF == 3 && $2 ~ /^[TDBRGSVW]$/ {print $3, f}'
	done > "$tmp/defs"
	pic=1
else
	pic=0
fi
for o in $objs; do
	case $o in */.libs/*) [ $pic = 1 ] || continue ;; *) [ $pic = 0 ] || continue ;; esac
	base=${o##*/libshmap_core_la-}
	src_file=$(folder_of "$o" "")/${base%.o}.c
	nm -u "$build/$o" | awk -v f="$src_file" '{print $NF, f}'
done > "$tmp/uses"
awk 'NR == FNR {def[$1] = $2; next}
     ($1 in def) {split(def[$1], p, "/"); d = def[$1]; sub(/\/[^\/]*$/, "", d);
                  s = $2; sub(/\/[^\/]*$/, "", s);
                  if (d != s) print $2, d, "uses " $1 " (" def[$1] ")"}' \
	"$tmp/defs" "$tmp/uses" >> "$tmp/arrows"

# Judge each arrow against the table.
status=0
awk 'NR == FNR {for (i = 2; i <= NF; i++) level[$i] = $1; next}
     {
	from = $1; sub(/\/[^\/]*$/, "", from); to = $2
	what = $0; sub(/^[^ ]* [^ ]* /, "", what)
	if (!(from in level)) { print "check-layers: " $1 ": folder " from " is not in the layers table"; bad = 1; next }
	if (!(to in level))   { print "check-layers: " $1 ": folder " to " is not in the layers table"; bad = 1; next }
	if (level[to] >= level[from]) {
		print "check-layers: " $1 " (" from ", layer " level[from] ") " what \
		      ": points " (level[to] == level[from] ? "sideways" : "up") " to " to " (layer " level[to] ")"
		bad = 1
	}
	edge[from " " to] = 1
     }
     END {
	# Cycles between folders (none can exist when every arrow points
	# down, but say so plainly if the table is ever loosened).
	for (e in edge) { split(e, p, " "); succ[p[1]] = succ[p[1]] " " p[2]; node[p[1]]; node[p[2]] }
	for (n in node) {
		# Depth-first search from n for a path back to n.
		top = 0; stack[++top] = n; delete seen
		while (top > 0) {
			v = stack[top--]
			m = split(succ[v], s, " ")
			for (i = 1; i <= m; i++) {
				if (s[i] == n) { print "check-layers: cycle through " n; bad = 1; top = 0; break }
				if (!(s[i] in seen)) { seen[s[i]]; stack[++top] = s[i] }
			}
		}
	}
	exit bad
     }' "$tmp/layers" "$tmp/arrows" > "$tmp/report" || status=1
LC_ALL=C sort -u "$tmp/report"
if [ $status = 0 ]; then
	n=$(wc -l < "$tmp/arrows")
	echo "check-layers: $n arrows between folders, all pointing down"
fi
exit $status
