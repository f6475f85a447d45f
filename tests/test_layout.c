/* SPDX-License-Identifier: MIT */
/*
 * test_layout.c - the index math of src/layout.c against hand-computed
 * values (SEMANTICS.md §3, §5, and the groups of §6), then against the
 * reference model on random meshes and specs.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "refmodel.h"
#include "testutil.h"

#define TIMEOUT 30

/* Build a spec by hand: entries are strings of axis numbers, "-" for an
 * unsplit entry ("01" = (axis 0, axis 1)). */
static shmap__spec mkspec(int ndims, const char *const e[]) {
  shmap__spec s;
  memset(&s, 0, sizeof s);
  s.ndims = ndims;
  for (int d = 0; d < ndims; d++)
    for (const char *q = e[d]; *q; q++)
      if (*q != '-')
        s.axes[d][s.naxes[d]++] = *q - '0';
  return s;
}

#define E(...) ((const char *const[]){__VA_ARGS__})

START_TEST(numel_strides) {
  int64_t shape[3] = {2, 3, 4}, st[3];
  int64_t one[1] = {7}, st1[1];
  ck_assert_int_eq(shmap__numel(3, shape), 24);
  ck_assert_int_eq(shmap__numel(0, shape), 1);
  ck_assert_int_eq(shmap__numel(1, one), 7);
  shmap__strides(3, shape, st);
  ck_assert_int_eq(st[0], 12);
  ck_assert_int_eq(st[1], 4);
  ck_assert_int_eq(st[2], 1);
  shmap__strides(1, one, st1);
  ck_assert_int_eq(st1[0], 1);
  shmap__strides(0, shape, st); /* must not touch anything */
}
END_TEST

