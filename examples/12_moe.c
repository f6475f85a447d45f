/* SPDX-License-Identifier: MIT */
/*
 * 12_moe.c - a mixture-of-experts layer with top-1 routing, moving tokens
 * to their experts and back with ragged_all_to_all.
 *
 * Four devices (mesh expert=4) each hold T tokens of width D and one
 * expert, a D x D weight matrix.  Each token goes to the expert its
 * router (a replicated D x E matrix) scores highest; the expert computes
 * relu(x W), and the result comes back scaled by the router's softmax
 * probability of that expert.  How many tokens a device sends to each
 * expert depends on the data, so the exchange is ragged:
 *
 *   1. route: score, pick the expert, sort the tokens by expert;
 *   2. all_gather the per-expert counts, so every device knows the whole
 *      count matrix C[sender][expert] and can place its rows in each
 *      expert's buffer (senders in rank order);
 *   3. ragged_all_to_all the tokens to the experts;
 *   4. each expert runs on the rows it received;
 *   5. ragged_all_to_all the results back (the same counts, transposed);
 *   6. unsort and scale by the gate.
 *
 * The program computes the same layer serially, token by token, with the
 * same arithmetic, and exits non-zero unless every element is bitwise
 * equal.  It runs unchanged under mpirun (the experts then live in
 * different processes), printing from process 0.
 */
#include <shmap.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E 4  /* experts = devices */
#define T 12 /* tokens per device */
#define D 6  /* token width */

/* Router weights, shared by every device (row-major D x E). */
static float router[D * E];

/* Score the token, pick the expert (the first of equal scores), and
 * return the softmax probability of that expert. */
static int route(const float *x, float *gate)
{
  float s[E], best = -INFINITY;
  int e = 0;
  for (int k = 0; k < E; k++) {
    s[k] = 0;
    for (int d = 0; d < D; d++)
      s[k] += x[d] * router[d * E + k];
    if (s[k] > best) {
      best = s[k];
      e = k;
    }
  }
  float z = 0;
  for (int k = 0; k < E; k++)
    z += expf(s[k] - best);
  *gate = 1.0f / z;
  return e;
}

/* y = relu(x W) for one token and one expert's D x D weights. */
static void expert(const float *w, const float *x, float *y)
{
  for (int j = 0; j < D; j++) {
    float a = 0;
    for (int d = 0; d < D; d++)
      a += x[d] * w[d * D + j];
    y[j] = a > 0 ? a : 0;
  }
}

static int body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *xb = shmap_in(ctx, 0); /* f32[T, D] */
  const shmap_block *wb = shmap_in(ctx, 1); /* f32[1, D, D] */
  const float *x = xb->data;
  int me = shmap_axis_index(ctx, "expert");
  int rc;

  /* 1. Route and sort the tokens by expert (stable). */
  int eid[T], order[T];
  float gate[T];
  int64_t count[E] = {0};
  for (int t = 0; t < T; t++) {
    eid[t] = route(x + t * D, &gate[t]);
    count[eid[t]]++;
  }
  int64_t start[E];
  for (int e = 0, at = 0; e < E; at += (int)count[e], e++)
    start[e] = at;
  shmap_block *sorted = shmap_block_alloc(ctx, SHMAP_F32, 2,
                                          (int64_t[]){T, D});
  if (!sorted)
    return shmap_fail(ctx, "alloc: %s", shmap_errmsg());
  {
    int64_t fill[E];
    memcpy(fill, start, sizeof fill);
    for (int t = 0; t < T; t++) {
      order[t] = (int)fill[eid[t]]++;
      memcpy((float *)sorted->data + order[t] * D, x + t * D,
             sizeof(float) * D);
    }
  }

  /* 2. The count matrix C[s][e]: rows from device s for expert e. */
  shmap_block cb = {count, SHMAP_I64, 1, {E}};
  shmap_block *cm = NULL;
  if ((rc = shmap_all_gather(ctx, &cb, "expert", 0, 0, &cm)))
    return rc;
  const int64_t(*C)[E] = (const int64_t(*)[E])cm->data;

  /* 3. Tokens to their experts.  Expert j stores the rows of sender s
   * after those of senders 0 .. s-1. */
  int64_t out_off[E], recv[E], got = 0;
  for (int j = 0; j < E; j++) {
    out_off[j] = 0;
    for (int s = 0; s < me; s++)
      out_off[j] += C[s][j];
    recv[j] = C[j][me];
    got += recv[j];
  }
  shmap_block *inbox = shmap_block_alloc(ctx, SHMAP_F32, 2,
                                         (int64_t[]){T * E, D});
  shmap_block *outbox = shmap_block_alloc(ctx, SHMAP_F32, 2,
                                          (int64_t[]){T * E, D});
  if (!inbox || !outbox)
    return shmap_fail(ctx, "alloc: %s", shmap_errmsg());
  if ((rc = shmap_ragged_all_to_all(ctx, sorted, inbox, start, count, out_off,
                                    recv, "expert")))
    return rc;

  /* 4. This device's expert on the rows it received. */
  const float *w = wb->data;
  for (int64_t r = 0; r < got; r++)
    expert(w, (float *)inbox->data + r * D, (float *)outbox->data + r * D);

  /* 5. Results back: the rows of sender s go back to where s keeps its
   * tokens for this expert (start of expert `me` in s's sorted order). */
  int64_t back_in[E], back_out[E];
  for (int s = 0; s < E; s++) {
    back_in[s] = 0;
    for (int q = 0; q < s; q++)
      back_in[s] += C[q][me];
    back_out[s] = 0;
    for (int e = 0; e < me; e++)
      back_out[s] += C[s][e];
  }
  shmap_block *result = shmap_block_alloc(ctx, SHMAP_F32, 2,
                                          (int64_t[]){T, D});
  if (!result)
    return shmap_fail(ctx, "alloc: %s", shmap_errmsg());
  if ((rc = shmap_ragged_all_to_all(ctx, outbox, result, back_in, recv,
                                    back_out, count, "expert")))
    return rc;

  /* 6. Unsort and scale by the gate. */
  shmap_block *y = shmap_out(ctx, 0, SHMAP_F32, 2, (int64_t[]){T, D});
  if (!y)
    return shmap_fail(ctx, "shmap_out: %s", shmap_errmsg());
  for (int t = 0; t < T; t++)
    for (int d = 0; d < D; d++)
      ((float *)y->data)[t * D + d] =
          gate[t] * ((float *)result->data)[order[t] * D + d];
  return 0;
}

