# SPDX-License-Identifier: MIT
# bench fragment, included by the top Makefile.am
#
# bench/run measures the collectives against a memory roofline, a
# hand-written OpenMP psum and, when configure found Open MPI's mpicc and
# mpirun, Open MPI (through the helper bench/mpi_bench, built with $(MPICC)).
# `make` builds both; `make check` does not run them.  See BENCHMARKS.md.

noinst_PROGRAMS += bench/run
bench_run_SOURCES = bench/run.c bench/cmatmul.c bench/cmatmul.h \
	bench/sol.c bench/sol.h
bench_run_CFLAGS = $(AM_CFLAGS)
bench_run_CPPFLAGS = $(AM_CPPFLAGS) \
	-DBENCH_MPI_HELPER='"$(abs_top_builddir)/bench/mpi_bench"' \
	-DBENCH_TRANSPORT_HELPER='"$(abs_top_builddir)/bench/transport"'
bench_run_LDFLAGS = $(AM_LDFLAGS) $(OPENMP_CFLAGS)
bench_run_LDADD = src/libshmap.la -lm

if HAVE_MPI
bench_run_CPPFLAGS += -DBENCH_MPIRUN='"$(MPIRUN)"'
# Building bench/run builds its helper too, so `make bench/run` is enough.
EXTRA_bench_run_DEPENDENCIES = bench/mpi_bench bench/transport$(EXEEXT)
CLEANFILES += bench/mpi_bench
endif

# Not an automake program: it must be compiled and linked by $(MPICC).
bench/mpi_bench: $(srcdir)/bench/mpi_bench.c
	@$(MKDIR_P) bench
	$(AM_V_CCLD)$(MPICC) -std=c11 -D_GNU_SOURCE $(WARN_CFLAGS) $(CFLAGS) \
	  -o $@ $(srcdir)/bench/mpi_bench.c

EXTRA_DIST += bench/mpi_bench.c BENCHMARKS.md

# bench/kernels times the reduction kernels alone (one thread, no devices):
# each instruction set's fused kernel against the two-operand passes.
noinst_PROGRAMS += bench/kernels
bench_kernels_SOURCES = bench/kernels.c
bench_kernels_CFLAGS = $(AM_CFLAGS)
bench_kernels_LDADD = src/libshmap_core.la $(UV_LIBS) $(MPI_LIBS)

# bench/transport: libshmap with the devices spread over MPI processes,
# printed beside raw MPI by bench/run --transport
# (see BENCHMARKS.md).
noinst_PROGRAMS += bench/transport
bench_transport_SOURCES = bench/transport.c
bench_transport_LDADD = src/libshmap.la

# bench/overlap: a ring of ppermutes beside a matmul, blocking against
# started (shmap_ppermute_start), in thread and fiber mode (BENCHMARKS.md).
noinst_PROGRAMS += bench/overlap
bench_overlap_SOURCES = bench/overlap.c
bench_overlap_LDADD = src/libshmap.la

# bench/calibrate: this machine as a fabric file for the cluster rehearsal
# (alpha and beta from single collectives here), and bench/rehearse, which
# rehearses examples 15-17 on that file beside their time measured here
# (BENCHMARKS.md).
noinst_PROGRAMS += bench/calibrate
bench_calibrate_SOURCES = bench/calibrate.c
bench_calibrate_LDADD = src/libshmap.la

noinst_PROGRAMS += bench/rehearse
bench_rehearse_SOURCES = bench/rehearse.c
bench_rehearse_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
bench_rehearse_CPPFLAGS = $(AM_CPPFLAGS) \
	-DBENCH_EXAMPLES_DIR='"$(abs_top_builddir)/examples"'
bench_rehearse_LDADD = $(JANSSON_LIBS)

# bench/smallcalls: CALLS back-to-back calls of one collective in one map,
# for instruction counts per call under callgrind (BENCHMARKS.md).
noinst_PROGRAMS += bench/smallcalls
bench_smallcalls_SOURCES = bench/smallcalls.c
bench_smallcalls_LDADD = src/libshmap.la
