# SPDX-License-Identifier: MIT
# examples.sh - sourced by tests/mpi/run.sh and tests/mpi/netns.sh:
#
#   run_examples NP SCHED LAUNCHER
#
# runs every example of $b/examples alone and through LAUNCHER (a shell
# function running its arguments on NP processes) with SHMAP_SCHED=SCHED,
# and sets fail=1 (with a message) for one that fails or prints other lines
# than alone.  Uses $b, $tmp and $limit of the caller.
run_examples() {
  np=$1 sched=$2 launcher=$3
  # Every example, unchanged, on np processes: it must succeed and print
  # the lines one process prints.  Devices print their own lines, in an
  # order that varies from run to run (and with it the process a line
  # comes from), so the lines are compared sorted; a message naming a
  # device also names its process under mpirun, which is left out.
  # 18_processes and 12_moe print from process 0 only: those compare
  # exactly.  17_mlp_ladder's pipeline mesh has 2 devices: not on 4
  # processes.
  for ex in "$b"/examples/[0-9][0-9]_*; do
    case $ex in *.o|*.c) continue ;; esac
    [ -x "$ex" ] || continue
    name=${ex##*/}
    if [ "$np" = 4 ] && [ "$name" = 17_mlp_ladder ]; then
      echo "== np=$np SHMAP_SCHED=$sched: examples/$name: skipped (a mesh of 2 devices)"
      continue
    fi
    echo "== np=$np SHMAP_SCHED=$sched: examples/$name"
    SHMAP_SCHED=$sched timeout -k 10 "$limit" "$ex" >"$tmp/one" 2>&1 ||
      { echo "FAIL: $name alone"; fail=1; }
    "$launcher" "$ex" >"$tmp/many" 2>&1 ||
      { echo "FAIL: $name (np=$np, $sched)"; cat "$tmp/many"; fail=1; continue; }
    # Open MPI's rsh launcher (the two-namespace run) may warn that
    # setpgid(2) on a child failed when the child had already started its
    # program, a race of its own that changes nothing: such lines are the
    # launcher's, not the example's.
    grep -v -E '^\[[^]]*\] plm:rsh: Warning: setpgid\(' "$tmp/many" >"$tmp/many.f"
    mv "$tmp/many.f" "$tmp/many"
    case $name in
    18_processes|12_moe) cmp -s "$tmp/one" "$tmp/many" ;;
    *) sed 's/ on process [0-9]* (host [^)]*)//g' "$tmp/many" | sort >"$tmp/many.s"
       sort "$tmp/one" | cmp -s - "$tmp/many.s" ;;
    esac || {
      echo "FAIL: $name printed differently on $np processes:"
      diff "$tmp/one" "$tmp/many"
      fail=1
    }
  done
}
