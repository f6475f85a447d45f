/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_repeat.c - small calls that repeat over processes, whose
 * messages then go without their header (transport/mpi.c, "Repeated
 * calls"): exact values of repeated psums, all_gathers and ppermutes, of
 * psums over two axes in turn and of terms of an odd size; a program
 * that breaks a run of repeats (another shape, the two axes swapped, one
 * of two alternating calls skipped, a ppermute's pairs changed) fails
 * with a mismatch at the call where it happens, in every process, and so
 * does a message cut short; and the mesh works afterwards.
 * The messages the library sends are counted here (MPI_Isend, which the
 * program defines over PMPI_Isend): a run of repeated psums of 256 bytes
 * must send its terms alone, 256 bytes per message, from its third call.
 *
 * Meshes "i=R,j=2" (the group of "i" has one member in each process, the
 * group of "j" both in one) and "d=R", for R processes.
 */
#include <shmap.h>

#include "expect.h"

#include <mpi.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define LEN 64 /* f32 or i32 elements: 256 bytes */
#define CALLS 12
#define BREAK_AT 7 /* the call a broken run breaks at */

/* Sends of MPI_BYTE by their length (longer ones at the end). */
#define HIST 4096
static _Atomic long sends[HIST + 1];

/* When set, the next message with a header (an odd length, tag not 0)
 * loses its last byte: an even length, which reads as terms alone. */
static _Atomic int truncate_next;

int MPI_Isend(const void *buf, int count, MPI_Datatype t, int dest, int tag,
              MPI_Comm comm, MPI_Request *req)
{
  if (t == MPI_BYTE && count >= 0) {
    if (tag != 0 && count % 2 == 1 && count < HIST &&
        atomic_exchange(&truncate_next, 0))
      count--;
    atomic_fetch_add(&sends[count < HIST ? count : HIST], 1);
  }
  return PMPI_Isend(buf, count, t, dest, tag, comm, req);
}

enum { PSUM, ALTERNATE, GATHER, PERMUTE, ODD };
enum { NONE, SHAPE, SKIP, SWAP, PAIRS };

typedef struct rarg {
  int what, broken, R;
  int bdev; /* the device that breaks the run */
} rarg;

static float term(int d, int e, int k)
{
  return (float)((d * 131 + e * 7 + k * 3) % 1000);
}

static int check_f32(shmap_ctx *ctx, const float *got, const float *want,
                     int n, int k)
{
  for (int e = 0; e < n; e++)
    if (got[e] != want[e])
      return shmap_fail(ctx, "call %d, element %d: %g, want %g", k, e,
                        (double)got[e], (double)want[e]);
  return 0;
}

/* Call k of a psum over `axes` ("i" or "j") on mesh i=R,j=2. */
static int psum_call(shmap_ctx *ctx, shmap_block *x, const rarg *a,
                     const char *axes, int k, int len)
{
  int d = shmap_ctx_device(ctx), i = d / 2, j = d % 2;
  float *v = x->data;
  for (int e = 0; e < len; e++)
    v[e] = term(d, e, k);
  int rc = shmap_psum(ctx, x, axes);
  if (rc)
    return rc;
  float want[LEN];
  for (int e = 0; e < len; e++) {
    want[e] = 0;
    if (strcmp(axes, "i") == 0)
      for (int r = 0; r < a->R; r++)
        want[e] += term(r * 2 + j, e, k);
    else
      want[e] = term(i * 2, e, k) + term(i * 2 + 1, e, k);
  }
  return check_f32(ctx, x->data, want, len, k);
}

static int body_psum(shmap_ctx *ctx, const rarg *a)
{
  int d = shmap_ctx_device(ctx);
  int64_t shape[1] = {LEN};
  int rc = 0;
  for (int k = 0; k < CALLS && !rc; k++) {
    bool here = a->broken && d == a->bdev && k == BREAK_AT;
    if (here && a->broken == SKIP)
      continue;
    /* ALTERNATE: "i" on even calls, "j" on odd ones (SWAP: one odd
     * call's "j" comes before its "i"). */
    const char *axes = "i";
    if (a->what == ALTERNATE)
      axes = (k % 2) ^ (a->broken == SWAP && d == a->bdev &&
                        (k == BREAK_AT || k == BREAK_AT + 1))
                 ? "j"
                 : "i";
    int len = here && a->broken == SHAPE ? LEN / 2 : LEN;
    shape[0] = len;
    shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, shape);
    if (!x)
      return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
    rc = psum_call(ctx, x, a, axes, k, len);
    int frc = shmap_block_free(ctx, x);
    rc = rc ? rc : frc;
  }
  return rc;
}

/* all_gather over "d" of d=R, tiled. */
static int body_gather(shmap_ctx *ctx, const rarg *a)
{
  int d = shmap_ctx_device(ctx);
  int64_t shape[1] = {LEN / 4};
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, shape);
  if (!x)
    return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  int rc = 0;
  for (int k = 0; k < CALLS && !rc; k++) {
    float *v = x->data;
    for (int e = 0; e < LEN / 4; e++)
      v[e] = term(d, e, k);
    shmap_block *out = NULL;
    if ((rc = shmap_all_gather(ctx, x, "d", 0, true, &out)))
      break;
    const float *got = out->data;
    for (int r = 0; r < a->R && !rc; r++)
      for (int e = 0; e < LEN / 4 && !rc; e++)
        if (got[r * (LEN / 4) + e] != term(r, e, k))
          rc = shmap_fail(ctx, "call %d, device %d's element %d: %g", k, r,
                          e, (double)got[r * (LEN / 4) + e]);
    int frc = shmap_block_free(ctx, out);
    rc = rc ? rc : frc;
  }
  shmap_block_free(ctx, x);
  return rc;
}

