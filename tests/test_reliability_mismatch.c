/* SPDX-License-Identifier: MIT */
/*
 * test_reliability_mismatch.c - randomized mismatch test: a map in which one
 * device makes a different sequence of collective calls from the others
 * returns SHMAP_EMISMATCH, never hangs, and its message names both calls.
 *
 * Each case draws a mesh (one to three axes, 2 to 16 devices), a sequence
 * of one to six collective calls (every kind, over a random ordered group
 * of axes, possibly empty; the reductions, psum_scatter, all_gather and
 * all_to_all often split into axis_index_groups, consecutive or strided),
 * and one device that deviates at one call:
 *   KIND   the call has another kind (same axes);
 *   AXES   the call names other axes, or the same ones in another order;
 *   ORDER  the call is swapped with the next one;
 *   EARLY  the device returns from its body instead of making the call;
 *   GROUPS the call splits its axes into other axis_index_groups (or none,
 *          or some where the others use none).
 * Only deviations another device can see are drawn: the deviating call (or
 * the one it replaces) has a group of more than one device.  The map must
 * return SHMAP_EMISMATCH with a message that names the deviating device,
 * the call the others make and the deviating call (or the early return).
 * Every tenth case also runs the sequence without deviation, which must
 * succeed: the mesh stays usable after a mismatch.
 *
 * SHMAPTEST_MISMATCH_CASES sets the number of cases per scheduling mode
 * (default 2000), SHMAPTEST_MISMATCH_SEED the seed (printed at the start).
 * A case that does not return within a minute prints its description and
 * aborts the test.
 *
 * Built with MISMATCH_OVER_PROCESSES, the same file is
 * tests/mpi/test_mpi_mismatch, a plain program (an MPI process must not
 * fork, and Check forks) that tests/mpi/run.sh starts under mpirun: the
 * meshes' devices are then spread over the processes (their count divides
 * every mesh's), every process draws the same cases from the same seed and
 * must see the same outcome, and the default is 150 cases per mode.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alarm.h"

#ifdef MISMATCH_OVER_PROCESSES
#include "shmap.h"
static int self, nproc = 1;
#define DEFAULT_CASES 150
/* A failed check ends the job: mpirun stops the other processes. */
#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "[process %d of %d] %s:%d: ", self, nproc, __FILE__,      \
              __LINE__);                                                     \
      fprintf(stderr, __VA_ARGS__);                                          \
      fputc('\n', stderr);                                                   \
      abort();                                                               \
    }                                                                        \
  } while (0)
#else
#include <check.h>
#include "testutil.h"
static const int self = 0, nproc = 1;
#define DEFAULT_CASES 2000
#define CHECK ck_assert_msg
#endif

#define TIMEOUT 600
#define MAXCALLS 6
#define NMESH 6

enum kind { PSUM, PMAX, PMIN, PMEAN, PSUM_SCATTER, ALL_GATHER, ALL_TO_ALL,
            PPERMUTE, NKINDS };
static const char *const kind_names[NKINDS] = {
    "psum", "pmax", "pmin", "pmean", "psum_scatter", "all_gather",
    "all_to_all", "ppermute"};

typedef struct call {
  int kind;
  int naxes;
  int axes[3];  /* mesh axis numbers, in the order named */
  int p1, p2;   /* all_gather axis / all_to_all concat axis */
  int tiled;    /* all_gather */
  int gsize;    /* axis_index_groups of gsize ranks each; 0: none */
  int strided;  /* groups {r, r+n/gsize, ...} instead of consecutive ranks */
} call;

enum dev_kind { KIND, AXES, ORDER, EARLY, GROUPS, NDEV_KINDS };
static const char *const dev_names[NDEV_KINDS] = {"kind", "axes", "order",
                                                   "early return", "groups"};

typedef struct tmesh {
  shmap_mesh *mesh;
  int naxes;
  int sizes[3];
  int ndev;
  char text[64];
} tmesh;

