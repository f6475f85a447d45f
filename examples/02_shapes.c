/* SPDX-License-Identifier: MIT */
/*
 * 02_shapes.c - libshmap tutorial, step 2: how out specs shape the result.
 *
 * What this example teaches
 *   The global shape of an output is the shape of the block each device
 *   returns, multiplied per dimension by the number of devices along the
 *   axes its out-spec entry names.  An axis the out spec does not name is
 *   "untiled": the devices along it promise to return equal blocks, and one
 *   copy is kept.  The library checks that promise at run time.
 *
 *   Everything here runs on the mesh i=4, j=2 with x = arange(144) as a
 *   12x12 i32 matrix (x[r][c] = 12*r + c):
 *
 *     in spec      body                  out spec       result
 *     P('i',None)  return x              P('i','j')     (12,24) = tile(x,(1,2))
 *     P('i','j')   psum(x, 'j')          P('i',None)    (12,6)
 *     P('i','j')   psum(x, 'i')          P(None,'j')    (3,12)
 *     P('i','j')   psum(x, ('i','j'))    P(None,None)   (3,6)
 *     P('i','j')   2*x                   P(None,'j')    replication error
 *
 *   Read each line as: the body sees a block (3,12) or (3,6); a psum over
 *   an axis makes the blocks equal along that axis, which is exactly what
 *   lets the out spec leave that axis out.  In the last line the blocks
 *   differ along 'i' but the out spec leaves 'i' out, so the map fails with
 *   SHMAP_EREPLICATION and a message naming two devices that disagree.
 *   With the flag SHMAP_NO_CHECK_REP the check is skipped and the copy at
 *   i=0 is used; the last part shows that too.
 *
 *   Every value is compared with a serial computation of the same thing.
 *
 *   Under mpirun every process checks every value and process 0 prints;
 *   device 0, which records the block shape, runs in process 0.
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 12 /* x is N x N */

/* One row of the table above. */
struct shape_case {
  const char *in_spec;
  const char *psum_axes; /* NULL: no psum */
  int times;             /* multiply the block by this (1 or 2) */
  const char *out_spec;
  const char *label;     /* the body, as printed */
  /* filled in by device 0 (in process 0 under mpirun) */
  int64_t seen[2];
};

static int32_t x_host[N * N];

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "02_shapes: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

/* The body shared by all cases: optionally scale, optionally psum. */
static int body(shmap_ctx *ctx, void *arg)
{
  struct shape_case *sc = arg;
  const shmap_block *x = shmap_in(ctx, 0);
  if (x == NULL)
    return shmap_fail(ctx, "shmap_in(0) returned NULL");
  if (shmap_ctx_device(ctx) == 0)
    memcpy(sc->seen, x->shape, sizeof sc->seen);

  /* The output starts as a copy of the block, then changes in place. */
  shmap_block *y = shmap_out_copy(ctx, 0, x);
  if (y == NULL)
    return shmap_fail(ctx, "shmap_out_copy failed");
  int32_t *v = y->data;
  for (int64_t k = 0; k < shmap_block_numel(y); k++)
    v[k] *= sc->times;
  if (sc->psum_axes != NULL)
    return shmap_psum(ctx, y, sc->psum_axes);
  return 0;
}

/* Serial versions of the four results, straight from the definitions. */
static int32_t expect(int which, int r, int c)
{
  int32_t s = 0;
  switch (which) {
  case 0: /* tile(x, (1, 2)) */
    return x_host[r * N + c % N];
  case 1: /* psum over j of x[3i:3i+3, 6j:6j+6], blocks stacked over i */
    return x_host[r * N + c] + x_host[r * N + c + 6];
  case 2: /* psum over i of the blocks, blocks side by side over j */
    for (int i = 0; i < 4; i++)
      s += x_host[(3 * i + r) * N + c];
    return s;
  case 3: /* psum over every device of its (3,6) block */
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 2; j++)
        s += x_host[(3 * i + r) * N + 6 * j + c];
    return s;
  default: /* 2*x with out P(None,'j') and no check: the copy at i = 0 */
    return 2 * x_host[r * N + c];
  }
}

