/* SPDX-License-Identifier: MIT */
/*
 * sched.h - the scheduler: device threads or fibers, waiting and waking,
 * and the per-mesh runtime that runs one job (a map) on every device.
 *
 * Each device of a mesh is a persistent thread, parked between map calls,
 * or a fiber on one of a few worker threads.  A waiting thread spins for a
 * bounded, adapted time and then sleeps on a word of its own (a futex on
 * Linux), so devices that outnumber the cores do not burn them.  Whoever changes what
 * a device may be waiting for wakes it, and only when it announced that it
 * sleeps.
 *
 * The scheduler knows nothing of collectives: the transport (transport/)
 * keeps its own state and uses only shmap__dev_wait() and the wake
 * functions below.
 */
#ifndef SHMAP_SCHED_H
#define SHMAP_SCHED_H

#include "internal.h"

#include <stdalign.h>
#include <stdatomic.h>

#define SHMAP__CACHELINE 64

/* A place one thread sleeps on (runtime.c explains the waiting policy). */
typedef struct shmap__waiter {
  _Atomic uint32_t word;  /* bumped by every wake while sleeping */
  /* The owner's "I may sleep" bit: in the runtime's mask of sleeping
   * devices for a device thread, else in `own`.  A waker clears it. */
  _Atomic uint64_t *flag;
  uint64_t bit;
  _Atomic uint64_t own;
  uint64_t spin_ns;       /* current spin budget, adapted after each wait */
#ifndef __linux__
  void *mutex, *cond;     /* uv_mutex_t / uv_cond_t fallback */
#endif
} shmap__waiter;

/* What a device is doing, for the watchdog, the gdb extension and traces. */
enum shmap__state {
  SHMAP__ST_PARKED = 0, /* between maps */
  SHMAP__ST_INPUTS,     /* building its input blocks */
  SHMAP__ST_BODY,       /* running the user's body */
  SHMAP__ST_COLL,       /* inside a collective */
  SHMAP__ST_DONE,       /* body returned; waiting for the others */
  SHMAP__ST_REPLICA     /* holds the values of another device's body (a
                           map over some axes); op: that device */
};

/* One trace event: a body or a collective on one device. */
typedef struct shmap__tev {
  uint64_t t0, t1; /* uv_hrtime() */
  uint64_t op;     /* 0 for the body, else a packed collective (see pack) */
  uint64_t bytes;
  uint32_t seq;
  const char *job; /* body events: NULL for a user's body, else the name of
                      the library's own job (a static string) */
  int track;       /* request events: the device's request slot */
  /* Collectives, for a rehearsal (src/rehearse/): the bytes of this
   * device's input, the members its data moves among (axis_index_groups;
   * 0: the whole group) and, for a ppermute, the device it sends to (-1:
   * none).  A cost annotation (job "cost") keeps its FLOPs in `bytes` and
   * the bytes it touches in `vbytes`. */
  uint64_t vbytes;
  int gn, peer;
} shmap__tev;

/* A user-level execution context with a stack of its own (fiber.c).  A
 * worker's own context (its thread's stack) has no map. */
typedef struct shmap__fiber {
  void *sp;          /* saved context */
  void *stack;       /* lowest address of the usable stack */
  size_t stack_size;
  void *map;         /* mmap'ed region (guard gap + stack) */
  size_t map_size;
  void *tsan;        /* ThreadSanitizer's fiber handle */
  /* The context that last switched to this one: a fiber may be resumed by
   * another worker than the one it left to (fibers.c). */
  struct shmap__fiber *resumer;
} shmap__fiber;

/* The unmapped gap below every device stack, fiber or device thread (the
 * kernel leaves as much below a process's main stack): a frame whose first
 * access lands at most this far below its stack faults in the gap, however
 * its code was compiled; a larger one needs stack probes
 * (-fstack-clash-protection) to fault there -- see shmap_map(3). */
#define SHMAP__STACK_GUARD ((size_t)1 << 20)

