#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check-trace.py - checks Chrome trace files (the JSON Trace Event Format)
with a consumer independent of libshmap: Python's json module, and the
format's rules as trace viewers (Perfetto, chrome://tracing) apply them.

Usage: check-trace.py [--summary] FILE...
Exit status 0 when every file passes, 1 otherwise (one line per problem).

Rules checked, per event:
  - an object with "name" and "cat" (non-empty strings), "ph" one of the
    phases libshmap writes (X complete, B/E begin/end, M metadata), and
    "pid" and "tid" integers;
  - X, B, E: "ts" a number >= 0; X: "dur" a number >= 0; thread tracks use
    tids >= 1 (tools set tid 0 aside for a process's own events);
  - M: "name" one of process_name, process_sort_index, thread_name,
    thread_sort_index, with "args" holding "name" (a string) or
    "sort_index" (an integer); process-wide metadata on tid 0;
and across events:
  - B and E pair up per (pid, tid), last opened first closed, with the
    same name, and E not before its B;
  - slices on one track nest: two X slices either do not overlap or one
    lies inside the other (viewers drop slices that straddle);
  - every track with slices has exactly one thread_name, every pid one
    process_name, and a track's name is not given twice.
Numbers are read as decimals (not binary floats), so nesting is exact.
"""
import decimal
import json
import sys

PHASES = {"X", "B", "E", "M"}
META = {"process_name": "name", "process_sort_index": "sort_index",
        "thread_name": "name", "thread_sort_index": "sort_index"}


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v):
    return isinstance(v, (int, decimal.Decimal)) and not isinstance(v, bool)


def check(path):
    errors = []

    def bad(i, ev, msg):
        name = ev.get("name") if isinstance(ev, dict) else None
        errors.append("%s: event %d (%s): %s" % (path, i, name, msg))

    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f, parse_float=decimal.Decimal)
    except (OSError, ValueError) as e:
        return ["%s: not a JSON file: %s" % (path, e)], {}
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        unit = doc.get("displayTimeUnit", "ms")
        if unit not in ("ms", "ns"):
            errors.append("%s: displayTimeUnit %r is not ms or ns" % (path, unit))
    else:
        events = doc
    if not isinstance(events, list):
        return errors + ["%s: no traceEvents array" % path], {}

    open_b = {}      # (pid, tid) -> stack of (name, ts)
    slices = {}      # (pid, tid) -> [(ts, end, index)]
    tnames = {}      # (pid, tid) -> count of thread_name
    pnames = {}      # pid -> count of process_name
    pids = set()
    cats = {}
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            bad(i, ev, "not an object")
            continue
        for key in ("name", "cat", "ph"):
            if not isinstance(ev.get(key), str) or not ev[key]:
                bad(i, ev, "no %s (a non-empty string)" % key)
        ph = ev.get("ph")
        if ph not in PHASES:
            bad(i, ev, "phase %r is not one of %s" % (ph, sorted(PHASES)))
            continue
        pid, tid = ev.get("pid"), ev.get("tid")
        if not is_int(pid) or not is_int(tid):
            bad(i, ev, "pid %r and tid %r must be integers" % (pid, tid))
            continue
        cats[ev.get("cat")] = cats.get(ev.get("cat"), 0) + 1
        track = (pid, tid)
        if ph == "M":
            name = ev.get("name")
            if name not in META:
                bad(i, ev, "unknown metadata event")
                continue
            args = ev.get("args")
            key = META[name]
            val = args.get(key) if isinstance(args, dict) else None
            if key == "name" and not (isinstance(val, str) and val):
                bad(i, ev, "args.name is not a non-empty string")
            if key == "sort_index" and not is_int(val):
                bad(i, ev, "args.sort_index is not an integer")
            if name.startswith("process_"):
                if tid != 0:
                    bad(i, ev, "process metadata on tid %d, not 0" % tid)
                if name == "process_name":
                    pnames[pid] = pnames.get(pid, 0) + 1
            else:
                if tid < 1:
                    bad(i, ev, "a thread track with tid %d (tids start at 1)" % tid)
                if name == "thread_name":
                    tnames[track] = tnames.get(track, 0) + 1
            continue
        pids.add(pid)
        if tid < 1:
            bad(i, ev, "a slice on tid %d (tids start at 1)" % tid)
        ts = ev.get("ts")
        if not is_num(ts) or ts < 0:
            bad(i, ev, "ts %r is not a number >= 0" % (ts,))
            continue
        if ph == "X":
            dur = ev.get("dur")
            if not is_num(dur) or dur < 0:
                bad(i, ev, "dur %r is not a number >= 0" % (dur,))
                continue
            slices.setdefault(track, []).append((ts, ts + dur, i))
        elif ph == "B":
            open_b.setdefault(track, []).append((ev.get("name"), ts, i))
        else:
            stack = open_b.get(track)
            if not stack:
                bad(i, ev, "an E event with no open B on its track")
                continue
            bname, bts, bi = stack.pop()
            if bname != ev.get("name"):
                bad(i, ev, "E closes %r (event %d), not itself" % (bname, bi))
            if ts < bts:
                bad(i, ev, "E at %s is before its B at %s" % (ts, bts))
            slices.setdefault(track, []).append((bts, ts, bi))
    for track, stack in open_b.items():
        for name, ts, i in stack:
            errors.append("%s: event %d (%s): B never closed on track %s"
                          % (path, i, name, track))
    for track, lst in slices.items():
        if tnames.get(track, 0) != 1:
            errors.append("%s: track pid %d tid %d has %d thread_name events, want 1"
                          % (path, track[0], track[1], tnames.get(track, 0)))
        # Longest first among equal starts, so parents come before children.
        lst.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for ts, end, i in lst:
            while stack and stack[-1][1] <= ts:
                stack.pop()
            if stack and end > stack[-1][1]:
                errors.append("%s: event %d [%s, %s] overlaps event %d [%s, %s] "
                              "on track pid %d tid %d without nesting in it"
                              % (path, i, ts, end, stack[-1][2], stack[-1][0],
                                 stack[-1][1], track[0], track[1]))
                continue
            stack.append((ts, end, i))
    for track, n in tnames.items():
        if n > 1:
            errors.append("%s: track pid %d tid %d is named %d times"
                          % (path, track[0], track[1], n))
    for pid in pids | set(pnames):
        if pnames.get(pid, 0) != 1:
            errors.append("%s: pid %d has %d process_name events, want 1"
                          % (path, pid, pnames.get(pid, 0)))
    return errors, cats


def main(argv):
    summary = "--summary" in argv
    files = [a for a in argv if a != "--summary"]
    if not files:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    status = 0
    for path in files:
        errors, cats = check(path)
        for e in errors:
            print(e)
        if errors:
            status = 1
        elif summary:
            print("%s: ok, events by category: %s" % (path, ", ".join(
                "%s %d" % (c, n) for c, n in sorted(cats.items()))))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
