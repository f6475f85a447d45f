/* SPDX-License-Identifier: MIT */
/*
 * explore.c - exploring device interleavings from the caller's side:
 * shmap_explore() runs part of a program under many schedules of the
 * exploring mode (sched/explore.c) and checks each run; SHMAP_EXPLORE=N
 * does the same for each map of an unmodified program.  On the first
 * failure both print the schedule (SHMAP_REPLAY's value) and its critical
 * step, found by replaying the failing run's first choices and letting
 * other random continuations finish it.
 */
#include "map/map.h"

#include "hash.h"
#include "proc/proc.h"
#include "settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Continuations that must all fail for a prefix of choices to count as
 * making the failure certain. */
#define TRIALS 4
#define DEFAULT_SCHEDULES 100
#define DEFAULT_DEPTH 3

/* One way to run the program part once under a schedule: `go` returns
 * its code and stores its own digest (the API's callback, or a map). */
typedef struct attempt {
  shmap_mesh *mesh;
  int (*go)(struct attempt *a, uint64_t *digest);
  shmap_explore_fn fn; /* shmap_explore() */
  void *arg;
  shmap__map_once_fn once; /* SHMAP_EXPLORE */
  void *call;
  shmap_array **out;
  int nout;
  bool keep; /* the map's outputs go to the caller */
} attempt;

void shmap__explore_outputs(shmap__explore *x, shmap_array *const out[],
                            int nout)
{
  uint64_t h = x->out_hash;
  for (int k = 0; k < nout; k++) {
    const shmap_array *a = out[k];
    if (!a)
      continue;
    h = shmap__hash_u64(h, (uint64_t)a->dtype);
    h = shmap__hash_bytes(h, a->shape, sizeof(int64_t) * (size_t)a->rank);
    if (a->data) {
      h = shmap__hash_bytes(h, a->data,
                            (size_t)a->numel * shmap_dtype_size(a->dtype));
      continue;
    }
    for (int d = 0; a->blocks && d < a->mesh->ndev; d++)
      if (shmap__dev_local(a->mesh, d) && a->blocks[d].data)
        h = shmap__hash_bytes(h, a->blocks[d].data,
                              shmap_block_nbytes(&a->blocks[d]));
  }
  x->out_hash = h;
}

/* One run under schedule x: its code, and in *digest the hash of its
 * maps' outputs and of its own digest. */
static int run_under(attempt *a, shmap__explore *x, uint64_t *digest)
{
  shmap__runtime *rt = a->mesh->rt;
  x->maps = x->steps = 0;
  x->hash = x->out_hash = shmap__hash_init();
  x->failed = 0;
  x->nlog = 0;
  rt->explore = x;
  shmap__setting_async_check_force(1);
  uint64_t own = 0;
  int rc = a->go(a, &own);
  shmap__setting_async_check_force(-1);
  rt->explore = NULL;
  *digest = shmap__hash_u64(x->out_hash, own);
  return rc;
}

static int go_fn(attempt *a, uint64_t *digest)
{
  unsigned long long d = 0;
  int rc = a->fn(a->mesh, a->arg, &d);
  *digest = d;
  return rc;
}

static int go_map(attempt *a, uint64_t *digest)
{
  shmap_array *tmp[8], **o = a->keep ? a->out : tmp;
  if (!a->keep && a->nout > 8) {
    o = shmap__calloc((size_t)a->nout, sizeof *o);
    if (!o)
      return shmap__err(SHMAP_ENOMEM, "shmap_map: out of memory");
  }
  int rc = a->once(a->call, o);
  *digest = 0;
  if (!a->keep)
    for (int k = 0; k < a->nout; k++) {
      shmap_array_destroy(o[k]);
      o[k] = NULL;
    }
  if (o != tmp && o != a->out)
    free(o);
  return rc;
}

/* Whether a run failed: its code, or outputs unlike the reference's. */
static bool failed(int rc, uint64_t digest, const uint64_t *ref)
{
  return rc != 0 || (ref && digest != *ref);
}

