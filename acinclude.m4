# acinclude.m4 - configure macros of libshmap's own.
# SPDX-License-Identifier: MIT

# SHMAP_CHECK_MPI: --with-mpi[=auto|yes|no] (default auto).
#
# Finds an MPI C compiler wrapper ($MPICC, else mpicc), asks it for the
# compile and link flags it adds (`-show`, understood by Open MPI's and
# MPICH's wrappers alike) and builds the library with the system compiler
# plus those flags, so sanitizer and warning flags apply unchanged.  Finds
# the matching launcher ($MPIRUN, else the wrapper's name with mpicc
# replaced by mpirun, e.g. mpirun.mpich for mpicc.mpich, else mpirun).
#
# Sets and substitutes MPI_CFLAGS, MPI_LIBS, MPICC, MPIRUN, MPI_FLAVOR
# (openmpi, mpich or other); defines SHMAP_HAVE_MPI; automake conditionals
# HAVE_MPI and MPI_OPENMPI.
AC_DEFUN([SHMAP_CHECK_MPI], [
AC_ARG_WITH([mpi],
  [AS_HELP_STRING([--with-mpi@<:@=auto|yes|no@:>@],
     [spread a mesh's devices over the processes of an mpirun job (default:
      auto, when an MPI C compiler wrapper is found; MPICC=... chooses it)])],
  [], [with_mpi=auto])
AC_ARG_VAR([MPICC], [MPI C compiler wrapper (default: mpicc)])
AC_ARG_VAR([MPIRUN], [MPI launcher matching MPICC (default: derived from MPICC)])
MPI_CFLAGS=""
MPI_LIBS=""
MPI_FLAVOR=""
shmap_mpi=no
AS_CASE([$with_mpi],
  [no], [],
  [yes|auto], [
    AS_IF([test -z "$MPICC"], [AC_CHECK_PROGS([MPICC], [mpicc])])
    AS_IF([test -n "$MPICC"], [
      AC_MSG_CHECKING([the flags $MPICC adds])
      shmap_show=`$MPICC -show 2>/dev/null`
      AS_IF([test -z "$shmap_show"], [shmap_show=`$MPICC --showme 2>/dev/null`])
      shmap_first=yes
      for shmap_tok in $shmap_show; do
        AS_IF([test $shmap_first = yes], [shmap_first=no; continue])
        AS_CASE([$shmap_tok],
          [-I*|-D*], [MPI_CFLAGS="$MPI_CFLAGS $shmap_tok"],
          [-pthread], [MPI_CFLAGS="$MPI_CFLAGS $shmap_tok"; MPI_LIBS="$MPI_LIBS $shmap_tok"],
          [-L*|-l*|-Wl,*], [MPI_LIBS="$MPI_LIBS $shmap_tok"])
      done
      AC_MSG_RESULT([cflags:$MPI_CFLAGS; libs:$MPI_LIBS])
      shmap_save_CFLAGS=$CFLAGS; shmap_save_LIBS=$LIBS
      CFLAGS="$CFLAGS $MPI_CFLAGS"; LIBS="$MPI_LIBS $LIBS"
      AC_MSG_CHECKING([whether a program links with MPI_Init_thread])
      AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
          [[int p; return MPI_Init_thread(0, 0, MPI_THREAD_MULTIPLE, &p);]])],
        [shmap_mpi=yes], [shmap_mpi=no])
      AC_MSG_RESULT([$shmap_mpi])
      CFLAGS=$shmap_save_CFLAGS; LIBS=$shmap_save_LIBS
    ])
    AS_IF([test $shmap_mpi = yes && test -z "$MPIRUN"], [
      shmap_dir=`AS_DIRNAME(["$MPICC"])`
      shmap_base=`basename "$MPICC" | sed 's/mpicc/mpirun/'`
      AS_IF([test "x$shmap_dir" != "x." && test -x "$shmap_dir/$shmap_base"],
        [MPIRUN="$shmap_dir/$shmap_base"],
        [AC_CHECK_PROGS([MPIRUN], [$shmap_base mpirun mpiexec])])])
    AS_IF([test $shmap_mpi = yes && test -z "$MPIRUN"],
      [AC_MSG_WARN([found $MPICC but no mpirun: MPI tests will not run])])
    AS_IF([test $shmap_mpi = no && test "x$with_mpi" = xyes],
      [AC_MSG_ERROR([--with-mpi=yes but no working MPI C compiler wrapper was found (Debian: apt-get install libopenmpi-dev openmpi-bin, or mpich; MPICC=... names the wrapper)])])
  ],
  [AC_MSG_ERROR([--with-mpi takes auto, yes or no, not '$with_mpi'])])
AS_IF([test $shmap_mpi = yes], [
  AC_DEFINE([SHMAP_HAVE_MPI], [1], [Define when the library is built with MPI.])
  AC_MSG_CHECKING([which MPI $MPIRUN is])
  AS_CASE([`$MPIRUN --version 2>&1`],
    [*"Open MPI"*|*OpenRTE*], [MPI_FLAVOR=openmpi],
    [*HYDRA*|*MPICH*|*mpich*], [MPI_FLAVOR=mpich],
    [MPI_FLAVOR=other])
  AC_MSG_RESULT([$MPI_FLAVOR])
])
AC_SUBST([MPI_CFLAGS])
AC_SUBST([MPI_LIBS])
AC_SUBST([MPI_FLAVOR])
AC_SUBST([MPIRUN])
AM_CONDITIONAL([HAVE_MPI], [test $shmap_mpi = yes && test -n "$MPIRUN"])
AM_CONDITIONAL([BUILD_MPI], [test $shmap_mpi = yes])
AM_CONDITIONAL([MPI_OPENMPI], [test "x$MPI_FLAVOR" = xopenmpi])
])
