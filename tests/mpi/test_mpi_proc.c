/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_proc.c - the library over the processes of an MPI job: the
 * process queries, placement of devices (default and by process axes),
 * maps whose devices run in different processes, host data in and out,
 * and failures on a device of another process.
 *
 * Run under `mpirun -np R` (R = 1, 2 or 4) or without mpirun (one process);
 * every expectation is computed from R, so one program checks all.  A plain
 * program rather than a Check suite: Check forks each test, and an MPI
 * process must not fork after initialising MPI.  Every process prints its
 * failures; the exit status is non-zero on any.
 */
#include "mpiutil.h"
#include <shmap.h>

#include <mpi.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
static int R, me;

#define EXPECT(cond, ...)                                                     \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "[process %d] %s:%d: %s: ", me, __FILE__, __LINE__,     \
              #cond);                                                         \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, "\n");                                                  \
      failures++;                                                             \
    }                                                                         \
  } while (0)

#define OK(rc, what)                                                          \
  EXPECT((rc) >= 0, "%s: %s: %s", what, shmap_strerror(rc), shmap_errmsg())

static char host[64];

static int same_everywhere(const char *text)
{
  return same_everywhere_of(R, text);
}

/* ---- placement --------------------------------------------------------- */

static void test_placement(void)
{
  shmap_mesh *m = NULL;
  OK(shmap_mesh_create(&m, "i=4, j=2"), "mesh i=4, j=2");
  for (int d = 0; d < 8; d++)
    EXPECT(shmap_mesh_device_process(m, d) == d / (8 / R),
           "default placement: device %d on process %d", d,
           shmap_mesh_device_process(m, d));
  EXPECT(shmap_mesh_device_process(m, 8) == SHMAP_EINVAL, "device 8");
  EXPECT(strstr(shmap_errmsg(), "device 8 is out of range [0, 8)") != NULL,
         "message: %s", shmap_errmsg());

  /* Axis j across processes: only R in {1, 2} divides its size 2. */
  int rc = shmap_mesh_set_process_axes(m, "j");
  if (R <= 2) {
    OK(rc, "process axes j");
    for (int d = 0; d < 8; d++)
      EXPECT(shmap_mesh_device_process(m, d) == (d % 2) / (2 / R),
             "process axes j: device %d on process %d", d,
             shmap_mesh_device_process(m, d));
  } else {
    char want[512];
    snprintf(want, sizeof want,
             "process axes 'j' of mesh \"i=4, j=2\" have 2 coordinates, which "
             "the %d processes of this MPI job cannot share equally: the "
             "number of processes must divide the product of the process "
             "axes' sizes", R);
    EXPECT(rc == SHMAP_EINVAL && strcmp(shmap_errmsg(), want) == 0,
           "rc %d message: %s", rc, shmap_errmsg());
  }
  /* ('j','i'): process index j*4 + i, in blocks of 8/R. */
  OK(shmap_mesh_set_process_axes(m, "('j','i')"), "process axes (j, i)");
  for (int d = 0; d < 8; d++) {
    int i = d / 2, j = d % 2;
    EXPECT(shmap_mesh_device_process(m, d) == (j * 4 + i) / (8 / R),
           "process axes (j, i): device %d on process %d", d,
           shmap_mesh_device_process(m, d));
  }
  EXPECT(shmap_mesh_set_process_axes(m, "k") == SHMAP_EAXIS, "unknown axis");
  shmap_mesh_destroy(m);

  /* Three devices cannot be shared by 2 or 4 processes. */
  m = NULL;
  rc = shmap_mesh_create(&m, "i=3");
  if (R == 1) {
    OK(rc, "mesh i=3");
  } else {
    char want[512];
    snprintf(want, sizeof want,
             "mesh \"i=3\" has 3 devices, which the %d processes of this MPI "
             "job cannot share equally: the number of processes must divide "
             "the number of devices", R);
    EXPECT(rc == SHMAP_EINVAL && strcmp(shmap_errmsg(), want) == 0,
           "rc %d message: %s", rc, shmap_errmsg());
  }
  shmap_mesh_destroy(m);
}

/* ---- maps and host data ------------------------------------------------- */

static double value(int64_t r, int64_t c) { return (double)r * 100.0 + (double)c + 0.25; }

/* out = in * 2 + device number, per element. */
static int twice(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  const shmap_block *in = shmap_in(ctx, 0);
  shmap_block *out = shmap_out(ctx, 0, in->dtype, in->rank, in->shape);
  if (!out)
    return -1;
  int dev = shmap_ctx_device(ctx);
  for (int64_t k = 0; k < shmap_block_numel(in); k++)
    ((double *)out->data)[k] = ((const double *)in->data)[k] * 2.0 + dev;
  return 0;
}

