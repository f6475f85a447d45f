# SPDX-License-Identifier: MIT
# tests fragment for the collectives, included by the top Makefile.am.
# Each suite links the library and tests/refcoll.c, a serial reference
# model of the collectives written from SEMANTICS.md section 6.
COLL_TESTS = tests/test_coll tests/test_coll_jax tests/test_coll_prop \
	tests/test_coll_errors tests/test_coll_edge tests/test_coll_repeat
check_PROGRAMS += $(COLL_TESTS)
TESTS += $(COLL_TESTS)

tests_test_coll_SOURCES = tests/test_coll.c tests/refcoll.h \
	tests/testutil.h
tests_test_coll_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_coll_LDADD = tests/librefcoll.la tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_coll_jax_SOURCES = tests/test_coll_jax.c tests/refcoll.h \
	tests/testutil.h
tests_test_coll_jax_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_coll_jax_LDADD = tests/librefcoll.la tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_coll_prop_SOURCES = tests/test_coll_prop.c tests/refcoll.h \
	tests/testutil.h
tests_test_coll_prop_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_coll_prop_LDADD = tests/librefcoll.la tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

tests_test_coll_errors_SOURCES = tests/test_coll_errors.c tests/refcoll.h \
	tests/testutil.h
tests_test_coll_errors_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_coll_errors_LDADD = tests/librefcoll.la tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

# test_coll_edge: empty blocks with NULL data through every collective;
# signalling NaNs through pmax and pmin of f32 and f64, bit for bit.
tests_test_coll_edge_SOURCES = tests/test_coll_edge.c \
	tests/testutil.h
tests_test_coll_edge_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_coll_edge_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

# test_coll_repeat: calls that reuse the device's last plan, with what the
# plan depends on changed in the caller's memory between them.
tests_test_coll_repeat_SOURCES = tests/test_coll_repeat.c \
	tests/testutil.h
tests_test_coll_repeat_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_coll_repeat_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

# test_async: asynchronous collectives, their rules and failure paths, in
# thread and fiber mode.
check_PROGRAMS += tests/test_async
TESTS += tests/test_async
tests_test_async_SOURCES = tests/test_async.c tests/testutil.h
tests_test_async_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_async_LDADD = tests/libtestutil.la src/libshmap_core.la $(CHECK_LIBS) $(UV_LIBS)

# gdb lists open requests (skipped without gdb or ptrace).
check_PROGRAMS += tests/gdb_async_target
tests_gdb_async_target_SOURCES = tests/gdb_async_target.c
tests_gdb_async_target_CFLAGS = $(AM_CFLAGS) -O0 -g
tests_gdb_async_target_LDADD = src/libshmap.la
TESTS += tests/test_gdb_async.sh
EXTRA_DIST += tests/test_gdb_async.sh tests/gdbutil.sh

# A batch "run" + "bt" with the gdb extension auto-loaded stops at a crash
# (skipped without gdb or ptrace).
check_PROGRAMS += tests/gdb_crash_target
tests_gdb_crash_target_SOURCES = tests/gdb_crash_target.c
tests_gdb_crash_target_CFLAGS = $(AM_CFLAGS) -O0 -g
tests_gdb_crash_target_LDADD = src/libshmap.la
TESTS += tests/test_gdb_autoload.sh
EXTRA_DIST += tests/test_gdb_autoload.sh
check_PROGRAMS += tests/gdb_explore_target
tests_gdb_explore_target_SOURCES = tests/gdb_explore_target.c
tests_gdb_explore_target_CFLAGS = $(AM_CFLAGS) -O0 -g
tests_gdb_explore_target_LDADD = src/libshmap.la
TESTS += tests/test_gdb_explore.sh
EXTRA_DIST += tests/test_gdb_explore.sh
