/* SPDX-License-Identifier: MIT */
/*
 * transport.c - libshmap's collectives with the devices spread over the
 * processes of an MPI job, measured the way bench/mpi_bench measures raw
 * MPI, so that bench/run --transport and bench/transport.sh can print the
 * two side by side:
 *
 *   mpirun -np R bench/transport D [--sizes LIST] [--ops LIST] [--reps K]
 *                                   [--target-ms T] [--calls C]
 *                                   [--ppermute new|inplace]
 *
 * runs a mesh of R*D devices (D per process) and prints on process 0 one
 * line `op=NAME bytes=N us=X` per case: the median over K samples of the
 * time per call of C back-to-back calls.  As in mpi_bench, a sample starts
 * after a barrier (here a psum of one float) and lasts from the first
 * device starting to the last one finishing (the devices' clock readings
 * come back through an output array; the processes share the host's
 * monotonic clock), and C is chosen so that a sample lasts about T
 * milliseconds.  All samples of a case run in one map, so a map's own
 * start and end are not counted.  `bytes` is the per-device size of the
 * full f32 buffer, as for mpi_bench: the input of psum and psum_scatter,
 * the output of all_gather (whose input is bytes/(R*D)), the block
 * ppermute shifts around the ring of devices.  The ppermute is
 * shmap_ppermute_new, whose result is a block of its own, as mpi_bench's
 * MPI_Sendrecv receives into a buffer of its own; --ppermute inplace
 * measures shmap_ppermute, whose result replaces its input (compare with
 * mpi_bench --ppermute replace, MPI_Sendrecv_replace).  --calls C fixes the calls
 * per sample instead (no calibration), so that two runs under an
 * instruction counter differ by a known number of calls.  Times are
 * printed with mpi_bench's precision, so that ratios of small calls are
 * not rounded away.
 */
#include <shmap.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { OP_PSUM, OP_ALL_GATHER, OP_PSUM_SCATTER, OP_PPERMUTE, NOPS };
static const char *const names[NOPS] = {"psum", "all_gather", "psum_scatter",
                                        "ppermute"};
#define MAXREPS 64

typedef struct job {
  int op, n;
  int64_t elems;
  int (*pairs)[2];
  int calls, samples; /* calls per sample, samples */
  bool inplace;       /* ppermute: shmap_ppermute instead of _new */
} job;

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int one(shmap_ctx *ctx, const job *j, shmap_block *x)
{
  shmap_block *out = NULL;
  int rc;
  switch (j->op) {
  case OP_PSUM: rc = shmap_psum(ctx, x, "d"); break;
  case OP_ALL_GATHER: rc = shmap_all_gather(ctx, x, "d", 0, 1, &out); break;
  case OP_PSUM_SCATTER: rc = shmap_psum_scatter(ctx, x, "d", 0, 1, &out); break;
  default:
    rc = j->inplace ? shmap_ppermute(ctx, x, "d", j->n,
                                     (const int(*)[2])j->pairs)
                    : shmap_ppermute_new(ctx, x, "d", j->n,
                                         (const int(*)[2])j->pairs, &out);
    break;
  }
  if (rc == 0 && out)
    rc = shmap_block_free(ctx, out);
  return rc;
}

/* A warm-up call, then the samples; output 0 gets the device's start and
 * end of each sample (f64[1, 2 * samples] per device). */
static int body(shmap_ctx *ctx, void *arg)
{
  const job *j = arg;
  int64_t len = j->op == OP_ALL_GATHER ? j->elems / j->n : j->elems;
  shmap_block *x = shmap_block_alloc(ctx, SHMAP_F32, 1, &len);
  shmap_block *bar = shmap_block_alloc(ctx, SHMAP_F32, 1, (int64_t[]){1});
  shmap_block *t = shmap_out(ctx, 0, SHMAP_F64, 2,
                             (int64_t[]){1, 2 * (int64_t)j->samples});
  if (!x || !bar || !t)
    return shmap_fail(ctx, "allocation: %s", shmap_errmsg());
  int rc = one(ctx, j, x);
  double *tt = t->data;
  for (int k = 0; k < j->samples && rc == 0; k++) {
    if ((rc = shmap_psum(ctx, bar, "d")))
      break;
    tt[2 * k] = now_us();
    for (int c = 0; c < j->calls && rc == 0; c++)
      rc = one(ctx, j, x);
    tt[2 * k + 1] = now_us();
  }
  return rc;
}

