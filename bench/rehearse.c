/* SPDX-License-Identifier: MIT */
/*
 * rehearse.c - the cluster rehearsal against this machine: examples 15
 * (collective matmuls), 16 (ring attention) and 17 (the MLP parallelism
 * ladder) run here with SHMAP_REHEARSE set to a fabric file of this
 * machine (written by bench/calibrate), and every map's predicted time is
 * printed beside the time it took here.  Each example runs RUNS times
 * and each map keeps its fastest measured and fastest predicted time (the
 * prediction includes compute measured here, which the machine's other
 * load slows as much as the maps).
 *
 * Usage: bench/rehearse FABRIC.json [RUNS]
 * BENCHMARKS.md shows a run and explains the misses.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef BENCH_EXAMPLES_DIR
#define BENCH_EXAMPLES_DIR "examples"
#endif
#define MAPS_MAX 32

static const char *const examples[] = {"15_collective_matmul",
                                       "16_ring_attention", "17_mlp_ladder"};

typedef struct {
  char mesh[64];
  double predicted, measured;
} row;

/* Fold one report file into rows[], keeping each map's minima. */
static int fold(const char *path, row *rows, int *nrows)
{
  FILE *fp = fopen(path, "r");
  if (fp == NULL)
    return -1;
  char line[1 << 16];
  int k = 0;
  while (fgets(line, sizeof line, fp) && k < MAPS_MAX) {
    json_error_t err;
    json_t *r = json_loads(line, 0, &err);
    if (r == NULL)
      continue;
    double p = json_number_value(json_object_get(r, "predicted_s"));
    double m = json_number_value(json_object_get(r, "measured_here_s"));
    const char *mesh = json_string_value(json_object_get(r, "mesh"));
    if (k >= *nrows) {
      snprintf(rows[k].mesh, sizeof rows[k].mesh, "%s", mesh ? mesh : "?");
      rows[k].predicted = p, rows[k].measured = m;
      *nrows = k + 1;
    } else {
      if (p < rows[k].predicted)
        rows[k].predicted = p;
      if (m < rows[k].measured)
        rows[k].measured = m;
    }
    json_decref(r);
    k++;
  }
  fclose(fp);
  return 0;
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: %s FABRIC.json [RUNS]\n", argv[0]);
    return 2;
  }
  int runs = argc > 2 ? atoi(argv[2]) : 5;
  char out[128], cmd[1024];
  snprintf(out, sizeof out, "/tmp/shmap-bench-rehearse-%d.jsonl",
           (int)getpid());
  printf("%-22s %-4s %-16s %12s %12s %7s\n", "example", "map", "mesh",
         "predicted us", "measured us", "ratio");
  for (size_t e = 0; e < sizeof examples / sizeof *examples; e++) {
    row rows[MAPS_MAX];
    int nrows = 0;
    for (int r = 0; r < runs; r++) {
      unlink(out);
      snprintf(cmd, sizeof cmd,
               "SHMAP_SCHED=threads SHMAP_REHEARSE='%s' SHMAP_REHEARSE_OUT=%s "
               "%s/%s >/dev/null",
               argv[1], out, BENCH_EXAMPLES_DIR, examples[e]);
      if (system(cmd) != 0 || fold(out, rows, &nrows) < 0) {
        fprintf(stderr, "%s failed\n", examples[e]);
        return 1;
      }
    }
    double tp = 0, tm = 0;
    for (int k = 0; k < nrows; k++) {
      printf("%-22s %-4d %-16s %12.1f %12.1f %7.2f\n", examples[e], k + 1,
             rows[k].mesh, rows[k].predicted * 1e6, rows[k].measured * 1e6,
             rows[k].predicted / rows[k].measured);
      tp += rows[k].predicted, tm += rows[k].measured;
    }
    printf("%-22s %-4s %-16s %12.1f %12.1f %7.2f\n", examples[e], "all", "",
           tp * 1e6, tm * 1e6, tp / tm);
  }
  unlink(out);
  return 0;
}
