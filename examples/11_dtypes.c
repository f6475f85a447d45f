/* SPDX-License-Identifier: MIT */
/*
 * 11_dtypes.c - reductions on the 16-bit floats and on masks.
 *
 * Four devices (mesh i=4) each hold a slice of a bf16 "gradient" and a
 * bool mask of which of their tokens are valid.  The body averages the
 * gradient over the devices with pmean (bf16 is summed and divided in f32
 * and rounded once), and counts the valid tokens per position with
 * psum_new, whose result is an i32 block (as in JAX, the sum of bools is
 * an integer).  The program checks both against a serial computation and
 * exits non-zero on any difference.  Under mpirun every process gets the
 * whole results from shmap_array_to_host and checks them; process 0
 * prints them.
 */
#include <shmap.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define P 4
#define N 8 /* elements per device */

static int body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  /* Inputs are read-only: pmean works in place, so it gets a copy (an
   * output block); psum_new reads the mask where it is. */
  shmap_block *grad = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  const shmap_block *mask = shmap_in(ctx, 1);
  shmap_block *count = NULL;
  int rc;
  if (!grad)
    return shmap_fail(ctx, "shmap_out_copy: %s", shmap_errmsg());
  if ((rc = shmap_pmean(ctx, grad, "i")) ||
      (rc = shmap_psum_new(ctx, mask, "i", &count)))
    return rc;
  return shmap_out_set(ctx, 1, count);
}

int main(void)
{
  uint16_t grad[P * N];
  unsigned char mask[P * N];
  for (int k = 0; k < P * N; k++) {
    grad[k] = shmap_f32_to_bf16((float)(k % 7) * 0.3f - 1.0f);
    mask[k] = (unsigned char)((k * 5 + k / 3) % 3 != 0);
  }
  shmap_mesh *mesh = NULL;
  shmap_array *in[2] = {NULL, NULL}, *out[2] = {NULL, NULL};
  const int64_t shape[1] = {P * N};
  int rc = shmap_mesh_create(&mesh, "i=4");
  if (!rc)
    rc = shmap_array_from_host(&in[0], SHMAP_BF16, 1, shape, grad);
  if (!rc)
    rc = shmap_array_from_host(&in[1], SHMAP_BOOL, 1, shape, mask);
  const char *in_specs[] = {"P('i')", "P('i')"};
  const char *out_specs[] = {"P()", "P()"};
  uint16_t mean[N];
  int32_t count[N];
  if (!rc)
    rc = shmap_map(mesh, body, NULL, 2, in, in_specs, 2, out, out_specs);
  if (!rc)
    rc = shmap_array_to_host(out[0], mean);
  if (!rc)
    rc = shmap_array_to_host(out[1], count);
  if (rc) {
    fprintf(stderr, "11_dtypes: %s: %s\n", shmap_strerror(rc), shmap_errmsg());
    return 1;
  }

  /* The serial computation: sum in f32 in device order, divide, round. */
  int bad = 0, first = shmap_process_rank() == 0;
  for (int e = 0; e < N; e++) {
    float acc = shmap_bf16_to_f32(grad[e]);
    int32_t c = mask[e] != 0;
    for (int d = 1; d < P; d++) {
      acc += shmap_bf16_to_f32(grad[d * N + e]);
      c += mask[d * N + e] != 0;
    }
    uint16_t want = shmap_f32_to_bf16(acc / (float)P);
    if (first)
      printf("position %d: mean %-10g valid tokens %d\n", e,
             (double)shmap_bf16_to_f32(mean[e]), count[e]);
    if (mean[e] != want || count[e] != c) {
      fprintf(stderr, "11_dtypes: position %d: got %g and %d, want %g and %d\n",
              e, (double)shmap_bf16_to_f32(mean[e]), count[e],
              (double)shmap_bf16_to_f32(want), c);
      bad++;
    }
  }
  if (first)
    printf("result dtypes: %s and %s\n",
           shmap_dtype_name(shmap_array_dtype(out[0])),
           shmap_dtype_name(shmap_array_dtype(out[1])));
  for (int k = 0; k < 2; k++) {
    shmap_array_destroy(in[k]);
    shmap_array_destroy(out[k]);
  }
  shmap_mesh_destroy(mesh);
  return bad ? 1 : 0;
}
