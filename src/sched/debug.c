/* SPDX-License-Identifier: MIT */
/*
 * debug.c - what helps people see what their devices do: a registry of live
 * meshes (walked by the gdb extension), the watchdog's report, and the
 * Chrome trace recorder (one track per device, opens in Perfetto).
 */
#include "sched/debug.h"

#include "coll/async.h"
#include "transport/desc.h"
#include "device/device.h"
#include "proc/proc.h"
#include "settings.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

uint64_t shmap__now(void) { return uv_hrtime(); }

uint64_t shmap__now_coarse(void)
{
#ifdef CLOCK_MONOTONIC_COARSE
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) == 0)
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
  return uv_hrtime();
}

/* ---- registry ----------------------------------------------------------- */

/*
 * Lock order.  A thread that holds several of the library's locks took
 * them in this order, and none is held while waiting for an earlier one:
 *   1. a runtime's lock (runtime.c): held by the thread that runs a map,
 *      for the whole map, so a body counts as holding its map's;
 *   2. registry_lock (here), held for list updates only;
 *   3. trace_lock (here), never held while waiting for a map;
 *   4. leaves, held for a few instructions: the statistics lock (mesh.c),
 *      the settings lock (settings.c).
 * So a body may create and destroy other meshes and start traces (2, 3),
 * and shmap_trace_stop, which must wait for running maps (1), takes no
 * other lock while it waits: it pins each runtime in the registry and
 * collects them one at a time.  A runtime destroyed meanwhile hands over
 * its events itself, or waits for the collection of its own under way.
 */

/* Head of the list of live runtimes.  Not static: the gdb extension finds
 * it by name. */
shmap__runtime *shmap__registry;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t registry_cond = PTHREAD_COND_INITIALIZER;
static int registry_next_id;
/* trace_pin values: collect its events, or being collected now. */
enum { PIN_NONE, PIN_WANTED, PIN_BUSY };

static void trace_env_start(void);

void shmap__registry_add(shmap__runtime *rt)
{
  shmap__fork_init();
  trace_env_start();
  pthread_mutex_lock(&registry_lock);
  rt->id = ++registry_next_id;
  rt->next = shmap__registry;
  shmap__registry = rt;
  pthread_mutex_unlock(&registry_lock);
}

static void trace_runtime_take(shmap__runtime *rt, bool pinned);

/* Also hands the runtime's trace events over (no map runs on it). */
void shmap__registry_remove(shmap__runtime *rt)
{
  pthread_mutex_lock(&registry_lock);
  while (rt->trace_pin == PIN_BUSY)
    pthread_cond_wait(&registry_cond, &registry_lock);
  for (shmap__runtime **p = &shmap__registry; *p; p = &(*p)->next)
    if (*p == rt) {
      *p = rt->next;
      break;
    }
  trace_runtime_take(rt, rt->trace_pin == PIN_WANTED);
  rt->trace_pin = PIN_NONE;
  pthread_mutex_unlock(&registry_lock);
}

/* ---- describing a device ------------------------------------------------ */

static void op_format(const shmap_mesh *mesh, uint64_t op, char *buf, size_t n)
{
  int axes[SHMAP_MAX_AXES] = {0}, naxes = (int)(op >> 8 & 0xf);
  if (naxes > SHMAP_MAX_AXES)
    naxes = SHMAP_MAX_AXES;
  for (int k = 0; k < naxes && k < SHMAP_MAX_AXES; k++)
    axes[k] = (int)(op >> (12 + 4 * k) & 0xf);
  char a[320];
  shmap__axes_format(mesh, axes, naxes, a, sizeof a);
  snprintf(buf, n, "%s over ", shmap__kind_name((int)(op & 0xff)));
  shmap__cat(buf, n, "%s", naxes ? a : "()");
}

void shmap__nest_format(const shmap_mesh *mesh, uint64_t nest, char *buf,
                        size_t n)
{
  buf[0] = '\0';
  int levels = (int)(nest >> 56);
  if (levels == 0 ||
      (levels == 1 && (unsigned)(nest & 0xff) == shmap__mesh_all(mesh)))
    return;
  shmap__cat(buf, n, " [");
  for (int l = 0; l < levels && l < SHMAP__NEST_LEVELS; l++) {
    char axes[320];
    shmap__mask_format(mesh, (unsigned)(nest >> (8 * l) & 0xff), axes,
                       sizeof axes);
    shmap__cat(buf, n, "%s%s over %s", l ? " > " : "",
               l ? "nested" : "map", axes);
  }
  shmap__cat(buf, n, "]");
}

