/* SPDX-License-Identifier: MIT */
/*
 * gdb_target.c - the program tests/test_gdb.sh debugs, and a small program
 * to try the gdb extension (gdb/shmap-gdb.py), the watchdog and the trace on.
 *
 *   gdb_target [SECONDS]
 *
 * On the mesh i=2, j=2 (or GDB_TARGET_MESH, see main) a 4x16 f32 array
 * (element (r, c) = 16r + c) is placed with P('i', 'j'): a 2x8 block each
 * (device 3, at (1, 1), holds 40..47 and 56..63).  The body copies its block
 * to its output and adds it up over 'j' with shmap_psum.  Device 3 sleeps
 * SECONDS (default 1) before its psum, so device 2 waits for it in the
 * psum while devices 0 and 1 finish: with SHMAP_WATCHDOG=1 and SECONDS=2.5
 * the watchdog reports it.  main() checks the result and exits 0.
 *
 * The sleep goes in steps of 0.25 s and ends early when delay_seconds is
 * lowered, so that a debugger attached to a long sleep can end it
 * ("print delay_seconds = 0") and let the program finish.
 *
 * Built with -O0 -g (the pragma below keeps -O0 even when CFLAGS says -O2)
 * so that gdb sees every local variable.
 */
#if defined(__clang__)
#pragma clang optimize off
#elif defined(__GNUC__)
#pragma GCC optimize("O0")
#endif

#include <shmap.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ROWS 4
#define COLS 16

struct target {
  shmap_array *host;    /* the data on the host */
  shmap_array *sharded; /* the same data on the mesh, P('i', 'j') */
};

/* Seconds device 3 sleeps before its psum. */
volatile double delay_seconds = 1.0;

static void check(int rc, const char *what)
{
  if (rc < 0) {
    fprintf(stderr, "gdb_target: %s failed: %s: %s\n", what,
            shmap_strerror(rc), shmap_errmsg());
    exit(1);
  }
}

static double seconds_since(const struct timespec *t0)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* Sleep until delay_seconds have passed since the call (re-read). */
static void sleep_delay(void)
{
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    double left = delay_seconds - seconds_since(&t0);
    if (left <= 0)
      break;
    if (left > 0.25)
      left = 0.25;
    struct timespec ts = {0, (long)(left * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
      ;
  }
}

static int body(shmap_ctx *ctx, void *arg)
{
  struct target *t = arg; /* for the debugger: print *t->sharded */
  (void)t;
  int dev = shmap_ctx_device(ctx);
  const shmap_block *x = shmap_in(ctx, 0);
  if (x == NULL)
    return shmap_fail(ctx, "shmap_in(0) returned NULL");
  shmap_block *y = shmap_out_copy(ctx, 0, x);
  if (y == NULL)
    return shmap_fail(ctx, "shmap_out_copy failed");
  if (dev == 3)
    sleep_delay();
  int rc = shmap_psum(ctx, y, "j"); /* gdb-test: break here */
  if (rc != 0)
    return rc;
  return 0;
}

/* Blocks of other dtypes, printed by the test: bf16, f16, bool, c64, i8
 * (here, below the body, so that its line numbers stay those of the
 * transcripts in the documentation). */
static uint16_t bf16_data[3], f16_data[2];
static unsigned char bool_data[3] = {0, 1, 9};
static float c64_data[4] = {1, -2, 0.5f, 3};
static int8_t i8_data[2] = {-128, 127};
shmap_block dtype_blocks[5] = {{bf16_data, SHMAP_BF16, 1, {3}},
                               {f16_data, SHMAP_F16, 1, {2}},
                               {bool_data, SHMAP_BOOL, 1, {3}},
                               {c64_data, SHMAP_C64, 1, {2}},
                               {i8_data, SHMAP_I8, 1, {2}}};

int main(int argc, char **argv)
{
  struct target t = {NULL, NULL};
  bf16_data[0] = shmap_f32_to_bf16(1.5f);
  bf16_data[1] = shmap_f32_to_bf16(-2.0f);
  bf16_data[2] = shmap_f32_to_bf16(0.1f);
  f16_data[0] = shmap_f32_to_f16(0.25f);
  f16_data[1] = shmap_f32_to_f16(65504.0f);
  if (argc > 1)
    delay_seconds = atof(argv[1]);
  shmap_mesh *mesh;
  /* GDB_TARGET_MESH names another mesh, such as "i=4, j=2" for eight
   * devices: axes i and j, sizes that divide 4 and 16. */
  const char *mesh_text = getenv("GDB_TARGET_MESH");
  check(shmap_mesh_create(&mesh, mesh_text ? mesh_text : "i=2, j=2"),
        "shmap_mesh_create");

  float data[ROWS][COLS];
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++)
      data[r][c] = (float)(COLS * r + c);
  const int64_t shape[2] = {ROWS, COLS};
  check(shmap_array_from_host(&t.host, SHMAP_F32, 2, shape, data),
        "shmap_array_from_host");
  check(shmap_array_from_host_sharded(&t.sharded, mesh, "P('i', 'j')",
                                      SHMAP_F32, 2, shape, data),
        "shmap_array_from_host_sharded");

  shmap_array *out;
  const char *in_specs[] = {"P('i', 'j')"}, *out_specs[] = {"P('i')"};
  check(shmap_map(mesh, body, &t, 1, &t.sharded, in_specs, 1, &out,
                  out_specs),
        "shmap_map");

  /* Row r of the result is the sum of the two column halves of row r. */
  float sum[ROWS][COLS / 2];
  check(shmap_array_to_host(out, sum), "shmap_array_to_host");
  int bad = 0;
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS / 2; c++)
      if (sum[r][c] != data[r][c] + data[r][c + COLS / 2])
        bad++;
  shmap_array_destroy(out);
  shmap_array_destroy(t.sharded);
  shmap_array_destroy(t.host);
  shmap_mesh_destroy(mesh);
  if (bad) {
    fprintf(stderr, "gdb_target: %d wrong elements in the result\n", bad);
    return 1;
  }
  printf("gdb_target: ok\n");
  return 0;
}
