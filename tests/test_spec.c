/* SPDX-License-Identifier: MIT */
/*
 * test_spec.c - partition specs (SEMANTICS.md §2): the text forms (JAX's
 * P(...) as pasted from Python, and the short form), resolution against a
 * mesh, fitting to an array, and the canonical format.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "refmodel.h"
#include "testutil.h"

#define TIMEOUT 30

/* Expected parse: up to 8 entries, each a string of axis names separated by
 * spaces ("" = unsplit). */
static void expect_parse(const char *text, int ndims, const char *const e[]) {
  shmap__pspec p;
  int rc;
  memset(&p, 0x5a, sizeof p);
  rc = shmap__spec_parse(text, &p);
  ck_assert_msg(rc == 0, "parse \"%s\" = %d: %s", text, rc, shmap_errmsg());
  ck_assert_msg(p.ndims == ndims, "parse \"%s\": %d entries, want %d", text,
                p.ndims, ndims);
  for (int d = 0; d < ndims; d++) {
    char want[256], *tok, *save = NULL;
    int k = 0;
    snprintf(want, sizeof want, "%s", e[d]);
    for (tok = strtok_r(want, " ", &save); tok != NULL;
         tok = strtok_r(NULL, " ", &save), k++) {
      ck_assert_msg(k < p.nnames[d],
                    "parse \"%s\": entry %d has %d names, want more", text, d,
                    p.nnames[d]);
      ck_assert_msg(strcmp(p.names[d][k], tok) == 0,
                    "parse \"%s\": entry %d name %d is \"%s\", want \"%s\"",
                    text, d, k, p.names[d][k], tok);
    }
    ck_assert_msg(k == p.nnames[d],
                  "parse \"%s\": entry %d has %d names, want %d", text, d,
                  p.nnames[d], k);
  }
}

static void expect_parse_error(const char *text) {
  shmap__pspec p;
  int rc = shmap__spec_parse(text, &p);
  const char *msg = shmap_errmsg();
  ck_assert_msg(rc == SHMAP_ESYNTAX, "parse \"%s\" = %d (%s), want "
                "SHMAP_ESYNTAX; message: %s", text, rc, shmap_strerror(rc),
                msg);
  ck_assert_msg(t_has(msg, text), "message for \"%s\" lacks the spec: %s",
                text, msg);
}

#define E(...) ((const char *const[]){__VA_ARGS__})

START_TEST(parse_jax) {
  expect_parse("P('i', ('j','k'), None)", 3, E("i", "j k", ""));
  expect_parse("P(\"i\")", 1, E("i"));
  expect_parse("P('i')", 1, E("i"));
  expect_parse("P()", 0, NULL);
  expect_parse("P(None, 'i')", 2, E("", "i"));
  expect_parse("P(None)", 1, E(""));
  expect_parse("P(None, None, None)", 3, E("", "", ""));
  expect_parse("P(('i',))", 1, E("i"));
  expect_parse("P(('i',), None)", 2, E("i", ""));
  expect_parse("P(('j', 'i'))", 1, E("j i"));
  expect_parse("P(('a','b','c'), 'd')", 2, E("a b c", "d"));
  expect_parse("P(\"i\", (\"j\", \"k\"))", 2, E("i", "j k"));
  expect_parse("P('data', 'model')", 2, E("data", "model"));
  expect_parse("P('_x1', None, ('y_2',))", 3, E("_x1", "", "y_2"));
  /* an empty tuple is an unsplit entry */
  expect_parse("P(())", 1, E(""));
  expect_parse("P((), 'i', ( ))", 3, E("", "i", ""));
}
END_TEST

START_TEST(parse_spacing) {
  expect_parse("P('i',('j','k'),None)", 3, E("i", "j k", ""));
  expect_parse("  P ( 'i' , ( 'j' , 'k' ) , None )  ", 3, E("i", "j k", ""));
  expect_parse("P(\n  'i',\n  ('j', 'k'),\n  None,\n)", 3,
               E("i", "j k", ""));
  expect_parse("P(\t'i'\t)", 1, E("i"));
  expect_parse("P( )", 0, NULL);
  expect_parse("P( ( 'i' , ) )", 1, E("i"));
}
END_TEST

