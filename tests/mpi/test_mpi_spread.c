/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_spread.c - reductions over one group whose devices are spread
 * over the job's processes, several in each: the results are the serial
 * left fold in rank order, bit for bit (integers, and floats whose sum
 * depends on the order), and the messages each process sends per call
 * grow with the number of processes, not with the group's size (one
 * message from each process's leader to each other one's; the device
 * pairs' exchange sent n(n-1)/2 per process).
 *
 * Meshes "x=4,y=N/4" of N = 16 and 64 devices, placed by default
 * (contiguous device numbers per process), and psums over "x,y" (each
 * process holds a run of ranks) and over "y,x" (its ranks are strided:
 * every term travels), of 256 B a member and of more than one exchange
 * takes (4 KiB over 16, 1 KiB over 64); psum_scatter, all_gather,
 * all_to_all and ppermute of 4 KiB over 16; a started psum over the
 * spread group beside a blocking one over a group within a process; and
 * a mismatch between a member beyond the two levels' bound and members
 * within it; and reductions above that bound (psums, psum_new, pmax),
 * which over 2 processes go as a chain and receive each call's bytes
 * once.  The
 * messages come from the engine's counters (mesh->place->pm->sent); a map
 * of CALLS more calls than another one isolates the calls' messages from
 * the map's own notices.
 */
#include <shmap.h>

#include "expect.h"

#include "internal.h"
#include "proc/proc.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LEN 64
#define CALLS 10

static int R;
static _Atomic int dev_failures;

typedef struct sarg {
  const char *axes; /* the group */
  int calls;
  int X, Y;         /* the mesh x=X,y=Y */
  int len;          /* elements per block */
  bool more;        /* also psum_new of f32 and pmax of i32 (more_of),
                       and each device checks every 7th element only */
} sarg;

/* The first element device d checks, and the step: with `more`, every
 * 7th, from the offset -d mod 7, so that each device checks some of
 * every piece (at least 16 elements) and, with 7 devices or more, some
 * device checks each element. */
static int first_checked(const sarg *a, int d)
{
  return a->more ? (7 - d % 7) % 7 : 0;
}
static int step_of(const sarg *a)
{
  return a->more ? 7 : 1;
}

/* Rank r's device in the group of axes a->axes (the first axis major). */
static int dev_of(const sarg *a, int r)
{
  if (strcmp(a->axes, "x,y") == 0)
    return r;
  return (r % a->X) * a->Y + r / a->X;
}

/* The float term of device d at element e of call k: magnitudes from 2^-20
 * to 2^20 with both signs, so that the sum's rounding depends on the
 * order of its terms. */
static float fterm(int d, int e, int k)
{
  int s = (d * 7 + e * 3 + k) % 41 - 20;
  float v = ldexpf(1.0f + (float)((d * 13 + e + k) % 17) / 17.0f, s);
  return (d + e + k) % 3 == 0 ? -v : v;
}

static int32_t iterm(int d, int e, int k)
{
  return (int32_t)((d * 1000003u + (unsigned)e * 7919u + (unsigned)k) %
                   2000001u) - 1000000;
}

/* The serial left fold in rank order of call k's float terms at e. */
static float fref(const sarg *a, int n, int e, int k, bool reversed)
{
  float acc = fterm(dev_of(a, reversed ? n - 1 : 0), e, k);
  for (int i = 1; i < n; i++)
    acc += fterm(dev_of(a, reversed ? n - 1 - i : i), e, k);
  return acc;
}

/* psum_new of f, which must stay unchanged, and pmax of i (terms of
 * call k + 500), each checked against the serial fold: 0, else 1 with a
 * message, or an error code. */