typedef struct tcase_ {
  const tmesh *m;
  int ncalls;
  call calls[MAXCALLS];
  int deviate;     /* 0: none */
  int dev;         /* the deviating device */
  int at;          /* the call it deviates at */
  int how;         /* enum dev_kind */
  call other;      /* KIND and AXES: the call it makes instead */
} tcase_;

static const char *const axis_names[3] = {"i", "j", "k"};

/* ---- random numbers (xorshift; reproducible from the seed) -------------- */

static uint64_t rng;
static unsigned rnd(unsigned n)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (unsigned)(rng % n);
}

/* ---- axis_index_groups ------------------------------------------------------ */

static bool groupable(int kind) { return kind != PPERMUTE; }

static int group_size(const tmesh *m, const call *c)
{
  int n = 1;
  for (int k = 0; k < c->naxes; k++)
    n *= m->sizes[c->axes[k]];
  return n;
}

/* The ranks of c's axis_index_groups, group after group (n of them). */
static int group_ranks(const tmesh *m, const call *c, int ranks[16])
{
  int n = group_size(m, c), ngroups = n / c->gsize;
  for (int g = 0; g < ngroups; g++)
    for (int k = 0; k < c->gsize; k++)
      ranks[g * c->gsize + k] = c->strided ? g + k * ngroups : g * c->gsize + k;
  return n;
}

/* Random axis_index_groups for c's axes: none, or groups of a size that
 * divides the axes' size, from 2 up (so that no member is alone). */
static void draw_groups(const tmesh *m, call *c)
{
  c->gsize = 0;
  c->strided = 0;
  int n = group_size(m, c);
  if (!groupable(c->kind) || n < 2 || rnd(2) == 0)
    return;
  int sizes[16], ns = 0;
  for (int g = 2; g <= n; g++)
    if (n % g == 0)
      sizes[ns++] = g;
  c->gsize = sizes[rnd((unsigned)ns)];
  c->strided = c->gsize < n ? (int)rnd(2) : 0;
}

/* ---- describing calls ----------------------------------------------------- */

static void axes_text(const tmesh *m, const call *c, char *buf, size_t n,
                      bool quoted)
{
  (void)m;
  buf[0] = '\0';
  size_t len = 0;
  if (c->naxes == 1) {
    snprintf(buf, n, quoted ? "'%s'" : "%s", axis_names[c->axes[0]]);
    return;
  }
  len += (size_t)snprintf(buf + len, n - len, "(");
  for (int k = 0; k < c->naxes; k++)
    len += (size_t)snprintf(buf + len, n - len, quoted ? "%s'%s'" : "%s%s",
                            k ? ", " : "", axis_names[c->axes[k]]);
  snprintf(buf + len, n - len, ")");
}

/* The call as the library names it in messages, up to the ppermute pair
 * hash: "all_gather(f32[8,3] over ('j', 'i'), axis=1, tiled)". */
static void call_text(const tmesh *m, const call *c, char *buf, size_t n)
{
  char ax[64];
  axes_text(m, c, ax, sizeof ax, true);
  int len = snprintf(buf, n, "%s(f32[%d,3] over %s", kind_names[c->kind],
                     2 * m->ndev, ax);
  switch (c->kind) {
  case PSUM_SCATTER:
    len += snprintf(buf + len, n - (size_t)len, ", scatter_dimension=0, tiled");
    break;
  case ALL_GATHER:
    len += snprintf(buf + len, n - (size_t)len, ", axis=%d, %s", c->p1,
                    c->tiled ? "tiled" : "untiled");
    break;
  case ALL_TO_ALL:
    len += snprintf(buf + len, n - (size_t)len,
                    ", split_axis=0, concat_axis=%d, tiled", c->p2);
    break;
  case PPERMUTE:
    snprintf(buf + len, n - (size_t)len, ", ");
    return;
  default:
    break;
  }
  if (c->gsize) {
    int ranks[16];
    int size = group_ranks(m, c, ranks);
    len += snprintf(buf + len, n - (size_t)len, ", axis_index_groups [");
    for (int k = 0; k < size && (size_t)len < n; k++)
      len += snprintf(buf + len, n - (size_t)len, "%s%d%s",
                      k == 0 ? "[" : k % c->gsize == 0 ? "], [" : ", ",
                      ranks[k], k == size - 1 ? "]]" : "");
  }
  if ((size_t)len < n)
    snprintf(buf + len, n - (size_t)len, ")");
}

