# SPDX-License-Identifier: MIT
# examples.sh - sourced by tests/mpi/run.sh and tests/mpi/netns.sh:
#
#   run_examples NP SCHED LAUNCHER
#
# runs every example of $b/examples alone and through LAUNCHER (a shell
# function running its arguments on NP processes) with SHMAP_SCHED=SCHED,
# and sets fail=1 (with a message) for one that fails or prints other lines
# than alone.  Uses $b, $tmp and $limit of the caller, and $tagged: when
# set, LAUNCHER tags every line of the ranks' own output (Open MPI's
# --tag-output, "[1,0]<stdout>:"), and only those lines are compared;
# the launcher's own messages (a warning of its rsh agent, say) are shown
# but cannot make an example that printed the right lines fail.
run_examples() {
  np=$1 sched=$2 launcher=$3
  # Every example, unchanged, on np processes: it must succeed and print
  # the lines one process prints.  Devices print their own lines, in an
  # order that varies from run to run (and with it the process a line
  # comes from), so the lines are compared sorted; a message naming a
  # device also names its process under mpirun, which is left out.
  # 18_processes and 12_moe print from process 0 only: those compare
  # exactly.  17_mlp_ladder's pipeline mesh has 2 devices: not on 4
  # processes.  23_explore explores device orders, which needs every
  # device on one process (shmap_explore(3)): not under a launcher.
  for ex in "$b"/examples/[0-9][0-9]_*; do
    case $ex in *.o|*.c) continue ;; esac
    [ -x "$ex" ] || continue
    name=${ex##*/}
    if [ "$np" = 4 ] && [ "$name" = 17_mlp_ladder ]; then
      echo "== np=$np SHMAP_SCHED=$sched: examples/$name: skipped (a mesh of 2 devices)"
      continue
    fi
    if [ "$name" = 23_explore ]; then
      echo "== np=$np SHMAP_SCHED=$sched: examples/$name: skipped (exploring needs one process)"
      continue
    fi
    echo "== np=$np SHMAP_SCHED=$sched: examples/$name"
    # Standard output and standard error apart: lines of the two streams
    # interleave differently from run to run.
    SHMAP_SCHED=$sched timeout -k 10 "$limit" "$ex" >"$tmp/one" 2>"$tmp/one.err" ||
      { echo "FAIL: $name alone"; cat "$tmp/one" "$tmp/one.err"; fail=1; }
    "$launcher" "$ex" >"$tmp/many.raw" 2>"$tmp/many.err.raw" || {
      echo "FAIL: $name (np=$np, $sched)"; cat "$tmp/many.raw" "$tmp/many.err.raw"
      fail=1; continue; }
    if [ -n "${tagged:-}" ]; then
      sed -n 's/^\[[0-9]*,[0-9]*\]<stdout>://p' "$tmp/many.raw" >"$tmp/many"
      sed -n 's/^\[[0-9]*,[0-9]*\]<stderr>://p' "$tmp/many.err.raw" >"$tmp/many.err"
      # What the launcher said itself, for the log.
      grep -h -v -E '^\[[0-9]+,[0-9]+\]<std(out|err)>:' "$tmp/many.raw" "$tmp/many.err.raw" |
        sed 's/^/   launcher: /'
    else
      mv "$tmp/many.raw" "$tmp/many"
      mv "$tmp/many.err.raw" "$tmp/many.err"
    fi
    case $name in
    18_processes|12_moe) cmp -s "$tmp/one" "$tmp/many" ;;
    *) sed 's/ on process [0-9]* (host [^)]*)//g' "$tmp/many" | sort >"$tmp/many.s"
       sort "$tmp/one" | cmp -s - "$tmp/many.s" ;;
    esac || {
      echo "FAIL: $name printed differently on $np processes:"
      diff "$tmp/one" "$tmp/many"
      fail=1
    }
    sed 's/ on process [0-9]* (host [^)]*)//g' "$tmp/many.err" | sort >"$tmp/many.s"
    sort "$tmp/one.err" | cmp -s - "$tmp/many.s" || {
      echo "FAIL: $name printed differently on stderr on $np processes:"
      sort "$tmp/one.err" | diff - "$tmp/many.s"
      fail=1
    }
  done
}
