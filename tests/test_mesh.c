/* SPDX-License-Identifier: MIT */
/*
 * test_mesh.c - meshes (SEMANTICS.md §1): creation from text and from
 * arrays, queries, row-major device numbering, and every creation error.
 */
#include <check.h>
#include <pthread.h>
#include <shmap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refmodel.h"
#include "testutil.h"

#define TIMEOUT 30

/* Assert that creating a mesh from `text` fails with `code`, sets no mesh,
 * and leaves a message containing each of the non-NULL needles. */
static void expect_create_error(const char *text, int code, const char *n1,
                                const char *n2) {
  shmap_mesh *m = NULL;
  int rc = shmap_mesh_create(&m, text);
  const char *msg = shmap_errmsg();
  ck_assert_msg(rc == code, "shmap_mesh_create(\"%s\") = %d (%s), want %d "
                "(%s); message: %s", text ? text : "(null)", rc,
                shmap_strerror(rc), code, shmap_strerror(code), msg);
  ck_assert_msg(m == NULL, "shmap_mesh_create(\"%s\") failed but set a mesh",
                text ? text : "(null)");
  ck_assert_ptr_nonnull(msg);
  if (n1 != NULL)
    ck_assert_msg(t_has(msg, n1), "message for \"%s\" lacks \"%s\": %s", text,
                  n1, msg);
  if (n2 != NULL)
    ck_assert_msg(t_has(msg, n2), "message for \"%s\" lacks \"%s\": %s", text,
                  n2, msg);
}

static void expect_axes_error(int naxes, const char *const names[],
                              const int sizes[], int code, const char *n1) {
  shmap_mesh *m = NULL;
  int rc = shmap_mesh_create_axes(&m, naxes, names, sizes);
  const char *msg = shmap_errmsg();
  ck_assert_msg(rc == code, "shmap_mesh_create_axes(naxes=%d) = %d (%s), "
                "want %d (%s); message: %s", naxes, rc, shmap_strerror(rc),
                code, shmap_strerror(code), msg);
  ck_assert_msg(m == NULL, "shmap_mesh_create_axes failed but set a mesh");
  if (n1 != NULL)
    ck_assert_msg(t_has(msg, n1), "message lacks \"%s\": %s", n1, msg);
}

/* Check the axes of `m` and the row-major numbering of its devices against
 * the model. */
static void check_mesh(const shmap_mesh *m, int naxes, const char *const names[],
                       const int sizes[]) {
  ref_mesh rm;
  int ndev = 1;
  rm.naxes = naxes;
  for (int a = 0; a < naxes; a++) {
    rm.sizes[a] = sizes[a];
    ndev *= sizes[a];
  }
  ck_assert_int_eq(shmap_mesh_naxes(m), naxes);
  ck_assert_int_eq(shmap_mesh_ndevices(m), ndev);
  for (int a = 0; a < naxes; a++) {
    ck_assert_ptr_nonnull(shmap_mesh_axis_name(m, a));
    ck_assert_str_eq(shmap_mesh_axis_name(m, a), names[a]);
    ck_assert_int_eq(shmap_mesh_axis_size(m, a), sizes[a]);
    ck_assert_int_eq(shmap_mesh_axis_find(m, names[a]), a);
  }
  ck_assert_ptr_null(shmap_mesh_axis_name(m, naxes));
  ck_assert_ptr_null(shmap_mesh_axis_name(m, -1));
  ck_assert_int_eq(shmap_mesh_axis_size(m, naxes), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_mesh_axis_size(m, -1), SHMAP_EINVAL);
  for (int dev = 0; dev < ndev; dev++) {
    int c[SHMAP_MAX_AXES], want[SHMAP_MAX_AXES];
    ck_assert_int_eq(shmap_mesh_device_coords(m, dev, c), 0);
    ref_coords(&rm, dev, want);
    for (int a = 0; a < naxes; a++)
      ck_assert_msg(c[a] == want[a], "device %d axis %d: coord %d, want %d",
                    dev, a, c[a], want[a]);
    ck_assert_int_eq(shmap_mesh_device_id(m, c), dev);
  }
}

