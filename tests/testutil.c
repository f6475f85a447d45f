/* SPDX-License-Identifier: MIT */
/*
 * testutil.c - helpers shared by the Check test programs (see testutil.h).
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

shmap_mesh *tu_mesh_new(const char *text)
{
  shmap_mesh *m = NULL;
  int rc = shmap_mesh_create(&m, text);
  ck_assert_msg(rc == 0 && m, "shmap_mesh_create(\"%s\") = %d: %s", text, rc,
                shmap_errmsg());
  return m;
}

shmap_array *tu_array_from_host(shmap_dtype dt, int rank,
                                const int64_t shape[], const void *data)
{
  shmap_array *a = NULL;
  int rc = shmap_array_from_host(&a, dt, rank, shape, data);
  ck_assert_msg(rc == 0 && a, "shmap_array_from_host = %d: %s", rc,
                shmap_errmsg());
  return a;
}

shmap_array *tu_array_from_block(const shmap_block *b)
{
  return tu_array_from_host(b->dtype, b->rank, b->shape, b->data);
}

void *tu_array_to_host(const shmap_array *a, size_t *nbytes)
{
  size_t n = (size_t)shmap_array_numel(a) *
             shmap_dtype_size(shmap_array_dtype(a));
  void *p = malloc(n ? n : 1);
  ck_assert_ptr_nonnull(p);
  int rc = shmap_array_to_host(a, p);
  ck_assert_msg(rc == 0, "shmap_array_to_host = %d: %s", rc, shmap_errmsg());
  if (nbytes)
    *nbytes = n;
  return p;
}

void tu_array_to_block(const shmap_array *a, shmap_block *got,
                       const char *what)
{
  ck_assert_msg(a != NULL, "%s: no output array", what);
  memset(got, 0, sizeof *got);
  got->dtype = shmap_array_dtype(a);
  got->rank = shmap_array_rank(a);
  ck_assert_msg(got->rank >= 0 && got->rank <= SHMAP_MAX_RANK,
                "%s: output rank %d", what, got->rank);
  const int64_t *sh = shmap_array_shape(a);
  for (int d = 0; d < got->rank; d++)
    got->shape[d] = sh[d];
  size_t nb = shmap_dtype_size(got->dtype);
  for (int d = 0; d < got->rank; d++)
    nb *= (size_t)got->shape[d];
  got->data = calloc(nb ? nb : 1, 1);
  ck_assert_ptr_nonnull(got->data);
  int rc = shmap_array_to_host(a, got->data);
  ck_assert_msg(rc == 0, "%s: shmap_array_to_host = %d", what, rc);
}

void tu_set_sched(int index)
{
  ck_assert_int_eq(setenv("SHMAP_SCHED", index % 2 ? "fibers" : "threads", 1),
                   0);
}

shmap_array *tu_arange_f32(int rank, const int64_t shape[])
{
  int64_t n = 1;
  for (int d = 0; d < rank; d++)
    n *= shape[d];
  float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
  ck_assert_ptr_nonnull(x);
  for (int64_t e = 0; e < n; e++)
    x[e] = (float)e;
  shmap_array *a = tu_array_from_host(SHMAP_F32, rank, shape, x);
  free(x);
  return a;
}

void tu_map_ok(int rc, const char *what)
{
  ck_assert_msg(rc == 0, "%s: shmap_map = %d (%s): %s", what, rc,
                shmap_strerror(rc), shmap_errmsg());
}

void tu_sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0)
    ;
}

char *tu_slurp(const char *path, size_t *len)
{
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t cap = 1 << 16, n = 0, r;
  char *s = malloc(cap);
  while (s && (r = fread(s + n, 1, cap - n - 1, f)) > 0) {
    n += r;
    if (n == cap - 1) {
      char *t = realloc(s, cap * 2);
      if (!t)
        free(s);
      s = t;
      cap *= 2;
    }
  }
  fclose(f);
  if (s)
    s[n] = '\0';
  if (len)
    *len = n;
  return s;
}

int tu_run_suite(Suite *s)
{
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