static void case_text(const tcase_ *t, char *buf, size_t n)
{
  int len = snprintf(buf, n, "mesh %s, calls:", t->m->text);
  for (int c = 0; c < t->ncalls && (size_t)len < n; c++) {
    char ct[256];
    call_text(t->m, &t->calls[c], ct, sizeof ct);
    len += snprintf(buf + len, n - (size_t)len, " #%d %s", c + 1, ct);
  }
  if (t->deviate && (size_t)len < n) {
    char ct[256] = "";
    if (t->how == KIND || t->how == AXES || t->how == GROUPS)
      call_text(t->m, &t->other, ct, sizeof ct);
    snprintf(buf + len, n - (size_t)len,
             "; device %d deviates at call #%d (%s) %s", t->dev, t->at + 1,
             dev_names[t->how], ct);
  }
}

/* ---- drawing cases ---------------------------------------------------------- */

static bool call_same(const call *a, const call *b)
{
  if (a->kind != b->kind || a->naxes != b->naxes)
    return false;
  for (int k = 0; k < a->naxes; k++)
    if (a->axes[k] != b->axes[k])
      return false;
  if (a->kind == ALL_GATHER && (a->p1 != b->p1 || a->tiled != b->tiled))
    return false;
  if (a->kind == ALL_TO_ALL && a->p2 != b->p2)
    return false;
  /* draw_groups never makes strided groups of the whole axes, which would
   * be the consecutive ones. */
  return a->gsize == b->gsize && a->strided == b->strided;
}

/* A random ordered group of distinct axes (possibly empty). */
static void draw_axes(const tmesh *m, call *c)
{
  int perm[3] = {0, 1, 2};
  for (int k = m->naxes - 1; k > 0; k--) {
    int r = (int)rnd((unsigned)k + 1), t = perm[k];
    perm[k] = perm[r];
    perm[r] = t;
  }
  /* Mostly non-empty: an empty group is a group of one. */
  c->naxes = rnd(8) == 0 ? 0 : 1 + (int)rnd((unsigned)m->naxes);
  for (int k = 0; k < c->naxes; k++)
    c->axes[k] = perm[k];
}

static void draw_call(const tmesh *m, call *c)
{
  memset(c, 0, sizeof *c);
  c->kind = (int)rnd(NKINDS);
  draw_axes(m, c);
  c->p1 = (int)rnd(2);
  c->p2 = (int)rnd(2);
  c->tiled = (int)rnd(2);
  draw_groups(m, c);
}

static void draw_mesh(tmesh *m)
{
  do {
    m->naxes = 1 + (int)rnd(3);
    m->ndev = 1;
    for (int a = 0; a < m->naxes; a++) {
      m->sizes[a] = 1 + (int)rnd(4);
      m->ndev *= m->sizes[a];
    }
  } while (m->ndev < 2 || m->ndev > 16 || m->ndev % nproc != 0);
  int len = 0;
  for (int a = 0; a < m->naxes; a++)
    len += snprintf(m->text + len, sizeof m->text - (size_t)len, "%s%s=%d",
                    a ? ", " : "", axis_names[a], m->sizes[a]);
  int rc = shmap_mesh_create(&m->mesh, m->text);
  CHECK(rc == 0, "shmap_mesh_create(%s): %s", m->text, shmap_errmsg());
}

