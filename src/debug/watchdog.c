/* SPDX-License-Identifier: MIT */
/*
 * watchdog.c - the watchdog: while a map runs longer than its period, the
 * map's caller reports every device's state (the runtime calls it through
 * the hooks registered below), naming a likely cause where it can.
 */
#include "debug/debug.h"

#include "coll/async.h"
#include "device/device.h"
#include "proc/proc.h"
#include "sched/trace.h"
#include "kinds.h"

#include <stdio.h>
#include <string.h>

/* ---- describing a device ------------------------------------------------ */

void shmap__op_format(const shmap_mesh *mesh, uint64_t op, char *buf, size_t n)
{
  int axes[SHMAP_MAX_AXES] = {0}, naxes = (int)(op >> 8 & 0xf);
  if (naxes > SHMAP_MAX_AXES)
    naxes = SHMAP_MAX_AXES;
  for (int k = 0; k < naxes && k < SHMAP_MAX_AXES; k++)
    axes[k] = (int)(op >> (12 + 4 * k) & 0xf);
  char a[320];
  shmap__axes_format(mesh, axes, naxes, a, sizeof a);
  snprintf(buf, n, "%s over ", shmap__kind_name((int)(op & 0xff)));
  shmap__cat(buf, n, "%s", naxes ? a : "()");
}

void shmap__nest_format(const shmap_mesh *mesh, uint64_t nest, char *buf,
                        size_t n)
{
  buf[0] = '\0';
  int levels = (int)(nest >> 56);
  if (levels == 0 ||
      (levels == 1 && (unsigned)(nest & 0xff) == shmap__mesh_all(mesh)))
    return;
  shmap__cat(buf, n, " [");
  for (int l = 0; l < levels && l < SHMAP__NEST_LEVELS; l++) {
    char axes[320];
    shmap__mask_format(mesh, (unsigned)(nest >> (8 * l) & 0xff), axes,
                       sizeof axes);
    shmap__cat(buf, n, "%s%s over %s", l ? " > " : "",
               l ? "nested" : "map", axes);
  }
  shmap__cat(buf, n, "]");
}

/* ---- watchdog ------------------------------------------------------------ */

SHMAP_EXTERN int shmap_set_watchdog(double seconds)
{
  (void)shmap__watchdog_ns(); /* SHMAP_WATCHDOG is read first, and once */
  if (!(seconds >= 0) || seconds > 1e9)
    return shmap__err(SHMAP_EINVAL,
                      "shmap_set_watchdog: %g seconds is not a period (use 0 "
                      "to turn the watchdog off)", seconds);
  shmap__watchdog_set((uint64_t)(seconds * 1e9));
  return 0;
}

/* Under MPI, for a device another process runs: its name without the
 * process (" on process 1 (host h)") in name[], and "runs in process 1
 * (host h)" in what[]; false for a device of this process. */
static bool elsewhere(const shmap_mesh *mesh, int d, char *name, size_t nn,
                      char *what, size_t nw)
{
  if (shmap__dev_local(mesh, d))
    return false;
  char where[128];
  shmap__proc_suffix(mesh, d, where, sizeof where);
  shmap__mesh_devname(mesh, d, name, nn);
  size_t len = strlen(name), wl = strlen(where);
  if (wl && len >= wl && strcmp(name + len - wl, where) == 0)
    name[len - wl] = '\0';
  const char *on = " on ";
  snprintf(what, nw, "runs in %s",
           strncmp(where, on, 4) == 0 ? where + 4 : "another process");
  return true;
}

/* Fiber mode: a device keeps its worker until it calls a collective (or
 * returns), so a body that waits for another device by other means (a
 * flag, a barrier) never ends when that device shares its worker and no
 * other worker is free to take that device over (runtime.c).  Name
 * the likely cause: the device longest in its body, and a device of the
 * same worker still to run. */
static void stuck_fiber_hint(const shmap__runtime *rt, uint64_t now, FILE *out)
{
  if (!shmap__workers(rt))
    return;
  int longest = -1;
  uint64_t longest_since = 0;
  for (int d = 0; d < rt->ndev; d++) {
    const shmap__dev *dev = &rt->devs[d];
    uint64_t since = atomic_load_explicit(&dev->dbg.since, memory_order_relaxed);
    if (atomic_load(&dev->dbg.state) == SHMAP__ST_BODY && since &&
        (longest < 0 || since < longest_since)) {
      longest = d;
      longest_since = since;
    }
  }
  if (longest < 0 || now < longest_since + 1000000000u)
    return;
  const shmap__worker *w = rt->devs[longest].sched.worker;
  for (int d = w->first; d < w->first + w->count; d++) {
    const shmap__dev *dev = &rt->devs[d];
    int state = atomic_load(&dev->dbg.state);
    /* Under MPI a worker's range also holds devices other processes run,
     * which take no turn here. */
    if (!shmap__dev_local(rt->mesh, d))
      continue;
    if (d == longest || state == SHMAP__ST_DONE ||
        state == SHMAP__ST_REPLICA ||
        (state == SHMAP__ST_PARKED && atomic_load(&dev->coll.finished)))
      continue;
    char a[SHMAP__DEVNAME_MAX], b[SHMAP__DEVNAME_MAX];
    shmap__mesh_devname(rt->mesh, longest, a, sizeof a);
    shmap__mesh_devname(rt->mesh, d, b, sizeof b);
    fprintf(out,
            "  likely cause: %s has run its body for %.1f s without calling a "
            "collective while %s, which shares its worker thread, %s; in "
            "fiber mode a device runs until it calls a collective or returns, "
            "so devices may synchronise only through collectives (a spin on "
            "a flag or a barrier between devices can wait for ever; "
            "SHMAP_SCHED=threads gives each device a thread)\n",
            a, (double)(now - longest_since) / 1e9, b,
            state == SHMAP__ST_COLL ? "waits in a collective"
                                    : "cannot start or resume");
    return;
  }
}