static int more_of(shmap_ctx *ctx, const sarg *a, shmap_block *f,
                   shmap_block *i, int k)
{
  int d = shmap_ctx_device(ctx), n = a->X * a->Y;
  float *fd = f->data;
  int32_t *id = i->data;
  for (int e = 0; e < a->len; e++) {
    fd[e] = fterm(d, e, k);
    id[e] = iterm(d, e, k + 500);
  }
  shmap_block *sum = NULL;
  int rc = shmap_psum_new(ctx, f, a->axes, &sum);
  if (!rc)
    rc = shmap_pmax(ctx, i, a->axes);
  if (rc)
    return rc;
  const float *sd = sum->data;
  int bad = 0;
  for (int e = first_checked(a, d); e < a->len && !bad; e += step_of(a)) {
    float want = fref(a, n, e, k, false), own = fterm(d, e, k);
    int32_t mx = iterm(dev_of(a, 0), e, k + 500);
    for (int r = 1; r < n; r++)
      if (iterm(dev_of(a, r), e, k + 500) > mx)
        mx = iterm(dev_of(a, r), e, k + 500);
    if (memcmp(&sd[e], &want, sizeof want) != 0 ||
        memcmp(&fd[e], &own, sizeof own) != 0 || id[e] != mx)
      bad = fprintf(stderr,
                    "[process %d] device %d over %s, call %d, element %d: "
                    "psum_new %.9g (want %.9g), its input %.9g (was %.9g), "
                    "pmax %d (want %d)\n",
                    me, d, a->axes, k, e, (double)sd[e], (double)want,
                    (double)fd[e], (double)own, id[e], mx) > 0;
  }
  shmap_block_free(ctx, sum);
  return bad;
}

static int body(shmap_ctx *ctx, void *arg)
{
  const sarg *a = arg;
  int d = shmap_ctx_device(ctx), n = a->X * a->Y;
  int64_t shape[1] = {a->len};
  shmap_block *f = shmap_block_alloc(ctx, SHMAP_F32, 1, shape);
  shmap_block *i = shmap_block_alloc(ctx, SHMAP_I32, 1, shape);
  if (!f || !i)
    return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  int bad = 0;
  for (int k = 0; k < a->calls; k++) {
    float *fd = f->data;
    int32_t *id = i->data;
    for (int e = 0; e < a->len; e++) {
      fd[e] = fterm(d, e, k);
      id[e] = iterm(d, e, k);
    }
    int rc = shmap_psum(ctx, f, a->axes);
    if (!rc)
      rc = shmap_psum(ctx, i, a->axes);
    if (rc)
      return rc;
    for (int e = first_checked(a, d); e < a->len; e += step_of(a)) {
      float want = fref(a, n, e, k, false);
      int64_t iw = 0;
      for (int r = 0; r < n; r++)
        iw += iterm(dev_of(a, r), e, k);
      if (memcmp(&fd[e], &want, sizeof want) != 0 || id[e] != (int32_t)iw) {
        if (bad++ == 0)
          fprintf(stderr,
                  "[process %d] device %d, psum over %s, call %d, element "
                  "%d: %.9g (want %.9g), %d (want %d)\n",
                  me, d, a->axes, k, e, (double)fd[e], (double)want, id[e],
                  (int32_t)iw);
      }
    }
    int rc2 = a->more ? more_of(ctx, a, f, i, k) : 0;
    if (rc2 < 0)
      return rc2;
    bad += rc2;
  }
  if (bad)
    atomic_fetch_add(&dev_failures, 1);
  return 0;
}

/* Messages this process sent on the mesh's communicator so far. */
static double sent_of(const shmap_mesh *m)
{
  const shmap__place *pl = m->place;
  if (!pl || !pl->pm)
    return 0;
  int64_t s = 0;
  for (int p = 0; p < pl->nproc; p++)
    s += atomic_load(&pl->pm->sent[p]);
  return (double)s;
}

/* Bytes this process received from others on the mesh so far. */
static double remote_of(const shmap_mesh *m)
{
  shmap_stats st;
  memset(&st, 0, sizeof st);
  return shmap_mesh_stats(m, &st) == 0 ? (double)st.bytes_remote : 0;
}

/* Map body over m with a->calls calls, then with `more` calls more, and
 * check both maps' results (`what` names the case); how much `counter`
 * grew in the second map beyond the first, over the calls: what the
 * calls cost apart from the map's own. */
static double two_maps(shmap_mesh *m, sarg *a, int more,
                       double (*counter)(const shmap_mesh *),
                       const char *what)
{
  double c0 = counter(m);
  int rc = shmap_map(m, body, a, 0, NULL, NULL, 0, NULL, NULL);
  double c1 = counter(m);
  a->calls += more;
  if (rc == 0)
    rc = shmap_map(m, body, a, 0, NULL, NULL, 0, NULL, NULL);
  double c2 = counter(m);
  EXPECT(rc == 0, "%s: shmap_map: %d %s", what, rc, shmap_errmsg());
  EXPECT(atomic_load(&dev_failures) == 0,
         "%s: psum results differ from the serial fold", what);
  atomic_store(&dev_failures, 0);
  return ((c2 - c1) - (c1 - c0)) / more;
}

