/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_async.c - asynchronous collectives with the devices spread over
 * the processes of an MPI job: ppermute, all_gather, psum_scatter and psum
 * started together (over one axis and over both) equal the blocking calls
 * bit for bit and the host reference; a device of another process failing
 * (at several moments) while the others wait for requests, a mismatch
 * against a started call, and a body leaving a request open end the map
 * on every process with the same code and message; the next map works.
 * A plain program: Check would fork after MPI_Init.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shmap.h>

#include "expect.h"

static bool same(const shmap_block *a, const shmap_block *b)
{
  return a->dtype == b->dtype && a->rank == b->rank &&
         memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank) == 0 &&
         memcmp(a->data, b->data, shmap_block_nbytes(a)) == 0;
}

/* Every started call against its blocking twin, over `axes`.  Output 0 is
 * the ppermute's result (a shift by one along the group). */
static int four(shmap_ctx *ctx, void *arg)
{
  const char *axes = arg;
  const shmap_block *x = shmap_in(ctx, 0); /* f32[8] */
  int n = shmap_axis_size(ctx, axes);
  int pairs[8][2];
  for (int r = 0; r < n; r++)
    pairs[r][0] = r, pairs[r][1] = (r + 1) % n;
  shmap_block *perm, *gath, *scat, *bperm, *bgath, *bscat;
  shmap_block *sum = shmap_block_alloc(ctx, SHMAP_F32, 1, x->shape);
  shmap_block *bsum = shmap_block_alloc(ctx, SHMAP_F32, 1, x->shape);
  if (!sum || !bsum)
    return -1;
  memcpy(sum->data, x->data, 32);
  memcpy(bsum->data, x->data, 32);
  shmap_request *req[4];
  int rc;
  if ((rc = shmap_ppermute_start(ctx, x, axes, n, (const int(*)[2])pairs,
                                 &perm, &req[0])) ||
      (rc = shmap_all_gather_start(ctx, x, axes, 0, 1, &gath, &req[1])) ||
      (rc = shmap_psum_scatter_start(ctx, x, axes, 0, 1, &scat, &req[2])) ||
      (rc = shmap_psum_start(ctx, sum, axes, &req[3])) ||
      (rc = shmap_wait_all(ctx, 4, req)))
    return rc;
  if ((rc = shmap_ppermute_new(ctx, x, axes, n, (const int(*)[2])pairs,
                               &bperm)) ||
      (rc = shmap_all_gather(ctx, x, axes, 0, 1, &bgath)) ||
      (rc = shmap_psum_scatter(ctx, x, axes, 0, 1, &bscat)) ||
      (rc = shmap_psum(ctx, bsum, axes)))
    return rc;
  if (!same(perm, bperm) || !same(gath, bgath) || !same(scat, bscat) ||
      !same(sum, bsum))
    return shmap_fail(ctx, "started and blocking results differ");
  return shmap_out_set(ctx, 0, perm);
}

static void results(shmap_mesh *mesh)
{
  float host[64], got[64];
  for (int k = 0; k < 64; k++)
    host[k] = (float)k * 0.75f - 3.0f;
  shmap_array *x, *y;
  EXPECT(shmap_array_from_host(&x, SHMAP_F32, 1, (int64_t[]){64}, host) == 0,
         "%s", shmap_errmsg());
  static const char *const axes[] = {"i", "('i','j')"};
  for (int a = 0; a < 2; a++) {
    int rc = shmap_map(mesh, four, (void *)axes[a], 1, &x,
                       (const char *[]){"P(('i','j'))"}, 1, &y,
                       (const char *[]){"P(('i','j'))"});
    EXPECT(rc == 0, "%s: %s", axes[a], shmap_errmsg());
    if (rc)
      continue;
    EXPECT(shmap_array_to_host(y, got) == 0, "%s", shmap_errmsg());
    /* Device d = i*2 + j holds block d; its rank over "i" is i, over
     * ('i','j') is d; it receives the block of the previous rank. */
    for (int d = 0; d < 8; d++) {
      int i = d / 2, j = d % 2;
      int from = a == 0 ? ((i + 3) % 4) * 2 + j : (d + 7) % 8;
      for (int k = 0; k < 8; k++)
        EXPECT(got[d * 8 + k] == host[from * 8 + k],
               "%s: device %d element %d: %g, want %g", axes[a], d, k,
               got[d * 8 + k], host[from * 8 + k]);
    }
    shmap_array_destroy(y);
  }
  shmap_array_destroy(x);
}

/* Device 7 fails (mode 0), makes another call (1), or leaves its request
 * open (2), while the others wait for their requests; in mode 0 it first
 * sleeps `delay` microseconds, so that the failure reaches the other
 * processes at different points of their calls. */
typedef struct how {
  int mode;
  long delay;
} how;

static int trouble(shmap_ctx *ctx, void *arg)
{
  const how *h = arg;
  int mode = h->mode;
  static const int ring[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_I32, 1, (int64_t[]){4});
  if (!x)
    return -1;
  memset(x->data, 0, 16);
  shmap_block *y;
  shmap_request *r;
  int rc;
  if (shmap_ctx_device(ctx) == 7 && mode == 0) {
    struct timespec ts = {0, h->delay * 1000};
    if (h->delay)
      nanosleep(&ts, NULL);
    return shmap_fail(ctx, "device seven gives up");
  }
  if (shmap_ctx_device(ctx) == 7 && mode == 1)
    rc = shmap_all_gather_start(ctx, x, "i", 0, 1, &y, &r);
  else
    rc = shmap_ppermute_start(ctx, x, "i", 4, ring, &y, &r);
  if (rc)
    return rc;
  if (shmap_ctx_device(ctx) == 7 && mode == 2)
    return 0;
  return shmap_wait(ctx, &r);
}

static void troubles(shmap_mesh *mesh)
{
  static const int codes[] = {SHMAP_EBODY, SHMAP_EMISMATCH, SHMAP_ESTATE};
  static const char *const words[] = {
      "device seven gives up", "differs",
      "the body returned with this request open"};
  /* The group of device 7 can never complete its call in mode 0, the
   * other groups can: every member of those must still agree whether to
   * complete it, whenever the failure reaches it (a member giving up
   * while a peer waits for its data would hang the map). */
  static const long delays[] = {0, 0, 50, 200, 1000, 0, 5000, 20};
  for (int t = 0; t < 10; t++) {
    how h = {t < 8 ? 0 : t - 7, t < 8 ? delays[t] : 0};
    int rc = shmap_map(mesh, trouble, &h, 0, NULL, NULL, 0, NULL, NULL);
    const char *msg = shmap_errmsg();
    EXPECT(rc == codes[h.mode], "mode %d: rc %d (%s): %s", h.mode, rc,
           shmap_strerror(rc), msg);
    EXPECT(strstr(msg, words[h.mode]) != NULL, "mode %d: message without "
           "\"%s\": %s", h.mode, words[h.mode], msg);
  }
}

int main(void)
{
  me = shmap_process_rank();
  int np = shmap_process_count();
  shmap_mesh *mesh;
  if (shmap_mesh_create(&mesh, "i=4, j=2")) {
    fprintf(stderr, "%s\n", shmap_errmsg());
    return 1;
  }
  results(mesh);
  troubles(mesh);
  results(mesh); /* the mesh still works */
  shmap_mesh_destroy(mesh);
  return expect_report("test_mpi_async", np);
}