static void test_map_host_data(const char *axes)
{
  shmap_mesh *m = NULL;
  OK(shmap_mesh_create(&m, "i=4, j=2"), "mesh");
  if (axes)
    OK(shmap_mesh_set_process_axes(m, axes), "process axes");
  int64_t shape[2] = {8, 6};
  double host_in[48], got[48], want[48], local[48];
  for (int r = 0; r < 8; r++)
    for (int c = 0; c < 6; c++)
      host_in[r * 6 + c] = value(r, c);
  /* Blocks of P('i','j') are 2x3; device (i, j) holds rows 2i.., cols 3j.. */
  for (int r = 0; r < 8; r++)
    for (int c = 0; c < 6; c++)
      want[r * 6 + c] = value(r, c) * 2.0 + (r / 2) * 2 + c / 3;
  shmap_array *in = NULL, *out = NULL;
  OK(shmap_array_from_host(&in, SHMAP_F64, 2, shape, host_in), "from_host");
  const char *spec = "P('i','j')";
  OK(shmap_map(m, twice, NULL, 1, &in, &spec, 1, &out, &spec), "map");
  if (out) {
    memset(got, 0, sizeof got);
    OK(shmap_array_to_host(out, got), "to_host");
    EXPECT(memcmp(got, want, sizeof got) == 0, "to_host differs (axes %s)",
           axes ? axes : "default");
    for (int k = 0; k < 48; k++)
      local[k] = -1.0;
    OK(shmap_array_to_host_local(out, local), "to_host_local");
    for (int r = 0; r < 8; r++)
      for (int c = 0; c < 6; c++) {
        int dev = (r / 2) * 2 + c / 3;
        double w = shmap_mesh_device_process(m, dev) == me ? want[r * 6 + c]
                                                           : -1.0;
        EXPECT(local[r * 6 + c] == w, "to_host_local [%d,%d] = %g, want %g",
               r, c, local[r * 6 + c], w);
      }
    /* Only the local blocks are kept: another process's cannot be read
     * here, and the error names the process that holds it. */
    for (int d = 0; d < 8; d++) {
      shmap_block b;
      int64_t off[2];
      int rc = shmap_array_block(out, d, &b, off);
      int p = shmap_mesh_device_process(m, d);
      if (p == me) {
        OK(rc, "array_block");
        EXPECT(b.data != NULL, "block of device %d: NULL data", d);
        continue;
      }
      char msg[160];
      snprintf(msg, sizeof msg, "shmap_array_block: device %d (i=%d, j=%d) "
               "runs in process %d (host %s), which alone keeps its block",
               d, d / 2, d % 2, p, host);
      EXPECT(rc == SHMAP_EINVAL && strstr(shmap_errmsg(), msg) != NULL,
             "block of device %d: rc %d: %s", d, rc, shmap_errmsg());
    }
    shmap_stats st;
    OK(shmap_mesh_stats(m, &st), "stats");
    /* to_host received the blocks of the other processes' devices. */
    uint64_t remote = (uint64_t)(8 - 8 / R) * 6 * sizeof(double);
    EXPECT(st.bytes_remote == remote, "bytes_remote %llu, want %llu",
           (unsigned long long)st.bytes_remote, (unsigned long long)remote);
  }
  shmap_array_destroy(out);
  out = NULL;

  /* A sharded import replicated over j, read back whole everywhere. */
  shmap_array *sh = NULL;
  OK(shmap_array_from_host_sharded(&sh, m, "P('i')", SHMAP_F64, 2, shape,
                                   host_in),
     "from_host_sharded");
  memset(got, 0, sizeof got);
  if (sh)
    OK(shmap_array_to_host(sh, got), "to_host of the import");
  EXPECT(memcmp(got, host_in, sizeof got) == 0, "import round trip differs");
  /* Read with another spec: blocks of other processes come over (the
   * rows of P('j') from a process that holds them).  Unchecked, every
   * copy is the one at i = 0: device j added its number j. */
  const char *other = "P('j')";
  OK(shmap_map_flags(m, twice, NULL, 1, &sh, &other, 1, &out, &other,
                     SHMAP_NO_CHECK_REP),
     "map reading P('i') as P('j')");
  if (out) {
    memset(got, 0, sizeof got);
    OK(shmap_array_to_host(out, got), "to_host of the resharded map");
    for (int r = 0; r < 8; r++)
      for (int c = 0; c < 6; c++)
        EXPECT(got[r * 6 + c] == value(r, c) * 2.0 + r / 4,
               "reshard map [%d,%d] = %g", r, c, got[r * 6 + c]);
  }
  shmap_array_destroy(out);
  shmap_array_destroy(sh);
  shmap_array_destroy(in);
  shmap_mesh_destroy(m);
}

