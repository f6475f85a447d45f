/* SPDX-License-Identifier: MIT */
/*
 * settings.h - the library's SHMAP_* environment variables, read and
 * checked in one place (settings.c).  Each function reads its variable when
 * called (tests and programs may change the environment between meshes); a
 * value that is not valid is reported once on stderr, with the accepted
 * values, and the default is used.
 */
#ifndef SHMAP_SETTINGS_H
#define SHMAP_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Smallest and largest stack a device may be given, and the fiber
 * default (thread mode's default is the system's). */
#define SHMAP__STACK_MIN ((size_t)64 << 10)
/* No real limit above: what the system refuses is reported by the map
 * (SHMAP_ESYS); this one only keeps the page rounding from overflowing. */
#define SHMAP__STACK_MAX ((size_t)1 << 62)
#define SHMAP__FIBER_STACK_DEFAULT ((size_t)4 << 20)

/* SHMAP_SCHED: the name of a scheduling mode (threads, fibers, explore), or NULL
 * for auto (the default). */
const char *shmap__setting_sched(void);
/* SHMAP_WORKERS: worker threads in fiber mode, or 0 for the default. */
int shmap__setting_workers(void);
/* SHMAP_SPIN: microseconds of spinning before sleeping, or -1 for the
 * default. */
long shmap__setting_spin(void);
/* SHMAP_STACK_SIZE in bytes, or 0 for the default. */
size_t shmap__setting_stack_size(void);
/* SHMAP_WATCHDOG in seconds (0: none). */
double shmap__setting_watchdog(void);
/* SHMAP_TRACE: the path, or NULL when unset or empty. */
/* SHMAP_REHEARSE (a fabric to rehearse every map on) and
 * SHMAP_REHEARSE_OUT (where the reports go), NULL when unset. */
const char *shmap__setting_rehearse(void);
const char *shmap__setting_rehearse_out(void);
const char *shmap__setting_trace(void);
/* SHMAP_SIMD: the index in names[0..n) of the instruction set it names, or
 * -1 when unset or not one of them (then the caller's default). */
int shmap__setting_simd(const char *const names[], int n);

/* The check of asynchronous collectives (checksums of inputs and results
 * between start and wait, see shmap__map_env): whether runs under
 * exploring schedules turn it on now. */
bool shmap__setting_async_forced(void);
/* Turn the check on (+1) while runs under exploring schedules need it,
 * and off again (-1); SHMAP_ASYNC_CHECK=1 keeps it on regardless. */
void shmap__setting_async_check_force(int delta);
/* SHMAP_HUGEPAGES: 0 or 1 (the default): ask for transparent huge pages
 * for allocations of 2 MiB and more (alloc.c). */
bool shmap__setting_hugepages(void);
/* SHMAP_MEMBARRIER: 0 or 1 (the default): publish without a full fence
 * where the kernel has membarrier(2) (runtime/sched.h).  Read once per
 * process, at its first mesh. */
bool shmap__setting_membarrier(void);

/* SHMAP_REPLAY: the schedule every explored map runs under (see
 * shmap__parse_schedule), or NULL. */
const char *shmap__setting_replay(void);
/* SHMAP_EXPLORE_SEED: the seed of the exploring schedules; true when set
 * (*seed is 1 when not). */
bool shmap__setting_explore_seed(uint64_t *seed);
/* A schedule of the exploring mode: "r.SEED" (random walk) or "pD.SEED"
 * (PCT with D priority change points, 1 to 64); true when valid. */
bool shmap__parse_schedule(const char *text, char *strategy, int *depth,
                           uint64_t *seed);

/* What a map reads from the environment at its start, in one pass:
 * SHMAP_EXPLORE, how many schedules the map runs under (0: once, as
 * usual), and whether the map checks the rules of asynchronous
 * collectives: SHMAP_ASYNC_CHECK=1 (0, the default, does not) or
 * SHMAP_REPLAY set (not counting shmap__setting_async_check_force). */
typedef struct shmap__map_env {
  int explore;
  bool async_check;
} shmap__map_env;
void shmap__settings_map(shmap__map_env *out);

/* Parsers, for the unit tests: true and *out set when `text` is valid. */
bool shmap__parse_size(const char *text, size_t *out);
bool shmap__parse_seconds(const char *text, double *out);
bool shmap__parse_long(const char *text, long lo, long hi, long *out);

#endif /* SHMAP_SETTINGS_H */