int main(void)
{
  static float x[E * T * D], w[E * D * D], want[E * T * D], got[E * T * D];
  uint32_t s = 12345;
#define NEXT() ((s = s * 1664525u + 1013904223u) >> 8) / (float)(1u << 24)
  for (int k = 0; k < E * T * D; k++)
    x[k] = NEXT() * 2.0f - 1.0f;
  for (int k = 0; k < E * D * D; k++)
    w[k] = NEXT() - 0.4f;
  for (int k = 0; k < D * E; k++)
    router[k] = NEXT() * 2.0f - 1.0f;

  shmap_mesh *mesh = NULL;
  shmap_array *in[2] = {NULL, NULL}, *out = NULL;
  int rc = shmap_mesh_create(&mesh, "expert=4");
  if (!rc)
    rc = shmap_array_from_host(&in[0], SHMAP_F32, 2,
                               (int64_t[]){E * T, D}, x);
  if (!rc)
    rc = shmap_array_from_host(&in[1], SHMAP_F32, 3,
                               (int64_t[]){E, D, D}, w);
  const char *in_specs[] = {"P('expert')", "P('expert')"};
  const char *out_specs[] = {"P('expert')"};
  if (!rc)
    rc = shmap_map(mesh, body, NULL, 2, in, in_specs, 1, &out, out_specs);
  if (!rc)
    rc = shmap_array_to_host(out, got);
  if (rc) {
    fprintf(stderr, "12_moe: %s: %s\n", shmap_strerror(rc), shmap_errmsg());
    return 1;
  }

  /* The same layer, serially. */
  int used[E] = {0};
  for (int t = 0; t < E * T; t++) {
    float g, y[D];
    int e = route(x + t * D, &g);
    used[e]++;
    expert(w + e * D * D, x + t * D, y);
    for (int d = 0; d < D; d++)
      want[t * D + d] = g * y[d];
  }
  int bad = memcmp(got, want, sizeof got) != 0;
  /* Under mpirun every process has the whole result; one prints. */
  if (shmap_process_rank() == 0 || bad) {
    printf("12_moe: %d tokens over %d experts (", E * T, E);
    for (int e = 0; e < E; e++)
      printf("%s%d", e ? ", " : "", used[e]);
    printf(" tokens each): %s the serial layer\n",
           bad ? "DIFFERS from" : "equal to");
  }
  shmap_array_destroy(out);
  shmap_array_destroy(in[0]);
  shmap_array_destroy(in[1]);
  shmap_mesh_destroy(mesh);
  return bad;
}
