#!/bin/sh
# SPDX-License-Identifier: MIT
# The layering check must fail on an arrow that points up or sideways, by a
# call or by an #include, and pass on a tree whose arrows all point down.
# Builds a three-layer tree of its own in a temporary directory (the
# library's own tree is checked by check-layers.sh).
set -eu
here=$(cd "${srcdir:-.}/tests" && pwd)
check=$here/check-layers.sh
cc=${SHMAPTEST_CC:-${CC:-cc}}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

mk() { # mk FILE TEXT: write a source file of the toy tree
	mkdir -p "$tmp/t/${1%/*}"
	printf '%s\n' "$2" > "$tmp/t/$1"
}
build() { # compile each .c as the library's build names its objects
	find "$tmp/t/src" -name '*.o' -delete
	for c in $(cd "$tmp/t" && find src -name '*.c'); do
		d=${c%/*}; b=${c##*/}
		$cc -c -I"$tmp/t/src" -o "$tmp/t/$d/libshmap_core_la-${b%.c}.o" "$tmp/t/$c"
	done
}
expect() { # expect RC PATTERN: run the check, compare status and output
	set +e
	SHMAPTEST_LAYERS_FILE=$tmp/t/LAYERS sh "$check" "$tmp/t" "$tmp/t" > "$tmp/out" 2>&1
	rc=$?
	set -e
	if [ $rc -ne "$1" ] || ! grep -q -- "$2" "$tmp/out"; then
		echo "FAIL: wanted status $1 and '$2'; got $rc:"; cat "$tmp/out"
		fail=1
	else
		echo "ok: status $1, $(grep -- "$2" "$tmp/out" | head -1)"
	fi
}

mkdir -p "$tmp/t"
printf '```layers\n0 src\n1 src/low\n2 src/high src/side\n```\n' > "$tmp/t/LAYERS"
mk src/base.h 'int base_fn(void);'
mk src/base.c '#include "base.h"
int base_fn(void) { return 1; }'
mk src/low/low.h 'int low_fn(void);'
mk src/low/low.c '#include "base.h"
#include "low/low.h"
int low_fn(void) { return base_fn(); }'
mk src/high/high.c '#include "low/low.h"
int high_fn(void) { return low_fn(); }'
mk src/side/side.c 'int side_fn(void) { return 2; }'
build
expect 0 'all pointing down'

# A deliberate up-call: the low layer calls the high one.
mk src/low/low.c '#include "base.h"
#include "low/low.h"
int high_fn(void);
int low_fn(void) { return base_fn() + high_fn(); }'
build
expect 1 'src/low/low.c (src/low, layer 1) uses high_fn (src/high/high.c): points up to src/high (layer 2)'
expect 1 'cycle through src/low'

# Sideways: two folders of one layer may not use each other.
mk src/low/low.c '#include "base.h"
#include "low/low.h"
int low_fn(void) { return base_fn(); }'
mk src/side/side.c 'int high_fn(void);
int side_fn(void) { return high_fn(); }'
build
expect 1 'uses high_fn (src/high/high.c): points sideways to src/high'

# An #include that points up, with no call.
mk src/side/side.c 'int side_fn(void) { return 2; }'
mk src/base.c '#include "base.h"
#include "low/low.h"
int base_fn(void) { return 1; }'
build
expect 1 'src/base.c (src, layer 0) #include "low/low.h": points up to src/low (layer 1)'

# A folder the table does not name.
mk src/base.c '#include "base.h"
int base_fn(void) { return 1; }'
mk src/extra/x.c 'int x_fn(void) { return 3; }
int base_fn(void);
int y_fn(void) { return base_fn(); }'
build
expect 1 'folder src/extra is not in the layers table'
exit $fail