START_TEST(text_two_axes) {
  static const char *const names[] = {"i", "j"};
  static const int sizes[] = {4, 2};
  shmap_mesh *m = NULL;
  int c[2];
  ck_assert_int_eq(shmap_mesh_create(&m, "i=4, j=2"), 0);
  ck_assert_ptr_nonnull(m);
  check_mesh(m, 2, names, sizes);
  /* device (i,j) is number i*2+j */
  ck_assert_int_eq(shmap_mesh_device_coords(m, 5, c), 0);
  ck_assert_int_eq(c[0], 2);
  ck_assert_int_eq(c[1], 1);
  c[0] = 3;
  c[1] = 0;
  ck_assert_int_eq(shmap_mesh_device_id(m, c), 6);
  ck_assert_int_eq(shmap_mesh_axis_find(m, "k"), SHMAP_EAXIS);
  ck_assert_int_eq(shmap_mesh_axis_find(m, "I"), SHMAP_EAXIS);
  ck_assert_int_eq(shmap_mesh_axis_find(m, ""), SHMAP_EAXIS);
  ck_assert_int_eq(shmap_mesh_axis_find(m, "ij"), SHMAP_EAXIS);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(text_whitespace) {
  static const char *const texts[] = {
      "i=4,j=2",      "i=4, j=2",      " i = 4 , j = 2 ", "\ti=4,\n j=2\n",
      "i =4 ,j= 2",   "  i=4,j=2  ",   "i=4 ,\tj=2",
  };
  static const char *const names[] = {"i", "j"};
  static const int sizes[] = {4, 2};
  for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
    shmap_mesh *m = NULL;
    int rc = shmap_mesh_create(&m, texts[t]);
    ck_assert_msg(rc == 0, "shmap_mesh_create(\"%s\") = %d: %s", texts[t], rc,
                  shmap_errmsg());
    check_mesh(m, 2, names, sizes);
    shmap_mesh_destroy(m);
  }
}
END_TEST

