/* SPDX-License-Identifier: MIT */
/* spec.c - partition specs: parsing the text forms, resolving names against
 * a mesh, and checking them against an array. */
#include "internal.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

typedef struct parser {
  const char *text; /* whole text, for messages */
  const char *p;
  const char *kind; /* "spec" or "axes" */
} parser;

static void skip_ws(parser *ps)
{
  while (isspace((unsigned char)*ps->p))
    ps->p++;
}

static int syntax(parser *ps, const char *what)
{
  return shmap__err(SHMAP_ESYNTAX, "%s \"%.200s\": syntax error at column %d: %s",
                    ps->kind, ps->text, (int)(ps->p - ps->text) + 1, what);
}

/* True (and consumes it) when the next token is the bare word `w`. */
static bool accept_word(parser *ps, const char *w)
{
  size_t n = strlen(w);
  if (strncmp(ps->p, w, n) != 0)
    return false;
  char c = ps->p[n];
  if (isalnum((unsigned char)c) || c == '_')
    return false;
  ps->p += n;
  return true;
}

/* name := identifier | 'identifier' | "identifier" */
static int parse_name(parser *ps, char out[SHMAP__NAME_MAX])
{
  char quote = 0;
  if (*ps->p == '\'' || *ps->p == '"')
    quote = *ps->p++;
  const char *start = ps->p;
  while (isalnum((unsigned char)*ps->p) || *ps->p == '_')
    ps->p++;
  size_t len = (size_t)(ps->p - start);
  if (quote) {
    if (*ps->p != quote) {
      if (*ps->p == '\0')
        return syntax(ps, "unterminated quoted axis name");
      return syntax(ps, "axis names are identifiers (letters, digits, '_')");
    }
    ps->p++;
  }
  if (len == 0) {
    ps->p = start - (quote ? 1 : 0);
    return syntax(ps, "expected an axis name, None or '('");
  }
  if (len >= SHMAP__NAME_MAX) {
    ps->p = start;
    return syntax(ps, "axis name too long");
  }
  memcpy(out, start, len);
  out[len] = '\0';
  return 0;
}

static int parse_entry(parser *ps, shmap__pspec *out)
{
  if (out->ndims == SHMAP_MAX_RANK)
    return syntax(ps, "too many entries (more than SHMAP_MAX_RANK)");
  int d = out->ndims++;
  out->nnames[d] = 0;
  skip_ws(ps);
  if (accept_word(ps, "None"))
    return 0;
  if (*ps->p != '(') {
    int rc = parse_name(ps, out->names[d][0]);
    if (rc)
      return rc;
    out->nnames[d] = 1;
    return 0;
  }
  ps->p++; /* a tuple of names: ('i', 'j'), ('i',), () */
  for (;;) {
    skip_ws(ps);
    if (*ps->p == ')') {
      ps->p++;
      return 0;
    }
    if (*ps->p == '(')
      return syntax(ps, "tuples cannot be nested");
    if (accept_word(ps, "None")) {
      ps->p -= 4;
      return syntax(ps, "None cannot appear inside a tuple of axes");
    }
    if (out->nnames[d] == SHMAP_MAX_AXES)
      return syntax(ps, "too many axes in one entry");
    int rc = parse_name(ps, out->names[d][out->nnames[d]]);
    if (rc)
      return rc;
    out->nnames[d]++;
    skip_ws(ps);
    if (*ps->p == ',')
      ps->p++;
    else if (*ps->p != ')')
      return syntax(ps, *ps->p ? "expected ',' or ')' in a tuple of axes"
                               : "unbalanced '(': missing ')'");
  }
}

/* list := empty | entry (',' entry)* [','] ending at `close` ('\0' or ')') */
static int parse_list(parser *ps, shmap__pspec *out, char close)
{
  skip_ws(ps);
  if (*ps->p == close)
    return 0;
  for (;;) {
    skip_ws(ps);
    if (*ps->p == ',')
      return syntax(ps, "empty entry (write None for an unsplit dimension)");
    int rc = parse_entry(ps, out);
    if (rc)
      return rc;
    skip_ws(ps);
    if (*ps->p == ',') {
      ps->p++;
      skip_ws(ps);
      if (*ps->p == close)
        return 0;
      continue;
    }
    if (*ps->p == close)
      return 0;
    if (*ps->p == '\0')
      return syntax(ps, "unbalanced '(': missing ')'");
    return syntax(ps, close ? "expected ',' or ')'" : "expected ',' or end of text");
  }
}

