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

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* How many forks separate this process from the one that loaded us. */
static _Atomic unsigned generation;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* The subsystems' hooks: a few, registered when each is set up (the
 * debugging layer's registry and trace locks among them). */
#define MAX_HOOKS 8
static void (*_Atomic hooks[MAX_HOOKS])(int phase);
static _Atomic int nhooks;
static pthread_mutex_t hooks_lock = PTHREAD_MUTEX_INITIALIZER;

void shmap__fork_hook(void (*fn)(int phase))
{
  pthread_mutex_lock(&hooks_lock);
  int n = atomic_load(&nhooks);
  if (n == MAX_HOOKS) {
    /* A fixed number of subsystems register: more is a library bug. */
    fprintf(stderr, "shmap: too many fork hooks\n");
    abort();
  }
  atomic_store(&hooks[n], fn);
  atomic_store(&nhooks, n + 1); /* publishes the entry */
  pthread_mutex_unlock(&hooks_lock);
}

/* The hooks' lock is taken around the fork too, so that the list the
 * child's handler walks is the one the parent's walked. */
static void prepare(void)
{
  pthread_mutex_lock(&hooks_lock);
  for (int i = 0, n = atomic_load(&nhooks); i < n; i++)
    atomic_load(&hooks[i])(0);
}
static void after(int phase)
{
  for (int i = atomic_load(&nhooks) - 1; i >= 0; i--)
    atomic_load(&hooks[i])(phase);
  pthread_mutex_unlock(&hooks_lock);
}
static void parent(void) { after(1); }
static void child(void)
{
  after(2);
  atomic_fetch_add(&generation, 1);
}

static void register_handlers(void) { pthread_atfork(prepare, parent, child); }

void shmap__fork_init(void) { pthread_once(&fork_once, register_handlers); }

unsigned shmap__fork_generation(void) { return atomic_load(&generation); }
