/* SPDX-License-Identifier: MIT */
/*
 * trace_prog.c - a run whose trace tests/check-pictures.py draws with
 * shmap-trace-timeline and reads back from a browser's screenshot.
 *
 * Two maps on the mesh i=4.  Each body calls psum, all_gather, and an
 * asynchronous ppermute, and sleeps 3 ms between them, so that on a
 * timeline a thousand pixels wide every bar stands apart from the next.
 * The program records its own trace (shmap_trace_start) to the path given
 * as its argument and prints the calls each body made, one line per map,
 * for the checker to compare with the trace and the picture.
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void pause_ms(int ms)
{
  struct timespec t = {0, ms * 1000000L};
  while (nanosleep(&t, &t) != 0)
    ;
}

static int body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  static const int ring[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  shmap_block *y = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  if (!y)
    return shmap_fail(ctx, "shmap_out_copy failed");
  int rc = shmap_psum(ctx, y, "i");
  if (rc < 0)
    return rc;
  pause_ms(3);
  shmap_block *g, *p;
  if ((rc = shmap_all_gather(ctx, y, "i", 0, 1, &g)) < 0)
    return rc;
  pause_ms(3);
  shmap_request *req;
  if ((rc = shmap_ppermute_start(ctx, y, "i", 4, ring, &p, &req)) < 0)
    return rc;
  pause_ms(3);
  return shmap_wait(ctx, &req);
}

int main(int argc, char **argv)
{
  if (argc != 2) {
    fprintf(stderr, "usage: trace_prog TRACE.json\n");
    return 2;
  }
  float v[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  shmap_mesh *mesh;
  shmap_array *x, *y;
  if (shmap_trace_start(argv[1]) < 0 ||
      shmap_mesh_create(&mesh, "i=4") < 0 ||
      shmap_array_from_host_sharded(&x, mesh, "P('i')", SHMAP_F32, 1,
                                    (int64_t[]){8}, v) < 0) {
    fprintf(stderr, "trace_prog: %s\n", shmap_errmsg());
    return 1;
  }
  for (int m = 0; m < 2; m++) {
    pause_ms(3);
    if (shmap_map(mesh, body, NULL, 1, &x, (const char *[]){"P('i')"}, 1, &y,
                  (const char *[]){"P('i')"}) < 0) {
      fprintf(stderr, "trace_prog: %s\n", shmap_errmsg());
      return 1;
    }
    shmap_array_destroy(y);
    printf("map %d: psum all_gather ppermute(async)\n", m);
  }
  shmap_array_destroy(x);
  shmap_mesh_destroy(mesh);
  if (shmap_trace_stop() < 0) {
    fprintf(stderr, "trace_prog: %s\n", shmap_errmsg());
    return 1;
  }
  return 0;
}
