/* SPDX-License-Identifier: MIT */
/*
 * mpi_bench.c - the Open MPI column of bench/run.  bench/run starts it as
 *   mpirun --oversubscribe -np P bench/mpi_bench --sizes LIST --ops LIST
 *          --reps K --target-ms T
 * and reads rank 0's lines `op=NAME bytes=N us=X` (median microseconds).
 *
 * Each case is measured the way bench/run measures libshmap: one warm-up
 * call, then samples of R back-to-back calls that start after an
 * MPI_Barrier; a sample lasts from the first rank starting to the last rank
 * finishing, divided by R.  `bytes` is the per-rank size of the full f32
 * buffer: the input of MPI_Allreduce (in place), MPI_Reduce_scatter_block,
 * MPI_Alltoall and the MPI_Sendrecv ring shift, and the output of
 * MPI_Allgather (whose input is bytes/P).  op=empty is an MPI_Barrier.
 * --ppermute replace shifts with MPI_Sendrecv_replace (the result in the
 * send buffer, as libshmap's in-place shmap_ppermute) instead of
 * MPI_Sendrecv into a buffer of its own (as shmap_ppermute_new).
 *
 * --thread multiple initialises MPI at MPI_THREAD_MULTIPLE, the level
 * libshmap asks for (its devices call MPI from several threads), instead
 * of MPI_Init's single thread: Open MPI then locks in its own calls, and
 * the difference is part of libshmap's cost over the default column.
 */
#include <mpi.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { OP_PSUM, OP_PSUM_SCATTER, OP_ALL_GATHER, OP_ALL_TO_ALL, OP_PPERMUTE,
       OP_EMPTY, NOPS };
static const char *const op_names[NOPS] = {
    "psum", "psum_scatter", "all_gather", "all_to_all", "ppermute", "empty"};

#define MAXLIST 32

static int rank, nranks;
static bool replace; /* --ppermute replace */

