/* SPDX-License-Identifier: MIT */
/*
 * transport.c - libshmap's collectives with the devices spread over the
 * processes of an MPI job, measured the way bench/mpi_bench measures raw
 * MPI, so that bench/transport.sh can print the two side by side:
 *
 *   mpirun -np R bench/transport D [--sizes LIST] [--reps K]
 *
 * runs a mesh of R*D devices (D per process) and prints on process 0 one
 * line `op=NAME bytes=N us=X` per case: the median over K maps of the
 * time per call of 8 back-to-back calls in one map (map overhead included,
 * spread over the 8 calls).  `bytes` is the per-device size of the full
 * f32 buffer, as for mpi_bench: the input of psum and psum_scatter, the
 * output of all_gather (whose input is bytes/(R*D)), the block ppermute
 * shifts around the ring of devices.
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { OP_PSUM, OP_ALL_GATHER, OP_PSUM_SCATTER, OP_PPERMUTE, NOPS };
static const char *const names[NOPS] = {"psum", "all_gather", "psum_scatter",
                                        "ppermute"};
#define CALLS 8

typedef struct job {
  int op, n;
  int64_t elems;
  int (*pairs)[2];
} job;

static int body(shmap_ctx *ctx, void *arg)
{
  const job *j = arg;
  int64_t len = j->op == OP_ALL_GATHER ? j->elems / j->n : j->elems;
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, &len);
  if (!x)
    return -1;
  for (int c = 0; c < CALLS; c++) {
    shmap_block *out = NULL;
    int rc;
    switch (j->op) {
    case OP_PSUM: rc = shmap_psum(ctx, x, "d"); break;
    case OP_ALL_GATHER: rc = shmap_all_gather(ctx, x, "d", 0, 1, &out); break;
    case OP_PSUM_SCATTER: rc = shmap_psum_scatter(ctx, x, "d", 0, 1, &out); break;
    default: rc = shmap_ppermute(ctx, x, "d", j->n, (const int(*)[2])j->pairs); break;
    }
    if (rc)
      return rc;
    if (out)
      shmap_block_free(ctx, out);
  }
  return 0;
}

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
  int D = argc > 1 ? atoi(argv[1]) : 1;
  size_t sizes[16] = {(size_t)1 << 20, (size_t)4 << 20};
  int nsizes = 2, reps = 7;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--sizes") == 0) {
      nsizes = 0;
      for (char *t = strtok(argv[i + 1], ","); t && nsizes < 16; t = strtok(NULL, ","))
        sizes[nsizes++] = strtoull(t, NULL, 10);
    } else if (strcmp(argv[i], "--reps") == 0) {
      reps = atoi(argv[i + 1]);
    }
  }
  int R = shmap_process_count();
  if (D < 1 || R < 1 || reps < 1 || reps > 99) {
    fprintf(stderr, "usage: mpirun -np R transport D [--sizes LIST] [--reps K]\n");
    return 2;
  }
  int n = R * D;
  char text[32];
  snprintf(text, sizeof text, "d=%d", n);
  shmap_mesh *mesh;
  if (shmap_mesh_create(&mesh, text) != 0) {
    fprintf(stderr, "transport: %s\n", shmap_errmsg());
    return 1;
  }
  int(*pairs)[2] = calloc((size_t)n, sizeof *pairs);
  for (int r = 0; r < n; r++) {
    pairs[r][0] = r;
    pairs[r][1] = (r + 1) % n;
  }
  for (int op = 0; op < NOPS; op++)
    for (int s = 0; s < nsizes; s++) {
      job j = {.op = op, .n = n, .elems = (int64_t)(sizes[s] / 4), .pairs = pairs};
      j.elems -= j.elems % n;
      double t[100];
      for (int k = 0; k <= reps; k++) {
        double t0 = now_us();
        int rc = shmap_map(mesh, body, &j, 0, NULL, NULL, 0, NULL, NULL);
        double t1 = now_us();
        if (rc) {
          fprintf(stderr, "transport: %s\n", shmap_errmsg());
          return 1;
        }
        if (k) /* the first map warms up */
          t[k - 1] = (t1 - t0) / CALLS;
      }
      qsort(t, (size_t)reps, sizeof t[0], cmp);
      if (shmap_process_rank() == 0)
        printf("op=%s bytes=%zu us=%.1f\n", names[op], sizes[s], t[reps / 2]);
    }
  free(pairs);
  shmap_mesh_destroy(mesh);
  return 0;
}