/* A case with a deviation the other devices can see. */
static void draw_case(tcase_ *t, const tmesh *m)
{
  t->m = m;
  for (;;) {
    t->ncalls = 1 + (int)rnd(MAXCALLS);
    for (int c = 0; c < t->ncalls; c++)
      draw_call(m, &t->calls[c]);
    t->deviate = 1;
    t->dev = (int)rnd((unsigned)m->ndev);
    t->at = (int)rnd((unsigned)t->ncalls);
    t->how = (int)rnd(NDEV_KINDS);
    const call *orig = &t->calls[t->at];
    switch (t->how) {
    case KIND:
      t->other = *orig;
      t->other.kind = (orig->kind + 1 + (int)rnd(NKINDS - 1)) % NKINDS;
      if (!groupable(t->other.kind))
        t->other.gsize = t->other.strided = 0;
      if (group_size(m, orig) > 1)
        return;
      break;
    case AXES:
      t->other = *orig;
      draw_axes(m, &t->other);
      draw_groups(m, &t->other);
      if (!call_same(&t->other, orig) &&
          (group_size(m, orig) > 1 || group_size(m, &t->other) > 1))
        return;
      break;
    case GROUPS:
      t->other = *orig;
      draw_groups(m, &t->other);
      if (!call_same(&t->other, orig) && group_size(m, orig) > 1)
        return;
      break;
    case ORDER:
      if (t->at + 1 < t->ncalls && !call_same(orig, orig + 1) &&
          (group_size(m, orig) > 1 || group_size(m, orig + 1) > 1))
        return;
      break;
    default: /* EARLY */
      if (group_size(m, orig) > 1)
        return;
      break;
    }
  }
}

/* ---- the body ------------------------------------------------------------------ */

static int make_call(shmap_ctx *ctx, const tmesh *m, const call *c,
                     shmap_block *x)
{
  char ax[64];
  axes_text(m, c, ax, sizeof ax, false);
  shmap_block *out = NULL;
  int rc, ranks[16];
  shmap_groups groups = {0, 0, ranks}, *g = NULL;
  if (c->gsize) {
    int n = group_ranks(m, c, ranks);
    groups.size = c->gsize;
    groups.ngroups = n / c->gsize;
    g = &groups;
  }
  switch (c->kind) {
  case PSUM: return shmap_psum_groups(ctx, x, ax, g);
  case PMAX: return shmap_pmax_groups(ctx, x, ax, g);
  case PMIN: return shmap_pmin_groups(ctx, x, ax, g);
  case PMEAN: return shmap_pmean_groups(ctx, x, ax, g);
  case PSUM_SCATTER:
    rc = shmap_psum_scatter_groups(ctx, x, ax, g, 0, 1, &out);
    break;
  case ALL_GATHER:
    rc = shmap_all_gather_groups(ctx, x, ax, g, c->p1, c->tiled, &out);
    break;
  case ALL_TO_ALL:
    rc = shmap_all_to_all_groups(ctx, x, ax, g, 0, c->p2, 1, &out);
    break;
  default: {
    int n = shmap_axis_size(ctx, ax);
    if (n < 0)
      return n;
    int (*pairs)[2] = malloc(sizeof *pairs * (size_t)n);
    if (!pairs)
      return shmap_fail(ctx, "out of memory");
    for (int r = 0; r < n; r++) {
      pairs[r][0] = r;
      pairs[r][1] = (r + 1) % n;
    }
    rc = shmap_ppermute(ctx, x, ax, n, (const int(*)[2])pairs);
    free(pairs);
    return rc;
  }
  }
  if (rc == 0)
    rc = shmap_block_free(ctx, out);
  return rc;
}

static int body(shmap_ctx *ctx, void *arg)
{
  const tcase_ *t = arg;
  int dev = shmap_ctx_device(ctx);
  int64_t shape[2] = {2 * t->m->ndev, 3};
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 2, shape);
  if (!x)
    return -1;
  for (int64_t e = 0; e < shape[0] * shape[1]; e++)
    ((float *)x->data)[e] = (float)(dev + e);
  bool me = t->deviate && dev == t->dev;
  for (int c = 0; c < t->ncalls; c++) {
    const call *cl = &t->calls[c];
    if (me && c == t->at) {
      if (t->how == EARLY)
        return 0;
      if (t->how == ORDER)
        cl = &t->calls[c + 1];
      else
        cl = &t->other;
    } else if (me && t->how == ORDER && c == t->at + 1) {
      cl = &t->calls[t->at];
    }
    int rc = make_call(ctx, t->m, cl, x);
    if (rc)
      return rc;
  }
  return 0;
}