static void one(int n, const char *axes, int len)
{
  char text[64];
  snprintf(text, sizeof text, "x=4,y=%d", n / 4);
  shmap_mesh *m = NULL;
  int rc = expect_mesh(&m, text);
  if (rc)
    return;
  sarg a = {axes, 1, 4, n / 4, len, false};
  /* The reference depends on the order: a fold in another order fails. */
  bool sensitive = false;
  for (int e = 0; e < len && !sensitive; e++)
    for (int k = 0; k < CALLS + 1 && !sensitive; k++)
      sensitive = fref(&a, n, e, k, false) != fref(&a, n, e, k, true);
  EXPECT(sensitive, "n=%d: the float sums do not depend on the order", n);
  char what[96];
  snprintf(what, sizeof what, "n=%d over %s, %d elements", n, axes, len);
  /* Two psums per call; questions about a late leader (one at a time,
   * less and less often) may add a few. */
  double per_call = two_maps(m, &a, CALLS, sent_of, what) / 2.0;
  double bound = 4.0 * R;
  if (me == 0)
    printf("test_mpi_spread: %d processes, %d devices over %s, %d B: %.2f "
           "messages per psum per process (device pairs: %d)\n",
           R, n, axes, len * 4, per_call, R > 1 ? n / R * (n - 1) : 0);
  EXPECT(per_call <= bound,
         "n=%d over %s, %d elements: %.2f messages per psum per process, "
         "more than %.0f",
         n, axes, len, per_call, bound);
  shmap_mesh_destroy(m);
}

/* A mismatch with a member that arrives late: in each process, the
 * second of its devices calls psum on a block of another shape, and the
 * third arrives at the call only after a nap, when its process's leader
 * (the first) has long found the mismatch and given its outcome to the
 * members already in the call.  The late member must still learn it (the
 * leader's outcome for the call stays readable): the map fails with the
 * mismatch on every process instead of hanging. */
static int late_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int d = shmap_ctx_device(ctx);
  int local = d % (16 / R); /* devices are placed contiguously */
  int64_t shape[1] = {local == 1 ? LEN / 2 : LEN};
  shmap_block *f = shmap_block_alloc(ctx, SHMAP_F32, 1, shape);
  if (!f)
    return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  memset(f->data, 0, sizeof(float) * (size_t)shape[0]);
  if (local == 2)
    usleep(300000);
  return shmap_psum(ctx, f, "x,y");
}

static void late_member(void)
{
  shmap_mesh *m = NULL;
  int rc = shmap_mesh_create(&m, "x=4,y=4");
  EXPECT(rc == 0, "shmap_mesh_create: %d %s", rc, shmap_errmsg());
  if (rc)
    return;
  rc = shmap_map(m, late_body, NULL, 0, NULL, NULL, 0, NULL, NULL);
  EXPECT(rc == SHMAP_EMISMATCH,
         "a mismatch beside a late member: shmap_map gave %d (%s), not "
         "SHMAP_EMISMATCH",
         rc, shmap_errmsg());
  EXPECT(strstr(shmap_errmsg(), "f32[32]") != NULL,
         "a mismatch beside a late member: the message does not name the "
         "odd block: %s",
         shmap_errmsg());
  /* The mesh still works. */
  sarg a = {"x,y", 1, 4, 4, LEN, false};
  rc = shmap_map(m, body, &a, 0, NULL, NULL, 0, NULL, NULL);
  EXPECT(rc == 0, "the map after the mismatch: %d %s", rc, shmap_errmsg());
  shmap_mesh_destroy(m);
}

/* psum_scatter, all_gather, all_to_all and ppermute (a shift by one rank)
 * of OPS_LEN i32 a member over a spread group: above the bound of one
 * exchange, within that of the two levels; every element against the
 * reference, for a->calls calls. */
