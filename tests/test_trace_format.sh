#!/bin/sh
# SPDX-License-Identifier: MIT
# test_trace_format.sh - the trace files libshmap writes load in standard
# tools: tests/test_trace, run as a child with SHMAP_TRACE set (maps with
# collectives on two meshes, one destroyed before exit, and the library's
# own placement jobs), writes a trace in each scheduling mode, and
# tests/check-trace.py reads it with Python's json module and checks the
# Trace Event Format's rules.  The checker is first shown traces that break
# each rule, which it must refuse, so this test can fail.
# Skipped (exit 77) without python3.
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
if ! command -v python3 >/dev/null 2>&1; then
  echo "test_trace_format: python3 not found: trace files not checked by an independent reader (Debian: apt-get install python3)"
  exit 77
fi
checker=$top_srcdir/tests/check-trace.py
tmp=${TMPDIR:-/tmp}/shmap-trace-format.$$
mkdir "$tmp" || exit 99
trap 'rm -rf "$tmp"' 0
trap 'exit 99' 1 2 15
status=0

# ---- the checker refuses what breaks the rules -----------------------------
meta='{"name":"process_name","cat":"__metadata","ph":"M","ts":0,"pid":1,"tid":0,"args":{"name":"p"}},
{"name":"thread_name","cat":"__metadata","ph":"M","ts":0,"pid":1,"tid":1,"args":{"name":"t"}}'
ok='{"name":"body","cat":"body","ph":"X","pid":1,"tid":1,"ts":1.5,"dur":10}'
n=0
while IFS='|' read -r why ev; do
  n=$((n + 1))
  printf '{"traceEvents":[%s,\n%s]}\n' "$meta" "$ev" > "$tmp/bad$n.json"
  if python3 "$checker" "$tmp/bad$n.json" > "$tmp/out" 2>&1; then
    echo "test_trace_format: FAIL: the checker accepts a trace where $why: $ev"
    status=1
  fi
done <<'CASES'
an event has no cat|{"name":"body","ph":"X","pid":1,"tid":1,"ts":0,"dur":1}
a slice is on tid 0|{"name":"body","cat":"body","ph":"X","pid":1,"tid":0,"ts":0,"dur":1}
dur is negative|{"name":"body","cat":"body","ph":"X","pid":1,"tid":1,"ts":0,"dur":-1}
tid is not an integer|{"name":"body","cat":"body","ph":"X","pid":1,"tid":1.5,"ts":0,"dur":1}
slices straddle|{"name":"body","cat":"body","ph":"X","pid":1,"tid":1,"ts":0,"dur":10},{"name":"psum","cat":"collective","ph":"X","pid":1,"tid":1,"ts":5,"dur":10}
a B is never closed|{"name":"body","cat":"body","ph":"B","pid":1,"tid":1,"ts":0}
an E closes another name|{"name":"a","cat":"c","ph":"B","pid":1,"tid":1,"ts":0},{"name":"b","cat":"c","ph":"E","pid":1,"tid":1,"ts":1}
a track has no thread_name|{"name":"body","cat":"body","ph":"X","pid":1,"tid":2,"ts":0,"dur":1}
a pid has no process_name|{"name":"thread_name","cat":"__metadata","ph":"M","pid":2,"tid":1,"args":{"name":"t"}},{"name":"body","cat":"body","ph":"X","pid":2,"tid":1,"ts":0,"dur":1}
metadata is unknown|{"name":"thread_colour","cat":"__metadata","ph":"M","pid":1,"tid":1,"args":{}}
the file is not JSON|{"name":"body",}
CASES
printf '{"traceEvents":[%s,\n%s,\n%s]}\n' "$meta" "$ok" \
  '{"name":"psum","cat":"collective","ph":"X","pid":1,"tid":1,"ts":2,"dur":9.5}' > "$tmp/good.json"
if ! python3 "$checker" "$tmp/good.json"; then
  echo "test_trace_format: FAIL: the checker refuses a valid trace"
  status=1
fi

# ---- what libshmap writes ----------------------------------------------------
for sched in threads fibers; do
  f=$tmp/$sched.json
  if ! SHMAP_SCHED=$sched SHMAP_TRACE=$f "$top_builddir/tests/test_trace" --trace-child; then
    echo "test_trace_format: FAIL: tests/test_trace --trace-child (SHMAP_SCHED=$sched) failed"
    status=1
    continue
  fi
  if ! python3 "$checker" --summary "$f" > "$tmp/out" 2>&1; then
    echo "test_trace_format: FAIL: SHMAP_SCHED=$sched: the trace breaks the format's rules:"
    sed 's/^/  /' "$tmp/out"
    status=1
    continue
  fi
  cat "$tmp/out"
  # Every kind of event the child causes is there, under its category.
  for want in '__metadata' 'body' 'collective' 'placement'; do
    grep -q "[ ,:]$want [0-9]" "$tmp/out" || {
      echo "test_trace_format: FAIL: SHMAP_SCHED=$sched: no event of category $want"
      status=1
    }
  done
done
exit $status
