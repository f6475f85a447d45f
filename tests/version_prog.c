/* SPDX-License-Identifier: MIT */
/*
 * version_prog.c - the version three ways: the header's macros, the
 * library's shmap_version() and shmap_version_string(), and (when given as
 * argv[1]) the version configure.ac declares, as pkg-config or the build
 * reports it.  All must agree, and SHMAP_VERSION_HEX must be the macros'
 * major, minor and patch numbers in one byte each.  Run by make check as
 * tests/test_version, and linked against the installed library by
 * tests/test_install.sh (dynamically and statically); it also runs one map
 * with a psum, so that a static link that misses a library fails here.
 */
#include <shmap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int body(shmap_ctx *ctx, void *arg)
{
  (void)arg;
  int32_t v = shmap_ctx_device(ctx) + 1;
  shmap_block b = {&v, SHMAP_I32, 1, {1}};
  int rc = shmap_psum(ctx, &b, "i");
  if (rc)
    return rc;
  return v == 10 ? 0 : shmap_fail(ctx, "psum gave %d, want 10", v);
}

int main(int argc, char **argv)
{
  int bad = 0;
  char macros[64];
  snprintf(macros, sizeof macros, "%d.%d.%d", SHMAP_VERSION_MAJOR,
           SHMAP_VERSION_MINOR, SHMAP_VERSION_PATCH);
  unsigned hex = (unsigned)(SHMAP_VERSION_MAJOR << 16 |
                            SHMAP_VERSION_MINOR << 8 | SHMAP_VERSION_PATCH);
  if (SHMAP_VERSION_HEX != hex) {
    fprintf(stderr, "SHMAP_VERSION_HEX is 0x%06x, want 0x%06x from %s\n",
            (unsigned)SHMAP_VERSION_HEX, hex, macros);
    bad = 1;
  }
  if (strcmp(SHMAP_VERSION_STRING, macros) != 0) {
    fprintf(stderr, "SHMAP_VERSION_STRING is \"%s\", the numbers say %s\n",
            SHMAP_VERSION_STRING, macros);
    bad = 1;
  }
  if (shmap_version() != SHMAP_VERSION_HEX) {
    fprintf(stderr, "shmap_version() is 0x%06x, the header says 0x%06x\n",
            shmap_version(), (unsigned)SHMAP_VERSION_HEX);
    bad = 1;
  }
  if (strcmp(shmap_version_string(), SHMAP_VERSION_STRING) != 0) {
    fprintf(stderr, "shmap_version_string() is \"%s\", the header says \"%s\"\n",
            shmap_version_string(), SHMAP_VERSION_STRING);
    bad = 1;
  }
  const char *want = argc > 1 ? argv[1] : getenv("SHMAP_VERSION");
  if (want && strcmp(want, shmap_version_string()) != 0) {
    fprintf(stderr, "the library is version %s, configure.ac says %s\n",
            shmap_version_string(), want);
    bad = 1;
  }
  shmap_mesh *mesh;
  if (shmap_mesh_create(&mesh, "i=4") != 0 ||
      shmap_map(mesh, body, NULL, 0, NULL, NULL, 0, NULL, NULL) != 0) {
    fprintf(stderr, "a map fails: %s\n", shmap_errmsg());
    return 1;
  }
  shmap_mesh_destroy(mesh);
  if (!bad)
    printf("libshmap %s (0x%06x)\n", shmap_version_string(), shmap_version());
  return bad;
}