#define OPS_LEN 1024
static int ops_body(shmap_ctx *ctx, void *arg)
{
  const sarg *a = arg;
  int d = shmap_ctx_device(ctx), n = a->X * a->Y;
  int r = shmap_axis_index(ctx, a->axes), c = OPS_LEN / n;
  if (dev_of(a, r) != d)
    return shmap_fail(ctx, "rank %d of %s is device %d, not %d", r, a->axes,
                      dev_of(a, r), d);
  int64_t shape[1] = {OPS_LEN};
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_I32, 1, shape);
  if (!x)
    return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  int pairs[64][2];
  if (n > 64)
    return shmap_fail(ctx, "ops_body takes at most 64 members");
  for (int k = 0; k < n; k++) {
    pairs[k][0] = k;
    pairs[k][1] = (k + 1) % n;
  }
  int bad = 0;
  for (int k = 0; k < a->calls; k++) {
    int32_t *xd = x->data;
    for (int e = 0; e < OPS_LEN; e++)
      xd[e] = iterm(d, e, k);
    shmap_block *sc = NULL, *ga = NULL, *aa = NULL;
    int rc = shmap_psum_scatter(ctx, x, a->axes, 0, 1, &sc);
    if (!rc)
      rc = shmap_all_gather(ctx, x, a->axes, 0, 1, &ga);
    if (!rc)
      rc = shmap_all_to_all(ctx, x, a->axes, 0, 0, 1, &aa);
    if (!rc)
      rc = shmap_ppermute(ctx, x, a->axes, n, (const int(*)[2])pairs);
    if (rc)
      return rc;
    /* In place, the block may have taken another buffer. */
    xd = x->data;
    const int32_t *s = sc->data, *g = ga->data, *t = aa->data;
    for (int e = 0; e < OPS_LEN * n && !bad; e++) {
      int src = e / OPS_LEN, el = e % OPS_LEN;
      if (g[e] != iterm(dev_of(a, src), el, k))
        bad = fprintf(stderr, "[process %d] device %d, all_gather over %s, "
                      "call %d, element %d: %d (want %d)\n", me, d, a->axes,
                      k, e, g[e], iterm(dev_of(a, src), el, k));
    }
    for (int e = 0; e < c && !bad; e++) {
      int64_t want = 0;
      for (int q = 0; q < n; q++)
        want += iterm(dev_of(a, q), r * c + e, k);
      if (s[e] != (int32_t)want)
        bad = fprintf(stderr, "[process %d] device %d, psum_scatter over %s, "
                      "call %d, element %d: %d (want %d)\n", me, d, a->axes,
                      k, e, s[e], (int32_t)want);
    }
    for (int e = 0; e < OPS_LEN && !bad; e++) {
      int32_t want = iterm(dev_of(a, e / c), r * c + e % c, k);
      if (t[e] != want)
        bad = fprintf(stderr, "[process %d] device %d, all_to_all over %s, "
                      "call %d, element %d: %d (want %d)\n", me, d, a->axes,
                      k, e, t[e], want);
    }
    for (int e = 0; e < OPS_LEN && !bad; e++) {
      int32_t want = iterm(dev_of(a, (r + n - 1) % n), e, k);
      if (xd[e] != want)
        bad = fprintf(stderr, "[process %d] device %d, ppermute over %s, "
                      "call %d, element %d: %d (want %d)\n", me, d, a->axes,
                      k, e, xd[e], want);
    }
    shmap_block_free(ctx, sc);
    shmap_block_free(ctx, ga);
    shmap_block_free(ctx, aa);
  }
  if (bad)
    atomic_fetch_add(&dev_failures, 1);
  return 0;
}

static void others(void)
{
  const char *const groups[] = {"x,y", "y,x"};
  shmap_mesh *m = NULL;
  if (expect_mesh(&m, "x=4,y=4"))
    return;
  for (int g = 0; g < 2; g++) {
    sarg a = {groups[g], 1, 4, 4, OPS_LEN, false};
    int64_t s0 = sent_of(m);
    int rc = shmap_map(m, ops_body, &a, 0, NULL, NULL, 0, NULL, NULL);
    int64_t s1 = sent_of(m);
    a.calls = CALLS + 1;
    if (rc == 0)
      rc = shmap_map(m, ops_body, &a, 0, NULL, NULL, 0, NULL, NULL);
    int64_t s2 = sent_of(m);
    EXPECT(rc == 0, "four collectives over %s: shmap_map: %d %s", a.axes, rc,
           shmap_errmsg());
    EXPECT(atomic_load(&dev_failures) == 0,
           "four collectives over %s: results differ from the reference",
           a.axes);
    atomic_store(&dev_failures, 0);
    double per_call = (double)((s2 - s1) - (s1 - s0)) / (4.0 * CALLS);
    if (me == 0)
      printf("test_mpi_spread: %d processes, 16 devices over %s, %d B: "
             "%.2f messages per collective per process\n",
             R, a.axes, OPS_LEN * 4, per_call);
    EXPECT(per_call <= 4.0 * R,
           "four collectives over %s: %.2f messages per call per process, "
           "more than %d",
           a.axes, per_call, 4 * R);
  }
  shmap_mesh_destroy(m);
}