/* A ring shift over "d" of d=R by one (PAIRS: the breaking device's
 * pairs shift by two at BREAK_AT). */
static int body_permute(shmap_ctx *ctx, const rarg *a)
{
  int d = shmap_ctx_device(ctx), n = a->R;
  int64_t shape[1] = {LEN};
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_I32, 1, shape);
  if (!x)
    return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  int rc = 0;
  for (int k = 0; k < CALLS && !rc; k++) {
    int step = a->broken == PAIRS && d == a->bdev && k == BREAK_AT ? 2 : 1;
    int pairs[64][2];
    for (int r = 0; r < n; r++) {
      pairs[r][0] = r;
      pairs[r][1] = (r + step) % n;
    }
    int32_t *v = x->data;
    for (int e = 0; e < LEN; e++)
      v[e] = (int32_t)term(d, e, k);
    if ((rc = shmap_ppermute(ctx, x, "d", n, (const int(*)[2])pairs)))
      break;
    int src = (d + n - 1) % n;
    for (int e = 0; e < LEN && !rc; e++)
      if (v[e] != (int32_t)term(src, e, k))
        rc = shmap_fail(ctx, "call %d, element %d: %d", k, e, v[e]);
  }
  shmap_block_free(ctx, x);
  return rc;
}

/* psum over "d" of d=R of 63 bytes: odd terms always go with a header. */
static int body_odd(shmap_ctx *ctx, const rarg *a)
{
  int d = shmap_ctx_device(ctx);
  int64_t shape[1] = {63};
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_U8, 1, shape);
  if (!x)
    return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  int rc = 0;
  for (int k = 0; k < CALLS && !rc; k++) {
    uint8_t *v = x->data;
    for (int e = 0; e < 63; e++)
      v[e] = (uint8_t)(d + e + k);
    if ((rc = shmap_psum(ctx, x, "d")))
      break;
    for (int e = 0; e < 63 && !rc; e++) {
      unsigned want = 0;
      for (int r = 0; r < a->R; r++)
        want += (unsigned)(r + e + k);
      if (v[e] != (uint8_t)want)
        rc = shmap_fail(ctx, "call %d, element %d: %u, want %u", k, e, v[e],
                        want & 255u);
    }
  }
  shmap_block_free(ctx, x);
  return rc;
}

static int body(shmap_ctx *ctx, void *arg)
{
  const rarg *a = arg;
  switch (a->what) {
  case GATHER:
    return body_gather(ctx, a);
  case PERMUTE:
    return body_permute(ctx, a);
  case ODD:
    return body_odd(ctx, a);
  default:
    return body_psum(ctx, a);
  }
}

static int run(shmap_mesh *m, rarg *a, char *msg, size_t n)
{
  int rc = shmap_map(m, body, a, 0, NULL, NULL, 0, NULL, NULL);
  snprintf(msg, n, "%s", rc ? shmap_errmsg() : "");
  return rc;
}

