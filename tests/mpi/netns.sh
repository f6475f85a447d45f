#!/bin/sh
# SPDX-License-Identifier: MIT
# netns.sh - the MPI tests and every example across "hosts": two network
# namespaces joined by a veth pair, Open MPI's TCP transport between them,
# and mpirun starting the ranks of the second namespace through a launch
# agent that enters it (ip netns exec) instead of ssh.
#
#   tests/mpi/netns.sh [BUILDDIR]
#
# Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2 and Open MPI;
# without them it prints why and exits 77 (automake's "skipped").  The
# namespaces, the veth pair and their addresses exist only while it runs,
# under names that include its process id; nothing outside them changes.
set -u
b=${1:-${top_builddir:-.}}
b=$(cd "$b" && pwd)
: "${MPIRUN:=mpirun}"
limit=${SHMAPTEST_MPI_TIMEOUT:-300}

skip() { echo "netns.sh: SKIP: $*"; exit 77; }

command -v ip >/dev/null 2>&1 || skip "no ip command (Debian: apt-get install iproute2)"
"$MPIRUN" --version 2>/dev/null | grep -q "Open MPI" ||
  skip "$MPIRUN is not Open MPI's (the launch agent uses its plm_rsh_agent)"

tag=$$
nsa=shmap-$tag-a
nsb=shmap-$tag-b
# A /24 from 10.200.0.0/16 chosen by the process id, used only inside the
# two namespaces.
net=10.200.$((tag % 250 + 1))
ipa=$net.1
ipb=$net.2
work=$(mktemp -d)

cleanup() {
  ip netns del "$nsa" 2>/dev/null
  ip netns del "$nsb" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

ip netns add "$nsa" 2>/dev/null || skip "cannot create network namespaces here (needs root or CAP_NET_ADMIN)"
ip netns add "$nsb" || skip "cannot create a second network namespace"
ip link add "sa$tag" type veth peer name "sb$tag" 2>/dev/null ||
  skip "cannot create a veth pair (kernel module veth)"
ip link set "sa$tag" netns "$nsa" && ip link set "sb$tag" netns "$nsb" || exit 1
ip -n "$nsa" addr add "$ipa/24" dev "sa$tag" &&
  ip -n "$nsb" addr add "$ipb/24" dev "sb$tag" &&
  ip -n "$nsa" link set lo up && ip -n "$nsb" link set lo up &&
  ip -n "$nsa" link set "sa$tag" up && ip -n "$nsb" link set "sb$tag" up || exit 1

# The launch agent: mpirun calls it as `agent HOST COMMAND...` for every
# host that is not its own; HOST is an address, which names a namespace.
cat >"$work/agent" <<EOF
#!/bin/sh
host=\$1; shift
case \$host in
  $ipa) ns=$nsa ;;
  $ipb) ns=$nsb ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$work/agent"

root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
run() { # NP PROGRAM [ARGS]: ranks split evenly over the two namespaces
  np=$1; shift
  per=$((np / 2))
  timeout -k 10 "$limit" ip netns exec "$nsa" "$MPIRUN" $root --oversubscribe \
    -np "$np" --host "$ipa:$per,$ipb:$per" \
    --mca plm_rsh_agent "$work/agent" \
    --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" \
    --mca oob_tcp_if_include "$net.0/24" --tag-output \
    -x SHMAP_SCHED -x SHMAPTEST_PROP_CASES "$@"
}

# The examples, as tests/mpi/run.sh runs them (examples.sh), with the
# ranks over the two namespaces.
tmp=$work
s=$(cd "$(dirname "$0")/../.." && pwd)
. "$s/tests/mpi/examples.sh"
run_np() { run "$np" "$@"; }
# The ranks' lines are tagged (--tag-output): only they are compared, so a
# warning of Open MPI's rsh launcher (such as a failed setpgid(2) on a
# child that had already started, a race of its own) cannot fail a run.
tagged=yes

# Remote ranks get only the variables passed with -x: every process must
# run the same cases.
export SHMAPTEST_PROP_CASES=40
export SHMAP_SCHED=${SHMAP_SCHED:-auto}
fail=0
# The ranks really run in both namespaces (so they talk over the veth).
where=$(run 2 ip netns identify | sed -n 's/^\[[0-9]*,[0-9]*\]<stdout>://p' | sort | tr '\n' ' ')
echo "ranks run in: $where"
[ "$where" = "$nsa $nsb " ] || { echo "FAIL: ranks did not run in $nsa and $nsb"; exit 1; }
for np in 2 4; do
  for sched in threads fibers; do
    export SHMAP_SCHED=$sched
    echo "== two namespaces, np=$np, SHMAP_SCHED=$sched: test_mpi_proc"
    run "$np" "$b/tests/mpi/test_mpi_proc" || { echo "FAIL: test_mpi_proc"; fail=1; }
    echo "== two namespaces, np=$np, SHMAP_SCHED=$sched: test_mpi_coll"
    run "$np" "$b/tests/mpi/test_mpi_coll" || { echo "FAIL: test_mpi_coll"; fail=1; }
    echo "== two namespaces, np=$np, SHMAP_SCHED=$sched: every example"
    run_examples "$np" "$sched" run_np
  done
done
exit $fail
