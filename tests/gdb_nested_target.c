/* SPDX-License-Identifier: MIT */
/*
 * gdb_nested_target.c - the program tests/test_gdb_nested.sh debugs: on the
 * mesh i=2, j=2, k=2, a map over 'i' whose body starts a map over 'j'; the
 * inner body of device 6 (i=1, j=1, k=0) is where gdb stops.  Every inner
 * body then adds over 'j', so the others wait in that psum meanwhile, and
 * device 1 (k=1) is a replica of device 0 all along (the body runs at j=0,
 * k=0 only, the inner body at k=0 only).
 */
#include <shmap.h>

#include <stdio.h>

#pragma GCC optimize("O0")

static int inner(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  double v = shmap_axis_index(ctx, "j");
  shmap_block b = {&v, SHMAP_F64, 0, {0}};
  int dev = shmap_ctx_device(ctx);
  (void)dev; /* gdb-test: break here */
  return shmap_psum(ctx, &b, "j");
}

static int outer(shmap_ctx *ctx, void *arg)
{
  /* A psum over 'i' lets every body instance start (in fiber mode too). */
  double v = 1;
  shmap_block b = {&v, SHMAP_F64, 0, {0}};
  int rc = shmap_psum(ctx, &b, "i");
  if (rc)
    return rc;
  shmap_map_opts o = {.manual_axes = "j"};
  return shmap_map_nested(ctx, inner, arg, 0, NULL, NULL, 0, NULL, NULL, &o);
}

int main(void)
{
  shmap_mesh *mesh;
  if (shmap_mesh_create(&mesh, "i=2, j=2, k=2"))
    return 1;
  shmap_map_opts o = {.manual_axes = "i"};
  int rc = shmap_map_ex(mesh, outer, NULL, 0, NULL, NULL, 0, NULL, NULL, &o);
  if (rc)
    fprintf(stderr, "gdb_nested_target: %s\n", shmap_errmsg());
  shmap_mesh_destroy(mesh);
  return rc != 0;
}
