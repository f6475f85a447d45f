/* SPDX-License-Identifier: MIT */
/*
 * gdb_crash_target.c - the program tests/test_gdb_autoload.sh runs under
 * gdb with the extension auto-loaded: device 1 of the mesh i=2 writes
 * to an unmapped address in its body (crash_here), so that a batch
 * "run" followed by "bt" stops at the crash and shows it.
 *
 * Built with -O0 -g (the pragma below keeps -O0 even when CFLAGS says -O2)
 * so that the frame of crash_here is there to see.
 */
#if defined(__clang__)
#pragma clang optimize off
#elif defined(__GNUC__)
#pragma GCC optimize("O0")
#endif

#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>

/* Volatile, so that the compiler keeps the write through it.  Not NULL:
 * a build with -fsanitize=undefined reports a store through NULL and
 * exits before it faults; page 0 is unmapped all the same. */
static int *volatile nowhere = (int *)64;

static void crash_here(int dev)
{
  *nowhere = dev; /* gdb-crash: the write that faults */
}

static int body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int dev = shmap_ctx_device(ctx);
  if (dev == 1)
    crash_here(dev);
  return 0;
}

int main(void)
{
  shmap_mesh *mesh;
  if (shmap_mesh_create(&mesh, "i=2") < 0) {
    fprintf(stderr, "gdb_crash_target: %s\n", shmap_errmsg());
    return 1;
  }
  int rc = shmap_map(mesh, body, NULL, 0, NULL, NULL, 0, NULL, NULL);
  printf("gdb_crash_target: map returned %d\n", rc);
  shmap_mesh_destroy(mesh);
  return 0;
}