/* ---- watchdog ------------------------------------------------------------ */

static _Atomic uint64_t watchdog_ns;
static pthread_once_t watchdog_once = PTHREAD_ONCE_INIT;

static void watchdog_env(void)
{
  double s = shmap__setting_watchdog();
  if (s > 0)
    atomic_store(&watchdog_ns, (uint64_t)(s * 1e9));
}

uint64_t shmap__watchdog_ns(void)
{
  pthread_once(&watchdog_once, watchdog_env);
  return atomic_load(&watchdog_ns);
}

SHMAP_EXTERN int shmap_set_watchdog(double seconds)
{
  pthread_once(&watchdog_once, watchdog_env);
  if (!(seconds >= 0) || seconds > 1e9)
    return shmap__err(SHMAP_EINVAL,
                      "shmap_set_watchdog: %g seconds is not a period (use 0 "
                      "to turn the watchdog off)", seconds);
  atomic_store(&watchdog_ns, (uint64_t)(seconds * 1e9));
  return 0;
}

/* Under MPI, for a device another process runs: its name without the
 * process (" on process 1 (host h)") in name[], and "runs in process 1
 * (host h)" in what[]; false for a device of this process. */
static bool elsewhere(const shmap_mesh *mesh, int d, char *name, size_t nn,
                      char *what, size_t nw)
{
  if (shmap__dev_local(mesh, d))
    return false;
  char where[128];
  shmap__proc_suffix(mesh, d, where, sizeof where);
  shmap__mesh_devname(mesh, d, name, nn);
  size_t len = strlen(name), wl = strlen(where);
  if (wl && len >= wl && strcmp(name + len - wl, where) == 0)
    name[len - wl] = '\0';
  const char *on = " on ";
  snprintf(what, nw, "runs in %s",
           strncmp(where, on, 4) == 0 ? where + 4 : "another process");
  return true;
}

/* Fiber mode: a device keeps its worker until it calls a collective (or
 * returns), so a body that waits for another device by other means (a
 * flag, a barrier) never ends when that device shares its worker and no
 * other worker is free to take that device over (runtime.c).  Name
 * the likely cause: the device longest in its body, and a device of the
 * same worker still to run. */
static void stuck_fiber_hint(const shmap__runtime *rt, uint64_t now, FILE *out)
{
  if (rt->mode != SHMAP__FIBERS || !rt->workers)
    return;
  int longest = -1;
  uint64_t longest_since = 0;
  for (int d = 0; d < rt->ndev; d++) {
    const shmap__dev *dev = &rt->devs[d];
    uint64_t since = atomic_load_explicit(&dev->dbg.since, memory_order_relaxed);
    if (atomic_load(&dev->dbg.state) == SHMAP__ST_BODY && since &&
        (longest < 0 || since < longest_since)) {
      longest = d;
      longest_since = since;
    }
  }
  if (longest < 0 || now < longest_since + 1000000000u)
    return;
  const shmap__worker *w = rt->devs[longest].sched.worker;
  for (int d = w->first; d < w->first + w->count; d++) {
    const shmap__dev *dev = &rt->devs[d];
    int state = atomic_load(&dev->dbg.state);
    /* Under MPI a worker's range also holds devices other processes run,
     * which take no turn here. */
    if (!shmap__dev_local(rt->mesh, d))
      continue;
    if (d == longest || state == SHMAP__ST_DONE ||
        state == SHMAP__ST_REPLICA ||
        (state == SHMAP__ST_PARKED && atomic_load(&dev->coll.finished)))
      continue;
    char a[96], b[96];
    shmap__mesh_devname(rt->mesh, longest, a, sizeof a);
    shmap__mesh_devname(rt->mesh, d, b, sizeof b);
    fprintf(out,
            "  likely cause: %s has run its body for %.1f s without calling a "
            "collective while %s, which shares its worker thread, %s; in "
            "fiber mode a device runs until it calls a collective or returns, "
            "so devices may synchronise only through collectives (a spin on "
            "a flag or a barrier between devices can wait for ever; "
            "SHMAP_SCHED=threads gives each device a thread)\n",
            a, (double)(now - longest_since) / 1e9, b,
            state == SHMAP__ST_COLL ? "waits in a collective"
                                    : "cannot start or resume");
    return;
  }
}

