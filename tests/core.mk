# SPDX-License-Identifier: MIT
# tests fragment, included by the top Makefile.am
# Core tests: mesh, specs, layout math, the map, and property tests of the
# map against a serial reference model (tests/refmodel.c).  Each links the
# convenience library to reach internal (shmap__) functions.
#
# test_map_prop runs SHMAPTEST_PROP_CASES random maps (default 3000) from seed
# SHMAPTEST_PROP_SEED (printed at the start); both may be set in the environment.

# What the test programs share, each compiled once for all of them: the
# helpers (testutil.c) and the two serial reference models, of the
# collectives (refcoll.c) and of the map (refmodel.c).  The two models
# define some functions of the same names, so no program links both.
check_LTLIBRARIES = tests/libtestutil.la tests/librefcoll.la tests/librefmodel.la
tests_libtestutil_la_SOURCES = tests/testutil.c tests/testutil.h
tests_libtestutil_la_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_librefcoll_la_SOURCES = tests/refcoll.c tests/refcoll.h
tests_librefmodel_la_SOURCES = tests/refmodel.c tests/refmodel.h

CORE_TESTS = \
	tests/test_mesh \
	tests/test_spec \
	tests/test_desc_pack \
	tests/test_layout \
	tests/test_map \
	tests/test_map_prop
check_PROGRAMS += $(CORE_TESTS)
TESTS += $(CORE_TESTS)

tests_test_mesh_SOURCES = tests/test_mesh.c tests/refmodel.h \
	tests/testutil.h
tests_test_mesh_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_mesh_LDADD = tests/librefmodel.la tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_spec_SOURCES = tests/test_spec.c tests/refmodel.h \
	tests/testutil.h
tests_test_spec_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_spec_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_desc_pack_SOURCES = tests/test_desc_pack.c tests/testutil.h
tests_test_desc_pack_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_desc_pack_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_layout_SOURCES = tests/test_layout.c tests/refmodel.h \
	tests/testutil.h
tests_test_layout_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_layout_LDADD = tests/librefmodel.la tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_map_SOURCES = tests/test_map.c tests/refmodel.h \
	tests/testutil.h
tests_test_map_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_map_LDADD = tests/librefmodel.la tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_map_prop_SOURCES = tests/test_map_prop.c \
	tests/refmodel.h \
	tests/testutil.h
tests_test_map_prop_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_map_prop_LDADD = tests/librefmodel.la tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

# Meshes of 64, 256 and 1024 devices: empty map, psum, all_gather.
check_PROGRAMS += tests/test_scale
TESTS += tests/test_scale
tests_test_scale_SOURCES = tests/test_scale.c \
	tests/testutil.h
tests_test_scale_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_scale_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)
