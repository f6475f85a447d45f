/* SPDX-License-Identifier: MIT */
/*
 * runtime.h - device threads, waiting and waking, and the state one map call
 * shares between its devices.
 *
 * Each device of a mesh is a persistent thread, parked between map calls.
 * A waiting thread spins briefly and then sleeps on a word of its own (a
 * futex on Linux), so devices that outnumber the cores do not burn them.
 * Whoever changes what a device may be waiting for wakes it, and only when
 * it announced that it sleeps.
 */
#ifndef SHMAP_RUNTIME_H
#define SHMAP_RUNTIME_H

#include "internal.h"

#include <stdalign.h>
#include <stdatomic.h>

#define SHMAP__CACHELINE 64
/* Call descriptors each device keeps, indexed by call number. */
#define SHMAP__HIST 8

/* A place one thread sleeps on. */
typedef struct shmap__waiter {
  _Atomic uint32_t word;  /* bumped by every wake while sleeping */
  _Atomic int sleeping;   /* set while the owner may sleep */
#ifndef __linux__
  void *mutex, *cond;     /* uv_mutex_t / uv_cond_t fallback */
#endif
} shmap__waiter;

/* What a device announces about one collective call; peers compare their
 * own with it to detect mismatched calls. */
enum shmap__kind {
  SHMAP__PSUM = 1, SHMAP__PMAX, SHMAP__PMIN, SHMAP__PMEAN,
  SHMAP__PSUM_SCATTER, SHMAP__ALL_GATHER, SHMAP__ALL_TO_ALL, SHMAP__PPERMUTE
};

typedef struct shmap__call {
  int kind;
  int naxes;
  int axes[SHMAP_MAX_AXES];
  int dtype;
  int rank;
  int64_t shape[SHMAP_MAX_RANK];
  int p1, p2;          /* scatter_dimension / axis / split and concat axes */
  int tiled;
  int npairs;
  uint64_t pairs_hash;
  /* Data of the call, read by peers between arrival and departure. */
  const void *src;
  void *dst;
} shmap__call;

/* What a device is doing, for the watchdog, the gdb extension and traces. */
enum shmap__state {
  SHMAP__ST_PARKED = 0, /* between maps */
  SHMAP__ST_INPUTS,     /* building its input blocks */
  SHMAP__ST_BODY,       /* running the user's body */
  SHMAP__ST_COLL,       /* inside a collective */
  SHMAP__ST_DONE        /* body returned; waiting for the others */
};

/* One trace event: a body or a collective on one device. */
typedef struct shmap__tev {
  uint64_t t0, t1; /* uv_hrtime() */
  uint64_t op;     /* 0 for the body, else a packed collective (see pack) */
  uint64_t bytes;
  uint32_t seq;
  const char *job; /* body events: NULL for a user's body, else the name of
                      the library's own job (a static string) */
} shmap__tev;

/* A user-level execution context with a stack of its own (fiber.c).  A
 * worker's own context (its thread's stack) has no map. */
typedef struct shmap__fiber {
  void *sp;          /* saved context */
  void *stack;       /* lowest address of the usable stack */
  size_t stack_size;
  void *map;         /* mmap'ed region (stack + guard page) */
  size_t map_size;
  void *tsan;        /* ThreadSanitizer's fiber handle */
} shmap__fiber;

int shmap__fiber_create(shmap__fiber *f, size_t stack_size,
                        void (*fn)(void *), void *arg);
void shmap__fiber_destroy(shmap__fiber *f);
/* Describe the calling thread's own context (before switching away). */
void shmap__fiber_host_init(shmap__fiber *host);
/* Save the current context in `from` and continue `to`. */
void shmap__fiber_switch(shmap__fiber *from, shmap__fiber *to);
/* First thing a new fiber does (tells the sanitizers where it came from). */
void shmap__fiber_entered(shmap__fiber *self, shmap__fiber *from);

/* How devices are run. */
enum shmap__mode {
  SHMAP__THREADS = 1, /* one thread per device (gdb sees each) */
  SHMAP__FIBERS       /* devices are fibers on a few worker threads */
};

/* States of a device fiber, as its worker sees them. */
enum { SHMAP__F_START = 1, SHMAP__F_RUN, SHMAP__F_WAIT, SHMAP__F_DONE };

struct shmap__worker;
typedef bool (*shmap__pred)(void *arg);

/* Large freed blocks a device keeps for reuse. */
#define SHMAP__CACHE 2

/* A rendezvous slot a group leader keeps for one call (coll.c). */
#define SHMAP__SLOTS 16
typedef struct shmap__bslot {
  alignas(SHMAP__CACHELINE) _Atomic uint64_t word;
  _Atomic uint64_t gkey;
} shmap__bslot;

/* One device of a runtime.  The first part is written only by the device
 * and read by its peers; the waiter is written by peers. */
