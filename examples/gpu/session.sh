#!/usr/bin/env bash
# Run THERE: on a lent GPU machine, in one `run` call with carry [".gpu-deps"]
# (examples/gpu/README.md gives the exact calls). Builds the engine with CUDA
# for Hopper (sm_90) against the carried dependencies (examples/gpu/fetch_deps.sh),
# runs the CUDA tests, a training smoke test, the whole suite and the benchmark,
# and writes every log under $OUT, the folder the tool brings back.
#
#   bash examples/gpu/session.sh                       # all stages
#   bash examples/gpu/session.sh --stage build,cuda,smoke,test
#   bash examples/gpu/session.sh --stage build,bench   # a fresh machine: builds what bench needs
#
# Stages, run in this order whatever order they are named in:
#   inventory  always: machine, GPU, driver, nvcc, CMake, gcc, glibc, NCCL,
#              cuBLASLt, cuDNN, torch                       -> $OUT/inventory.txt
#   build      configure (Release, CUDA on, sm_90) and build  -> $OUT/build.log
#   cuda       ctest -L cuda, verbose; fails if a CUDA test skipped on a GPU
#                                                            -> $OUT/ctest_cuda.log
#   smoke      `train` on the fortunes corpus: cpu fp32, cuda fp32, cuda bf16,
#              2 ranks sharing the GPU (--comm mpi), 1 rank --comm nccl;
#              losses side by side                           -> $OUT/smoke.log
#   test       the whole ctest suite (without the cuda label when cuda ran)
#                                                            -> $OUT/ctest_all.log, $OUT/LastTest.log
#   bench      examples/benchmarks/gpu_bench.sh (engine vs PyTorch and, with LLMC_DIR,
#              llm.c; clock and power samples of each run) -> $OUT/bench.log,
#              $OUT/gpu_samples/*.csv; llm.c's build (started in the background
#              at the build stage)                       -> $OUT/llmc_build.log
#   checks     examples/gpu/checks.sh: gpt2-124m learns, recomputation overhead,
#              ZeRO memory per rank, bad input, parity suites on CUDA -> $OUT/checks.log
#   all        build,cuda,smoke,test,bench (about 10+ minutes: split it over calls)
# Every stage's verdict and time go to $OUT/summary.txt, printed last. A failing
# stage does not stop the later ones (those needing a build are skipped when it
# failed); the exit status is non-zero when any stage failed.
#
# Environment (all optional):
#   OUT                where logs go (set by the tool there; here a new temp folder)
#   ENGINE_BUILD_DIR   build folder (default build-gpu at the repo root; ignored by git,
#                      so a warm machine keeps it between calls)
#   ENGINE_COMMIT      the commit being tested, for the logs (.git does not travel)
#   GPU_DEPS_DIR       where deps.tar.xz is unpacked (default /tmp/engine-gpu-deps)
#   JOBS               build jobs (default nproc)      CTEST_JOBS  ctest -j (default 1)
#   CUDA_ARCH          CMAKE_CUDA_ARCHITECTURES (default 90)
#   ENGINE_BUILD_TARGETS  build only these CMake targets (e.g. "train prepare plan")
#   SESSION_BUDGET_S   seconds the whole script may take (default 540: the tool
#                      kills a call at 600 s, and logs must be written before that)
#   ENGINE_GPU_HIDE_SYSTEM=1  ignore /usr's packages in CMake and pkg-config (the
#                      local check, examples/gpu/check_here.sh, proves the carried
#                      ones are used)
#   CUDA_STAGE_S       the cuda stage's time limit (default 420 s), so a call can keep
#                      time for the bench after it
#   Benchmark knobs (STEPS, MB_124M, MB_1558M, RUN_PYTORCH, ...) pass through to gpu_bench.sh.
#   LLMC_DIR           llm.c's folder (e.g. $PWD/.peers/llm.c, carried with ".peers"):
#                      with the bench stage, llm.c runs beside the engine (RUN_LLMC=0 skips it)
set -uo pipefail  # no -e: a failing stage is recorded and the next one runs

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
START=$(date +%s)
BUDGET=${SESSION_BUDGET_S:-540}
OUT=${OUT:-$(mktemp -d -t gpu-session.XXXXXX)}
mkdir -p "$OUT"
BUILD=${ENGINE_BUILD_DIR:-$ROOT/build-gpu}
JOBS=${JOBS:-$(nproc)}
CTEST_JOBS=${CTEST_JOBS:-1}
CUDA_ARCH=${CUDA_ARCH:-90}
SUMMARY=$OUT/summary.txt

