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
 *
 * Each device returns its verdict as its element of an output array
 * P('i'): under mpirun a body runs only in the process that owns the
 * device, and shmap_array_to_host() brings every verdict to every process.
 */
#include <shmap.h>

#include <stdio.h>

#define N 8

/* Output: i32[1], nonzero when a result of this device is wrong. */
static int body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int me = shmap_axis_index(ctx, "i");
  static const int ranks[] = {0, 2, 4, 6, 1, 3, 5, 7};
  shmap_groups groups = {2, 4, ranks};
  int32_t v = me;
  shmap_block x = {&v, SHMAP_I32, 1, {1}};
  shmap_block *gathered = NULL;
  shmap_block *verdict = shmap_out(ctx, 0, SHMAP_I32, 1, (int64_t[]){1});
  if (verdict == NULL)
    return shmap_fail(ctx, "shmap_out: %s", shmap_errmsg());
  int32_t *wrong = verdict->data;
  int rc;
  if ((rc = shmap_all_gather_groups(ctx, &x, "i", &groups, 0, 1, &gathered)) ||
      (rc = shmap_psum_groups(ctx, &x, "i", &groups)))
    return rc;
  int want = me % 2 ? 16 : 12;
  const int32_t *g = gathered->data;
  for (int k = 0; k < 4; k++)
    *wrong |= g[k] != ranks[(me % 2) * 4 + k];
  *wrong |= v != want;
  /* Device 5's value reaches everyone. */
  double w = me == 5 ? 2.5 : -1.0;
  shmap_block y = {&w, SHMAP_F64, 0, {0}};
  if ((rc = shmap_pbroadcast(ctx, &y, "i", 5)))
    return rc;
  *wrong |= w != 2.5;
  return 0;
}

int main(void)
{
  int32_t bad[N];
  shmap_mesh *mesh = NULL;
  shmap_array *out = NULL;
  const char *out_spec = "P('i')";
  int rc = shmap_mesh_create(&mesh, "i=8");
  if (!rc)
    rc = shmap_map(mesh, body, NULL, 0, NULL, NULL, 1, &out, &out_spec);
  if (!rc)
    rc = shmap_array_to_host(out, bad);
  shmap_array_destroy(out);
  shmap_mesh_destroy(mesh);
  if (rc) {
    fprintf(stderr, "13_groups: %s: %s\n", shmap_strerror(rc), shmap_errmsg());
    return 1;
  }
  int any = 0;
  for (int d = 0; d < N; d++)
    any |= bad[d];
  if (shmap_process_rank() == 0) /* under mpirun, one process prints */
    printf("13_groups: psum and all_gather within two groups of four, and "
           "pbroadcast from device 5: %s\n", any ? "WRONG" : "as expected");
  return any;
}