typedef struct shmap__dev {
  alignas(SHMAP__CACHELINE) _Atomic uint32_t arrive; /* calls entered */
  _Atomic int finished;      /* body returned */
  alignas(SHMAP__CACHELINE) shmap__call calls[SHMAP__HIST];
  shmap__bslot bslot[SHMAP__SLOTS]; /* as a group leader */
  alignas(SHMAP__CACHELINE) shmap__waiter waiter;
  /* Fiber mode: the device's context, its worker, and what it waits for. */
  alignas(SHMAP__CACHELINE) shmap__fiber fiber;
  struct shmap__worker *worker;
  shmap__waiter *wq; /* where to wake this device: own or worker's waiter */
  int fstate;
  shmap__pred wpred;
  void *warg;
  _Atomic int *wabort;
  int wres;
  char errbuf[SHMAP__MSG_MAX]; /* fiber mode: the device's own message */
  /* Written by the device, read by the watchdog and debuggers. */
  alignas(SHMAP__CACHELINE) _Atomic int state;
  _Atomic uint64_t since;  /* uv_hrtime() when the state began */
  _Atomic uint64_t op;     /* in a collective: shmap__pack_op() */
  /* Trace events of this device (owned by the device while a map runs). */
  shmap__tev *tev;
  size_t ntev, captev;
  uint64_t tev_dropped;
  alignas(SHMAP__CACHELINE) struct shmap__runtime *rt;
  int id;
  uint32_t seen_epoch;
  struct shmap_ctx *ctx; /* during a map: the device's context */
  int *members;          /* scratch for a group's devices (ndev) */
  struct shmap__chunk *cache[SHMAP__CACHE]; /* freed large blocks (map.c) */
  /* The last axes text this device's collectives parsed, and the result. */
  char axes_text[48];
  int axes_parsed[SHMAP_MAX_AXES];
  int axes_n;
  char name[16];
  uintptr_t thread; /* uv_thread_t, stored opaquely */
  int tid;          /* kernel thread id (thread mode), for debuggers */
} shmap__dev;

struct shmap__job;
typedef void (*shmap__run_fn)(struct shmap__job *job, int dev);

/* A worker thread running several device fibers (fiber mode). */
typedef struct shmap__worker {
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
} shmap__worker;

typedef struct shmap__runtime {
  struct shmap__runtime *next; /* in the registry of live runtimes */
  int id;                      /* registry number (trace process id) */
  shmap_mesh *mesh;
  int ndev;
  int spin;                /* spin iterations before sleeping */
  int host_spin;           /* the same for the map's caller */
  int mode;                /* enum shmap__mode, chosen at the first map */
  int nworkers;            /* fiber mode */
  int dirty;               /* the last map failed: slots need a reset */
  shmap__worker *workers;
  void *lock;              /* uv_mutex_t: one map at a time per mesh */
  shmap__dev *devs;        /* NULL until the first map */
  int started;             /* threads running */
  /* Bumped by two to start a job (or to stop); the low bit tells worker 0
   * that the map's caller runs its devices. */
  _Atomic uint32_t epoch;
  _Atomic int stop;
  struct shmap__job *job;
  shmap__run_fn run;
  /* The current job's failure: first failing device, code and message. */
  _Atomic int abort;
  _Atomic int failed_dev;
  int fail_code;
  char fail_msg[SHMAP__MSG_MAX];
  _Atomic int done;        /* devices finished with the job */
  shmap__waiter host;      /* the thread that called the map */
} shmap__runtime;

/* The context of one device during one map call. */
struct shmap__chunk;
struct shmap_ctx {
  shmap__runtime *rt;
  struct shmap__job *job;
  int dev;
  int coords[SHMAP_MAX_AXES];
  shmap_block **in;           /* nin blocks */
  shmap_block **out;          /* nout blocks, NULL until declared */
  struct shmap__chunk *arena; /* every block this device allocated */
  int *members;               /* scratch: a group's devices (ndev) */
  uint32_t seq;               /* collective calls entered */
  int err;                    /* first error this device reported */
  const char *job_name;       /* a library job's name for the trace, or NULL */
  /* Input blocks shared and built, and the bytes copied to build them. */
  uint64_t shared, built;
  shmap__moved moved;
};

int shmap__runtime_create(shmap__runtime **out, shmap_mesh *mesh);
void shmap__runtime_destroy(shmap__runtime *rt);
/* Run job on every device and return when all are done.  Starts the
 * threads on first use.  Caller holds the runtime lock. */
int shmap__runtime_run(shmap__runtime *rt, struct shmap__job *job,
                       shmap__run_fn run);
void shmap__runtime_lock(shmap__runtime *rt);
void shmap__runtime_unlock(shmap__runtime *rt);
bool shmap__runtime_trylock(shmap__runtime *rt);

/* The context of the body running on the calling thread, or NULL. */
shmap_ctx *shmap__current(void);
void shmap__set_current(shmap_ctx *ctx);

/* Waiting: returns when pred(arg) holds (true), or when *abort is set
 * first (false; abort may be NULL).  For a thread's own waiter. */
bool shmap__wait(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                 void *arg, _Atomic int *abort);
/* The same with an absolute deadline (shmap__now() time, 0: none):
 * 1 condition, 0 abort, -1 deadline passed. */
