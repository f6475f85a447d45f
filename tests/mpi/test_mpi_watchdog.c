/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_watchdog.c - the watchdog's report over processes.
 *
 * On the mesh i=4, device 3 (the last process's) sleeps 2 s in its body
 * before a psum over 'i' in which the other devices wait for it; the
 * watchdog reports every 0.5 s.  Each process captures its own standard
 * error during the map and checks its reports:
 *   - there is at least one;
 *   - a device another process runs is said to run in that process
 *     ("runs in process P (host H)"), never "not started yet" (which the
 *     report said of every device of another process);
 *   - a device of this process is not said to run elsewhere;
 *   - the fiber-mode hint ("likely cause: ..., which shares its worker
 *     thread, ...") names devices of this process only.
 * Prints "test_mpi_watchdog: process P: ok" and exits 0, or prints the
 * captured reports and what is wrong, and exits 1.  Run by
 * tests/mpi/run.sh on 1, 2 and 4 processes in both scheduling modes.
 */
#include <shmap.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NDEV 4
#define SLEEP_S 2

static int body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *x = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  if (!x)
    return shmap_fail(ctx, "shmap_out_copy: %s", shmap_errmsg());
  if (shmap_ctx_device(ctx) == NDEV - 1) {
    struct timespec ts = {SLEEP_S, 0};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
      ;
  }
  return shmap_psum(ctx, x, "i");
}

static int me;

static void die(const char *what)
{
  fprintf(stderr, "test_mpi_watchdog (process %d): %s: %s\n", me, what,
          shmap_errmsg());
  exit(1);
}

/* The device number a line names after "device ", or -1. */
static int devnum(const char *p)
{
  char *end;
  long d = strtol(p + strlen("device "), &end, 10);
  return end > p + strlen("device ") && d >= 0 && d < NDEV ? (int)d : -1;
}

int main(void)
{
  me = shmap_process_rank();
  shmap_mesh *m;
  if (shmap_mesh_create(&m, "i=4"))
    die("shmap_mesh_create");
  int owner[NDEV];
  for (int d = 0; d < NDEV; d++)
    owner[d] = shmap_mesh_device_process(m, d);
  const float h[NDEV] = {1, 2, 3, 4};
  shmap_array *a, *b;
  if (shmap_array_from_host(&a, SHMAP_F32, 1, (int64_t[]){NDEV}, h))
    die("shmap_array_from_host");
  if (shmap_set_watchdog(0.5))
    die("shmap_set_watchdog");

  /* Standard error into a file for the map. */
  FILE *cap = tmpfile();
  if (!cap)
    die("tmpfile");
  fflush(stderr);
  int saved = dup(2);
  if (saved < 0 || dup2(fileno(cap), 2) < 0)
    die("dup2");
  int rc = shmap_map(m, body, NULL, 1, &a, (const char *[]){"P('i')"}, 1, &b,
                     (const char *[]){"P('i')"});
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  shmap_set_watchdog(0);
  if (rc)
    die("shmap_map");
  float o[NDEV];
  if (shmap_array_to_host(b, o))
    die("shmap_array_to_host");
  for (int d = 0; d < NDEV; d++)
    if (o[d] != 10) {
      fprintf(stderr, "test_mpi_watchdog (process %d): sum %g at %d, not 10\n",
              me, o[d], d);
      return 1;
    }

  static char text[1 << 16];
  rewind(cap);
  size_t n = fread(text, 1, sizeof text - 1, cap);
  text[n] = '\0';
  fclose(cap);

  int fails = 0, reports = 0, remote_lines = 0;
  char *save = NULL;
  static char copy[sizeof text];
  memcpy(copy, text, n + 1);
  for (char *line = strtok_r(copy, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    const char *why = NULL;
    if (strncmp(line, "shmap watchdog:", 15) == 0) {
      reports++;
    } else if (strncmp(line, "  device ", 9) == 0) {
      int d = devnum(line + 2);
      if (d < 0) {
        why = "names no device of the mesh";
      } else if (owner[d] != me) {
        char want[64];
        snprintf(want, sizeof want, ": runs in process %d (host ", owner[d]);
        remote_lines++;
        if (strstr(line, "not started yet"))
          why = "says a device of another process has not started";
        else if (!strstr(line, want))
          why = "does not say which process runs the device";
      } else if (strstr(line, "runs in process")) {
        why = "says a device of this process runs in another";
      }
    } else if (strstr(line, "likely cause:")) {
      for (const char *p = strstr(line, "device "); p;
           p = strstr(p + 1, "device ")) {
        int d = devnum(p);
        if (d >= 0 && owner[d] != me)
          why = "blames a device of another process";
      }
    }
    if (why) {
      fprintf(stderr, "test_mpi_watchdog (process %d): this line %s:\n%s\n",
              me, why, line);
      fails++;
    }
  }
  if (reports == 0) {
    fprintf(stderr, "test_mpi_watchdog (process %d): no watchdog report\n", me);
    fails++;
  }
  int nremote = 0;
  for (int d = 0; d < NDEV; d++)
    nremote += owner[d] != me;
  if (nremote && remote_lines < nremote) {
    fprintf(stderr, "test_mpi_watchdog (process %d): %d lines about the %d "
                    "devices of other processes\n", me, remote_lines, nremote);
    fails++;
  }
  if (fails) {
    fprintf(stderr, "test_mpi_watchdog (process %d): the reports were:\n%s",
            me, text);
    return 1;
  }
  printf("test_mpi_watchdog: process %d: ok (%d reports)\n", me, reports);
  shmap_array_destroy(a);
  shmap_array_destroy(b);
  shmap_mesh_destroy(m);
  return 0;
}