int shmap__fiber_create(shmap__fiber *f, size_t stack_size,
                        void (*fn)(void *), void *arg);
void shmap__fiber_destroy(shmap__fiber *f);
/* Describe the calling thread's own context (before switching away). */
void shmap__fiber_host_init(shmap__fiber *host);
/* Save the current context in `from` and continue `to`. */
void shmap__fiber_switch(shmap__fiber *from, shmap__fiber *to);
/* First thing a new fiber does (tells the sanitizers where it came from). */
void shmap__fiber_entered(shmap__fiber *self, shmap__fiber *from);
/* guard.c: a thread that runs devices (once per thread): the SIGSEGV
 * handler that names a device overflowing its stack, and an alternate
 * signal stack for it. */
void shmap__guard_thread(void);
/* guard.c: take the pages [lo, lo + len) away from the program (no
 * access) and watch them: the first access faults, is recorded and gives
 * them back, and the program goes on.  Returns a handle for
 * shmap__guard_unwatch, or 0 when they cannot be watched (left as they
 * are). */
int shmap__guard_watch(void *lo, size_t len);
/* Give the pages back (read and write) and stop watching them; returns
 * what touched them meanwhile: 0 nothing, or the first access, a
 * SHMAP__GUARD_* kind (handle 0: 0). */
int shmap__guard_unwatch(int handle);
/* How many ranges are watched now (tests: none after a map). */
int shmap__guard_watching(void);
enum {
  SHMAP__GUARD_READ = 1,
  SHMAP__GUARD_WRITE = 2,
  SHMAP__GUARD_EITHER = 3 /* read or written: the processor does not say */
};

/* How devices are run: the number a mode's table gives to the runtime's
 * `mode`, which debuggers and tests read. */
enum shmap__mode {
  SHMAP__THREADS = 1, /* one thread per device (gdb sees each) */
  SHMAP__FIBERS,      /* devices are fibers on a few worker threads */
  SHMAP__EXPLORE      /* one device at a time, in an order chosen at every
                         wait (explore.c) */
};

/* States of a device fiber (fibers.c, "Workers and stealing"): not yet
 * started, ready (its wait is over), running on a worker, waiting, being
 * checked by a worker, done. */
enum {
  SHMAP__F_START = 1,
  SHMAP__F_READY,
  SHMAP__F_RUN,
  SHMAP__F_WAIT,
  SHMAP__F_CHECK,
  SHMAP__F_DONE
};

struct shmap__worker;
typedef bool (*shmap__pred)(void *arg);

/* Large freed blocks a device keeps for reuse, besides one small one
 * (arena.c). */
#define SHMAP__CACHE 2

/* One device of a runtime, in one sub-struct per subsystem.  Each starts
 * on a cache line of its own: `coll` is written by the device and read by
 * its peers, `waiter` is written by peers, the rest mostly by the device. */
/* The kinds of plan a device keeps its last one of (coll/plan.c). */
#define SHMAP__PLAN_MEMOS 6
struct shmap__plan_memo;

