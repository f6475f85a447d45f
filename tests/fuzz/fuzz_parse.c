/* SPDX-License-Identifier: MIT */
/*
 * fuzz_parse.c - fuzz target for the text parsers: meshes ("i=4, j=2"),
 * partition specs (P('i', ('j','k'), None) and the short form i, (j,k),
 * None), the axes argument of collectives, shmap_spec_check() and the
 * canonical spec format, each with the invariants it must keep.
 *
 * An input holds up to four fields separated by '|':
 *
 *     mesh text | spec text | shape | axes text
 *
 * e.g. "i=4, j=2|P('i', None)|8,4|('i','j')".  The mesh text goes to
 * shmap_mesh_create(); the spec text to shmap__spec_parse(),
 * shmap__spec_resolve() and shmap_spec_check() against that mesh (when it
 * parses) and against two fixed meshes; the shape (integers, any separators)
 * gives the rank and shape for shmap_spec_check(); the axes text goes to
 * shmap__axes_parse() (the spec text when there is no fourth field).  An
 * input without '|' is tried as all three kinds of text.
 *
 * Built with -DSHMAP_LIBFUZZER it is a libFuzzer target (tests/fuzz/run.sh).
 * Otherwise main() runs each file of the seed corpus, and each of its
 * prefixes, as a regression test under `make check`.  A broken invariant
 * prints what broke and the input in hex, then aborts.
 */
#include "internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The mesh every spec is also resolved against: eight axes, among them the
 * names that make the short form ambiguous with P(...). */
static const char *const fixed_names[] = {"i", "j", "k", "P", "data", "model",
                                          "x_1", "PartitionSpec"};
static const int fixed_sizes[] = {2, 3, 2, 1, 2, 1, 1, 2};
#define FIXED_NAXES 8

/* And against eight axes with names of the longest length (31), where the
 * formatted texts are longest (tests/fuzz/run.sh puts them in the
 * dictionary). */
static const char *const long_names[] = {
    "long_axis_name_0_abcdefghijklmn", "long_axis_name_1_abcdefghijklmn",
    "long_axis_name_2_abcdefghijklmn", "long_axis_name_3_abcdefghijklmn",
    "long_axis_name_4_abcdefghijklmn", "long_axis_name_5_abcdefghijklmn",
    "long_axis_name_6_abcdefghijklmn", "long_axis_name_7_abcdefghijklmn"};
static const int long_sizes[] = {2, 1, 2, 1, 1, 3, 1, 2};

/* Op name given to shmap__axes_parse(). */
#define AXES_OP "shmap_psum"

/* Largest canonical text: 8 entries of one 31-character name each is 281
 * characters; the library formats into 512-byte buffers. */
#define FMT_MAX 512

static const uint8_t *cur_data;
static size_t cur_size;

/* ---- reporting ---------------------------------------------------------- */

static void print_input(FILE *f)
{
  fprintf(f, "input (%zu bytes, hex):", cur_size);
  for (size_t i = 0; i < cur_size; i++)
    fprintf(f, "%s%02x", i % 32 ? " " : "\n  ", cur_data[i]);
  fprintf(f, "\ninput as text: \"");
  for (size_t i = 0; i < cur_size; i++) {
    unsigned c = cur_data[i];
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c >= 0x20 && c < 0x7f)
      fputc((int)c, f);
    else
      fprintf(f, "\\x%02x", c);
  }
  fprintf(f, "\"\n");
}

static _Noreturn void broken(int line, const char *cond, const char *fmt, ...)
    SHMAP__PRINTF(3, 4);

static _Noreturn void broken(int line, const char *cond, const char *fmt, ...)
{
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "\nfuzz_parse.c:%d: invariant broken: %s\n  ", line, cond);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nlast message: \"%s\"\n", shmap_errmsg());
  print_input(stderr);
  fflush(stderr);
  abort();
}