stages=all
while [ $# -gt 0 ]; do
  case $1 in
    --stage|--stages) stages=${2:?--stage needs a list, e.g. build,cuda}; shift 2 ;;
    --stage=*|--stages=*) stages=${1#*=}; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "session.sh: unknown argument '$1' (expected --stage build,cuda,smoke,test,bench or all)" >&2; exit 64 ;;
  esac
done
[ "$stages" = all ] && stages=build,cuda,smoke,test,bench
declare -A want=()
IFS=, read -ra _list <<<"$stages"
for s in "${_list[@]}"; do
  case $s in
    inventory|build|cuda|smoke|test|bench|checks) want[$s]=1 ;;
    *) echo "session.sh: unknown stage '$s' (known: inventory build cuda smoke test bench checks all)" >&2; exit 64 ;;
  esac
done

: >"$SUMMARY"
failed=()
record() {  # record STAGE VERDICT SECONDS [NOTE]
  printf '%-9s %-8s %4ss  %s\n' "$1" "$2" "$3" "${4:-}" | tee -a "$SUMMARY"
  [ "$2" = FAILED ] && failed+=("$1")
  return 0
}
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
# stage_timeout WANTED: a stage's time limit, cut to what the budget has left
# (keeping 15 s to write the summary).
stage_timeout() { local l=$(( $(left) - 15 )); [ "$1" -lt "$l" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
# A stage cut short by `timeout` can leave grandchildren running (test_failures
# starts `train` in its own session, out of timeout's reach): end the programs
# of this build still running, by PID, so they do not eat the next stage's CPU.
reap() {
  local pids
  pids=$(pgrep -f "^$BUILD/" || true)
  [ -z "$pids" ] && return 0
  echo "session.sh: ending leftover processes of $BUILD: $(echo "$pids" | paste -sd' ')"
  # shellcheck disable=SC2086  # a list of PIDs
  kill $pids 2>/dev/null; sleep 2; kill -9 $pids 2>/dev/null
  return 0
}
# Copy a log into $OUT, keeping its end if it is over what the tool brings back (16 MiB).
keep() { tail -c 15000000 "$1" >"$OUT/$2"; }

# ---- carried dependencies ----------------------------------------------------
# deps.tar.xz (examples/gpu/fetch_deps.sh) unpacks to GPU_DEPS_DIR; without it
# the system's own packages are used (an image that has them all needs nothing).
DEPS_NOTE=""
setup_deps() {
  local tarball=$ROOT/.gpu-deps/deps.tar.xz
  if [ ! -f "$tarball" ]; then
    DEPS_NOTE="no .gpu-deps/deps.tar.xz (not carried?): using the system's packages"
    return 0
  fi
  D=${GPU_DEPS_DIR:-/tmp/engine-gpu-deps}
  local stamp
  stamp=$(cksum <"$tarball")
  if [ "$(cat "$D/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$D" && mkdir -p "$D"
    # python3's tarfile as the fallback for a tar without xz.
    if ! tar -C "$D" -xJf "$tarball" 2>/dev/null; then
      python3 -c 'import sys, tarfile
kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}  # 3.12+ warns without a filter
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **kw)' "$tarball" "$D" || {
        DEPS_NOTE="cannot unpack $tarball (neither tar -xJ nor python3's tarfile)"; return 1; }
    fi
    echo "$stamp" >"$D/.stamp"
  fi
  # P, L, M and the search paths (carried_env.sh, shared with the scripts run after this one).
  # shellcheck source=examples/gpu/carried_env.sh
  source "$ROOT/examples/gpu/carried_env.sh"
  carried_env "$D"
  # pkgconf's built-in search path is /usr's; PKG_CONFIG_LIBDIR replaces it.
  [ "${ENGINE_GPU_HIDE_SYSTEM:-0}" = 1 ] && export PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH
  # cuDNN's fused attention: the frontend's headers (CMake looks here; the
  # cuDNN library itself is the image's).
  [ -d "$D/cudnn-frontend" ] && export CUDNN_FRONTEND_ROOT=$D/cudnn-frontend
  DEPS_NOTE="carried: $(head -1 "$D/MANIFEST.txt") -> $D"
}