int shmap__wait_until(shmap__runtime *rt, shmap__waiter *w, shmap__pred pred,
                      void *arg, _Atomic int *abort, uint64_t deadline);
void shmap__wake(shmap__waiter *w);
void shmap__wake_all(shmap__runtime *rt);
/* A device waits (inside a map): sleeps its thread, or in fiber mode
 * hands its worker to another device until pred holds or abort is set. */
bool shmap__dev_wait(shmap__runtime *rt, shmap__dev *d, shmap__pred pred,
                     void *arg, _Atomic int *abort);
static inline void shmap__dev_wake(shmap__dev *d) { shmap__wake(d->wq); }

/* Record a failure of device `dev`: the first one becomes the job's error
 * and releases every waiting device.  Returns code. */
int shmap__fail(shmap__runtime *rt, int dev, int code, const char *msg);
/* What a device released by another's failure returns: ECANCELED (or
 * EMISMATCH when the failure was a mismatch), message set. */
int shmap__canceled(shmap_ctx *ctx, const char *op);

/* ---- debug.c: registry, watchdog, trace --------------------------------- */

/* Every live runtime, for the gdb extension and the trace writer. */
void shmap__registry_add(shmap__runtime *rt);
void shmap__registry_remove(shmap__runtime *rt);
/* Watchdog period in nanoseconds (0: off). */
uint64_t shmap__watchdog_ns(void);
/* Print every device's state to `out`. */
void shmap__watchdog_report(shmap__runtime *rt, uint64_t running_ns, void *out);
/* "psum", "all_gather", ... for a collective kind ("?" if unknown). */
const char *shmap__kind_name(int kind);
/* A collective as one word: kind, number of axes and the axes. */
uint64_t shmap__pack_op(int kind, const int axes[], int naxes);
/* A runtime goes away: keep its events for the trace file, free them. */
void shmap__trace_runtime_gone(shmap__runtime *rt);
/* Whether traces are being recorded. */
bool shmap__tracing(void);
/* Record an event of device `d` (when tracing). */
void shmap__trace_event(shmap__dev *d, uint64_t t0, uint64_t t1, uint64_t op,
                        uint64_t bytes, uint32_t seq);
/* Record a body of device `d`; `job` names a job of the library's own (it
 * shows under that name in the trace), NULL for a user's body. */
void shmap__trace_body(shmap__dev *d, uint64_t t0, uint64_t t1, uint32_t seq,
                       const char *job);
/* The device changes state (and the time it did). */
static inline uint64_t shmap__set_state(shmap__dev *d, int state, uint64_t op,
                                        uint64_t now)
{
  atomic_store_explicit(&d->op, op, memory_order_relaxed);
  atomic_store_explicit(&d->since, now, memory_order_relaxed);
  atomic_store_explicit(&d->state, state, memory_order_release);
  return now;
}
uint64_t shmap__now(void);

/* ---- the device arena (map.c) ------------------------------------------ */

enum shmap__chunk_kind { SHMAP__CHUNK_IN, SHMAP__CHUNK_OUT, SHMAP__CHUNK_SCRATCH };

typedef struct shmap__chunk {
  struct shmap__chunk *prev, *next;
  int kind;
  size_t cap;        /* bytes of data room */
  shmap_block block; /* data follows the header, 64-byte aligned */
} shmap__chunk;

/* A new block in the device's arena; NULL (message set) on failure. */
shmap__chunk *shmap__arena_alloc(shmap_ctx *ctx, shmap_dtype dtype, int rank,
                                 const int64_t shape[], int kind, bool zero);
void shmap__arena_free(shmap_ctx *ctx, shmap__chunk *c);
/* Take a chunk out of the arena without freeing it. */
void shmap__arena_unlink(shmap_ctx *ctx, shmap__chunk *c);
/* The arena chunk holding `block`, or NULL when it is not one of ours. */
shmap__chunk *shmap__arena_find(shmap_ctx *ctx, const shmap_block *block);

/* Whether a block argument is well formed (cheap; no message). */
bool shmap__block_valid(const shmap_block *b);
/* Check a block argument (`name` describes it in messages). */
int shmap__block_check(shmap_ctx *ctx, const char *op, const char *name,
                       const shmap_block *b);
/* Check that ctx is the context of the body running on this thread. */
int shmap__ctx_check(shmap_ctx *ctx, const char *op);
/* A library error on a device during its body: message "<op> on device N
 * (coords): <text>", recorded as the job's failure; returns code. */
int shmap__dev_fail(shmap_ctx *ctx, const char *op, int code,
                    const char *fmt, ...) SHMAP__PRINTF(4, 5);

/* ---- maps (map.c) ---------------------------------------------------- */

/* Library-internal map flag: the outputs are known to be replicated along
 * the axes their specs leave out (no check, no copy). */
#define SHMAP__TRUSTED_REP 0x80000000u

int shmap__map(shmap_mesh *mesh, shmap_body_fn body, void *arg, int nin,
               shmap_array *const in[], const char *const in_specs[],
               int nout, shmap_array *out[], const char *const out_specs[],
               unsigned flags);

#endif /* SHMAP_RUNTIME_H */