typedef struct shmap__dev {
  /* Collective progress (transport/): how many collective calls the device
   * has entered in the current map, and whether its body returned.  The
   * transport writes them; the watchdog and debuggers read them. */
  struct shmap__dev_coll {
    alignas(SHMAP__CACHELINE) _Atomic uint32_t arrive;
    _Atomic int finished;
  } coll;
  alignas(SHMAP__CACHELINE) shmap__waiter waiter;
  /* Thread mode: where the device's thread waits between maps (apart from
   * `waiter`, so that devices leaving a map do not wake parked ones). */
  alignas(SHMAP__CACHELINE) shmap__waiter park;
  /* Scheduler, fiber mode: the device's context, its worker, and what it
   * waits for. */
  struct shmap__dev_sched {
    alignas(SHMAP__CACHELINE) shmap__fiber fiber;
    /* While a map runs under the exploring mode: the device's fiber there
     * (explore.c), which debuggers show instead of `fiber`; else NULL. */
    shmap__fiber *xfiber;
    struct shmap__worker *worker; /* the worker running it (or that last did) */
    struct shmap__worker *home;   /* the worker whose range it is in */
    shmap__waiter *wq; /* where to wake this device: own or home worker's */
    _Atomic int fstate;
    int fnext;         /* the state it leaves its worker in: WAIT or DONE */
    shmap__pred wpred;
    void *warg;
    /* wabort and wawait are read by workers that only look (fibers.c,
     * "Looking again") while the device may be setting its next wait. */
    _Atomic(_Atomic int *) wabort;
    int wres;
    /* The device its wait condition depends on alone (NULL: several, or
     * anything), and that device's run count when the condition was last
     * found false; how many times the device's fiber has been switched to
     * and back.  See fibers.c, "Looking again". */
    _Atomic(const struct shmap__dev *) wawait;
    _Atomic uint32_t wseen;
    _Atomic uint32_t nrun;
    char errbuf[SHMAP__MSG_MAX]; /* the device's own message */
  } sched;
  /* Written by the device, read by the watchdog, debuggers and the trace
   * writer (debug.c).  The events are the device's own while a map runs. */
  struct shmap__dev_debug {
    alignas(SHMAP__CACHELINE) _Atomic int state;
    _Atomic uint64_t since; /* uv_hrtime() when the state began */
    _Atomic uint64_t op;    /* in a collective: shmap__pack_op() */
    /* The maps the device is in: byte L is the manual axes (mesh axis
     * bits) of the map at nesting level L (0: the map the caller started),
     * the top byte the number of levels (0 between maps).  See
     * shmap__nest_format(). */
    _Atomic uint64_t nest;
    shmap__tev *tev;
    size_t ntev, captev;
    uint64_t tev_dropped;
    /* Events of the device's asynchronous requests (coll/async.c), written
     * by its progress helper only: they go on a track of their own. */
    shmap__tev *rtev;
    size_t nrtev, caprtev;
    int rtrack; /* the slot of the request its helper carries out */
    /* The device's schedule as a rehearsal predicted it (src/rehearse/),
     * for the trace writer's second timeline; kept only while a trace
     * records. */
    shmap__tev *ptev;
    size_t nptev, capptev;
  } dbg;
  /* The device's arena cache (arena.c): freed large blocks, and when
   * each was put there (a count of puts). */
  struct shmap__dev_arena {
    struct shmap__chunk *cache[SHMAP__CACHE];
    uint64_t put_at[SHMAP__CACHE];
    uint64_t nput;
    struct shmap__chunk *small; /* one freed block under a page */
  } arena;
  /* Collective planning (coll/plan.c): the last axes text this device's
   * collectives parsed, and the result. */
  struct shmap__dev_plan {
    char axes_text[48];
    int axes_parsed[SHMAP_MAX_AXES];
    int axes_n;
    /* The device's group over those axes: its size (0: not found yet)
     * and the device's rank in it. */
    int group_n, group_rank;
    /* shmap_preduce (coll/preduce.c): the name of the operation whose
     * combine function runs on this device, which may not call the
     * library (shmap__ctx_check), and whether it did. */
    const char *combine;
    bool combine_called;
    /* The last checked plan of each kind of plan (coll/plan.c), made on
     * first use; freed with the device. */
    struct shmap__plan_memo *memo[SHMAP__PLAN_MEMOS];
  } plan;
  alignas(SHMAP__CACHELINE) struct shmap__runtime *rt;
  int id;
  uint32_t seen_epoch;
  struct shmap_ctx *ctx; /* during a map: the device's context */
  char name[16];
  uintptr_t thread; /* uv_thread_t, stored opaquely */
  int tid;          /* kernel thread id (thread mode), for debuggers */
} shmap__dev;

struct shmap__job;
typedef void (*shmap__run_fn)(struct shmap__job *job, int dev);

