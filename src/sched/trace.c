/* SPDX-License-Identifier: MIT */
/*
 * trace.c - the trace recorder: each device appends its events (bodies,
 * collectives, asynchronous requests) to arrays of its own while a trace
 * records.  No lock: a device writes only its own arrays, and the trace
 * writer (src/debug/) reads them only while no map runs on the mesh.
 */
#include "sched/trace.h"

#include <stdlib.h>

/* Whether events are recorded: bit 0 set by the trace writer, the bits
 * above it a count of the rehearsed maps running; read by every device at
 * each event, so that recording costs one load and one branch when off. */
static _Atomic int tracing;

bool shmap__tracing(void)
{
  return atomic_load_explicit(&tracing, memory_order_relaxed) != 0;
}

void shmap__trace_record(bool on)
{
  if (on)
    atomic_fetch_or(&tracing, 1);
  else
    atomic_fetch_and(&tracing, ~1);
}

bool shmap__trace_writing(void) { return atomic_load(&tracing) & 1; }

void shmap__rehearse_record(bool on) { atomic_fetch_add(&tracing, on ? 2 : -2); }

static void push(shmap__dev *d, shmap__tev **tev, size_t *n, size_t *capp,
                 const shmap__tev *ev)
{
  if (*n == *capp) {
    size_t cap = *capp ? *capp * 2 : 256;
    shmap__tev *t = shmap__realloc(*tev, cap * sizeof *t);
    if (!t) {
      d->dbg.tev_dropped++;
      return;
    }
    *tev = t;
    *capp = cap;
  }
  (*tev)[(*n)++] = *ev;
}

static void trace_push(shmap__dev *d, const shmap__tev *ev)
{
  /* A progress helper records the transfers it carries out for the device
   * on the track of the request, not on the device's own (coll/async.c). */
  if (shmap__helper_for == d) {
    shmap__tev e = *ev;
    e.track = d->dbg.rtrack;
    push(d, &d->dbg.rtev, &d->dbg.nrtev, &d->dbg.caprtev, &e);
    return;
  }
  push(d, &d->dbg.tev, &d->dbg.ntev, &d->dbg.captev, ev);
}

void shmap__trace_request(shmap__dev *d, uint64_t t0, uint64_t t1, uint64_t op,
                          uint64_t bytes, uint32_t seq, int track)
{
  shmap__tev e = {t0, t1, op, bytes, seq, "request", track, 0, 0, -1};
  push(d, &d->dbg.rtev, &d->dbg.nrtev, &d->dbg.caprtev, &e);
}

void shmap__trace_event(shmap__dev *d, uint64_t t0, uint64_t t1, uint64_t op,
                        uint64_t bytes, uint32_t seq)
{
  trace_push(d, &(shmap__tev){t0, t1, op, bytes, seq, NULL, 0, 0, 0, -1});
}

void shmap__trace_full(shmap__dev *d, const shmap__tev *e) { trace_push(d, e); }

void shmap__trace_predicted(shmap__dev *d, const shmap__tev *e)
{
  push(d, &d->dbg.ptev, &d->dbg.nptev, &d->dbg.capptev, e);
}

void shmap__trace_body(shmap__dev *d, uint64_t t0, uint64_t t1, uint32_t seq,
                       const char *job)
{
  trace_push(d, &(shmap__tev){t0, t1, 0, 0, seq, job, 0, 0, 0, -1});
}

void shmap__trace_dev_free(shmap__dev *d)
{
  free(d->dbg.tev);
  free(d->dbg.rtev);
  free(d->dbg.ptev);
  d->dbg.tev = d->dbg.rtev = d->dbg.ptev = NULL;
  d->dbg.ntev = d->dbg.nrtev = d->dbg.nptev = 0;
}