/* A mismatch across the two levels' bound: device `odd` sums 1 MiB,
 * beyond the 512 KiB a member of 16 may bring to them, the others 32 KiB,
 * within it.  The two paths' messages differ, yet every process must
 * report the mismatch, naming the odd block, instead of hanging. */
static int odd_dev;
static int straddle_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int64_t shape[1] = {shmap_ctx_device(ctx) == odd_dev ? 262144 : 8192};
  shmap_block *f = shmap_block_alloc(ctx, SHMAP_F32, 1, shape);
  if (!f)
    return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  memset(f->data, 0, sizeof(float) * (size_t)shape[0]);
  return shmap_psum(ctx, f, "x,y");
}

static void straddle(void)
{
  shmap_mesh *m = NULL;
  if (expect_mesh(&m, "x=4,y=4"))
    return;
  /* A member that is not its process's leader, and the last process's
   * leader (devices are placed contiguously). */
  const int odds[] = {1, 16 / R * (R - 1)};
  for (int i = 0; i < 2; i++) {
    odd_dev = odds[i];
    int rc = shmap_map(m, straddle_body, NULL, 0, NULL, NULL, 0, NULL, NULL);
    EXPECT(rc == SHMAP_EMISMATCH,
           "1 MiB on device %d beside 32 KiB: shmap_map gave %d (%s), not "
           "SHMAP_EMISMATCH",
           odd_dev, rc, shmap_errmsg());
    EXPECT(strstr(shmap_errmsg(), "f32[262144]") != NULL,
           "1 MiB on device %d beside 32 KiB: the message does not name "
           "the odd block: %s",
           odd_dev, shmap_errmsg());
  }
  sarg a = {"x,y", 1, 4, 4, LEN, false};
  int rc = shmap_map(m, body, &a, 0, NULL, NULL, 0, NULL, NULL);
  EXPECT(rc == 0, "the map after the mismatches: %d %s", rc, shmap_errmsg());
  shmap_mesh_destroy(m);
}

/* A started psum over the spread group "x,y" and, while the device's
 * progress helper carries it out, a blocking psum over "y" (within a
 * process) of the same size, both above the bound of one exchange: the
 * blocking call must not touch what the started one uses (its plan of
 * the group), and both sums are exact, call after call. */
#define OVER_CALLS 40
static int overlap_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int d = shmap_ctx_device(ctx), x = d / 4;
  int64_t shape[1] = {OPS_LEN};
  shmap_block *a = shmap_block_alloc(ctx, SHMAP_I32, 1, shape);
  shmap_block *b = shmap_block_alloc(ctx, SHMAP_I32, 1, shape);
  if (!a || !b)
    return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  int bad = 0;
  for (int k = 0; k < OVER_CALLS && !bad; k++) {
    int32_t *ad = a->data, *bd = b->data;
    for (int e = 0; e < OPS_LEN; e++) {
      ad[e] = iterm(d, e, k);
      bd[e] = iterm(d, e, k + 1000);
    }
    shmap_request *req = NULL;
    int rc = shmap_psum_start(ctx, a, "x,y", &req);
    if (!rc)
      rc = shmap_psum(ctx, b, "y");
    int rw = req ? shmap_wait(ctx, &req) : 0;
    if (rc || rw)
      return rc ? rc : rw;
    ad = a->data;
    bd = b->data;
    for (int e = 0; e < OPS_LEN && !bad; e++) {
      int64_t wa = 0, wb = 0;
      for (int q = 0; q < 16; q++)
        wa += iterm(q, e, k);
      for (int y = 0; y < 4; y++)
        wb += iterm(x * 4 + y, e, k + 1000);
      if (ad[e] != (int32_t)wa || bd[e] != (int32_t)wb)
        bad = fprintf(stderr, "[process %d] device %d, call %d, element %d: "
                      "psum over x,y %d (want %d), over y %d (want %d)\n",
                      me, d, k, e, ad[e], (int32_t)wa, bd[e], (int32_t)wb);
    }
  }
  if (bad)
    atomic_fetch_add(&dev_failures, 1);
  return 0;
}