/* ---- failures -------------------------------------------------------------- */

static int fail_on_5(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  if (shmap_ctx_device(ctx) == 5)
    return 7;
  int64_t one = 1;
  shmap_block *b = shmap_out(ctx, 0, SHMAP_I32, 1, &one);
  return b ? 0 : -1;
}

static int ok_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int64_t one = 1;
  shmap_block *b = shmap_out(ctx, 0, SHMAP_I32, 1, &one);
  if (!b)
    return -1;
  *(int32_t *)b->data = shmap_ctx_device(ctx);
  return 0;
}

static void test_failure(void)
{
  shmap_mesh *m = NULL;
  OK(shmap_mesh_create(&m, "i=4, j=2"), "mesh");
  const char *spec = "P(('i','j'))";
  shmap_array *out = NULL;
  int rc = shmap_map(m, fail_on_5, NULL, 0, NULL, NULL, 1, &out, &spec);
  char want[256];
  int owner = 5 / (8 / R);
  char hostname[64];
  snprintf(hostname, sizeof hostname, "%s", host); /* one host here */
  if (R > 1)
    snprintf(want, sizeof want,
             "device 5 (i=2, j=1) on process %d (host %s): body returned 7",
             owner, hostname);
  else
    snprintf(want, sizeof want, "device 5 (i=2, j=1): body returned 7");
  int same = same_everywhere(shmap_errmsg()); /* a collective call */
  EXPECT(rc == SHMAP_EBODY && strcmp(shmap_errmsg(), want) == 0 && !out &&
             same,
         "rc %d message: %s (want %s)", rc, shmap_errmsg(), want);
  /* The next map works, everywhere. */
  rc = shmap_map(m, ok_body, NULL, 0, NULL, NULL, 1, &out, &spec);
  OK(rc, "map after a failure");
  int32_t got[8] = {0};
  if (out)
    OK(shmap_array_to_host(out, got), "to_host");
  for (int d = 0; d < 8; d++)
    EXPECT(got[d] == d, "element %d = %d", d, got[d]);
  shmap_array_destroy(out);
  shmap_mesh_destroy(m);
}

/* ---- collectives within a process ----------------------------------------- */

static int psum_over(shmap_ctx *ctx, void *arg)
{
  const char *axes = arg;
  int64_t shape[1] = {5};
  shmap_block *b = shmap_out(ctx, 0, SHMAP_F32, 1, shape);
  if (!b)
    return -1;
  int dev = shmap_ctx_device(ctx);
  for (int k = 0; k < 5; k++)
    ((float *)b->data)[k] = 0.1f * (float)(dev + 1) + (float)k / 3.0f;
  return shmap_psum(ctx, b, axes);
}

/* psum over i of n floats, each device checking the left fold itself;
 * the map has no inputs or outputs, so the bytes between processes are
 * the collective's alone. */
static int psum_check(shmap_ctx *ctx, void *arg)
{
  int n = *(const int *)arg;
  int64_t shape[1] = {n};
  shmap_block *b = shmap_block_alloc(ctx, SHMAP_F32, 1, shape);
  if (!b)
    return -1;
  int dev = shmap_ctx_device(ctx), j = dev % 2;
  float *x = b->data;
  for (int k = 0; k < n; k++)
    x[k] = 0.1f * (float)(dev + 1) + (float)k / 3.0f;
  int rc = shmap_psum(ctx, b, "i");
  for (int k = 0; !rc && k < n; k++) {
    float want = 0.1f * (float)(j + 1) + (float)k / 3.0f;
    for (int i = 1; i < 4; i++)
      want += 0.1f * (float)(2 * i + j + 1) + (float)k / 3.0f;
    if (memcmp(&x[k], &want, sizeof want) != 0) {
      fprintf(stderr, "[process %d] device %d: psum of %d floats [%d] = %.9g, "
              "want %.9g\n", me, dev, n, k, x[k], want);
      rc = -1;
    }
  }
  shmap_block_free(ctx, b);
  return rc;
}

/* A psum of a few hundred bytes takes one exchange of descriptors and
 * terms: each device receives the terms of every member in another
 * process, and nothing else.  A larger one exchanges descriptors and
 * then pieces (other counts). */