/* A worker thread running several device fibers (fiber mode). */
typedef struct shmap__worker {
  /* Devices [first, first + count) run on this worker: neighbouring ranks
   * share a core. */
  int first, count;
  /* Whoever runs the worker's devices during a map sleeps on `waiter` (its
   * thread, or the map's caller); the thread waits for maps on `park`. */
  alignas(SHMAP__CACHELINE) shmap__waiter waiter;
  alignas(SHMAP__CACHELINE) shmap__waiter park;
  alignas(SHMAP__CACHELINE) struct shmap__runtime *rt;
  int id;
  uint32_t seen_epoch;
  shmap__fiber self; /* the worker thread's own context */
  uintptr_t thread;
  int tid;           /* kernel thread id, for debuggers */
  char name[16];
  /* Of the current map: how many of its devices are done (by whichever
   * worker ran them), and when it last looked for a device to run. */
  alignas(SHMAP__CACHELINE) _Atomic int ndone;
  _Atomic uint64_t beat;
} shmap__worker;

struct shmap__transport;

/*
 * A schedule of the exploring mode (explore.c).  One device runs at a
 * time; at every wait of a device the schedule picks which runnable
 * device continues.  The text names a strategy and a seed: "r.SEED" is a
 * random walk, "pD.SEED" probabilistic concurrency testing of depth D
 * (D - 1 priority change points).  The maps run under it are counted from 0, and
 * map m draws from the seed and m, so the same text and the same program
 * make the same choices in every map.  A choice is recorded only where
 * more than one device could run.
 */
#define SHMAP__SCHED_TEXT 48
typedef struct shmap__explore {
  char text[SHMAP__SCHED_TEXT];
  /* The search for the critical step: in map number forced_map, the first
   * `forced` choices are those of `flog`, and the ones after them a
   * random walk seeded by `alt` (forced 0: no forcing). */
  uint32_t forced_map, forced;
  uint64_t alt;
  const uint16_t *flog;
  /* What the runs did: maps run, choices made, a hash of the choices (of
   * every map), and the choices of the first map that failed (or, before
   * one fails, of the last map): the device chosen at each, and how many
   * could run. */
  uint32_t maps, steps;
  uint64_t hash;
  /* The hash of the outputs of the maps run under it (the map layer's). */
  uint64_t out_hash;
  uint16_t *log, *nrun;
  uint32_t nlog, caplog;
  int failed;            /* a map under it failed */
  uint32_t fail_map;
} shmap__explore;
/* Free what a schedule's runs recorded. */
void shmap__explore_free(shmap__explore *x);
/* Called at every choice of an exploring schedule that had more than one
 * candidate, before the chosen device runs: a place for a debugger's
 * breakpoint; the step and the device are also kept in the two words
 * after it, which the gdb extension reads. */
void shmap__explore_step(unsigned step, int dev);
extern volatile int shmap__explore_next_dev;
extern volatile unsigned shmap__explore_next_step;
/* For debuggers, set before each such call: the schedule's text, the
 * number of the map under it, and the devices that could have run. */
extern const char *volatile shmap__explore_text;
extern volatile unsigned shmap__explore_mapno;
extern const int *volatile shmap__explore_cand;
extern volatile int shmap__explore_ncand;

