# SPDX-License-Identifier: MIT
# parser fuzzing
# tests/fuzz/fuzz_parse.c is a libFuzzer target for the mesh, spec and axes
# parsers (tests/fuzz/run.sh SECONDS fuzzes with clang).  Built here without
# libFuzzer, it runs every seed in tests/fuzz/corpus (and each prefix of
# it) through the same invariants, in every build, sanitizer builds included.
check_PROGRAMS += tests/fuzz/fuzz_parse
TESTS += tests/fuzz/fuzz_parse
tests_fuzz_fuzz_parse_SOURCES = tests/fuzz/fuzz_parse.c
tests_fuzz_fuzz_parse_LDADD = src/libshmap_core.la $(UV_LIBS)
EXTRA_DIST += tests/fuzz/run.sh tests/fuzz/corpus