# ---- CUDA toolkit, cuBLASLt, NCCL: from the image -----------------------------
NVCC="" CUDA_ROOT="" NCCL_INC="" NCCL_LIB="" CUBLASLT_LIB="" CUBLAS_LIB=""
# add_library_dir DIR: append DIR to LD_LIBRARY_PATH unless the loader searches
# it anyway: putting /usr/lib/x86_64-linux-gnu there would rank the system's
# copies above the carried ones (the first device call's link failure).
add_library_dir() {
  case $1 in /lib|/lib64|/usr/lib|/usr/lib64|/lib/x86_64-linux-gnu|/usr/lib/x86_64-linux-gnu) return 0 ;; esac
  case ":${LD_LIBRARY_PATH:-}:" in *":$1:"*) return 0 ;; esac
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$1
}
site_dirs() { python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null; }
find_cuda() {
  NVCC=$(command -v nvcc || true)
  if [ -z "$NVCC" ]; then
    for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do [ -x "$c" ] && { NVCC=$c; break; }; done
  fi
  [ -n "$NVCC" ] || return 1
  NVCC=$(readlink -f "$NVCC")
  CUDA_ROOT=$(dirname "$(dirname "$NVCC")")
  export PATH=$CUDA_ROOT/bin:$PATH
  # cuBLAS(Lt) normally sits beside cudart in the toolkit; where only pip's
  # wheels have it (versioned names, no libcublasLt.so), name the files.
  local d
  for d in "$CUDA_ROOT/lib64" "$CUDA_ROOT/targets/x86_64-linux/lib" "$CUDA_ROOT/lib"; do
    [ -e "$d/libcublasLt.so" ] && return 0
  done
  local sp
  while read -r sp; do
    [ -d "$sp/nvidia" ] || continue
    CUBLASLT_LIB=$(find "$sp/nvidia" -maxdepth 3 -name 'libcublasLt.so*' | sort | head -1)
    CUBLAS_LIB=$(find "$sp/nvidia" -maxdepth 3 -name 'libcublas.so*' | sort | head -1)
    [ -n "$CUBLASLT_LIB" ] && break
  done < <(site_dirs)
  [ -n "$CUBLASLT_LIB" ] && add_library_dir "$(dirname "$CUBLASLT_LIB")"
  return 0
}
# NCCL: the first place holding both nccl.h and libnccl: NCCL_ROOT, the system
# (the CUDA devel images' libnccl-dev), the toolkit, then pip's nvidia-nccl
# wheel beside PyTorch (lib/libnccl.so.2 only, which is named in full).
find_nccl() {
  local roots=() r inc lib sp
  [ -n "${NCCL_ROOT:-}" ] && roots+=("$NCCL_ROOT")
  roots+=(/usr "$CUDA_ROOT")
  while read -r sp; do
    for r in "$sp"/nvidia/nccl "$sp"/nvidia/cu13 "$sp"/nvidia/cu12; do [ -d "$r" ] && roots+=("$r"); done
  done < <(site_dirs)
  for r in "${roots[@]}"; do
    [ -n "$r" ] || continue
    inc="" lib=""
    [ -f "$r/include/nccl.h" ] && inc=$r/include
    for l in "$r"/lib/x86_64-linux-gnu/libnccl.so "$r"/lib64/libnccl.so "$r"/lib/libnccl.so \
             "$r"/lib/x86_64-linux-gnu/libnccl.so.2 "$r"/lib64/libnccl.so.2 "$r"/lib/libnccl.so.2; do
      [ -e "$l" ] && { lib=$l; break; }
    done
    if [ -n "$inc" ] && [ -n "$lib" ]; then
      NCCL_INC=$inc NCCL_LIB=$lib
      add_library_dir "$(dirname "$lib")"
      return 0
    fi
  done
  return 1
}

# ---- MPI: does the carried wrapper build and run a program here? ------------------
# FindMPI only says "MPI_CXX_WORKS missing" when its test compile fails; this
# shows why. (On 2026-11-23 it was the image's older libfabric in
# /usr/lib/x86_64-linux-gnu, put ahead of the wheel's on LD_LIBRARY_PATH.)
mpi_probe() {
  local d; d=$(mktemp -d -t mpi-probe.XXXXXX)
  echo "mpicxx: $(command -v mpicxx || echo NOT FOUND)"
  mpicxx -showme 2>&1 | sed 's/^/  showme: /'
  printf '#include <mpi.h>\n#include <cstdio>\nint main(int c, char** v) { MPI_Init(&c, &v); int r, n;\n  MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);\n  std::printf("hello from %%d of %%d\\n", r, n); MPI_Finalize(); }\n' >"$d/hello.cpp"
  local cxx=${CXX:-c++}
  echo "  build with OMPI_CXX=$cxx:"
  OMPI_CXX=$cxx mpicxx "$d/hello.cpp" -o "$d/hello" 2>&1 | head -20 | sed 's/^/    /'
  [ -x "$d/hello" ] && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 \
    mpirun --oversubscribe -np 2 "$d/hello" 2>&1 | head -10 | sed 's/^/    /'
  [ -x "$d/hello" ] && { echo "  loads:"; ldd "$d/hello" | grep -E 'mpi|fabric|ucx|ucp|pmix' | sed 's/^/    /'; }
  rm -rf "$d"
}