typedef struct shmap__runtime {
  struct shmap__runtime *next; /* in the registry of live runtimes */
  int id;                      /* registry number (trace process id) */
  int trace_pin;               /* debug.c: a stopping trace's claim on it */
  /* The fork generation (fork.c) whose process started the threads, + 1;
   * 0 while none run. */
  _Atomic unsigned forkgen;
  shmap_mesh *mesh;
  int ndev;
  uint64_t spin_max;       /* longest spin before sleeping (ns) */
  /* Whether publishers skip the full fence (see "Publishing before a
   * wake-up"), chosen with the mode at the first map. */
  bool fence_light;
  /* The map's caller may run devices itself (device 0 in thread mode,
   * worker 0's in fiber mode) when no watchdog keeps it busy. */
  int host_runs;
  _Atomic uint64_t *sleepers; /* thread mode: a bit per sleeping device */
  void *_Atomic keep[2];   /* per-map arrays kept across maps (map.c) */
  /* How devices run (the mode's table, see shmap__sched_ops), chosen at
   * the first map; `mode` is its number, for debuggers. */
  const struct shmap__sched_ops *ops;
  int mode;                /* enum shmap__mode */
  int nthreads;            /* threads the mode starts (devices or workers) */
  int nworkers;            /* fiber mode */
  shmap__worker *workers;
  void *lock;              /* uv_mutex_t: one map at a time per mesh */
  shmap__dev *devs;        /* NULL until the first map */
  _Atomic int mpi_waiters; /* device fibers waiting for MPI transfers */
  int started;             /* threads running */
  /* Bumped by two to start a job (or to stop); the low bit tells worker 0
   * that the map's caller runs its devices. */
  alignas(SHMAP__CACHELINE) _Atomic uint32_t epoch;
  alignas(SHMAP__CACHELINE) _Atomic int stop;
  struct shmap__job *job;
  shmap__run_fn run;
  /* The current job's failure: first failing device, code and message. */
  _Atomic int abort;
  _Atomic int failed_dev;
  int fail_code;
  char fail_msg[SHMAP__MSG_MAX];
  _Atomic int done;        /* devices finished with the job */
  /* Fiber mode: worker 0's thread is inside a job (it runs worker 0's
   * devices when a watchdog keeps the map's caller busy) and may still be
   * leaving it after the map's last device is done, see fibers.c. */
  _Atomic int w0_in;
  shmap__waiter host;      /* the thread that called the map */
  /* How this mesh's devices exchange data (transport/comm.h), and the
   * transport's own state for this mesh (NULL until it needs some). */
  const struct shmap__transport *tp;
  void *tstate;
  /* Asynchronous collectives (coll/async.c) and the progress helpers that
   * carry them out (runtime/progress.c): NULL until a device starts one;
   * `helpers` counts the helper threads started. */
  void *_Atomic async;
  void *_Atomic progress;
  _Atomic int helpers;
  /* The exploring mode (explore.c): the schedule the next maps run under
   * (set by the map's caller, NULL: the mode's default), and the mode's
   * own state (NULL until a map ran under it).  A runtime of another mode
   * runs a map under the exploring mode when `explore` is set. */
  shmap__explore *explore;
  void *xstate;
  /* SHMAP_REPLAY or SHMAP_EXPLORE_SEED was set when the runtime started:
   * every map runs under the exploring mode, whatever the mode. */
  bool explore_all;
  /* The current map checks the rules of asynchronous collectives
   * (SHMAP_ASYNC_CHECK, SHMAP_REPLAY or an exploring schedule): set by the
   * map's caller before the devices start. */
  bool async_check;
} shmap__runtime;

int shmap__runtime_create(shmap__runtime **out, shmap_mesh *mesh);
void shmap__runtime_destroy(shmap__runtime *rt);
/* Run job on every device and return when all are done.  Starts the
 * threads on first use.  Caller holds the runtime lock. */
int shmap__runtime_run(shmap__runtime *rt, struct shmap__job *job,
                       shmap__run_fn run);
/* Start the threads (or fibers) now unless they run: 0, or an error code
 * (message set).  Takes the runtime lock. */
int shmap__runtime_ready(shmap__runtime *rt);
void shmap__runtime_lock(shmap__runtime *rt);
void shmap__runtime_unlock(shmap__runtime *rt);
bool shmap__runtime_trylock(shmap__runtime *rt);

/* The device whose code the calling thread runs (its own thread, or the
 * worker running its fiber), or NULL. */
const shmap__dev *shmap__running(void);
/* The context of the body running on the calling thread, or NULL. */
struct shmap_ctx *shmap__current(void);
void shmap__set_current(struct shmap_ctx *ctx);

/* Waiting: returns when pred(arg) holds (true), or when *abort is set
 * first (false; abort may be NULL).  For a thread's own waiter. */
bool shmap__wait(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                 void *arg, _Atomic int *abort);
/* The same with an absolute deadline (shmap__now() time, 0: none):
 * 1 condition, 0 abort, -1 deadline passed. */
