/* SPDX-License-Identifier: MIT */
/*
 * gdb_explore_target.c - a program with an order-dependent bug, for the
 * gdb session of shmap-debugging(7) ("Hunting an interleaving") and
 * tests/test_gdb_explore.sh.  Four devices pass a value through host
 * memory they share with no collective between the write and the read:
 * after a psum each device writes its slot again and reads its left
 * neighbour's, which holds the new value only if the neighbour left the
 * psum first.  Whether it passes depends on the order in which the
 * devices leave the psum; SHMAP_EXPLORE finds an order that breaks it,
 * and SHMAP_REPLAY replays that order.
 */
#include <shmap.h>

#include <stdio.h>

static int slot[4];

static int body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int r = shmap_axis_index(ctx, "i");
  int64_t one = 1;
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, &one);
  if (!x)
    return shmap_fail(ctx, "no block");
  ((float *)x->data)[0] = (float)r;
  slot[r] = r;
  int rc = shmap_psum(ctx, x, "i");
  if (rc)
    return rc;
  slot[r] = 10 + r;
  if (r == 0)
    return 0;
  int seen = slot[r - 1]; /* the bug: no collective since r - 1 wrote it */
  if (seen != 10 + r - 1)
    return shmap_fail(ctx, "read %d from device %d's slot, expected %d",
                      seen, r - 1, 10 + r - 1);
  return 0;
}

int main(void)
{
  shmap_mesh *mesh;
  if (shmap_mesh_create(&mesh, "i=4") != 0) {
    fprintf(stderr, "%s\n", shmap_errmsg());
    return 2;
  }
  int rc = shmap_map(mesh, body, NULL, 0, NULL, NULL, 0, NULL, NULL);
  if (rc)
    printf("gdb_explore_target: %s\n", shmap_errmsg());
  else
    printf("gdb_explore_target: ok\n");
  shmap_mesh_destroy(mesh);
  return rc ? 1 : 0;
}
