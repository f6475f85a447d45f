/* SPDX-License-Identifier: MIT */
/*
 * 19_collective_pictures.c - libshmap tutorial: every collective as a
 * picture of each device's block before and after it.
 *
 * What this example teaches
 *   On the mesh i=4, x = [0, 1, ..., 15] is split P('i'): device d holds
 *   x[4d : 4d+4].  Each collective runs once in a body of its own; the
 *   body's result is output 0, assembled P('i'), so the output's block of
 *   device d is exactly what d held after the collective.  The program
 *   checks every output against a serial computation, prints both
 *   states as text, and writes one SVG per collective (BEFORE above,
 *   AFTER below, drawn by shmap_array_visualize_svg with the values) into
 *   the directory given as its argument (default "collective-pictures").
 *
 *   Under mpirun every process runs the maps and checks the results
 *   (shmap_array_to_host gives each the whole output); process 0 alone
 *   prints and draws, and a block another process holds shows in its
 *   pictures without values.
 */
#include <shmap.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define D 4      /* devices along i */
#define B 4      /* elements per block of x */
#define N (D * B)

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "19_collective_pictures: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

/* [tutorial:psum] */
static int body_psum(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *y = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  if (!y)
    return shmap_fail(ctx, "shmap_out_copy failed");
  return shmap_psum(ctx, y, "i"); /* every block becomes the sum of all */
}
/* [end] */

static int body_pmean(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *y = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  if (!y)
    return shmap_fail(ctx, "shmap_out_copy failed");
  return shmap_pmean(ctx, y, "i");
}

static int body_pmax(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *y = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  if (!y)
    return shmap_fail(ctx, "shmap_out_copy failed");
  return shmap_pmax(ctx, y, "i");
}

static int body_pmin(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *y = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  if (!y)
    return shmap_fail(ctx, "shmap_out_copy failed");
  return shmap_pmin(ctx, y, "i");
}

/* [tutorial:all_gather] */
static int body_all_gather(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *y;
  /* tiled: the four blocks of 4 are concatenated into one of 16 */
  int rc = shmap_all_gather(ctx, shmap_in(ctx, 0), "i", 0, 1, &y);
  return rc < 0 ? rc : shmap_out_set(ctx, 0, y);
}
/* [end] */

/* [tutorial:psum_scatter] */
static int body_psum_scatter(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *y;
  /* the sum of the four blocks, cut in four: device d keeps piece d */
  int rc = shmap_psum_scatter(ctx, shmap_in(ctx, 0), "i", 0, 1, &y);
  return rc < 0 ? rc : shmap_out_set(ctx, 0, y);
}
/* [end] */

/* [tutorial:all_to_all] */
static int body_all_to_all(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *y;
  /* piece k of every block goes to device k, in the senders' order */
  int rc = shmap_all_to_all(ctx, shmap_in(ctx, 0), "i", 0, 0, 1, &y);
  return rc < 0 ? rc : shmap_out_set(ctx, 0, y);
}
/* [end] */