void shmap__watchdog_report(shmap__runtime *rt, uint64_t running_ns, void *out_)
{
  FILE *out = out_;
  const shmap_mesh *mesh = rt->mesh;
  char axes[256] = "";
  for (int a = 0; a < mesh->naxes; a++)
    shmap__cat(axes, sizeof axes, "%s%s=%d", a ? ", " : "", mesh->names[a],
               mesh->sizes[a]);
  uint64_t now = shmap__now();
  /* Under MPI each process reports its own devices: say which one. */
  char self[128] = "";
  if (mesh->place && mesh->place->nproc > 1)
    snprintf(self, sizeof self, " in process %d (host %s)", mesh->place->self,
             shmap__proc_self()->host);
  flockfile(out);
  fprintf(out, "shmap watchdog: a map on mesh %s has run for %.1f s%s; "
               "devices:\n", axes, (double)running_ns / 1e9, self);
  for (int d = 0; d < rt->ndev; d++) {
    const shmap__dev *dev = &rt->devs[d];
    char name[480], what[420];
    if (elsewhere(mesh, d, name, sizeof name, what, sizeof what)) {
      /* Its state here says nothing: its own process reports it. */
      fprintf(out, "  %s: %s\n", name, what);
      continue;
    }
    int state = atomic_load_explicit(&dev->dbg.state, memory_order_acquire);
    uint64_t since = atomic_load_explicit(&dev->dbg.since, memory_order_relaxed);
    uint64_t op = atomic_load_explicit(&dev->dbg.op, memory_order_relaxed);
    double secs = since && now > since ? (double)(now - since) / 1e9 : 0;
    shmap__mesh_devname(mesh, d, name, sizeof name);
    size_t len = strlen(name);
    shmap__nest_format(mesh, atomic_load_explicit(&dev->dbg.nest,
                                                  memory_order_relaxed),
                       name + len, sizeof name - len);
    switch (state) {
    case SHMAP__ST_INPUTS: snprintf(what, sizeof what, "building its input blocks"); break;
    case SHMAP__ST_BODY: snprintf(what, sizeof what, "running its body"); break;
    case SHMAP__ST_COLL: {
      char o[360];
      op_format(mesh, op, o, sizeof o);
      snprintf(what, sizeof what, "waiting in %s (call #%u)", o,
               atomic_load(&dev->coll.arrive));
      break;
    }
    case SHMAP__ST_DONE: snprintf(what, sizeof what, "returned from its body"); break;
    case SHMAP__ST_REPLICA: {
      /* A map over some axes: this device holds the values of the body
       * running on its host (same manual coordinates, free ones 0). */
      char host[96];
      shmap__mesh_devname(mesh, (int)op, host, sizeof host);
      snprintf(what, sizeof what, "replica of %s, waiting for its body", host);
      break;
    }
    default:
      if (atomic_load(&dev->coll.finished)) {
        snprintf(what, sizeof what, "returned from its body");
      } else {
        /* Parked since the previous map (or never run): it has waited to
         * start for as long as this map has run. */
        snprintf(what, sizeof what, "not started yet");
        secs = (double)running_ns / 1e9;
      }
      break;
    }
    bool past = strncmp(what, "returned", 8) == 0;
    fprintf(out, "  %s: %s %s%.1f s%s\n", name, what, past ? "" : "for ", secs,
            past ? " ago" : "");
    shmap__async_report(rt, d, now, out);
  }
  stuck_fiber_hint(rt, now, out);
  funlockfile(out);
  fflush(out);
}

/* ---- trace --------------------------------------------------------------- */

typedef struct strbuf {
  char *s;
  size_t len, cap;
  bool failed;
} strbuf;

static void sb_printf(strbuf *b, const char *fmt, ...) SHMAP__PRINTF(2, 3);
static void sb_printf(strbuf *b, const char *fmt, ...)
{
  if (b->failed)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0,
                      fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->failed = true;
      return;
    }
    if (b->s && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->len + (size_t)n + 1)
      cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->failed = true;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
}

static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;

void shmap__debug_fork(int phase)
{
  if (phase == 0) {
    pthread_mutex_lock(&registry_lock);
    pthread_mutex_lock(&trace_lock);
  } else {
    pthread_mutex_unlock(&trace_lock);
    pthread_mutex_unlock(&registry_lock);
  }
}
/* Recording (events are taken); trace_state also tells a trace being
 * stopped (2) from none (0). */