/* ---- two sequences -------------------------------------------------------------- */

/* Each device follows one of two sequences, the second drawn from the
 * first by a few random edits. */
typedef struct mixed {
  const tmesh *m;
  int len[2];
  call seq[2][MAXCALLS + 2];
  int which[16];
} mixed;

static void draw_mixed(mixed *x, const tmesh *m)
{
  x->m = m;
  x->len[0] = 1 + (int)rnd(MAXCALLS);
  for (int c = 0; c < x->len[0]; c++)
    draw_call(m, &x->seq[0][c]);
  x->len[1] = x->len[0];
  memcpy(x->seq[1], x->seq[0], sizeof x->seq[0]);
  for (int e = 1 + (int)rnd(2); e > 0; e--) {
    int n = x->len[1];
    if (n == 0)
      break;
    int at = (int)rnd((unsigned)n);
    call *c = &x->seq[1][at];
    switch (rnd(5)) {
    case 0:
      c->kind = (int)rnd(NKINDS);
      draw_groups(m, c);
      break;
    case 1:
      draw_axes(m, c);
      draw_groups(m, c);
      break;
    case 2:
      if (at + 1 < n) {
        call t = c[0];
        c[0] = c[1];
        c[1] = t;
      }
      break;
    case 3: x->len[1] = at; break;
    default:
      if (n < MAXCALLS + 2)
        draw_call(m, &x->seq[1][x->len[1]++]);
      break;
    }
  }
  for (int d = 0; d < m->ndev; d++)
    x->which[d] = (int)rnd(2);
}

/* Serial model of the rule: the map fails with SHMAP_EMISMATCH when, at
 * some call number, a device's group (over the axes it names) holds a
 * member that makes another call or none; otherwise it succeeds.  A call
 * with axis_index_groups is, as in JAX, one collective over its whole axes
 * that computes within each group: every device of the axes makes it. */
static bool mixed_consistent(const mixed *x)
{
  const tmesh *m = x->m;
  int strides[3], s = 1;
  for (int a = m->naxes - 1; a >= 0; a--) {
    strides[a] = s;
    s *= m->sizes[a];
  }
  for (int k = 0; k < MAXCALLS + 2; k++)
    for (int d = 0; d < m->ndev; d++) {
      if (k >= x->len[x->which[d]])
        continue;
      const call *c = &x->seq[x->which[d]][k];
      unsigned in_group = 0;
      for (int i = 0; i < c->naxes; i++)
        in_group |= 1u << c->axes[i];
      for (int e = 0; e < m->ndev; e++) {
        bool member = true;
        for (int a = 0; a < m->naxes; a++)
          if (!(in_group & (1u << a)) &&
              e / strides[a] % m->sizes[a] != d / strides[a] % m->sizes[a])
            member = false;
        if (!member)
          continue;
        if (k >= x->len[x->which[e]] || !call_same(c, &x->seq[x->which[e]][k]))
          return false;
      }
    }
  return true;
}

static int body_mixed(shmap_ctx *ctx, void *arg)
{
  const mixed *x = arg;
  int dev = shmap_ctx_device(ctx);
  int64_t shape[2] = {2 * x->m->ndev, 3};
  shmap_block *b = shmap_block_alloc(ctx, SHMAP_F32, 2, shape);
  if (!b)
    return -1;
  int w = x->which[dev];
  for (int c = 0; c < x->len[w]; c++) {
    int rc = make_call(ctx, x->m, &x->seq[w][c], b);
    if (rc)
      return rc;
  }
  return 0;
}

static void mixed_text(const mixed *x, char *buf, size_t n)
{
  int len = snprintf(buf, n, "mesh %s", x->m->text);
  for (int w = 0; w < 2 && (size_t)len < n; w++) {
    len += snprintf(buf + len, n - (size_t)len, "; sequence %c on devices", 'A' + w);
    for (int d = 0; d < x->m->ndev && (size_t)len < n; d++)
      if (x->which[d] == w)
        len += snprintf(buf + len, n - (size_t)len, " %d", d);
    for (int c = 0; c < x->len[w] && (size_t)len < n; c++) {
      char ct[256];
      call_text(x->m, &x->seq[w][c], ct, sizeof ct);
      len += snprintf(buf + len, n - (size_t)len, " #%d %s", c + 1, ct);
    }
  }
}

