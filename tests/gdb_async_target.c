/* SPDX-License-Identifier: MIT */
/* gdb_async_target.c - a program for tests/test_gdb_async.sh: device 0
 * stops in its body with a started ppermute open while device 1 has not
 * joined it yet. */
#include <shmap.h>

#include <stdio.h>
#include <time.h>

static const int swap[2][2] = {{0, 1}, {1, 0}};

static int body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *x = shmap_in(ctx, 0);
  shmap_block *y;
  shmap_request *req;
  if (shmap_ctx_device(ctx) == 1) {
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
  }
  int rc = shmap_ppermute_start(ctx, x, "i", 2, swap, &y, &req);
  if (rc)
    return rc;
  int dev = shmap_ctx_device(ctx); /* gdb-test: break here */
  (void)dev;
  return shmap_wait(ctx, &req);
}

int main(void)
{
  shmap_mesh *mesh;
  shmap_array *x;
  float host[4] = {1, 2, 3, 4};
  if (shmap_mesh_create(&mesh, "i=2") ||
      shmap_array_from_host(&x, SHMAP_F32, 1, (int64_t[]){4}, host) ||
      shmap_map(mesh, body, NULL, 1, &x, (const char *[]){"P('i')"}, 0, NULL,
                NULL)) {
    fprintf(stderr, "%s\n", shmap_errmsg());
    return 1;
  }
  shmap_array_destroy(x);
  shmap_mesh_destroy(mesh);
  printf("gdb_async_target: ok\n");
  return 0;
}