static _Atomic int tracing;
static int trace_state;
static uint64_t trace_t0;
/* The wall clock at trace_t0, for aligning the files of several processes
 * on several hosts (shmap-trace-merge). */
static uint64_t trace_wall0;

/* Under MPI each process writes its own file, whose meshes are numbered
 * apart from the other processes' (pid = rank * 1000 + mesh number), so
 * that merged files keep one track group per mesh and process. */
static int trace_pid(const shmap__runtime *rt)
{
  const shmap__proc *p = shmap__proc_self();
  return p->size > 1 ? p->rank * 1000 + rt->id : rt->id;
}
static char *trace_path;
static strbuf trace_done; /* events of meshes destroyed while tracing */
static int trace_first;   /* no event written yet */
static uint64_t trace_dropped; /* events lost for lack of memory */

bool shmap__tracing(void) { return atomic_load_explicit(&tracing, memory_order_relaxed); }

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
  shmap__tev e = {t0, t1, op, bytes, seq, "request", track};
  push(d, &d->dbg.rtev, &d->dbg.nrtev, &d->dbg.caprtev, &e);
}

void shmap__trace_event(shmap__dev *d, uint64_t t0, uint64_t t1, uint64_t op,
                        uint64_t bytes, uint32_t seq)
{
  trace_push(d, &(shmap__tev){t0, t1, op, bytes, seq, NULL, 0});
}

void shmap__trace_body(shmap__dev *d, uint64_t t0, uint64_t t1, uint32_t seq,
                       const char *job)
{
  trace_push(d, &(shmap__tev){t0, t1, 0, 0, seq, job, 0});
}

static void sep(strbuf *b)
{
  sb_printf(b, trace_first ? "\n" : ",\n");
  trace_first = 0;
}

/* " \"ts\":...,\"dur\":..." of an event, exact to the nanosecond. */
static void when_format(const shmap__tev *e, char *when, size_t n)
{
  uint64_t t0 = e->t0 < trace_t0 ? trace_t0 : e->t0;
  uint64_t ts = t0 - trace_t0, dur = e->t1 - t0;
  snprintf(when, n, "\"ts\":%llu.%03u,\"dur\":%llu.%03u",
           (unsigned long long)(ts / 1000), (unsigned)(ts % 1000),
           (unsigned long long)(dur / 1000), (unsigned)(dur % 1000));
}

/* A device's asynchronous requests: each request slot of the device is a
 * track of its own (tid after the devices'), on which a request is one
 * slice from its start to its completion, with the transfer its helper
 * carried out inside it.  A slot serves its next request only after the
 * previous one was waited for, so the slices of a track never overlap. */
static void trace_requests(strbuf *b, shmap__runtime *rt, int d)
{
  shmap__dev *dev = &rt->devs[d];
  const shmap_mesh *mesh = rt->mesh;
  int pid = trace_pid(rt);
  bool named[SHMAP_MAX_REQUESTS] = {false};
  for (size_t i = 0; i < dev->dbg.nrtev; i++) {
    const shmap__tev *e = &dev->dbg.rtev[i];
    if (e->t1 < trace_t0 || e->track < 0 || e->track >= SHMAP_MAX_REQUESTS)
      continue;
    int tid = rt->ndev + 1 + d * SHMAP_MAX_REQUESTS + e->track;
    if (!named[e->track]) {
      char coords[96];
      shmap__mesh_devname(mesh, d, coords, sizeof coords);
      sep(b);
      sb_printf(b, "{\"name\":\"thread_name\",\"cat\":\"__metadata\","
                   "\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"name\":\"%s requests (slot %d)\"}}",
                pid, tid, coords, e->track);
      sep(b);
      sb_printf(b, "{\"name\":\"thread_sort_index\",\"cat\":\"__metadata\","
                   "\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"sort_index\":%d}}",
                pid, tid, tid - 1);
      named[e->track] = true;
    }
    char when[96], o[360];
    when_format(e, when, sizeof when);
    op_format(mesh, e->op, o, sizeof o);
    const char *over = strstr(o, " over ");
    int dt = (int)(e->op >> 56) - 1;
    sep(b);
    sb_printf(b, "{\"name\":\"%s%s\",\"cat\":\"%s\",\"ph\":\"X\","
                 "\"pid\":%d,\"tid\":%d,%s,"
                 "\"args\":{\"axes\":\"%s\",\"dtype\":\"%s\","
                 "\"bytes\":%llu,\"call\":%u}}",
              shmap__kind_name((int)(e->op & 0xff)),
              e->job ? " request" : " transfer", e->job ? "request" : "transfer",
              pid, tid, when, over ? over + 6 : "",
              shmap_dtype_name((shmap_dtype)dt), (unsigned long long)e->bytes,
              e->seq);
  }
  dev->dbg.nrtev = 0;
}

