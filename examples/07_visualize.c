/* SPDX-License-Identifier: MIT */
/*
 * 07_visualize.c - libshmap tutorial, step 7: sharded arrays and how to
 * see where their blocks live.
 *
 * What this example teaches
 *   A sharded array lives on a mesh: every device keeps its own block of
 *   it, cut by a partition spec, between maps (like a jax.Array).
 *   shmap_array_from_host_sharded() places host data straight into a
 *   sharding: each device copies its own block out of the host buffer.
 *
 *   shmap_array_visualize() draws which device holds which block, like
 *   jax.debug.visualize_array_sharding.  On the mesh i=2, j=2 the devices
 *   are numbered row-major, d = 2*i + j:  d0=(0,0) d1=(0,1) d2=(1,0)
 *   d3=(1,1).  For an 8x8 array:
 *
 *     P('i','j')    rows split over i, columns over j: a 2x2 grid of 4x4
 *                   blocks, one device each.
 *     P('j','i')    the same blocks, but rows follow j: d1 and d2 swap.
 *     P('i')        rows over i; j is not named, so the two devices along
 *                   j hold equal copies (a cell lists both: "d0 d1").
 *     P(None,'j')   columns over j, copies along i.
 *     P()           unsplit: every device holds the whole array.
 *     P(('i','j'))  rows over both axes as one group of 4, i major: the
 *                   block index of device (i,j) is 2*i + j.
 *
 *   A 1-d array on the mesh i=4 is drawn as one row of cells.
 *
 *   shmap_array_block() gives a device's block (a view, no copy) and its
 *   offset in the global array; shmap_array_spec() gives the spec in
 *   canonical JAX form.  The program checks, for each array, that every
 *   device's block is the slice of the source at that offset and that
 *   shmap_array_to_host() gives back the source; it exits non-zero on any
 *   mismatch.
 *
 *   Given a directory as its argument, the program also draws each array
 *   as an SVG picture there (sharding-1.svg, sharding-2.svg, ... in the
 *   order above) with shmap_array_visualize_svg(): the same grid, each
 *   block coloured by the devices holding it and labelled with them and
 *   its index ranges.
 *
 *   Under mpirun a process holds only the blocks of its own devices (the
 *   others' show NULL data), so each process checks those; process 0
 *   draws the pictures.
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "07_visualize: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

/* Every block of this process's devices equals the source at its offset,
 * and the whole array comes back unchanged.  Returns the number of
 * mismatches. */
static int verify(const shmap_array *a, const float *src)
{
  int bad = 0;
  int rank = shmap_array_rank(a);
  const int64_t *shape = shmap_array_shape(a);
  int64_t cols = rank == 2 ? shape[1] : 1;
  const shmap_mesh *mesh = shmap_array_mesh(a);
  for (int d = 0; d < shmap_mesh_ndevices(mesh); d++) {
    if (shmap_mesh_device_process(mesh, d) != shmap_process_rank())
      continue; /* held by another process */
    shmap_block b;
    int64_t off[2] = {0, 0};
    check(shmap_array_block(a, d, &b, off), "shmap_array_block");
    const float *v = b.data;
    int64_t brows = b.shape[0], bcols = rank == 2 ? b.shape[1] : 1;
    for (int64_t r = 0; r < brows; r++)
      for (int64_t c = 0; c < bcols; c++) {
        /* Global position: the block's offset plus the position inside. */
        int64_t g = rank == 2 ? (off[0] + r) * cols + off[1] + c : off[0] + r;
        if (v[r * bcols + c] != src[g])
          bad++;
      }
  }
  float *back = malloc(sizeof(float) * (size_t)shmap_array_numel(a));
  check(shmap_array_to_host(a, back), "shmap_array_to_host");
  if (memcmp(back, src, sizeof(float) * (size_t)shmap_array_numel(a)) != 0)
    bad++;
  free(back);
  return bad;
}

/* The directory for SVG pictures (NULL: none), and the pictures so far. */
static const char *svg_dir;
static int svg_count;

static void draw_svg(const shmap_array *a)
{
  char path[512];
  snprintf(path, sizeof path, "%s/sharding-%d.svg", svg_dir, ++svg_count);
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    exit(1);
  }
  const shmap_array *arrays[1] = {a};
  check(shmap_array_visualize_svg(arrays, NULL, 1, 0, f),
        "shmap_array_visualize_svg");
  if (fclose(f) != 0) {
    perror(path);
    exit(1);
  }
}

static int show(shmap_mesh *mesh, const char *spec, int rank,
                const int64_t shape[], const float *src)
{
  shmap_array *a;
  char canonical[128];
  check(shmap_array_from_host_sharded(&a, mesh, spec, SHMAP_F32, rank, shape,
                                      src),
        spec);
  check(shmap_array_spec(a, canonical, sizeof canonical), "shmap_array_spec");
  int first = shmap_process_rank() == 0;
  if (first) {
    printf("spec %s\n", canonical);
    check(shmap_array_visualize(a, stdout), "shmap_array_visualize");
    if (svg_dir)
      draw_svg(a);
  }
  int bad = verify(a, src);
  if (first || bad)
    printf("%s\n\n", bad ? "MISMATCH" : "blocks and to_host check out");
  shmap_array_destroy(a);
  return bad;
}

int main(int argc, char **argv)
{
  svg_dir = argc > 1 ? argv[1] : NULL;
  int bad = 0;
  float x[64], v[8];
  for (int e = 0; e < 64; e++)
    x[e] = (float)e; /* x[r][c] = 8r + c */
  for (int e = 0; e < 8; e++)
    v[e] = (float)(10 * e);

  shmap_mesh *mesh;
  check(shmap_mesh_create(&mesh, "i=2, j=2"), "shmap_mesh_create");
  const int64_t shape2[2] = {8, 8};
  static const char *const specs[] = {
      "P('i', 'j')", "P('j', 'i')", "P('i')", "P(None, 'j')", "P()",
      "P(('i', 'j'))"};
  for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++)
    bad += show(mesh, specs[k], 2, shape2, x);
  shmap_mesh_destroy(mesh);

  check(shmap_mesh_create(&mesh, "i=4"), "shmap_mesh_create");
  const int64_t shape1[1] = {8};
  bad += show(mesh, "P('i')", 1, shape1, v);
  bad += show(mesh, "P()", 1, shape1, v);
  shmap_mesh_destroy(mesh);

  if (bad) {
    fprintf(stderr, "07_visualize: %d mismatches\n", bad);
    return 1;
  }
  if (shmap_process_rank() == 0)
    printf("07_visualize: all arrays check out\n");
  return 0;
}
