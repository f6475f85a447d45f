/* SPDX-License-Identifier: MIT */
/*
 * 21_exercises.c - libshmap tutorial: the answers to the exercises of
 * shmap-tutorial(7), each computed by running the collective it asks
 * about and checked against the answer the tutorial gives.  The program
 * prints one line per answer and exits non-zero when a run disagrees with
 * the stated answer.
 *
 *   1. x f32[64] is split P('i') over i=4 and all-gathered (tiled).  How
 *      many elements does each device hold after, and how many bytes did
 *      it receive from the others?
 *   2. Every device of i=4 holds f32[8,6] filled with (its index + 1) and
 *      calls psum_scatter over i on dimension 0, tiled.  What is the shape
 *      of device 2's result, and its values?
 *   3. Device d of i=4 holds [4d, 4d+1, 4d+2, 4d+3]; all_to_all over i
 *      splits and concatenates dimension 0.  What does device 1 hold?
 *   4. A ppermute moves each block of i=4 one step on the ring (d to d+1).
 *      After three of them, which device holds device 0's first block?
 *   5. A f32[8,16] P(None, 'x') times B f32[16,12] P('x', None) on x=4,
 *      finished with psum_scatter on dimension 0: the shape of a device's
 *      block of C?
 *   6. FSDP on data=4 keeps W f32[8,8] as P('data', None).  How many
 *      elements of W does a device keep between steps, and how many does
 *      it hold after gathering W for its layer?
 *   7. Every device of i=16 holds f32[65536] and calls psum over i.  What
 *      does a rehearsal on the TPU v5e preset (one ring, 4.5e10 B/s per
 *      link and direction, 1 us per hop) predict, and is the call bound by
 *      latency or by bandwidth?
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "21_exercises: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

static int bad;

static void answer(int n, const char *text, int ok)
{
  if (shmap_process_rank() == 0)
    printf("exercise %d: %s%s\n", n, text, ok ? "" : "  (the run disagrees)");
  if (!ok)
    bad++;
}

/* Output 0: the result block itself; output 1: [rows, cols] of it. */
static int emit(shmap_ctx *ctx, shmap_block *r)
{
  shmap_block *s = shmap_out(ctx, 1, SHMAP_I64, 1, (int64_t[]){2});
  if (!s)
    return shmap_fail(ctx, "no output");
  int64_t *sh = s->data;
  sh[0] = r->shape[0];
  sh[1] = r->rank > 1 ? r->shape[1] : 1;
  return shmap_out_set(ctx, 0, r);
}

static int ex1(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *g;
  int rc = shmap_all_gather(ctx, shmap_in(ctx, 0), "i", 0, 1, &g);
  return rc < 0 ? rc : emit(ctx, g);
}

static int ex2(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 2, (int64_t[]){8, 6});
  if (!x)
    return shmap_fail(ctx, "no memory");
  float *v = x->data;
  for (int e = 0; e < 48; e++)
    v[e] = (float)(shmap_axis_index(ctx, "i") + 1);
  shmap_block *r;
  int rc = shmap_psum_scatter(ctx, x, "i", 0, 1, &r);
  return rc < 0 ? rc : emit(ctx, r);
}

static int ex3(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *r;
  int rc = shmap_all_to_all(ctx, shmap_in(ctx, 0), "i", 0, 0, 1, &r);
  return rc < 0 ? rc : emit(ctx, r);
}