static long sends_of(int len)
{
  return atomic_load(&sends[len]);
}

static void clean(shmap_mesh *m, int what, int R, const char *mesh)
{
  char msg[1024];
  rarg a = {.what = what, .R = R};
  long before = sends_of(LEN * 4);
  int rc = run(m, &a, msg, sizeof msg);
  EXPECT(rc == 0, "%s, case %d: %d %s", mesh, what, rc, msg);
  long alone = sends_of(LEN * 4) - before;
  /* From the third call of a run, each local device's message to each
   * of its R-1 peers in "i" is its 256 bytes of terms alone. */
  if (what == PSUM && R > 1)
    EXPECT(alone >= (long)(CALLS - 2) * 2 * (R - 1),
           "%s: %ld messages of the terms alone in %d psums, want %d or "
           "more",
           mesh, alone, CALLS, (CALLS - 2) * 2 * (R - 1));
}

static void broken(shmap_mesh *m, int what, int how, int R, int bdev,
                   const char *want1, const char *want2)
{
  char msg[1024];
  rarg a = {.what = what, .broken = how, .R = R, .bdev = bdev};
  int rc = run(m, &a, msg, sizeof msg);
  EXPECT(rc == SHMAP_EMISMATCH, "case %d broken by %d: %d (%s) %s", what,
         how, rc, shmap_strerror(rc), msg);
  EXPECT(!want1 || strstr(msg, want1), "case %d broken by %d: '%s' in: %s",
         what, how, want1, msg);
  EXPECT(!want2 || strstr(msg, want2), "case %d broken by %d: '%s' in: %s",
         what, how, want2, msg);
}

int main(void)
{
  alarm(240); /* run.sh bounds the run too */
  me = shmap_process_rank();
  int R = shmap_process_count();
  char text[64];
  snprintf(text, sizeof text, "i=%d,j=2", R);
  shmap_mesh *m = NULL;
  int rc = expect_mesh(&m, text);
  if (rc)
    return expect_report("test_mpi_repeat", R);
  clean(m, PSUM, R, text);
  clean(m, ALTERNATE, R, text);
  if (R > 1) {
    /* The last process's device j=0 breaks the run. */
    int bdev = (R - 1) * 2;
    char call[32];
    snprintf(call, sizeof call, "#%d", BREAK_AT + 1);
    broken(m, PSUM, SHAPE, R, bdev, call, "f32[32]");
    /* Its "j" call skipped, its next "i" call comes a call early. */
    broken(m, ALTERNATE, SKIP, R, bdev, call, NULL);
    broken(m, ALTERNATE, SWAP, R, bdev, call, "'j'");
    clean(m, PSUM, R, text);
    /* A first message cut short on the last process: no record predicts
     * a message without a header, so the map fails with that message
     * everywhere, and the next one works. */
    char msg[1024];
    rarg a = {.what = PSUM, .R = R};
    atomic_store(&truncate_next, me == R - 1);
    rc = run(m, &a, msg, sizeof msg);
    atomic_store(&truncate_next, 0);
    char from[64];
    snprintf(from, sizeof from, "on process %d (host", R - 1);
    const char *sender = strstr(msg, " bytes from device ");
    EXPECT(rc == SHMAP_ESYS && sender && strstr(sender, from) &&
               strstr(msg, "does not hold a call description"),
           "a message cut short: %d (%s) %s", rc, shmap_strerror(rc), msg);
    clean(m, PSUM, R, text);
  }
  shmap_mesh_destroy(m);

  snprintf(text, sizeof text, "d=%d", R);
  rc = expect_mesh(&m, text);
  if (rc)
    return expect_report("test_mpi_repeat", R);
  clean(m, GATHER, R, text);
  clean(m, PERMUTE, R, text);
  clean(m, ODD, R, text);
  if (R > 2) {
    char call[32];
    snprintf(call, sizeof call, "#%d", BREAK_AT + 1);
    broken(m, PERMUTE, PAIRS, R, R - 1, call, "ppermute");
  }
  clean(m, PERMUTE, R, text);
  shmap_mesh_destroy(m);
  return expect_report("test_mpi_repeat", R);
}
