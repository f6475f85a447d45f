# SPDX-License-Identifier: MIT
# examples fragment, included by the top Makefile.am: the program that runs
# unchanged with and without mpirun (tests/mpi/run.sh compares the two).
noinst_PROGRAMS += examples/18_processes
TESTS += examples/18_processes
examples_18_processes_SOURCES = examples/18_processes.c
examples_18_processes_LDADD = src/libshmap.la