void shmap__watchdog_report(shmap__runtime *rt, uint64_t running_ns, void *out_)
{
  FILE *out = out_;
  const shmap_mesh *mesh = rt->mesh;
  char axes[256] = "";
  for (int a = 0; a < mesh->naxes; a++)
    shmap__cat(axes, sizeof axes, "%s%s=%d", a ? ", " : "", mesh->names[a],
               mesh->sizes[a]);
  uint64_t now = shmap__now();
  /* Under MPI each process reports its own devices: say which one. */
  char self[128] = "";
  if (mesh->place && mesh->place->nproc > 1)
    snprintf(self, sizeof self, " in process %d (host %s)", mesh->place->self,
             shmap__proc_self()->host);
  flockfile(out);
  fprintf(out, "shmap watchdog: a map on mesh %s has run for %.1f s%s; "
               "devices:\n", axes, (double)running_ns / 1e9, self);
  for (int d = 0; d < rt->ndev; d++) {
    const shmap__dev *dev = &rt->devs[d];
    char name[SHMAP__DEVNAME_MAX + 2 * SHMAP__AXES_MAX];
    char what[SHMAP__DEVNAME_MAX + 64];
    if (elsewhere(mesh, d, name, sizeof name, what, sizeof what)) {
      /* Its state here says nothing: its own process reports it. */
      fprintf(out, "  %s: %s\n", name, what);
      continue;
    }
    int state = atomic_load_explicit(&dev->dbg.state, memory_order_acquire);
    uint64_t since = atomic_load_explicit(&dev->dbg.since, memory_order_relaxed);
    uint64_t op = atomic_load_explicit(&dev->dbg.op, memory_order_relaxed);
    double secs = since && now > since ? (double)(now - since) / 1e9 : 0;
    shmap__mesh_devname(mesh, d, name, sizeof name);
    size_t len = strlen(name);
    shmap__nest_format(mesh, atomic_load_explicit(&dev->dbg.nest,
                                                  memory_order_relaxed),
                       name + len, sizeof name - len);
    switch (state) {
    case SHMAP__ST_INPUTS: snprintf(what, sizeof what, "building its input blocks"); break;
    case SHMAP__ST_BODY: snprintf(what, sizeof what, "running its body"); break;
    case SHMAP__ST_COLL: {
      char o[360];
      shmap__op_format(mesh, op, o, sizeof o);
      snprintf(what, sizeof what, "waiting in %s (call #%u)", o,
               atomic_load(&dev->coll.arrive));
      break;
    }
    case SHMAP__ST_DONE: snprintf(what, sizeof what, "returned from its body"); break;
    case SHMAP__ST_REPLICA: {
      /* A map over some axes: this device holds the values of the body
       * running on its host (same manual coordinates, free ones 0). */
      char host[SHMAP__DEVNAME_MAX];
      shmap__mesh_devname(mesh, (int)op, host, sizeof host);
      snprintf(what, sizeof what, "replica of %s, waiting for its body", host);
      break;
    }
    default:
      if (atomic_load(&dev->coll.finished)) {
        snprintf(what, sizeof what, "returned from its body");
      } else {
        /* Parked since the previous map (or never run): it has waited to
         * start for as long as this map has run. */
        snprintf(what, sizeof what, "not started yet");
        secs = (double)running_ns / 1e9;
      }
      break;
    }
    bool past = strncmp(what, "returned", 8) == 0;
    fprintf(out, "  %s: %s %s%.1f s%s\n", name, what, past ? "" : "for ", secs,
            past ? " ago" : "");
    shmap__async_report(rt, d, now, out);
  }
  stuck_fiber_hint(rt, now, out);
  funlockfile(out);
  fflush(out);
}

static void watch(shmap__runtime *rt, uint64_t running_ns)
{
  shmap__watchdog_report(rt, running_ns, stderr);
}

static const shmap__rt_hooks watchdog_hooks = {.watch = watch};

/* The map's caller reports through this whenever SHMAP_WATCHDOG or
 * shmap_set_watchdog asks (registered by shmap__debug_init). */
void shmap__watchdog_register(void)
{
  shmap__runtime_hooks(&watchdog_hooks);
}