/* Append a runtime's tracks and events, and forget the events.  Called
 * with trace_lock held and no map running on the runtime. */
static void trace_runtime(strbuf *b, shmap__runtime *rt)
{
  if (!rt->devs)
    return;
  const shmap_mesh *mesh = rt->mesh;
  char axes[256] = "";
  for (int a = 0; a < mesh->naxes; a++)
    shmap__cat(axes, sizeof axes, "%s%s=%d", a ? ", " : "", mesh->names[a],
               mesh->sizes[a]);
  int pid = trace_pid(rt);
  char where[128] = "";
  const shmap__proc *proc = shmap__proc_self();
  if (proc->size > 1)
    snprintf(where, sizeof where, " on process %d (host %s)", proc->rank,
             proc->host);
  sep(b);
  /* Metadata as Chrome writes it: category "__metadata", ts 0, and the
   * process-wide names on tid 0, which no device uses (device d is tid
   * d + 1: trace tools take tid 0 for a process's idle or main thread and
   * drop or merge its track). */
  sb_printf(b, "{\"name\":\"process_name\",\"cat\":\"__metadata\","
               "\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":0,"
               "\"args\":{\"name\":\"mesh %s (#%d)%s\"}}",
            pid, axes, rt->id, where);
  sep(b);
  sb_printf(b, "{\"name\":\"process_sort_index\",\"cat\":\"__metadata\","
               "\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":0,"
               "\"args\":{\"sort_index\":%d}}", pid, pid);
  for (int d = 0; d < rt->ndev; d++) {
    shmap__dev *dev = &rt->devs[d];
    /* Another process runs this device and writes its track. */
    if (!shmap__dev_local(mesh, d))
      continue;
    char coords[96];
    shmap__mesh_devname(mesh, d, coords, sizeof coords);
    int tid = d + 1;
    sep(b);
    sb_printf(b, "{\"name\":\"thread_name\",\"cat\":\"__metadata\","
                 "\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":%d,"
                 "\"args\":{\"name\":\"%s\"}}", pid, tid, coords);
    sep(b);
    sb_printf(b, "{\"name\":\"thread_sort_index\",\"cat\":\"__metadata\","
                 "\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":%d,"
                 "\"args\":{\"sort_index\":%d}}", pid, tid, d);
    for (size_t i = 0; i < dev->dbg.ntev; i++) {
      const shmap__tev *e = &dev->dbg.tev[i];
      if (e->t1 < trace_t0)
        continue;
      /* A body that began before the trace did is cut at its start, so
       * the collectives inside it still nest in it. */
      uint64_t t0 = e->t0 < trace_t0 ? trace_t0 : e->t0;
      /* Whole nanoseconds printed as exact decimal microseconds, so that
       * an event inside another is inside it in the file too (rounding ts
       * and dur separately could make a nested slice overlap its parent's
       * end, and trace viewers drop slices that do not nest). */
      uint64_t ts = t0 - trace_t0, dur = e->t1 - t0;
      char when[96];
      snprintf(when, sizeof when, "\"ts\":%llu.%03u,\"dur\":%llu.%03u",
               (unsigned long long)(ts / 1000), (unsigned)(ts % 1000),
               (unsigned long long)(dur / 1000), (unsigned)(dur % 1000));
      sep(b);
      if (e->op == 0) {
        /* A user's body, or a job the library runs on the devices to
         * place an array (its public function's name). */
        sb_printf(b, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\","
                     "\"pid\":%d,\"tid\":%d,%s,"
                     "\"args\":{\"collectives\":%u}}",
                  e->job ? e->job : "body", e->job ? "placement" : "body",
                  pid, tid, when, e->seq);
      } else if ((e->op & 0xff) == SHMAP__NESTED_BODY) {
        /* A nested map's body, inside the outer body on the same track. */
        char o[360];
        op_format(mesh, e->op, o, sizeof o);
        const char *over = strstr(o, " over ");
        sb_printf(b, "{\"name\":\"nested body\",\"cat\":\"body\","
                     "\"ph\":\"X\",\"pid\":%d,\"tid\":%d,%s,"
                     "\"args\":{\"axes\":\"%s\",\"collectives\":%u}}",
                  pid, tid, when, over ? over + 6 : "", e->seq);
      } else {
        char o[360], ax[360];
        op_format(mesh, e->op, o, sizeof o);
        const char *over = strstr(o, " over ");
        snprintf(ax, sizeof ax, "%s", over ? over + 6 : "");
        /* Collectives put their dtype + 1 in the op's top byte. */
        int dt = (int)(e->op >> 56) - 1;
        sb_printf(b, "{\"name\":\"%s\",\"cat\":\"collective\",\"ph\":\"X\","
                     "\"pid\":%d,\"tid\":%d,%s,"
                     "\"args\":{\"axes\":\"%s\",\"dtype\":\"%s\","
                     "\"bytes\":%llu,\"call\":%u}}",
                  shmap__kind_name((int)(e->op & 0xff)), pid, tid, when, ax,
                  shmap_dtype_name((shmap_dtype)dt),
                  (unsigned long long)e->bytes, e->seq);
      }
    }
    dev->dbg.ntev = 0;
    trace_requests(b, rt, d);
    trace_dropped += dev->dbg.tev_dropped;
    dev->dbg.tev_dropped = 0;
  }
}

