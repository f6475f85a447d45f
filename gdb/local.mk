# SPDX-License-Identifier: MIT
# gdb extension
#
# gdb/shmap-gdb.py is installed as $(pkgdatadir)/gdb/shmap-gdb.py (with the
# default prefix /usr/local/share/libshmap/gdb/shmap-gdb.py), which gdb
# loads with "source <that path>" (see man/shmap-debugging.7), and in gdb's
# auto-load directory (below).
#
# tests/test_gdb.sh debugs tests/gdb_target in gdb's batch mode with the
# extension loaded, started under gdb and attached to (gdb -p), with a
# thread per device and with fibers, and checks what "shmap devices",
# "shmap device N", bt, frame, print and next show.  It is skipped (exit
# 77) when gdb, gdb's Python or ptrace is not available.

shmapgdbdir = $(pkgdatadir)/gdb
shmapgdb_DATA = gdb/shmap-gdb.py
EXTRA_DIST += gdb/shmap-gdb.py

# The same file where gdb loads it by itself for every program linked
# against the installed library: gdb looks for <real path of the
# library>-gdb.py under its auto-load directories (the library is
# $(libdir)/$(SHMAP_LIB_FILE) once installed).  shmap.pc
# gives the path as gdb_autoload_script.  With the default prefix
# /usr/local, gdb needs to be told of the directory (see
# shmap-debugging(7)); with prefix /usr it is gdb's own.
gdbautoloaddir = $(datadir)/gdb/auto-load$(libdir)
gdbautoload_DATA = gdb/$(SHMAP_LIB_FILE)-gdb.py
gdb/$(SHMAP_LIB_FILE)-gdb.py: gdb/shmap-gdb.py
	$(AM_V_GEN)$(MKDIR_P) gdb && cp $(srcdir)/gdb/shmap-gdb.py $@
CLEANFILES += gdb/$(SHMAP_LIB_FILE)-gdb.py

# man/shmap-debugging.7 is registered in man/local.mk (tests/check-man.sh
# wants every page there); listing it here too would install it twice, which
# makes "make install" fail.

# Like every program of the tree, tests/gdb_target is the real executable
# (-no-install in AM_LDFLAGS), so gdb can be pointed at it directly.  -O0
# -g keeps every local variable visible (the file also forces -O0 with a
# pragma, since CFLAGS comes after these flags on the command line).
check_PROGRAMS += tests/gdb_target
tests_gdb_target_SOURCES = tests/gdb_target.c
tests_gdb_target_CFLAGS = $(AM_CFLAGS) -O0 -g
tests_gdb_target_LDADD = src/libshmap.la

TESTS += tests/test_gdb.sh
EXTRA_DIST += tests/test_gdb.sh

# The transcripts of README.md and the manual pages (gdb sessions, watchdog
# reports, traces, error messages) against fresh runs of the programs they
# show: tests/transcripts.py --update rewrites them.
TESTS += tests/test_transcripts.sh
EXTRA_DIST += tests/test_transcripts.sh tests/transcripts.py