/* [tutorial:ppermute] */
static int body_ppermute(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  static const int ring[D][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  shmap_block *y = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  if (!y)
    return shmap_fail(ctx, "shmap_out_copy failed");
  return shmap_ppermute(ctx, y, "i", D, ring); /* each block one step on */
}
/* [end] */

/* [tutorial:pbroadcast] */
static int body_pbroadcast(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *y = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  if (!y)
    return shmap_fail(ctx, "shmap_out_copy failed");
  return shmap_pbroadcast(ctx, y, "i", 0); /* everyone gets rank 0's block */
}
/* [end] */

/* The serial reference: what output `name` must hold, from x. */
static int64_t reference(const char *name, const float *x, float *want)
{
  if (!strcmp(name, "all_gather")) {
    for (int d = 0; d < D; d++)
      memcpy(want + d * N, x, sizeof(float) * N);
    return D * N;
  }
  if (!strcmp(name, "psum_scatter")) {
    for (int d = 0; d < D; d++) {
      want[d] = 0;
      for (int k = 0; k < D; k++)
        want[d] += x[k * B + d];
    }
    return D;
  }
  for (int d = 0; d < D; d++)
    for (int e = 0; e < B; e++) {
      float s = 0, mx = x[e], mn = x[e];
      for (int k = 0; k < D; k++) {
        s += x[k * B + e];
        mx = x[k * B + e] > mx ? x[k * B + e] : mx;
        mn = x[k * B + e] < mn ? x[k * B + e] : mn;
      }
      float *w = &want[d * B + e];
      if (!strcmp(name, "psum"))
        *w = s;
      else if (!strcmp(name, "pmean"))
        *w = s / D;
      else if (!strcmp(name, "pmax"))
        *w = mx;
      else if (!strcmp(name, "pmin"))
        *w = mn;
      else if (!strcmp(name, "all_to_all"))
        *w = x[e * B + d];
      else if (!strcmp(name, "ppermute"))
        *w = x[((d + D - 1) % D) * B + e];
      else /* pbroadcast */
        *w = x[e];
    }
  return N;
}

/* Each device's block of a P('i') array on one line: "[0 1 2 3] [...]". */
static void print_blocks(const char *label, const float *v, int64_t n)
{
  printf("  %-6s", label);
  for (int64_t k = 0; k < n; k++)
    printf("%s%g%s", k % (n / D) ? " " : " [", v[k],
           (k + 1) % (n / D) ? "" : "]");
  printf("\n");
}

static int picture(shmap_mesh *mesh, shmap_array *x, const float *xv,
                   const char *name, shmap_body_fn body, const char *dir)
{
  /* [tutorial:map] */
  shmap_array *y = NULL;
  check(shmap_map(mesh, body, NULL, 1, &x, (const char *[]){"P('i')"}, 1, &y,
                  (const char *[]){"P('i')"}),
        name);
  /* [end] */
  static float got[D * N], want[D * N];
  int64_t n = reference(name, xv, want);
  int bad = shmap_array_numel(y) != n;
  if (!bad) {
    check(shmap_array_to_host(y, got), "shmap_array_to_host");
    bad = memcmp(got, want, sizeof(float) * (size_t)n) != 0;
  }
  if (bad)
    fprintf(stderr, "19_collective_pictures: %s gave a wrong result\n", name);
  if (shmap_process_rank() != 0) {
    shmap_array_destroy(y);
    return bad;
  }
  printf("%s over i\n", name);
  print_blocks("before", xv, N);
  print_blocks("after", bad ? want : got, n);
  char path[512], after[64];
  snprintf(path, sizeof path, "%s/%s.svg", dir, name);
  snprintf(after, sizeof after, "AFTER %s over i", name);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "19_collective_pictures: %s: %s\n", path, strerror(errno));
    exit(1);
  }
  /* [tutorial:picture] */
  const shmap_array *states[2] = {x, y};
  const char *captions[2] = {"BEFORE", after};
  check(shmap_array_visualize_svg(states, captions, 2, SHMAP_SVG_VALUES, f),
        "shmap_array_visualize_svg");
  /* [end] */
  if (fclose(f) != 0) {
    fprintf(stderr, "19_collective_pictures: %s: %s\n", path, strerror(errno));
    exit(1);
  }
  shmap_array_destroy(y);
  return bad;
}

int main(int argc, char **argv)
{
  const char *dir = argc > 1 ? argv[1] : "collective-pictures";
  if (shmap_process_rank() == 0 && mkdir(dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "19_collective_pictures: %s: %s\n", dir, strerror(errno));
    return 1;
  }
  static const struct {
    const char *name;
    shmap_body_fn body;
  } colls[] = {{"psum", body_psum},
               {"pmean", body_pmean},
               {"pmax", body_pmax},
               {"pmin", body_pmin},
               {"all_gather", body_all_gather},
               {"psum_scatter", body_psum_scatter},
               {"all_to_all", body_all_to_all},
               {"ppermute", body_ppermute},
               {"pbroadcast", body_pbroadcast}};
  float xv[N];
  for (int k = 0; k < N; k++)
    xv[k] = (float)k;
  /* [tutorial:mesh] */
  shmap_mesh *mesh;
  check(shmap_mesh_create(&mesh, "i=4"), "shmap_mesh_create");
  shmap_array *x;
  check(shmap_array_from_host_sharded(&x, mesh, "P('i')", SHMAP_F32, 1,
                                      (const int64_t[]){N}, xv),
        "shmap_array_from_host_sharded");
  /* [end] */
  int bad = 0;
  for (size_t c = 0; c < sizeof colls / sizeof colls[0]; c++)
    bad += picture(mesh, x, xv, colls[c].name, colls[c].body, dir);
  shmap_array_destroy(x);
  shmap_mesh_destroy(mesh);
  if (bad) {
    fprintf(stderr, "19_collective_pictures: %d collectives wrong\n", bad);
    return 1;
  }
  if (shmap_process_rank() == 0)
    printf("19_collective_pictures: %zu pictures in %s/, every result checks "
           "out\n", sizeof colls / sizeof colls[0], dir);
  return 0;
}
