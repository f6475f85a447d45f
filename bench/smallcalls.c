/* SPDX-License-Identifier: MIT */
/*
 * bench/smallcalls: one map of `calls` back-to-back collectives of one kind
 * on a mesh "i=P", each device's input `bytes` bytes of f32 (all_gather's
 * bytes/P, so that its result has `bytes`), as bench/run makes them.  Run
 * under valgrind --tool=callgrind twice with two call counts: the
 * difference of the instruction counts, divided by the difference of the
 * calls and by P, is the cost of one call on one device, without the
 * start-up and the map (see BENCHMARKS.md, "Cells behind Open MPI").
 * The scheduling mode is SHMAP_SCHED's.
 *
 *   bench/smallcalls OP P BYTES CALLS
 *   OP: psum, psum_scatter, all_gather, all_to_all, ppermute, empty
 *   (empty: CALLS maps of an empty body).
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PSUM, PSUM_SCATTER, ALL_GATHER, ALL_TO_ALL, PPERMUTE, EMPTY };
static const char *const names[] = {"psum",       "psum_scatter", "all_gather",
                                    "all_to_all", "ppermute",     "empty"};

typedef struct job {
  int op, P, calls;
  int64_t len;
  int (*pairs)[2];
} job;

static int one_call(shmap_ctx *ctx, const job *j, shmap_block *x)
{
  shmap_block *out = NULL;
  int rc;
  switch (j->op) {
  case PSUM:
    return shmap_psum(ctx, x, "i");
  case PPERMUTE:
    return shmap_ppermute(ctx, x, "i", j->P, (const int(*)[2])j->pairs);
  case PSUM_SCATTER:
    rc = shmap_psum_scatter(ctx, x, "i", 0, 1, &out);
    break;
  case ALL_GATHER:
    rc = shmap_all_gather(ctx, x, "i", 0, 1, &out);
    break;
  default:
    rc = shmap_all_to_all(ctx, x, "i", 0, 0, 1, &out);
    break;
  }
  /* Freed at once, as bench/run does. */
  return rc ? rc : shmap_block_free(ctx, out);
}

static int body(shmap_ctx *ctx, void *arg)
{
  const job *j = arg;
  int d = shmap_ctx_device(ctx);
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, &j->len);
  if (!x)
    return shmap_fail(ctx, "shmap_block_alloc: %s", shmap_errmsg());
  for (int64_t e = 0; e < j->len; e++)
    ((float *)x->data)[e] = (float)((e + d) % 7) * 0.125f;
  int rc = 0;
  for (int k = 0; k < j->calls && rc == 0; k++)
    rc = one_call(ctx, j, x);
  return rc;
}

static int empty_body(shmap_ctx *ctx, void *arg)
{
  (void)ctx;
  (void)arg;
  return 0;
}

int main(int argc, char **argv)
{
  if (argc != 5) {
    fprintf(stderr, "usage: %s OP P BYTES CALLS\n", argv[0]);
    return 2;
  }
  job j = {-1, atoi(argv[2]), atoi(argv[4]), 0, NULL};
  for (int i = 0; i <= EMPTY; i++)
    if (strcmp(argv[1], names[i]) == 0)
      j.op = i;
  long bytes = atol(argv[3]);
  if (j.op < 0 || j.P < 1 || j.calls < 0 || bytes < 0) {
    fprintf(stderr, "%s: bad arguments\n", argv[0]);
    return 2;
  }
  j.len = bytes / 4 / (j.op == ALL_GATHER ? j.P : 1);
  char text[64];
  snprintf(text, sizeof text, "i=%d", j.P);
  shmap_mesh *mesh;
  if (shmap_mesh_create(&mesh, text)) {
    fprintf(stderr, "%s: %s\n", argv[0], shmap_errmsg());
    return 1;
  }
  j.pairs = malloc(sizeof *j.pairs * (size_t)j.P);
  if (!j.pairs)
    return 1;
  for (int q = 0; q < j.P; q++) {
    j.pairs[q][0] = q;
    j.pairs[q][1] = (q + 1) % j.P;
  }
  int rc = 0;
  if (j.op == EMPTY)
    for (int k = 0; k < j.calls && rc == 0; k++)
      rc = shmap_map(mesh, empty_body, NULL, 0, NULL, NULL, 0, NULL, NULL);
  else
    rc = shmap_map(mesh, body, &j, 0, NULL, NULL, 0, NULL, NULL);
  if (rc)
    fprintf(stderr, "%s: %s: %s\n", argv[0], shmap_strerror(rc),
            shmap_errmsg());
  free(j.pairs);
  shmap_mesh_destroy(mesh);
  return rc ? 1 : 0;
}