static double now_us(void)
{
  /* CLOCK_MONOTONIC is one clock for every process of the machine, so
   * start and end times of different ranks compare. */
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct mcase {
  int op;
  int count;         /* f32 elements per peer (chunk) */
  float *a, *b;      /* full-size buffers */
} mcase;

static void one_op(const mcase *c)
{
  int n = c->count; /* elements per chunk */
  switch (c->op) {
  case OP_PSUM:
    MPI_Allreduce(MPI_IN_PLACE, c->a, n * nranks, MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    break;
  case OP_PSUM_SCATTER:
    MPI_Reduce_scatter_block(c->a, c->b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    break;
  case OP_ALL_GATHER:
    MPI_Allgather(c->a, n, MPI_FLOAT, c->b, n, MPI_FLOAT, MPI_COMM_WORLD);
    break;
  case OP_ALL_TO_ALL:
    MPI_Alltoall(c->a, n, MPI_FLOAT, c->b, n, MPI_FLOAT, MPI_COMM_WORLD);
    break;
  case OP_PPERMUTE:
    if (replace)
      MPI_Sendrecv_replace(c->a, n * nranks, MPI_FLOAT, (rank + 1) % nranks,
                           0, (rank + nranks - 1) % nranks, 0, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE);
    else
      MPI_Sendrecv(c->a, n * nranks, MPI_FLOAT, (rank + 1) % nranks, 0, c->b,
                   n * nranks, MPI_FLOAT, (rank + nranks - 1) % nranks, 0,
                   MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    break;
  default:
    MPI_Barrier(MPI_COMM_WORLD);
    break;
  }
}

/* One sample: microseconds per call over R calls, the same on every rank. */
static double sample(const mcase *c, int R)
{
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now_us();
  for (int r = 0; r < R; r++)
    one_op(c);
  double t1 = now_us(), lo, hi;
  MPI_Allreduce(&t0, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&t1, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return (hi - lo) / R;
}

static double measure(const mcase *c, int reps, double target_ms)
{
  double target = target_ms * 1e3;
  one_op(c); /* warm-up */
  int R = 1;
  for (;;) {
    double per = sample(c, R);
    if (per * R >= target / 5 || R >= 100000) {
      double want = per > 0 ? target / per : 100000;
      R = want < 1 ? 1 : want > 1e6 ? 1000000 : (int)want;
      break;
    }
    R *= 10;
  }
  double v[64];
  if (reps > 64)
    reps = 64;
  for (int i = 0; i < reps; i++)
    v[i] = sample(c, R);
  qsort(v, (size_t)reps, sizeof *v, cmp_double);
  return reps % 2 ? v[reps / 2] : 0.5 * (v[reps / 2 - 1] + v[reps / 2]);
}

static void usage_exit(const char *why)
{
  if (rank == 0)
    fprintf(stderr,
            "mpi_bench: %s\nusage: mpirun -np P mpi_bench --sizes LIST "
            "[--ops LIST] [--reps K] [--target-ms T] [--thread multiple] "
            "[--ppermute sendrecv|replace]\n",
            why);
  MPI_Finalize();
  exit(2);
}

int main(int argc, char **argv)
{
  bool multiple = false;
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "--thread") == 0 && strcmp(argv[i + 1], "multiple") == 0)
      multiple = true;
  if (multiple) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  } else {
    MPI_Init(&argc, &argv);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  size_t sizes[MAXLIST];
  int nsizes = 0, ops = 0, reps = 5;
  double target_ms = 20;
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc)
      usage_exit("missing value");
    char *v = argv[++i];
    if (strcmp(argv[i - 1], "--sizes") == 0) {
      for (char *tok = strtok(v, ","); tok; tok = strtok(NULL, ","))
        if (nsizes < MAXLIST)
          sizes[nsizes++] = strtoull(tok, NULL, 10);
    } else if (strcmp(argv[i - 1], "--ops") == 0) {
      for (char *tok = strtok(v, ","); tok; tok = strtok(NULL, ","))
        for (int k = 0; k < NOPS; k++)
          if (strcmp(tok, op_names[k]) == 0)
            ops |= 1 << k;
    } else if (strcmp(argv[i - 1], "--reps") == 0) {
      reps = atoi(v);
    } else if (strcmp(argv[i - 1], "--target-ms") == 0) {
      target_ms = atof(v);
    } else if (strcmp(argv[i - 1], "--thread") == 0) {
      if (strcmp(v, "multiple") != 0)
        usage_exit("--thread takes `multiple`");
    } else if (strcmp(argv[i - 1], "--ppermute") == 0) {
      if (strcmp(v, "replace") == 0)
        replace = true;
      else if (strcmp(v, "sendrecv") != 0)
        usage_exit("--ppermute takes `sendrecv` or `replace`");
    } else {
      usage_exit("unknown option");
    }
  }
  if (!ops)
    ops = (1 << NOPS) - 1;
  if (reps < 1)
    reps = 1;

  if (rank == 0) {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, ",\n")] = 0;
    printf("# mpi_library=%s\n", lib);
    fflush(stdout);
  }

  for (int op = 0; op < NOPS; op++) {
    if (!(ops & (1 << op)))
      continue;
    for (int s = 0; s < (op == OP_EMPTY ? 1 : nsizes); s++) {
      size_t bytes = op == OP_EMPTY ? 0 : sizes[s];
      size_t n = bytes / sizeof(float);
      if (n % (size_t)nranks)
        usage_exit("a size is not divisible into P f32 chunks");
      mcase c = {.op = op, .count = (int)(n / (size_t)nranks)};
      if (n) {
        c.a = malloc(bytes);
        c.b = malloc(bytes);
        if (!c.a || !c.b) {
          fprintf(stderr, "mpi_bench: out of memory\n");
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (size_t e = 0; e < n; e++) {
          c.a[e] = (float)((e + (size_t)rank) % 7) * 0.125f;
          c.b[e] = 0;
        }
      }
      double us = measure(&c, reps, target_ms);
      if (rank == 0) {
        printf("op=%s bytes=%zu us=%.4f\n", op_names[op], bytes, us);
        fflush(stdout);
      }
      free(c.a);
      free(c.b);
    }
  }
  MPI_Finalize();
  return 0;
}
