/* SPDX-License-Identifier: MIT */
/*
 * sol.h - the speed of light of bench/run: what this machine's caches and
 * memory allow a collective at best, from a measured core-to-core
 * cache-line transfer time and measured read and write rates.
 * BENCHMARKS.md ("Speed of light") gives the arithmetic.
 */
#ifndef BENCH_SOL_H
#define BENCH_SOL_H

#include <stddef.h>

/* The machine's measurements: the one-way transfer time of a cache line
 * between two cores in microseconds, and read and write rates in bytes
 * per microsecond at working sets of SOL_MIN << (2 * i) bytes. */
#define SOL_SIZES 9
#define SOL_MIN ((size_t)4096)
typedef struct sol_machine {
  double line_us;
  /* One handover of a core from one thread to another through the kernel
   * (a futex wake and wait, both threads on one core), in microseconds:
   * what a thread that sleeps until another's call wakes it costs at
   * least each time it runs. */
  double switch_us;
  int cores; /* cores the measurement used: 2 when pinning worked */
  double read[SOL_SIZES], write[SOL_SIZES];
} sol_machine;

/* Measure the machine (about a second); quick takes fewer samples. */
void sol_measure(sol_machine *m, int quick);

/* The cache-line transfer time now (m->line_us's measurement again, about
 * 50 ms): the pairing of the two cores on a virtual machine changes every
 * few minutes, and with it this time, by 4x.  NaN on one core. */
double sol_line_now(const sol_machine *m);

/* The bounds of one case: a collective `op` of bench/run's table (or an
 * empty map) over P devices of n bytes each.  Latency: line_us times the
 * dependent transfers; bandwidth: the bytes read and written over the
 * rates at the case's working set.  The bound is the larger.  Ops are
 * named as bench/run prints them, and "ppermute_new" is a ppermute whose
 * result is a block of its own (the transport table's). */
typedef struct sol_bound {
  int steps;            /* dependent cache-line transfers */
  double rbytes, wbytes; /* bytes read and written, all devices */
  double lat_us, bw_us, us;
} sol_bound;
sol_bound sol_case(const sol_machine *m, const char *op, int P, size_t n);

#endif
