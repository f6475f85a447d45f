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
#include <stdatomic.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The last bad value reported per variable; a leaf lock (see the lock
 * order in runtime/debug.c). */
enum { V_SCHED, V_WORKERS, V_SPIN, V_STACK, V_WATCHDOG, V_SIMD, V_ASYNC,
       V_HUGE, V_MEMBARRIER, V_REPLAY, V_EXPLORE, V_XSEED, V_COUNT };
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

/* Every variable the library reads (shmap(7), ENVIRONMENT). */
static const char *const known[] = {
    "SHMAP_ASYNC_CHECK", "SHMAP_EXPLORE",   "SHMAP_EXPLORE_SEED",
    "SHMAP_HUGEPAGES",   "SHMAP_MEMBARRIER", "SHMAP_REPLAY",
    "SHMAP_SCHED",       "SHMAP_SIMD",      "SHMAP_SPIN",
    "SHMAP_STACK_SIZE",  "SHMAP_TRACE",     "SHMAP_WATCHDOG",
    "SHMAP_WORKERS",     "SHMAP_REHEARSE",  "SHMAP_REHEARSE_OUT",
};
#define NKNOWN (sizeof known / sizeof known[0])

/* Edits (insert, delete, replace, swap of two neighbours) from a[0..n) to
 * b: the optimal string alignment distance, on names of at most 63
 * characters (longer ones count as far from everything). */
static size_t distance(const char *a, size_t n, const char *b)
{
  size_t m = strlen(b);
  if (n > 63 || m > 63)
    return SIZE_MAX;
  size_t d[64][64];
  for (size_t i = 0; i <= n; i++)
    d[i][0] = i;
  for (size_t j = 0; j <= m; j++)
    d[0][j] = j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      size_t c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < c)
        c = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < c)
        c = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < c)
        c = d[i - 2][j - 2] + 1;
      d[i][j] = c;
    }
  return d[n][m];
}

/* A SHMAP_ variable the library does not read is most likely a misspelt
 * one (SHMAP_SCHEDULE for SHMAP_SCHED) that would otherwise be ignored
 * without a word: say so once per process, with the nearest name when it
 * is near enough to be meant (at most a third of its letters differ). */
static void unknown_names(void)
{
  extern char **environ;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "SHMAP_", 6) != 0)
      continue;
    size_t n = strcspn(*e, "=");
    size_t best = SIZE_MAX, at = 0;
    for (size_t k = 0; k < NKNOWN && best; k++) {
      size_t dk = distance(*e, n, known[k]);
      if (dk < best)
        best = dk, at = k;
    }
    if (best == 0)
      continue;
    if (best <= n / 3)
      fprintf(stderr, "shmap: %.*s is not a setting of libshmap and is "
                      "ignored; did you mean %s?\n", (int)n, *e, known[at]);
    else
      fprintf(stderr, "shmap: %.*s is not a setting of libshmap and is "
                      "ignored (settings: shmap(7), ENVIRONMENT)\n",
              (int)n, *e);
  }
}

static pthread_once_t names_once = PTHREAD_ONCE_INIT;

/* The variable's value, or NULL when unset or empty.  The first read of any
 * setting also checks the environment for names the library does not
 * know. */
static const char *env(const char *name)
{
  pthread_once(&names_once, unknown_names);
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

/* The scheduling modes SHMAP_SCHED may name besides auto: each is a mode
 * of the scheduler's registry (sched/runtime.c). */
static const char *const sched_names[] = {"threads", "fibers", "explore"};

const char *shmap__setting_sched(void)
{
  const char *s = env("SHMAP_SCHED");
  if (!s || strcmp(s, "auto") == 0)
    return NULL;
  for (size_t i = 0; i < sizeof sched_names / sizeof *sched_names; i++)
    if (strcmp(s, sched_names[i]) == 0)
      return sched_names[i];
  bad_value(V_SCHED, "SHMAP_SCHED", s, "threads, fibers, explore, auto",
            "auto");
  return NULL;
}

/* An integer setting from lo to hi, of value s (NULL: unset); `unset`
 * when it is absent or invalid. */
static long long_value(int v, const char *name, const char *s, long lo,
                       long hi, long unset, const char *accepted,
                       const char *fallback)
{
  long val;
  if (!s)
    return unset;
  if (shmap__parse_long(s, lo, hi, &val))
    return val;
  bad_value(v, name, s, accepted, fallback);
  return unset;
}

static long long_setting(int v, const char *name, long lo, long hi,
                         long unset, const char *accepted,
                         const char *fallback)
{
  return long_value(v, name, env(name), lo, hi, unset, accepted, fallback);
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

const char *shmap__setting_rehearse(void) { return env("SHMAP_REHEARSE"); }

const char *shmap__setting_rehearse_out(void)
{
  return env("SHMAP_REHEARSE_OUT");
}

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
            "the default (avx2 where the processor has it)");
  return -1;
}

