/* SPDX-License-Identifier: MIT */
/*
 * sol.c - the speed-of-light bounds of bench/run (see sol.h and
 * BENCHMARKS.md, "Speed of light").
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "sol.h"

#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_d(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The two cores the measurements pin their threads to: the first two this
 * process may run on; -1 when there is only one. */
static void two_cores(int core[2])
{
  cpu_set_t set;
  core[0] = core[1] = -1;
  if (sched_getaffinity(0, sizeof set, &set))
    return;
  for (int c = 0, k = 0; c < CPU_SETSIZE && k < 2; c++)
    if (CPU_ISSET(c, &set))
      core[k++] = c;
}

static int pin(int core)
{
  if (core < 0)
    return -1;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* ---- the cache-line ping-pong ------------------------------------------ */

/* One line, alone in its 128 bytes (adjacent-line prefetch pairs lines),
 * that the two threads hand back and forth: the pinger writes odd values
 * and waits for the next even one, the ponger the reverse, so each handoff
 * is one transfer of the line from one core's cache to the other's. */
typedef struct pp {
  _Alignas(128) _Atomic uint64_t line;
  char pad[120];
  int core, rounds;
} pp;

static void *ponger(void *arg)
{
  pp *p = arg;
  pin(p->core);
  for (uint64_t v = 1; v < 2 * (uint64_t)p->rounds; v += 2) {
    while (atomic_load_explicit(&p->line, memory_order_acquire) != v)
      ;
    atomic_store_explicit(&p->line, v + 1, memory_order_release);
  }
  return NULL;
}

/* The time per one-way transfer: the least over short samples, so that a
 * sample in which either thread lost its core does not count. */
static double pingpong(int core[2], int samples)
{
  enum { ROUNDS = 2000 };
  double v[64];
  for (int s = 0; s < samples; s++) {
    pp *p = aligned_alloc(128, sizeof *p);
    if (!p)
      return NAN;
    memset(p, 0, sizeof *p);
    p->core = core[1];
    p->rounds = ROUNDS;
    pthread_t t;
    pin(core[0]);
    if (pthread_create(&t, NULL, ponger, p)) {
      free(p);
      return NAN;
    }
    double t0 = now_us();
    for (uint64_t v2 = 0; v2 < 2 * (uint64_t)ROUNDS; v2 += 2) {
      atomic_store_explicit(&p->line, v2 + 1, memory_order_release);
      while (atomic_load_explicit(&p->line, memory_order_acquire) != v2 + 2)
        ;
    }
    v[s] = (now_us() - t0) / (2.0 * ROUNDS);
    pthread_join(t, NULL);
    free(p);
  }
  qsort(v, (size_t)samples, sizeof v[0], cmp_d);
  return v[0];
}

/* ---- the kernel's handover -------------------------------------------- */

/* Two threads on one core hand it back and forth: each sleeps in
 * FUTEX_WAIT until the other sets the word to its value and wakes it, so
 * every handoff is a wake-up, a context switch and a return to user
 * space, as when a device thread sleeps until a peer's call wakes it. */
typedef struct hv {
  _Alignas(64) _Atomic uint32_t word;
  int core, rounds;
} hv;

static void futex_wait(_Atomic uint32_t *w, uint32_t v)
{
  while (atomic_load_explicit(w, memory_order_acquire) == v)
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void futex_set(_Atomic uint32_t *w, uint32_t v)
{
  atomic_store_explicit(w, v, memory_order_release);
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *handback(void *arg)
{
  hv *h = arg;
  pin(h->core);
  for (uint32_t v = 1; v < 2 * (uint32_t)h->rounds; v += 2) {
    futex_wait(&h->word, v - 1);
    futex_set(&h->word, v + 1);
  }
  return NULL;
}

/* The time per handoff, the least over short samples. */
static double handover(int core, int samples)
{
  enum { ROUNDS = 500 };
  double v[64];
  int got = 0;
  for (int s = 0; s < samples; s++) {
    hv h = {.core = core, .rounds = ROUNDS};
    pthread_t t;
    pin(core);
    if (pthread_create(&t, NULL, handback, &h))
      break;
    /* Let the other thread reach its first wait. */
    usleep(1000);
    double t0 = now_us();
    for (uint32_t k = 0; k < 2 * (uint32_t)ROUNDS; k += 2) {
      futex_set(&h.word, k + 1);
      futex_wait(&h.word, k + 1);
    }
    v[got++] = (now_us() - t0) / (2.0 * ROUNDS);
    pthread_join(t, NULL);
  }
  if (!got)
    return NAN;
  qsort(v, (size_t)got, sizeof v[0], cmp_d);
  return v[0];
}

/* ---- read and write rates ---------------------------------------------- */

typedef struct bw {
  pthread_barrier_t *bar;
  int core, write, reps, passes;
  size_t bytes;
  uint64_t *buf;
  double *t0, *t1; /* [reps], written by thread 0 */
  int me;
  volatile uint64_t sink;
} bw;

/* Sum the buffer (reads) or store to it (writes), reps times, lined up
 * with the other thread by the barrier before and after each pass. */
static void *bw_thread(void *arg)
{
  bw *b = arg;
  pin(b->core);
  size_t n = b->bytes / sizeof(uint64_t);
  memset(b->buf, 1, b->bytes); /* first touch by the owner */
  for (int r = 0; r < b->reps; r++) {
    pthread_barrier_wait(b->bar);
    if (b->me == 0)
      b->t0[r] = now_us();
    for (int q = 0; q < b->passes; q++) {
      if (b->write) {
        memset(b->buf, r + q, b->bytes);
      } else {
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = 0; i + 4 <= n; i += 4) {
          s0 += b->buf[i];
          s1 += b->buf[i + 1];
          s2 += b->buf[i + 2];
          s3 += b->buf[i + 3];
        }
        b->sink = s0 + s1 + s2 + s3;
      }
    }
    pthread_barrier_wait(b->bar);
    if (b->me == 0)
      b->t1[r] = now_us();
  }
  return NULL;
}

/* Bytes per microsecond that two threads on two cores read (or write)
 * together from buffers of `ws` bytes in all: the best of the timed
 * samples after the first, which warms the caches.  A sample passes over a
 * small buffer many times, so that the barriers around it cost little
 * beside the traffic. */
static double rate(int core[2], size_t ws, int write, int reps)
{
  pthread_barrier_t bar;
  double t0[64], t1[64];
  bw b[2];
  pthread_t t[2];
  pthread_barrier_init(&bar, NULL, 2);
  for (int i = 0; i < 2; i++) {
    b[i] = (bw){.bar = &bar, .core = core[i], .write = write, .reps = reps,
                .bytes = ws / 2, .t0 = t0, .t1 = t1, .me = i,
                .passes = ws < (4u << 20) ? (int)((4u << 20) / ws) : 1};
    b[i].buf = aligned_alloc(64, ws / 2);
  }
  double best = NAN;
  if (b[0].buf && b[1].buf &&
      pthread_create(&t[0], NULL, bw_thread, &b[0]) == 0) {
    /* Without a second thread, the caller takes its part (unpinned), so
     * that the first does not wait at the barrier for ever. */
    if (pthread_create(&t[1], NULL, bw_thread, &b[1]) == 0) {
      pthread_join(t[1], NULL);
    } else {
      b[1].core = -1;
      bw_thread(&b[1]);
    }
    best = 0;
    pthread_join(t[0], NULL);
    for (int r = 1; best == best && r < reps; r++)
      if ((double)ws * b[0].passes / (t1[r] - t0[r]) > best)
        best = (double)ws * b[0].passes / (t1[r] - t0[r]);
  }
  free(b[0].buf);
  free(b[1].buf);
  pthread_barrier_destroy(&bar);
  return best;
}

double sol_line_now(const sol_machine *m)
{
  if (m->cores != 2)
    return NAN;
  int core[2];
  two_cores(core);
  if (core[1] < 0)
    return NAN;
  cpu_set_t mask;
  bool have_mask = pthread_getaffinity_np(pthread_self(), sizeof mask,
                                          &mask) == 0;
  double us = pingpong(core, 15);
  if (have_mask)
    pthread_setaffinity_np(pthread_self(), sizeof mask, &mask);
  return us;
}

void sol_measure(sol_machine *m, int quick)
{
  int core[2];
  two_cores(core);
  m->cores = core[1] >= 0 ? 2 : 1;
  if (core[1] < 0)
    core[1] = core[0];
  /* The pinger is the calling thread: its own mask comes back after, or
   * every thread it starts later (devices, OpenMP) would inherit one
   * core.  On one core the ping-pong would measure time slices. */
  cpu_set_t mask;
  bool have_mask = pthread_getaffinity_np(pthread_self(), sizeof mask,
                                          &mask) == 0;
  m->line_us = m->cores == 2 ? pingpong(core, quick ? 15 : 63) : NAN;
  m->switch_us = handover(core[0], quick ? 5 : 15);
  if (have_mask)
    pthread_setaffinity_np(pthread_self(), sizeof mask, &mask);
  for (int i = 0; i < SOL_SIZES; i++) {
    size_t ws = SOL_MIN << (2 * i);
    /* Samples of at least 4 MiB of traffic; 64 MiB in all, at least 4. */
    int reps = ws < (4u << 20) ? 16 : (int)((64u << 20) / ws);
    reps = reps < 4 ? 4 : reps;
    m->read[i] = rate(core, ws, 0, quick && reps > 8 ? reps / 2 : reps);
    m->write[i] = rate(core, ws, 1, quick && reps > 8 ? reps / 2 : reps);
  }
}

/* ---- the bounds ---------------------------------------------------------- */

static int log2_ceil(int P)
{
  int k = 0;
  while ((1 << k) < P)
    k++;
  return k;
}

/* The rates' index for a working set: the largest measured size that it
 * fills (the smallest below SOL_MIN), whose rates are at least the
 * working set's own, so that the bound stays a lower bound between
 * measured sizes (8 MiB is priced at 4 MiB's rates, not at 16 MiB's). */
static int size_index(double ws)
{
  for (int i = SOL_SIZES - 1; i > 0; i--)
    if (ws >= (double)(SOL_MIN << (2 * i)))
      return i;
  return 0;
}

sol_bound sol_case(const sol_machine *m, const char *op, int P, size_t n)
{
  sol_bound b = {0};
  double pn = (double)P * (double)n, N = (double)n;
  int lg = log2_ceil(P);
  double ws;
  if (strcmp(op, "empty") == 0) {
    b.steps = 2 * lg; /* start every device, learn that all returned */
    ws = 0;
  } else if (strcmp(op, "ppermute") == 0) {
    /* A block can change owners without being copied. */
    b.steps = 1, ws = 0;
  } else if (strcmp(op, "ppermute_new") == 0) {
    /* The result is a block of its own: every block copied once. */
    b.steps = 1;
    b.rbytes = pn, b.wbytes = pn, ws = 2 * pn;
  } else if (strcmp(op, "psum_scatter") == 0) {
    b.steps = lg;
    b.rbytes = pn, b.wbytes = N, ws = pn + N;
  } else if (strcmp(op, "all_gather") == 0) {
    b.steps = lg;
    b.rbytes = N, b.wbytes = pn, ws = pn + N;
  } else if (strcmp(op, "all_to_all") == 0) {
    b.steps = lg;
    b.rbytes = pn, b.wbytes = pn, ws = 2 * pn;
  } else if (strncmp(op, "chain", 5) == 0) {
    b.steps = 2 * lg; /* a map: start the devices, learn that all returned */
    b.rbytes = pn, b.wbytes = pn, ws = 2 * pn;
  } else if (strncmp(op, "psum", 4) == 0) {
    b.steps = lg;
    b.rbytes = pn, b.wbytes = pn, ws = pn; /* in place */
  } else {
    b.steps = 0, ws = 0;
  }
  int i = size_index(ws);
  b.lat_us = m->line_us * b.steps; /* NaN: not measured (one core) */
  b.bw_us = ws > 0 ? b.rbytes / m->read[i] + b.wbytes / m->write[i] : 0;
  b.us = b.lat_us > b.bw_us ? b.lat_us : b.bw_us; /* bw_us when lat_us NaN */
  return b;
}