static int parse(const char *text, const char *kind, shmap__pspec *out)
{
  memset(out, 0, sizeof *out);
  if (!text)
    return shmap__err(SHMAP_EINVAL, "%s is NULL", kind);
  parser ps = {text, text, kind};
  skip_ws(&ps);
  const char *save = ps.p;
  if (accept_word(&ps, "P") || accept_word(&ps, "PartitionSpec")) {
    skip_ws(&ps);
    if (*ps.p == '(') {
      ps.p++;
      int rc = parse_list(&ps, out, ')');
      if (rc)
        return rc;
      ps.p++; /* ')' */
      skip_ws(&ps);
      if (*ps.p)
        return syntax(&ps, "unexpected text after P(...)");
      return 0;
    }
    ps.p = save; /* an axis named P in the short form */
  }
  int rc = parse_list(&ps, out, '\0');
  if (rc)
    return rc;
  return 0;
}

int shmap__spec_parse(const char *text, shmap__pspec *out)
{
  return parse(text, "spec", out);
}

static int find_axis(const shmap_mesh *mesh, const char *name)
{
  for (int a = 0; a < mesh->naxes; a++)
    if (strcmp(mesh->names[a], name) == 0)
      return a;
  return -1;
}

static void mesh_axes_list(const shmap_mesh *mesh, char *buf, size_t n)
{
  buf[0] = '\0';
  for (int a = 0; a < mesh->naxes; a++)
    shmap__cat(buf, n, "%s%s", a ? ", " : "", mesh->names[a]);
}

void shmap__mask_format(const shmap_mesh *mesh, unsigned mask, char *buf,
                        size_t n)
{
  buf[0] = '\0';
  int k = 0;
  for (int a = 0; a < mesh->naxes; a++)
    if (mask & (1u << a))
      shmap__cat(buf, n, "%s'%s'", k++ ? ", " : "", mesh->names[a]);
  if (!k)
    shmap__cat(buf, n, "none");
}

int shmap__axes_manual(const shmap_mesh *mesh, unsigned manual, const char *op,
                       const char *text, const int axes[], int naxes)
{
  for (int k = 0; k < naxes; k++)
    if (!(manual & (1u << axes[k]))) {
      char list[320];
      shmap__mask_format(mesh, manual, list, sizeof list);
      return shmap__err(SHMAP_EAXIS,
                        "%s: axis '%s' in \"%.200s\" is not a manual axis of "
                        "this map (manual axes: %s)",
                        op, mesh->names[axes[k]], text, list);
    }
  return 0;
}

int shmap__spec_resolve_manual(const shmap_mesh *mesh, unsigned manual,
                               const char *text, shmap__spec *out)
{
  int rc = shmap__spec_resolve(mesh, text, out);
  if (rc)
    return rc;
  for (int d = 0; d < out->ndims; d++)
    if ((rc = shmap__axes_manual(mesh, manual, "spec", text, out->axes[d],
                                 out->naxes[d])))
      return rc;
  return 0;
}

int shmap__spec_resolve(const shmap_mesh *mesh, const char *text,
                        shmap__spec *out)
{
  shmap__pspec ps;
  int rc = shmap__spec_parse(text, &ps);
  if (rc)
    return rc;
  memset(out, 0, sizeof *out);
  out->ndims = ps.ndims;
  unsigned seen = 0;
  for (int d = 0; d < ps.ndims; d++) {
    out->naxes[d] = ps.nnames[d];
    for (int k = 0; k < ps.nnames[d]; k++) {
      int a = find_axis(mesh, ps.names[d][k]);
      if (a < 0) {
        char axes[256];
        mesh_axes_list(mesh, axes, sizeof axes);
        return shmap__err(SHMAP_EAXIS,
                          "spec \"%.200s\": unknown axis '%s' (mesh axes: %s)",
                          text, ps.names[d][k], axes);
      }
      if (seen & (1u << a))
        return shmap__err(SHMAP_EAXIS,
                          "spec \"%.200s\": axis '%s' appears more than once",
                          text, ps.names[d][k]);
      seen |= 1u << a;
      out->axes[d][k] = a;
    }
  }
  return 0;
}

int shmap__spec_fit(const shmap_mesh *mesh, const char *what, const char *text,
                    const shmap__spec *spec, int rank, const int64_t shape[])
{
  if (spec->ndims > rank)
    return shmap__err(SHMAP_ESHAPE,
                      "%s \"%.200s\" has length %d but the array has rank %d",
                      what, text, spec->ndims, rank);
  if (!shape)
    return 0;
  char where[256];
  snprintf(where, sizeof where, "%s \"%.200s\"", what, text);
  int rc = shmap__shape_size(where, rank, shape, 1, NULL, NULL);
  if (rc)
    return rc;
  for (int d = 0; d < spec->ndims; d++) {
    int64_t count = shmap__entry_count(mesh, spec, d);
    if (shape[d] % count != 0) {
      char axes[320];
      shmap__axes_format(mesh, spec->axes[d], spec->naxes[d], axes, sizeof axes);
      return shmap__err(SHMAP_ESHAPE,
                        "%s \"%.200s\": dimension %d of size %lld is not "
                        "divisible by %lld, the number of devices along %s",
                        what, text, d, (long long)shape[d], (long long)count,
                        axes);
    }
  }
  return 0;
}

