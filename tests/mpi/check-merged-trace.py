#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check-merged-trace.py MERGED NPROC - checks a trace that
tools/shmap-trace-merge made from the files of an MPI job's processes, on
the mesh that ran the most maps:

  - every device of the mesh has exactly one track, named
    "device D (...) on process P (host H)", in the track group of process P
    (pid P * 1000 + mesh number), and every process has a group;
  - the clocks are aligned: a map ends in every process before the next
    map starts in any (the processes agree on a map's result before
    returning), so with one clock the k-th body slices of all devices end
    before any (k+1)-th body slice starts.
Exit status 0 when it passes; one line per problem otherwise.
"""
import json
import re
import sys
from decimal import Decimal


def main():
    path, nproc = sys.argv[1], int(sys.argv[2])
    with open(path) as f:
        events = json.load(f, parse_float=Decimal)["traceEvents"]
    problems = []
    count = {}
    for e in events:
        if e["ph"] == "X" and e["cat"] in ("body", "placement"):
            count[e["pid"] % 1000] = count.get(e["pid"] % 1000, 0) + 1
    mesh = max(sorted(count), key=lambda m: count[m])
    ndev = None
    tracks = {}
    groups = set()
    bodies = {}
    for e in events:
        if e["pid"] % 1000 != mesh:
            continue
        proc = e["pid"] // 1000
        if e["ph"] == "M" and e["name"] == "process_name":
            groups.add(proc)
            m = re.match(r"mesh (.*) \(#\d+\)", e["args"]["name"])
            ndev = 1
            for size in re.findall(r"=(\d+)", m.group(1)):
                ndev *= int(size)
        if e["ph"] == "M" and e["name"] == "thread_name":
            m = re.match(r"device (\d+) \(.*\) on process (\d+) \(host .+\)$",
                         e["args"]["name"])
            if not m:
                problems.append("track name %r" % e["args"]["name"])
                continue
            dev, owner = int(m.group(1)), int(m.group(2))
            if owner != proc:
                problems.append("device %d of process %d in the group of "
                                "process %d" % (dev, owner, proc))
            tracks.setdefault(dev, []).append(proc)
        if e["ph"] == "X" and e["cat"] in ("body", "placement") and \
                e["name"] != "nested body":
            bodies.setdefault((e["pid"], e["tid"]), []).append(
                (e["ts"], e["ts"] + e["dur"]))
    if groups != set(range(nproc)):
        problems.append("track groups of processes %s, want 0..%d"
                        % (sorted(groups), nproc - 1))
    for d in range(ndev):
        if len(tracks.get(d, [])) != 1:
            problems.append("device %d has %d tracks" %
                            (d, len(tracks.get(d, []))))
    lists = [sorted(v) for v in bodies.values()]
    if maps_wanted := int(sys.argv[3]) if len(sys.argv) > 3 else 0:
        if min(len(v) for v in lists) < maps_wanted:
            problems.append("fewer than %d maps per device" % maps_wanted)
    if len(lists) != ndev:
        problems.append("%d tracks with bodies, want %d" % (len(lists), ndev))
    maps = min(len(v) for v in lists) if lists else 0
    for k in range(maps - 1):
        end = max(v[k][1] for v in lists)
        start = min(v[k + 1][0] for v in lists)
        if end > start:
            problems.append("map %d ends at %s us in one process after map %d "
                            "starts at %s us in another: clocks not aligned"
                            % (k + 1, end, k + 2, start))
    for p in problems:
        print("%s: %s" % (path, p))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
