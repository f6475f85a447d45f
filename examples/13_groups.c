/* SPDX-License-Identifier: MIT */
/*
 * 13_groups.c - collectives within groups of an axis (JAX's
 * axis_index_groups) and pbroadcast.
 *
 * Eight devices on one axis "i" form two pipelines of four: devices
 * {0, 2, 4, 6} and {1, 3, 5, 7}.  Each device contributes its number; a
 * psum within the groups gives 12 on the even devices and 16 on the odd
 * ones, and an all_gather within the groups lists each group's members in
 * the order the group names them.  Then device 5 broadcasts a value to
 * every device with pbroadcast.  The program checks every result and
 * exits non-zero on any difference.
 */
#include <shmap.h>

#include <stdio.h>

#define N 8

static int body(shmap_ctx *ctx, void *arg)
{
  int *bad = arg;
  int me = shmap_axis_index(ctx, "i");
  static const int ranks[] = {0, 2, 4, 6, 1, 3, 5, 7};
  shmap_groups groups = {2, 4, ranks};
  int32_t v = me;
  shmap_block x = {&v, SHMAP_I32, 1, {1}};
  shmap_block *gathered = NULL;
  int rc;
  if ((rc = shmap_all_gather_groups(ctx, &x, "i", &groups, 0, 1, &gathered)) ||
      (rc = shmap_psum_groups(ctx, &x, "i", &groups)))
    return rc;
  int want = me % 2 ? 16 : 12;
  const int32_t *g = gathered->data;
  for (int k = 0; k < 4; k++)
    bad[me] |= g[k] != ranks[(me % 2) * 4 + k];
  bad[me] |= v != want;
  /* Device 5's value reaches everyone. */
  double w = me == 5 ? 2.5 : -1.0;
  shmap_block y = {&w, SHMAP_F64, 0, {0}};
  if ((rc = shmap_pbroadcast(ctx, &y, "i", 5)))
    return rc;
  bad[me] |= w != 2.5;
  return 0;
}

int main(void)
{
  int bad[N] = {0};
  shmap_mesh *mesh = NULL;
  int rc = shmap_mesh_create(&mesh, "i=8");
  if (!rc)
    rc = shmap_map(mesh, body, bad, 0, NULL, NULL, 0, NULL, NULL);
  shmap_mesh_destroy(mesh);
  if (rc) {
    fprintf(stderr, "13_groups: %s: %s\n", shmap_strerror(rc), shmap_errmsg());
    return 1;
  }
  int any = 0;
  for (int d = 0; d < N; d++)
    any |= bad[d];
  printf("13_groups: psum and all_gather within two groups of four, and "
         "pbroadcast from device 5: %s\n", any ? "WRONG" : "as expected");
  return any;
}
