#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh SECONDS - fuzz the mesh, spec and axes parsers with libFuzzer.
#
# Builds tests/fuzz/fuzz_parse.c and the library sources with clang
# (-fsanitize=fuzzer,address,undefined) into a temporary directory, copies
# the seed corpus (tests/fuzz/corpus) into a scratch corpus there, and fuzzes
# for SECONDS (default 60).  Exits non-zero on any crash, sanitizer report,
# broken invariant, leak or timeout, after printing the failing input in hex.
#
# Environment:
#   FUZZ_JOBS=1|2     parallel fuzzing processes (default 1, at most 2)
#   BUILD_DIR=DIR     a configured build tree whose config.h to use
#   CC=clang-NN       the clang to use (default clang)
#   FUZZ_KEEP=1       keep the temporary directory (kept anyway on failure)
#
# Needs clang and its libFuzzer runtime (Debian 12: apt-get install clang
# libclang-rt-14-dev), pkg-config, libuv (libuv1-dev) and jansson
# (libjansson-dev, which the library links); it installs
# nothing itself.
set -u

secs=${1:-60}
case $secs in
  '' | *[!0-9]*) echo "usage: $0 SECONDS" >&2; exit 2 ;;
esac
jobs=${FUZZ_JOBS:-1}
case $jobs in
  1 | 2) ;;
  *) echo "run.sh: FUZZ_JOBS must be 1 or 2" >&2; exit 2 ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
cc=${CC:-clang}
# configure's CC (usually gcc) is no use here: only clang has libFuzzer.
case $("$cc" --version 2>/dev/null) in
  *clang*) ;;
  *) cc=clang ;;
esac

missing() {
  echo "run.sh: $1" >&2
  echo "run.sh: install it first (Debian 12, as root: apt-get install -y clang libclang-rt-14-dev pkg-config libuv1-dev libjansson-dev)" >&2
  exit 1
}
command -v "$cc" >/dev/null 2>&1 || missing "clang not found"
command -v pkg-config >/dev/null 2>&1 || missing "pkg-config not found"
uv=$(pkg-config --cflags --libs libuv 2>/dev/null) || missing "libuv not found by pkg-config"
jansson=$(pkg-config --cflags --libs jansson 2>/dev/null) ||
  missing "jansson not found by pkg-config"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/shmap-fuzz.XXXXXX") || exit 1
keep=${FUZZ_KEEP:-}
# shellcheck disable=SC2317 # called by the trap
cleanup() {
  if [ -n "$keep" ]; then
    echo "run.sh: kept $tmp"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT

# The libFuzzer runtime is a separate package from clang on Debian.
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\n{ return d && n > 1000000; }\n' >"$tmp/probe.c"
if ! "$cc" -fsanitize=fuzzer,address,undefined "$tmp/probe.c" -o "$tmp/probe" >"$tmp/probe.log" 2>&1; then
  cat "$tmp/probe.log" >&2
  missing "$cc cannot link -fsanitize=fuzzer,address,undefined (the libFuzzer runtime is missing)"
fi

# The library includes config.h: a configured tree's, or a minimal one.
mkdir -p "$tmp/include"
if [ -n "${BUILD_DIR:-}" ] && [ -f "$BUILD_DIR/config.h" ]; then
  # The parsers need no MPI, and mpi.h is on mpicc's path only.
  grep -v 'SHMAP_HAVE_MPI' "$BUILD_DIR/config.h" >"$tmp/include/config.h"
else
  echo '#define HAVE_PTHREAD_SETNAME_NP 1' >"$tmp/include/config.h"
fi

echo "run.sh: building the fuzz target with $cc"
# shellcheck disable=SC2086 # $uv and $jansson are lists of flags
if ! "$cc" -g -O1 -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
    -std=c11 -D_GNU_SOURCE -DSHMAP_LIBFUZZER \
    -I"$tmp/include" -I"$top/include" -I"$top/src" \
    "$here/fuzz_parse.c" "$top"/src/*.c "$top"/src/*/*.c \
    $uv $jansson -lm -lpthread -o "$tmp/fuzz_parse" 2>"$tmp/build.log"; then
  cat "$tmp/build.log" >&2
  echo "run.sh: build failed" >&2
  exit 1
fi

mkdir -p "$tmp/corpus" "$tmp/artifacts"
cp "$here"/corpus/* "$tmp/corpus/"
# Tokens of the three grammars, to help the mutator.
cat >"$tmp/dict" <<'EOF'
"P("
"PartitionSpec("
"None"
"'"
"\""
"("
")"
"()"
","
", "
"="
"|"
"i"
"j"
"k"
"P"
"data"
"model"
"x_1"
"PartitionSpec"
"=4096"
"abcdefghijklmnopqrstuvwxyz01234"
EOF
# The axis names of the second fixed mesh of fuzz_parse.c, alone and as the
# next item of a list, so that one mutation adds an axis to a spec.
for k in 0 1 2 3 4 5 6 7; do
  n=long_axis_name_${k}_abcdefghijklmn
  printf '"%s"\n", %s"\n", \x27%s\x27"\n' "$n" "$n" "$n"
done >>"$tmp/dict"

opts=(-max_total_time="$secs" -max_len=512 -timeout=10 -rss_limit_mb=2048
      -dict="$tmp/dict" -artifact_prefix="$tmp/artifacts/" -print_final_stats=1)
if [ "$jobs" -gt 1 ]; then
  opts+=(-jobs="$jobs" -workers="$jobs")
fi

echo "run.sh: fuzzing for ${secs}s ($jobs process(es)), $(find "$tmp/corpus" -type f | wc -l) seeds"
(cd "$tmp" && ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
   UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
   "$tmp/fuzz_parse" "${opts[@]}" "$tmp/corpus") >"$tmp/fuzz.log" 2>&1
status=$?
# (With -jobs, libFuzzer copies each job's log, fuzz-N.log, into its own.)

# Summary: executions and coverage from libFuzzer's own lines.
grep -E '^#[0-9]+.*cov:' "$tmp/fuzz.log" | tail -n 1
grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$tmp/fuzz.log"
echo "run.sh: corpus grew from $(find "$here/corpus" -type f | wc -l) to $(find "$tmp/corpus" -type f | wc -l) inputs"

failed=0
for f in "$tmp"/artifacts/*; do
  [ -e "$f" ] || continue
  failed=1
  echo "run.sh: failing input $(basename "$f") ($(wc -c <"$f") bytes), hex:"
  od -An -tx1 -v "$f"
done
if [ "$status" -ne 0 ] || [ "$failed" -ne 0 ] ||
   grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|invariant broken' "$tmp/fuzz.log"; then
  echo "run.sh: FAILED (libFuzzer exit status $status); the report:" >&2
  grep -n -A40 -E 'invariant broken|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$tmp/fuzz.log" | head -n 120 >&2
  keep=1 # the binary, the log and the failing inputs stay for a look
  echo "run.sh: reproduce with: $tmp/fuzz_parse $tmp/artifacts/FILE, or tests/fuzz/fuzz_parse FILE in a make check build" >&2
  [ "$status" -ne 0 ] || status=1
  exit "$status"
fi
echo "run.sh: no crashes in ${secs}s"
exit 0
