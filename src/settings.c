/* SPDX-License-Identifier: MIT */
/*
 * settings.c - every SHMAP_* environment variable is read and checked here,
 * so that each has one parser, one list of accepted values, and one message
 * when it is wrong.  A bad value never stops a program: it is reported once
 * on stderr (again only if it changes) and the default is used.
 */
#include "settings.h"
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The last bad value reported per variable; a leaf lock (see the lock
 * order in runtime/debug.c). */
enum { V_SCHED, V_WORKERS, V_SPIN, V_STACK, V_WATCHDOG, V_SIMD, V_ASYNC,
       V_HUGE, V_MEMBARRIER, V_COUNT };
static pthread_mutex_t settings_lock = PTHREAD_MUTEX_INITIALIZER;
static char reported[V_COUNT][64];

static void bad_value(int v, const char *name, const char *value,
                      const char *accepted, const char *fallback)
{
  pthread_mutex_lock(&settings_lock);
  bool again = strncmp(reported[v], value, sizeof reported[v] - 1) == 0;
  if (!again)
    snprintf(reported[v], sizeof reported[v], "%s", value);
  pthread_mutex_unlock(&settings_lock);
  if (!again)
    fprintf(stderr, "shmap: %s=\"%.60s\" is not valid (accepted: %s); "
                    "using %s\n", name, value, accepted, fallback);
}

/* The variable's value, or NULL when unset or empty. */
static const char *env(const char *name)
{
  const char *s = getenv(name);
  return s && *s ? s : NULL;
}

/* A whole number of decimal digits only (no sign, no space), with a
 * binary unit suffix k, M or G when `units`, at most `max`. */
static bool parse_number(const char *text, bool units, unsigned long long max,
                         unsigned long long *out)
{
  if (!text || !isdigit((unsigned char)*text))
    return false;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno)
    return false;
  unsigned shift = 0;
  if (units)
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
  if (*end || v > (max >> shift))
    return false;
  *out = v << shift;
  return true;
}

bool shmap__parse_long(const char *text, long lo, long hi, long *out)
{
  unsigned long long v;
  if (hi < 0 || !parse_number(text, false, (unsigned long long)hi, &v) ||
      (long long)v < lo)
    return false;
  *out = (long)v;
  return true;
}

bool shmap__parse_size(const char *text, size_t *out)
{
  unsigned long long v;
  if (!parse_number(text, true, SIZE_MAX, &v))
    return false;
  *out = (size_t)v;
  return true;
}

bool shmap__parse_seconds(const char *text, double *out)
{
  if (!text || !(isdigit((unsigned char)*text) || *text == '.'))
    return false;
  char *end;
  double v = strtod(text, &end);
  if (*end || !isfinite(v) || v < 0 || v > 1e9)
    return false;
  *out = v;
  return true;
}

int shmap__setting_sched(void)
{
  const char *s = env("SHMAP_SCHED");
  if (!s || strcmp(s, "auto") == 0)
    return SHMAP__SCHED_AUTO;
  if (strcmp(s, "threads") == 0)
    return SHMAP__SCHED_THREADS;
  if (strcmp(s, "fibers") == 0)
    return SHMAP__SCHED_FIBERS;
  bad_value(V_SCHED, "SHMAP_SCHED", s, "threads, fibers, auto", "auto");
  return SHMAP__SCHED_AUTO;
}

/* An integer setting from lo to hi; `unset` when it is absent or invalid. */
static long long_setting(int v, const char *name, long lo, long hi,
                         long unset, const char *accepted,
                         const char *fallback)
{
  const char *s = env(name);
  long val;
  if (!s)
    return unset;
  if (shmap__parse_long(s, lo, hi, &val))
    return val;
  bad_value(v, name, s, accepted, fallback);
  return unset;
}

int shmap__setting_workers(void)
{
  return (int)long_setting(V_WORKERS, "SHMAP_WORKERS", 1, SHMAP_MAX_DEVICES,
                           0, "a number of worker threads from 1 to 4096",
                           "one worker per processor");
}

long shmap__setting_spin(void)
{
  return long_setting(V_SPIN, "SHMAP_SPIN", 0, 1000000000L, -1,
                      "a spin time in microseconds from 0 to 1000000000",
                      "the default");
}

size_t shmap__setting_stack_size(void)
{
  const char *s = env("SHMAP_STACK_SIZE");
  size_t v;
  if (!s)
    return 0;
  if (shmap__parse_size(s, &v) && v >= SHMAP__STACK_MIN &&
      v <= SHMAP__STACK_MAX)
    return v;
  bad_value(V_STACK, "SHMAP_STACK_SIZE", s,
            "a size in bytes such as 65536, 64k, 8M or 1G, at least 64k",
            "the default (4M for fibers, the system's for threads)");
  return 0;
}

double shmap__setting_watchdog(void)
{
  const char *s = env("SHMAP_WATCHDOG");
  double v;
  if (!s)
    return 0;
  if (shmap__parse_seconds(s, &v))
    return v;
  bad_value(V_WATCHDOG, "SHMAP_WATCHDOG", s,
            "a period in seconds such as 10 or 0.5, 0 for none", "none");
  return 0;
}

const char *shmap__setting_trace(void) { return env("SHMAP_TRACE"); }

int shmap__setting_simd(const char *const names[], int n)
{
  const char *s = env("SHMAP_SIMD");
  if (!s)
    return -1;
  char accepted[128] = "";
  for (int i = 0; i < n; i++) {
    if (strcmp(s, names[i]) == 0)
      return i;
    size_t len = strlen(accepted);
    snprintf(accepted + len, sizeof accepted - len, "%s%s", i ? ", " : "",
             names[i]);
  }
  bad_value(V_SIMD, "SHMAP_SIMD", s, accepted,
            "the best instruction set the processor runs");
  return -1;
}

/* A switch: unset or empty is `dflt`, else 0 or 1; another value is
 * reported once and counts as `dflt`. */
static bool setting_switch(int v, const char *name, bool dflt)
{
  const char *s = env(name);
  if (!s)
    return dflt;
  if (strcmp(s, "0") == 0 || strcmp(s, "1") == 0)
    return s[0] == '1';
  bad_value(v, name, s, "0, 1", dflt ? "1" : "0");
  return dflt;
}

bool shmap__setting_async_check(void)
{
  return setting_switch(V_ASYNC, "SHMAP_ASYNC_CHECK", false);
}

bool shmap__setting_hugepages(void)
{
  return setting_switch(V_HUGE, "SHMAP_HUGEPAGES", true);
}

bool shmap__setting_membarrier(void)
{
  return setting_switch(V_MEMBARRIER, "SHMAP_MEMBARRIER", true);
}
