/* SPDX-License-Identifier: MIT */
/*
 * hooks.c - the hooks the layers above register with the runtime
 * (sched.h): a short table, appended to under a lock and read without one.
 */
#include "sched/hooks.h"

#include "settings.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* Every subsystem registers one table; a few to spare. */
#define MAX_HOOKS 16

static const shmap__rt_hooks *_Atomic hooks[MAX_HOOKS];
static _Atomic int nhooks;
static pthread_mutex_t hooks_lock = PTHREAD_MUTEX_INITIALIZER;

void shmap__runtime_hooks(const shmap__rt_hooks *h)
{
  pthread_mutex_lock(&hooks_lock);
  int n = atomic_load(&nhooks), i = 0;
  while (i < n && atomic_load(&hooks[i]) != h)
    i++;
  if (i == n) {
    if (n == MAX_HOOKS) {
      /* A fixed number of subsystems register: more is a library bug. */
      fprintf(stderr, "shmap: too many runtime hooks\n");
      abort();
    }
    atomic_store(&hooks[n], h);
    atomic_store(&nhooks, n + 1); /* publishes the entry */
  }
  pthread_mutex_unlock(&hooks_lock);
}

static int hooks_count(void) { return atomic_load(&nhooks); }

static const shmap__rt_hooks *hooks_at(int i) { return atomic_load(&hooks[i]); }

void shmap__hooks_added(shmap__runtime *rt)
{
  for (int i = 0, n = hooks_count(); i < n; i++)
    if (hooks_at(i)->added)
      hooks_at(i)->added(rt);
}

void shmap__hooks_removed(shmap__runtime *rt)
{
  for (int i = 0, n = hooks_count(); i < n; i++)
    if (hooks_at(i)->removed)
      hooks_at(i)->removed(rt);
}

void shmap__hooks_failed(shmap__runtime *rt, int dev, int code,
                         const char *msg)
{
  for (int i = 0, n = hooks_count(); i < n; i++)
    if (hooks_at(i)->failed)
      hooks_at(i)->failed(rt, dev, code, msg);
}

bool shmap__hooks_release(shmap__runtime *rt)
{
  bool done = false;
  for (int i = 0, n = hooks_count(); i < n; i++)
    if (hooks_at(i)->release)
      done |= hooks_at(i)->release(rt);
  return done;
}

void shmap__hooks_destroy(shmap__runtime *rt)
{
  for (int i = hooks_count() - 1; i >= 0; i--)
    if (hooks_at(i)->destroy)
      hooks_at(i)->destroy(rt);
}

void shmap__hooks_watch(shmap__runtime *rt, uint64_t running_ns)
{
  for (int i = 0, n = hooks_count(); i < n; i++)
    if (hooks_at(i)->watch)
      hooks_at(i)->watch(rt, running_ns);
}

/* ---- the watchdog's period ----------------------------------------------- */

static _Atomic uint64_t watchdog_ns;
static pthread_once_t watchdog_once = PTHREAD_ONCE_INIT;

static void watchdog_env(void)
{
  double s = shmap__setting_watchdog();
  if (s > 0)
    atomic_store(&watchdog_ns, (uint64_t)(s * 1e9));
}

uint64_t shmap__watchdog_ns(void)
{
  pthread_once(&watchdog_once, watchdog_env);
  return atomic_load(&watchdog_ns);
}

void shmap__watchdog_set(uint64_t ns)
{
  pthread_once(&watchdog_once, watchdog_env);
  atomic_store(&watchdog_ns, ns);
}
