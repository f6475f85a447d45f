# SPDX-License-Identifier: MIT
# packaging tests, included by the top Makefile.am.
#
# check-spdx.sh         every source file carries an SPDX-License-Identifier
#                       line.
# check-man-examples.sh extracts the program of every manual page's EXAMPLE
#                       section, compiles it with warnings as errors against
#                       the built library and runs it in both scheduling
#                       modes; a section-3 page without one fails.
# test_install.sh       installs into a scratch directory (make install
#                       DESTDIR=...) and checks what went where: the
#                       libraries, both headers, shmap.pc, the man pages
#                       and their links with the version filled in, the gdb
#                       extension at shmap.pc's gdb_autoload_script; then
#                       the library's file and soname (libshmap-mpi.so.N
#                       for a build with MPI), the CMake package, README,
#                       NEWS, LICENSE and the examples' sources in the
#                       docdir, shmap-trace-merge's python3; then links a
#                       program against the installed library with
#                       `pkg-config --cflags --libs shmap` and, with
#                       --static, a fully static one (or, where shmap.pc
#                       says static_link=no, checks that it fails), with
#                       every C compiler at hand (gcc, clang), and with
#                       CMake (find_package(shmap), both imported targets),
#                       and runs them.
# check-layers.sh       every arrow between the folders of src/ (an #include
#                       or a symbol one object uses and another defines)
#                       points down the layer order of ARCHITECTURE.md.
# check-layers-selftest.sh  the layering check (check-layers.sh) fails on an
#                       up-call, a sideways call, an #include that points up
#                       and a folder the table lacks, in a toy tree of its
#                       own, and passes on the toy tree without them.
# test_ltlink.sh        tools/ltlink links an example against the shared
#                       and the convenience library as libtool does (same
#                       NEEDED, RUNPATH and output), and leaves a link
#                       without -no-install and a library's link to libtool.
TESTS += tests/check-spdx.sh tests/check-man-examples.sh tests/test_install.sh \
	tests/check-layers.sh tests/check-layers-selftest.sh tests/test_ltlink.sh
EXTRA_DIST += tests/check-spdx.sh tests/check-man-examples.sh tests/test_ltlink.sh \
	tests/check-layers.sh tests/check-layers-selftest.sh \
	tests/test_install.sh tests/version_prog.c

# What those tests compile with: the build's compiler and flags.
AM_TESTS_ENVIRONMENT += SHMAPTEST_CC='$(CC)'; SHMAPTEST_CFLAGS='$(CFLAGS)'; \
	SHMAPTEST_SAN_CFLAGS='$(SAN_CFLAGS)'; SHMAPTEST_SAN_LDFLAGS='$(SAN_LDFLAGS)'; \
	SHMAPTEST_MAKE='$(MAKE)'; SHMAPTEST_VERSION='$(PACKAGE_VERSION)'; \
	SHMAPTEST_SO_VERSION='$(SHMAP_SO_VERSION)'; \
	SHMAPTEST_LIB_FILE='$(SHMAP_LIB_FILE)'; SHMAPTEST_LIB_SONAME='$(SHMAP_LIB_SONAME)'; \
	SHMAPTEST_STATIC_LINK='$(SHMAP_STATIC_LINK)'; SHMAPTEST_MPI_PKG='$(SHMAP_MPI_PKG)'; \
	SHMAPTEST_PYTHON3='$(PYTHON3)'; \
	export SHMAPTEST_CC SHMAPTEST_CFLAGS SHMAPTEST_SAN_CFLAGS SHMAPTEST_SAN_LDFLAGS \
	SHMAPTEST_MAKE SHMAPTEST_VERSION SHMAPTEST_SO_VERSION SHMAPTEST_LIB_FILE \
	SHMAPTEST_LIB_SONAME SHMAPTEST_STATIC_LINK SHMAPTEST_MPI_PKG SHMAPTEST_PYTHON3;

# The version test (also the program test_install.sh links).
check_PROGRAMS += tests/test_version
TESTS += tests/test_version
tests_test_version_SOURCES = tests/version_prog.c
tests_test_version_LDADD = src/libshmap.la
