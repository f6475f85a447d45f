# SPDX-License-Identifier: MIT
# tests fragment for running over MPI, included by the top Makefile.am.
#
# When configure found MPI (--with-mpi, default auto), `make check` runs
# tests/mpi/run.sh on 1 process (no mpirun), then under mpirun -np 2 and
# mpirun -np 4 (oversubscribed with Open MPI, as root where CI runs).  The
# test programs are plain programs, not Check suites: Check forks, and an
# MPI process must not fork.

EXTRA_DIST += tests/mpi/run.sh tests/mpi/examples.sh tests/mpi/np1.sh tests/mpi/np2.sh \
	tests/mpi/np4.sh tests/mpi/netns.sh tests/mpi/check-merged-trace.py \
	tests/mpi/test_mpi_gdb.sh tests/mpi/expect.h

if BUILD_MPI
# The programs run.sh runs (with the examples, which `make` builds): a build
# that runs only the MPI suites builds only these, with
#   make check TESTS="tests/mpi/np1.sh ..." check_PROGRAMS='$(mpi_check_programs)'
mpi_check_programs = tests/mpi/test_mpi_proc tests/mpi/test_mpi_level \
	tests/mpi/test_mpi_coll tests/mpi/test_mpi_groups tests/mpi/test_mpi_async \
	tests/mpi/test_mpi_mismatch tests/mpi/test_mpi_parts tests/mpi/test_mpi_exit \
	tests/mpi/test_mpi_map_prop tests/mpi/test_mpi_watchdog \
	tests/mpi/test_mpi_badinput tests/mpi/test_mpi_meshes tests/mpi/test_mpi_spread \
	tests/mpi/test_mpi_explore tests/mpi/test_mpi_smallperm tests/mpi/test_mpi_repeat \
	tests/mpi/test_mpi_allocfail
check_PROGRAMS += $(mpi_check_programs)
# Exploring schedules refused on a mesh over several processes.
tests_mpi_test_mpi_explore_SOURCES = tests/mpi/test_mpi_explore.c tests/alarm.h
tests_mpi_test_mpi_explore_LDADD = src/libshmap.la
# A psum over a group spread over processes: exact results, and messages
# per call per process counted by the engine (internal headers).
tests_mpi_test_mpi_spread_SOURCES = tests/mpi/test_mpi_spread.c
tests_mpi_test_mpi_spread_LDADD = src/libshmap.la -lm
# ppermute of a few hundred bytes over processes (one exchange): exact
# values, mismatch messages, a failure during the call.
tests_mpi_test_mpi_smallperm_SOURCES = tests/mpi/test_mpi_smallperm.c
tests_mpi_test_mpi_smallperm_LDADD = src/libshmap.la
# Small calls repeated over processes (their terms sent alone): exact
# values, runs of repeats broken into mismatches, the messages counted
# (the program defines MPI_Isend over PMPI_Isend).
tests_mpi_test_mpi_repeat_SOURCES = tests/mpi/test_mpi_repeat.c
tests_mpi_test_mpi_repeat_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
tests_mpi_test_mpi_repeat_LDADD = src/libshmap.la $(MPI_LIBS)
# One process out of memory in a map over processes: every library
# allocation of the last process made to fail in turn (the injection is
# internal: the static library).
tests_mpi_test_mpi_allocfail_SOURCES = tests/mpi/test_mpi_allocfail.c tests/mpi/mpiutil.h
tests_mpi_test_mpi_allocfail_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
tests_mpi_test_mpi_allocfail_LDADD = src/libshmap_core.la $(MPI_LIBS)
tests_mpi_test_mpi_meshes_SOURCES = tests/mpi/test_mpi_meshes.c
tests_mpi_test_mpi_meshes_LDADD = src/libshmap.la
tests_mpi_test_mpi_exit_SOURCES = tests/mpi/test_mpi_exit.c
tests_mpi_test_mpi_exit_LDADD = src/libshmap.la
# One process's bad argument: rejected on every process (randomized).
tests_mpi_test_mpi_badinput_SOURCES = tests/mpi/test_mpi_badinput.c tests/mpi/mpiutil.h \
	tests/alarm.h
