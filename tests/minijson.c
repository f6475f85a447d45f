/* SPDX-License-Identifier: MIT */
/* minijson.c - see minijson.h. */
#include "minijson.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MJ_MAX_DEPTH 64

typedef struct parser {
  const char *s;
  size_t len, pos;
  int depth;
  char *err;
  size_t errlen;
  bool failed;
} parser;

static void fail(parser *p, const char *fmt, ...)
{
  if (p->failed)
    return;
  p->failed = true;
  if (!p->err || !p->errlen)
    return;
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  snprintf(p->err, p->errlen, "JSON error at byte %zu: %s", p->pos, what);
}

static void skip_ws(parser *p)
{
  while (p->pos < p->len) {
    char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
      break;
    p->pos++;
  }
}

static int peek(const parser *p) { return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1; }

static mj_value *new_value(parser *p, mj_type t)
{
  mj_value *v = calloc(1, sizeof *v);
  if (!v)
    fail(p, "out of memory");
  else
    v->type = t;
  return v;
}

static bool literal(parser *p, const char *word)
{
  size_t n = strlen(word);
  if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
    return false;
  p->pos += n;
  return true;
}

/* A growing byte buffer for decoded strings. */
typedef struct buf {
  char *s;
  size_t len, cap;
} buf;

static bool buf_put(buf *b, const char *src, size_t n)
{
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 32;
    while (cap < b->len + n + 1)
      cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s)
      return false;
    b->s = s;
    b->cap = cap;
  }
  memcpy(b->s + b->len, src, n);
  b->len += n;
  b->s[b->len] = '\0';
  return true;
}

static bool put_utf8(buf *b, uint32_t cp)
{
  char o[4];
  size_t n;
  if (cp < 0x80) {
    o[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    o[0] = (char)(0xC0 | cp >> 6);
    o[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    o[0] = (char)(0xE0 | cp >> 12);
    o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  return buf_put(b, o, n);
}

static bool hex4(parser *p, uint32_t *out)
{
  if (p->len - p->pos < 4) {
    fail(p, "truncated \\u escape");
    return false;
  }
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p->s[p->pos + (size_t)i];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v |= (uint32_t)(c - 'A' + 10);
    else {
      fail(p, "bad hex digit in \\u escape");
      return false;
    }
  }
  p->pos += 4;
  *out = v;
  return true;
}

/* Parses a string at p->pos (which is '"'); returns the decoded text. */
static char *parse_string(parser *p, size_t *len_out)
{
  buf b = {0};
  if (!buf_put(&b, "", 0)) {
    fail(p, "out of memory");
    return NULL;
  }
  p->pos++; /* opening quote */
  for (;;) {
    if (p->pos >= p->len) {
      fail(p, "unterminated string");
      break;
    }
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c == '"') {
      p->pos++;
      if (len_out)
        *len_out = b.len;
      return b.s;
    }
    if (c < 0x20) {
      fail(p, "control character 0x%02x in a string", c);
      break;
    }
    if (c != '\\') {
      size_t start = p->pos;
      while (p->pos < p->len && p->s[p->pos] != '"' && p->s[p->pos] != '\\' &&
             (unsigned char)p->s[p->pos] >= 0x20)
        p->pos++;
      if (!buf_put(&b, p->s + start, p->pos - start)) {
        fail(p, "out of memory");
        break;
      }
      continue;
    }
    p->pos++;
    if (p->pos >= p->len) {
      fail(p, "unterminated escape");
      break;
    }
    char e = p->s[p->pos++];
    const char *rep = NULL;
    switch (e) {
    case '"': rep = "\""; break;
    case '\\': rep = "\\"; break;
    case '/': rep = "/"; break;
    case 'b': rep = "\b"; break;
    case 'f': rep = "\f"; break;
    case 'n': rep = "\n"; break;
    case 'r': rep = "\r"; break;
    case 't': rep = "\t"; break;
    case 'u': {
      uint32_t cp;
      if (!hex4(p, &cp))
        goto bad;
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        uint32_t lo;
        if (!literal(p, "\\u") || !hex4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
          fail(p, "unpaired surrogate in \\u escape");
          goto bad;
        }
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        fail(p, "unpaired low surrogate in \\u escape");
        goto bad;
      }
      if (!put_utf8(&b, cp)) {
        fail(p, "out of memory");
        goto bad;
      }
      continue;
    }
    default:
      fail(p, "bad escape \\%c", e);
      goto bad;
    }
    if (!buf_put(&b, rep, 1)) {
      fail(p, "out of memory");
      break;
    }
  }
bad:
  free(b.s);
  return NULL;
}

static bool digits(parser *p)
{
  size_t start = p->pos;
  while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
    p->pos++;
  return p->pos > start;
}

static mj_value *parse_number(parser *p)
{
  size_t start = p->pos;
  if (peek(p) == '-')
    p->pos++;
  if (peek(p) == '0') {
    p->pos++;
  } else if (!digits(p)) {
    fail(p, "expected a digit");
    return NULL;
  }
  if (peek(p) == '.') {
    p->pos++;
    if (!digits(p)) {
      fail(p, "expected a digit after '.'");
      return NULL;
    }
  }
  if (peek(p) == 'e' || peek(p) == 'E') {
    p->pos++;
    if (peek(p) == '+' || peek(p) == '-')
      p->pos++;
    if (!digits(p)) {
      fail(p, "expected a digit in the exponent");
      return NULL;
    }
  }
  char tmp[128];
  size_t n = p->pos - start;
  if (n >= sizeof tmp) {
    fail(p, "number too long");
    return NULL;
  }
  memcpy(tmp, p->s + start, n);
  tmp[n] = '\0';
  mj_value *v = new_value(p, MJ_NUM);
  if (v)
    v->num = strtod(tmp, NULL);
  return v;
}