static void test_small_traffic(void)
{
  shmap_mesh *m = NULL;
  OK(shmap_mesh_create(&m, "i=4, j=2"), "mesh");
  OK(shmap_mesh_set_process_axes(m, "i"), "process axes i");
  static const int sizes[] = {5, 128, 1000};
  for (int s = 0; s < 3; s++) {
    int n = sizes[s];
    shmap_mesh_stats_reset(m);
    OK(shmap_map(m, psum_check, (void *)&sizes[s], 0, NULL, NULL, 0, NULL,
                 NULL),
       "psum_check");
    shmap_stats st;
    OK(shmap_mesh_stats(m, &st), "stats");
    /* 8 / R devices here, 4 / R of each group's 4 members here. */
    uint64_t small = (uint64_t)(8 / R) * (uint64_t)(4 - 4 / R) *
                     (uint64_t)n * sizeof(float);
    if ((size_t)n * sizeof(float) <= 512)
      EXPECT(st.bytes_remote == small,
             "psum of %d floats: bytes_remote %llu, want %llu", n,
             (unsigned long long)st.bytes_remote, (unsigned long long)small);
    else
      EXPECT(R == 1 ? st.bytes_remote == 0 : st.bytes_remote > 0,
             "psum of %d floats: bytes_remote %llu", n,
             (unsigned long long)st.bytes_remote);
  }
  shmap_mesh_destroy(m);
}

static void test_collectives(void)
{
  shmap_mesh *m = NULL;
  OK(shmap_mesh_create(&m, "i=4, j=2"), "mesh");
  /* Processes split i; groups over j stay inside one process. */
  OK(shmap_mesh_set_process_axes(m, "i"), "process axes i");
  const char *spec = "P('i')";
  shmap_array *out = NULL;
  OK(shmap_map(m, psum_over, "j", 0, NULL, NULL, 1, &out, &spec), "psum over j");
  float got[20] = {0}, want[20];
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 5; k++) {
      float acc = 0.1f * (float)(2 * i + 1) + (float)k / 3.0f;
      acc += 0.1f * (float)(2 * i + 2) + (float)k / 3.0f;
      want[i * 5 + k] = acc;
    }
  if (out)
    OK(shmap_array_to_host(out, got), "to_host");
  EXPECT(memcmp(got, want, sizeof got) == 0, "psum over j differs");
  shmap_array_destroy(out);
  out = NULL;
  /* Over i the group spans processes (R > 1): the same left fold in rank
   * order as one process, bit for bit. */
  const char *rep = "P('j')";
  OK(shmap_map(m, psum_over, "i", 0, NULL, NULL, 1, &out, &rep), "psum over i");
  float got_i[10] = {0}, want_i[10];
  for (int j = 0; j < 2; j++)
    for (int k = 0; k < 5; k++) {
      float acc = 0.1f * (float)(j + 1) + (float)k / 3.0f;
      for (int i = 1; i < 4; i++)
        acc += 0.1f * (float)(2 * i + j + 1) + (float)k / 3.0f;
      want_i[j * 5 + k] = acc;
    }
  if (out)
    OK(shmap_array_to_host(out, got_i), "to_host");
  EXPECT(memcmp(got_i, want_i, sizeof got_i) == 0, "psum over i differs");
  shmap_array_destroy(out);
  shmap_mesh_destroy(m);
}

int main(void)
{
  gethostname(host, sizeof host - 1);
  int was_init = 0;
  MPI_Initialized(&was_init);
  EXPECT(!was_init, "MPI initialised before the first library call");
  R = shmap_process_count();
  me = shmap_process_rank();
  EXPECT(R >= 1 && me >= 0 && me < R, "rank %d of %d", me, R);
  const char *env = getenv("OMPI_COMM_WORLD_SIZE");
  if (!env)
    env = getenv("PMI_SIZE");
  int launched = env != NULL;
  EXPECT(R == (env ? atoi(env) : 1), "count %d, launcher says %s", R,
         env ? env : "(none)");
  /* Without a launcher the library leaves MPI alone. */
  int now_init = 0;
  MPI_Initialized(&now_init);
  EXPECT(now_init == launched, "MPI initialised: %d, launched: %d", now_init,
         launched);
  test_placement();
  test_map_host_data(NULL);
  test_map_host_data("('j','i')");
  test_failure();
  if (R <= 4) {
    test_collectives();
    test_small_traffic();
  }
  if (failures)
    fprintf(stderr, "[process %d of %d] %d failure%s\n", me, R, failures,
            failures == 1 ? "" : "s");
  else if (me == 0)
    printf("test_mpi_proc: %d process%s: all passed\n", R, R == 1 ? "" : "es");
  return failures ? 1 : 0;
}
