/* SPDX-License-Identifier: MIT */
/*
 * rehearse.c - the rehearsal of a map on a described cluster.  While a
 * rehearsed map runs, its devices record their events as for a trace
 * (sched/trace.c): each collective with its bytes, group and destination,
 * each request's start and wait, each cost annotation.  When the map is
 * done, the events of every device are replayed on the fabric: compute
 * between collectives takes the annotated roofline (or, without
 * annotations, the time measured here), a collective starts when the last
 * member of its group reaches it and lasts its alpha-beta price
 * (price.c), and a request started before compute and waited after it
 * costs only what the compute did not hide.  The predicted time of the
 * map is the latest device's end: the critical path over devices.
 */
#include "rehearse/rehearse.h"

#include "rehearse/spread.h"
#include "group.h"
#include "kinds.h"
#include "proc/proc.h"
#include "sched/trace.h"
#include "settings.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { IT_BEGIN, IT_END, IT_COLL, IT_START, IT_WAIT, IT_COST, IT_MEM };

/* One event of one device, in the order the body made them. */
typedef struct item {
  int what;
  uint64_t t0, t1;
  const shmap__tev *ev; /* the collective's event (COLL, START) */
  uint32_t k;           /* the call number (COLL, START, WAIT) */
  double flops, bytes;  /* COST */
} item;

/* What one axis set (the axes of a call) moved and exposed. */
typedef struct axstat {
  uint64_t op_axes; /* the op word's axes bits */
  char label[SHMAP__AXES_MAX];
  char level[SHMAP__FABRIC_NAME_MAX];
  long calls;
  double bytes, exposed;
} axstat;

#define NOTES_MAX 16
#define AXSTATS_MAX 32

struct shmap__rehearsal {
  shmap__runtime *rt;
  shmap_fabric *fabric;
  size_t *mark, *rmark; /* each device's event counts at the start */
  int ndev;
  /* The replay. */
  item **items;
  int *nitems, *cursor;
  double *now, *compute, *exposed;
  bool *annotated, *done;
  uint64_t *last;       /* the real time the previous item ended */
  uint32_t maxk;
  double *arrive;       /* [dev * maxk + k]: NAN until the device got there */
  const shmap__tev **ev; /* [dev * maxk + k] */
  axstat ax[AXSTATS_MAX];
  int nax;
  char notes[NOTES_MAX][160];
  int nnotes;
  shmap_ctx *ctx; /* the map's contexts: their blocks' bytes */
  bool from_env;  /* SHMAP_REHEARSE asked for it, not the map's option */
  const char *trace; /* the fabric's kept name while a trace records */
  shmap__tev *tevs;   /* the events of every device's records */
  shmap__rrec *mem;   /* each device's memory record */
};

static void note(shmap__rehearsal *rh, const char *fmt, ...)
    SHMAP__PRINTF(2, 3);
