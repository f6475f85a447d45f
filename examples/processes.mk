# SPDX-License-Identifier: MIT
# examples fragment, included by the top Makefile.am: the program that runs
# unchanged with and without mpirun (tests/mpi/run.sh compares the two).
noinst_PROGRAMS += examples/09_processes
TESTS += examples/09_processes
examples_09_processes_SOURCES = examples/09_processes.c
examples_09_processes_LDADD = src/libshmap.la