/* A runtime leaves the registry (registry_lock held): keep its events
 * while a trace records, or while a stopping trace still wants them. */
static void trace_runtime_take(shmap__runtime *rt, bool pinned)
{
  pthread_mutex_lock(&trace_lock);
  if (trace_state == 1 || (trace_state == 2 && pinned))
    trace_runtime(&trace_done, rt);
  pthread_mutex_unlock(&trace_lock);
}

void shmap__trace_runtime_gone(shmap__runtime *rt)
{
  if (rt->devs)
    for (int d = 0; d < rt->ndev; d++) {
      free(rt->devs[d].dbg.tev);
      free(rt->devs[d].dbg.rtev);
    }
}

SHMAP_EXTERN int shmap_trace_start(const char *path)
{
  if (!path || !*path)
    return shmap__err(SHMAP_EINVAL, "shmap_trace_start: path is empty");
  pthread_mutex_lock(&trace_lock);
  if (trace_state != 0) {
    int busy = trace_state;
    pthread_mutex_unlock(&trace_lock);
    return shmap__err(SHMAP_ESTATE,
                      "shmap_trace_start: a trace is already being %s %s",
                      busy == 1 ? "recorded to" : "written to", trace_path);
  }
  /* Fail now, not at the end of a long run, when the file cannot be
   * written. */
  /* Under MPI each process writes path.RANK (merged by
   * shmap-trace-merge); initialising the processes first tells. */
  char *own = NULL;
  if (shmap__proc_init() == 0 && shmap__proc_self()->size > 1) {
    size_t n = strlen(path) + 16;
    own = malloc(n);
    if (!own) {
      pthread_mutex_unlock(&trace_lock);
      return shmap__err(SHMAP_ENOMEM, "shmap_trace_start: out of memory");
    }
    snprintf(own, n, "%s.%d", path, shmap__proc_self()->rank);
    path = own;
  }
  FILE *probe = fopen(path, "w");
  if (!probe) {
    int e = errno;
    pthread_mutex_unlock(&trace_lock);
    int rc = shmap__err(SHMAP_ESYS, "shmap_trace_start: cannot write %s: %s",
                        path, strerror(e));
    free(own);
    return rc;
  }
  fclose(probe);
  char *p = own ? own : strdup(path);
  if (!p) {
    pthread_mutex_unlock(&trace_lock);
    return shmap__err(SHMAP_ENOMEM, "shmap_trace_start: out of memory");
  }
  free(trace_path);
  trace_path = p;
  free(trace_done.s);
  trace_done = (strbuf){0};
  trace_first = 1;
  trace_dropped = 0;
  trace_t0 = shmap__now();
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  trace_wall0 = (uint64_t)wall.tv_sec * 1000000000u + (uint64_t)wall.tv_nsec;
  trace_state = 1;
  atomic_store(&tracing, 1);
  pthread_mutex_unlock(&trace_lock);
  return 0;
}

