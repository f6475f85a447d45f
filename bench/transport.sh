#!/bin/sh
# SPDX-License-Identifier: MIT
# transport.sh - libshmap over MPI beside raw MPI, on this machine:
#
#   bench/transport.sh [BUILDDIR]
#
# For each layout R x D (R processes of D devices), runs bench/transport
# under `mpirun -np R` and bench/mpi_bench (the raw MPI collectives of
# bench/run's MPI column) under `mpirun -np R*D`, and prints one table:
# median microseconds per call and the ratio libshmap / raw MPI (below 1:
# libshmap is faster).  Sizes: 1 MiB and 4 MiB per device.  Needs Open MPI
# (MPIRUN=... to choose the launcher).
set -eu
b=${1:-.}
: "${MPIRUN:=mpirun}"
flags=--oversubscribe
[ "$(id -u)" = 0 ] && flags="$flags --allow-run-as-root"
sizes=1048576,4194304
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-6s %-13s %9s %12s %12s %7s\n' "R x D" op bytes "libshmap us" "MPI us" ratio
for layout in 2x1 4x1 2x2 2x4; do
  R=${layout%x*} D=${layout#*x}
  $MPIRUN $flags -np "$R" "$b/bench/transport" "$D" --sizes $sizes >"$tmp/s" 2>"$tmp/e" ||
    { cat "$tmp/e" >&2; exit 1; }
  $MPIRUN $flags -np $((R * D)) "$b/bench/mpi_bench" --sizes $sizes \
    --ops psum,all_gather,psum_scatter,ppermute >"$tmp/m" 2>"$tmp/e" ||
    { cat "$tmp/e" >&2; exit 1; }
  while read -r line; do
    op=${line#op=}; op=${op%% *}
    bytes=${line#*bytes=}; bytes=${bytes%% *}
    us=${line#*us=}
    mus=$(grep "^op=$op bytes=$bytes " "$tmp/m" | sed 's/.*us=//')
    ratio=$(awk -v a="$us" -v b="$mus" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
    printf '%-6s %-13s %9s %12s %12s %7s\n' "$layout" "$op" "$bytes" "$us" "${mus:--}" "$ratio"
  done <"$tmp/s"
done