/* A switch of value s: unset or empty is `dflt`, else 0 or 1; another
 * value is reported once and counts as `dflt`. */
static bool switch_value(int v, const char *name, const char *s, bool dflt)
{
  if (!s)
    return dflt;
  if (strcmp(s, "0") == 0 || strcmp(s, "1") == 0)
    return s[0] == '1';
  bad_value(v, name, s, "0, 1", dflt ? "1" : "0");
  return dflt;
}

static bool setting_switch(int v, const char *name, bool dflt)
{
  return switch_value(v, name, env(name), dflt);
}

/* Runs under exploring schedules turn the check on without touching the
 * environment: a count of them. */
static _Atomic int async_forced;

void shmap__setting_async_check_force(int delta)
{
  atomic_fetch_add(&async_forced, delta);
}

bool shmap__setting_async_forced(void)
{
  return atomic_load(&async_forced) > 0;
}

/* The values (NULL: unset or empty) of n variables, in one pass over the
 * environment: getenv() walks all of it for each name, which for the
 * three a map reads cost a fifth of an empty map's instructions. */
static void env_many(const char *const names[], const char *vals[], int n)
{
  extern char **environ;
  pthread_once(&names_once, unknown_names);
  for (int i = 0; i < n; i++)
    vals[i] = NULL;
  for (char **e = environ; e && *e; e++) {
    const char *s = *e;
    if (s[0] != 'S' || strncmp(s, "SHMAP_", 6) != 0)
      continue;
    for (int i = 0; i < n; i++) {
      size_t len = strlen(names[i]);
      if (strncmp(s, names[i], len) == 0 && s[len] == '=') {
        /* getenv() returns the first of duplicated names */
        if (!vals[i])
          vals[i] = s + len + 1;
        break;
      }
    }
  }
  for (int i = 0; i < n; i++)
    if (vals[i] && !*vals[i])
      vals[i] = NULL;
}

/* A replayed schedule checks as the exploring run that found it did. */
void shmap__settings_map(shmap__map_env *out)
{
  static const char *const names[] = {"SHMAP_EXPLORE", "SHMAP_ASYNC_CHECK",
                                      "SHMAP_REPLAY"};
  const char *v[3];
  env_many(names, v, 3);
  out->explore = (int)long_value(V_EXPLORE, "SHMAP_EXPLORE", v[0], 0,
                                 1000000L, 0,
                                 "a number of schedules from 0 to 1000000",
                                 "0");
  out->async_check = switch_value(V_ASYNC, "SHMAP_ASYNC_CHECK", v[1], false) ||
                     v[2] != NULL;
}

bool shmap__setting_hugepages(void)
{
  return setting_switch(V_HUGE, "SHMAP_HUGEPAGES", true);
}

bool shmap__setting_membarrier(void)
{
  return setting_switch(V_MEMBARRIER, "SHMAP_MEMBARRIER", true);
}

bool shmap__parse_schedule(const char *text, char *strategy, int *depth,
                           uint64_t *seed)
{
  if (!text)
    return false;
  char st = text[0];
  int d = 1;
  const char *p = text + 1;
  if (st == 'p') {
    long v;
    char num[8];
    size_t n = strcspn(p, ".");
    if (n == 0 || n >= sizeof num)
      return false;
    memcpy(num, p, n);
    num[n] = '\0';
    if (!shmap__parse_long(num, 1, 64, &v))
      return false;
    d = (int)v;
    p += n;
  } else if (st != 'r') {
    return false;
  }
  unsigned long long v;
  if (*p != '.' || !parse_number(p + 1, false, UINT64_MAX, &v))
    return false;
  *strategy = st;
  *depth = d;
  *seed = v;
  return true;
}

const char *shmap__setting_replay(void)
{
  const char *s = env("SHMAP_REPLAY");
  char st;
  int d;
  uint64_t seed;
  if (!s || shmap__parse_schedule(s, &st, &d, &seed))
    return s;
  bad_value(V_REPLAY, "SHMAP_REPLAY", s,
            "a schedule such as r.12 (random walk, seed 12) or p3.12 (PCT of "
            "depth 3)",
            "none");
  return NULL;
}

bool shmap__setting_explore_seed(uint64_t *seed)
{
  const char *s = env("SHMAP_EXPLORE_SEED");
  unsigned long long v;
  *seed = 1;
  if (!s)
    return false;
  if (parse_number(s, false, UINT64_MAX, &v)) {
    *seed = v;
    return true;
  }
  bad_value(V_XSEED, "SHMAP_EXPLORE_SEED", s, "a whole number", "1");
  return false;
}
