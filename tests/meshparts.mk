# SPDX-License-Identifier: MIT
# Parts of a mesh, included by the top Makefile.am: maps over some axes,
# maps nested in a body, sub-meshes and transfers between meshes
# (test_meshparts), and property tests of them against the serial
# reference model (test_meshparts_prop; SHMAPTEST_PROP_CASES cases, default
# 200, from seed SHMAPTEST_PROP_SEED).
MESHPARTS_TESTS = tests/test_meshparts
check_PROGRAMS += $(MESHPARTS_TESTS)
TESTS += $(MESHPARTS_TESTS)

tests_test_meshparts_SOURCES = tests/test_meshparts.c \
	tests/refmodel.h tests/testutil.h
tests_test_meshparts_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_meshparts_LDADD = tests/librefmodel.la tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

MESHPARTS_PROP_TESTS = tests/test_meshparts_prop
check_PROGRAMS += $(MESHPARTS_PROP_TESTS)
TESTS += $(MESHPARTS_PROP_TESTS)
tests_test_meshparts_prop_SOURCES = tests/test_meshparts_prop.c \
	tests/refmodel.h tests/testutil.h
tests_test_meshparts_prop_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_meshparts_prop_LDADD = tests/librefmodel.la tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

# gdb shows the maps a device is in (skipped without gdb or ptrace).
check_PROGRAMS += tests/gdb_nested_target
tests_gdb_nested_target_SOURCES = tests/gdb_nested_target.c
tests_gdb_nested_target_CFLAGS = $(AM_CFLAGS) -O0 -g
tests_gdb_nested_target_LDADD = src/libshmap.la
TESTS += tests/test_gdb_nested.sh
EXTRA_DIST += tests/test_gdb_nested.sh
