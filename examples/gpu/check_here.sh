#!/usr/bin/env bash
# Run HERE (Debian 12, root, no GPU) to check that session.sh builds and tests
# with the carried dependencies alone: in a private mount namespace the
# system's own copies of the carried headers, CMake configs, .pc files, MPI
# and pkg-config are covered by empty mounts, CMake is told to ignore /usr
# (ENGINE_GPU_HIDE_SYSTEM=1), and afterwards CMakeCache.txt and ldd must name
# the unpacked deps for each one. CUDA compiles (nvcc in /usr/local/cuda); its
# tests skip without a GPU, and the smoke stage's CUDA runs fail here.
#
#   examples/gpu/check_here.sh                     # stages build,cuda,smoke,test
#   examples/gpu/check_here.sh --stage build       # any session.sh arguments
# Environment: JOBS (default 2), ENGINE_BUILD_DIR (default build-gpucheck), OUT.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "check_here: needs root (unshare -m and mounts)" >&2; exit 1; }
[ -f "$ROOT/.gpu-deps/deps.tar.xz" ] || { echo "check_here: run examples/gpu/fetch_deps.sh first" >&2; exit 1; }
[ $# -gt 0 ] || set -- --stage build,cuda,smoke,test
export JOBS=${JOBS:-2} ENGINE_BUILD_DIR=${ENGINE_BUILD_DIR:-$ROOT/build-gpucheck} ENGINE_GPU_HIDE_SYSTEM=1
export OUT=${OUT:-$(mktemp -d -t gpu-check.XXXXXX)} SESSION_BUDGET_S=${SESSION_BUDGET_S:-7200}
export GPU_DEPS_DIR=${GPU_DEPS_DIR:-/tmp/engine-gpu-deps-check}
A=x86_64-linux-gnu
# Folders covered by an empty tmpfs, files by /dev/null. Runtime libraries
# that system programs need (libpcre2-8.so.0 for grep, OpenBLAS behind numpy)
# stay; for them the check below reads CMakeCache.txt and ldd instead.
HIDE_DIRS=(/usr/include/CLI /usr/include/nlohmann /usr/include/gtest /usr/include/gmock
  /usr/include/$A/openblas-openmp /usr/include/$A/openblas-pthread /usr/share/cmake/CLI11
  /usr/share/cmake/nlohmann_json /usr/lib/$A/cmake/GTest /usr/lib/$A/openmpi /usr/share/games/fortunes)
HIDE_FILES=(/usr/include/xxhash.h /usr/include/xxh3.h /usr/include/pcre2.h /usr/include/cblas.h
  /usr/include/utf8proc.h /usr/lib/$A/pkgconfig/libutf8proc.pc
  /usr/lib/$A/pkgconfig/libpcre2-8.pc /usr/lib/$A/libgtest.a /usr/lib/$A/libgtest_main.a
  /usr/lib/$A/libgmock.a /usr/lib/$A/libgmock_main.a
  /usr/bin/mpicxx /usr/bin/mpic++ /usr/bin/mpirun /usr/bin/mpiexec /usr/bin/pkgconf)
mounts=""
for d in "${HIDE_DIRS[@]}"; do [ -d "$d" ] && mounts+="mount -t tmpfs -o size=1m none '$d'; "; done
for f in "${HIDE_FILES[@]}"; do [ -e "$f" ] && mounts+="mount --bind /dev/null '$f'; "; done
set +e
unshare -m --propagation private bash -c "set -e; $mounts exec nice bash '$ROOT/examples/gpu/session.sh' \"\$@\"" \
  session "$@"
rc=$?
set -e

echo
echo "==== where CMake found each dependency ($ENGINE_BUILD_DIR/CMakeCache.txt); each must be under $GPU_DEPS_DIR"
bad=0
for v in CLI11_DIR nlohmann_json_DIR GTest_DIR XXHASH_INCLUDE_DIR OPENBLAS_LIBRARY CBLAS_INCLUDE_DIR \
         MPI_CXX_COMPILER MPIEXEC_EXECUTABLE PKG_CONFIG_EXECUTABLE PCRE2_INCLUDEDIR PCRE2_LIBDIR \
         pkgcfg_lib_PCRE2_pcre2-8 UTF8PROC_INCLUDEDIR pkgcfg_lib_UTF8PROC_utf8proc MPI_mpi_LIBRARY MPI_CXX_HEADER_DIR; do
  val=$(grep -E "^$v:" "$ENGINE_BUILD_DIR/CMakeCache.txt" | head -1 | cut -d= -f2-)
  case $val in
    "$GPU_DEPS_DIR"/*) printf 'ok   %-26s %s\n' "$v" "$val" ;;
    *) printf 'BAD  %-26s %s\n' "$v" "${val:-(not set)}"; bad=1 ;;
  esac
done
echo "==== libraries train loads (LD_LIBRARY_PATH as session.sh sets it)"
D=$GPU_DEPS_DIR
LD_LIBRARY_PATH=$D/root/usr/lib/$A:$D/root/usr/lib/$A/openblas-openmp:$D/openmpi/lib \
  ldd "$ENGINE_BUILD_DIR/launch/train" | grep -E 'openblas|pcre2|utf8proc|libmpi|gfortran|cudart|cublas|nccl' || bad=1
echo "check_here: session.sh exit $rc; dependency check $([ $bad = 0 ] && echo ok || echo FAILED); logs in $OUT"
[ $bad = 0 ]