#define CHECK(cond, ...)                                                      \
  do {                                                                        \
    if (!(cond))                                                              \
      broken(__LINE__, #cond, __VA_ARGS__);                                   \
  } while (0)

/* ---- helpers ------------------------------------------------------------ */

/* A heap copy of exactly n bytes plus the NUL, so that reading past the end
 * of the text is caught by AddressSanitizer. */
static char *text_dup(const char *s, size_t n)
{
  char *t = malloc(n + 1);
  CHECK(t != NULL, "out of memory");
  memcpy(t, s, n);
  t[n] = '\0';
  return t;
}

#define CODE_BIT(c) (1u << (unsigned)-(c))

/* rc is 0 or one of the codes in `allowed`; after a failure the message is
 * a non-empty NUL-terminated string. */
static void check_rc(const char *what, const char *text, int rc,
                     unsigned allowed)
{
  CHECK(rc == 0 || (rc <= SHMAP_EINVAL && rc >= SHMAP_ESYS &&
                    (allowed & CODE_BIT(rc))),
        "%s(\"%s\") returned %d (%s)", what, text, rc, shmap_strerror(rc));
  if (rc == 0)
    return;
  const char *msg = shmap_errmsg();
  CHECK(msg != NULL, "%s(\"%s\") = %d: shmap_errmsg() is NULL", what, text,
        rc);
  size_t len = strnlen(msg, SHMAP__MSG_MAX);
  CHECK(len > 0, "%s(\"%s\") = %d left an empty message", what, text, rc);
  CHECK(len < SHMAP__MSG_MAX, "%s(\"%s\") = %d: message not NUL-terminated",
        what, text, rc);
}

/* The message quotes the first 200 bytes of `text` (the parsers print the
 * text with %.200s). */
static bool msg_quotes(const char *text)
{
  char want[201];
  snprintf(want, sizeof want, "%s", text);
  return strstr(shmap_errmsg(), want) != NULL;
}

static void clear_msg(void) { shmap__err_set(""); }

/* One branch per size bucket: under libFuzzer an input that reaches a
 * larger size (of a formatted spec, of its longest entry) is new coverage
 * and stays in the corpus, which steers the fuzzer towards the long texts
 * where fixed-size buffers end.  A macro, so each use has its own branches. */
static volatile unsigned size_sink;
#define SIZE_FEATURE(n)                                                       \
  do {                                                                        \
    size_t n_ = (n);                                                          \
    if (n_ >= 32)                                                             \
      size_sink++;                                                            \
    if (n_ >= 64)                                                             \
      size_sink++;                                                            \
    if (n_ >= 96)                                                             \
      size_sink++;                                                            \
    if (n_ >= 128)                                                            \
      size_sink++;                                                            \
    if (n_ >= 160)                                                            \
      size_sink++;                                                            \
    if (n_ >= 192)                                                            \
      size_sink++;                                                            \
    if (n_ >= 256)                                                            \
      size_sink++;                                                            \
  } while (0)

static bool ident_char(int c) { return isalnum(c) || c == '_'; }

/* ---- meshes ------------------------------------------------------------- */

typedef struct ref_mesh {
  int naxes;
  char names[SHMAP_MAX_AXES][SHMAP__NAME_MAX];
  int sizes[SHMAP_MAX_AXES];
} ref_mesh;

/* A reference reading of the mesh grammar: name = size (',' name = size)*,
 * blanks anywhere between tokens.  True when `text` is a valid mesh. */
static bool ref_mesh_parse(const char *text, ref_mesh *r)
{
  const unsigned char *p = (const unsigned char *)text;
  long long ndev = 1;
  r->naxes = 0;
  while (isspace(*p))
    p++;
  if (!*p)
    return false;
  for (;;) {
    while (isspace(*p))
      p++;
    const unsigned char *name = p;
    while (ident_char(*p))
      p++;
    size_t len = (size_t)(p - name);
    while (isspace(*p))
      p++;
    if (*p++ != '=')
      return false;
    while (isspace(*p))
      p++;
    if (!isdigit(*p)) /* "-n" never gives a size >= 1 */
      return false;
    long long v = 0;
    while (isdigit(*p)) {
      if (v < 1000000000)
        v = v * 10 + (*p - '0');
      p++;
    }
    if (r->naxes == SHMAP_MAX_AXES || len == 0 || len >= SHMAP__NAME_MAX ||
        isdigit(name[0]) || (len == 4 && memcmp(name, "None", 4) == 0))
      return false;
    for (int b = 0; b < r->naxes; b++)
      if (strlen(r->names[b]) == len && memcmp(r->names[b], name, len) == 0)
        return false;
    if (v < 1 || (ndev *= v) > SHMAP_MAX_DEVICES)
      return false;
    memcpy(r->names[r->naxes], name, len);
    r->names[r->naxes][len] = '\0';
    r->sizes[r->naxes++] = (int)v;
    while (isspace(*p))
      p++;
    if (!*p)
      return true;
    if (*p++ != ',')
      return false;
  }
}

static bool valid_name(const char *s)
{
  size_t n = strlen(s);
  if (n == 0 || n >= SHMAP__NAME_MAX || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!ident_char((unsigned char)s[i]))
      return false;
  return strcmp(s, "None") != 0;
}

static void same_mesh(const shmap_mesh *a, const shmap_mesh *b,
                      const char *how)
{
  CHECK(shmap_mesh_naxes(a) == shmap_mesh_naxes(b), "%s: naxes %d vs %d", how,
        shmap_mesh_naxes(a), shmap_mesh_naxes(b));
  CHECK(shmap_mesh_ndevices(a) == shmap_mesh_ndevices(b),
        "%s: ndevices %d vs %d", how, shmap_mesh_ndevices(a),
        shmap_mesh_ndevices(b));
  for (int x = 0; x < shmap_mesh_naxes(a); x++) {
    CHECK(strcmp(shmap_mesh_axis_name(a, x), shmap_mesh_axis_name(b, x)) == 0,
          "%s: axis %d named '%s' vs '%s'", how, x,
          shmap_mesh_axis_name(a, x), shmap_mesh_axis_name(b, x));
    CHECK(shmap_mesh_axis_size(a, x) == shmap_mesh_axis_size(b, x),
          "%s: axis %d of size %d vs %d", how, x, shmap_mesh_axis_size(a, x),
          shmap_mesh_axis_size(b, x));
  }
}

/* Everything a mesh that was created must satisfy. */
static void check_mesh(const shmap_mesh *m, const char *text)
{
  int naxes = shmap_mesh_naxes(m);
  int ndev = shmap_mesh_ndevices(m);
  CHECK(naxes >= 1 && naxes <= SHMAP_MAX_AXES, "mesh \"%s\": %d axes", text,
        naxes);
  const char *names[SHMAP_MAX_AXES];
  int sizes[SHMAP_MAX_AXES];
  long long prod = 1;
  for (int a = 0; a < naxes; a++) {
    names[a] = shmap_mesh_axis_name(m, a);
    sizes[a] = shmap_mesh_axis_size(m, a);
    CHECK(names[a] != NULL && valid_name(names[a]),
          "mesh \"%s\": axis %d has a bad name", text, a);
    CHECK(sizes[a] >= 1, "mesh \"%s\": axis %d of size %d", text, a, sizes[a]);
    prod *= sizes[a];
    CHECK(shmap_mesh_axis_find(m, names[a]) == a,
          "mesh \"%s\": axis_find('%s') = %d, want %d", text, names[a],
          shmap_mesh_axis_find(m, names[a]), a);
  }
  CHECK(ndev == prod && ndev >= 1 && ndev <= SHMAP_MAX_DEVICES,
        "mesh \"%s\": ndevices %d, product of sizes %lld", text, ndev, prod);

  clear_msg();
  CHECK(shmap_mesh_axis_name(m, naxes) == NULL, "axis_name(naxes) not NULL");
  CHECK(shmap_errmsg()[0] != '\0', "axis_name(naxes): no message");
  check_rc("shmap_mesh_axis_size", text, shmap_mesh_axis_size(m, -1),
           CODE_BIT(SHMAP_EINVAL));
  CHECK(shmap_mesh_axis_size(m, -1) == SHMAP_EINVAL, "axis_size(-1)");

  /* Device numbers and coordinates: row-major, and a bijection. */
  int coords[SHMAP_MAX_AXES];
  for (int d = 0; d < ndev; d++) {
    memset(coords, 0xff, sizeof coords);
    int rc = shmap_mesh_device_coords(m, d, coords);
    CHECK(rc == 0, "mesh \"%s\": device_coords(%d) = %d", text, d, rc);
    int want = 0;
    for (int a = 0; a < naxes; a++) {
      CHECK(coords[a] >= 0 && coords[a] < sizes[a],
            "mesh \"%s\": device %d has coordinate %d on axis %d", text, d,
            coords[a], a);
      want = want * sizes[a] + coords[a];
    }
    CHECK(want == d, "mesh \"%s\": device %d has the coordinates of %d", text,
          d, want);
    rc = shmap_mesh_device_id(m, coords);
    CHECK(rc == d, "mesh \"%s\": device_id(coords of %d) = %d", text, d, rc);
  }
  for (int a = 0; a < naxes; a++)
    coords[a] = 0;
  clear_msg();
  check_rc("shmap_mesh_device_coords", text,
           shmap_mesh_device_coords(m, ndev, coords), CODE_BIT(SHMAP_EINVAL));
  CHECK(shmap_mesh_device_coords(m, -1, coords) == SHMAP_EINVAL,
        "device_coords(-1)");
  coords[naxes - 1] = sizes[naxes - 1];
  clear_msg();
  int rc = shmap_mesh_device_id(m, coords);
  CHECK(rc == SHMAP_EINVAL, "mesh \"%s\": device_id(out of range) = %d", text,
        rc);
  check_rc("shmap_mesh_device_id", text, rc, CODE_BIT(SHMAP_EINVAL));

  /* The same mesh again from its plain text and from arrays. */
  char plain[SHMAP_MAX_AXES * (SHMAP__NAME_MAX + 16)] = "";
  for (int a = 0; a < naxes; a++)
    shmap__cat(plain, sizeof plain, "%s%s=%d", a ? ", " : "", names[a],
               sizes[a]);
  shmap_mesh *again = NULL;
  rc = shmap_mesh_create(&again, plain);
  CHECK(rc == 0, "mesh \"%s\": its plain form \"%s\" fails: %d", text, plain,
        rc);
  same_mesh(m, again, plain);
  shmap_mesh_destroy(again);
  again = NULL;
  rc = shmap_mesh_create_axes(&again, naxes, names, sizes);
  CHECK(rc == 0, "mesh \"%s\": create_axes fails: %d", text, rc);
  same_mesh(m, again, "shmap_mesh_create_axes");
  shmap_mesh_destroy(again);
}

/* Parse `text` as a mesh; returns the mesh or NULL. */
static shmap_mesh *fuzz_mesh(const char *text)
{
  shmap_mesh *sentinel = (shmap_mesh *)&cur_data, *m = sentinel;
  ref_mesh ref;
  bool ok = ref_mesh_parse(text, &ref);
  clear_msg();
  int rc = shmap_mesh_create(&m, text);
  check_rc("shmap_mesh_create", text, rc,
           CODE_BIT(SHMAP_EINVAL) | CODE_BIT(SHMAP_ESYNTAX) |
               CODE_BIT(SHMAP_EAXIS) | CODE_BIT(SHMAP_ENOMEM));
  if (rc) {
    CHECK(m == sentinel, "mesh \"%s\": failure %d changed *mesh", text, rc);
    CHECK(!ok, "mesh \"%s\" is valid but fails with %d", text, rc);
    if (rc == SHMAP_ESYNTAX)
      CHECK(strstr(shmap_errmsg(), "column") != NULL,
            "mesh \"%s\": syntax error without a column", text);
    return NULL;
  }
  CHECK(m != NULL && m != sentinel, "mesh \"%s\": 0 but no mesh", text);
  CHECK(ok, "mesh \"%s\" is not valid but was created", text);
  CHECK(shmap_mesh_naxes(m) == ref.naxes, "mesh \"%s\": %d axes, want %d",
        text, shmap_mesh_naxes(m), ref.naxes);
  for (int a = 0; a < ref.naxes; a++)
    CHECK(strcmp(shmap_mesh_axis_name(m, a), ref.names[a]) == 0 &&
              shmap_mesh_axis_size(m, a) == ref.sizes[a],
          "mesh \"%s\": axis %d is %s=%d, want %s=%d", text, a,
          shmap_mesh_axis_name(m, a), shmap_mesh_axis_size(m, a),
          ref.names[a], ref.sizes[a]);
  check_mesh(m, text);
  return m;
}

/* ---- specs -------------------------------------------------------------- */

static void check_pspec(const shmap__pspec *ps, const char *text)
{
  CHECK(ps->ndims >= 0 && ps->ndims <= SHMAP_MAX_RANK,
        "spec \"%s\": %d entries", text, ps->ndims);
  for (int d = 0; d < ps->ndims; d++) {
    CHECK(ps->nnames[d] >= 0 && ps->nnames[d] <= SHMAP_MAX_AXES,
          "spec \"%s\": entry %d has %d names", text, d, ps->nnames[d]);
    for (int k = 0; k < ps->nnames[d]; k++) {
      const char *n = ps->names[d][k];
      size_t len = strnlen(n, SHMAP__NAME_MAX);
      CHECK(len > 0 && len < SHMAP__NAME_MAX,
            "spec \"%s\": entry %d name %d has length %zu", text, d, k, len);
      for (size_t i = 0; i < len; i++)
        CHECK(ident_char((unsigned char)n[i]),
              "spec \"%s\": entry %d name %d is \"%s\"", text, d, k, n);
    }
  }
}

/* Resolve `text` on a zeroed struct, so that two results compare with
 * memcmp. */
static int resolve(const shmap_mesh *mesh, const char *text, shmap__spec *s)
{
  memset(s, 0, sizeof *s);
  char *t = text_dup(text, strlen(text));
  clear_msg();
  int rc = shmap__spec_resolve(mesh, t, s);
  check_rc("shmap__spec_resolve", t, rc,
           CODE_BIT(SHMAP_ESYNTAX) | CODE_BIT(SHMAP_EAXIS));
  if (rc)
    CHECK(msg_quotes(t), "resolve \"%s\" = %d: message lacks the spec", t,
          rc);
  free(t);
  return rc;
}

static int64_t entry_count(const shmap_mesh *mesh, const shmap__spec *s, int d)
{
  int64_t c = 1;
  for (int k = 0; d < s->ndims && k < s->naxes[d]; k++)
    c *= shmap_mesh_axis_size(mesh, s->axes[d][k]);
  return c;
}

/* shmap_spec_check() against the outcome expected from the resolved spec. */
static void check_fit(const shmap_mesh *mesh, const char *text, int resolved,
                      const shmap__spec *s, int rank, const int64_t *shape)
{
  int want;
  if (rank < 0 || rank > SHMAP_MAX_RANK)
    want = SHMAP_EINVAL;
  else if (resolved)
    want = resolved;
  else if (s->ndims > rank)
    want = SHMAP_ESHAPE;
  else {
    want = 0;
    /* Negative dimensions, or more than 2^62 elements (zero dimensions
     * left out), are refused before divisibility is looked at. */
    int64_t prod = 1;
    for (int d = 0; shape && d < rank && !want; d++) {
      if (shape[d] < 0)
        want = SHMAP_ESHAPE;
      else if (shape[d] > 0 && prod > (INT64_MAX / 2) / shape[d])
        want = SHMAP_ESHAPE;
      else if (shape[d] > 0)
        prod *= shape[d];
    }
    for (int d = 0; shape && d < s->ndims; d++)
      if (shape[d] % entry_count(mesh, s, d) != 0)
        want = SHMAP_ESHAPE;
  }
  clear_msg();
  int rc = shmap_spec_check(mesh, text, rank, shape);
  check_rc("shmap_spec_check", text, rc,
           CODE_BIT(SHMAP_EINVAL) | CODE_BIT(SHMAP_ESYNTAX) |
               CODE_BIT(SHMAP_EAXIS) | CODE_BIT(SHMAP_ESHAPE));
  CHECK(rc == want, "spec_check(\"%s\", rank %d, shape %s) = %d, want %d",
        text, rank, shape ? "given" : "NULL", rc, want);
  if (rc && rc != SHMAP_EINVAL)
    CHECK(msg_quotes(text), "spec_check \"%s\" = %d: message lacks the spec",
          text, rc);
}

/* Calls shmap_spec_check() with a heap shape of exactly `rank` elements. */
static void check_fit_shape(const shmap_mesh *mesh, const char *text,
                            int resolved, const shmap__spec *s, int rank,
                            const int64_t *vals)
{
  size_t n = rank > 0 ? (size_t)rank : 0;
  int64_t *shape = malloc(n ? n * sizeof *shape : 1);
  CHECK(shape != NULL, "out of memory");
  if (n)
    memcpy(shape, vals, n * sizeof *shape);
  check_fit(mesh, text, resolved, s, rank, shape);
  free(shape);
}

/* The short form of a resolved spec: i, (j, k), None. */
static void short_form(const shmap_mesh *mesh, const shmap__spec *s, char *buf,
                       size_t n)
{
  buf[0] = '\0';
  for (int d = 0; d < s->ndims; d++) {
    shmap__cat(buf, n, "%s", d ? ", " : "");
    if (s->naxes[d] == 0)
      shmap__cat(buf, n, "None");
    else if (s->naxes[d] == 1)
      shmap__cat(buf, n, "%s", shmap_mesh_axis_name(mesh, s->axes[d][0]));
    else {
      for (int k = 0; k < s->naxes[d]; k++)
        shmap__cat(buf, n, "%s%s", k ? ", " : "(",
                   shmap_mesh_axis_name(mesh, s->axes[d][k]));
      shmap__cat(buf, n, ")");
    }
  }
}

/* The text forms of a resolved spec `*sp` (of `text`) resolve back to it:
 * the canonical form (a fixed point of format(resolve(.))), the short form,
 * and the short form padded with None (the same layout). */
static void check_forms(const shmap_mesh *mesh, const char *text,
                        const shmap__spec *sp)
{
  char canon[FMT_MAX], canon2[FMT_MAX], shortf[FMT_MAX];
  memset(canon, 0x5a, sizeof canon);
  shmap__spec_format(mesh, sp, canon, sizeof canon);
  size_t clen = strnlen(canon, sizeof canon);
  CHECK(clen + 1 < sizeof canon, "format of \"%s\" fills the buffer", text);
  CHECK(clen >= 3 && strncmp(canon, "P(", 2) == 0 && canon[clen - 1] == ')',
        "format of \"%s\" is \"%s\"", text, canon);
  SIZE_FEATURE(clen);
  size_t longest = 0; /* of one entry: ('i', 'j') */
  for (int d = 0; d < sp->ndims; d++) {
    size_t elen = sp->naxes[d] > 1 ? 2 * (size_t)sp->naxes[d] : 0;
    for (int k = 0; k < sp->naxes[d]; k++)
      elen += strlen(shmap_mesh_axis_name(mesh, sp->axes[d][k])) + 2;
    longest = elen > longest ? elen : longest;
  }
  SIZE_FEATURE(longest);
  shmap__spec s2;
  int rc2 = resolve(mesh, canon, &s2);
  CHECK(rc2 == 0, "canonical \"%s\" of \"%s\" fails to resolve: %d", canon,
        text, rc2);
  CHECK(memcmp(sp, &s2, sizeof *sp) == 0,
        "canonical \"%s\" of \"%s\" resolves to another spec", canon, text);
  shmap__spec_format(mesh, &s2, canon2, sizeof canon2);
  CHECK(strcmp(canon, canon2) == 0,
        "canonical form not a fixed point: \"%s\" -> \"%s\"", canon, canon2);
  CHECK(shmap__spec_same(sp, &s2, SHMAP_MAX_RANK), "spec_same(\"%s\")",
        canon);

  /* So does the short form, and padding with None changes no layout. */
  short_form(mesh, sp, shortf, sizeof shortf);
  rc2 = resolve(mesh, shortf, &s2);
  CHECK(rc2 == 0 && memcmp(sp, &s2, sizeof *sp) == 0,
        "short form \"%s\" of \"%s\" resolves differently (%d)", shortf,
        text, rc2);
  if (sp->ndims < SHMAP_MAX_RANK) {
    shmap__cat(shortf, sizeof shortf, "%sNone", sp->ndims ? ", " : "");
    rc2 = resolve(mesh, shortf, &s2);
    CHECK(rc2 == 0 && s2.ndims == sp->ndims + 1 &&
              shmap__spec_same(sp, &s2, SHMAP_MAX_RANK),
          "\"%s\" is not the layout of \"%s\" (%d)", shortf, text, rc2);
  }
}

/* The spec with every axis it names merged, in order, into one entry: also
 * a valid spec, with the longest entry. */
static void check_merged(const shmap_mesh *mesh, const shmap__spec *sp)
{
  shmap__spec m;
  memset(&m, 0, sizeof m);
  m.ndims = 1;
  for (int d = 0; d < sp->ndims; d++)
    for (int k = 0; k < sp->naxes[d]; k++)
      m.axes[0][m.naxes[0]++] = sp->axes[d][k];
  if (m.naxes[0] < 2)
    return;
  char text[FMT_MAX];
  short_form(mesh, &m, text, sizeof text);
  shmap__spec r;
  int rc = resolve(mesh, text, &r);
  CHECK(rc == 0 && memcmp(&m, &r, sizeof m) == 0,
        "merged spec \"%s\" resolves differently (%d)", text, rc);
  check_forms(mesh, text, &m);
}

static void check_spec(const shmap_mesh *mesh, const char *text,
                       int rank_given, const int64_t *shape_given)
{
  /* Parsing alone. */
  shmap__pspec ps;
  memset(&ps, 0x5a, sizeof ps);
  char *t = text_dup(text, strlen(text));
  clear_msg();
  int prc = shmap__spec_parse(t, &ps);
  check_rc("shmap__spec_parse", t, prc, CODE_BIT(SHMAP_ESYNTAX));
  if (prc) {
    CHECK(strstr(shmap_errmsg(), "column") != NULL && msg_quotes(t),
          "spec \"%s\": syntax error message lacks the column or the spec",
          t);
  } else {
    check_pspec(&ps, t);
  }
  free(t);

  /* Resolving: exactly when every name is a mesh axis, each used once. */
  shmap__spec s;
  int rc = resolve(mesh, text, &s);
  int want = prc;
  if (!prc) {
    unsigned seen = 0;
    for (int d = 0; d < ps.ndims && !want; d++)
      for (int k = 0; k < ps.nnames[d] && !want; k++) {
        int a = -1;
        for (int x = 0; x < shmap_mesh_naxes(mesh); x++)
          if (strcmp(shmap_mesh_axis_name(mesh, x), ps.names[d][k]) == 0)
            a = x;
        if (a < 0 || (seen & (1u << a)))
          want = SHMAP_EAXIS;
        else
          seen |= 1u << a;
      }
  }
  CHECK(rc == want, "resolve \"%s\" = %d, want %d", text, rc, want);
  if (rc == 0) {
    CHECK(s.ndims == ps.ndims, "resolve \"%s\": %d entries, parse %d", text,
          s.ndims, ps.ndims);
    for (int d = 0; d < s.ndims; d++) {
      CHECK(s.naxes[d] == ps.nnames[d], "resolve \"%s\": entry %d", text, d);
      for (int k = 0; k < s.naxes[d]; k++)
        CHECK(s.axes[d][k] >= 0 && s.axes[d][k] < shmap_mesh_naxes(mesh) &&
                  strcmp(shmap_mesh_axis_name(mesh, s.axes[d][k]),
                         ps.names[d][k]) == 0,
              "resolve \"%s\": entry %d axis %d is %d", text, d, k,
              s.axes[d][k]);
    }

    check_forms(mesh, text, &s);
    check_merged(mesh, &s);
  }

  /* shmap_spec_check() agrees with resolve and the shape rules. */
  int nd = rc == 0 ? s.ndims : (prc == 0 ? ps.ndims : 0);
  check_fit(mesh, text, rc, &s, nd, NULL);
  check_fit(mesh, text, rc, &s, nd - 1, NULL);
  check_fit(mesh, text, rc, &s, SHMAP_MAX_RANK + 1, NULL);
  int64_t shape[SHMAP_MAX_RANK];
  for (int d = 0; d < SHMAP_MAX_RANK; d++)
    shape[d] = (rc == 0 ? entry_count(mesh, &s, d) : 1) * (d + 1);
  check_fit_shape(mesh, text, rc, &s, nd, shape);
  for (int d = 0; rc == 0 && d < s.ndims; d++)
    if (entry_count(mesh, &s, d) > 1) {
      shape[d] += 1;
      check_fit_shape(mesh, text, rc, &s, nd, shape);
      shape[d] -= 1;
    }
  if (rank_given >= 0) {
    check_fit(mesh, text, rc, &s, rank_given, NULL);
    check_fit_shape(mesh, text, rc, &s, rank_given, shape_given);
  }
}

/* ---- axes of collectives ------------------------------------------------ */

static void check_axes(const shmap_mesh *mesh, const char *text)
{
  /* Expected: one entry (a name or a tuple) or a list of single names, each
   * a mesh axis, none twice. */
  shmap__pspec ps;
  int want = shmap__spec_parse(text, &ps);
  int wantn = 0, wanta[SHMAP_MAX_RANK * SHMAP_MAX_AXES];
  if (!want) {
    for (int d = 0; d < ps.ndims && !want; d++)
      if (ps.ndims > 1 && ps.nnames[d] != 1)
        want = SHMAP_ESYNTAX;
    unsigned seen = 0;
    for (int d = 0; d < ps.ndims && !want; d++)
      for (int k = 0; k < ps.nnames[d] && !want; k++) {
        int a = -1;
        for (int x = 0; x < shmap_mesh_naxes(mesh); x++)
          if (strcmp(shmap_mesh_axis_name(mesh, x), ps.names[d][k]) == 0)
            a = x;
        if (a < 0 || (seen & (1u << a)))
          want = SHMAP_EAXIS;
        seen |= a >= 0 ? 1u << a : 0;
        wanta[wantn++] = a;
      }
  }

  int axes[SHMAP_MAX_AXES], naxes = -1;
  char *t = text_dup(text, strlen(text));
  clear_msg();
  int rc = shmap__axes_parse(mesh, AXES_OP, t, axes, &naxes);
  check_rc("shmap__axes_parse", t, rc,
           CODE_BIT(SHMAP_ESYNTAX) | CODE_BIT(SHMAP_EAXIS));
  CHECK(rc == want, "axes_parse(\"%s\") = %d, want %d", t, rc, want);
  if (rc) {
    CHECK(strncmp(shmap_errmsg(), AXES_OP ": ", strlen(AXES_OP) + 2) == 0,
          "axes \"%s\": message does not start with the op", t);
    CHECK(msg_quotes(t), "axes \"%s\": message lacks the axes text", t);
    free(t);
    return;
  }
  CHECK(naxes == wantn, "axes \"%s\": %d axes, want %d", t, naxes, wantn);
  for (int k = 0; k < naxes; k++)
    CHECK(axes[k] == wanta[k], "axes \"%s\": axis %d is %d, want %d", t, k,
          axes[k], wanta[k]);

  /* The formatted group parses back to the same axes. */
  char fmt[FMT_MAX];
  shmap__axes_format(mesh, axes, naxes, fmt, sizeof fmt);
  CHECK(strnlen(fmt, sizeof fmt) + 1 < sizeof fmt, "axes format fills buffer");
  int axes2[SHMAP_MAX_AXES], naxes2 = -1;
  clear_msg();
  rc = shmap__axes_parse(mesh, AXES_OP, fmt, axes2, &naxes2);
  CHECK(rc == 0 && naxes2 == naxes &&
            memcmp(axes, axes2, sizeof(int) * (size_t)naxes) == 0,
        "axes \"%s\" formatted as \"%s\" parse back differently (%d)", t, fmt,
        rc);
  free(t);
}

/* ---- the target --------------------------------------------------------- */

/* Integers anywhere in `text` give the rank (their count, up to 16) and
 * the shape. */
static int parse_shape(const char *text, int64_t shape[16])
{
  int n = 0;
  const char *p = text;
  while (*p && n < 16) {
    if (isdigit((unsigned char)*p) ||
        (*p == '-' && isdigit((unsigned char)p[1]))) {
      char *end;
      errno = 0;
      long long v = strtoll(p, &end, 10);
      shape[n++] = (int64_t)v;
      p = end;
    } else {
      p++;
    }
  }
  return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  cur_data = data;
  cur_size = size;
  const char *in = (const char *)data;

  /* Split into up to four fields at '|'. */
  const char *field[4];
  size_t flen[4];
  int nf = 0;
  size_t start = 0;
  for (size_t i = 0; i <= size && nf < 4; i++)
    if (i == size || (in[i] == '|' && nf < 3)) {
      field[nf] = in + start;
      flen[nf++] = i - start;
      start = i + 1;
    }

  char *mesh_text = text_dup(field[0], flen[0]);
  char *spec_text = text_dup(nf > 1 ? field[1] : field[0],
                             nf > 1 ? flen[1] : flen[0]);
  char *axes_text = text_dup(nf > 3 ? field[3] : spec_text,
                             nf > 3 ? flen[3] : strlen(spec_text));
  int rank = -1;
  int64_t shape[16];
  if (nf > 2) {
    char *shape_text = text_dup(field[2], flen[2]);
    rank = parse_shape(shape_text, shape);
    free(shape_text);
  }

  shmap_mesh *fixed = NULL;
  int rc = shmap_mesh_create_axes(&fixed, FIXED_NAXES, fixed_names,
                                  fixed_sizes);
  CHECK(rc == 0, "the fixed mesh fails: %d", rc);
  shmap_mesh *longm = NULL;
  rc = shmap_mesh_create_axes(&longm, FIXED_NAXES, long_names, long_sizes);
  CHECK(rc == 0, "the mesh of long names fails: %d", rc);
  shmap_mesh *mesh = fuzz_mesh(mesh_text);

  check_spec(fixed, spec_text, rank, shape);
  check_axes(fixed, axes_text);
  check_spec(longm, spec_text, rank, shape);
  check_axes(longm, axes_text);
  if (mesh) {
    check_spec(mesh, spec_text, rank, shape);
    check_axes(mesh, axes_text);
  }

  shmap_mesh_destroy(mesh);
  shmap_mesh_destroy(longm);
  shmap_mesh_destroy(fixed);
  free(mesh_text);
  free(spec_text);
  free(axes_text);
  cur_data = NULL;
  cur_size = 0;
  return 0;
}

#ifndef SHMAP_LIBFUZZER /* a regression test over the seed corpus */

static int nfiles, ninputs;

static void run_bytes(const uint8_t *buf, size_t n)
{
  /* An exact-size heap copy for each length, so AddressSanitizer sees
   * reads past the end. */
  for (size_t len = 0; len <= n; len++) {
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) {
      perror("fuzz_parse");
      exit(99);
    }
    memcpy(copy, buf, len);
    LLVMFuzzerTestOneInput(copy, len);
    free(copy);
    ninputs++;
  }
}

