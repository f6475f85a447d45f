/* SPDX-License-Identifier: MIT */
/*
 * minijson.h - a small strict JSON parser (RFC 8259) for the tests that read
 * files the library writes (the Chrome trace).  It builds a tree; nothing is
 * lenient: trailing commas, comments, unquoted keys, control characters in
 * strings, leading zeros and trailing text are all errors.
 */
#ifndef MINIJSON_H
#define MINIJSON_H

#include <stdbool.h>
#include <stddef.h>

typedef enum mj_type {
  MJ_NULL,
  MJ_BOOL,
  MJ_NUM,
  MJ_STR,
  MJ_ARR,
  MJ_OBJ
} mj_type;

typedef struct mj_value mj_value;
struct mj_value {
  mj_type type;
  bool boolean;     /* MJ_BOOL */
  double num;       /* MJ_NUM */
  char *str;        /* MJ_STR: decoded, NUL-terminated (UTF-8) */
  size_t len;       /* MJ_STR: bytes, without the NUL */
  size_t n;         /* MJ_ARR, MJ_OBJ: number of elements or members */
  mj_value **items; /* MJ_ARR elements, MJ_OBJ member values */
  char **keys;      /* MJ_OBJ member names (decoded) */
};

/* Parse `len` bytes of `text`.  NULL on error, with a message naming the
 * byte offset in err (of size errlen). */
mj_value *mj_parse(const char *text, size_t len, char *err, size_t errlen);
void mj_free(mj_value *v);

/* Member `key` of an object (the last one when repeated), or NULL when v is
 * not an object or has no such member. */
const mj_value *mj_get(const mj_value *v, const char *key);
/* Typed lookups: NULL (or false) when absent or of another type. */
const char *mj_get_str(const mj_value *v, const char *key);
bool mj_get_num(const mj_value *v, const char *key, double *out);
const char *mj_type_name(mj_type t);

#endif /* MINIJSON_H */