# ---- inventory ------------------------------------------------------------------
inventory() {
  local f=$OUT/inventory.txt
  {
    echo "==== session.sh $(date -u '+%Y-%m-%d %H:%M:%S UTC'), stages: $stages"
    echo "commit: ${ENGINE_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo 'unknown (set ENGINE_COMMIT)')}"
    echo "host: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), user $(id -un)"
    echo "os: $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}")"
    echo "glibc: $(ldd --version 2>&1 | head -1)"
    echo "disk: $(df -h "$ROOT" | awk 'NR==2 {print $4 " free on " $6}')"
    echo "deps: $DEPS_NOTE"
    echo
    echo "---- nvidia-smi"
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi 2>&1
      nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,compute_cap --format=csv 2>&1
    else
      echo "nvidia-smi not found"
    fi
    echo
    echo "---- toolchain"
    echo "nvcc: ${NVCC:-NOT FOUND} ($([ -n "$NVCC" ] && "$NVCC" --version | tail -2 | paste -sd' '))"
    echo "cmake: $(command -v cmake) ($(cmake --version 2>&1 | head -1))"
    echo "ninja: $(command -v ninja || echo NOT FOUND) ($(ninja --version 2>&1))"
    echo "gcc: $(command -v g++ || echo NOT FOUND) ($(g++ --version 2>&1 | head -1))"
    echo "pkg-config: $(command -v pkg-config || echo NOT FOUND) ($(pkg-config --version 2>&1))"
    echo "mpirun: $(command -v mpirun || echo NOT FOUND) ($(mpirun --version 2>&1 | head -1))"
    echo "python3: $(command -v python3) ($(python3 --version 2>&1))"
    python3 - <<'EOF' 2>&1 | sed 's/^/  /'
try:
    import torch
    print("torch", torch.__version__, "CUDA", torch.version.cuda, "available", torch.cuda.is_available(),
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
    print("torch nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else "?",
          "cudnn", torch.backends.cudnn.version())
except Exception as e:
    print("torch: not importable:", e)
try:
    import transformers
    print("transformers", transformers.__version__)
except Exception as e:
    print("transformers: not importable:", e)
EOF
    echo
    echo "---- CUDA libraries"
    echo "toolkit root: ${CUDA_ROOT:-none}"
    ls -1 "$CUDA_ROOT"/lib64/libcudart.so* "$CUDA_ROOT"/lib64/libcublasLt.so* 2>&1 | sed 's/^/  /'
    [ -n "$CUBLASLT_LIB" ] && echo "cuBLASLt from pip: $CUBLASLT_LIB (cuBLAS: $CUBLAS_LIB)"
    echo "NCCL: ${NCCL_INC:-not found} ${NCCL_LIB}"
    [ -n "$NCCL_INC" ] && grep -m3 -E '#define NCCL_(MAJOR|MINOR|PATCH)' "$NCCL_INC/nccl.h" | sed 's/^/  /'
    echo "every nccl.h / libnccl / cudnn.h / libcudnn seen (/usr, /usr/local, /opt, pip):"
    { find /usr/include /usr/lib/x86_64-linux-gnu /usr/local /opt -maxdepth 6 \
        \( -name nccl.h -o -name 'libnccl.so*' -o -name cudnn.h -o -name 'libcudnn.so*' \) 2>/dev/null
      while read -r sp; do find "$sp/nvidia" -maxdepth 3 \( -name nccl.h -o -name 'libnccl.so*' -o -name cudnn.h \
        -o -name 'libcudnn.so.*' \) 2>/dev/null; done < <(site_dirs); } | sort -u | head -40 | sed 's/^/  /'
    echo
    echo "---- carried manifest"
    cat "${D:-/nonexistent}/MANIFEST.txt" 2>/dev/null || echo "(none)"
    echo
    echo "---- environment"
    echo "PATH=$PATH"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    echo "PKG_CONFIG_PATH=${PKG_CONFIG_PATH:-}"
    echo "CMAKE_PREFIX_PATH=${CMAKE_PREFIX_PATH:-}"
    echo "compiler variables: CC=${CC:-} CXX=${CXX:-} CUDAHOSTCXX=${CUDAHOSTCXX:-} CFLAGS=${CFLAGS:-} CXXFLAGS=${CXXFLAGS:-} LDFLAGS=${LDFLAGS:-}"
    echo
    echo "---- MPI probe: the wrapper, and a two-rank hello built by it"
    mpi_probe
  } >"$f" 2>&1
  # Echo the key facts into the reply's tail.
  grep -E '^(commit|host|os|glibc|deps|nvcc|cmake|gcc|mpirun|NCCL|toolkit)' "$f"
  grep -E '^  torch ' "$f"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
}

