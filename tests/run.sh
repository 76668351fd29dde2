#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite
# (CTest: labels cpu, mpi, cuda; CUDA tests skip themselves without a GPU).
#   tests/run.sh              # everything
#   tests/run.sh -L cpu       # extra arguments go to ctest
set -euo pipefail
source "$(dirname "$0")/../launch/setup_env.sh"

engine_install_dependencies
engine_build

# mpirun refuses root unless told; the mpi-labelled tests set these themselves,
# this covers anything run by hand after sourcing.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$ENGINE_BUILD_DIR"
ctest --output-on-failure --timeout 600 "$@"
