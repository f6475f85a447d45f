/* SPDX-License-Identifier: MIT */
/*
 * debug.c - what helps people see what their devices do, as observers of
 * the runtime: a registry of live meshes (walked by the gdb extension) and
 * the Chrome trace writer (one track per device, opens in Perfetto), which
 * collects the events the devices recorded (sched/trace.c).  The runtime
 * calls them through the hooks registered below; the watchdog is in
 * watchdog.c.
 */
#include "debug/debug.h"

#include "device/device.h"
#include "kinds.h"
#include "proc/proc.h"
#include "sched/trace.h"
#include "settings.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

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

/* Around fork(): 0 before (take the registry and trace locks, so that no
 * other thread holds them in the child's copy), 1 in the parent after, 2
 * in the child after (release them). */
static void debug_fork(int phase)
{
  if (phase == 0) {
    pthread_mutex_lock(&registry_lock);
    pthread_mutex_lock(&trace_lock);
  } else {
    pthread_mutex_unlock(&trace_lock);
    pthread_mutex_unlock(&registry_lock);
  }
}

/* 1 while a trace records (sched/trace.c takes events), 2 while one is
 * being stopped, 0 with none. */
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
      char coords[SHMAP__DEVNAME_MAX];
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
    shmap__op_format(mesh, e->op, o, sizeof o);
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

/* A device's predicted schedule (a rehearsal's, src/rehearse/): a track
 * of its own after the devices' and their requests', named after the
 * device, with the body and each collective as the fabric would run
 * them, from the body's measured start. */
static void trace_predicted(strbuf *b, shmap__runtime *rt, int d, int pid)
{
  shmap__dev *dev = &rt->devs[d];
  if (!dev->dbg.nptev)
    return;
  int tid = rt->ndev + 1 + rt->ndev * SHMAP_MAX_REQUESTS + d;
  char coords[SHMAP__DEVNAME_MAX];
  shmap__mesh_devname(rt->mesh, d, coords, sizeof coords);
  sep(b);
  sb_printf(b, "{\"name\":\"thread_name\",\"cat\":\"__metadata\","
               "\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":%d,"
               "\"args\":{\"name\":\"%s predicted\"}}",
            pid, tid, coords);
  for (size_t i = 0; i < dev->dbg.nptev; i++) {
    const shmap__tev *e = &dev->dbg.ptev[i];
    if (e->t1 < trace_t0)
      continue;
    char when[96], o[360];
    when_format(e, when, sizeof when);
    shmap__op_format(rt->mesh, e->op, o, sizeof o);
    const char *over = strstr(o, " over ");
    sep(b);
    sb_printf(b, "{\"name\":\"%s\",\"cat\":\"predicted\",\"ph\":\"X\","
                 "\"pid\":%d,\"tid\":%d,%s,"
                 "\"args\":{\"axes\":\"%s\",\"bytes\":%llu,"
                 "\"fabric\":\"%s\"}}",
              e->op ? shmap__kind_name((int)(e->op & 0xff)) : "body", pid,
              tid, when, e->op && over ? over + 6 : "",
              (unsigned long long)e->bytes, e->job ? e->job : "");
  }
  dev->dbg.nptev = 0;
}

/* Append device d's track and events, and forget the events. */
static void trace_device(strbuf *b, shmap__runtime *rt, int d, int pid)
{
  shmap__dev *dev = &rt->devs[d];
  const shmap_mesh *mesh = rt->mesh;
  char coords[SHMAP__DEVNAME_MAX];
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
                e->job ? e->job : "body",
                !e->job ? "body"
                : strcmp(e->job, "shmap_wait") == 0 || strcmp(e->job, "shmap_cost") == 0
                    ? "call"
                                                    : "placement",
                pid, tid, when, e->seq);
    } else if ((e->op & 0xff) == SHMAP__NESTED_BODY) {
      /* A nested map's body, inside the outer body on the same track. */
      char o[360];
      shmap__op_format(mesh, e->op, o, sizeof o);
      const char *over = strstr(o, " over ");
      sb_printf(b, "{\"name\":\"nested body\",\"cat\":\"body\","
                   "\"ph\":\"X\",\"pid\":%d,\"tid\":%d,%s,"
                   "\"args\":{\"axes\":\"%s\",\"collectives\":%u}}",
                pid, tid, when, over ? over + 6 : "", e->seq);
    } else {
      char o[360], ax[360];
      shmap__op_format(mesh, e->op, o, sizeof o);
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
  trace_predicted(b, rt, d, pid);
  trace_dropped += dev->dbg.tev_dropped;
  dev->dbg.tev_dropped = 0;
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
  for (int d = 0; d < rt->ndev; d++)
    /* Another process runs the devices it does not have, and writes their
     * tracks. */
    if (shmap__dev_local(mesh, d))
      trace_device(b, rt, d, pid);
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
  shmap__trace_record(true);
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
  shmap__trace_record(false);
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
  if (shmap__trace_writing() && shmap_trace_stop() != 0)
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

static const shmap__rt_hooks registry_hooks = {
    .added = shmap__registry_add,
    .removed = shmap__registry_remove,
};

static void debug_register(void)
{
  shmap__runtime_hooks(&registry_hooks);
  shmap__fork_hook(debug_fork);
  shmap__watchdog_register();
}

/* Called by every mesh's creation, before its runtime exists: every
 * runtime then enters the registry (and SHMAP_TRACE is read at the first).
 * A call, not a load-time constructor, so that a program linked against
 * the static library keeps the registry, the trace and the watchdog. */
void shmap__debug_init(void)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, debug_register);
}