int shmap__wait_until(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                      void *arg, _Atomic int *abort, uint64_t deadline);
/* The same for a condition nobody wakes the waiter for (MPI requests, which
 * progress only while polled): polls, yielding the core, instead of
 * sleeping; 1 condition, 0 abort.  w may be NULL (no waiter: no early
 * wake-up while it naps). */
int shmap__poll_until(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                      void *arg, _Atomic int *abort);
/* The same for a condition that local devices make true and wake the
 * waiter for, polled only for what other processes may say meanwhile:
 * its naps grow (a wake-up ends them early). */
int shmap__poll_until_woken(shmap__runtime *rt, shmap__waiter *w,
                            shmap__pred pred, void *arg, _Atomic int *abort);
void shmap__wake(shmap__waiter *w);
void shmap__wake_all(shmap__runtime *rt);
/* The i-th look (from 0) at a word another thread holds for a few
 * instructions of its own, with no wait or switch between: a pause for the
 * first looks, then the processor is yielded, since that thread may have
 * been preempted in between and hundreds of threads may be looking. */
void shmap__backoff(unsigned i);

/*
 * Publishing before a wake-up.  A thread that makes a waiter's condition
 * true stores, then looks whether the waiter sleeps (its bit, or a watch
 * word); the waiter sets its bit, then looks at the condition.  Each side
 * must see the other's store, which on x86 needs a full fence between a
 * store and the next load: one on each side.  The waker's side runs on
 * every call and its fence waits for every store before it to reach the
 * cache, lines no call touched lately among them (a psum at 1024 devices
 * spent 30% of its time there).  So, where the kernel has membarrier(2),
 * the fence is asymmetric: the publisher stores with release order and
 * no fence, and a waiter about to sleep, after setting its bit and its
 * watch words, makes every running thread of the process pass a full
 * fence (MEMBARRIER_CMD_PRIVATE_EXPEDITED) before it looks at its
 * condition a last time.  A thread that is not running passed one when it
 * stopped.  Without membarrier, publishers store as before (sequentially
 * consistent).  So they do too where sleeping is the rule, not the
 * exception: in thread mode with more device threads than processors,
 * every device sleeps about once per call, and a membarrier per sleep
 * (an interrupt to every other processor that runs one of our threads)
 * cost more than a fence per publication (a psum at 64 devices spent a
 * quarter of its time in membarrier).  The choice is the runtime's
 * (rt->fence_light), made when its mode is, and holds while it lives:
 * every publisher and sleeper of a runtime make the same choice.
 * shmap__publish(rt, p, v) is the publisher's store, for an atomic object
 * of any type: every store that a sleeping waiter of runtime rt may be
 * waiting for, before its wake-up, goes through it.
 */
extern bool shmap__fence_light;
/* True while the calling thread looks at a wait's condition after it
 * announced that it may sleep (shmap__wait_full): a condition that must
 * ask to be woken (a watch word) need ask only then, not at every look
 * of a spin, where asking moves a line between cores on every call. */
extern SHMAP__TLS_FAST bool shmap__may_sleep;
#define shmap__publish(rt, p, v)                                               \
  do {                                                                         \
    if (__builtin_expect((rt)->fence_light, 1)) {                              \
      atomic_store_explicit((p), (v), memory_order_release);                   \
      atomic_signal_fence(memory_order_seq_cst);                               \
    } else {                                                                   \
      atomic_store((p), (v));                                                  \
    }                                                                          \
  } while (0)
/* A device waits (inside a map): sleeps its thread, or in fiber mode
 * hands its worker to another device until pred holds or abort is set. */
bool shmap__dev_wait(shmap__runtime *rt, shmap__dev *d, shmap__pred pred,
                     void *arg, _Atomic int *abort);
/* The same, while waiting for device `awaited` (NULL: for several):
 * spinning stops early when that device is known not to run. */
bool shmap__dev_wait_on(shmap__runtime *rt, shmap__dev *d,
                        const shmap__dev *awaited, shmap__pred pred, void *arg,
                        _Atomic int *abort);