START_TEST(text_one_axis) {
  static const char *const names[] = {"x"};
  static const int sizes[] = {7};
  static const char *const names1[] = {"data_0"};
  static const int sizes1[] = {1};
  shmap_mesh *m = NULL;
  ck_assert_int_eq(shmap_mesh_create(&m, "x=7"), 0);
  check_mesh(m, 1, names, sizes);
  shmap_mesh_destroy(m);
  m = NULL;
  /* a single device; identifiers with underscores and digits */
  ck_assert_int_eq(shmap_mesh_create(&m, "data_0=1"), 0);
  check_mesh(m, 1, names1, sizes1);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(text_four_axes) {
  static const char *const names[] = {"a", "b", "_c", "dd2"};
  static const int sizes[] = {2, 3, 1, 2};
  shmap_mesh *m = NULL;
  int c[4];
  ck_assert_int_eq(shmap_mesh_create(&m, "a=2, b=3, _c=1, dd2=2"), 0);
  check_mesh(m, 4, names, sizes);
  /* 11 = a*6 + b*2 + c*2 + d: (1, 2, 0, 1) */
  ck_assert_int_eq(shmap_mesh_device_coords(m, 11, c), 0);
  ck_assert_int_eq(c[0], 1);
  ck_assert_int_eq(c[1], 2);
  ck_assert_int_eq(c[2], 0);
  ck_assert_int_eq(c[3], 1);
  c[0] = 0;
  c[1] = 1;
  c[2] = 0;
  c[3] = 1;
  ck_assert_int_eq(shmap_mesh_device_id(m, c), 3);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(text_limits) {
  /* SHMAP_MAX_AXES axes and SHMAP_MAX_DEVICES devices are allowed. */
  shmap_mesh *m = NULL;
  int c[SHMAP_MAX_AXES];
  ck_assert_int_eq(SHMAP_MAX_AXES, 8);
  ck_assert_int_eq(
      shmap_mesh_create(&m, "a=2,b=2,c=2,d=2,e=2,f=2,g=2,h=2"), 0);
  ck_assert_int_eq(shmap_mesh_naxes(m), 8);
  ck_assert_int_eq(shmap_mesh_ndevices(m), 256);
  ck_assert_int_eq(shmap_mesh_device_coords(m, 255, c), 0);
  for (int a = 0; a < 8; a++)
    ck_assert_int_eq(c[a], 1);
  ck_assert_int_eq(shmap_mesh_device_coords(m, 128 + 1, c), 0);
  ck_assert_int_eq(c[0], 1);
  ck_assert_int_eq(c[7], 1);
  for (int a = 1; a < 7; a++)
    ck_assert_int_eq(c[a], 0);
  shmap_mesh_destroy(m);
  m = NULL;
  ck_assert_int_eq(shmap_mesh_create(&m, "i=4096"), 0);
  ck_assert_int_eq(shmap_mesh_ndevices(m), SHMAP_MAX_DEVICES);
  shmap_mesh_destroy(m);
  m = NULL;
  ck_assert_int_eq(shmap_mesh_create(&m, "i=64, j=64"), 0);
  ck_assert_int_eq(shmap_mesh_ndevices(m), 4096);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(axes_create) {
  static const char *const names[] = {"rows", "cols", "z"};
  static const int sizes[] = {3, 2, 2};
  shmap_mesh *m = NULL;
  ck_assert_int_eq(shmap_mesh_create_axes(&m, 3, names, sizes), 0);
  check_mesh(m, 3, names, sizes);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(axes_copied) {
  /* The mesh keeps its own copy of the names. */
  char n0[8] = "ii", n1[8] = "jj";
  const char *names[] = {n0, n1};
  int sizes[] = {2, 3};
  shmap_mesh *m = NULL;
  ck_assert_int_eq(shmap_mesh_create_axes(&m, 2, names, sizes), 0);
  strcpy(n0, "xx");
  sizes[0] = 5;
  ck_assert_str_eq(shmap_mesh_axis_name(m, 0), "ii");
  ck_assert_int_eq(shmap_mesh_axis_size(m, 0), 2);
  ck_assert_int_eq(shmap_mesh_axis_find(m, "ii"), 0);
  ck_assert_int_eq(shmap_mesh_axis_find(m, "xx"), SHMAP_EAXIS);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(query_errors) {
  shmap_mesh *m = NULL;
  int c[2] = {0, 0};
  ck_assert_int_eq(shmap_mesh_create(&m, "i=4, j=2"), 0);
  ck_assert_int_eq(shmap_mesh_device_coords(m, 8, c), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_mesh_device_coords(m, -1, c), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_mesh_device_coords(m, 0, NULL), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_mesh_device_coords(NULL, 0, c), SHMAP_EINVAL);
  c[0] = 4;
  c[1] = 0;
  ck_assert_int_eq(shmap_mesh_device_id(m, c), SHMAP_EINVAL);
  c[0] = 0;
  c[1] = 2;
  ck_assert_int_eq(shmap_mesh_device_id(m, c), SHMAP_EINVAL);
  c[0] = -1;
  c[1] = 1;
  ck_assert_int_eq(shmap_mesh_device_id(m, c), SHMAP_EINVAL);
  c[0] = 1;
  c[1] = -1;
  ck_assert_int_eq(shmap_mesh_device_id(m, c), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_mesh_device_id(m, NULL), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_mesh_device_id(NULL, c), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_mesh_axis_find(m, NULL), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_mesh_axis_find(NULL, "i"), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_mesh_naxes(NULL), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_mesh_ndevices(NULL), SHMAP_EINVAL);
  ck_assert_ptr_null(shmap_mesh_axis_name(NULL, 0));
  ck_assert_int_eq(shmap_mesh_axis_size(NULL, 0), SHMAP_EINVAL);
  shmap_mesh_destroy(m);
  shmap_mesh_destroy(NULL);
}
END_TEST

START_TEST(err_no_axes) {
  expect_create_error("", SHMAP_EINVAL, NULL, NULL);
  expect_create_error("   ", SHMAP_EINVAL, NULL, NULL);
  expect_axes_error(0, (const char *const[]){"i"}, (const int[]){2},
                    SHMAP_EINVAL, NULL);
  expect_axes_error(-1, (const char *const[]){"i"}, (const int[]){2},
                    SHMAP_EINVAL, NULL);
}
END_TEST

START_TEST(err_bad_size) {
  expect_create_error("beta=0", SHMAP_EINVAL, "beta", NULL);
  expect_create_error("gamma=-1", SHMAP_EINVAL, "gamma", NULL);
  expect_create_error("i=4, delta=0", SHMAP_EINVAL, "delta", NULL);
  expect_axes_error(2, (const char *const[]){"i", "eps"}, (const int[]){2, 0},
                    SHMAP_EINVAL, "eps");
  expect_axes_error(1, (const char *const[]){"eps"}, (const int[]){-3},
                    SHMAP_EINVAL, "eps");
}
END_TEST

START_TEST(err_duplicate) {
  expect_create_error("alpha=2,alpha=3", SHMAP_EAXIS, "alpha", NULL);
  expect_create_error("i=2, beta=2, beta=2", SHMAP_EAXIS, "beta", NULL);
  expect_axes_error(3, (const char *const[]){"x", "y", "x"},
                    (const int[]){2, 2, 2}, SHMAP_EAXIS, "x");
}
END_TEST

START_TEST(err_empty_name) {
  /* an empty name is an invalid axis name (SHMAP_EAXIS, as documented) */
  expect_create_error("=2", SHMAP_EAXIS, NULL, NULL);
  expect_create_error("i=2, =3", SHMAP_EAXIS, NULL, NULL);
  expect_create_error(" = 3", SHMAP_EAXIS, NULL, NULL);
  expect_axes_error(1, (const char *const[]){""}, (const int[]){2},
                    SHMAP_EAXIS, NULL);
}
END_TEST

START_TEST(err_syntax) {
  expect_create_error("i=", SHMAP_ESYNTAX, "i=", NULL);
  expect_create_error("rows=2,,cols=2", SHMAP_ESYNTAX, "rows=2,,cols=2", NULL);
  expect_create_error("i 2", SHMAP_ESYNTAX, "i 2", NULL);
  expect_create_error("i", SHMAP_ESYNTAX, NULL, NULL);
  expect_create_error("i=2,", SHMAP_ESYNTAX, "i=2,", NULL);
  expect_create_error(",i=2", SHMAP_ESYNTAX, ",i=2", NULL);
  expect_create_error("i=2 j=2", SHMAP_ESYNTAX, "i=2 j=2", NULL);
  expect_create_error("i=2x", SHMAP_ESYNTAX, "i=2x", NULL);
  expect_create_error("i=2.5", SHMAP_ESYNTAX, "i=2.5", NULL);
  expect_create_error("i==2", SHMAP_ESYNTAX, "i==2", NULL);
  expect_create_error("i=2;j=2", SHMAP_ESYNTAX, "i=2;j=2", NULL);
}
END_TEST

/* A non-identifier in the text: either an invalid name (SHMAP_EAXIS) or
 * text that does not parse (SHMAP_ESYNTAX), depending on where the
 * tokenizer stops; either way the message must show the offender. */
static void expect_bad_name_text(const char *text, const char *needle) {
  shmap_mesh *m = NULL;
  int rc = shmap_mesh_create(&m, text);
  const char *msg = shmap_errmsg();
  ck_assert_msg(rc == SHMAP_EAXIS || rc == SHMAP_ESYNTAX,
                "shmap_mesh_create(\"%s\") = %d: %s", text, rc, msg);
  ck_assert_ptr_null(m);
  ck_assert_msg(t_has(msg, needle), "message for \"%s\" lacks \"%s\": %s",
                text, needle, msg);
}

START_TEST(err_bad_names) {
  /* Axis names are identifiers of at most 31 characters, not None. */
  expect_create_error("1i=2", SHMAP_EAXIS, "1i", NULL);
  expect_create_error("None=2", SHMAP_EAXIS, "None", NULL);
  expect_create_error("i=2, None=2", SHMAP_EAXIS, "None", NULL);
  expect_bad_name_text("a-b=2", "a-b");
  expect_bad_name_text("'i'=2", "'i'");
  expect_bad_name_text("i j=2", "i j");
  expect_axes_error(1, (const char *const[]){"1i"}, (const int[]){2},
                    SHMAP_EAXIS, "1i");
  expect_axes_error(1, (const char *const[]){"a b"}, (const int[]){2},
                    SHMAP_EAXIS, "a b");
  expect_axes_error(1, (const char *const[]){"i,j"}, (const int[]){2},
                    SHMAP_EAXIS, "i,j");
  expect_axes_error(2, (const char *const[]){"i", "None"}, (const int[]){2, 2},
                    SHMAP_EAXIS, "None");
  expect_axes_error(1, (const char *const[]){"x="}, (const int[]){2},
                    SHMAP_EAXIS, "x=");
}
END_TEST

START_TEST(name_lengths) {
  /* 31 characters is the longest name */
  static const char n31[] = "abcdefghijklmnopqrstuvwxyz_1234";
  static const char n32[] = "abcdefghijklmnopqrstuvwxyz_12345";
  char text[64];
  shmap_mesh *m = NULL;
  ck_assert_uint_eq(strlen(n31), 31);
  snprintf(text, sizeof text, "%s=2", n31);
  ck_assert_int_eq(shmap_mesh_create(&m, text), 0);
  ck_assert_str_eq(shmap_mesh_axis_name(m, 0), n31);
  ck_assert_int_eq(shmap_mesh_axis_find(m, n31), 0);
  ck_assert_int_eq(shmap_mesh_axis_find(m, n32), SHMAP_EAXIS);
  shmap_mesh_destroy(m);
  m = NULL;
  snprintf(text, sizeof text, "%s=2", n32);
  expect_create_error(text, SHMAP_EAXIS, n32, NULL);
  expect_axes_error(1, (const char *const[]){n32}, (const int[]){2},
                    SHMAP_EAXIS, n32);
  ck_assert_int_eq(
      shmap_mesh_create_axes(&m, 1, (const char *const[]){n31},
                             (const int[]){3}),
      0);
  ck_assert_int_eq(shmap_mesh_ndevices(m), 3);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(err_null) {
  shmap_mesh *m = NULL;
  ck_assert_int_eq(shmap_mesh_create(NULL, "i=2"), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_mesh_create(&m, NULL), SHMAP_EINVAL);
  ck_assert_ptr_null(m);
  ck_assert_int_eq(
      shmap_mesh_create_axes(NULL, 1, (const char *const[]){"i"},
                             (const int[]){2}),
      SHMAP_EINVAL);
  expect_axes_error(1, NULL, (const int[]){2}, SHMAP_EINVAL, NULL);
  expect_axes_error(1, (const char *const[]){"i"}, NULL, SHMAP_EINVAL, NULL);
  expect_axes_error(2, (const char *const[]){"i", NULL}, (const int[]){2, 2},
                    SHMAP_EINVAL, NULL);
}
END_TEST

START_TEST(err_too_many_axes) {
  expect_create_error("a=1,b=1,c=1,d=1,e=1,f=1,g=1,h=1,k=1", SHMAP_EINVAL,
                      NULL, NULL);
  expect_axes_error(9,
                    (const char *const[]){"a", "b", "c", "d", "e", "f", "g",
                                          "h", "k"},
                    (const int[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, SHMAP_EINVAL,
                    NULL);
}
END_TEST

START_TEST(err_too_many_devices) {
  expect_create_error("i=4097", SHMAP_EINVAL, NULL, NULL);
  expect_create_error("i=64, j=65", SHMAP_EINVAL, NULL, NULL);
  /* products that overflow an int must not wrap around to a small count */
  expect_create_error("i=65536, j=65536", SHMAP_EINVAL, NULL, NULL);
  expect_create_error("i=65536, j=65536, k=2", SHMAP_EINVAL, NULL, NULL);
  expect_axes_error(2, (const char *const[]){"i", "j"},
                    (const int[]){65536, 65536}, SHMAP_EINVAL, NULL);
  expect_axes_error(3, (const char *const[]){"i", "j", "k"},
                    (const int[]){2, 2147483647, 2}, SHMAP_EINVAL, NULL);
}
END_TEST

START_TEST(err_huge_size_text) {
  /* A size that does not fit an int is rejected, never wrapped. */
  shmap_mesh *m = NULL;
  int rc = shmap_mesh_create(&m, "i=4294967298");
  ck_assert_msg(rc == SHMAP_EINVAL || rc == SHMAP_ESYNTAX,
                "\"i=4294967298\" gave %d: %s", rc, shmap_errmsg());
  ck_assert_ptr_null(m);
  rc = shmap_mesh_create(&m, "i=99999999999999999999999");
  ck_assert_msg(rc == SHMAP_EINVAL || rc == SHMAP_ESYNTAX,
                "huge size gave %d: %s", rc, shmap_errmsg());
  ck_assert_ptr_null(m);
}
END_TEST

START_TEST(errmsg_per_thread_is_set) {
  /* A later failure replaces the message of an earlier one. */
  shmap_mesh *m = NULL;
  ck_assert_int_lt(shmap_mesh_create(&m, "first_axis=0"), 0);
  ck_assert(t_has(shmap_errmsg(), "first_axis"));
  ck_assert_int_lt(shmap_mesh_create(&m, "second=2,second=2"), 0);
  ck_assert(t_has(shmap_errmsg(), "second"));
  ck_assert(!t_has(shmap_errmsg(), "first_axis"));
}
END_TEST

/* In a new thread: the message starts empty, and a failure there is not
 * seen by the creating thread. */
static void *errmsg_thread(void *arg) {
  shmap_mesh *m = NULL;
  int *ok = arg;
  ok[0] = strcmp(shmap_errmsg(), "") == 0;
  ok[1] = shmap_mesh_create(&m, "thread_axis=0") == SHMAP_EINVAL &&
          t_has(shmap_errmsg(), "thread_axis");
  return NULL;
}

START_TEST(errmsg_threads) {
  shmap_mesh *m = NULL;
  pthread_t th;
  int ok[2] = {0, 0};
  ck_assert_int_lt(shmap_mesh_create(&m, "main_axis=0"), 0);
  ck_assert(t_has(shmap_errmsg(), "main_axis"));
  ck_assert_int_eq(pthread_create(&th, NULL, errmsg_thread, ok), 0);
  ck_assert_int_eq(pthread_join(th, NULL), 0);
  ck_assert_msg(ok[0], "a new thread's message is not empty");
  ck_assert_msg(ok[1], "failure in a thread: wrong code or message");
  ck_assert_msg(t_has(shmap_errmsg(), "main_axis") &&
                    !t_has(shmap_errmsg(), "thread_axis"),
                "the main thread's message changed: %s", shmap_errmsg());
  /* a successful call leaves the message as it was */
  ck_assert_int_eq(shmap_mesh_create(&m, "i=2"), 0);
  ck_assert(t_has(shmap_errmsg(), "main_axis"));
  shmap_mesh_destroy(m);
}
END_TEST

static Suite *mesh_suite(void) {
  Suite *s = suite_create("mesh");
  TCase *tc = tcase_create("create");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, text_two_axes);
  tcase_add_test(tc, text_whitespace);
  tcase_add_test(tc, text_one_axis);
  tcase_add_test(tc, text_four_axes);
  tcase_add_test(tc, text_limits);
  tcase_add_test(tc, axes_create);
  tcase_add_test(tc, axes_copied);
  tcase_add_test(tc, query_errors);
  suite_add_tcase(s, tc);

  tc = tcase_create("errors");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, err_no_axes);
  tcase_add_test(tc, err_bad_size);
  tcase_add_test(tc, err_duplicate);
  tcase_add_test(tc, err_empty_name);
  tcase_add_test(tc, err_syntax);
  tcase_add_test(tc, err_bad_names);
  tcase_add_test(tc, name_lengths);
  tcase_add_test(tc, err_null);
  tcase_add_test(tc, err_too_many_axes);
  tcase_add_test(tc, err_too_many_devices);
  tcase_add_test(tc, err_huge_size_text);
  tcase_add_test(tc, errmsg_per_thread_is_set);
  tcase_add_test(tc, errmsg_threads);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return tu_run_suite(mesh_suite());
}