static int ex4(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  static const int ring[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  shmap_block *y = shmap_block_alloc(ctx, SHMAP_F32, 1, (int64_t[]){4});
  if (!y)
    return shmap_fail(ctx, "no memory");
  memcpy(y->data, shmap_in(ctx, 0)->data, 4 * sizeof(float));
  for (int step = 0; step < 3; step++) {
    int rc = shmap_ppermute(ctx, y, "i", 4, ring);
    if (rc < 0)
      return rc;
  }
  return emit(ctx, y);
}

static int ex5(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *a = shmap_in(ctx, 0), *b = shmap_in(ctx, 1);
  shmap_block *p = shmap_block_alloc(ctx, SHMAP_F32, 2,
                                     (int64_t[]){a->shape[0], b->shape[1]});
  if (!p)
    return shmap_fail(ctx, "no memory");
  shmap_block *c;
  int rc = shmap_psum_scatter(ctx, p, "x", 0, 1, &c);
  return rc < 0 ? rc : emit(ctx, c);
}

/* Output 1 here: the elements of W kept, and held after the gather. */
static int ex6(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *w, *s = shmap_out(ctx, 1, SHMAP_I64, 1, (int64_t[]){2});
  int rc = shmap_all_gather(ctx, shmap_in(ctx, 0), "data", 0, 1, &w);
  if (rc < 0 || !s)
    return rc < 0 ? rc : shmap_fail(ctx, "no output");
  int64_t *n = s->data;
  n[0] = shmap_block_numel(shmap_in(ctx, 0));
  n[1] = shmap_block_numel(w);
  return shmap_out_set(ctx, 0, w);
}

/* Runs body over `mesh` on the inputs; *res gets output 0 (whole, P('i')
 * stacking of the blocks along dimension 0), shape[d] device d's shape. */
static void run(const char *mesh_text, shmap_body_fn body, int nin,
                shmap_array *in[], const char *const specs[], float *res,
                int64_t shape[][2])
{
  shmap_mesh *mesh;
  check(shmap_mesh_create(&mesh, mesh_text), mesh_text);
  char spec[32];
  snprintf(spec, sizeof spec, "P('%.*s')",
           (int)(strchr(mesh_text, '=') - mesh_text), mesh_text);
  shmap_array *out[2];
  check(shmap_map(mesh, body, NULL, nin, in, specs, 2, out,
                  (const char *[]){spec, spec}),
        "shmap_map");
  check(shmap_array_to_host(out[0], res), "shmap_array_to_host");
  check(shmap_array_to_host(out[1], shape), "shmap_array_to_host");
  shmap_array_destroy(out[0]);
  shmap_array_destroy(out[1]);
  shmap_mesh_destroy(mesh);
}

/* Exercise 7: a psum of the device's block, on a rehearsed map. */
static int ex7(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *in = shmap_in(ctx, 0);
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, in->shape);
  if (!x)
    return shmap_fail(ctx, "no memory for the copy");
  memcpy(x->data, in->data, (size_t)in->shape[0] * sizeof(float));
  /* The copy reads and writes the block: priced as memory traffic on the
   * target rather than as the time it took here. */
  shmap_cost(ctx, 0, 2.0 * (double)in->shape[0] * sizeof(float));
  int rc = shmap_psum(ctx, x, "i");
  return rc < 0 ? rc : shmap_out_set(ctx, 0, x);
}

/* Device 0's exposed communication in the last rehearsed map, in
 * microseconds: here, the psum's predicted time. */
static double psum_us(void)
{
  static char report[65536];
  check(shmap_rehearse_report(report, sizeof report), "shmap_rehearse_report");
  const char *key = "\"exposed_comm_s\":", *p = strstr(report, key);
  return p ? atof(p + strlen(key)) * 1e6 : -1;
}

static void exercise7(void)
{
  static float zeros[16 * 65536];
  shmap_array *x, *y;
  shmap_mesh *mesh;
  check(shmap_array_from_host(&x, SHMAP_F32, 1, (int64_t[]){16 * 65536},
                              zeros), "x");
  check(shmap_mesh_create(&mesh, "i=16"), "shmap_mesh_create");
  shmap_map_opts o = {.rehearse = "tpu-v5e-16x16"};
  check(shmap_map_ex(mesh, ex7, NULL, 1, &x, (const char *[]){"P('i')"}, 1,
                     &y, (const char *[]){"P('i')"}, &o),
        "shmap_map_ex");
  /* Each phase (reduce-scatter, all-gather) costs max(8 hops x 1 us,
   * 262144 B x 15/16 / (2 x 4.5e10 B/s) = 2.7 us). */
  double t = psum_us(), bw = 262144.0 * 15 / 16 / 9e10 * 1e6;
  char text[160];
  snprintf(text, sizeof text, "%.1f us, bound by latency (8 hops of 1 us "
           "against %.1f us of transfer per phase)", t, bw);
  answer(7, text, t > 15.95 && t < 16.05 && bw < 8);
  shmap_array_destroy(y);
  shmap_array_destroy(x);
  shmap_mesh_destroy(mesh);
}