SHMAP_EXTERN int shmap_trace_stop(void)
{
  /* It waits for every running map to end: inside a body, its own. */
  if (shmap__current())
    return shmap__err(SHMAP_ESTATE,
                      "shmap_trace_stop: called from inside a body; stop the "
                      "trace after the map returns (it waits for running "
                      "maps, this one included)");
  pthread_mutex_lock(&trace_lock);
  if (trace_state != 1) {
    int busy = trace_state;
    pthread_mutex_unlock(&trace_lock);
    return shmap__err(SHMAP_ESTATE, "shmap_trace_stop: %s",
                      busy ? "another thread is stopping the trace"
                           : "no trace is being recorded");
  }
  trace_state = 2;
  atomic_store(&tracing, 0);
  pthread_mutex_unlock(&trace_lock);
  /* Live meshes: pin them all, then take each one's events once no map
   * runs on it, holding no other lock while waiting for its map. */
  pthread_mutex_lock(&registry_lock);
  for (shmap__runtime *rt = shmap__registry; rt; rt = rt->next)
    rt->trace_pin = PIN_WANTED;
  for (;;) {
    shmap__runtime *rt = shmap__registry;
    while (rt && rt->trace_pin != PIN_WANTED)
      rt = rt->next;
    if (!rt)
      break;
    rt->trace_pin = PIN_BUSY;
    pthread_mutex_unlock(&registry_lock);
    shmap__runtime_lock(rt);
    pthread_mutex_lock(&trace_lock);
    trace_runtime(&trace_done, rt);
    pthread_mutex_unlock(&trace_lock);
    shmap__runtime_unlock(rt);
    pthread_mutex_lock(&registry_lock);
    rt->trace_pin = PIN_NONE;
    pthread_cond_broadcast(&registry_cond);
  }
  pthread_mutex_unlock(&registry_lock);
  pthread_mutex_lock(&trace_lock);
  strbuf b = trace_done;
  trace_done = (strbuf){0};
  int rc = 0;
  FILE *f = fopen(trace_path, "w");
  if (!f) {
    rc = shmap__err(SHMAP_ESYS, "shmap_trace_stop: cannot write %s: %s",
                    trace_path, strerror(errno));
  } else {
    const shmap__proc *proc = shmap__proc_self();
    if (proc->size > 1)
      /* What shmap-trace-merge needs to align the processes' clocks. */
      fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{"
                 "\"shmap_rank\":%d,\"shmap_nproc\":%d,\"shmap_host\":\"%s\","
                 "\"shmap_clock0_ns\":%llu,\"shmap_wall0_ns\":%llu},"
                 "\"traceEvents\":[",
              proc->rank, proc->size, proc->host,
              (unsigned long long)trace_t0, (unsigned long long)trace_wall0);
    else
      fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", f);
    if (b.s)
      fwrite(b.s, 1, b.len, f);
    fputs("\n]}\n", f);
    if (fclose(f) != 0 || b.failed)
      rc = shmap__err(SHMAP_ESYS, "shmap_trace_stop: writing %s failed%s",
                      trace_path, b.failed ? " (out of memory)" : "");
    else if (trace_dropped)
      rc = shmap__err(SHMAP_ENOMEM,
                      "shmap_trace_stop: %s written, but %llu events could "
                      "not be recorded (out of memory)",
                      trace_path, (unsigned long long)trace_dropped);
  }
  free(b.s);
  trace_state = 0;
  pthread_mutex_unlock(&trace_lock);
  return rc;
}

static void trace_atexit(void)
{
  if (atomic_load(&tracing) && shmap_trace_stop() != 0)
    fprintf(stderr, "shmap: %s\n", shmap_errmsg());
}

static pthread_once_t trace_once = PTHREAD_ONCE_INIT;

static void trace_env(void)
{
  const char *env = shmap__setting_trace();
  if (!env || !*env)
    return;
  /* Said once, here: nobody checks a return code for an environment
   * variable, and a run that ends without its trace is worse than a
   * message. */
  if (shmap_trace_start(env) == 0)
    atexit(trace_atexit);
  else
    fprintf(stderr, "shmap: SHMAP_TRACE=%s: no trace will be written: %s\n",
            env, shmap_errmsg());
}

static void trace_env_start(void) { pthread_once(&trace_once, trace_env); }
