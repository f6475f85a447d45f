/* SPDX-License-Identifier: MIT */
/* version.c - the library's own version, for programs that need to know
 * which libshmap they run with rather than which headers they were built
 * against (the SHMAP_VERSION_* macros). */
#include "internal.h"

SHMAP_EXTERN unsigned shmap_version(void) { return SHMAP_VERSION_HEX; }

SHMAP_EXTERN const char *shmap_version_string(void)
{
  return SHMAP_VERSION_STRING;
}