START_TEST(parse_trailing_comma) {
  /* Python allows a trailing comma in a call. */
  expect_parse("P('i',)", 1, E("i"));
  expect_parse("P('i', None,)", 2, E("i", ""));
  expect_parse("P(('i','j',),)", 1, E("i j"));
}
END_TEST

START_TEST(parse_partitionspec) {
  expect_parse("PartitionSpec('i', ('j','k'), None)", 3, E("i", "j k", ""));
  expect_parse("PartitionSpec()", 0, NULL);
}
END_TEST

START_TEST(parse_short) {
  expect_parse("i, (j,k), None", 3, E("i", "j k", ""));
  expect_parse("i", 1, E("i"));
  expect_parse("i,j", 2, E("i", "j"));
  expect_parse("None, i", 2, E("", "i"));
  expect_parse("(j, i)", 1, E("j i"));
  expect_parse("(i,)", 1, E("i"));
  expect_parse("  i ,  ( j , k )  ,None ", 3, E("i", "j k", ""));
  expect_parse("", 0, NULL);
  expect_parse("   ", 0, NULL);
  expect_parse("None", 1, E(""));
  /* quoted names in the short form, as in a Python tuple */
  expect_parse("'i', ('j', 'k')", 2, E("i", "j k"));
  expect_parse("('i',)", 1, E("i"));
  expect_parse("(), i", 2, E("", "i"));
  /* a trailing comma after the last entry */
  expect_parse("i,", 1, E("i"));
  expect_parse("i, (j, k),", 2, E("i", "j k"));
  /* the forms may be mixed */
  expect_parse("P(i, ('j', k))", 2, E("i", "j k"));
}
END_TEST

START_TEST(parse_errors) {
  expect_parse_error("P('i'");
  expect_parse_error("P('i'))");
  expect_parse_error("P(('i', 'j')");
  expect_parse_error("P('i', ('j', 'k'), None");
  expect_parse_error("(i, j");
  expect_parse_error("i, j)");
  expect_parse_error("P('i') x");
  expect_parse_error("P('i'),");
  expect_parse_error("P('i') P('j')");
  expect_parse_error("i j");
  expect_parse_error("P('i',,'j')");
  expect_parse_error("i,,j");
  expect_parse_error("P(,'i')");
  expect_parse_error(",i");
  expect_parse_error("P(('i', ('j',)))");
  expect_parse_error("P((('i',),))");
  expect_parse_error("P(('i', None))");
  expect_parse_error("P(('i', ()))");
  expect_parse_error("i,,");
  expect_parse_error("P('i',,)");
  expect_parse_error("(i, (j, k))");
  expect_parse_error("P('i\")");
  expect_parse_error("P(\"i')");
  expect_parse_error("P('i)");
  expect_parse_error("P(i')");
  expect_parse_error("P(('i' 'j'))");
  expect_parse_error("P(('i',,'j'))");
  expect_parse_error("Q('i')");
  expect_parse_error("P[('i')]");
  expect_parse_error("P('i'; 'j')");
  expect_parse_error("P(None 'i')");
  expect_parse_error("(None, 'i')");
}
END_TEST

/* A quoted name that is not an identifier: a syntax error, or (if the
 * parser keeps quoted text as written) an unknown axis when resolved;
 * either way the message shows it. */
static void expect_bad_quoted_name(const char *text, const char *name) {
  shmap_mesh *m = NULL;
  shmap__spec s;
  int rc;
  ck_assert_int_eq(shmap_mesh_create(&m, "i=2, j=2"), 0);
  rc = shmap__spec_resolve(m, text, &s);
  ck_assert_msg(rc == SHMAP_ESYNTAX || rc == SHMAP_EAXIS,
                "resolve \"%s\" = %d: %s", text, rc, shmap_errmsg());
  ck_assert_msg(t_has(shmap_errmsg(), rc == SHMAP_ESYNTAX ? text : name),
                "resolve \"%s\": message: %s", text, shmap_errmsg());
  shmap_mesh_destroy(m);
}