/* ---- running cases ---------------------------------------------------------------- */

static char current[16384];

static void on_alarm(int sig)
{
  (void)sig;
  tu_alarm_abort("\nmismatch case did not return within 60 s: ", current);
}

static bool contains(const char *s, const char *sub) { return strstr(s, sub); }

static void check_message(const tcase_ *t, const char *msg)
{
  char want[256], dname[32];
  snprintf(dname, sizeof dname, "device %d (", t->dev);
  CHECK(contains(msg, dname), "%s\nmessage does not name %s: %s",
                current, dname, msg);
  CHECK(contains(msg, "collective call #"),
                "%s\nmessage does not number the call: %s", current, msg);
  const call *orig = &t->calls[t->at];
  if (t->how == EARLY) {
    /* Any device whose group at a later call includes the one that left
     * may see it first: the message names that call and the return. */
    char ret[96];
    snprintf(ret, sizeof ret, "returned from its body after %d collective "
             "call", t->at);
    CHECK(contains(msg, ret), "%s\nmessage does not say \"%s\": %s",
                  current, ret, msg);
    bool named = false;
    for (int c = t->at; c < t->ncalls && !named; c++) {
      call_text(t->m, &t->calls[c], want, sizeof want);
      named = contains(msg, want);
    }
    CHECK(named, "%s\nmessage names none of the calls the others "
                  "make: %s", current, msg);
    return;
  }
  call_text(t->m, orig, want, sizeof want);
  CHECK(contains(msg, want), "%s\nmessage does not name %s: %s",
                current, want, msg);
  const call *dev_call = t->how == ORDER ? orig + 1 : &t->other;
  call_text(t->m, dev_call, want, sizeof want);
  CHECK(contains(msg, want), "%s\nmessage does not name %s: %s",
                current, want, msg);
}

static void run_cases(const char *mode)
{
  CHECK(setenv("SHMAP_SCHED", mode, 1) == 0, "setenv");
  const char *env = getenv("SHMAPTEST_MISMATCH_CASES");
  int ncases = env && *env ? atoi(env) : DEFAULT_CASES;
  env = getenv("SHMAPTEST_MISMATCH_SEED");
  uint64_t seed = env && *env ? strtoull(env, NULL, 0) : 20261123;
  if (self == 0)
    fprintf(stderr, "test_reliability_mismatch (%s, %d process%s): %d cases, "
                    "SHMAPTEST_MISMATCH_SEED=%llu\n",
            mode, nproc, nproc == 1 ? "" : "es", ncases,
            (unsigned long long)seed);
  rng = seed * 2654435761u + 1;
  signal(SIGALRM, on_alarm);
  tmesh meshes[NMESH];
  for (int i = 0; i < NMESH; i++)
    draw_mesh(&meshes[i]);
  int by_how[NDEV_KINDS] = {0};
  for (int i = 0; i < ncases; i++) {
    tcase_ t;
    draw_case(&t, &meshes[rnd(NMESH)]);
    by_how[t.how]++;
    int len = snprintf(current, sizeof current, "case %d (%s): ", i, mode);
    case_text(&t, current + len, sizeof current - (size_t)len);
    alarm(60);
    int rc = shmap_map(t.m->mesh, body, &t, 0, NULL, NULL, 0, NULL, NULL);
    alarm(0);
    CHECK(rc == SHMAP_EMISMATCH, "%s\nmap returned %d (%s): %s",
                  current, rc, shmap_strerror(rc), shmap_errmsg());
    check_message(&t, shmap_errmsg());
    if (i % 10 == 0) {
      t.deviate = 0;
      alarm(60);
      rc = shmap_map(t.m->mesh, body, &t, 0, NULL, NULL, 0, NULL, NULL);
      alarm(0);
      CHECK(rc == 0, "%s\nwithout the deviation: %d (%s): %s",
                    current, rc, shmap_strerror(rc), shmap_errmsg());
    }
  }
  for (int i = 0; i < NMESH; i++)
    shmap_mesh_destroy(meshes[i].mesh);
  for (int h = 0; h < NDEV_KINDS && ncases >= 100; h++)
    CHECK(by_how[h] > 0, "no case deviates by %s", dev_names[h]);
}

