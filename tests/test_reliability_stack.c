/* SPDX-License-Identifier: MIT */
/*
 * test_reliability_stack.c - device stacks, in both scheduling modes:
 *   - a body that keeps a 700 KiB buffer on its stack while it calls
 *     collectives finds the buffer intact afterwards (fiber stacks are 4 MiB
 *     by default; they were 1 MiB and a neighbour's frames overwrote it);
 *   - a body that recurses past its stack (SHMAP_STACK_SIZE=64k) dies of
 *     SIGSEGV in a child process, after the library named the device on
 *     stderr (with AddressSanitizer, which reports stack overflows itself,
 *     only the death is checked);
 *   - a single frame of 512 KiB on a 64 KiB stack, whose first write is its
 *     lowest byte (it lands some 450 KiB below the stack, in the gap below
 *     it; with a 64 KiB guard it landed in another device's stack and went
 *     unnoticed), and a 16 MiB frame built with stack probes: SIGSEGV after
 *     the message, and no other device's stack buffer changed.
 */
#include <check.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stackframe.h"
#include "testutil.h"

#define TIMEOUT 120
#define BIG (700 << 10)

/* Under a sanitizer (TU_SANITIZED) the overflowing child ends with the
 * sanitizer's status, not SIGSEGV: ThreadSanitizer reports the overflow
 * after the library's handler has named the device; AddressSanitizer
 * catches a deep recursion's overflow before the library sees it. */

static const char *const modes[2] = {"threads", "fibers"};

static int body_big(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  volatile unsigned char buf[BIG];
  int dev = shmap_ctx_device(ctx);
  for (int i = 0; i < BIG; i++)
    buf[i] = (unsigned char)(i * 7 + dev);
  for (int c = 0; c < 4; c++) {
    float v = (float)dev;
    shmap_block b = {&v, SHMAP_F32, 0, {0}};
    int rc = shmap_psum(ctx, &b, "i");
    if (rc)
      return rc;
  }
  for (int i = 0; i < BIG; i++)
    if (buf[i] != (unsigned char)(i * 7 + dev))
      return shmap_fail(ctx, "stack buffer byte %d changed", i);
  return 0;
}

START_TEST(test_big_stack_buffer)
{
  for (int m = 0; m < 2; m++) {
    ck_assert_int_eq(setenv("SHMAP_SCHED", modes[m], 1), 0);
    /* More devices than workers, so fibers share threads. */
    ck_assert_int_eq(setenv("SHMAP_WORKERS", "2", 1), 0);
    shmap_mesh *mesh = tu_mesh_new("i=8");
    for (int r = 0; r < 3; r++)
      tu_map_ok(shmap_map(mesh, body_big, NULL, 0, NULL, NULL, 0, NULL, NULL),
                modes[m]);
    shmap_mesh_destroy(mesh);
  }
}
END_TEST

/* Recursion that touches every 512 bytes of each 4 KiB frame from the top
 * down, so the first touch below the stack lands in its guard. */
static int deep(int n)
{
  volatile char buf[4096];
  for (int i = 4095; i >= 0; i -= 512)
    buf[i] = (char)n;
  return n <= 0 ? buf[0] : deep(n - 1) + buf[512];
}

/* Runs `body` on mesh `text` in a child process, in mode m, with 64 KiB
 * stacks and `workers` workers; *status gets the child's status, and the
 * result is what it wrote to stderr (to free). */
static char *run_child(int m, const char *text, const char *workers,
                       shmap_body_fn body, int *status)
{
  char path[] = "/tmp/shmap_stack_errXXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  fflush(stderr);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    struct rlimit nocore = {0, 0};
    setrlimit(RLIMIT_CORE, &nocore);
    alarm(60);
    dup2(fd, 2);
    setenv("SHMAP_SCHED", modes[m], 1);
    setenv("SHMAP_STACK_SIZE", "64k", 1);
    setenv("SHMAP_WORKERS", workers, 1);
    shmap_mesh *mesh = NULL;
    if (shmap_mesh_create(&mesh, text) != 0)
      _exit(3);
    int rc = shmap_map(mesh, body, NULL, 0, NULL, NULL, 0, NULL, NULL);
    fprintf(stderr, "the map returned %d: %s\n", rc, shmap_errmsg());
    _exit(4); /* not reached: the overflow kills the process */
  }
  close(fd);
  ck_assert_int_eq(waitpid(pid, status, 0), pid);
  char *err = tu_slurp(path, NULL);
  unlink(path);
  ck_assert_ptr_nonnull(err);
  return err;
}

/* The child of run_child died of its overflow (SIGSEGV; under a sanitizer,
 * whatever the sanitizer ends it with), after the library's message naming
 * device 2 when `named`. */
