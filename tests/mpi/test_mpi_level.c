/* SPDX-License-Identifier: MIT */
/*
 * test_mpi_level.c - a program that initialises MPI itself: the library
 * uses that MPI (and leaves finalising to the program), and refuses
 * clearly when the thread level the program asked for is too low.
 *
 * argv[1] is the level to request: "multiple" or "funneled".
 */
#include <shmap.h>

#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int ok_body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int64_t one = 1;
  shmap_block *b = shmap_out(ctx, 0, SHMAP_I32, 1, &one);
  if (!b)
    return -1;
  *(int32_t *)b->data = shmap_ctx_device(ctx) * 3;
  return 0;
}

int main(int argc, char **argv)
{
  int want = argc > 1 && strcmp(argv[1], "funneled") == 0 ? MPI_THREAD_FUNNELED
                                                          : MPI_THREAD_MULTIPLE;
  int provided = 0, size = 0, failures = 0;
  MPI_Init_thread(&argc, &argv, want, &provided);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  shmap_mesh *m = NULL;
  int rc = shmap_mesh_create(&m, "i=4");
  if (provided < MPI_THREAD_MULTIPLE) {
    const char *msg = "MPI provides the thread level MPI_THREAD_FUNNELED but "
                      "libshmap needs MPI_THREAD_MULTIPLE (its devices call "
                      "MPI from several threads): initialise MPI with "
                      "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let "
                      "libshmap initialise it";
    if (rc != SHMAP_ESTATE || strcmp(shmap_errmsg(), msg) != 0) {
      fprintf(stderr, "low thread level: rc %d, message: %s\n", rc,
              shmap_errmsg());
      failures++;
    }
  } else {
    /* The program's MPI is the library's: the job's processes share the
     * devices, and the program finalises. */
    const char *spec = "P('i')";
    shmap_array *out = NULL;
    int32_t got[4] = {0};
    if (rc == 0)
      rc = shmap_map(m, ok_body, NULL, 0, NULL, NULL, 1, &out, &spec);
    if (rc == 0)
      rc = shmap_array_to_host(out, got);
    if (rc != 0 || shmap_process_count() != size || got[3] != 9) {
      fprintf(stderr, "program's MPI: rc %d (%s), count %d of %d, got %d\n",
              rc, shmap_errmsg(), shmap_process_count(), size, got[3]);
      failures++;
    }
    shmap_array_destroy(out);
    shmap_mesh_destroy(m);
  }
  MPI_Finalize();
  return failures ? 1 : 0;
}
