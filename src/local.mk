# SPDX-License-Identifier: MIT
# The library.  libshmap_core.la holds every object (tests link it to reach
# internal functions); libshmap.la is the installed library built from it.
noinst_LTLIBRARIES += src/libshmap_core.la
src_libshmap_core_la_SOURCES = \
	src/error.c \
	src/settings.c \
	src/fork.c \
	src/version.c \
	src/alloc.c \
	src/mesh.c \
	src/kinds.c \
	src/group.c \
	src/submesh.c \
	src/jobs/transfer.c \
	src/spec.c \
	src/layout.c \
	src/array/array.c \
	src/jobs/shard.c \
	src/array/visualize.c \
	src/array/svg.c \
	src/device/arena.c \
	src/device/ctx.c \
	src/device/checks.c \
	src/device/body.c \
	src/map/validate.c \
	src/map/run.c \
	src/map/replica.c \
	src/map/outputs.c \
	src/map/nested.c \
	src/map/blocks.c \
	src/map/explore.c \
	src/map/mesh.c \
	src/proc/proc.c \
	src/proc/pmesh.c \
	src/proc/spmd.c \
	src/proc/stage.c \
	src/sched/runtime.c \
	src/sched/hooks.c \
	src/sched/clock.c \
	src/sched/trace.c \
	src/debug/debug.c \
	src/debug/watchdog.c \
	src/sched/fiber.c \
	src/sched/fibers.c \
	src/sched/threads.c \
	src/sched/explore.c \
	src/sched/guard.c \
	src/sched/progress.c \
	src/transport/comm.c \
	src/transport/shm.c \
	src/transport/desc.c \
	src/coll/plan.c \
	src/coll/algo.c \
	src/coll/coll.c \
	src/coll/async.c \
	src/ops.c \
	src/transport/mpi.c \
	src/dtype.c
noinst_HEADERS += src/settings.h src/internal.h src/device/arena.h src/device/device.h src/map/map.h \
	src/sched/runtime.h src/sched/sched.h src/sched/trace.h \
	src/sched/hooks.h src/sched/mode.h src/debug/debug.h \
	src/transport/comm.h src/coll/coll.h src/transport/desc.h src/coll/plan.h \
	src/proc/proc.h src/transport/mpi.h src/dtype.h src/kern.h \
	src/coll/async.h src/sched/progress.h src/hash.h src/kinds.h src/group.h
src_libshmap_core_la_CFLAGS = $(AM_CFLAGS) $(STACK_CLASH_CFLAGS) $(UV_CFLAGS) $(JANSSON_CFLAGS) $(MPI_CFLAGS) -fvisibility=hidden $(NO_INTERPOSE_CFLAGS) -DSHMAP_BUILDING
src_libshmap_core_la_LIBADD = $(UV_LIBS) $(JANSSON_LIBS) $(MPI_LIBS)

lib_LTLIBRARIES += src/libshmap.la
src_libshmap_la_SOURCES =
# Forces the C linker for a library made only of a convenience library.
nodist_EXTRA_src_libshmap_la_SOURCES = dummy.c
src_libshmap_la_LIBADD = src/libshmap_core.la $(UV_LIBS) $(JANSSON_LIBS) $(MPI_LIBS)
# The interface version and the rules for changing it are in configure.ac,
# as is the name of the MPI build (SHMAP_LIB_RELEASE: libshmap-mpi.so.N).
src_libshmap_la_LDFLAGS = $(SAN_LDFLAGS) $(OPENMP_CFLAGS) -version-info $(SHMAP_LT_VERSION) $(SHMAP_LIB_RELEASE)

# Groups within the axes, pbroadcast, ragged_all_to_all, user reductions.
src_libshmap_core_la_SOURCES += src/coll/groups.c src/coll/ragged.c \
	src/coll/preduce.c
noinst_HEADERS += src/coll/groups.h