static void overlapped(void)
{
  shmap_mesh *m = NULL;
  if (expect_mesh(&m, "x=4,y=4"))
    return;
  int rc = shmap_map(m, overlap_body, NULL, 0, NULL, NULL, 0, NULL, NULL);
  EXPECT(rc == 0, "a started psum beside a blocking one: shmap_map: %d %s",
         rc, shmap_errmsg());
  EXPECT(atomic_load(&dev_failures) == 0,
         "a started psum beside a blocking one: results differ from the "
         "reference");
  atomic_store(&dev_failures, 0);
  shmap_mesh_destroy(m);
}

/* Larger reductions over "x,y" of 16 devices, above the two levels'
 * bound (32 KiB a member, 512 KiB over 16): psums of f32 and i32 in
 * place, a psum_new (its input unchanged) and a pmax.  Over 2 processes,
 * whose ranks are two runs (0-7 in one, 8-15 in the other), they go as a
 * chain (transport/mpi.c, "Larger reductions between two processes") and
 * each process receives a call's bytes exactly once per reduction; over 4
 * processes, and over "y,x" (every process's ranks strided), they take
 * the pieces of every member.  The results are the serial fold bit for
 * bit either way.  Over "x=2,y=3" each run has 3 members, 9 pieces.
 * CHAIN_LEN is not a multiple of the pieces' 16 floats, so the last
 * piece is short. */
#define CHAIN_LEN 140003

static void chain(const char *axes, const char *mesh)
{
  shmap_mesh *m = NULL;
  if (expect_mesh(&m, mesh))
    return;
  int X = atoi(mesh + 2), Y = atoi(strchr(mesh, ',') + 3);
  sarg a = {axes, 1, X, Y, CHAIN_LEN, true};
  char what[96];
  snprintf(what, sizeof what, "%s over %s, %d elements", mesh, axes,
           CHAIN_LEN);
  /* Four reductions per call: psum of f32 and i32, psum_new, pmax. */
  double per_psum = two_maps(m, &a, 2, remote_of, what) / 4.0;
  double bytes = 4.0 * CHAIN_LEN;
  if (me == 0)
    printf("test_mpi_spread: %d processes, %s over %s, %.0f B: %.0f bytes "
           "received per reduction per process\n",
           R, mesh, axes, bytes, per_psum);
  if (R == 2 && strcmp(axes, "x,y") == 0)
    EXPECT(per_psum == bytes,
           "%s over x,y, %.0f B a member: %.0f bytes received per "
           "reduction per process, want %.0f (the call's bytes once)",
           mesh, bytes, per_psum, bytes);
  shmap_mesh_destroy(m);
}

int main(void)
{
  alarm(240); /* run.sh bounds the run too */
  R = shmap_process_count();
  me = shmap_process_rank();
  late_member();
  /* 256 B a member, and beyond the bound of one exchange (3 KiB over
   * the other members together): the two levels serve both. */
  const int sizes[] = {16, 64}, lens[][2] = {{LEN, 1024}, {LEN, 256}};
  for (int s = 0; s < 2; s++)
    for (int l = 0; l < 2; l++) {
      one(sizes[s], "x,y", lens[s][l]);
      one(sizes[s], "y,x", lens[s][l]);
    }
  others();
  chain("x,y", "x=4,y=4");
  chain("y,x", "x=4,y=4");
  if (6 % R == 0) /* the processes share the devices equally */
    chain("x,y", "x=2,y=3");
  overlapped();
  straddle();
  if (failures)
    fprintf(stderr, "[process %d of %d] %d failure%s\n", me, R, failures,
            failures == 1 ? "" : "s");
  else if (me == 0)
    printf("test_mpi_spread: all passed\n");
  return failures ? 1 : 0;
}
