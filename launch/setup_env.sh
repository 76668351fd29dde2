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
  libpcre2-dev                                  # GPT-2's pre-tokenizer regex (launch/bpe_tokenizer.cpp)
  libgtest-dev                                  # the test suite
  python3                                       # launch/supervise (restarts, goodput) and its tests
  python3-matplotlib python3-numpy              # report.py, plot_run.py and their tests; test_hf_safetensors.py
  fortunes fortunes-min                         # the demo's English text corpus
)

engine_install_dependencies() {
  local missing=()
  for pkg in "${ENGINE_APT_PACKAGES[@]}"; do
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

# engine_build [TARGET ...]: configures, then builds the targets (all if none).
engine_build() {
  local jobs=${ENGINE_BUILD_JOBS:-$(nproc)}
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  # nvcc may live outside PATH on a fresh machine with the CUDA toolkit.
  if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
  fi
  cmake -S "$ENGINE_ROOT" -B "$ENGINE_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$ENGINE_BUILD_DIR" -j "$jobs" "${targets[@]}"
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