START_TEST(entry_count_index) {
  shmap_mesh *m = tu_mesh_new("i=2, j=2");
  /* P(('j','i')) */
  shmap__spec s = mkspec(1, E("10"));
  int c[2];
  ck_assert_int_eq(shmap__entry_count(m, &s, 0), 4);
  ck_assert_int_eq(shmap__entry_count(m, &s, 1), 1); /* past the end */
  ck_assert_int_eq(shmap__entry_count(m, &s, 5), 1);
  /* coords (i=1, j=0): c(j)*2 + c(i) = 1 */
  c[0] = 1;
  c[1] = 0;
  ck_assert_int_eq(shmap__entry_index(m, &s, 0, c), 1);
  c[0] = 0;
  c[1] = 1;
  ck_assert_int_eq(shmap__entry_index(m, &s, 0, c), 2);
  c[0] = 1;
  c[1] = 1;
  ck_assert_int_eq(shmap__entry_index(m, &s, 0, c), 3);
  c[0] = 0;
  c[1] = 0;
  ck_assert_int_eq(shmap__entry_index(m, &s, 0, c), 0);
  c[0] = 1;
  c[1] = 1;
  ck_assert_int_eq(shmap__entry_index(m, &s, 1, c), 0);
  /* P(('i','j')): first axis major */
  s = mkspec(1, E("01"));
  c[0] = 1;
  c[1] = 0;
  ck_assert_int_eq(shmap__entry_index(m, &s, 0, c), 2);
  shmap_mesh_destroy(m);

  m = tu_mesh_new("a=3, b=2, c=4");
  /* P(None, ('c','a','b'), 'b'-less) */
  s = mkspec(2, E("-", "201"));
  ck_assert_int_eq(shmap__entry_count(m, &s, 0), 1);
  ck_assert_int_eq(shmap__entry_count(m, &s, 1), 24);
  {
    int cc[3] = {2, 1, 3}; /* a=2, b=1, c=3 */
    /* ((c*3)+a)*2+b = ((3*3)+2)*2+1 = 23 */
    ck_assert_int_eq(shmap__entry_index(m, &s, 1, cc), 23);
    ck_assert_int_eq(shmap__entry_index(m, &s, 0, cc), 0);
    cc[0] = 1;
    cc[1] = 0;
    cc[2] = 2; /* ((2*3)+1)*2+0 = 14 */
    ck_assert_int_eq(shmap__entry_index(m, &s, 1, cc), 14);
  }
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(shapes_offsets) {
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  shmap__spec s = mkspec(2, E("0", "1")); /* P('i','j') */
  int64_t g[2] = {12, 12}, b[2], gg[2], off[2];
  int c[2];
  shmap__block_shape(m, &s, 2, g, b);
  ck_assert_int_eq(b[0], 3);
  ck_assert_int_eq(b[1], 6);
  shmap__global_shape("test", m, &s, 2, b, gg);
  ck_assert_int_eq(gg[0], 12);
  ck_assert_int_eq(gg[1], 12);
  c[0] = 2;
  c[1] = 1; /* device 5 */
  shmap__block_offset(m, &s, 2, b, c, off);
  ck_assert_int_eq(off[0], 6);
  ck_assert_int_eq(off[1], 6);

  /* P('i', None) on (12,12): blocks (3,12); out P('i','j') of a (3,12)
   * block: (12,24). */
  s = mkspec(2, E("0", "-"));
  shmap__block_shape(m, &s, 2, g, b);
  ck_assert_int_eq(b[0], 3);
  ck_assert_int_eq(b[1], 12);
  s = mkspec(2, E("0", "1"));
  shmap__global_shape("test", m, &s, 2, b, gg);
  ck_assert_int_eq(gg[0], 12);
  ck_assert_int_eq(gg[1], 24);

  /* P(None, ('j','i')) on (5, 16): blocks (5, 2); device (i=3, j=1) has
   * index 1*4+3 = 7, offset 14. */
  s = mkspec(2, E("-", "10"));
  g[0] = 5;
  g[1] = 16;
  shmap__block_shape(m, &s, 2, g, b);
  ck_assert_int_eq(b[0], 5);
  ck_assert_int_eq(b[1], 2);
  c[0] = 3;
  c[1] = 1;
  shmap__block_offset(m, &s, 2, b, c, off);
  ck_assert_int_eq(off[0], 0);
  ck_assert_int_eq(off[1], 14);

  /* a short spec pads with unsplit entries: P('j') on rank 3 */
  {
    int64_t g3[3] = {4, 5, 6}, b3[3], gg3[3], off3[3];
    s = mkspec(1, E("1"));
    shmap__block_shape(m, &s, 3, g3, b3);
    ck_assert_int_eq(b3[0], 2);
    ck_assert_int_eq(b3[1], 5);
    ck_assert_int_eq(b3[2], 6);
    shmap__global_shape("test", m, &s, 3, b3, gg3);
    ck_assert_int_eq(gg3[0], 4);
    ck_assert_int_eq(gg3[1], 5);
    ck_assert_int_eq(gg3[2], 6);
    c[0] = 3;
    c[1] = 1;
    shmap__block_offset(m, &s, 3, b3, c, off3);
    ck_assert_int_eq(off3[0], 2);
    ck_assert_int_eq(off3[1], 0);
    ck_assert_int_eq(off3[2], 0);
  }
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(rank0) {
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  shmap__spec s = mkspec(0, NULL);
  int64_t g[1] = {-7}, b[1] = {-7}, off[1] = {-7};
  int c[2] = {3, 1};
  ck_assert_int_eq(shmap__entry_count(m, &s, 0), 1);
  ck_assert_int_eq(shmap__entry_index(m, &s, 0, c), 0);
  shmap__block_shape(m, &s, 0, g, b);
  ck_assert_int_eq(b[0], -7); /* nothing written */
  shmap__global_shape("test", m, &s, 0, b, g);
  ck_assert_int_eq(g[0], -7);
  shmap__block_offset(m, &s, 0, b, c, off);
  ck_assert_int_eq(off[0], -7);
  ck_assert_int_eq(shmap__spec_axes_mask(&s), 0);
  /* rank-0 copy: one element */
  {
    float src = 2.5f, dst = 0.0f;
    double dsrc = -1.25, ddst = 0.0;
    int64_t none[1] = {0};
    shmap__copy_box(&dst, none, &src, none, 0, none, sizeof(float));
    ck_assert(dst == 2.5f);
    shmap__copy_box(&ddst, none, &dsrc, none, 0, none, sizeof(double));
    ck_assert(ddst == -1.25);
  }
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(mask_representative) {
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  shmap__spec s = mkspec(1, E("10"));
  ck_assert_uint_eq(shmap__spec_axes_mask(&s), 3u);
  s = mkspec(2, E("-", "1"));
  ck_assert_uint_eq(shmap__spec_axes_mask(&s), 2u);
  s = mkspec(3, E("-", "0", "-"));
  ck_assert_uint_eq(shmap__spec_axes_mask(&s), 1u);
  /* device 7 = (3,1) */
  ck_assert_int_eq(shmap__representative(m, 2u, 7), 1);
  ck_assert_int_eq(shmap__representative(m, 1u, 7), 6);
  ck_assert_int_eq(shmap__representative(m, 0u, 7), 0);
  ck_assert_int_eq(shmap__representative(m, 3u, 7), 7);
  ck_assert_int_eq(shmap__representative(m, 1u, 5), 4); /* (2,1)->(2,0) */
  ck_assert_int_eq(shmap__representative(m, 2u, 4), 0); /* (2,0)->(0,0) */
  shmap_mesh_destroy(m);

  m = tu_mesh_new("a=2, b=3, c=2");
  /* device 11 = (1,2,1); keep b: (0,2,0) = 4; keep a,c: (1,0,1) = 7 */
  ck_assert_int_eq(shmap__representative(m, 2u, 11), 4);
  ck_assert_int_eq(shmap__representative(m, 5u, 11), 7);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(group_hand) {
  shmap_mesh *m = tu_mesh_new("i=2, j=3, k=2");
  int members[12], rank = -1, n;
  /* device 11 = (1,2,1) */
  n = shmap__group(m, (const int[]){1}, 1, 11, members, &rank);
  ck_assert_int_eq(n, 3);
  ck_assert_int_eq(rank, 2);
  ck_assert_int_eq(members[0], 7);
  ck_assert_int_eq(members[1], 9);
  ck_assert_int_eq(members[2], 11);
  /* over (k, i), k major: rank 1*2+1 = 3; members (i,2,k) for
   * (k,i) = (0,0),(0,1),(1,0),(1,1) */
  n = shmap__group(m, (const int[]){2, 0}, 2, 11, members, &rank);
  ck_assert_int_eq(n, 4);
  ck_assert_int_eq(rank, 3);
  ck_assert_int_eq(members[0], 4);
  ck_assert_int_eq(members[1], 10);
  ck_assert_int_eq(members[2], 5);
  ck_assert_int_eq(members[3], 11);
  /* over (i, k) for device 4 = (0,2,0) */
  n = shmap__group(m, (const int[]){0, 2}, 2, 4, members, &rank);
  ck_assert_int_eq(n, 4);
  ck_assert_int_eq(rank, 0);
  ck_assert_int_eq(members[0], 4);
  ck_assert_int_eq(members[1], 5);
  ck_assert_int_eq(members[2], 10);
  ck_assert_int_eq(members[3], 11);
  /* no axes: the device alone */
  n = shmap__group(m, NULL, 0, 6, members, &rank);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(rank, 0);
  ck_assert_int_eq(members[0], 6);
  /* all axes: everyone, rank = device number */
  n = shmap__group(m, (const int[]){0, 1, 2}, 3, 9, members, &rank);
  ck_assert_int_eq(n, 12);
  ck_assert_int_eq(rank, 9);
  for (int r = 0; r < 12; r++)
    ck_assert_int_eq(members[r], r);
  /* members may be NULL */
  rank = -1;
  n = shmap__group(m, (const int[]){1, 0}, 2, 9, NULL, &rank);
  ck_assert_int_eq(n, 6);
  ck_assert_int_eq(rank, 1 * 2 + 1); /* device 9 = (1,1,1): c(j)*2+c(i) */
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(copy_box_2d) {
  int32_t src[4][5], dst[2][3];
  int64_t sst[2] = {5, 1}, dstst[2] = {3, 1}, shape[2] = {2, 3};
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 5; c++)
      src[r][c] = r * 10 + c;
  memset(dst, 0, sizeof dst);
  shmap__copy_box(dst, dstst, &src[1][1], sst, 2, shape, sizeof(int32_t));
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < 3; c++)
      ck_assert_int_eq(dst[r][c], (r + 1) * 10 + (c + 1));
}
END_TEST

START_TEST(copy_box_into_strided) {
  double big[6][7], src[2][3];
  int64_t bst[2] = {7, 1}, sst[2] = {3, 1}, shape[2] = {2, 3};
  for (int r = 0; r < 6; r++)
    for (int c = 0; c < 7; c++)
      big[r][c] = -1.0;
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < 3; c++)
      src[r][c] = r + c * 0.5;
  shmap__copy_box(&big[2][3], bst, src, sst, 2, shape, sizeof(double));
  for (int r = 0; r < 6; r++)
    for (int c = 0; c < 7; c++) {
      int in = r >= 2 && r < 4 && c >= 3 && c < 6;
      double want = in ? (r - 2) + (c - 3) * 0.5 : -1.0;
      ck_assert_msg(big[r][c] == want, "big[%d][%d] = %g, want %g", r, c,
                    big[r][c], want);
    }
}
END_TEST

START_TEST(copy_box_transpose) {
  /* A destination view with strides {1, 3} over a 4x3 buffer receives the
   * transpose of a 3x4 source. */
  int64_t src[3][4], dst[4][3];
  int64_t sst[2] = {4, 1}, dstst[2] = {1, 3}, shape[2] = {3, 4};
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 4; c++)
      src[r][c] = (int64_t)1 << 40 | (r * 4 + c);
  memset(dst, 0, sizeof dst);
  shmap__copy_box(dst, dstst, src, sst, 2, shape, sizeof(int64_t));
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 4; c++)
      ck_assert(dst[c][r] == src[r][c]);
}
END_TEST

