/* SPDX-License-Identifier: MIT */
/*
 * 01_hello.c - libshmap tutorial, step 1: a mesh, a spec, a body.
 *
 * What this example teaches
 *   - A mesh is a named grid of simulated devices.  "i=4, j=2" has 8 devices,
 *     numbered row-major: device (i, j) is number i*2 + j.
 *   - A partition spec says how a global array is cut into per-device
 *     blocks.  P('i','j') cuts the rows over axis i and the columns over
 *     axis j, so an 8x6 array becomes one 2x3 block per device.
 *   - shmap_map() runs the body once per device, all devices at the same
 *     time (one thread each).  Inside the body a device can ask who it is:
 *     shmap_ctx_device() gives its number, shmap_axis_index() its
 *     coordinate along one axis, and shmap_mesh_device_coords() all of its
 *     coordinates at once.
 *   - The out spec puts the blocks the bodies return back together.  With
 *     the same spec as the input, returning each block unchanged rebuilds
 *     the input exactly: that is what this example checks.
 *
 * The devices print concurrently, so their lines come out in a different
 * order from run to run.  Each device prints its whole report with one
 * printf() call, which keeps a device's line in one piece.
 *
 * Under mpirun each process runs, prints and checks only its own devices,
 * and process 0 prints the lines about the whole mesh.
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 8
#define COLS 6
#define NDEV 8 /* devices in the mesh i=4, j=2 */

/* What each device saw, kept so main() can check it after the map. */
struct seen {
  int device;
  int index_i, index_j; /* shmap_axis_index(ctx, "i") and (ctx, "j") */
  int coords[2];        /* shmap_mesh_device_coords() */
  int64_t block_rows, block_cols;
};

struct hello_arg {
  struct seen seen[NDEV]; /* one slot per device: no two threads share one */
};

/* Stop with a clear message when a library call outside a body fails. */
static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "01_hello: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

/* The body: runs once on every device. */
static int hello(shmap_ctx *ctx, void *arg)
{
  struct hello_arg *h = arg;
  const shmap_mesh *mesh = shmap_ctx_mesh(ctx);
  int dev = shmap_ctx_device(ctx);

  /* Two ways to learn where this device sits in the mesh. */
  int i = shmap_axis_index(ctx, "i");
  int j = shmap_axis_index(ctx, "j");
  int coords[SHMAP_MAX_AXES];
  int rc = shmap_mesh_device_coords(mesh, dev, coords);
  if (i < 0 || j < 0 || rc < 0)
    return shmap_fail(ctx, "could not read the device's coordinates");

  /* This device's block of input 0 (read-only). */
  const shmap_block *x = shmap_in(ctx, 0);
  if (x == NULL)
    return shmap_fail(ctx, "shmap_in(0) returned NULL");

  char line[256];
  int n = snprintf(line, sizeof line,
                   "device %d: axis_index i=%d j=%d, coords (%d, %d), "
                   "block %s[%lld,%lld] = [",
                   dev, i, j, coords[0], coords[1],
                   shmap_dtype_name(x->dtype), (long long)x->shape[0],
                   (long long)x->shape[1]);
  const int32_t *v = x->data;
  for (int64_t r = 0; r < x->shape[0]; r++) {
    n += snprintf(line + n, sizeof line - (size_t)n, "%s[", r ? " " : "");
    for (int64_t c = 0; c < x->shape[1]; c++)
      n += snprintf(line + n, sizeof line - (size_t)n, "%s%2d", c ? " " : "",
                    (int)v[r * x->shape[1] + c]);
    n += snprintf(line + n, sizeof line - (size_t)n, "]");
  }
  printf("%s]\n", line);

  h->seen[dev] = (struct seen){dev, i, j, {coords[0], coords[1]},
                               x->shape[0], x->shape[1]};

  /* Return the block unchanged as output 0. */
  return shmap_out_copy(ctx, 0, x) != NULL ? 0 : shmap_fail(ctx,
                                                  "shmap_out_copy failed");
}

int main(void)
{
  shmap_mesh *mesh;
  check(shmap_mesh_create(&mesh, "i=4, j=2"), "shmap_mesh_create");
  int rank = shmap_process_rank(); /* 0 without mpirun */

  if (rank == 0) {
    printf("mesh:");
    for (int a = 0; a < shmap_mesh_naxes(mesh); a++)
      printf(" %s=%d", shmap_mesh_axis_name(mesh, a),
             shmap_mesh_axis_size(mesh, a));
    printf(" (%d devices)\n", shmap_mesh_ndevices(mesh));
  }

  /* x = arange(48).reshape(8, 6) */
  int32_t host[ROWS * COLS];
  for (int k = 0; k < ROWS * COLS; k++)
    host[k] = k;
  shmap_array *x, *y = NULL;
  check(shmap_array_from_host(&x, SHMAP_I32, 2, (int64_t[]){ROWS, COLS}, host),
        "shmap_array_from_host");

  if (rank == 0)
    printf("x: i32[%d,%d] in P('i','j'), out P('i','j')\n", ROWS, COLS);
  fflush(stdout); /* so the devices' lines follow, not precede, this one */

  struct hello_arg h;
  memset(&h, 0, sizeof h);
  check(shmap_map(mesh, hello, &h, 1, (shmap_array *[]){x},
                  (const char *[]){"P('i','j')"}, 1, &y,
                  (const char *[]){"P('i','j')"}),
        "shmap_map");

  /* Check 1: what every device saw agrees with the mesh's numbering.  A
   * body runs in its device's process, so each process checks its own. */
  int errors = 0;
  for (int d = 0; d < NDEV; d++) {
    if (shmap_mesh_device_process(mesh, d) != rank)
      continue;
    const struct seen *s = &h.seen[d];
    int want_i = d / 2, want_j = d % 2;
    if (s->device != d || s->index_i != want_i || s->index_j != want_j ||
        s->coords[0] != want_i || s->coords[1] != want_j ||
        s->block_rows != ROWS / 4 || s->block_cols != COLS / 2) {
      fprintf(stderr,
              "01_hello: device %d saw number %d, axis_index (%d, %d), "
              "coords (%d, %d), block [%lld,%lld]; expected (%d, %d) and "
              "block [%d,%d]\n",
              d, s->device, s->index_i, s->index_j, s->coords[0],
              s->coords[1], (long long)s->block_rows,
              (long long)s->block_cols, want_i, want_j, ROWS / 4, COLS / 2);
      errors++;
    }
  }

  /* Check 2: the assembled output is the input, element for element. */
  const int64_t *shape = shmap_array_shape(y);
  if (shmap_array_rank(y) != 2 || shape[0] != ROWS || shape[1] != COLS) {
    fprintf(stderr, "01_hello: output has the wrong shape\n");
    return 1;
  }
  int32_t back[ROWS * COLS];
  check(shmap_array_to_host(y, back), "shmap_array_to_host");
  for (int k = 0; k < ROWS * COLS; k++) {
    if (back[k] != host[k]) {
      fprintf(stderr, "01_hello: output[%d][%d] = %d, input has %d\n",
              k / COLS, k % COLS, (int)back[k], (int)host[k]);
      errors++;
      break;
    }
  }

  shmap_array_destroy(y);
  shmap_array_destroy(x);
  shmap_mesh_destroy(mesh);
  if (errors) {
    fprintf(stderr, "01_hello: FAILED\n");
    return 1;
  }
  if (rank == 0)
    printf("output i32[%d,%d] equals the input: ok\n", ROWS, COLS);
  return 0;
}