static mj_value *parse_value(parser *p);

static bool push(parser *p, mj_value *v, char *key, mj_value *item)
{
  mj_value **items = realloc(v->items, (v->n + 1) * sizeof *items);
  if (!items) {
    fail(p, "out of memory");
    return false;
  }
  v->items = items;
  if (v->type == MJ_OBJ) {
    char **keys = realloc(v->keys, (v->n + 1) * sizeof *keys);
    if (!keys) {
      fail(p, "out of memory");
      return false;
    }
    v->keys = keys;
    v->keys[v->n] = key;
  }
  v->items[v->n++] = item;
  return true;
}

static mj_value *parse_container(parser *p, bool obj)
{
  if (++p->depth > MJ_MAX_DEPTH) {
    fail(p, "nesting deeper than %d", MJ_MAX_DEPTH);
    return NULL;
  }
  mj_value *v = new_value(p, obj ? MJ_OBJ : MJ_ARR);
  if (!v)
    return NULL;
  p->pos++; /* '[' or '{' */
  skip_ws(p);
  char close = obj ? '}' : ']';
  if (peek(p) == close) {
    p->pos++;
    p->depth--;
    return v;
  }
  for (;;) {
    skip_ws(p);
    char *key = NULL;
    if (obj) {
      if (peek(p) != '"') {
        fail(p, "expected a member name in double quotes");
        break;
      }
      key = parse_string(p, NULL);
      if (!key)
        break;
      skip_ws(p);
      if (peek(p) != ':') {
        free(key);
        fail(p, "expected ':' after a member name");
        break;
      }
      p->pos++;
    }
    mj_value *item = parse_value(p);
    if (!item) {
      free(key);
      break;
    }
    if (!push(p, v, key, item)) {
      free(key);
      mj_free(item);
      break;
    }
    skip_ws(p);
    if (peek(p) == ',') {
      p->pos++;
      skip_ws(p);
      if (peek(p) == close) {
        fail(p, "trailing comma");
        break;
      }
      continue;
    }
    if (peek(p) == close) {
      p->pos++;
      p->depth--;
      return v;
    }
    fail(p, "expected ',' or '%c'", close);
    break;
  }
  mj_free(v);
  return NULL;
}

static mj_value *parse_value(parser *p)
{
  skip_ws(p);
  int c = peek(p);
  mj_value *v;
  switch (c) {
  case -1:
    fail(p, "unexpected end of text");
    return NULL;
  case '{':
    return parse_container(p, true);
  case '[':
    return parse_container(p, false);
  case '"': {
    size_t len = 0;
    char *s = parse_string(p, &len);
    if (!s)
      return NULL;
    v = new_value(p, MJ_STR);
    if (!v) {
      free(s);
      return NULL;
    }
    v->str = s;
    v->len = len;
    return v;
  }
  case 't':
  case 'f':
    if (literal(p, "true") || literal(p, "false")) {
      v = new_value(p, MJ_BOOL);
      if (v)
        v->boolean = c == 't';
      return v;
    }
    break;
  case 'n':
    if (literal(p, "null"))
      return new_value(p, MJ_NULL);
    break;
  default:
    if (c == '-' || (c >= '0' && c <= '9'))
      return parse_number(p);
    break;
  }
  fail(p, "unexpected character '%c'", c);
  return NULL;
}

mj_value *mj_parse(const char *text, size_t len, char *err, size_t errlen)
{
  parser p = {.s = text, .len = len, .err = err, .errlen = errlen};
  if (err && errlen)
    err[0] = '\0';
  if (!text) {
    fail(&p, "no text");
    return NULL;
  }
  mj_value *v = parse_value(&p);
  if (!v)
    return NULL;
  skip_ws(&p);
  if (p.pos != p.len) {
    fail(&p, "trailing text after the value");
    mj_free(v);
    return NULL;
  }
  return v;
}

void mj_free(mj_value *v)
{
  if (!v)
    return;
  for (size_t i = 0; i < v->n; i++) {
    mj_free(v->items[i]);
    if (v->keys)
      free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->str);
  free(v);
}

const mj_value *mj_get(const mj_value *v, const char *key)
{
  if (!v || v->type != MJ_OBJ)
    return NULL;
  const mj_value *found = NULL;
  for (size_t i = 0; i < v->n; i++)
    if (strcmp(v->keys[i], key) == 0)
      found = v->items[i];
  return found;
}

const char *mj_get_str(const mj_value *v, const char *key)
{
  const mj_value *m = mj_get(v, key);
  return m && m->type == MJ_STR ? m->str : NULL;
}

bool mj_get_num(const mj_value *v, const char *key, double *out)
{
  const mj_value *m = mj_get(v, key);
  if (!m || m->type != MJ_NUM)
    return false;
  *out = m->num;
  return true;
}

const char *mj_type_name(mj_type t)
{
  switch (t) {
  case MJ_NULL: return "null";
  case MJ_BOOL: return "boolean";
  case MJ_NUM: return "number";
  case MJ_STR: return "string";
  case MJ_ARR: return "array";
  case MJ_OBJ: return "object";
  default: return "?";
  }
}