START_TEST(parse_bad_names) {
  expect_bad_quoted_name("P('')", "''");
  expect_bad_quoted_name("P('1i')", "1i");
  expect_bad_quoted_name("P('i-j')", "i-j");
  expect_bad_quoted_name("P('i j')", "i j");
  expect_bad_quoted_name("P(('i', 'j k'))", "j k");
}
END_TEST

START_TEST(parse_error_column) {
  /* The message names the column (any message naming the spec text and a
   * number is accepted; the column of the stray token is 8, 1-based, or 7,
   * 0-based). */
  shmap__pspec p;
  const char *msg;
  ck_assert_int_eq(shmap__spec_parse("P('i') x", &p), SHMAP_ESYNTAX);
  msg = shmap_errmsg();
  ck_assert_msg(t_has_int(msg, 8) || t_has_int(msg, 7),
                "no column in: %s", msg);
}
END_TEST

START_TEST(parse_too_many) {
  /* More entries than SHMAP_MAX_RANK or names than SHMAP_MAX_AXES in an
   * entry cannot be represented: an error, not an overflow. */
  shmap__pspec p;
  ck_assert_int_lt(
      shmap__spec_parse("P(None,None,None,None,None,None,None,None,None)",
                        &p),
      0);
  ck_assert_int_lt(
      shmap__spec_parse("P(('a','b','c','d','e','f','g','h','k'))", &p), 0);
  /* an axis name longer than any valid mesh axis name */
  {
    char text[128];
    char name[80];
    memset(name, 'a', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    snprintf(text, sizeof text, "P('%s')", name);
    ck_assert_int_lt(shmap__spec_parse(text, &p), 0);
  }
  ck_assert_int_eq(
      shmap__spec_parse("P(None,None,None,None,None,None,None,None)", &p), 0);
  ck_assert_int_eq(p.ndims, 8);
  ck_assert_int_eq(
      shmap__spec_parse("P(('a','b','c','d','e','f','g','h'))", &p), 0);
  ck_assert_int_eq(p.nnames[0], 8);
}
END_TEST

START_TEST(parse_null) {
  shmap__pspec p;
  ck_assert_int_eq(shmap__spec_parse(NULL, &p), SHMAP_EINVAL);
}
END_TEST

/* ---- resolve ------------------------------------------------------------ */

/* e: per entry, a string of mesh axis numbers ("1 0"). */
static void expect_resolve(const shmap_mesh *m, const char *text, int ndims,
                           const char *const e[]) {
  shmap__spec s;
  int rc;
  memset(&s, 0x5a, sizeof s);
  rc = shmap__spec_resolve(m, text, &s);
  ck_assert_msg(rc == 0, "resolve \"%s\" = %d: %s", text, rc, shmap_errmsg());
  ck_assert_msg(s.ndims == ndims, "resolve \"%s\": %d entries, want %d", text,
                s.ndims, ndims);
  for (int d = 0; d < ndims; d++) {
    int k = 0;
    for (const char *q = e[d]; *q; q++) {
      if (*q == ' ')
        continue;
      ck_assert_msg(k < s.naxes[d], "resolve \"%s\" entry %d: %d axes", text,
                    d, s.naxes[d]);
      ck_assert_msg(s.axes[d][k] == *q - '0',
                    "resolve \"%s\" entry %d axis %d: %d, want %c", text, d, k,
                    s.axes[d][k], *q);
      k++;
    }
    ck_assert_msg(k == s.naxes[d], "resolve \"%s\" entry %d: %d axes, want %d",
                  text, d, s.naxes[d], k);
  }
}

static void expect_resolve_error(const shmap_mesh *m, const char *text,
                                 int code, const char *n1, const char *n2) {
  shmap__spec s;
  int rc = shmap__spec_resolve(m, text, &s);
  const char *msg = shmap_errmsg();
  ck_assert_msg(rc == code, "resolve \"%s\" = %d (%s), want %d (%s): %s", text,
                rc, shmap_strerror(rc), code, shmap_strerror(code), msg);
  if (n1)
    ck_assert_msg(t_has(msg, n1), "resolve \"%s\": message lacks \"%s\": %s",
                  text, n1, msg);
  if (n2)
    ck_assert_msg(t_has(msg, n2), "resolve \"%s\": message lacks \"%s\": %s",
                  text, n2, msg);
}

START_TEST(resolve_ok) {
  shmap_mesh *m = tu_mesh_new("i=2, j=3, k=2");
  expect_resolve(m, "P('i', ('j','k'), None)", 3, E("0", "1 2", ""));
  expect_resolve(m, "P(('k','i'))", 1, E("2 0"));
  expect_resolve(m, "P(None, 'j')", 2, E("", "1"));
  expect_resolve(m, "P()", 0, NULL);
  expect_resolve(m, "", 0, NULL);
  expect_resolve(m, "k, (j, i)", 2, E("2", "1 0"));
  expect_resolve(m, "P(('j',), 'k')", 2, E("1", "2"));
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(resolve_unknown) {
  shmap_mesh *m = tu_mesh_new("i=2, j=3");
  expect_resolve_error(m, "P('i', 'zeta')", SHMAP_EAXIS, "zeta", NULL);
  expect_resolve_error(m, "P(('i', 'omega'))", SHMAP_EAXIS, "omega", NULL);
  expect_resolve_error(m, "P('I')", SHMAP_EAXIS, "I", NULL);
  expect_resolve_error(m, "unknown_axis", SHMAP_EAXIS, "unknown_axis", NULL);
  /* syntax errors still come out as such */
  expect_resolve_error(m, "P('i'", SHMAP_ESYNTAX, "P('i'", NULL);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(resolve_duplicate) {
  shmap_mesh *m = tu_mesh_new("alpha=2, beta=3");
  expect_resolve_error(m, "P('alpha', 'alpha')", SHMAP_EAXIS, "alpha", NULL);
  expect_resolve_error(m, "P(('alpha', 'beta'), 'beta')", SHMAP_EAXIS, "beta",
                       NULL);
  expect_resolve_error(m, "P(('beta', 'beta'))", SHMAP_EAXIS, "beta", NULL);
  expect_resolve_error(m, "P('beta', None, ('alpha', 'beta'))", SHMAP_EAXIS,
                       "beta", NULL);
  /* the message also shows the spec */
  expect_resolve_error(m, "P('alpha', 'alpha')", SHMAP_EAXIS,
                       "P('alpha', 'alpha')", NULL);
  shmap_mesh_destroy(m);
}
END_TEST


/* ---- fit and the public check -------------------------------------------- */

START_TEST(fit_rank) {
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  shmap__spec s;
  const char *text = "P('i', None, 'j')";
  const char *msg;
  int64_t shape[3] = {8, 8, 8};
  ck_assert_int_eq(shmap__spec_resolve(m, text, &s), 0);
  ck_assert_int_eq(shmap__spec_fit(m, "in_specs[0]", text, &s, 3, shape), 0);
  ck_assert_int_eq(shmap__spec_fit(m, "in_specs[0]", text, &s, 3, NULL), 0);
  ck_assert_int_eq(shmap__spec_fit(m, "in_specs[0]", text, &s, 4, NULL), 0);
  ck_assert_int_eq(shmap__spec_fit(m, "in_specs[0]", text, &s, 2, shape),
                   SHMAP_ESHAPE);
  msg = shmap_errmsg();
  ck_assert_msg(t_has(msg, text), "message lacks the spec: %s", msg);
  ck_assert_msg(t_has_int(msg, 3), "message lacks the length 3: %s", msg);
  ck_assert_msg(t_has_int(msg, 2), "message lacks the rank 2: %s", msg);
  ck_assert_msg(t_has(msg, "in_specs[0]"), "message lacks `what`: %s", msg);

  /* public check: same rule */
  ck_assert_int_eq(shmap_spec_check(m, text, 2, NULL), SHMAP_ESHAPE);
  msg = shmap_errmsg();
  ck_assert_msg(t_has(msg, text) && t_has_int(msg, 3) && t_has_int(msg, 2),
                "shmap_spec_check message: %s", msg);
  ck_assert_int_eq(shmap_spec_check(m, "P(None)", 0, NULL), SHMAP_ESHAPE);
  ck_assert_int_eq(shmap_spec_check(m, "P()", 0, NULL), 0);
  ck_assert_int_eq(shmap_spec_check(m, "", 0, NULL), 0);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(fit_divisible) {
  /* count 15 does not divide 35: names dimension 2, size 35, the axes and
   * the count. */
  shmap_mesh *m = tu_mesh_new("alpha=5, beta=3");
  shmap__spec s;
  const char *text = "P(None, None, ('alpha', 'beta'))";
  int64_t bad[3] = {4, 6, 35}, good[3] = {4, 6, 45};
  const char *msg;
  ck_assert_int_eq(shmap__spec_resolve(m, text, &s), 0);
  ck_assert_int_eq(shmap__spec_fit(m, "x", text, &s, 3, good), 0);
  ck_assert_int_eq(shmap__spec_fit(m, "x", text, &s, 3, bad), SHMAP_ESHAPE);
  msg = shmap_errmsg();
  ck_assert_msg(t_has_int(msg, 2), "message lacks the dimension 2: %s", msg);
  ck_assert_msg(t_has_int(msg, 35), "message lacks the size 35: %s", msg);
  ck_assert_msg(t_has_int(msg, 15), "message lacks the count 15: %s", msg);
  ck_assert_msg(t_has(msg, "alpha") && t_has(msg, "beta"),
                "message lacks the axes: %s", msg);

  ck_assert_int_eq(shmap_spec_check(m, text, 3, bad), SHMAP_ESHAPE);
  msg = shmap_errmsg();
  ck_assert_msg(t_has_int(msg, 2) && t_has_int(msg, 35) &&
                    t_has_int(msg, 15) && t_has(msg, "alpha") &&
                    t_has(msg, "beta"),
                "shmap_spec_check message: %s", msg);
  ck_assert_int_eq(shmap_spec_check(m, text, 3, good), 0);
  /* without a shape only the rank is checked */
  ck_assert_int_eq(shmap_spec_check(m, text, 3, NULL), 0);
  /* one axis: 'beta' (3) does not divide 7 in dimension 0 */
  ck_assert_int_eq(shmap_spec_check(m, "P('beta')", 2, (int64_t[]){7, 6}),
                   SHMAP_ESHAPE);
  msg = shmap_errmsg();
  ck_assert_msg(t_has_int(msg, 0) && t_has_int(msg, 7) && t_has_int(msg, 3) &&
                    t_has(msg, "beta"),
                "message: %s", msg);
  /* a short spec pads: only dimension 0 is split */
  ck_assert_int_eq(shmap_spec_check(m, "P('beta')", 2, (int64_t[]){9, 7}), 0);
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(check_public_errors) {
  shmap_mesh *m = tu_mesh_new("i=4, j=2");
  const char *msg;
  ck_assert_int_eq(shmap_spec_check(m, "P('i', 'k')", 2, NULL), SHMAP_EAXIS);
  ck_assert(t_has(shmap_errmsg(), "'k'") || t_has(shmap_errmsg(), "k"));
  ck_assert_int_eq(shmap_spec_check(m, "P('i', 'nope')", 2, NULL),
                   SHMAP_EAXIS);
  ck_assert(t_has(shmap_errmsg(), "nope"));
  ck_assert_int_eq(shmap_spec_check(m, "P('j', ('i', 'j'))", 2, NULL),
                   SHMAP_EAXIS);
  msg = shmap_errmsg();
  ck_assert_msg(t_has(msg, "j"), "message: %s", msg);
  ck_assert_int_eq(shmap_spec_check(m, "P('i',,)", 2, NULL), SHMAP_ESYNTAX);
  ck_assert(t_has(shmap_errmsg(), "P('i',,)"));
  ck_assert_int_eq(shmap_spec_check(NULL, "P('i')", 1, NULL), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_spec_check(m, NULL, 1, NULL), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_spec_check(m, "P('i')", -1, NULL), SHMAP_EINVAL);
  ck_assert_int_eq(shmap_spec_check(m, "P('i')", SHMAP_MAX_RANK + 1, NULL),
                   SHMAP_EINVAL);
  ck_assert_int_eq(
      shmap_spec_check(m, "P(('i', 'j'), None)", 2, (int64_t[]){16, 3}), 0);
  ck_assert_int_eq(shmap_spec_check(m, "i, j", 2, (int64_t[]){4, 2}), 0);
  ck_assert_int_eq(shmap_spec_check(m, "i, j", 2, (int64_t[]){4, 3}),
                   SHMAP_ESHAPE);
  shmap_mesh_destroy(m);
}
END_TEST

/* ---- format ------------------------------------------------------------- */

START_TEST(format_canonical) {
  shmap_mesh *m = tu_mesh_new("i=2, j=2, k=2");
  shmap__spec s;
  char buf[256];
  struct {
    const char *in, *out;
  } cases[] = {
      {"P('i', ('j','k'), None)", "P('i', ('j', 'k'), None)"},
      {"i, (j,k), None", "P('i', ('j', 'k'), None)"},
      {"P()", "P()"},
      {"", "P()"},
      {"P(None)", "P(None)"},
      {"P(('k', 'i'))", "P(('k', 'i'))"},
      {"P(\"j\")", "P('j')"},
      {"P(None, 'j', None)", "P(None, 'j', None)"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    ck_assert_msg(shmap__spec_resolve(m, cases[c].in, &s) == 0, "%s: %s",
                  cases[c].in, shmap_errmsg());
    shmap__spec_format(m, &s, buf, sizeof buf);
    ck_assert_msg(strcmp(buf, cases[c].out) == 0,
                  "format(\"%s\") = \"%s\", want \"%s\"", cases[c].in, buf,
                  cases[c].out);
  }
  /* a one-name tuple resolves to the same spec as the bare name */
  ck_assert_int_eq(shmap__spec_resolve(m, "P(('i',))", &s), 0);
  shmap__spec_format(m, &s, buf, sizeof buf);
  ck_assert_msg(strcmp(buf, "P('i')") == 0 || strcmp(buf, "P(('i',))") == 0,
                "format = %s", buf);
  /* a small buffer truncates, NUL-terminated */
  ck_assert_int_eq(shmap__spec_resolve(m, "P('i', ('j','k'))", &s), 0);
  memset(buf, 'x', sizeof buf);
  shmap__spec_format(m, &s, buf, 6);
  ck_assert_int_lt((int)strlen(buf), 6);
  ck_assert_int_eq(buf[6], 'x');
  shmap_mesh_destroy(m);
}
END_TEST

/* Every spec over a 3-axis mesh with up to 3 entries (random sample): its
 * canonical form resolves to the same spec. */
START_TEST(format_roundtrip) {
  shmap_mesh *m = tu_mesh_new("x=2, yy=3, z_1=2");
  uint64_t rng = 12345;
  for (int t = 0; t < 2000; t++) {
    shmap__spec s, s2;
    char text[256], buf[256];
    int ndims = t_rng_range(&rng, 0, 4);
    int perm[3] = {0, 1, 2};
    int owner[3];
    for (int a = 2; a > 0; a--) {
      int b = t_rng_range(&rng, 0, a), tmp = perm[a];
      perm[a] = perm[b];
      perm[b] = tmp;
    }
    memset(&s, 0, sizeof s);
    s.ndims = ndims;
    for (int a = 0; a < 3; a++)
      owner[a] = ndims > 0 && t_rng_range(&rng, 0, 2) ? t_rng_range(&rng, 0, ndims - 1) : -1;
    for (int q = 0; q < 3; q++) {
      int a = perm[q];
      if (owner[a] >= 0)
        s.axes[owner[a]][s.naxes[owner[a]]++] = a;
    }
    shmap__spec_format(m, &s, buf, sizeof buf);
    snprintf(text, sizeof text, "%s", buf);
    ck_assert_msg(shmap__spec_resolve(m, text, &s2) == 0, "\"%s\": %s", text,
                  shmap_errmsg());
    ck_assert_msg(s2.ndims == s.ndims, "\"%s\": %d entries, want %d", text,
                  s2.ndims, s.ndims);
    for (int d = 0; d < s.ndims; d++) {
      ck_assert_msg(s2.naxes[d] == s.naxes[d], "\"%s\" entry %d", text, d);
      for (int k = 0; k < s.naxes[d]; k++)
        ck_assert_msg(s2.axes[d][k] == s.axes[d][k], "\"%s\" entry %d", text,
                      d);
    }
  }
  shmap_mesh_destroy(m);
}
END_TEST

START_TEST(axes_parse) {
  /* The collective argument parser (spec.c): one axis or a group. */
  shmap_mesh *m = tu_mesh_new("i=2, j=3, k=2");
  int axes[SHMAP_MAX_AXES], n = -1;
  ck_assert_int_eq(shmap__axes_parse(m, "psum", "j", axes, &n), 0);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(axes[0], 1);
  ck_assert_int_eq(shmap__axes_parse(m, "psum", "('k','i')", axes, &n), 0);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(axes[0], 2);
  ck_assert_int_eq(axes[1], 0);
  ck_assert_int_eq(shmap__axes_parse(m, "psum", "i, j", axes, &n), 0);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(axes[0], 0);
  ck_assert_int_eq(axes[1], 1);
  ck_assert_int_eq(shmap__axes_parse(m, "psum", "()", axes, &n), 0);
  ck_assert_int_eq(n, 0);
  ck_assert_int_eq(shmap__axes_parse(m, "psum", "", axes, &n), 0);
  ck_assert_int_eq(n, 0);
  ck_assert_int_eq(shmap__axes_parse(m, "pmax", "nope", axes, &n),
                   SHMAP_EAXIS);
  ck_assert(t_has(shmap_errmsg(), "nope"));
  ck_assert(t_has(shmap_errmsg(), "pmax"));
  ck_assert_int_eq(shmap__axes_parse(m, "psum", "('i','i')", axes, &n),
                   SHMAP_EAXIS);
  ck_assert_int_lt(shmap__axes_parse(m, "psum", "('i'", axes, &n), 0);
  shmap_mesh_destroy(m);
}
END_TEST

static Suite *spec_suite(void) {
  Suite *s = suite_create("spec");
  TCase *tc = tcase_create("parse");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, parse_jax);
  tcase_add_test(tc, parse_spacing);
  tcase_add_test(tc, parse_trailing_comma);
  tcase_add_test(tc, parse_partitionspec);
  tcase_add_test(tc, parse_short);
  tcase_add_test(tc, parse_errors);
  tcase_add_test(tc, parse_error_column);
  tcase_add_test(tc, parse_bad_names);
  tcase_add_test(tc, parse_too_many);
  tcase_add_test(tc, parse_null);
  suite_add_tcase(s, tc);

  tc = tcase_create("resolve");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, resolve_ok);
  tcase_add_test(tc, resolve_unknown);
  tcase_add_test(tc, resolve_duplicate);
  tcase_add_test(tc, axes_parse);
  suite_add_tcase(s, tc);

  tc = tcase_create("fit");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, fit_rank);
  tcase_add_test(tc, fit_divisible);
  tcase_add_test(tc, check_public_errors);
  suite_add_tcase(s, tc);

  tc = tcase_create("format");
  tcase_set_timeout(tc, TIMEOUT);
  tcase_add_test(tc, format_canonical);
  tcase_add_test(tc, format_roundtrip);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return tu_run_suite(spec_suite());
}
