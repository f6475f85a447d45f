/* SPDX-License-Identifier: MIT */
/* error.c - error codes, their strings, and the per-thread detailed message. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* Each thread (user threads and device threads alike) keeps its own last
 * message, so concurrent callers never see each other's errors. */
static _Thread_local char own_errbuf[SHMAP__MSG_MAX];
/* A device fiber running on this thread uses its own buffer instead, so a
 * device never sees another device's message. */
static SHMAP__TLS_FAST char *errbuf_override;

char *shmap__errbuf_use(char *buf)
{
  char *old = errbuf_override;
  errbuf_override = buf;
  return old;
}

char *shmap__errbuf(void) { return errbuf_override ? errbuf_override : own_errbuf; }

SHMAP_EXTERN const char *shmap_strerror(int code)
{
  switch (code) {
#define TEXT(name, value, text) \
  case SHMAP_##name: return text;
    SHMAP_ERRNO_MAP(TEXT)
#undef TEXT
  default: return "unknown error code";
  }
}

SHMAP_EXTERN const char *shmap_err_name(int code)
{
  switch (code) {
#define NAME(name, value, text) \
  case SHMAP_##name: return "SHMAP_" #name;
    SHMAP_ERRNO_MAP(NAME)
#undef NAME
  default: return "SHMAP_UNKNOWN";
  }
}

SHMAP_EXTERN const char *shmap_errmsg(void) { return shmap__errbuf(); }

int shmap__verr(int code, const char *fmt, va_list ap)
{
  vsnprintf(shmap__errbuf(), SHMAP__MSG_MAX, fmt, ap);
  return code;
}

int shmap__err(int code, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  shmap__verr(code, fmt, ap);
  va_end(ap);
  return code;
}

int shmap__err_prefix(int code, const char *fmt, ...)
{
  char prefix[256], old[SHMAP__MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  snprintf(old, sizeof old, "%s", shmap__errbuf());
  return shmap__err(code, "%s: %s", prefix, old);
}

void shmap__err_set(const char *msg)
{
  char *buf = shmap__errbuf();
  if (msg != buf)
    snprintf(buf, SHMAP__MSG_MAX, "%s", msg);
}

void shmap__cat(char *buf, size_t n, const char *fmt, ...)
{
  size_t len = strnlen(buf, n);
  if (len + 1 >= n)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + len, n - len, fmt, ap);
  va_end(ap);
}