START_TEST(copy_box_3d_gaps) {
  /* every other element of a 2x3x8 source, into every third of a larger
   * destination */
  float src[2][3][8], dst[2][3][12];
  int64_t sst[3] = {24, 8, 2}, dstst[3] = {36, 12, 3}, shape[3] = {2, 3, 4};
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 8; c++)
        src[a][b][c] = (float)(a * 100 + b * 10 + c);
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 12; c++)
        dst[a][b][c] = -1.0f;
  shmap__copy_box(dst, dstst, src, sst, 3, shape, sizeof(float));
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 12; c++) {
        float want = c % 3 == 0 ? src[a][b][(c / 3) * 2] : -1.0f;
        ck_assert_msg(dst[a][b][c] == want, "dst[%d][%d][%d] = %g, want %g",
                      a, b, c, dst[a][b][c], want);
      }
}
END_TEST

START_TEST(copy_box_1d) {
  int32_t src[10], dst[10];
  int64_t one[1] = {1}, shape[1] = {10};
  for (int i = 0; i < 10; i++) {
    src[i] = i * 7;
    dst[i] = 0;
  }
  shmap__copy_box(dst, one, src, one, 1, shape, sizeof(int32_t));
  for (int i = 0; i < 10; i++)
    ck_assert_int_eq(dst[i], i * 7);
}
END_TEST

