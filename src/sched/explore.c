/* SPDX-License-Identifier: MIT */
/*
 * explore.c - exploring mode: the devices are fibers that run one at a
 * time on the map's caller, and at every wait of a device (each arrival,
 * departure and publication the transport waits for) a seeded schedule
 * (sched.h, shmap__explore) picks which runnable device continues.  The
 * bodies run unchanged; only the order differs.  A device that waits
 * always hands back to the scheduler, even when its condition holds
 * already, so that every wait is a point where another device may go
 * first.
 *
 * When no device can continue while some have not finished, the devices
 * wait for each other: the scheduler fails the map with the wait-for
 * cycle (each device, the collective and axes it waits in, and its call
 * number) instead of hanging.  Asynchronous requests run on no helper
 * thread here: a device carries out its own when it waits for them
 * (sched/progress.c), on its fiber, so their steps are choices of the
 * schedule too and replay with it.
 */
#include "sched/mode.h"

#include "hash.h"
#include "kinds.h"
#include "sched/hooks.h"
#include "settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { X_START = 1, X_READY, X_WAIT, X_DONE };

/* A device's fiber and what it waits for. */
typedef struct xdev {
  shmap__fiber fiber;
  int st;
  int next; /* how it left the scheduler: X_WAIT or X_DONE */
  shmap__pred pred;
  void *arg;
  _Atomic int *abort;
  const shmap__dev *awaited;
  bool res;
} xdev;

#define MAX_DEPTH 64

typedef struct xstate {
  shmap__fiber host; /* the scheduler's context (the map's caller) */
  xdev *dev;
  int ndev, ndone;
  int *cand;
  int *shown; /* the candidates of the last choice, for debuggers */
  int *prio;
  shmap__explore own; /* the schedule when the caller set none */
  shmap__explore *x;  /* the schedule of the current map */
  /* The current map's strategy and its state. */
  char strat;
  int depth;
  uint64_t rng;
  uint32_t change[MAX_DEPTH];
  uint32_t step;     /* choices made in this map */
  uint32_t estimate; /* choices the last map made (PCT's range) */
  bool forcing;
  int last; /* the device that ran last */
} xstate;

/* The schedule's next choice, for debuggers: the step and the device that
 * runs next (see shmap__explore_step). */
volatile int shmap__explore_next_dev = -1;
volatile unsigned shmap__explore_next_step;
const char *volatile shmap__explore_text;
volatile unsigned shmap__explore_mapno;
const int *volatile shmap__explore_cand;
volatile int shmap__explore_ncand;

/* Called at every choice that had more than one candidate, with the
 * variables above set: a place for a breakpoint (the gdb extension's
 * "shmap schedule step" stops here). */
__attribute__((noinline)) void shmap__explore_step(unsigned step, int dev)
{
  (void)step;
  (void)dev;
  __asm__ __volatile__("" ::: "memory");
}

static void announce(xstate *xs, uint32_t s, int pick, int n)
{
  shmap__explore_text = xs->x->text;
  shmap__explore_mapno = xs->x->maps;
  memcpy(xs->shown, xs->cand, (size_t)n * sizeof *xs->cand);
  shmap__explore_cand = xs->shown;
  shmap__explore_ncand = n;
  shmap__explore_next_step = s;
  shmap__explore_next_dev = pick;
  shmap__explore_step(s, pick);
}