# ---- build -----------------------------------------------------------------------
build() {
  # The log goes straight to $OUT: if the call is cut off, what was written still comes back.
  local log=$OUT/build.log t0=$(date +%s) rc
  local args=(-S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
    -DENGINE_ENABLE_CUDA=ON -DENGINE_ENABLE_CUDNN=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH")
  [ -n "$NVCC" ] && args+=(-DCMAKE_CUDA_COMPILER="$NVCC")
  if [ -n "${P:-}" ]; then
    # Name each carried package where CMake would otherwise search /usr first.
    args+=(-DCLI11_DIR="$P/share/cmake/CLI11" -Dnlohmann_json_DIR="$P/share/cmake/nlohmann_json"
      -DGTest_DIR="$L/cmake/GTest" -DXXHASH_INCLUDE_DIR="$P/include"
      -DOPENBLAS_LIBRARY="$L/openblas-openmp/libopenblas.so"
      -DCBLAS_INCLUDE_DIR="$P/include/x86_64-linux-gnu/openblas-openmp"
      -DPKG_CONFIG_EXECUTABLE="$P/bin/pkg-config"
      -DMPI_CXX_COMPILER="$M/bin/mpicxx" -DMPIEXEC_EXECUTABLE="$M/bin/mpirun")
  fi
  [ "${ENGINE_GPU_HIDE_SYSTEM:-0}" = 1 ] && args+=(-DCMAKE_IGNORE_PREFIX_PATH=/usr)
  [ -n "$NCCL_INC" ] && args+=(-DNCCL_INCLUDE_DIR="$NCCL_INC" -DNCCL_LIBRARY="$NCCL_LIB")
  [ -n "$CUBLASLT_LIB" ] && args+=(-DCUDA_cublasLt_LIBRARY="$CUBLASLT_LIB" -DCUDA_cublas_LIBRARY="$CUBLAS_LIB")
  # The Hugging Face check (hf_transformers_py) needs torch + transformers: the image's python3 has both.
  args+=(-DENGINE_TRANSFORMERS_PYTHON="$(command -v python3)")
  # Only what smoke and bench need when neither test stage is asked for (a
  # fresh machine's second call); everything otherwise, --stage build alone too.
  local targets=()
  if [ -z "${want[cuda]:-}${want[test]:-}" ] && [ -n "${want[smoke]:-}${want[bench]:-}" ]; then
    targets=(--target train prepare train_step_bench op_bench)
  fi
  # ENGINE_BUILD_TARGETS="train prepare plan": just those (a short call, e.g.
  # CHECKS_SECTIONS=6 alone).
  if [ -n "${ENGINE_BUILD_TARGETS:-}" ]; then
    read -r -a targets <<<"$ENGINE_BUILD_TARGETS"
    targets=(--target "${targets[@]}")
  fi
  {
    echo "==== cmake ${args[*]}"
    cmake "${args[@]}" || {
      # Keep what CMake's checks saw (FindMPI's test compile, say).
      [ -f "$BUILD/CMakeFiles/CMakeConfigureLog.yaml" ] &&
        tail -c 4000000 "$BUILD/CMakeFiles/CMakeConfigureLog.yaml" >"$OUT/cmake_configure_log.yaml"
      false
    } && {
      echo "==== cmake --build $BUILD -j $JOBS ${targets[*]}"
      timeout "$(stage_timeout 900)" cmake --build "$BUILD" -j "$JOBS" "${targets[@]}"
    }
  } >"$log" 2>&1
  rc=$?
  # cuDNN's attention is the newest and least tried part of the build (the
  # image's cuDNN against the carried frontend headers): if the build failed
  # with it, build once more without it, so the call still tests the rest.
  if [ $rc -ne 0 ] && grep -q 'cuDNN attention: ON' "$log" && [ "$(left)" -gt 200 ]; then
    {
      echo "==== the build failed with cuDNN attention; again with -DENGINE_ENABLE_CUDNN=OFF"
      cmake "${args[@]}" -DENGINE_ENABLE_CUDNN=OFF &&
        timeout "$(stage_timeout 900)" cmake --build "$BUILD" -j "$JOBS" "${targets[@]}"
    } >>"$log" 2>&1
    rc=$?
    [ $rc -eq 0 ] && CUDNN_NOTE="built WITHOUT cuDNN attention (it failed to build: build.log)"
  fi
  # Keep its end if it is over what the tool brings back (16 MiB).
  if [ "$(stat -c %s "$log")" -gt 15000000 ]; then tail -c 15000000 "$log" >"$log.tail" && mv "$log.tail" "$log"; fi
  grep -E 'CUDA backend:|cuDNN attention:|NCCL communicator:|OpenBLAS:|Found MPI|Found CLI11|Checking for module' "$log" | head -10
  local note="${CUDNN_NOTE:-}"
  [ -f "$BUILD/CMakeCache.txt" ] && note="$note $(grep -E '^CMAKE_CUDA_COMPILER:' "$BUILD/CMakeCache.txt" | cut -d= -f2)"
  if [ $rc -ne 0 ]; then
    grep -E 'error|Error|FAILED' "$log" | head -20
    [ $rc = 124 ] && note="timed out; $note"
    record build FAILED $(( $(date +%s) - t0 )) "$note (build.log)"
  else
    record build ok $(( $(date +%s) - t0 )) "$note"
  fi
  return $rc
}

# ---- ctest -L cuda -----------------------------------------------------------------
cuda_tests() {
  local t0=$(date +%s) rc note=""
  timeout "$(stage_timeout "${CUDA_STAGE_S:-420}")" ctest --test-dir "$BUILD" -L cuda -V --timeout 400 \
    >"$OUT/ctest_cuda.log" 2>&1
  rc=$?
  tail -5 "$OUT/ctest_cuda.log"
  local skipped ran
  skipped=$(grep -c '\[  SKIPPED \]' "$OUT/ctest_cuda.log")
  ran=$(grep -c '\[       OK \]' "$OUT/ctest_cuda.log")
  note="$ran gtest cases passed, $skipped skipped"
  # On a GPU machine a skipped CUDA test means the engine did not see the GPU.
  if [ $rc -eq 0 ] && [ "$skipped" -gt 0 ] && nvidia-smi -L >/dev/null 2>&1; then
    rc=1 note="$note although nvidia-smi sees a GPU"
  fi
  [ $rc -eq 0 ] && record cuda ok $(( $(date +%s) - t0 )) "$note" ||
    record cuda FAILED $(( $(date +%s) - t0 )) "$note (ctest_cuda.log)"
}

# ---- smoke: a real training run on the GPU -------------------------------------------
smoke() {
  local t0=$(date +%s) log=$OUT/smoke.log rc=0 w
  w=$(mktemp -d -t engine-smoke.XXXXXX)
  local fortunes=${P:-/usr}/share/games/fortunes
  local train=$BUILD/launch/train steps=${SMOKE_STEPS:-200}
  local lim; lim=$(stage_timeout 240)
  {
    echo "==== smoke: gpt-demo on $fortunes, $steps steps each, seed 1337"
    find -L "$fortunes" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -exec cat {} + >"$w/text.txt" &&
      "$BUILD/launch/prepare" --input "$w/text.txt" --output-dir "$w/data" --name fortunes --val-fraction 0.05 || rc=1
    common=(--config "$ROOT/examples/configs/demo.json" --train-data "$w/data/fortunes_train_*.bin"
      --val-data "$w/data/fortunes_val_*.bin" --steps "$steps" --val-interval "$steps" --sample-tokens 0
      --checkpoint-interval 0 --log-interval 50 --overwrite)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    run_one() {  # run_one NAME CMD...
      local name=$1; shift
      echo; echo "---- $name: $*"
      timeout "$lim" "$@" --run-dir "$w/$name" || { echo "!!!! $name failed (exit $?)"; return 1; }
    }
    run_one cpu_fp32 env OMP_NUM_THREADS=$(( $(nproc) < 8 ? $(nproc) : 8 )) "$train" "${common[@]}" --device cpu || rc=1
    run_one cuda_fp32 "$train" "${common[@]}" --device cuda --precision fp32 || rc=1
    run_one cuda_bf16 "$train" "${common[@]}" --device cuda --precision bf16 || rc=1
    # Two ranks on one GPU must use MPI (host staging); NCCL refuses two ranks per GPU.
    # Half the micro-batch keeps the batch (and so the tokens seen) the same.
    run_one cuda_dp2_mpi mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$train" "${common[@]}" --device cuda \
      --precision fp32 --comm mpi --micro-batch 8 || rc=1
    run_one cuda_nccl_np1 mpirun -np 1 "$train" "${common[@]}" --device cuda --precision fp32 --comm nccl || rc=1
    echo
    echo "==== losses (metrics.jsonl): last step's training loss and the validation loss (compared: same tokens in every run)"
    python3 - "$w" <<'EOF' || rc=1
import json, sys, pathlib
w = pathlib.Path(sys.argv[1])
ref = None
bad = False
for name in ["cpu_fp32", "cuda_fp32", "cuda_bf16", "cuda_dp2_mpi", "cuda_nccl_np1"]:
    f = w / name / "metrics.jsonl"
    if not f.exists():
        print(f"{name:14s} no metrics.jsonl"); bad = True; continue
    rows = [json.loads(l) for l in f.read_text().splitlines() if l.strip()]
    steps = [r for r in rows if "loss" in r]
    vals = [r["val_loss"] for r in rows if "val_loss" in r]
    if not steps:
        print(f"{name:14s} no steps"); bad = True; continue
    last = steps[-1]
    ms = sorted(1000 * (r.get("step_time_s") or 0) for r in steps[1:]) or [0]
    loss = last["loss"]
    val = vals[-1] if vals else None
    if loss is None or val is None:
        print(f"{name:14s} step {last.get('step')} loss {loss} val {val}: not finite or missing"); bad = True; continue
    if ref is None and name == "cpu_fp32":
        ref = val
    rel = abs(val - ref) / abs(ref) if ref else float("nan")
    print(f"{name:14s} step {last.get('step')} loss {loss:.5f}  val {val:.5f}"
          f"  val rel. to cpu {rel:.2e}  median step {ms[len(ms)//2]:.1f} ms")
    # The validation loss (the same 4.9k tokens in every run) should follow the
    # CPU's closely in fp32 (summation order, TF32 at most) and loosely in bf16.
    limit = 0.05 if "bf16" in name else 0.02
    if ref and rel > limit:
        print(f"  !!!! {name}: val loss {val} is off the CPU's {ref} by more than {limit:.0%}"); bad = True
sys.exit(1 if bad else 0)
EOF
  } >"$log" 2>&1
  [ $? -ne 0 ] && rc=1
  sed -n '/^==== losses/,$p' "$log"
  rm -rf "$w"
  [ $rc -eq 0 ] && record smoke ok $(( $(date +%s) - t0 )) ||
    record smoke FAILED $(( $(date +%s) - t0 )) "(smoke.log)"
}

# ---- the whole suite --------------------------------------------------------------------
all_tests() {
  local t0=$(date +%s) rc extra=()
  # The cuda label already ran verbosely in this call.
  [ -n "${want[cuda]:-}" ] && extra=(-LE cuda)
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    timeout "$(stage_timeout 420)" ctest --test-dir "$BUILD" --output-on-failure --timeout 300 -j "$CTEST_JOBS" \
    "${extra[@]}" >"$OUT/ctest_all.log" 2>&1
  rc=$?
  # ctest writes LastTest.log.tmp and renames it at the end: a run cut short leaves only the .tmp.
  local last=$BUILD/Testing/Temporary/LastTest.log
  [ -f "$last.tmp" ] && [ "$last.tmp" -nt "$last" ] && last=$last.tmp
  [ -f "$last" ] && keep "$last" LastTest.log
  local tail_line; tail_line=$(grep -E 'tests passed|tests failed' "$OUT/ctest_all.log" | tail -1)
  sed -n '/tests passed\|tests failed/,$p' "$OUT/ctest_all.log" | head -30
  [ $rc = 124 ] && tail_line="timed out in $(grep -oE 'Start +[0-9]+: [^ ]+' "$OUT/ctest_all.log" | tail -1 | sed -E 's/Start +//'); $tail_line"
  [ $rc -eq 0 ] && record test ok $(( $(date +%s) - t0 )) "$tail_line" ||
    record test FAILED $(( $(date +%s) - t0 )) "$tail_line (ctest_all.log, LastTest.log)"
}

# ---- benchmark ------------------------------------------------------------------------------
bench() {
  local t0=$(date +%s) rc lim logs
  lim=$(stage_timeout 480)
  # gpu_bench.sh's full logs go to a scratch folder; everything it prints is in
  # bench.log, and the clock samples are kept.
  logs=$(mktemp -d -t gpu-bench.XXXXXX)
  ENGINE_BUILD_DIR=$BUILD LOG_DIR=$logs ENGINE_COMMIT=${ENGINE_COMMIT:-} GPU_BENCH_DEADLINE=$(( $(date +%s) + lim )) \
    timeout "$lim" bash "$ROOT/examples/benchmarks/gpu_bench.sh" >"$OUT/bench.log" 2>&1
  rc=$?
  mkdir -p "$OUT/gpu_samples" && cp "$logs"/*_gpu_samples.csv "$OUT/gpu_samples/" 2>/dev/null
  sed -n '/^==== summary/,$p' "$OUT/bench.log"
  [ $rc = 124 ] && echo "bench: stopped after $lim s (raise SESSION_BUDGET_S or lower STEPS)"
  [ $rc -eq 0 ] && record bench ok $(( $(date +%s) - t0 )) ||
    record bench FAILED $(( $(date +%s) - t0 )) "exit $rc (bench.log)"
}

# ---- llm.c's build, in the background ----------------------------------------------------------
# llm.c (a peer, outside the project: LLMC_DIR) is one nvcc compile of 1-3
# minutes on one core: started with the engine's build so that it is done by
# the time gpu_bench.sh reaches it (llmc_reference.sh run waits for it).
llmc_build_start() {
  [ -n "${want[bench]:-}" ] && [ "${RUN_LLMC:-1}" != 0 ] || return 0
  if [ -z "${LLMC_DIR:-}" ] || [ ! -f "${LLMC_DIR:-}/train_gpt2.cu" ]; then
    echo "session.sh: llm.c not built (LLMC_DIR='${LLMC_DIR:-}' is unset or has no train_gpt2.cu)"
    return 0
  fi
  echo "==== llm.c build in the background ($OUT/llmc_build.log)"
  ENGINE_BUILD_DIR=$BUILD CUDA_ARCH=$CUDA_ARCH NVCC=$NVCC \
    bash "$ROOT/examples/benchmarks/llmc_reference.sh" build >"$OUT/llmc_build.log" 2>&1 &
  return 0
}

# ---- checks ---------------------------------------------------------------------------------
checks() {
  local t0=$(date +%s) rc lim
  lim=$(stage_timeout 540)
  ENGINE_BUILD_DIR=$BUILD CHECKS_BUDGET_S=$((lim - 5)) FORTUNES_DIR=${P:-/usr}/share/games/fortunes \
    timeout "$lim" bash "$ROOT/examples/gpu/checks.sh" >"$OUT/checks.log" 2>&1
  rc=$?
  grep -aE '^(====|!!!!|\|)' "$OUT/checks.log" | tail -40
  [ $rc -eq 0 ] && record checks ok $(( $(date +%s) - t0 )) ||
    record checks FAILED $(( $(date +%s) - t0 )) "exit $rc (checks.log)"
}

# ---- run ------------------------------------------------------------------------------------------
t0=$(date +%s)
setup_deps || echo "session.sh: $DEPS_NOTE" >&2
find_cuda || echo "session.sh: nvcc not found on PATH or in /usr/local/cuda*: the build will be CPU-only" >&2
find_nccl || true
echo "==== inventory"
inventory
record inventory ok $(( $(date +%s) - t0 )) "${NVCC:-no nvcc}"

built=1
if [ -n "${want[build]:-}" ]; then
  llmc_build_start
  echo "==== build ($BUILD, -j $JOBS, sm_$CUDA_ARCH)"
  build || built=0
elif [ ! -f "$BUILD/build.ninja" ]; then
  built=0
fi
for s in cuda smoke test bench checks; do
  [ -n "${want[$s]:-}" ] || continue
  if [ $built = 0 ]; then
    record "$s" skipped 0 "no build in $BUILD"
    failed+=("$s")
    continue
  fi
  if [ "$(left)" -lt 30 ]; then
    record "$s" skipped 0 "out of time (SESSION_BUDGET_S=$BUDGET)"
    failed+=("$s")
    continue
  fi
  echo "==== $s"
  case $s in
    cuda) cuda_tests ;;
    smoke) smoke ;;
    test) all_tests ;;
    bench) bench ;;
    checks) checks ;;
  esac
  reap
done

echo
echo "==== summary ($(( $(date +%s) - START )) s; logs in $OUT)"
cat "$SUMMARY"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}" | tee -a "$SUMMARY"
  exit 1
fi
echo "all stages ok" | tee -a "$SUMMARY"