/* Whether forcing the first k choices of map `map` of the failing run
 * (flog) makes the failure certain: TRIALS other continuations fail. */
static bool certain(attempt *a, const shmap__explore *fx, uint32_t map,
                    const uint16_t *flog, uint32_t k, const uint64_t *ref)
{
  for (int t = 0; t < TRIALS; t++) {
    shmap__explore x = {0};
    memcpy(x.text, fx->text, sizeof x.text);
    x.forced_map = map;
    x.forced = k ? k : 1;
    x.flog = flog;
    x.alt = shmap__hash_u64(shmap__hash_u64(shmap__hash_init(), k), (uint64_t)t);
    if (k == 0) /* nothing forced: the first choice is the continuation's */
      x.forced = 0, x.flog = NULL, snprintf(x.text, sizeof x.text, "r.%llu",
                                            (unsigned long long)x.alt);
    uint64_t dg;
    int rc = run_under(a, &x, &dg);
    shmap__explore_free(&x);
    if (!failed(rc, dg, ref))
      return false;
  }
  return true;
}

/* The critical step of the failing run fx: the shortest prefix of its
 * choices that makes the failure certain (a binary search, taking
 * certainty to grow with the prefix). */
static void critical(attempt *a, const shmap__explore *fx, const uint64_t *ref,
                     shmap_explore_result *res)
{
  res->critical_step = -1;
  res->critical_map = fx->failed ? (int)fx->fail_map
                                 : fx->maps ? (int)fx->maps - 1 : 0;
  res->critical_dev = -1;
  uint32_t n = fx->nlog;
  if (n == 0 || !fx->log)
    return;
  uint16_t *flog = shmap__malloc(n * sizeof *flog);
  if (!flog)
    return;
  memcpy(flog, fx->log, n * sizeof *flog);
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (certain(a, fx, (uint32_t)res->critical_map, flog, mid, ref))
      hi = mid;
    else
      lo = mid + 1;
  }
  if (lo > 0) {
    res->critical_step = (long)lo - 1;
    res->critical_dev = flog[lo - 1];
  }
  free(flog);
}

static void print_failure(const shmap_mesh *mesh, const shmap_explore_result *r,
                          int total)
{
  fprintf(stderr, "shmap: exploring: schedule %d of %d failed: %s\n",
          r->failed + 1, total, r->message);
  fprintf(stderr, "shmap: SHMAP_REPLAY=%s replays it\n", r->replay);
  if (r->critical_step < 0) {
    fprintf(stderr, "shmap: no critical step: the failure is certain from "
                    "the start of map %d\n", r->critical_map);
    return;
  }
  char name[SHMAP__DEVNAME_MAX];
  shmap__mesh_devname(mesh, r->critical_dev, name, sizeof name);
  fprintf(stderr, "shmap: critical step %ld of map %d: %s went first\n",
          r->critical_step, r->critical_map, name);
}

/* The text of schedule i: a random walk for even i, PCT for odd. */
static void schedule_text(char *buf, size_t n, const char *replay,
                          uint64_t seed, int depth, int i)
{
  if (replay)
    snprintf(buf, n, "%s", replay);
  else if (i % 2 == 0)
    snprintf(buf, n, "r.%llu", (unsigned long long)(seed + (uint64_t)i));
  else
    snprintf(buf, n, "p%d.%llu", depth, (unsigned long long)(seed + (uint64_t)i));
}

