/* SPDX-License-Identifier: MIT */
/*
 * test_reliability_stack.c - device stacks, in both scheduling modes:
 *   - a body that keeps a 700 KiB buffer on its stack while it calls
 *     collectives finds the buffer intact afterwards (fiber stacks are 4 MiB
 *     by default; they were 1 MiB and a neighbour's frames overwrote it);
 *   - a body that recurses past its stack (SHMAP_STACK_SIZE=64k) dies of
 *     SIGSEGV in a child process, after the library named the device on
 *     stderr (with AddressSanitizer, which reports stack overflows itself,
 *     only the death is checked).
 */
#include <check.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define TIMEOUT 120
#define BIG (700 << 10)

#if defined(__SANITIZE_ADDRESS__)
#define ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN 1
#endif
#endif
/* ThreadSanitizer handles SIGSEGV itself: once the library's handler has
 * named the device, TSan reports the overflow too and exits with its own
 * status instead of the signal. */
#if defined(__SANITIZE_THREAD__)
#define TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN 1
#endif
#endif

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
    char path[] = "/tmp/shmap_stack_errXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
      dup2(fd, 2);
      setenv("SHMAP_SCHED", modes[m], 1);
      setenv("SHMAP_STACK_SIZE", "64k", 1);
      setenv("SHMAP_WORKERS", "2", 1);
      shmap_mesh *mesh = NULL;
      if (shmap_mesh_create(&mesh, "i=4") != 0)
        _exit(3);
      shmap_map(mesh, body_overflow, NULL, 0, NULL, NULL, 0, NULL, NULL);
      _exit(4); /* not reached: the overflow kills the process */
    }
    close(fd);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    char *err = tu_slurp(path, NULL);
    unlink(path);
    ck_assert_ptr_nonnull(err);
#ifdef ASAN
    ck_assert_msg(!WIFEXITED(status) || WEXITSTATUS(status) != 0,
                  "%s: the overflowing child exited with 0", modes[m]);
#else
#ifdef TSAN
    ck_assert_msg(!WIFEXITED(status) || WEXITSTATUS(status) != 0,
                  "%s: the overflowing child exited with 0", modes[m]);
#else
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
                  "%s: child status 0x%x, stderr:\n%s", modes[m], status, err);
#endif
    char want[200];
    snprintf(want, sizeof want, "shmap: device 2 (i=2) overflowed its %s",
             m ? "fiber stack of 65536 bytes" : "thread stack");
    ck_assert_msg(strstr(err, want) && strstr(err, "SHMAP_STACK_SIZE"),
                  "%s: stderr lacks \"%s\":\n%s", modes[m], want, err);
#endif
    free(err);
  }
}
END_TEST

int main(void)
{
  Suite *s = suite_create("reliability_stack");
  TCase *tc = tcase_create("stacks");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, test_big_stack_buffer);
  tcase_add_test(tc, test_overflow_names_device);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