/* A device's progress helper (runtime/progress.c) waits on the device's
 * own `waiter` in either mode, so in fiber mode it is woken too. */
static inline void shmap__dev_wake(shmap__dev *d)
{
  shmap__wake(d->sched.wq);
  if (d->sched.wq != &d->waiter)
    shmap__wake(&d->waiter);
}

/* The device whose asynchronous calls the calling thread carries out (its
 * progress helper), or NULL: such a thread waits like a device thread, on
 * the device's `waiter`, whatever the mode. */
extern SHMAP__TLS_FAST shmap__dev *shmap__helper_for;
/* A waiter of one's own (not a device's), e.g. a progress helper's. */
void shmap__waiter_init(shmap__waiter *w, uint64_t spin_ns);
void shmap__waiter_fini(shmap__waiter *w);

/* Zeroed arrays of at least `size` bytes that live from one map to the
 * next (index 0 or 1): taken for a map, given back after it (NULL is
 * ignored).  Take returns NULL (no message) when out of memory. */
void *shmap__runtime_take(shmap__runtime *rt, int i, size_t size);
void shmap__runtime_give(shmap__runtime *rt, int i, void *arr);

/* Record a failure of device `dev`: the first one becomes the job's error,
 * and the transport's failure notice releases every waiting device.
 * Returns code. */
int shmap__fail(shmap__runtime *rt, int dev, int code, const char *msg);

/*
 * Scheduler operations: what the layers above need to know of how devices
 * run, so that none of them tests the scheduling mode.
 */
/* Device d lets the devices it may be waiting for run: a fiber gives its
 * worker to the others once, a thread its core. */
void shmap__dev_yield(shmap__runtime *rt, shmap__dev *d);
/* Device d waits for a condition nobody wakes it for, which only polling
 * makes true (MPI requests): as shmap__dev_wait, true when pred(arg)
 * held, false when *abort was set first. */
bool shmap__dev_poll(shmap__runtime *rt, shmap__dev *d, shmap__pred pred,
                     void *arg, _Atomic int *abort);
/* The same where the devices that make the condition true wake d, and
 * polling is only a safety net: a thread then polls less and less often
 * (shmap__poll_until_woken). */
bool shmap__dev_poll_woken(shmap__runtime *rt, shmap__dev *d,
                           shmap__pred pred, void *arg, _Atomic int *abort);
/* Wake the members of a group of n, member(arg, i) being the device of
 * member i, except member `self` (-1: none).  Where devices share the
 * places they sleep on (fibers), every sleeper is woken at once instead,
 * which costs less than a look at each member. */
void shmap__wake_group(shmap__runtime *rt, int n, int self,
                       int (*member)(const void *arg, int i), const void *arg);
/* How many worker threads share the devices, each running a contiguous
 * range of them; 0 when each device has a thread of its own. */
int shmap__workers(const shmap__runtime *rt);
/* The devices [*lo, *hi) that run on device d's worker (the one whose
 * range holds d); d alone when each device has a thread. */
void shmap__runs_with(const shmap__runtime *rt, int d, int *lo, int *hi);

/*
 * A scheduling mode: one table of operations, in a file of its own
 * (threads.c, fibers.c), named in the registry of runtime.c, which picks
 * one by SHMAP_SCHED's value at a runtime's first map.  The runtime keeps
 * what every mode shares (waiters and the waiting policy, the failure,
 * hooks, job epochs) and calls the table where the modes differ; its
 * fields for one mode only (workers, sleepers, ...) are that mode's.
 */