/* Run the schedules; the first failure ends the search (its code). */
static int search(attempt *a, int total, uint64_t seed, int depth,
                  const char *replay, bool quiet, shmap_explore_result *res)
{
  memset(res, 0, sizeof *res);
  res->failed = -1;
  res->critical_step = -1;
  uint64_t ref = 0;
  for (int i = 0; i < total; i++) {
    shmap__explore x = {0};
    schedule_text(x.text, sizeof x.text, replay, seed, depth, i);
    a->keep = i == 0;
    uint64_t dg;
    int rc = run_under(a, &x, &dg);
    res->schedules = i + 1;
    res->steps = x.steps;
    res->choices = x.hash;
    res->outputs = dg;
    if (i == 0 && rc == 0)
      ref = dg;
    if (!failed(rc, dg, i && rc == 0 ? &ref : NULL)) {
      shmap__explore_free(&x);
      continue;
    }
    res->failed = i;
    res->code = rc ? rc : SHMAP_EMISMATCH;
    snprintf(res->replay, sizeof res->replay, "%s", x.text);
    if (rc)
      snprintf(res->message, sizeof res->message, "%s", shmap_errmsg());
    else
      snprintf(res->message, sizeof res->message,
               "the outputs differ from those of the first schedule (%s)",
               res->replay);
    a->keep = false;
    critical(a, &x, rc == 0 ? &ref : NULL, res);
    shmap__explore_free(&x);
    if (!quiet)
      print_failure(a->mesh, res, total);
    return shmap__err(res->code, "%s (exploring schedule %s)", res->message,
                      res->replay);
  }
  return 0;
}

int shmap__explore_one_process(const shmap_mesh *mesh, const char *api)
{
  const shmap__place *pl = mesh->place;
  if (!pl || pl->nproc <= 1)
    return 0;
  return shmap__err(SHMAP_EINVAL, "%s: an exploring schedule runs every "
                    "device on one thread, and this mesh's %d devices run in "
                    "%d processes", api, mesh->ndev, pl->nproc);
}

SHMAP_EXTERN int shmap_explore(shmap_mesh *mesh, shmap_explore_fn run,
                               void *arg, const shmap_explore_opts *opts,
                               shmap_explore_result *res)
{
  static const shmap_explore_opts defaults;
  shmap_explore_result local;
  if (!opts)
    opts = &defaults;
  if (!res)
    res = &local;
  if (!mesh || !run)
    return shmap__err(SHMAP_EINVAL, "shmap_explore: %s is NULL",
                      mesh ? "run" : "mesh");
  if (opts->schedules < 0 || opts->depth < 0 || opts->depth > 64)
    return shmap__err(SHMAP_EINVAL, "shmap_explore: schedules=%d, depth=%d "
                      "(schedules at least 0, depth from 0 to 64)",
                      opts->schedules, opts->depth);
  int rc = shmap__explore_one_process(mesh, "shmap_explore");
  if (rc)
    return rc;
  const char *replay = opts->replay ? opts->replay : shmap__setting_replay();
  char st;
  int dp;
  uint64_t sd;
  if (replay && !shmap__parse_schedule(replay, &st, &dp, &sd))
    return shmap__err(SHMAP_EINVAL, "shmap_explore: schedule \"%.60s\" is "
                      "not valid (r.SEED or pDEPTH.SEED)", replay);
  if (mesh->rt->explore || shmap__current())
    return shmap__err(SHMAP_ESTATE, "shmap_explore: %s",
                      shmap__current() ? "called from a body"
                                       : "the mesh is being explored already");
  attempt a = {.mesh = mesh, .go = go_fn, .fn = run, .arg = arg};
  int total = replay ? 1 : opts->schedules ? opts->schedules : DEFAULT_SCHEDULES;
  return search(&a, total, opts->seed, opts->depth ? opts->depth : DEFAULT_DEPTH,
                replay, opts->quiet, res);
}

int shmap__explore_map(shmap_mesh *mesh, int n, shmap__map_once_fn once,
                       void *call, shmap_array *out[], int nout)
{
  attempt a = {.mesh = mesh, .go = go_map, .once = once, .call = call,
               .out = out, .nout = nout};
  shmap_explore_result res;
  uint64_t seed;
  shmap__setting_explore_seed(&seed);
  const char *replay = shmap__setting_replay();
  int rc = search(&a, replay ? 1 : n, seed, DEFAULT_DEPTH, replay, false, &res);
  if (rc)
    for (int k = 0; k < nout; k++) {
      shmap_array_destroy(out[k]);
      out[k] = NULL;
    }
  return rc;
}