tests_mpi_test_mpi_badinput_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
tests_mpi_test_mpi_badinput_LDADD = src/libshmap.la $(MPI_LIBS)
tests_mpi_test_mpi_watchdog_SOURCES = tests/mpi/test_mpi_watchdog.c
tests_mpi_test_mpi_watchdog_LDADD = src/libshmap.la
# The randomized mismatch test, built as a plain program over processes.
tests_mpi_test_mpi_mismatch_SOURCES = tests/test_reliability_mismatch.c
tests_mpi_test_mpi_mismatch_CPPFLAGS = $(AM_CPPFLAGS) -DMISMATCH_OVER_PROCESSES
tests_mpi_test_mpi_mismatch_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
tests_mpi_test_mpi_mismatch_LDADD = src/libshmap.la $(MPI_LIBS)
tests_mpi_test_mpi_parts_SOURCES = tests/mpi/test_mpi_parts.c tests/mpi/mpiutil.h
tests_mpi_test_mpi_parts_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
tests_mpi_test_mpi_parts_LDADD = src/libshmap.la $(MPI_LIBS)
tests_mpi_test_mpi_groups_SOURCES = tests/mpi/test_mpi_groups.c \
	tests/refcoll.h tests/jaxragged.h \
	tests/jaxgroups.h
tests_mpi_test_mpi_groups_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
tests_mpi_test_mpi_groups_LDADD = tests/librefcoll.la src/libshmap.la $(MPI_LIBS) -lm
tests_mpi_test_mpi_async_SOURCES = tests/mpi/test_mpi_async.c
tests_mpi_test_mpi_async_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
tests_mpi_test_mpi_async_LDADD = src/libshmap.la $(MPI_LIBS)
tests_mpi_test_mpi_proc_SOURCES = tests/mpi/test_mpi_proc.c tests/mpi/mpiutil.h
tests_mpi_test_mpi_proc_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
tests_mpi_test_mpi_proc_LDADD = src/libshmap.la $(MPI_LIBS)
tests_mpi_test_mpi_coll_SOURCES = tests/mpi/test_mpi_coll.c \
	tests/refcoll.h
tests_mpi_test_mpi_coll_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
tests_mpi_test_mpi_coll_LDADD = tests/librefcoll.la src/libshmap.la $(MPI_LIBS)
# The map property tests over processes, against tests/refmodel.c.
tests_mpi_test_mpi_map_prop_SOURCES = tests/mpi/test_mpi_map_prop.c tests/mpi/mpiutil.h \
	tests/refmodel.h
tests_mpi_test_mpi_map_prop_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
tests_mpi_test_mpi_map_prop_LDADD = tests/librefmodel.la src/libshmap.la $(MPI_LIBS)
tests_mpi_test_mpi_level_SOURCES = tests/mpi/test_mpi_level.c
tests_mpi_test_mpi_level_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
tests_mpi_test_mpi_level_LDADD = src/libshmap.la $(MPI_LIBS)
endif

if HAVE_MPI
TESTS += tests/mpi/np1.sh tests/mpi/np2.sh tests/mpi/np4.sh
# gdb attached to one process of two (skipped without gdb or ptrace).
TESTS += tests/mpi/test_mpi_gdb.sh
if MPI_OPENMPI
# Two network namespaces as two hosts (skips where they cannot be made).
TESTS += tests/mpi/netns.sh
endif
AM_TESTS_ENVIRONMENT += MPIRUN='$(MPIRUN)'; MPI_FLAVOR='$(MPI_FLAVOR)'; export MPIRUN MPI_FLAVOR;
if MPI_OPENMPI
# Open MPI's ranks take the ob1 messaging layer, as they do by default on a
# machine without InfiniBand or UCX devices (Debian's build leaves UCX out),
# but without first loading and probing the others: that probing took 0.2 s
# of the 0.45 s of starting two ranks here, and the suite starts several
# hundred jobs.  A caller's own OMPI_MCA_pml wins.
AM_TESTS_ENVIRONMENT += OMPI_MCA_pml="$${OMPI_MCA_pml:-ob1}"; export OMPI_MCA_pml;
endif
endif
