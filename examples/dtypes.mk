# SPDX-License-Identifier: MIT
# examples fragment for the dtypes, included by the top Makefile.am: built
# by `make`, run (self-checking) by `make check`.
noinst_PROGRAMS += examples/11_dtypes
TESTS += examples/11_dtypes
examples_11_dtypes_SOURCES = examples/11_dtypes.c
examples_11_dtypes_LDADD = src/libshmap.la