/* Run one case and compare with the serial values; returns the errors. */
static int run_case(shmap_mesh *mesh, shmap_array *x, struct shape_case *sc,
                    int which, unsigned flags, int64_t rows, int64_t cols)
{
  shmap_array *y = NULL;
  check(shmap_map_flags(mesh, body, sc, 1, (shmap_array *[]){x},
                        (const char *[]){sc->in_spec}, 1, &y,
                        (const char *[]){sc->out_spec}, flags),
        "shmap_map");
  const int64_t *shape = shmap_array_shape(y);
  if (shmap_process_rank() == 0)
    printf("in %-12s body %-18s out %-13s -> (%lld,%lld), body saw (%lld,%lld)\n",
           sc->in_spec, sc->label, sc->out_spec, (long long)shape[0],
           (long long)shape[1], (long long)sc->seen[0], (long long)sc->seen[1]);

  int errors = 0;
  if (shmap_array_rank(y) != 2 || shape[0] != rows || shape[1] != cols) {
    fprintf(stderr, "02_shapes: case %d: shape (%lld,%lld), expected (%lld,%lld)\n",
            which, (long long)shape[0], (long long)shape[1], (long long)rows,
            (long long)cols);
    errors++;
  } else {
    int32_t *got = malloc((size_t)(rows * cols) * sizeof *got);
    if (got == NULL) {
      fprintf(stderr, "02_shapes: out of memory\n");
      exit(1);
    }
    check(shmap_array_to_host(y, got), "shmap_array_to_host");
    for (int r = 0; r < rows && !errors; r++)
      for (int c = 0; c < cols; c++) {
        int32_t want = expect(which, r, c);
        if (got[r * cols + c] != want) {
          fprintf(stderr, "02_shapes: case %d: y[%d][%d] = %d, serial gives %d\n",
                  which, r, c, (int)got[r * cols + c], (int)want);
          errors++;
          break;
        }
      }
    free(got);
  }
  shmap_array_destroy(y);
  return errors;
}

int main(void)
{
  shmap_mesh *mesh;
  check(shmap_mesh_create(&mesh, "i=4, j=2"), "shmap_mesh_create");
  for (int k = 0; k < N * N; k++)
    x_host[k] = k;
  shmap_array *x;
  check(shmap_array_from_host(&x, SHMAP_I32, 2, (int64_t[]){N, N}, x_host),
        "shmap_array_from_host");
  int rank = shmap_process_rank(); /* 0 without mpirun */
  if (rank == 0)
    printf("mesh i=4, j=2; x = arange(144).reshape(12,12), i32\n\n");

  struct shape_case cases[] = {
      {"P('i',None)", NULL, 1, "P('i','j')", "x", {0, 0}},
      {"P('i','j')", "j", 1, "P('i',None)", "psum(x, 'j')", {0, 0}},
      {"P('i','j')", "i", 1, "P(None,'j')", "psum(x, 'i')", {0, 0}},
      {"P('i','j')", "('i','j')", 1, "P(None,None)", "psum(x, ('i','j'))",
       {0, 0}},
  };
  const int64_t shapes[][2] = {{12, 24}, {12, 6}, {3, 12}, {3, 6}};
  int errors = 0;
  for (int k = 0; k < 4; k++)
    errors += run_case(mesh, x, &cases[k], k, 0, shapes[k][0], shapes[k][1]);

  /* The fifth line: blocks differ along 'i', which the out spec drops. */
  struct shape_case bad = {"P('i','j')", NULL, 2, "P(None,'j')", "2*x",
                           {0, 0}};
  shmap_array *y = NULL;
  int rc = shmap_map(mesh, body, &bad, 1, (shmap_array *[]){x},
                     (const char *[]){bad.in_spec}, 1, &y,
                     (const char *[]){bad.out_spec});
  if (rank == 0) {
    printf("in %-12s body %-18s out %-13s -> error %d (%s)\n", bad.in_spec,
           bad.label, bad.out_spec, rc, shmap_strerror(rc));
    printf("  shmap_errmsg(): %s\n", shmap_errmsg());
  }
  if (rc != SHMAP_EREPLICATION) {
    fprintf(stderr, "02_shapes: expected SHMAP_EREPLICATION (%d), got %d\n",
            SHMAP_EREPLICATION, rc);
    errors++;
  }
  if (y != NULL) {
    fprintf(stderr, "02_shapes: a failed map set its output\n");
    errors++;
  }

  /* The same map with the check off keeps the blocks at i = 0. */
  if (rank == 0)
    printf("\nwith SHMAP_NO_CHECK_REP the copy at i=0 is kept:\n");
  errors += run_case(mesh, x, &bad, 4, SHMAP_NO_CHECK_REP, 3, 12);

  shmap_array_destroy(x);
  shmap_mesh_destroy(mesh);
  if (errors) {
    fprintf(stderr, "02_shapes: FAILED (%d errors)\n", errors);
    return 1;
  }
  if (rank == 0)
    printf("\nall shapes and values match the serial computation\n");
  return 0;
}
