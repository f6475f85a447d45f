/* SPDX-License-Identifier: MIT */
/*
 * 20_sharded_matmul.c - libshmap tutorial: the four cases of a sharded
 * matrix multiply C = A B, with A f32[8,16] (I x J) and B f32[16,12]
 * (J x K) on the mesh x=4.  J is the contracting dimension.
 *
 *   1. Neither contracting dimension is sharded: A P('x', None), B P().
 *      Each device multiplies its rows of A by B; no communication, and
 *      C comes out P('x', None).
 *   2. One side is sharded on J: A P(None, 'x'), B P().  A device holds
 *      only a quarter of A's columns, which meet a quarter of B's rows it
 *      does not use; gather A's columns (all_gather over x, axis 1) first,
 *      then multiply: C comes out whole on every device, P().
 *   3. Both are sharded on J: A P(None, 'x'), B P('x', None).  Each device
 *      multiplies its own pieces and gets a partial sum of all of C; psum
 *      over x completes C on every device (3a), or psum_scatter completes
 *      and splits it at once, C P('x', None) (3b), moving less.
 *   4. Both non-contracting dimensions are sharded on the same axis:
 *      A P('x', None), B P(None, 'x').  C would need to be split by x along
 *      I and along K at once, which a mesh axis cannot be; gather one side
 *      first (here B, all_gather over x, axis 1) and it is case 1.
 *
 * Every C is checked against a serial product; the entries are small
 * integers, so float sums in any order give the same bits.
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define I 8
#define J 16
#define K 12

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "20_sharded_matmul: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

/* c = a b for row-major a [m,k], b [k,n]. */
static void mm(const float *a, const float *b, float *c, int64_t m, int64_t k,
               int64_t n)
{
  for (int64_t r = 0; r < m; r++)
    for (int64_t col = 0; col < n; col++) {
      float s = 0;
      for (int64_t t = 0; t < k; t++)
        s += a[r * k + t] * b[t * n + col];
      c[r * n + col] = s;
    }
}

/* A new block (output k when k >= 0, scratch otherwise) holding a b. */
static shmap_block *product(shmap_ctx *ctx, int k, const shmap_block *a,
                            const shmap_block *b)
{
  const int64_t shape[2] = {a->shape[0], b->shape[1]};
  shmap_block *c = k >= 0 ? shmap_out(ctx, k, SHMAP_F32, 2, shape)
                          : shmap_block_alloc(ctx, SHMAP_F32, 2, shape);
  if (c)
    mm(a->data, b->data, c->data, a->shape[0], a->shape[1], b->shape[1]);
  return c;
}

/* [tutorial:case1] */
/* A P('x', None), B P(): my rows of A times all of B. */
static int case1(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  return product(ctx, 0, shmap_in(ctx, 0), shmap_in(ctx, 1))
             ? 0 : shmap_fail(ctx, "no memory for C");
}
/* [end] */

/* [tutorial:case2] */
/* A P(None, 'x'), B P(): gather A's columns, then multiply. */
static int case2(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *a;
  int rc = shmap_all_gather(ctx, shmap_in(ctx, 0), "x", 1, 1, &a);
  if (rc < 0)
    return rc;
  return product(ctx, 0, a, shmap_in(ctx, 1))
             ? 0 : shmap_fail(ctx, "no memory for C");
}
/* [end] */

/* [tutorial:case3] */
/* A P(None, 'x'), B P('x', None): partial products, then sum them. */
static int case3(shmap_ctx *ctx, void *arg)
{
  int scatter = *(const int *)arg;
  shmap_block *part = product(ctx, -1, shmap_in(ctx, 0), shmap_in(ctx, 1));
  if (!part)
    return shmap_fail(ctx, "no memory for the partial product");
  if (!scatter) { /* 3a: every device gets all of C */
    int rc = shmap_psum(ctx, part, "x");
    return rc < 0 ? rc : shmap_out_set(ctx, 0, part);
  }
  shmap_block *c; /* 3b: device d keeps rows 2d, 2d+1 of C */
  int rc = shmap_psum_scatter(ctx, part, "x", 0, 1, &c);
  return rc < 0 ? rc : shmap_out_set(ctx, 0, c);
}
/* [end] */

/* [tutorial:case4] */
/* A P('x', None), B P(None, 'x'): gather B's columns; then it is case 1. */
static int case4(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *b;
  int rc = shmap_all_gather(ctx, shmap_in(ctx, 1), "x", 1, 1, &b);
  if (rc < 0)
    return rc;
  return product(ctx, 0, shmap_in(ctx, 0), b)
             ? 0 : shmap_fail(ctx, "no memory for C");
}
/* [end] */

static int run(shmap_mesh *mesh, const char *title, shmap_body_fn body,
               void *arg, shmap_array *a, shmap_array *b, const char *sa,
               const char *sb, const char *sc, const float *want)
{
  shmap_array *c;
  check(shmap_map(mesh, body, arg, 2, (shmap_array *[]){a, b},
                  (const char *[]){sa, sb}, 1, &c, (const char *[]){sc}),
        title);
  static float got[I * K];
  check(shmap_array_to_host(c, got), "shmap_array_to_host");
  const int64_t *cs = shmap_array_shape(c);
  int bad = shmap_array_rank(c) != 2 || cs[0] != I || cs[1] != K ||
            memcmp(got, want, sizeof got) != 0;
  if (shmap_process_rank() == 0)
    printf("%-44s A %-13s B %-13s -> C %-13s %s\n", title, sa, sb, sc,
           bad ? "WRONG" : "= A B");
  shmap_array_destroy(c);
  return bad;
}

int main(void)
{
  static float a[I * J], b[J * K], want[I * K];
  for (int k = 0; k < I * J; k++)
    a[k] = (float)(k % 7 - 3);
  for (int k = 0; k < J * K; k++)
    b[k] = (float)(k % 5 - 2);
  mm(a, b, want, I, J, K);
  shmap_mesh *mesh;
  check(shmap_mesh_create(&mesh, "x=4"), "shmap_mesh_create");
  shmap_array *ga, *gb;
  check(shmap_array_from_host(&ga, SHMAP_F32, 2, (int64_t[]){I, J}, a), "A");
  check(shmap_array_from_host(&gb, SHMAP_F32, 2, (int64_t[]){J, K}, b), "B");
  int no = 0, yes = 1, bad = 0;
  bad += run(mesh, "1. contracting dim not sharded", case1, NULL, ga, gb,
             "P('x', None)", "P()", "P('x', None)", want);
  bad += run(mesh, "2. one side sharded on it: all_gather", case2, NULL, ga,
             gb, "P(None, 'x')", "P()", "P()", want);
  bad += run(mesh, "3a. both sharded on it: psum", case3, &no, ga, gb,
             "P(None, 'x')", "P('x', None)", "P()", want);
  bad += run(mesh, "3b. both sharded on it: psum_scatter", case3, &yes, ga,
             gb, "P(None, 'x')", "P('x', None)", "P('x', None)", want);
  bad += run(mesh, "4. both non-contracting on x: all_gather", case4, NULL,
             ga, gb, "P('x', None)", "P(None, 'x')", "P('x', None)", want);
  shmap_array_destroy(ga);
  shmap_array_destroy(gb);
  shmap_mesh_destroy(mesh);
  if (bad) {
    fprintf(stderr, "20_sharded_matmul: %d cases wrong\n", bad);
    return 1;
  }
  if (shmap_process_rank() == 0)
    printf("20_sharded_matmul: all four cases give the serial product\n");
  return 0;
}
