/*
 * debug.c - what helps people see what their devices do: a registry of live
 * meshes (walked by the gdb extension), the watchdog's report, and the
 * Chrome trace recorder (one track per device, opens in Perfetto).
 */
#include "runtime/debug.h"

#include "coll/desc.h"
#include "map.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

uint64_t shmap__now(void) { return uv_hrtime(); }

/* ---- registry ----------------------------------------------------------- */

/* Head of the list of live runtimes.  Not static: the gdb extension finds
 * it by name. */
shmap__runtime *shmap__registry;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static int registry_next_id;

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

void shmap__registry_remove(shmap__runtime *rt)
{
  pthread_mutex_lock(&registry_lock);
  for (shmap__runtime **p = &shmap__registry; *p; p = &(*p)->next)
    if (*p == rt) {
      *p = rt->next;
      break;
    }
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
  const char *env = getenv("SHMAP_WATCHDOG");
  if (env && *env) {
    double s = atof(env);
    if (s > 0)
      atomic_store(&watchdog_ns, (uint64_t)(s * 1e9));
  }
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

void shmap__watchdog_report(shmap__runtime *rt, uint64_t running_ns, void *out_)
{
  FILE *out = out_;
  const shmap_mesh *mesh = rt->mesh;
  char axes[256] = "";
  for (int a = 0; a < mesh->naxes; a++)
    shmap__cat(axes, sizeof axes, "%s%s=%d", a ? ", " : "", mesh->names[a],
               mesh->sizes[a]);
  uint64_t now = shmap__now();
  flockfile(out);
  fprintf(out, "shmap watchdog: a map on mesh %s has run for %.1f s; devices:\n",
          axes, (double)running_ns / 1e9);
  for (int d = 0; d < rt->ndev; d++) {
    const shmap__dev *dev = &rt->devs[d];
    int state = atomic_load_explicit(&dev->dbg.state, memory_order_acquire);
    uint64_t since = atomic_load_explicit(&dev->dbg.since, memory_order_relaxed);
    uint64_t op = atomic_load_explicit(&dev->dbg.op, memory_order_relaxed);
    double secs = since && now > since ? (double)(now - since) / 1e9 : 0;
    char name[480], what[420];
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
  }
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
static _Atomic int tracing;
static uint64_t trace_t0;
static char *trace_path;
static strbuf trace_done; /* events of meshes destroyed while tracing */
static int trace_first;   /* no event written yet */
static uint64_t trace_dropped; /* events lost for lack of memory */

bool shmap__tracing(void) { return atomic_load_explicit(&tracing, memory_order_relaxed); }

void shmap__trace_event(shmap__dev *d, uint64_t t0, uint64_t t1, uint64_t op,
                        uint64_t bytes, uint32_t seq)
{
  if (d->dbg.ntev == d->dbg.captev) {
    size_t cap = d->dbg.captev ? d->dbg.captev * 2 : 256;
    shmap__tev *t = shmap__realloc(d->dbg.tev, cap * sizeof *t);
    if (!t) {
      d->dbg.tev_dropped++;
      return;
    }
    d->dbg.tev = t;
    d->dbg.captev = cap;
  }
  d->dbg.tev[d->dbg.ntev++] = (shmap__tev){t0, t1, op, bytes, seq};
}

static void sep(strbuf *b)
{
  sb_printf(b, trace_first ? "\n" : ",\n");
  trace_first = 0;
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
  sep(b);
  sb_printf(b, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
               "\"tid\":0,\"args\":{\"name\":\"mesh %s (#%d)\"}}",
            rt->id, axes, rt->id);
  for (int d = 0; d < rt->ndev; d++) {
    shmap__dev *dev = &rt->devs[d];
    char coords[96];
    shmap__mesh_devname(mesh, d, coords, sizeof coords);
    sep(b);
    sb_printf(b, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                 "\"args\":{\"name\":\"%s\"}}", rt->id, d, coords);
    sep(b);
    sb_printf(b, "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,"
                 "\"tid\":%d,\"args\":{\"sort_index\":%d}}", rt->id, d, d);
    for (size_t i = 0; i < dev->dbg.ntev; i++) {
      const shmap__tev *e = &dev->dbg.tev[i];
      if (e->t1 < trace_t0)
        continue;
      /* A body that began before the trace did is cut at its start, so
       * the collectives inside it still nest in it. */
      uint64_t t0 = e->t0 < trace_t0 ? trace_t0 : e->t0;
      double ts = (double)(t0 - trace_t0) / 1e3;
      double dur = (double)(e->t1 - t0) / 1e3;
      sep(b);
      if (e->op == 0) {
        sb_printf(b, "{\"name\":\"body\",\"cat\":\"body\",\"ph\":\"X\","
                     "\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                     "\"args\":{\"collectives\":%u}}",
                  rt->id, d, ts, dur, e->seq);
      } else if ((e->op & 0xff) == SHMAP__NESTED_BODY) {
        /* A nested map's body, inside the outer body on the same track. */
        char o[360];
        op_format(mesh, e->op, o, sizeof o);
        const char *over = strstr(o, " over ");
        sb_printf(b, "{\"name\":\"nested body\",\"cat\":\"body\","
                     "\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
                     "\"dur\":%.3f,\"args\":{\"axes\":\"%s\","
                     "\"collectives\":%u}}",
                  rt->id, d, ts, dur, over ? over + 6 : "", e->seq);
      } else {
        char o[360], ax[360];
        op_format(mesh, e->op, o, sizeof o);
        const char *over = strstr(o, " over ");
        snprintf(ax, sizeof ax, "%s", over ? over + 6 : "");
        /* Collectives put their dtype + 1 in the op's top byte. */
        int dt = (int)(e->op >> 56) - 1;
        sb_printf(b, "{\"name\":\"%s\",\"cat\":\"collective\",\"ph\":\"X\","
                     "\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                     "\"args\":{\"axes\":\"%s\",\"dtype\":\"%s\","
                     "\"bytes\":%llu,\"call\":%u}}",
                  shmap__kind_name((int)(e->op & 0xff)), rt->id, d, ts, dur, ax,
                  shmap_dtype_name((shmap_dtype)dt),
                  (unsigned long long)e->bytes, e->seq);
      }
    }
    dev->dbg.ntev = 0;
    trace_dropped += dev->dbg.tev_dropped;
    dev->dbg.tev_dropped = 0;
  }
}

void shmap__trace_runtime_gone(shmap__runtime *rt)
{
  pthread_mutex_lock(&trace_lock);
  if (atomic_load(&tracing))
    trace_runtime(&trace_done, rt);
  pthread_mutex_unlock(&trace_lock);
  if (rt->devs)
    for (int d = 0; d < rt->ndev; d++)
      free(rt->devs[d].dbg.tev);
}

SHMAP_EXTERN int shmap_trace_start(const char *path)
{
  if (!path || !*path)
    return shmap__err(SHMAP_EINVAL, "shmap_trace_start: path is empty");
  pthread_mutex_lock(&trace_lock);
  if (atomic_load(&tracing)) {
    pthread_mutex_unlock(&trace_lock);
    return shmap__err(SHMAP_ESTATE,
                      "shmap_trace_start: a trace is already being recorded "
                      "to %s", trace_path);
  }
  /* Fail now, not at the end of a long run, when the file cannot be
   * written. */
  FILE *probe = fopen(path, "w");
  if (!probe) {
    int e = errno;
    pthread_mutex_unlock(&trace_lock);
    return shmap__err(SHMAP_ESYS, "shmap_trace_start: cannot write %s: %s",
                      path, strerror(e));
  }
  fclose(probe);
  char *p = strdup(path);
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
  atomic_store(&tracing, 1);
  pthread_mutex_unlock(&trace_lock);
  return 0;
}

SHMAP_EXTERN int shmap_trace_stop(void)
{
  pthread_mutex_lock(&trace_lock);
  if (!atomic_load(&tracing)) {
    pthread_mutex_unlock(&trace_lock);
    return shmap__err(SHMAP_ESTATE, "shmap_trace_stop: no trace is being recorded");
  }
  atomic_store(&tracing, 0);
  strbuf b = trace_done;
  trace_done = (strbuf){0};
  /* Live meshes: wait for any running map, then take their events. */
  pthread_mutex_lock(&registry_lock);
  for (shmap__runtime *rt = shmap__registry; rt; rt = rt->next) {
    shmap__runtime_lock(rt);
    trace_runtime(&b, rt);
    shmap__runtime_unlock(rt);
  }
  pthread_mutex_unlock(&registry_lock);
  int rc = 0;
  FILE *f = fopen(trace_path, "w");
  if (!f) {
    rc = shmap__err(SHMAP_ESYS, "shmap_trace_stop: cannot write %s: %s",
                    trace_path, strerror(errno));
  } else {
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
  const char *env = getenv("SHMAP_TRACE");
  if (env && *env && shmap_trace_start(env) == 0)
    atexit(trace_atexit);
}

static void trace_env_start(void) { pthread_once(&trace_once, trace_env); }
