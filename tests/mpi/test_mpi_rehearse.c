/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_rehearse.c - rehearsed maps with the devices spread over the
 * processes of an MPI job: process 0 prints what the reports predict
 * (every device's time, compute, exposed communication and peak memory,
 * the axes, overflows and notes; not the times measured here), and
 * tests/test_rehearse_mpi.sh checks that 1, 2 and 4 processes print the
 * same.  A plain program: Check would fork after MPI_Init.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shmap.h>

enum { K_PSUM, K_OVERLAP, K_SHIFT2, K_GATHER, K_TWO_AXES, NKINDS };

static int kernel(shmap_ctx *ctx, void *arg)
{
  int kind = *(int *)arg;
  int64_t shape[1] = {1 << 18};
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, shape), *y = NULL;
  if (!x)
    return -1;
  int pairs[4][2];
  for (int r = 0; r < 4; r++)
    pairs[r][0] = r, pairs[r][1] = (r + 2) % 4;
  shmap_request *req;
  shmap_cost(ctx, 1e9, 1e8);
  switch (kind) {
  case K_PSUM:
    return shmap_psum(ctx, x, "j");
  case K_OVERLAP:
    if (shmap_psum_start(ctx, x, "j", &req))
      return -1;
    shmap_cost(ctx, 2e10, 0);
    return shmap_wait(ctx, &req);
  case K_SHIFT2:
    return shmap_ppermute(ctx, x, "j", 4, pairs);
  case K_GATHER:
    return shmap_all_gather(ctx, x, "j", 0, 1, &y);
  default:
    return shmap_psum(ctx, x, "('i', 'j')");
  }
}

static void print_report(const char *fabric, int kind)
{
  char buf[16384];
  shmap_rehearse_report(buf, sizeof buf);
  json_error_t e;
  json_t *j = json_loads(buf, 0, &e);
  if (!j) {
    printf("no report\n");
    return;
  }
  printf("%s kind %d: predicted %.9g s\n", fabric, kind,
         json_number_value(json_object_get(j, "predicted_s")));
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(j, "devices"), i, v)
      printf("  %s: %.9g %.9g %.9g %lld %s\n",
             json_string_value(json_object_get(v, "device")),
             json_number_value(json_object_get(v, "predicted_s")),
             json_number_value(json_object_get(v, "compute_s")),
             json_number_value(json_object_get(v, "exposed_comm_s")),
             (long long)json_integer_value(json_object_get(v, "peak_bytes")),
             json_string_value(json_object_get(v, "compute_from")));
  json_array_foreach(json_object_get(j, "axes"), i, v)
      printf("  axes %s on %s: %lld calls, %.9g bytes, %.9g s exposed\n",
             json_string_value(json_object_get(v, "axes")),
             json_string_value(json_object_get(v, "level")),
             (long long)json_integer_value(json_object_get(v, "calls")),
             json_number_value(json_object_get(v, "bytes")),
             json_number_value(json_object_get(v, "exposed_s")));
  json_array_foreach(json_object_get(j, "memory_overflow"), i, v)
      printf("  overflow: %s\n", json_string_value(v));
  json_array_foreach(json_object_get(j, "notes"), i, v)
      printf("  note: %s\n", json_string_value(v));
  json_decref(j);
}

int main(void)
{
  shmap_mesh *m;
  if (shmap_mesh_create(&m, "i=2, j=4") != 0) {
    fprintf(stderr, "mesh: %s\n", shmap_errmsg());
    return 1;
  }
  int root = shmap_process_rank() <= 0;
  const char *fabrics[] = {"tpu-v5e-16x16", "h100-multinode"};
  for (int f = 0; f < 2; f++)
    for (int kind = 0; kind < NKINDS; kind++) {
      shmap_map_opts o = {.rehearse = fabrics[f]};
      if (shmap_map_ex(m, kernel, &kind, 0, NULL, NULL, 0, NULL, NULL, &o)) {
        fprintf(stderr, "map: %s\n", shmap_errmsg());
        return 1;
      }
      if (root)
        print_report(fabrics[f], kind);
    }
  shmap_mesh_destroy(m);
  return 0;
}
