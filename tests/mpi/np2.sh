#!/bin/sh
# SPDX-License-Identifier: MIT
# The MPI tests on 2 process(es); see run.sh.
exec "${top_srcdir:-.}/tests/mpi/run.sh" 2
