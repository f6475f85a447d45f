/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_exit.c - processes that stop making the same library calls.
 *
 *   test_mpi_exit MODE
 *
 * Every process maps a psum over a mesh of 4 devices and copies the result
 * to the host, three times.  The last process of the job misbehaves,
 * according to MODE:
 *
 *   ok      it does not: every process prints "ok" and exits with 0.
 *   skip    it skips one shmap_array_to_host and maps instead: every
 *           process gets SHMAP_EMISMATCH naming both calls, prints it,
 *           and the next map and copy work ("recovered", exit 0).
 *   early   it exits after its first map: the others, waiting for it in
 *           shmap_array_to_host, abort the job with a message naming it.
 *   body    device 3 (the last process's) calls exit() in the body: that
 *           process aborts the job at once, saying why.
 *   quit    it calls _exit(0) after its first map, without finalising MPI
 *           (no goodbye): the launcher ends the job.  Open MPI's mpirun
 *           says so and exits with a non-zero status; MPICH's mpiexec
 *           kills the others at once and exits with status 0 without a
 *           message, or with a killed process's signal 9 (shmap-mpi(7)).
 *           Either way no other process finishes.
 *
 * tests/mpi/run.sh checks the exit status and the messages, and that the
 * job ends well within its time limit (the failing modes used to hang).
 */
#include <shmap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *mode;

static int body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  shmap_block *x = shmap_out_copy(ctx, 0, shmap_in(ctx, 0));
  if (!x)
    return shmap_fail(ctx, "shmap_out_copy: %s", shmap_errmsg());
  if (strcmp(mode, "body") == 0 && shmap_ctx_device(ctx) == 3)
    exit(3);
  return shmap_psum(ctx, x, "i");
}

static int map(shmap_mesh *m, shmap_array *a, shmap_array **b)
{
  return shmap_map(m, body, NULL, 1, &a, (const char *[]){"P('i')"}, 1, b,
                   (const char *[]){"P('i')"});
}

static void die(const char *what)
{
  fprintf(stderr, "test_mpi_exit (process %d): %s: %s\n",
          shmap_process_rank(), what, shmap_errmsg());
  exit(1);
}

int main(int argc, char **argv)
{
  if (argc != 2) {
    fprintf(stderr, "usage: test_mpi_exit ok|skip|early|body|quit\n");
    return 2;
  }
  mode = argv[1];
  int me = shmap_process_rank(), last = shmap_process_count() - 1;
  shmap_mesh *m;
  if (shmap_mesh_create(&m, "i=4"))
    die("shmap_mesh_create");
  const float h[4] = {1, 2, 3, 4};
  float o[4];
  shmap_array *a, *b;
  if (shmap_array_from_host(&a, SHMAP_F32, 1, (int64_t[]){4}, h))
    die("shmap_array_from_host");
  for (int it = 0; it < 3; it++) {
    if (map(m, a, &b))
      die("shmap_map");
    if (strcmp(mode, "early") == 0 && me == last && last > 0)
      exit(1);
    if (strcmp(mode, "quit") == 0 && me == last && last > 0)
      _exit(0);
    int rc;
    if (strcmp(mode, "skip") == 0 && it == 1 && me == last && last > 0) {
      shmap_array *c = NULL;
      rc = map(m, a, &c);
      shmap_array_destroy(c);
    } else {
      rc = shmap_array_to_host(b, o);
    }
    shmap_array_destroy(b);
    if (rc == SHMAP_EMISMATCH && strcmp(mode, "skip") == 0 && it == 1) {
      if (!strstr(shmap_errmsg(), "the processes made different library "
                                  "calls")) {
        fprintf(stderr, "test_mpi_exit: unexpected message: %s\n",
                shmap_errmsg());
        return 1;
      }
      printf("process %d: %s\n", me, shmap_errmsg());
      continue;
    }
    if (rc)
      die("shmap_array_to_host");
    for (int k = 0; k < 4; k++)
      if (o[k] != 10.0f) {
        fprintf(stderr, "test_mpi_exit: o[%d] = %g, expected 10\n", k, o[k]);
        return 1;
      }
  }
  printf("process %d: %s\n", me,
         strcmp(mode, "skip") == 0 && last > 0 ? "recovered" : "ok");
  shmap_array_destroy(a);
  if (shmap_mesh_destroy(m))
    die("shmap_mesh_destroy");
  return 0;
}