static int run_file(const char *path)
{
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz_parse: %s: %s\n", path, strerror(errno));
    return -1;
  }
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? 2 * cap : 1024;
      uint8_t *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        fprintf(stderr, "fuzz_parse: out of memory reading %s\n", path);
        return -1;
      }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0)
      break;
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    free(buf);
    fprintf(stderr, "fuzz_parse: error reading %s\n", path);
    return -1;
  }
  run_bytes(buf, n);
  free(buf);
  nfiles++;
  return 0;
}

static int run_path(const char *path)
{
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "fuzz_parse: %s: %s\n", path, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode))
    return run_file(path);
  struct dirent **list;
  int n = scandir(path, &list, NULL, alphasort);
  if (n < 0) {
    fprintf(stderr, "fuzz_parse: %s: %s\n", path, strerror(errno));
    return -1;
  }
  int rc = 0;
  for (int i = 0; i < n; i++) {
    if (list[i]->d_name[0] != '.' && rc == 0) {
      size_t len = strlen(path) + strlen(list[i]->d_name) + 2;
      char *file = malloc(len);
      if (!file) {
        rc = -1;
      } else {
        snprintf(file, len, "%s/%s", path, list[i]->d_name);
        if (stat(file, &st) == 0 && S_ISREG(st.st_mode))
          rc = run_file(file);
        free(file);
      }
    }
    free(list[i]);
  }
  free(list);
  return rc;
}

int main(int argc, char **argv)
{
  int rc = 0;
  if (argc > 1) {
    for (int i = 1; i < argc && rc == 0; i++)
      rc = run_path(argv[i]);
  } else {
    const char *top = getenv("top_srcdir");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus", top && *top ? top : ".");
    rc = run_path(dir);
  }
  if (rc != 0)
    return 99;
  if (nfiles == 0) {
    fprintf(stderr, "fuzz_parse: no corpus files found\n");
    return 99;
  }
  printf("fuzz_parse: %d inputs (%d files and their prefixes): all "
         "invariants hold\n",
         ninputs, nfiles);
  return 0;
}

#endif