int main(void)
{
  static float res[1024];
  int64_t shape[4][2];
  char text[160];
  float x64[64], x16[16];
  for (int k = 0; k < 64; k++)
    x64[k] = (float)k;
  for (int k = 0; k < 16; k++)
    x16[k] = (float)k;
  shmap_array *h64, *h16;
  check(shmap_array_from_host(&h64, SHMAP_F32, 1, (int64_t[]){64}, x64), "x");
  check(shmap_array_from_host(&h16, SHMAP_F32, 1, (int64_t[]){16}, x16), "x");

  run("i=4", ex1, 1, &h64, (const char *[]){"P('i')"}, res, shape);
  int64_t got = shape[0][0], recv = (shape[0][0] - 16) * 4;
  snprintf(text, sizeof text, "%lld elements, %lld bytes received",
           (long long)got, (long long)recv);
  answer(1, text, got == 64 && recv == 192);

  run("i=4", ex2, 0, NULL, NULL, res, shape);
  int tens = 1;
  for (int e = 0; e < 12; e++)
    tens &= res[2 * 12 + e] == 10.0f;
  snprintf(text, sizeof text, "f32[%lld,%lld], every value %g",
           (long long)shape[2][0], (long long)shape[2][1], res[24]);
  answer(2, text, shape[2][0] == 2 && shape[2][1] == 6 && tens);

  run("i=4", ex3, 1, &h16, (const char *[]){"P('i')"}, res, shape);
  snprintf(text, sizeof text, "[%g %g %g %g]", res[4], res[5], res[6], res[7]);
  answer(3, text, res[4] == 1 && res[5] == 5 && res[6] == 9 && res[7] == 13);

  run("i=4", ex4, 1, &h16, (const char *[]){"P('i')"}, res, shape);
  int holder = -1;
  for (int d = 0; d < 4; d++)
    if (res[d * 4] == 0.0f)
      holder = d;
  snprintf(text, sizeof text, "device %d", holder);
  answer(4, text, holder == 3);

  static const float zeros[16 * 12];
  shmap_array *a, *b;
  check(shmap_array_from_host(&a, SHMAP_F32, 2, (int64_t[]){8, 16}, zeros),
        "A");
  check(shmap_array_from_host(&b, SHMAP_F32, 2, (int64_t[]){16, 12}, zeros),
        "B");
  run("x=4", ex5, 2, (shmap_array *[]){a, b},
      (const char *[]){"P(None, 'x')", "P('x', None)"}, res, shape);
  snprintf(text, sizeof text, "f32[%lld,%lld]", (long long)shape[0][0],
           (long long)shape[0][1]);
  answer(5, text, shape[0][0] == 2 && shape[0][1] == 12);

  shmap_array *w;
  check(shmap_array_from_host(&w, SHMAP_F32, 2, (int64_t[]){8, 8}, zeros),
        "W");
  run("data=4", ex6, 1, &w, (const char *[]){"P('data', None)"}, res, shape);
  snprintf(text, sizeof text, "%lld kept, %lld after the all_gather",
           (long long)shape[0][0], (long long)shape[0][1]);
  answer(6, text, shape[0][0] == 16 && shape[0][1] == 64);

  exercise7();

  shmap_array_destroy(a);
  shmap_array_destroy(b);
  shmap_array_destroy(w);
  shmap_array_destroy(h64);
  shmap_array_destroy(h16);
  if (bad) {
    fprintf(stderr, "21_exercises: %d answers disagree with the runs\n", bad);
    return 1;
  }
  return 0;
}