static uint64_t splitmix(uint64_t *s)
{
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint32_t below(xstate *xs, uint32_t n)
{
  return (uint32_t)(splitmix(&xs->rng) % n);
}

void shmap__explore_free(shmap__explore *x)
{
  free(x->log);
  free(x->nrun);
  x->log = x->nrun = NULL;
  x->nlog = x->caplog = 0;
}

static void fiber_main(void *arg)
{
  shmap__dev *d = arg;
  xstate *xs = d->rt->xstate;
  xdev *me = &xs->dev[d->id];
  shmap__fiber_entered(&me->fiber, &xs->host);
  for (;;) {
    d->rt->run(d->rt->job, d->id);
    shmap__dev_parked(d);
    me->next = X_DONE;
    shmap__fiber_switch(&me->fiber, &xs->host);
  }
}

static void xstate_free(shmap__runtime *rt)
{
  xstate *xs = rt->xstate;
  if (!xs)
    return;
  for (int d = 0; xs->dev && d < xs->ndev; d++)
    shmap__fiber_destroy(&xs->dev[d].fiber);
  free(xs->dev);
  free(xs->cand);
  free(xs->shown);
  free(xs->prio);
  shmap__explore_free(&xs->own);
  free(xs);
  rt->xstate = NULL;
}

/* A runtime of another mode that ran maps under this one frees its state
 * when it goes away. */
static void explore_destroy(shmap__runtime *rt) { xstate_free(rt); }
static const shmap__rt_hooks explore_hooks = {.destroy = explore_destroy};

/* The schedule when the caller set none: SHMAP_REPLAY's, else a random
 * walk seeded by SHMAP_EXPLORE_SEED (1 when unset). */
static void own_schedule(shmap__explore *x)
{
  const char *text = shmap__setting_replay();
  uint64_t seed;
  shmap__setting_explore_seed(&seed);
  if (text)
    snprintf(x->text, sizeof x->text, "%s", text);
  else
    snprintf(x->text, sizeof x->text, "r.%llu", (unsigned long long)seed);
}

/* The mode's state and the devices' fibers (stacks of ss bytes, 0: the
 * default); 0 or an error code. */
static int ensure(shmap__runtime *rt, size_t ss)
{
  if (rt->xstate)
    return 0;
  shmap__runtime_hooks(&explore_hooks);
  xstate *xs = shmap__calloc(1, sizeof *xs);
  if (!xs)
    return shmap__err(SHMAP_ENOMEM, "out of memory for the exploring mode");
  rt->xstate = xs;
  xs->ndev = rt->ndev;
  xs->dev = shmap__calloc((size_t)rt->ndev, sizeof *xs->dev);
  xs->cand = shmap__calloc((size_t)rt->ndev, sizeof *xs->cand);
  xs->shown = shmap__calloc((size_t)rt->ndev, sizeof *xs->shown);
  xs->prio = shmap__calloc((size_t)rt->ndev, sizeof *xs->prio);
  if (!xs->dev || !xs->cand || !xs->shown || !xs->prio) {
    xstate_free(rt);
    return shmap__err(SHMAP_ENOMEM, "out of memory for the exploring mode");
  }
  own_schedule(&xs->own);
  for (int d = 0; d < rt->ndev; d++)
    if (shmap__fiber_create(&xs->dev[d].fiber,
                            ss ? ss : SHMAP__FIBER_STACK_DEFAULT, fiber_main,
                            &rt->devs[d]) != 0) {
      xstate_free(rt);
      return shmap__err(SHMAP_ESYS, "cannot allocate the stack of device %d",
                        d);
    }
  return 0;
}

/* ---- choosing ------------------------------------------------------------ */

/* The current map's strategy from the schedule (map number x->maps). */
static void map_begin(shmap__runtime *rt, xstate *xs)
{
  shmap__explore *x = rt->explore ? rt->explore : &xs->own;
  xs->x = x;
  uint64_t seed = 0;
  if (!shmap__parse_schedule(x->text, &xs->strat, &xs->depth, &seed)) {
    xs->strat = 'r';
    xs->depth = 1;
  }
  xs->rng = shmap__hash_u64(shmap__hash_u64(shmap__hash_init(), seed), x->maps);
  xs->forcing = x->forced && x->flog && x->forced_map == x->maps;
  if (xs->forcing)
    xs->rng = shmap__hash_u64(shmap__hash_init(), x->alt);
  xs->step = 0;
  xs->last = -1;
  xs->ndone = 0;
  if (!x->failed)
    x->nlog = 0;
  /* PCT: distinct random priorities from `depth` up, and depth - 1 change
   * points among the choices the last map made. */
  for (int d = 0; d < xs->ndev; d++)
    xs->prio[d] = d;
  for (int d = xs->ndev - 1; d > 0; d--) {
    int j = (int)below(xs, (uint32_t)d + 1), t = xs->prio[d];
    xs->prio[d] = xs->prio[j];
    xs->prio[j] = t;
  }
  for (int d = 0; d < xs->ndev; d++)
    xs->prio[d] += xs->depth;
  uint32_t range = xs->estimate ? xs->estimate : 8u * (uint32_t)xs->ndev;
  for (int i = 0; i < xs->depth - 1 && i < MAX_DEPTH; i++)
    xs->change[i] = 1 + below(xs, range);
  for (int d = 0; d < xs->ndev; d++) {
    xs->dev[d].st = X_START;
    xs->dev[d].next = X_DONE;
  }
}

static void map_end(shmap__runtime *rt, xstate *xs)
{
  shmap__explore *x = xs->x;
  xs->estimate = xs->step;
  if (!x->failed && atomic_load(&rt->failed_dev) >= 0) {
    x->failed = 1;
    x->fail_map = x->maps;
  }
  x->maps++;
}

static void record(xstate *xs, int pick, int n)
{
  shmap__explore *x = xs->x;
  x->steps++;
  x->hash = shmap__hash_u64(x->hash, (uint64_t)pick);
  if (x->failed)
    return;
  if (x->nlog == x->caplog) {
    uint32_t cap = x->caplog ? 2 * x->caplog : 256;
    uint16_t *l = realloc(x->log, cap * sizeof *l);
    uint16_t *r = l ? realloc(x->nrun, cap * sizeof *r) : NULL;
    if (l)
      x->log = l;
    if (!l || !r)
      return; /* the log stops short; the run goes on */
    x->nrun = r;
    x->caplog = cap;
  }
  x->log[x->nlog] = (uint16_t)pick;
  x->nrun[x->nlog] = (uint16_t)(n > 65535 ? 65535 : n);
  x->nlog++;
}

/* The device that continues, of the n candidates in xs->cand. */
static int choose(xstate *xs, int n)
{
  if (n == 1)
    return xs->cand[0];
  uint32_t s = xs->step++;
  int pick = -1;
  if (xs->forcing && s < xs->x->forced) {
    int want = xs->x->flog[s];
    for (int i = 0; i < n; i++)
      if (xs->cand[i] == want)
        pick = want;
  } else if (xs->strat == 'p' && !xs->forcing) {
    for (int i = 0; i < xs->depth - 1; i++)
      if (xs->change[i] == s && xs->last >= 0)
        xs->prio[xs->last] = i;
    pick = xs->cand[0];
    for (int i = 1; i < n; i++)
      if (xs->prio[xs->cand[i]] > xs->prio[pick])
        pick = xs->cand[i];
  }
  if (pick < 0)
    pick = xs->cand[below(xs, (uint32_t)n)];
  record(xs, pick, n);
  announce(xs, s, pick, n);
  return pick;
}

/* ---- running ------------------------------------------------------------- */

/* Whether device d can continue (a waiting one whose condition holds, or
 * whose wait was aborted, becomes READY with its result).  The condition
 * may set the device's message (errbuf). */
static bool can_run(xdev *x, char *errbuf)
{
  if (x->st == X_START || x->st == X_READY)
    return true;
  if (x->st != X_WAIT)
    return false;
  char *own = shmap__errbuf_use(errbuf);
  bool holds = x->pred(x->arg);
  shmap__errbuf_use(own);
  if (holds)
    x->res = true;
  else if (x->abort && atomic_load(x->abort))
    x->res = false;
  else
    return false;
  x->st = X_READY;
  return true;
}

static int runnable(shmap__runtime *rt, xstate *xs)
{
  int n = 0;
  for (int d = 0; d < xs->ndev; d++)
    if (can_run(&xs->dev[d], rt->devs[d].sched.errbuf))
      xs->cand[n++] = d;
  return n;
}

static void run_one(shmap__runtime *rt, xstate *xs, int d)
{
  shmap__dev *dev = &rt->devs[d];
  xdev *x = &xs->dev[d];
  xs->last = d;
  shmap__set_current(dev->ctx);
  shmap__errbuf_use(dev->sched.errbuf);
  shmap__running_dev = dev;
  shmap__fiber_switch(&xs->host, &x->fiber);
  shmap__running_dev = NULL;
  shmap__errbuf_use(NULL);
  shmap__set_current(NULL);
  x->st = x->next;
  if (x->st == X_DONE) {
    xs->ndone++;
    shmap__dev_finished(rt);
  }
}

/* ---- deadlock ------------------------------------------------------------ */

/* "d1(0,1) in psum over 'i' (call 3)" for a waiting device. */
static void describe(const shmap__runtime *rt, int d, char *buf, size_t n)
{
  const shmap__dev *dev = &rt->devs[d];
  char name[SHMAP__DEVNAME_MAX];
  shmap__mesh_devname(rt->mesh, d, name, sizeof name);
  uint64_t op = atomic_load_explicit(&dev->dbg.op, memory_order_relaxed);
  int state = atomic_load(&dev->dbg.state);
  if (state == SHMAP__ST_COLL && op) {
    int axes[SHMAP_MAX_AXES], na = (int)((op >> 8) & 0xf);
    for (int k = 0; k < na && k < SHMAP_MAX_AXES; k++)
      axes[k] = (int)((op >> (12 + 4 * k)) & 0xf);
    char at[SHMAP__AXES_MAX];
    shmap__axes_format(rt->mesh, axes, na, at, sizeof at);
    shmap__cat(buf, n, "%s in %s over %s (its call %u)", name,
               shmap__kind_name((int)(op & 0xff)), at,
               (unsigned)atomic_load(&dev->coll.arrive));
  } else {
    shmap__cat(buf, n, "%s %s", name,
               state == SHMAP__ST_DONE      ? "after its body"
               : state == SHMAP__ST_REPLICA ? "as a replica"
                                            : "in its body");
  }
}

/* The message: the cycle of devices waiting for each other, found by
 * following whom each waits for, or else every waiting device. */
static void deadlock_text(const shmap__runtime *rt, const xstate *xs,
                          char *buf, size_t n)
{
  snprintf(buf, n, "deadlock: no device can continue (exploring schedule "
                   "%s, step %u); ", xs->x->text, xs->step);
  int start = -1;
  for (int d = 0; d < xs->ndev && start < 0; d++)
    if (xs->dev[d].st == X_WAIT)
      start = d;
  /* Walk whom each awaits, at most ndev steps, to land on a cycle. */
  int d = start;
  for (int i = 0; i < xs->ndev && d >= 0; i++) {
    const shmap__dev *a = xs->dev[d].awaited;
    d = a && xs->dev[a->id].st == X_WAIT ? a->id : -1;
  }
  if (d >= 0) {
    shmap__cat(buf, n, "wait-for cycle: ");
    int c = d;
    do {
      describe(rt, c, buf + strlen(buf), n - strlen(buf));
      shmap__cat(buf, n, " waits for ");
      c = xs->dev[c].awaited->id;
    } while (c != d);
    describe(rt, c, buf + strlen(buf), n - strlen(buf));
    return;
  }
  shmap__cat(buf, n, "waiting: ");
  bool first = true;
  for (int e = 0; e < xs->ndev; e++)
    if (xs->dev[e].st == X_WAIT) {
      shmap__cat(buf, n, "%s", first ? "" : "; ");
      describe(rt, e, buf + strlen(buf), n - strlen(buf));
      first = false;
    }
}

/* No device can continue: fail the map with the cycle; then the
 * candidates (at least one, forced when the failure released nobody). */
static int stalled(shmap__runtime *rt, xstate *xs)
{
  int n = 0;
  if (!atomic_load(&rt->abort)) {
    char *msg = malloc(SHMAP__MSG_MAX);
    int first = 0;
    while (xs->dev[first].st != X_WAIT)
      first++;
    if (msg)
      deadlock_text(rt, xs, msg, SHMAP__MSG_MAX);
    shmap__fail(rt, first, SHMAP_EMISMATCH,
                msg ? msg : "deadlock: no device can continue");
    free(msg);
    n = runnable(rt, xs);
  }
  if (n == 0) {
    /* Nothing the failure released: a wait without an abort flag.  Its
     * device goes on as if aborted rather than hang. */
    for (int d = 0; d < xs->ndev && n == 0; d++)
      if (xs->dev[d].st == X_WAIT) {
        xs->dev[d].st = X_READY;
        xs->dev[d].res = false;
        xs->cand[n++] = d;
      }
  }
  return n;
}

/* ---- the mode's table ---------------------------------------------------- */

/* No thread of its own: the map's caller runs the devices. */
static int explore_plan(shmap__runtime *rt)
{
  rt->host_runs = 1;
  return 0;
}

static int explore_setup(shmap__runtime *rt, size_t ss)
{
  return ensure(rt, ss);
}

static int explore_spawn(shmap__runtime *rt, int i, size_t ss)
{
  (void)rt;
  (void)i;
  (void)ss;
  return 0;
}

static void explore_join(shmap__runtime *rt, int n)
{
  (void)rt;
  (void)n;
}

static void explore_teardown(shmap__runtime *rt) { xstate_free(rt); }

static void explore_prepare(shmap__runtime *rt) { (void)rt; }

/* The map's caller runs every device of the job, whatever host_runs says;
 * the watchdog reports from between the steps. */
static void explore_launch(shmap__runtime *rt, bool host_runs)
{
  (void)host_runs;
  int rc = ensure(rt, shmap__setting_stack_size());
  if (rc != 0) {
    shmap__fail(rt, 0, rc, shmap__errbuf());
    atomic_store(&rt->done, rt->ndev);
    return;
  }
  xstate *xs = rt->xstate;
  shmap__fiber_host_init(&xs->host);
  shmap__guard_thread();
  map_begin(rt, xs);
  for (int d = 0; d < xs->ndev; d++)
    rt->devs[d].sched.xfiber = &xs->dev[d].fiber;
  uint64_t period = shmap__watchdog_ns(), t0 = period ? shmap__now() : 0;
  uint64_t due = t0 + period;
  while (xs->ndone < xs->ndev) {
    int n = runnable(rt, xs);
    if (n == 0)
      n = stalled(rt, xs);
    run_one(rt, xs, choose(xs, n));
    if (period && shmap__now() >= due) {
      shmap__hooks_watch(rt, shmap__now() - t0);
      due += period;
    }
  }
  for (int d = 0; d < xs->ndev; d++)
    rt->devs[d].sched.xfiber = NULL;
  shmap__explore_text = NULL;
  shmap__explore_ncand = 0;
  shmap__explore_cand = NULL;
  shmap__explore_next_dev = -1;
  map_end(rt, xs);
}

/* A device's wait: back to the scheduler.  A device carrying out its own
 * asynchronous request (progress.c) keeps that across the switch, which
 * the thread's other devices must not see. */
static bool explore_dev_wait_on(shmap__runtime *rt, shmap__dev *d,
                                const shmap__dev *awaited, shmap__pred pred,
                                void *arg, _Atomic int *abort)
{
  xstate *xs = rt->xstate;
  xdev *x = &xs->dev[d->id];
  x->pred = pred;
  x->arg = arg;
  x->abort = abort;
  x->awaited = awaited;
  x->next = X_WAIT;
  shmap__dev *helping = shmap__helper_for;
  shmap__helper_for = NULL;
  shmap__fiber_switch(&x->fiber, &xs->host);
  shmap__helper_for = helping;
  x->pred = NULL;
  x->awaited = NULL;
  return x->res;
}

static bool second_look(void *arg) { return (*(int *)arg)++ > 0; }

static void explore_dev_yield(shmap__runtime *rt, shmap__dev *d)
{
  int looks = 0;
  explore_dev_wait_on(rt, d, NULL, second_look, &looks, NULL);
}

static bool explore_dev_poll(shmap__runtime *rt, shmap__dev *d,
                             shmap__pred pred, void *arg, _Atomic int *abort)
{
  return explore_dev_wait_on(rt, d, NULL, pred, arg, abort);
}

/* The scheduler looks at every waiting device itself: nobody sleeps. */
static void explore_wake_group(shmap__runtime *rt, int n, int self,
                               int (*member)(const void *arg, int i),
                               const void *arg)
{
  (void)rt;
  (void)n;
  (void)self;
  (void)member;
  (void)arg;
}

static void explore_wake_all(shmap__runtime *rt) { (void)rt; }

/* Like devices of their own threads: no worker's range is shared. */
static int explore_workers(const shmap__runtime *rt)
{
  (void)rt;
  return 0;
}

static void explore_runs_with(const shmap__runtime *rt, int d, int *lo,
                              int *hi)
{
  (void)rt;
  *lo = d;
  *hi = d + 1;
}

const shmap__sched_ops shmap__sched_explore = {
    .name = "explore",
    .mode = SHMAP__EXPLORE,
    .one_thread = true,
    .plan = explore_plan,
    .setup = explore_setup,
    .spawn = explore_spawn,
    .join = explore_join,
    .teardown = explore_teardown,
    .prepare = explore_prepare,
    .launch = explore_launch,
    .dev_wait_on = explore_dev_wait_on,
    .dev_yield = explore_dev_yield,
    .dev_poll = explore_dev_poll,
    .wake_group = explore_wake_group,
    .wake_all = explore_wake_all,
    .workers = explore_workers,
    .runs_with = explore_runs_with,
};
