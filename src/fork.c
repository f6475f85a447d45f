/* SPDX-License-Identifier: MIT */
/*
 * fork.c - what the library supports after fork().
 *
 * A child process starts with the calling thread only: the device threads
 * of the parent's meshes, and the thread pool OpenMP keeps for large
 * copies, are not there.  So in a child:
 *   - host arrays, and arrays sharded on the parent's meshes, can be read,
 *     copied and destroyed (large copies run on one thread, since OpenMP's
 *     pool does not survive fork in GNU libgomp);
 *   - the parent's meshes can be queried and destroyed, but a map on one
 *     returns SHMAP_ESTATE: create a new mesh in the child, which works as
 *     in any process.
 * Handlers registered with pthread_atfork take the library's global locks
 * around the fork, so that no other thread of the parent holds one in the
 * child's copy.
 */
#include "internal.h"
#include "sched/runtime.h"

#include <pthread.h>

/* How many forks separate this process from the one that loaded us. */
static _Atomic unsigned generation;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void prepare(void) { shmap__debug_fork(0); }
static void parent(void) { shmap__debug_fork(1); }
static void child(void)
{
  shmap__debug_fork(2);
  atomic_fetch_add(&generation, 1);
}

static void register_handlers(void) { pthread_atfork(prepare, parent, child); }

void shmap__fork_init(void) { pthread_once(&fork_once, register_handlers); }

unsigned shmap__fork_generation(void) { return atomic_load(&generation); }
