# Shared by launch/train.sh and tests/run.sh (source it; do not run it).
# Installs what the build needs from Debian/Ubuntu packages, then configures
# and builds the engine. Safe to run again: it installs only what is missing.

ENGINE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ENGINE_BUILD_DIR=${ENGINE_BUILD_DIR:-$ENGINE_ROOT/build}

# Package names, by what they provide.
ENGINE_APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config  # toolchain
  libopenblas-openmp-dev                        # BLAS for the CPU backend (OpenMP build)
  libopenmpi-dev openmpi-bin                    # mpirun and MPI for multi-rank runs
  libcli11-dev nlohmann-json3-dev               # flags, JSON configs and metrics
  libxxhash-dev                                 # checkpoint checksums (XXH3)
  libpcre2-dev                                  # the pre-tokenizers' regexes (launch/data/regex_split.cpp)
  libutf8proc-dev                               # Unicode NFC for Qwen2's normalizer (launch/data/unicode_normalizer.cpp)
  libgtest-dev                                  # the test suite
  python3                                       # launch/supervise (restarts, goodput) and its tests
  python3-matplotlib python3-numpy              # report.py, plot_run.py and their tests; test_hf_safetensors.py
  fortunes fortunes-min                         # the demo's English text corpus
)

# engine_install_dependencies [PACKAGE ...]: installs the missing ones of the
# packages named (default: ENGINE_APT_PACKAGES).
engine_install_dependencies() {
  local missing=() wanted=("$@")
  [ ${#wanted[@]} -eq 0 ] && wanted=("${ENGINE_APT_PACKAGES[@]}")
  for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  echo "setup: installing ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install ${missing[*]}" >&2; return 1; }
    sudo=sudo
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# cuDNN's fused attention (engine/cuda/attention_cudnn.cpp) needs the cuDNN
# frontend, a header-only C++ library that no Debian package carries; NVIDIA
# publishes it on PyPI as nvidia-cudnn-frontend. Only its include/ folder is
# used, so one pinned wheel (checked by hash) serves every Python version.
ENGINE_CUDNN_FRONTEND_VERSION=1.32.0
ENGINE_CUDNN_FRONTEND_SHA256=8b354a8e550c083eb247f1eb39a7d69a4a269075f5a01e4fcbd2531680b17239
ENGINE_CUDNN_FRONTEND_DIR=$ENGINE_ROOT/.deps/cudnn-frontend

# engine_cudnn_present: true when cuDNN's header is where CMake looks
# (engine/CMakeLists.txt): the toolkit, /usr, or CUDNN_ROOT.
engine_cudnn_present() {
  local d
  for d in "${CUDNN_ROOT:-/nonexistent}/include" /usr/local/cuda/include /usr/include /usr/include/x86_64-linux-gnu; do
    [ -f "$d/cudnn.h" ] && return 0
  done
  return 1
}

# engine_fetch_cudnn_frontend: unpacks the frontend's headers into
# $ENGINE_CUDNN_FRONTEND_DIR/include (git-ignored) unless they are there.
# Never fatal: without them CMake builds attention on the built-in kernels.
# A failed download leaves a marker, so that a machine without PyPI access
# does not wait for pip on every build (delete the marker to try again).
engine_fetch_cudnn_frontend() {
  [ -f "$ENGINE_CUDNN_FRONTEND_DIR/include/cudnn_frontend.h" ] && return 0
  local marker=$ENGINE_CUDNN_FRONTEND_DIR.failed
  if [ -f "$marker" ]; then
    echo "setup: no cuDNN frontend headers (an earlier download failed; rm $marker to retry): built-in attention" >&2
    return 0
  fi
  if ! python3 -m pip --version >/dev/null 2>&1; then
    engine_install_dependencies python3-pip || true
  fi
  local tmp wheel
  tmp=$(mktemp -d)
  echo "nvidia-cudnn-frontend==$ENGINE_CUDNN_FRONTEND_VERSION --hash=sha256:$ENGINE_CUDNN_FRONTEND_SHA256" \
    >"$tmp/requirements.txt"
  if python3 -m pip download -q --timeout 20 --retries 1 --no-deps --require-hashes --only-binary=:all: \
       --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 -r "$tmp/requirements.txt" \
       -d "$tmp" >"$tmp/pip.log" 2>&1 &&
     wheel=$(ls "$tmp"/nvidia_cudnn_frontend-*.whl 2>/dev/null) &&
     python3 -m zipfile -e "$wheel" "$tmp/unpacked" &&
     [ -f "$tmp/unpacked/include/cudnn_frontend.h" ] &&
     rm -rf "$ENGINE_CUDNN_FRONTEND_DIR" && mkdir -p "$ENGINE_CUDNN_FRONTEND_DIR" &&
     mv "$tmp/unpacked/include" "$ENGINE_CUDNN_FRONTEND_DIR/include"; then
    echo "setup: cuDNN frontend $ENGINE_CUDNN_FRONTEND_VERSION headers in $ENGINE_CUDNN_FRONTEND_DIR"
  else
    echo "setup: could not fetch nvidia-cudnn-frontend $ENGINE_CUDNN_FRONTEND_VERSION from PyPI" \
         "($(tail -1 "$tmp/pip.log" 2>/dev/null)); attention will use the built-in kernels" >&2
    mkdir -p "$(dirname "$marker")" && : >"$marker" || true
  fi
  rm -rf "$tmp"
  return 0
}

# engine_build [TARGET ...]: configures, then builds the targets (all if none).
engine_build() {
  local jobs=${ENGINE_BUILD_JOBS:-$(nproc)}
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  # nvcc may live outside PATH on a fresh machine with the CUDA toolkit.
  if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
  fi
  # ENGINE_ENABLE_CUDNN=0: attention on the built-in kernels, without fetching the frontend.
  local cudnn=ON
  [ "${ENGINE_ENABLE_CUDNN:-1}" = 0 ] && cudnn=OFF
  if [ $cudnn = ON ] && command -v nvcc >/dev/null && engine_cudnn_present; then engine_fetch_cudnn_frontend; fi
  cmake -S "$ENGINE_ROOT" -B "$ENGINE_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DENGINE_ENABLE_CUDNN=$cudnn >/dev/null
  cmake --build "$ENGINE_BUILD_DIR" -j "$jobs" "${targets[@]}"
}

# engine_build_sanitized [TARGET ...]: the AddressSanitizer + UndefinedBehaviorSanitizer
# build (CUDA off, -O1 -g1; CMakeLists.txt's ENGINE_SANITIZE) in $ENGINE_SANITIZE_BUILD_DIR,
# which tests/run.sh runs the cpu-labelled tests in after the main build's suite.
ENGINE_SANITIZE_BUILD_DIR=${ENGINE_SANITIZE_BUILD_DIR:-$ENGINE_ROOT/build-asan}
engine_build_sanitized() {
  local jobs=${ENGINE_BUILD_JOBS:-$(nproc)}
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake -S "$ENGINE_ROOT" -B "$ENGINE_SANITIZE_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DENGINE_ENABLE_CUDA=OFF -DENGINE_SANITIZE=ON >/dev/null
  cmake --build "$ENGINE_SANITIZE_BUILD_DIR" -j "$jobs" "${targets[@]}"
}

# engine_bench_begin: what every CPU benchmark script under examples/
# benchmarks does first: installs and builds `train` and `prepare`, makes a
# scratch directory $ENGINE_BENCH_WORK (removed on exit) holding token
# shards bench_train_*.bin from a few fortune files (these benchmarks measure
# time and memory, not learning), and sets up mpirun for one OpenMP thread
# per rank, as root too.
engine_bench_begin() {
  engine_install_dependencies
  engine_build train prepare
  ENGINE_BENCH_WORK=$(mktemp -d)
  trap 'rm -rf "$ENGINE_BENCH_WORK"' EXIT
  find -L /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | head -5 |
    xargs cat > "$ENGINE_BENCH_WORK/text.txt"
  "$ENGINE_BUILD_DIR/launch/prepare" --input "$ENGINE_BENCH_WORK/text.txt" --output-dir "$ENGINE_BENCH_WORK" \
    --name bench >/dev/null
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
}