SHMAP_EXTERN int shmap_spec_check(const shmap_mesh *mesh, const char *spec,
                                  int rank, const int64_t shape[])
{
  if (!mesh || !spec)
    return shmap__err(SHMAP_EINVAL, "shmap_spec_check: NULL argument");
  if (rank < 0 || rank > SHMAP_MAX_RANK)
    return shmap__err(SHMAP_EINVAL, "rank %d is out of range [0, %d]", rank,
                      SHMAP_MAX_RANK);
  shmap__spec s;
  int rc = shmap__spec_resolve(mesh, spec, &s);
  if (rc)
    return rc;
  return shmap__spec_fit(mesh, "spec", spec, &s, rank, shape);
}

void shmap__axes_format(const shmap_mesh *mesh, const int axes[], int naxes,
                        char *buf, size_t n)
{
  buf[0] = '\0';
  if (naxes == 1) {
    shmap__cat(buf, n, "'%s'", mesh->names[axes[0]]);
    return;
  }
  shmap__cat(buf, n, "(");
  for (int k = 0; k < naxes; k++)
    shmap__cat(buf, n, "%s'%s'", k ? ", " : "", mesh->names[axes[k]]);
  shmap__cat(buf, n, ")");
}

void shmap__spec_format(const shmap_mesh *mesh, const shmap__spec *spec,
                        char *buf, size_t n)
{
  buf[0] = '\0';
  shmap__cat(buf, n, "P(");
  for (int d = 0; d < spec->ndims; d++) {
    shmap__cat(buf, n, "%s", d ? ", " : "");
    if (spec->naxes[d] == 0) {
      shmap__cat(buf, n, "None");
      continue;
    }
    /* Appended in place: an entry of eight long names is ~280 bytes. */
    size_t len = strlen(buf);
    shmap__axes_format(mesh, spec->axes[d], spec->naxes[d], buf + len, n - len);
  }
  shmap__cat(buf, n, ")");
}

int shmap__axes_parse(const shmap_mesh *mesh, const char *op, const char *text,
                      int axes[], int *naxes)
{
  shmap__pspec ps;
  *naxes = 0;
  if (!text)
    return shmap__err(SHMAP_EINVAL, "%s: axes is NULL", op);
  int rc = parse(text, "axes", &ps);
  if (rc)
    return shmap__err_prefix(rc, "%s", op);
  /* Either one entry (a name or a tuple) or a flat list of names. */
  int n = 0;
  char(*names)[SHMAP__NAME_MAX] = NULL;
  char flat[SHMAP_MAX_RANK][SHMAP__NAME_MAX];
  if (ps.ndims == 1) {
    n = ps.nnames[0];
    names = ps.names[0];
  } else if (ps.ndims > 1) {
    for (int d = 0; d < ps.ndims; d++) {
      if (ps.nnames[d] != 1)
        return shmap__err(SHMAP_ESYNTAX,
                          "%s: axes \"%.200s\" must be one axis name, a tuple "
                          "('i', 'j') or a list of names i, j",
                          op, text);
      memcpy(flat[d], ps.names[d][0], SHMAP__NAME_MAX);
    }
    n = ps.ndims;
    names = flat;
  }
  unsigned seen = 0;
  for (int k = 0; k < n; k++) {
    int a = find_axis(mesh, names[k]);
    if (a < 0) {
      char list[256];
      mesh_axes_list(mesh, list, sizeof list);
      return shmap__err(SHMAP_EAXIS, "%s: unknown axis '%s' in axes \"%.200s\" "
                        "(mesh axes: %s)", op, names[k], text, list);
    }
    if (seen & (1u << a))
      return shmap__err(SHMAP_EAXIS, "%s: axis '%s' appears more than once in "
                        "axes \"%.200s\"", op, names[k], text);
    seen |= 1u << a;
    axes[k] = a;
  }
  *naxes = n;
  return 0;
}

bool shmap__spec_same(const shmap__spec *a, const shmap__spec *b, int rank)
{
  for (int d = 0; d < rank; d++) {
    int na = d < a->ndims ? a->naxes[d] : 0;
    int nb = d < b->ndims ? b->naxes[d] : 0;
    if (na != nb || (na && memcmp(a->axes[d], b->axes[d], sizeof(int) * (size_t)na)))
      return false;
  }
  return true;
}