static void note(shmap__rehearsal *rh, const char *fmt, ...)
{
  char buf[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  for (int i = 0; i < rh->nnotes; i++)
    if (strcmp(rh->notes[i], buf) == 0)
      return;
  if (rh->nnotes < NOTES_MAX)
    snprintf(rh->notes[rh->nnotes++], sizeof rh->notes[0], "%s", buf);
}

/* ---- the setting -------------------------------------------------------- */

static const char *env_spec;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void env_read(void) { env_spec = shmap__setting_rehearse(); }

const char *shmap__rehearse_spec(const char *spec)
{
  if (spec && *spec)
    return spec;
  pthread_once(&env_once, env_read);
  return env_spec;
}

shmap__rehearsal *shmap__rehearse_begin(shmap__runtime *rt, const char *spec)
{
  shmap_fabric *f;
  if (shmap_fabric_load(&f, spec) != 0) {
    fprintf(stderr, "shmap: rehearsal off for this map: %s\n",
            shmap_errmsg());
    return NULL;
  }
  shmap__rehearsal *rh = calloc(1, sizeof *rh);
  int n = rt->mesh->ndev;
  if (rh) {
    rh->mark = calloc((size_t)n, sizeof *rh->mark);
    rh->rmark = calloc((size_t)n, sizeof *rh->rmark);
  }
  if (!rh || !rh->mark || !rh->rmark) {
    fprintf(stderr, "shmap: rehearsal off for this map: out of memory\n");
    if (rh)
      free(rh->mark), free(rh->rmark);
    free(rh);
    shmap_fabric_free(f);
    return NULL;
  }
  rh->rt = rt;
  rh->fabric = f;
  rh->from_env = spec == env_spec;
  rh->ndev = n;
  /* Before the mesh's first map its devices do not exist yet, and have
   * recorded nothing. */
  for (int d = 0; rt->devs && d < n; d++) {
    rh->mark[d] = rt->devs[d].dbg.ntev;
    rh->rmark[d] = rt->devs[d].dbg.nrtev;
  }
  shmap__rehearse_record(true);
  return rh;
}

/* ---- a device's items ---------------------------------------------------- */

static int item_cmp(const void *a, const void *b)
{
  const item *x = a, *y = b;
  if (x->t0 != y->t0)
    return x->t0 < y->t0 ? -1 : 1;
  return x->what == IT_BEGIN ? -1 : y->what == IT_BEGIN ? 1 : 0;
}

/* The start time of request k of device d (its "request" event). */
static uint64_t request_start(const shmap__dev *dev, size_t from, uint32_t k,
                              uint64_t dflt)
{
  for (size_t i = from; i < dev->dbg.nrtev; i++)
    if (dev->dbg.rtev[i].job && dev->dbg.rtev[i].seq == k)
      return dev->dbg.rtev[i].t0;
  return dflt;
}

/* An event of device d's own track as a record; false to skip it. */
static bool rec_of(shmap__rehearsal *rh, int d, const shmap__tev *e,
                   shmap__rrec *r)
{
  *r = (shmap__rrec){.dev = d, .t0 = e->t0, .t1 = e->t1, .op = e->op,
                     .bytes = e->bytes, .vbytes = e->vbytes, .gn = e->gn,
                     .peer = e->peer, .k = e->seq};
  int kind = (int)(e->op & 0xff);
  if (e->op == 0 && !e->job)
    r->what = IT_BEGIN;
  else if (e->op == 0 && strcmp(e->job, "shmap_cost") == 0) {
    r->what = IT_COST;
    r->flops = (double)e->bytes;
    r->mbytes = (double)e->vbytes;
  } else if (e->op == 0 && strcmp(e->job, "shmap_wait") == 0)
    r->what = IT_WAIT;
  else if (e->op == 0 || kind == SHMAP__NESTED_BODY) {
    note(rh, "%s inside the body: not priced",
         e->op == 0 ? e->job : "a nested map");
    return false;
  } else if (kind == SHMAP__NESTED) {
    return false; /* the agreement on a nested map: one word */
  } else
    r->what = IT_COLL;
  return true;
}

/* Device d's memory at its peak as a record (spread.h): the arena's
 * count, and the input blocks it shares with the arrays (live for the
 * whole map). */
static shmap__rrec mem_rec(shmap__rehearsal *rh, int d)
{
  shmap_ctx *ctx = &rh->ctx[d];
  const struct shmap__memcount *m = &ctx->mem;
  uint64_t shared = 0;
  int nshared = 0;
  for (int k = 0; k < ctx->nin; k++)
    if (ctx->in && ctx->in[k] && !shmap__arena_find(ctx, ctx->in[k])) {
      shared += shmap_block_nbytes(ctx->in[k]);
      nshared++;
    }
  return (shmap__rrec){
      .dev = d, .what = IT_MEM, .vbytes = m->peak + shared,
      .gn = m->npeak[SHMAP__CHUNK_IN] + nshared,
      .peer = m->npeak[SHMAP__CHUNK_OUT],
      .k = (uint32_t)m->npeak[SHMAP__CHUNK_SCRATCH],
      .t0 = m->bpeak[SHMAP__CHUNK_IN] + shared,
      .t1 = m->bpeak[SHMAP__CHUNK_OUT], .op = m->bpeak[SHMAP__CHUNK_SCRATCH]};
}

/* This process's records: for each of its devices, its memory, the
 * events of its body (begin, collectives, waits, annotations) and the
 * starts of its requests (with their transfers' fields). */
static int local_recs(shmap__rehearsal *rh, shmap__rrec **out, size_t *nout)
{
  size_t cap = 0, n = 0;
  for (int d = 0; d < rh->ndev; d++)
    if (shmap__dev_local(rh->rt->mesh, d))
      cap += 1 + rh->rt->devs[d].dbg.ntev - rh->mark[d] +
             rh->rt->devs[d].dbg.nrtev - rh->rmark[d];
  shmap__rrec *r = malloc((cap ? cap : 1) * sizeof *r);
  if (!r)
    return SHMAP_ENOMEM;
  for (int d = 0; d < rh->ndev; d++) {
    if (!shmap__dev_local(rh->rt->mesh, d))
      continue;
    const shmap__dev *dev = &rh->rt->devs[d];
    r[n++] = mem_rec(rh, d);
    for (size_t i = rh->mark[d]; i < dev->dbg.ntev; i++)
      n += rec_of(rh, d, &dev->dbg.tev[i], &r[n]);
    for (size_t i = rh->rmark[d]; i < dev->dbg.nrtev; i++) {
      const shmap__tev *e = &dev->dbg.rtev[i];
      if (e->job || (e->op & 0xff) == 0)
        continue; /* the request's own slice; its transfer is the call */
      r[n] = (shmap__rrec){.dev = d, .what = IT_START, .op = e->op,
                           .bytes = e->bytes, .vbytes = e->vbytes,
                           .gn = e->gn, .peer = e->peer, .k = e->seq};
      r[n].t0 = r[n].t1 = request_start(dev, rh->rmark[d], e->seq, e->t0);
      n++;
    }
  }
  *out = r;
  *nout = n;
  return 0;
}

/* Every device's items from the records of every process: the events
 * as trace events (rh->tevs), the items in the body's order. */
static int items_build(shmap__rehearsal *rh, const shmap__rrec *r, size_t n)
{
  rh->tevs = calloc(n ? n : 1, sizeof *rh->tevs);
  if (!rh->tevs)
    return SHMAP_ENOMEM;
  for (size_t i = 0; i < n; i++)
    if (r[i].dev >= 0 && r[i].dev < rh->ndev && r[i].what != IT_MEM)
      rh->nitems[r[i].dev] += 1 + (r[i].what == IT_BEGIN);
  for (int d = 0; d < rh->ndev; d++)
    if (!(rh->items[d] = calloc((size_t)rh->nitems[d] + 1, sizeof(item))))
      return SHMAP_ENOMEM;
  memset(rh->nitems, 0, sizeof *rh->nitems * (size_t)rh->ndev);
  for (size_t i = 0; i < n; i++) {
    int d = r[i].dev;
    if (d < 0 || d >= rh->ndev)
      continue;
    if (r[i].what == IT_MEM) {
      rh->mem[d] = r[i];
      continue;
    }
    rh->tevs[i] = (shmap__tev){r[i].t0, r[i].t1, r[i].op, r[i].bytes,
                               r[i].k, NULL, 0, r[i].vbytes, r[i].gn,
                               r[i].peer};
    item *it = &rh->items[d][rh->nitems[d]++];
    *it = (item){.what = r[i].what, .t0 = r[i].t0, .t1 = r[i].t1,
                 .ev = &rh->tevs[i], .k = r[i].k, .flops = r[i].flops,
                 .bytes = r[i].mbytes};
    if (it->what == IT_BEGIN) /* the body's end as an item of its own */
      rh->items[d][rh->nitems[d]++] =
          (item){.what = IT_END, .t0 = r[i].t1, .t1 = r[i].t1};
    if (it->what == IT_COLL || it->what == IT_START)
      rh->maxk = it->k + 1 > rh->maxk ? it->k + 1 : rh->maxk;
    rh->annotated[d] |= it->what == IT_COST;
  }
  for (int d = 0; d < rh->ndev; d++)
    qsort(rh->items[d], (size_t)rh->nitems[d], sizeof(item), item_cmp);
  return 0;
}

/* ---- the price of one call --------------------------------------------- */

static void op_axes(uint64_t op, int axes[], int *naxes)
{
  *naxes = (int)(op >> 8 & 0xf);
  for (int k = 0; k < *naxes; k++)
    axes[k] = (int)(op >> (12 + 4 * k) & 0xf);
}

/* The call's phases, one per level of its axes, fastest level first. */
static int phases(shmap__rehearsal *rh, const int axes[], int naxes,
                  shmap__phase ph[])
{
  const shmap_mesh *mesh = rh->rt->mesh;
  int np = 0;
  for (int k = 0; k < naxes; k++) {
    const shmap__level *lv = shmap__fabric_axis(rh->fabric, mesh, axes[k]);
    int n = mesh->sizes[axes[k]], i = 0;
    while (i < np && ph[i].lv != lv)
      i++;
    if (i == np)
      ph[np++] = (shmap__phase){lv, 1, 0, 0};
    ph[i].n *= n;
    ph[i].naxes++;
    ph[i].hops += lv->topo == SHMAP__TOPO_RING ? n / 2 : n - 1;
  }
  for (int i = 0; i < np; i++) {
    bool torus = ph[i].lv->topo == SHMAP__TOPO_RING ||
                 ph[i].lv->topo == SHMAP__TOPO_LINE;
    if (!torus) /* one switch or full mesh over the axes together */
      ph[i].naxes = 1, ph[i].hops = 0;
  }
  for (int i = 1; i < np; i++) /* insertion sort by bandwidth, fastest first */
    for (int j = i; j > 0 && ph[j].lv->bw > ph[j - 1].lv->bw; j--) {
      shmap__phase t = ph[j];
      ph[j] = ph[j - 1];
      ph[j - 1] = t;
    }
  return np;
}

/* A reduction over the phases: reduce-scatter fastest first, then
 * all-gather back slowest first (the hierarchical rule); one level is one
 * all-reduce. */
static double price_reduce(const shmap__phase ph[], int np, double v,
                           bool scatter_only)
{
  if (np == 1 && !scatter_only)
    return shmap__price_all_reduce(&ph[0], v);
  double t = 0, b = v;
  for (int i = 0; i < np; i++) {
    t += shmap__price_reduce_scatter(&ph[i], b);
    b /= ph[i].n;
  }
  for (int i = np - 1; i >= 0 && !scatter_only; i--) {
    b *= ph[i].n;
    t += shmap__price_all_gather(&ph[i], b);
  }
  return t;
}

/* A message's hops on each level of the fabric. */
typedef struct route {
  int hops[SHMAP__FABRIC_LEVELS];
} route;

/* The dimension-order route of a ppermute message from s to t over the
 * call's axes: per level its hops, and the links it takes into links[]
 * (as numbers), *nl of them. */
static void route_of(shmap__rehearsal *rh, int s, int t, const int axes[],
                     int naxes, route *r, int64_t links[], int *nl)
{
  const shmap_mesh *mesh = rh->rt->mesh;
  int cur = s;
  for (int k = 0; k < naxes; k++) {
    int a = axes[k], n = mesh->sizes[a], st = mesh->strides[a];
    const shmap__level *lv = shmap__fabric_axis(rh->fabric, mesh, a);
    int li = (int)(lv - rh->fabric->levels);
    int from = cur / st % n, to = t / st % n, diff = to - from;
    if (diff == 0)
      continue;
    if (lv->topo == SHMAP__TOPO_SWITCH || lv->topo == SHMAP__TOPO_FULL) {
      /* Out of the source's port and into the destination's (a switch),
       * or the one link between them. */
      r->hops[li] += 1;
      int dst = cur + diff * st;
      links[(*nl)++] = lv->topo == SHMAP__TOPO_FULL
                           ? ((int64_t)cur * SHMAP_MAX_DEVICES + dst) * 4 + 3
                           : ((int64_t)cur * 16 + a) * 4 + 2;
      if (lv->topo == SHMAP__TOPO_SWITCH)
        links[(*nl)++] = ((int64_t)dst * 16 + a) * 4 + 1;
      cur = dst;
      continue;
    }
    int dir = diff > 0 ? 1 : -1, steps = diff > 0 ? diff : -diff;
    if (lv->topo == SHMAP__TOPO_RING && steps > n - steps)
      dir = -dir, steps = n - steps; /* the short way round */
    r->hops[li] += steps;
    for (int h = 0; h < steps; h++) {
      int pos = cur / st % n, next = (pos + dir + n) % n;
      links[(*nl)++] = (((int64_t)cur * 16 + a) * 4) + (dir > 0 ? 0 : 1) + 8;
      cur += (next - pos) * st;
    }
  }
}

static int cmp64(const void *a, const void *b)
{
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* A ppermute: every member's message routed, each link's load counted
 * over the whole group, and the slowest message's price. */
static double price_ppermute(shmap__rehearsal *rh, const int members[], int n,
                             uint32_t k, const int axes[], int naxes)
{
  int per = 0;
  for (int a = 0; a < naxes; a++)
    per += rh->rt->mesh->sizes[axes[a]] + 2;
  int64_t *all = malloc(sizeof *all * (size_t)n * (size_t)per);
  route *rt = calloc((size_t)n, sizeof *rt);
  int *nl = calloc((size_t)n, sizeof *nl);
  double worst = 0;
  if (!all || !rt || !nl) {
    note(rh, "ppermute: out of memory while routing, not priced");
    goto out;
  }
  int total = 0;
  for (int i = 0; i < n; i++) {
    const shmap__tev *e = rh->ev[(size_t)members[i] * rh->maxk + k];
    if (e && e->peer >= 0)
      route_of(rh, members[i], e->peer, axes, naxes, &rt[i],
               all + (size_t)i * per, &nl[i]);
  }
  int64_t *sorted = malloc(sizeof *sorted * (size_t)n * (size_t)per + 1);
  if (!sorted)
    goto out;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < nl[i]; j++)
      sorted[total++] = all[(size_t)i * per + j];
  qsort(sorted, (size_t)total, sizeof *sorted, cmp64);
  for (int i = 0; i < n; i++) {
    const shmap__tev *e = rh->ev[(size_t)members[i] * rh->maxk + k];
    if (!e || e->peer < 0)
      continue;
    int load = 1;
    for (int j = 0; j < nl[i]; j++) {
      int64_t l = all[(size_t)i * per + j];
      int64_t *p = bsearch(&l, sorted, (size_t)total, sizeof l, cmp64);
      int c = 0;
      while (p > sorted && p[-1] == l)
        p--;
      while (p + c < sorted + total && p[c] == l)
        c++;
      load = c > load ? c : load;
    }
    double t = 0;
    for (int li = 0; li < rh->fabric->nlevels; li++)
      t += shmap__price_p2p(&rh->fabric->levels[li], (double)e->vbytes,
                            rt[i].hops[li], load);
    worst = t > worst ? t : worst;
  }
  free(sorted);
out:
  free(all);
  free(rt);
  free(nl);
  return worst;
}

/* The seconds of call k of the group `members` (n of them), by its kind;
 * *lvname: the level of its slowest phase. */
static double price_call(shmap__rehearsal *rh, const int members[], int n,
                         uint32_t k, const char **lvname)
{
  const shmap__tev *e0 = NULL;
  double v = 0, sent = 0;
  for (int i = 0; i < n; i++) {
    const shmap__tev *e = rh->ev[(size_t)members[i] * rh->maxk + k];
    if (!e)
      continue;
    e0 = e0 ? e0 : e;
    v = (double)e->vbytes > v ? (double)e->vbytes : v;
    sent = (double)e->bytes > sent ? (double)e->bytes : sent;
  }
  int axes[SHMAP_MAX_AXES], naxes, kind = (int)(e0->op & 0xff);
  op_axes(e0->op, axes, &naxes);
  shmap__phase ph[SHMAP_MAX_AXES];
  int np = phases(rh, axes, naxes, ph);
  *lvname = ph[np - 1].lv->name;
  if (e0->gn > 0 && e0->gn < n) {
    /* axis_index_groups: data moves within groups of gn members. */
    note(rh, "axis_index_groups priced as groups of %d on level %s, as "
             "if their members were neighbours", e0->gn, ph[np - 1].lv->name);
    ph[0] = (shmap__phase){ph[np - 1].lv, e0->gn, 1, 0};
    np = 1;
  }
  switch (kind) {
  case SHMAP__PREDUCE:
    note(rh, "preduce priced as a psum of its bytes (no rule for a user's "
             "reduction)");
    /* fall through */
  case SHMAP__PSUM: case SHMAP__PMAX: case SHMAP__PMIN: case SHMAP__PMEAN:
    return price_reduce(ph, np, v, false);
  case SHMAP__PSUM_SCATTER:
    return price_reduce(ph, np, v, true);
  case SHMAP__PBROADCAST:
    note(rh, "pbroadcast priced as an all_gather of its block (no rule "
             "for a broadcast)");
    /* fall through */
  case SHMAP__ALL_GATHER: {
    double t = 0, b = v;
    for (int i = np - 1; i >= 0; i--) {
      b *= ph[i].n;
      t += shmap__price_all_gather(&ph[i], b);
    }
    return t;
  }
  case SHMAP__RAGGED_ALL_TO_ALL:
    v = sent; /* the bytes it actually moved, the busiest member's */
    /* fall through */
  case SHMAP__ALL_TO_ALL: {
    double t = 0;
    for (int i = 0; i < np; i++)
      t += shmap__price_all_to_all(&ph[i], v);
    return t;
  }
  case SHMAP__PPERMUTE:
    return price_ppermute(rh, members, n, k, axes, naxes);
  default:
    note(rh, "%s: no rule, not priced", shmap__kind_name(kind));
    return 0;
  }
}

/* Bytes and exposed time of a call, by its axes. */
static void account(shmap__rehearsal *rh, const shmap__tev *e,
                    const char *level, double exposed)
{
  uint64_t key = e->op & 0xffffffffff00u;
  int i = 0;
  while (i < rh->nax && rh->ax[i].op_axes != key)
    i++;
  if (i == rh->nax) {
    if (i == AXSTATS_MAX)
      return;
    rh->nax++;
    rh->ax[i].op_axes = key;
    int axes[SHMAP_MAX_AXES], naxes;
    op_axes(e->op, axes, &naxes);
    shmap__axes_format(rh->rt->mesh, axes, naxes, rh->ax[i].label,
                       sizeof rh->ax[i].label);
    snprintf(rh->ax[i].level, sizeof rh->ax[i].level, "%s", level);
  }
  rh->ax[i].calls++;
  rh->ax[i].bytes += (double)e->vbytes;
  rh->ax[i].exposed += exposed;
}

/* ---- the replay ---------------------------------------------------------- */

/* Whether every member of device d's group for call k has reached it;
 * then *t: the last arrival, and the group in members[]. */
static bool group_ready(shmap__rehearsal *rh, int d, const item *it,
                        int members[], int *n, double *t)
{
  int axes[SHMAP_MAX_AXES], naxes, rank;
  op_axes(it->ev->op, axes, &naxes);
  *n = shmap__group(rh->rt->mesh, axes, naxes, d, members, &rank);
  *t = 0;
  for (int i = 0; i < *n; i++) {
    if (!rh->nitems[members[i]])
      continue; /* a device that ran no body (a replica) */
    double a = rh->arrive[(size_t)members[i] * rh->maxk + it->k];
    if (isnan(a))
      return false;
    *t = a > *t ? a : *t;
  }
  return true;
}

/* The end of call k on device d, or NAN while a member has not reached
 * it. */
static double call_end(shmap__rehearsal *rh, int d, const item *it,
                       const char **lv)
{
  int members[SHMAP_MAX_DEVICES], n;
  double t;
  if (!group_ready(rh, d, it, members, &n, &t))
    return NAN;
  return t + price_call(rh, members, n, it->k, lv);
}

/* The fabric's name as the trace writer shows it after the rehearsal is
 * gone: interned in a small table for the life of the process. */
static const char *name_kept(const char *name)
{
  static char kept[8][SHMAP__FABRIC_NAME_MAX];
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  const char *r = "rehearsal";
  pthread_mutex_lock(&lock);
  for (int i = 0; i < 8; i++)
    if (!kept[i][0] || strcmp(kept[i], name) == 0) {
      if (!kept[i][0])
        snprintf(kept[i], sizeof kept[i], "%s", name);
      r = kept[i];
      break;
    }
  pthread_mutex_unlock(&lock);
  return r;
}

/* A slice of device d's predicted schedule, from s0 to s1 seconds after
 * its body's measured start, for the trace's second timeline. */
static void predict(shmap__rehearsal *rh, int d, double s0, double s1,
                    uint64_t op, uint64_t bytes)
{
  /* Only this process's devices: the others' clocks are not this one's. */
  if (!rh->trace || !shmap__dev_local(rh->rt->mesh, d) || !rh->nitems[d] ||
      rh->items[d][0].what != IT_BEGIN)
    return;
  uint64_t base = rh->items[d][0].t0;
  shmap__trace_predicted(&rh->rt->devs[d],
                         &(shmap__tev){base + (uint64_t)(s0 * 1e9),
                                       base + (uint64_t)(s1 * 1e9), op, bytes,
                                       0, rh->trace, 0, 0, 0, -1});
}

/* The item before the next one of device d: the compute since the
 * previous item, measured here unless the body annotated its costs. */
static void gap(shmap__rehearsal *rh, int d, const item *it)
{
  if (rh->annotated[d] || it->what == IT_BEGIN)
    return;
  double g = it->t0 > rh->last[d] ? (double)(it->t0 - rh->last[d]) * 1e-9 : 0;
  rh->now[d] += g;
  rh->compute[d] += g;
}

/* Replay device d's items until one waits for another device's; whether
 * it moved. */
static bool step(shmap__rehearsal *rh, int d)
{
  bool moved = false;
  while (rh->cursor[d] < rh->nitems[d]) {
    item *it = &rh->items[d][rh->cursor[d]];
    if (it->what == IT_WAIT && it->k >= rh->maxk) {
      rh->cursor[d]++; /* a request whose call was not recorded */
      continue;
    }
    size_t at = (size_t)d * rh->maxk + it->k;
    const char *lv = "";
    if ((it->what == IT_COLL || it->what == IT_START) && isnan(rh->arrive[at])) {
      gap(rh, d, it);
      rh->arrive[at] = rh->now[d];
      rh->ev[at] = it->ev;
      rh->last[d] = it->what == IT_START ? it->t0 : rh->last[d];
    }
    if (it->what == IT_COLL || it->what == IT_WAIT) {
      if (it->what == IT_WAIT) {
        /* Counted once: a wait that must wait for another device comes
         * back here on a later round. */
        gap(rh, d, it);
        rh->last[d] = it->t0 > rh->last[d] ? it->t0 : rh->last[d];
      }
      if (it->what == IT_WAIT && !rh->ev[at])
        goto next; /* a request of another map, or not recorded */
      item probe = {.k = it->k, .ev = rh->ev[at]};
      double end = call_end(rh, d, &probe, &lv);
      if (isnan(end))
        return moved;
      double exposed = end > rh->now[d] ? end - rh->now[d] : 0;
      predict(rh, d, it->what == IT_WAIT ? rh->now[d] : rh->arrive[at],
              rh->now[d] + exposed, rh->ev[at]->op, rh->ev[at]->vbytes);
      rh->exposed[d] += exposed;
      account(rh, rh->ev[at], lv, exposed);
      rh->now[d] += exposed;
      rh->last[d] = it->t1;
    } else if (it->what == IT_COST) {
      double c = shmap__price_compute(rh->fabric, it->flops, it->bytes);
      rh->now[d] += c;
      rh->compute[d] += c;
    } else if (it->what == IT_BEGIN) {
      rh->last[d] = it->t0;
    } else if (it->what == IT_END) {
      gap(rh, d, it);
      rh->done[d] = true;
      predict(rh, d, 0, rh->now[d], 0, 0);
    }
  next:
    rh->cursor[d]++;
    moved = true;
  }
  return moved;
}

static int replay_alloc(shmap__rehearsal *rh)
{
  size_t n = (size_t)rh->ndev;
  rh->items = calloc(n, sizeof *rh->items);
  rh->nitems = calloc(n, sizeof *rh->nitems);
  rh->cursor = calloc(n, sizeof *rh->cursor);
  rh->now = calloc(n, sizeof *rh->now);
  rh->compute = calloc(n, sizeof *rh->compute);
  rh->exposed = calloc(n, sizeof *rh->exposed);
  rh->annotated = calloc(n, sizeof *rh->annotated);
  rh->done = calloc(n, sizeof *rh->done);
  rh->last = calloc(n, sizeof *rh->last);
  rh->mem = calloc(n, sizeof *rh->mem);
  if (!rh->items || !rh->nitems || !rh->cursor || !rh->now || !rh->compute ||
      !rh->exposed || !rh->annotated || !rh->done || !rh->last || !rh->mem)
    return SHMAP_ENOMEM;
  shmap__rrec *mine, *all = NULL;
  size_t nmine, nall = 0;
  int rc = local_recs(rh, &mine, &nmine);
  if (rc == 0) {
    rc = shmap__rehearse_gather(rh->rt->mesh, mine, nmine, &all, &nall);
    free(mine);
  }
  if (rc == 0)
    rc = items_build(rh, all, nall);
  free(all);
  if (rc)
    return rc;
  size_t m = n * (rh->maxk + 1);
  rh->maxk++;
  rh->arrive = malloc(m * sizeof *rh->arrive);
  rh->ev = calloc(m, sizeof *rh->ev);
  if (!rh->arrive || !rh->ev)
    return SHMAP_ENOMEM;
  for (size_t i = 0; i < m; i++)
    rh->arrive[i] = NAN;
  return 0;
}

/* Every device's items, round after round, until none moves. */
static void replay(shmap__rehearsal *rh)
{
  for (bool moved = true; moved;) {
    moved = false;
    for (int d = 0; d < rh->ndev; d++)
      moved |= step(rh, d);
  }
  for (int d = 0; d < rh->ndev; d++)
    if (rh->cursor[d] < rh->nitems[d]) {
      note(rh, "some devices wait for calls of devices not seen here; their "
               "times stop there");
      break;
    }
}

/* ---- the report ---------------------------------------------------------- */

static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;
static char *last_report;
static int map_count;
/* The run so far: the predicted times of its rehearsed maps, added up
 * (maps run one after another), and the times they took here. */
static double run_predicted, run_measured;

/* The peak bytes of device d's blocks (its memory record); past the
 * fabric's capacity, a message naming the device, the map and the blocks
 * live at the peak goes into `over` (and, for this process's devices, to
 * stderr). */
static uint64_t memory(shmap__rehearsal *rh, int d, json_t *over)
{
  const shmap__rrec *m = &rh->mem[d];
  if ((double)m->vbytes <= rh->fabric->memcap)
    return m->vbytes;
  char name[SHMAP__DEVNAME_MAX], msg[SHMAP__MSG_MAX];
  shmap__mesh_devname(rh->rt->mesh, d, name, sizeof name);
  snprintf(msg, sizeof msg,
           "map %d: %s holds %llu bytes of blocks at its peak, over the "
           "%.0f bytes of a %s device; live then: %d input blocks (%llu "
           "bytes), %d output blocks (%llu bytes), %d scratch blocks (%llu "
           "bytes)",
           map_count, name, (unsigned long long)m->vbytes, rh->fabric->memcap,
           rh->fabric->name, m->gn, (unsigned long long)m->t0, m->peer,
           (unsigned long long)m->t1, (int)m->k, (unsigned long long)m->op);
  json_array_append_new(over, json_string(msg));
  if (shmap__dev_local(rh->rt->mesh, d))
    fprintf(stderr, "shmap: rehearsal on %s: %s\n", rh->fabric->name, msg);
  return m->vbytes;
}

static json_t *report_devices(shmap__rehearsal *rh, double *pred,
                              double *measured, json_t *over)
{
  json_t *devs = json_array();
  const shmap_mesh *mesh = rh->rt->mesh;
  for (int d = 0; d < rh->ndev; d++) {
    if (!rh->nitems[d])
      continue;
    char name[SHMAP__DEVNAME_MAX];
    shmap__mesh_devname(mesh, d, name, sizeof name);
    const item *b = &rh->items[d][0];
    double real = b->what == IT_BEGIN ? (double)(b->t1 - b->t0) * 1e-9 : 0;
    *pred = rh->now[d] > *pred ? rh->now[d] : *pred;
    *measured = real > *measured ? real : *measured;
    uint64_t peak = memory(rh, d, over);
    json_array_append_new(
        devs, json_pack("{s:s,s:f,s:f,s:f,s:s,s:I}", "device", name,
                        "predicted_s", rh->now[d], "compute_s",
                        rh->compute[d], "exposed_comm_s", rh->exposed[d],
                        "compute_from",
                        rh->annotated[d] ? "annotations" : "measured here",
                        "peak_bytes", (json_int_t)peak));
  }
  return devs;
}

static json_t *report_json(shmap__rehearsal *rh)
{
  const shmap_mesh *mesh = rh->rt->mesh;
  char axes[256] = "";
  for (int a = 0; a < mesh->naxes; a++)
    shmap__cat(axes, sizeof axes, "%s%s=%d", a ? ", " : "", mesh->names[a],
               mesh->sizes[a]);
  double pred = 0, measured = 0;
  json_t *over = json_array();
  json_t *devs = report_devices(rh, &pred, &measured, over);
  run_predicted += pred;
  run_measured += measured;
  json_t *ax = json_array();
  for (int i = 0; i < rh->nax; i++)
    json_array_append_new(
        ax, json_pack("{s:s,s:s,s:I,s:f,s:f}", "axes", rh->ax[i].label,
                      "level", rh->ax[i].level, "calls",
                      (json_int_t)rh->ax[i].calls, "bytes", rh->ax[i].bytes,
                      "exposed_s", rh->ax[i].exposed));
  json_t *notes = json_array();
  for (int i = 0; i < rh->nnotes; i++)
    json_array_append_new(notes, json_string(rh->notes[i]));
  return json_pack("{s:i,s:s,s:s,s:s,s:f,s:f,s:f,s:f,s:f,s:o,s:o,s:o,s:o}",
                   "map", map_count, "fabric", rh->fabric->name, "source",
                   rh->fabric->source, "mesh", axes, "predicted_s", pred,
                   "measured_here_s", measured, "run_predicted_s",
                   run_predicted, "run_measured_here_s", run_measured,
                   "memory_capacity", rh->fabric->memcap, "devices", devs,
                   "axes", ax, "memory_overflow", over, "notes", notes);
}

/* A report goes to SHMAP_REHEARSE_OUT when set; else to stderr when the
 * setting SHMAP_REHEARSE asked for it (a program that asked through the
 * map's option reads shmap_rehearse_report). */
static void report_write(const char *text, bool from_env)
{
  const char *out = shmap__setting_rehearse_out();
  if (!out && !from_env)
    return;
  FILE *f = out ? fopen(out, "a") : stderr;
  if (!f) {
    fprintf(stderr, "shmap: SHMAP_REHEARSE_OUT=%s: cannot write\n", out);
    return;
  }
  fprintf(f, "%s%s\n", out ? "" : "shmap-rehearse: ", text);
  if (out)
    fclose(f);
}

static void rehearsal_free(shmap__rehearsal *rh)
{
  for (int d = 0; rh->items && d < rh->ndev; d++)
    free(rh->items[d]);
  free(rh->items), free(rh->nitems), free(rh->cursor), free(rh->now);
  free(rh->compute), free(rh->exposed), free(rh->annotated), free(rh->done);
  free(rh->last), free(rh->arrive), free(rh->ev), free(rh->tevs);
  free(rh->mem);
  free(rh->mark), free(rh->rmark);
  shmap_fabric_free(rh->fabric);
  free(rh);
}

void shmap__rehearse_end(shmap__rehearsal *rh, shmap_ctx *ctx, int rc)
{
  rh->ctx = ctx;
  shmap__rehearse_record(false);
  if (shmap__trace_writing())
    rh->trace = name_kept(rh->fabric->name);
  if (rc == 0 && replay_alloc(rh) == 0) {
    replay(rh);
    pthread_mutex_lock(&report_lock);
    map_count++;
    json_t *j = report_json(rh);
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17))
                   : NULL;
    json_decref(j);
    if (text) {
      free(last_report);
      last_report = text;
      report_write(text, rh->from_env);
    }
    pthread_mutex_unlock(&report_lock);
  }
  /* The events are the trace writer's when a trace records; else nobody
   * else wants them. */
  if (!shmap__trace_writing())
    for (int d = 0; d < rh->ndev; d++) {
      rh->rt->devs[d].dbg.ntev = rh->mark[d];
      rh->rt->devs[d].dbg.nrtev = rh->rmark[d];
    }
  rehearsal_free(rh);
}

SHMAP_EXTERN int shmap_rehearse_report(char *buf, size_t len)
{
  pthread_mutex_lock(&report_lock);
  int n = last_report ? snprintf(buf, len, "%s", last_report) : 0;
  if (!last_report && len)
    buf[0] = '\0';
  pthread_mutex_unlock(&report_lock);
  return n;
}

SHMAP_EXTERN int shmap_cost(shmap_ctx *ctx, double flops, double bytes)
{
  int rc = shmap__ctx_check(ctx, "shmap_cost");
  if (rc)
    return rc;
  if (!(flops >= 0) || !(bytes >= 0))
    return shmap__dev_fail(ctx, "shmap_cost", SHMAP_EINVAL,
                           "flops %g and bytes %g must be zero or positive",
                           flops, bytes);
  if (!shmap__tracing())
    return 0;
  uint64_t t = shmap__now();
  shmap__trace_full(&ctx->rt->devs[ctx->dev],
                    &(shmap__tev){t, t, 0, (uint64_t)flops, ctx->seq,
                                  "shmap_cost", 0, (uint64_t)bytes, 0, -1});
  return 0;
}