static void expect_died(int m, const char *what, int status, const char *err,
                        bool named)
{
  if (TU_SANITIZED)
    ck_assert_msg(!WIFEXITED(status) || WEXITSTATUS(status) != 0,
                  "%s, %s: the overflowing child exited with 0", modes[m],
                  what);
  else
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
                  "%s, %s: child status 0x%x, stderr:\n%s", modes[m], what,
                  status, err);
  if (!named)
    return;
  char want[200];
  snprintf(want, sizeof want, "shmap: device 2 (i=2) overflowed its %s",
           m ? "fiber stack of 65536 bytes" : "thread stack");
  ck_assert_msg(strstr(err, want) != NULL, "%s, %s: stderr lacks \"%s\":\n%s",
                modes[m], what, want, err);
}

static int body_overflow(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  float v = 1;
  shmap_block b = {&v, SHMAP_F32, 0, {0}};
  int rc = shmap_psum(ctx, &b, "i");
  if (rc)
    return rc;
  if (shmap_ctx_device(ctx) == 2)
    return deep(1 << 20);
  return shmap_psum(ctx, &b, "i");
}

START_TEST(test_overflow_names_device)
{
  for (int m = 0; m < 2; m++) {
    int status = 0;
    char *err = run_child(m, "i=4", "2", body_overflow, &status);
    expect_died(m, "deep recursion", status, err, !TU_ASAN);
    ck_assert_msg(TU_ASAN || strstr(err, "SHMAP_STACK_SIZE"),
                  "%s: stderr does not name SHMAP_STACK_SIZE:\n%s", modes[m],
                  err);
    free(err);
  }
}
END_TEST

/* ---- one large frame ------------------------------------------------------ */

#define KEEP (16 << 10)       /* a buffer each device keeps on its stack */
#define FRAME ((size_t)512 << 10) /* the overflowing frame, without probes */

/* A frame of FRAME bytes whose first writes are its lowest 16 KiB, from
 * the bottom up: nothing touches the pages between it and the stack. */
__attribute__((noinline)) static int big_frame(int seed)
{
  volatile unsigned char big[FRAME];
  for (size_t i = 0; i < ((size_t)16 << 10); i++)
    big[i] = (unsigned char)(seed + (int)i);
  return big[(size_t)seed % FRAME];
}

static int (*frame_fn)(int);

static unsigned char pattern(int i, int dev)
{
  return (unsigned char)(i * 13 + dev * 101 + 7);
}

/* Every device keeps KEEP bytes on its stack across two psums; device 2
 * calls frame_fn between them.  A device whose buffer changed says so. */
static int body_frame(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  volatile unsigned char buf[KEEP];
  int dev = shmap_ctx_device(ctx);
  for (int i = 0; i < KEEP; i++)
    buf[i] = pattern(i, dev);
  float v = 1;
  shmap_block b = {&v, SHMAP_F32, 0, {0}};
  int rc = shmap_psum(ctx, &b, "i");
  if (rc)
    return rc;
  if (dev == 2)
    v += (float)frame_fn(dev);
  rc = shmap_psum(ctx, &b, "i");
  if (rc)
    return rc;
  int changed = 0;
  for (int i = 0; i < KEEP; i++)
    changed += buf[i] != pattern(i, dev);
  if (changed)
    return shmap_fail(ctx, "device %d: %d bytes of its stack buffer changed",
                      dev, changed);
  return 0;
}

/* Runs body_frame on i=8 in mode m (one worker), with fn as device 2's
 * frame; checks the child died after the library named device 2 and that
 * no device's buffer changed. */
static void expect_caught(int m, int (*fn)(int), const char *what)
{
  frame_fn = fn; /* the child inherits it */
  int status = 0;
  char *err = run_child(m, "i=8", "1", body_frame, &status);
  ck_assert_msg(!strstr(err, "changed") && !strstr(err, "the map returned"),
                "%s, %s: the overflow went unnoticed:\n%s", modes[m], what,
                err);
  expect_died(m, what, status, err, true);
  free(err);
}

START_TEST(test_large_frame_caught)
{
  for (int m = 0; m < 2; m++)
    expect_caught(m, big_frame, "512 KiB frame");
}
END_TEST

START_TEST(test_probed_frame_caught)
{
#ifdef STACK_PROBED
  for (int m = 0; m < 2; m++)
    expect_caught(m, tu_probed_frame, "16 MiB frame with stack probes");
#else
  fprintf(stderr, "test_reliability_stack: the compiler has no "
                  "-fstack-clash-protection; the probed frame is not run\n");
#endif
}
END_TEST

int main(void)
{
  Suite *s = suite_create("reliability_stack");
  TCase *tc = tcase_create("stacks");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, test_big_stack_buffer);
  tcase_add_test(tc, test_overflow_names_device);
  tcase_add_test(tc, test_large_frame_caught);
  tcase_add_test(tc, test_probed_frame_caught);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