/* Random meshes and specs: the layout functions agree with the model. */
START_TEST(random_vs_model) {
  uint64_t rng = 777;
  static const char *const pool[] = {"i", "j", "k", "l"};
  for (int t = 0; t < 300; t++) {
    ref_mesh rm;
    ref_spec rs;
    shmap__spec s;
    shmap_mesh *m = NULL;
    const char *names[4];
    int rank = t_rng_range(&rng, 0, 4);
    int ndev;
    unsigned mask;
    memset(&rm, 0, sizeof rm);
    memset(&rs, 0, sizeof rs);
    memset(&s, 0, sizeof s);
    rm.naxes = t_rng_range(&rng, 1, 4);
    for (int a = 0; a < rm.naxes; a++) {
      rm.sizes[a] = t_rng_range(&rng, 1, 3);
      names[a] = pool[a];
    }
    ck_assert_int_eq(shmap_mesh_create_axes(&m, rm.naxes, names, rm.sizes), 0);
    ndev = ref_ndev(&rm);
    rs.ndims = rank == 0 ? 0 : t_rng_range(&rng, 0, rank);
    for (int a = 0; a < rm.naxes; a++)
      if (rs.ndims > 0 && t_rng_range(&rng, 0, 1)) {
        int d = t_rng_range(&rng, 0, rs.ndims - 1);
        /* insert at a random position of the entry */
        int pos = t_rng_range(&rng, 0, rs.naxes[d]);
        for (int k = rs.naxes[d]; k > pos; k--)
          rs.axes[d][k] = rs.axes[d][k - 1];
        rs.axes[d][pos] = a;
        rs.naxes[d]++;
      }
    s.ndims = rs.ndims;
    for (int d = 0; d < rs.ndims; d++) {
      s.naxes[d] = rs.naxes[d];
      for (int k = 0; k < rs.naxes[d]; k++)
        s.axes[d][k] = rs.axes[d][k];
    }
    mask = ref_spec_mask(&rs);
    ck_assert_uint_eq(shmap__spec_axes_mask(&s), mask);
    {
      int64_t bshape[8], gshape[8], got[8], off[8];
      for (int d = 0; d < rank; d++)
        bshape[d] = t_rng_range(&rng, 1, 3);
      ref_global_shape(&rm, &rs, rank, bshape, gshape);
      shmap__global_shape("test", m, &s, rank, bshape, got);
      for (int d = 0; d < rank; d++)
        ck_assert_int_eq(got[d], gshape[d]);
      shmap__block_shape(m, &s, rank, gshape, got);
      for (int d = 0; d < rank; d++)
        ck_assert_int_eq(got[d], bshape[d]);
      for (int d = 0; d <= rank; d++)
        ck_assert_int_eq(shmap__entry_count(m, &s, d), ref_count(&rm, &rs, d));
      for (int dev = 0; dev < ndev; dev++) {
        int c[8], crep[8];
        ref_coords(&rm, dev, c);
        for (int d = 0; d < rank; d++)
          ck_assert_int_eq(shmap__entry_index(m, &s, d, c),
                           ref_index(&rm, &rs, d, c));
        shmap__block_offset(m, &s, rank, bshape, c, off);
        for (int d = 0; d < rank; d++)
          ck_assert_int_eq(off[d], ref_index(&rm, &rs, d, c) * bshape[d]);
        for (int a = 0; a < rm.naxes; a++)
          crep[a] = (mask >> a) & 1u ? c[a] : 0;
        ck_assert_int_eq(shmap__representative(m, mask, dev),
                         ref_dev(&rm, crep));
      }
    }
    /* groups over the axes of entry 0 (any order), brute force */
    if (rs.ndims > 0) {
      int members[128], rank_in = -1;
      for (int dev = 0; dev < ndev; dev++) {
        int n = shmap__group(m, rs.axes[0], rs.naxes[0], dev, members,
                             &rank_in);
        int c[8], want_n = 0;
        ref_coords(&rm, dev, c);
        ck_assert_int_eq(n, (int)ref_count(&rm, &rs, 0));
        ck_assert_int_eq(rank_in, (int)ref_index(&rm, &rs, 0, c));
        for (int other = 0; other < ndev; other++) {
          int oc[8], same = 1;
          ref_coords(&rm, other, oc);
          for (int a = 0; a < rm.naxes; a++) {
            int named = 0;
            for (int k = 0; k < rs.naxes[0]; k++)
              named |= rs.axes[0][k] == a;
            if (!named && oc[a] != c[a])
              same = 0;
          }
          if (same) {
            want_n++;
            ck_assert_int_eq(members[ref_index(&rm, &rs, 0, oc)], other);
          }
        }
        ck_assert_int_eq(want_n, n);
      }
    }
    shmap_mesh_destroy(m);
  }
}
END_TEST

static Suite *layout_suite(void) {
  Suite *s = suite_create("layout");
  TCase *tc = tcase_create("hand");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, numel_strides);
  tcase_add_test(tc, entry_count_index);
  tcase_add_test(tc, shapes_offsets);
  tcase_add_test(tc, rank0);
  tcase_add_test(tc, mask_representative);
  tcase_add_test(tc, group_hand);
  suite_add_tcase(s, tc);

  tc = tcase_create("copy_box");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, copy_box_2d);
  tcase_add_test(tc, copy_box_into_strided);
  tcase_add_test(tc, copy_box_transpose);
  tcase_add_test(tc, copy_box_3d_gaps);
  tcase_add_test(tc, copy_box_1d);
  suite_add_tcase(s, tc);

  tc = tcase_create("model");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, random_vs_model);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return tu_run_suite(layout_suite());
}