static int cmp(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void die(const char *what)
{
  fprintf(stderr, "transport: %s: %s\n", what, shmap_errmsg());
  exit(1);
}

/* Per-call times of j's samples (v[samples]), every process alike. */
static void run(shmap_mesh *mesh, const job *j, double *v)
{
  shmap_array *out;
  if (shmap_map(mesh, body, (void *)j, 0, NULL, NULL, 1, &out,
                (const char *[]){"P('d')"}))
    die("shmap_map");
  size_t m = (size_t)j->n * 2 * (size_t)j->samples;
  double *t = malloc(sizeof *t * m);
  if (!t || shmap_array_to_host(out, t))
    die("shmap_array_to_host");
  shmap_array_destroy(out);
  for (int k = 0; k < j->samples; k++) {
    double lo = t[2 * k], hi = t[2 * k + 1];
    for (int d = 1; d < j->n; d++) {
      const double *r = t + (size_t)d * 2 * (size_t)j->samples;
      lo = r[2 * k] < lo ? r[2 * k] : lo;
      hi = r[2 * k + 1] > hi ? r[2 * k + 1] : hi;
    }
    v[k] = (hi - lo) / j->calls;
  }
  free(t);
}

int main(int argc, char **argv)
{
  int D = argc > 1 ? atoi(argv[1]) : 1;
  size_t sizes[16] = {(size_t)1 << 20, (size_t)4 << 20};
  int nsizes = 2, reps = 7, ops = (1 << NOPS) - 1;
  double target_ms = 20;
  int fixed = 0; /* --calls: calls per sample, 0: calibrated */
  int inplace = 0; /* --ppermute: 0 new, 1 inplace, -1 not valid */
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--sizes") == 0) {
      nsizes = 0;
      for (char *t = strtok(argv[i + 1], ","); t && nsizes < 16; t = strtok(NULL, ","))
        sizes[nsizes++] = strtoull(t, NULL, 10);
    } else if (strcmp(argv[i], "--ops") == 0) {
      ops = 0;
      for (char *t = strtok(argv[i + 1], ","); t; t = strtok(NULL, ","))
        for (int k = 0; k < NOPS; k++)
          if (strcmp(t, names[k]) == 0)
            ops |= 1 << k;
    } else if (strcmp(argv[i], "--reps") == 0) {
      reps = atoi(argv[i + 1]);
    } else if (strcmp(argv[i], "--target-ms") == 0) {
      target_ms = atof(argv[i + 1]);
    } else if (strcmp(argv[i], "--calls") == 0) {
      fixed = atoi(argv[i + 1]);
    } else if (strcmp(argv[i], "--ppermute") == 0) {
      inplace = strcmp(argv[i + 1], "inplace") == 0 ? 1
                : strcmp(argv[i + 1], "new") == 0   ? 0
                                                    : -1;
    }
  }
  int R = shmap_process_count();
  if (D < 1 || R < 1 || reps < 1 || reps > MAXREPS || !(target_ms > 0) ||
      fixed < 0 || inplace < 0) {
    fprintf(stderr, "usage: mpirun -np R transport D [--sizes LIST] "
                    "[--ops LIST] [--reps K] [--target-ms T] [--calls C] "
                    "[--ppermute new|inplace]\n");
    return 2;
  }
  int n = R * D;
  char text[32];
  snprintf(text, sizeof text, "d=%d", n);
  shmap_mesh *mesh;
  if (shmap_mesh_create(&mesh, text) != 0)
    die("shmap_mesh_create");
  int(*pairs)[2] = calloc((size_t)n, sizeof *pairs);
  for (int r = 0; r < n; r++) {
    pairs[r][0] = r;
    pairs[r][1] = (r + 1) % n;
  }
  for (int op = 0; op < NOPS; op++)
    for (int s = 0; s < nsizes && (ops & (1 << op)); s++) {
      job j = {.op = op, .n = n, .elems = (int64_t)(sizes[s] / 4),
               .pairs = pairs, .calls = 1, .samples = 1,
               .inplace = inplace == 1};
      j.elems -= j.elems % n;
      /* Calls per sample: as mpi_bench, ten times more until a sample
       * takes a fifth of the target, then enough for the target.  Every
       * process gets the same times from run(), so all choose alike. */
      double v[MAXREPS];
      /* The first maps of a case pay for what the devices touch first
       * (at 1024 devices over 2 processes, one psum took 19 ms in the
       * mesh's first map, 4 ms in the second and 1 ms from the third):
       * two maps of one call, not counted, so that the calibration does
       * not take them for the calls' cost. */
      if (!fixed)
        for (int w = 0; w < 2; w++)
          run(mesh, &j, v);
      if (fixed)
        j.calls = fixed;
      for (; !fixed;) {
        run(mesh, &j, v);
        double per = v[0];
        if (per * j.calls >= target_ms * 1e3 / 5 || j.calls >= 100000) {
          double want = per > 0 ? target_ms * 1e3 / per : 100000;
          j.calls = want < 1 ? 1 : want > 1e6 ? 1000000 : (int)want;
          break;
        }
        j.calls *= 10;
      }
      j.samples = reps;
      run(mesh, &j, v);
      qsort(v, (size_t)reps, sizeof v[0], cmp);
      double med = reps % 2 ? v[reps / 2] : 0.5 * (v[reps / 2 - 1] + v[reps / 2]);
      if (shmap_process_rank() == 0)
        printf("op=%s bytes=%zu us=%.4f\n", names[op], sizes[s], med);
    }
  free(pairs);
  shmap_mesh_destroy(mesh);
  return 0;
}