typedef struct shmap__sched_ops {
  const char *name; /* SHMAP_SCHED's value for it */
  int mode;         /* enum shmap__mode: the runtime's `mode` */
  /* Every device runs on one thread, one at a time: a device may wait
   * only through dev_wait_on, which hands the thread to the others. */
  bool one_thread;
  /* Set up what the mode counts (e.g. its workers) and set host_runs;
   * returns how many threads it starts, which compete for the cores while
   * a map runs. */
  int (*plan)(shmap__runtime *rt);
  /* The devices are set up: the mode's own state, with device stacks of
   * ss bytes (0: the default); 0, or an error code (the runtime then calls
   * teardown). */
  int (*setup)(shmap__runtime *rt, size_t ss);
  /* Start thread i of plan's count; 0 or a libuv error code. */
  int (*spawn)(shmap__runtime *rt, int i, size_t ss);
  /* Wake and join the first n threads started (rt->stop is set). */
  void (*join)(shmap__runtime *rt, int n);
  /* Free the mode's state, or what setup made of it (its threads are
   * stopped or never started); the devices are not yet freed. */
  void (*teardown)(shmap__runtime *rt);
  /* A job: before the new epoch is published, then after, waking the
   * threads and, with host_runs, running the caller's share of it. */
  void (*prepare)(shmap__runtime *rt);
  void (*launch)(shmap__runtime *rt, bool host_runs);
  /* The scheduler operations above, for this mode (wake_all and workers
   * also before the devices exist). */
  bool (*dev_wait_on)(shmap__runtime *rt, shmap__dev *d,
                      const shmap__dev *awaited, shmap__pred pred, void *arg,
                      _Atomic int *abort);
  void (*dev_yield)(shmap__runtime *rt, shmap__dev *d);
  bool (*dev_poll)(shmap__runtime *rt, shmap__dev *d, shmap__pred pred,
                   void *arg, _Atomic int *abort);
  /* NULL: as dev_poll. */
  bool (*dev_poll_woken)(shmap__runtime *rt, shmap__dev *d, shmap__pred pred,
                         void *arg, _Atomic int *abort);
  void (*wake_group)(shmap__runtime *rt, int n, int self,
                     int (*member)(const void *arg, int i), const void *arg);
  void (*wake_all)(shmap__runtime *rt);
  int (*workers)(const shmap__runtime *rt);
  void (*runs_with)(const shmap__runtime *rt, int d, int *lo, int *hi);
} shmap__sched_ops;

/*
 * Hooks.  The layers above keep state of their own for a runtime (tables
 * hung on its opaque slots, or their own per-device arrays); the runtime
 * does not know them by name.  Each registers its hooks once, where it
 * sets itself up, before it hangs anything on a runtime; every hook is
 * called for every runtime and does nothing for one it never used.  The
 * model is libuv's close callbacks: whoever owns the state frees it.
 */
typedef struct shmap__rt_hooks {
  /* A runtime was created, or is being destroyed while its device threads
   * still park (observers: the registry). */
  void (*added)(shmap__runtime *rt);
  void (*removed)(shmap__runtime *rt);
  /* The first failure of a map, before it is published to the devices of
   * this process (so that other processes hear of it first). */
  void (*failed)(shmap__runtime *rt, int dev, int code, const char *msg);
  /* After the failure is published: release the devices that wait for
   * it, true if done (the transport knows where they wait); without such
   * a hook the runtime wakes every device. */
  bool (*release)(shmap__runtime *rt);
  /* The runtime goes away: its threads are stopped (or stayed in the
   * parent of a fork), its devices not yet freed. */
  void (*destroy)(shmap__runtime *rt);
  /* The watchdog's report on a map that has run for running_ns (the
   * runtime wakes the map's caller for it every shmap__watchdog_ns()). */
  void (*watch)(shmap__runtime *rt, uint64_t running_ns);
} shmap__rt_hooks;

/* The watchdog's period in nanoseconds (0: off): SHMAP_WATCHDOG, read at
 * the first call, until shmap__watchdog_set() changes it.  The scheduler
 * keeps the time; what a report says is the watch hook's. */
uint64_t shmap__watchdog_ns(void);
void shmap__watchdog_set(uint64_t ns);

/* Register hooks (a static table; registering one twice is harmless).
 * They are called in the order registered, destroy hooks in the reverse
 * order. */
void shmap__runtime_hooks(const shmap__rt_hooks *h);

#endif /* SHMAP_SCHED_H */