/* Any two sequences over random device subsets: the map's code agrees
 * with the serial model, and a mismatch is reported as one. */
static void run_mixed(const char *mode)
{
  CHECK(setenv("SHMAP_SCHED", mode, 1) == 0, "setenv");
  const char *env = getenv("SHMAPTEST_MISMATCH_CASES");
  int ncases = env && *env ? atoi(env) : DEFAULT_CASES;
  env = getenv("SHMAPTEST_MISMATCH_SEED");
  uint64_t seed = env && *env ? strtoull(env, NULL, 0) : 20261123;
  rng = seed * 0x9e3779b97f4a7c15ull + 7;
  signal(SIGALRM, on_alarm);
  tmesh meshes[NMESH];
  for (int i = 0; i < NMESH; i++)
    draw_mesh(&meshes[i]);
  int ok = 0, bad = 0;
  for (int i = 0; i < ncases; i++) {
    mixed x;
    draw_mixed(&x, &meshes[rnd(NMESH)]);
    bool want_ok = mixed_consistent(&x);
    int len = snprintf(current, sizeof current, "mixed case %d (%s): ", i, mode);
    mixed_text(&x, current + len, sizeof current - (size_t)len);
    alarm(60);
    int rc = shmap_map(x.m->mesh, body_mixed, &x, 0, NULL, NULL, 0, NULL, NULL);
    alarm(0);
    const char *msg = shmap_errmsg();
    if (want_ok) {
      ok++;
      CHECK(rc == 0, "%s\nconsistent calls, but the map returned %d "
                    "(%s): %s", current, rc, shmap_strerror(rc), msg);
    } else {
      bad++;
      CHECK(rc == SHMAP_EMISMATCH, "%s\nmismatched calls, but the map "
                    "returned %d (%s): %s", current, rc, shmap_strerror(rc), msg);
      CHECK(contains(msg, "differs between devices") ||
                        contains(msg, "returned from its body after"),
                    "%s\nmessage: %s", current, msg);
    }
  }
  for (int i = 0; i < NMESH; i++)
    shmap_mesh_destroy(meshes[i].mesh);
  if (ncases >= 100)
    CHECK(ok > 0 && bad > 0, "%d consistent and %d mismatched cases",
                  ok, bad);
}

#ifdef MISMATCH_OVER_PROCESSES
int main(void)
{
  nproc = shmap_process_count();
  self = shmap_process_rank();
  /* The mode tests/mpi/run.sh chose, or both. */
  static const char *const modes[2] = {"threads", "fibers"};
  for (int k = 0; k < 2; k++) {
    if (!tu_mode_wanted(modes[k]))
      continue;
    run_cases(modes[k]);
    run_mixed(modes[k]);
  }
  if (self == 0)
    printf("test_mpi_mismatch: %d process%s, all passed\n", nproc,
           nproc == 1 ? "" : "es");
  return 0;
}
#else
START_TEST(test_mismatch_threads) { run_cases("threads"); }
END_TEST

START_TEST(test_mismatch_fibers) { run_cases("fibers"); }
END_TEST

START_TEST(test_mixed_threads) { run_mixed("threads"); }
END_TEST

START_TEST(test_mixed_fibers) { run_mixed("fibers"); }
END_TEST

int main(void)
{
  Suite *s = suite_create("reliability_mismatch");
  /* One case per mode: CK_RUN_CASE=fibers runs one of them. */
  TCase *tc = tcase_create("threads");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, test_mismatch_threads);
  tcase_add_test(tc, test_mixed_threads);
  suite_add_tcase(s, tc);
  tc = tcase_create("fibers");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, test_mismatch_fibers);
  tcase_add_test(tc, test_mixed_fibers);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
#endif
