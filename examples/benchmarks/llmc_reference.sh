#!/usr/bin/env bash
# llm.c (karpathy/llm.c, MIT; a peer kept OUTSIDE the project, never copied
# into it: LLMC_DIR names its folder) timed at the engine's shapes, for
# gpu_bench.sh. Builds train_gpt2cu (bf16, cuDNN attention), writes synthetic
# token shards, trains from random weights with no recomputation and ZeRO 0,
# and prints a machine-readable last line like pytorch_reference.py's:
#   RESULT impl=llm.c model=... step_ms=... tok_s=... tflops=... mfu=... llmc_mfu=...
#
#   llmc_reference.sh build          # train_gpt2cu into LLMC_BUILD_DIR (session.sh starts
#                                    # this in the background at its build stage)
#   llmc_reference.sh run --model gpt2-124m --micro-batch 16 --grad-accum 1 \
#       --seq-len 1024 --steps 20 [--warmup-steps 1] [--peak-tflops 989]
#   llmc_reference.sh parse LOG MODEL B T ACCUM WARMUP [PEAK]   # RESULT from a saved log
#   llmc_reference.sh shards DIR NTOK                           # the synthetic shards only
#
# Environment:
#   LLMC_DIR          llm.c's folder (required for build and run; e.g. $PWD/.peers/llm.c)
#   LLMC_BUILD_DIR    where it is built (default $ENGINE_BUILD_DIR/llmc, else ./build/llmc)
#   LLMC_CUDA_ARCH    compute capability to build for (default $CUDA_ARCH or 90: H100/H200)
#   CUDNN_FRONTEND_PATH  folder holding cudnn_frontend.h (default: the carried
#                     deps, unpacked by session.sh to $GPU_DEPS_DIR/cudnn-frontend/include,
#                     or unpacked here from .gpu-deps/deps.tar.xz)
#   LLMC_BUILD_WAIT_S how long `run` waits for a build started elsewhere (default 600)
#   NVCC              nvcc to use (default: on PATH, else /usr/local/cuda/bin/nvcc)
#   LLMC_MAKE         make program (default make; where none is found, the
#                     Makefile's two nvcc commands run directly)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LLMC_BUILD_DIR=${LLMC_BUILD_DIR:-${ENGINE_BUILD_DIR:-$ROOT/build}/llmc}
LLMC_CUDA_ARCH=${LLMC_CUDA_ARCH:-${CUDA_ARCH:-90}}
BIN=$LLMC_BUILD_DIR/src/train_gpt2cu
if [ -n "${LLMC_DIR:-}" ] && [ -d "$LLMC_DIR" ]; then LLMC_DIR=$(cd "$LLMC_DIR" && pwd); fi

die() { echo "llmc_reference: $*" >&2; exit 1; }

# ---- build -----------------------------------------------------------------------
# Built in a copy of the sources (LLMC_BUILD_DIR/src), not in LLMC_DIR, because
# (1) the peer's folder stays clean: it is carried to the GPU machine on every
# call, and make would leave build/*.o and four binaries in it; (2) llm.c's
# Makefile stops with "cuDNN not found" unless ./cudnn-frontend/include or
# $HOME/cudnn-frontend/include exists, whatever CUDNN_FRONTEND_PATH says, so the
# copy gets a cudnn-frontend link to the carried headers beside its Makefile.
find_frontend() {
  local d
  for d in "${CUDNN_FRONTEND_PATH:-}" "${CUDNN_FRONTEND_ROOT:+$CUDNN_FRONTEND_ROOT/include}" \
           "${GPU_DEPS_DIR:-/tmp/engine-gpu-deps}/cudnn-frontend/include" "$LLMC_BUILD_DIR/deps/cudnn-frontend/include"; do
    [ -n "$d" ] && [ -f "$d/cudnn_frontend.h" ] && { echo "$d"; return 0; }
  done
  # Run alone (not from session.sh): unpack only the frontend from the carried tarball.
  local tarball=$ROOT/.gpu-deps/deps.tar.xz
  [ -f "$tarball" ] || return 1
  mkdir -p "$LLMC_BUILD_DIR/deps"
  tar -C "$LLMC_BUILD_DIR/deps" -xJf "$tarball" cudnn-frontend 2>/dev/null ||
    python3 -c 'import sys, tarfile
t = tarfile.open(sys.argv[1])
kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
t.extractall(sys.argv[2], members=[m for m in t.getmembers() if m.name.startswith("cudnn-frontend")], **kw)' \
      "$tarball" "$LLMC_BUILD_DIR/deps" || return 1
  d=$LLMC_BUILD_DIR/deps/cudnn-frontend/include
  [ -f "$d/cudnn_frontend.h" ] && echo "$d"
}

# The Makefile always links -lnvidia-ml (NVML; used only if nvml.h is found).
# A container's driver mount has libnvidia-ml.so.1 but often no libnvidia-ml.so
# for the linker, and a toolkit without cuda-nvml-dev has no stub either (this
# project's CPU machine): give the linker one in a folder of its own
# (LIBRARY_PATH, searched after nvcc's -L folders). The program loads the
# driver's libnvidia-ml.so.1 at run time either way. Same for cuBLAS, cuDNN
# and NVRTC where only pip's wheels (versioned names) have them.
link_shims() {  # link_shims NVCC SHIMDIR
  local cuda; cuda=$(dirname "$(dirname "$(readlink -f "$1")")")
  local shim=$2 lib f sp
  mkdir -p "$shim"
  local dirs=("$cuda/targets/x86_64-linux/lib" "$cuda/targets/x86_64-linux/lib/stubs" "$cuda/lib64" "$cuda/lib64/stubs"
    /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /lib/x86_64-linux-gnu)
  for lib in nvidia-ml cublas cublasLt cudnn nvrtc; do
    f=""
    for d in "${dirs[@]}"; do [ -e "$d/lib$lib.so" ] && { f=$d/lib$lib.so; break; }; done
    [ -n "$f" ] && continue
    # A versioned copy: the driver's (ldconfig), or pip's nvidia/* wheels.
    f=$(ldconfig -p 2>/dev/null | awk -v n="lib$lib.so." '$1 ~ "^"n { print $NF; exit }')
    if [ -z "$f" ]; then
      while read -r sp; do
        f=$(find "$sp/nvidia" -maxdepth 3 -name "lib$lib.so.*" 2>/dev/null | sort | head -1)
        [ -n "$f" ] && break
      done < <(python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null)
    fi
    if [ -n "$f" ]; then
      ln -sf "$f" "$shim/lib$lib.so"; echo "link shim: lib$lib.so -> $f"
    elif [ "$lib" = nvidia-ml ]; then
      # No NVML anywhere (a machine without a driver): an empty stand-in with the
      # driver's soname lets the link finish; llm.c calls NVML only when nvml.h
      # was found, and a GPU machine has the real libnvidia-ml.so.1 to load.
      echo 'void llmc_reference_nvml_stub(void) {}' >"$shim/nvml_stub.c"
      cc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o "$shim/libnvidia-ml.so" "$shim/nvml_stub.c" &&
        echo "link shim: libnvidia-ml.so is an empty stand-in (no NVML library found)"
    else
      echo "link shim: lib$lib.so not found (the link will fail)"
    fi
  done
}

build() {
  if [ -z "${LLMC_DIR:-}" ] || [ ! -f "$LLMC_DIR/train_gpt2.cu" ]; then die "LLMC_DIR='${LLMC_DIR:-}' has no train_gpt2.cu"; fi
  local nvcc=${NVCC:-$(command -v nvcc || true)}
  [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
  [ -n "$nvcc" ] || die "nvcc not found"
  nvcc=$(readlink -f "$nvcc")  # one name for the stamp, however it was found
  local fe; fe=$(find_frontend) || die "no cudnn_frontend.h (set CUDNN_FRONTEND_PATH, or carry .gpu-deps)"
  mkdir -p "$LLMC_BUILD_DIR"
  local stamp_want
  stamp_want="$(cat "$LLMC_DIR"/train_gpt2.cu "$LLMC_DIR"/llmc/* "$LLMC_DIR"/Makefile "$ROOT/examples/benchmarks/llmc_cuda13_compat.h" 2>/dev/null | cksum) $LLMC_CUDA_ARCH $nvcc $fe"
  if [ -x "$BIN" ] && [ "$(cat "$LLMC_BUILD_DIR/build.stamp" 2>/dev/null)" = "$stamp_want" ]; then
    echo "llmc_reference: $BIN is up to date"; return 0
  fi
  # (u+w: the peers' copy is read-only, and cp keeps the modes.)
  [ -d "$LLMC_BUILD_DIR/src" ] && chmod -R u+w "$LLMC_BUILD_DIR/src"
  rm -rf "$LLMC_BUILD_DIR/src" "$LLMC_BUILD_DIR/build.stamp"
  mkdir -p "$LLMC_BUILD_DIR/src"
  cp -R "$LLMC_DIR/." "$LLMC_BUILD_DIR/src/"
  chmod -R u+w "$LLMC_BUILD_DIR/src"
  rm -rf "$LLMC_BUILD_DIR/src/build" "$LLMC_BUILD_DIR/src/cudnn-frontend"
  mkdir -p "$LLMC_BUILD_DIR/src/cudnn-frontend"
  ln -s "$fe" "$LLMC_BUILD_DIR/src/cudnn-frontend/include"
  link_shims "$nvcc" "$LLMC_BUILD_DIR/shims"
  echo "==== make train_gpt2cu (llm.c from $LLMC_DIR; nvcc $nvcc; sm_$LLMC_CUDA_ARCH; cuDNN frontend $fe)"
  # GPU_COMPUTE_CAPABILITY: the Makefile would otherwise ask nvidia-smi (absent
  # where this is checked; on the GPU the same value makes the same binary).
  # NVCC on the command line overrides its `which nvcc`. NO_MULTI_GPU, NO_USE_MPI:
  # one GPU, no NCCL or MPI (the image's Open MPI is not the carried one).
  # NVCC_LDLIBS=-lnvrtc: the carried cuDNN frontend (1.32; llm.c was written
  # against 1.5) compiles its experimental engines at run time with NVRTC, and
  # the Makefile does not link it (the engine's CMake links CUDA::nvrtc too);
  # with NO_MULTI_GPU and NO_USE_MPI the Makefile adds nothing else there.
  # NVCC_PREPEND_FLAGS: llmc_cuda13_compat.h, so that CUDA 13 compiles it (the header says why).
  # -rpath: the folders it was linked against (the toolkit's, and those of any
  # shim's target), so that it loads the same cuBLAS and NVRTC without relying
  # on the image's ld.so.conf (the engine gets the same from CMake's RPATH).
  local cuda rpath d
  cuda=$(dirname "$(dirname "$nvcc")")
  rpath=$cuda/targets/x86_64-linux/lib:$cuda/lib64
  for d in "$LLMC_BUILD_DIR"/shims/*.so; do
    [ -L "$d" ] && rpath=$rpath:$(dirname "$(readlink -f "$d")")
  done
  local t0 rc; t0=$(date +%s)
  export NVCC_PREPEND_FLAGS="-include $ROOT/examples/benchmarks/llmc_cuda13_compat.h${NVCC_PREPEND_FLAGS:+ $NVCC_PREPEND_FLAGS}"
  export LIBRARY_PATH=$LLMC_BUILD_DIR/shims${LIBRARY_PATH:+:$LIBRARY_PATH}
  PATH=$(dirname "$nvcc"):$PATH; export PATH
  if command -v "${LLMC_MAKE:-make}" >/dev/null; then
    "${LLMC_MAKE:-make}" -C "$LLMC_BUILD_DIR/src" train_gpt2cu NVCC="$nvcc" GPU_COMPUTE_CAPABILITY="$LLMC_CUDA_ARCH" \
      NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=1 CUDNN_FRONTEND_PATH="$fe" NVCC_LDLIBS="-lnvrtc -Xlinker -rpath -Xlinker $rpath"
    rc=$?
  else
    # An image without make: the two commands the Makefile runs for this
    # configuration (as its log shows them here), run directly.
    echo "llmc_reference: no '${LLMC_MAKE:-make}': running the Makefile's two nvcc commands directly"
    local a=$LLMC_CUDA_ARCH
    local flags=(--threads=0 -t=0 --use_fast_math -std=c++17 -O3 --generate-code "arch=compute_$a,code=[compute_$a,sm_$a]"
      -DENABLE_CUDNN -DENABLE_BF16)
    (cd "$LLMC_BUILD_DIR/src" && mkdir -p build && set -x &&
      "$nvcc" -c "${flags[@]}" llmc/cudnn_att.cpp -I"$fe" -o build/cudnn_att.o &&
      "$nvcc" "${flags[@]}" train_gpt2.cu build/cudnn_att.o -lcublas -lcublasLt -lnvidia-ml -lcudnn -I"$fe" \
        -lnvrtc -Xlinker -rpath -Xlinker "$rpath" -o train_gpt2cu)
    rc=$?
  fi
  [ $rc -eq 0 ] || { echo "llmc_reference: the build failed (exit $rc)"; return 1; }
  echo "$stamp_want" >"$LLMC_BUILD_DIR/build.stamp"
  echo "llmc_reference: built $BIN in $(( $(date +%s) - t0 )) s"
}

# A build started elsewhere (session.sh, in the background) writes build.pid
# first and build.rc last; `run` waits for it rather than compiling twice.
build_tracked() {
  mkdir -p "$LLMC_BUILD_DIR"
  rm -f "$LLMC_BUILD_DIR/build.rc"
  echo "$BASHPID" >"$LLMC_BUILD_DIR/build.pid"
  build
  local rc=$?
  echo "$rc" >"$LLMC_BUILD_DIR/build.rc"
  return $rc
}

wait_for_build() {
  local pid waited=0 limit=${LLMC_BUILD_WAIT_S:-600}
  pid=$(cat "$LLMC_BUILD_DIR/build.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && [ ! -f "$LLMC_BUILD_DIR/build.rc" ] && kill -0 "$pid" 2>/dev/null; then
    echo "llmc_reference: waiting for the build in progress (pid $pid, log $LLMC_BUILD_DIR/build.log or \$OUT/llmc_build.log)"
    while [ ! -f "$LLMC_BUILD_DIR/build.rc" ] && kill -0 "$pid" 2>/dev/null && [ $waited -lt "$limit" ]; do
      sleep 2; waited=$((waited + 2))
    done
    echo "llmc_reference: waited $waited s"
  fi
  local rc; rc=$(cat "$LLMC_BUILD_DIR/build.rc" 2>/dev/null || echo none)
  if [ "$rc" != none ] && [ "$rc" != 0 ]; then
    die "the llm.c build failed (exit $rc; see its log)"
  fi
  # Not built yet (run alone) or stale: build here, in the foreground.
  build_tracked >"$LLMC_BUILD_DIR/build.log" 2>&1 || { tail -20 "$LLMC_BUILD_DIR/build.log" >&2; die "the llm.c build failed ($LLMC_BUILD_DIR/build.log)"; }
  tail -1 "$LLMC_BUILD_DIR/build.log"
}

# ---- synthetic data ----------------------------------------------------------------
# llm.c's shard format (llmc/dataloader.h): 256 int32 of header (magic
# 20240520, version 1, token count), then uint16 tokens. Deterministic ids
# below GPT-2's 50257 (a multiplicative hash of the position); the speed of a
# step does not depend on the token values. Plain python (struct, array).
shards() {  # shards DIR NTOK
  python3 - "$1" "$2" <<'EOF'
import array, os, struct, sys
out, ntok = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
for split, seed in (("train", 1), ("val", 2)):
    path = os.path.join(out, f"synthetic_{split}_000000.bin")
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, ntok
    toks = array.array("H", ((i * 2654435761 + seed * 97) % 50257 for i in range(ntok)))
    assert toks.itemsize == 2
    if sys.byteorder != "little":
        toks.byteswap()
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(toks.tobytes())
    print(f"wrote {path}: {ntok} tokens")
EOF
}

# ---- parse a log ---------------------------------------------------------------------
# train_gpt2.cu prints one line per optimizer step:
#   step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms | %.1f%% bf16 MFU | %.0f tok/s
# Its ms is that step alone (CUDA events around the step); its tok/s is an
# exponential moving average, so tok/s here is tokens / median ms instead.
# Its MFU is its own convention (6N + 6LCT FLOPs per token against its own
# peak table; negative when the GPU is not in the table: the H200 is not):
# llmc_mfu is that figure, llmc_count_mfu its FLOP count over PEAK.
model_shape() {  # layers width
  case $1 in
    gpt2-124m) echo "12 768 d12" ;;
    gpt2-350m) echo "24 1024 d24" ;;
    gpt2-774m) echo "36 1280 d36" ;;
    gpt2-1558m) echo "48 1600 d48" ;;
    *) return 1 ;;
  esac
}

parse() {  # parse LOG MODEL B T ACCUM WARMUP [PEAK_TFLOPS]
  local log=$1 model=$2 b=$3 t=$4 accum=$5 warmup=$6 peak=${7:-0} shape l h
  shape=$(model_shape "$model") || die "unknown model $model"
  read -r l h _ <<<"$shape"
  sed -nE 's/^step +([0-9]+)\/[0-9]+ \|.*\| ([0-9.]+) ms \| (-?[0-9.]+)% bf16 MFU \| ([0-9.]+) tok\/s.*/\1 \2 \3/p' "$log" |
    awk -v w="$warmup" '$1 > w' | sort -k2,2g >"$log.steps"
  # llm.c's own FLOP count (gpt2_estimate_mfu: 6N + 6LCT per token, N from its
  # "num_parameters:" line) over the same peak, for a GPU its table lacks.
  local nparams; nparams=$(sed -nE 's/^num_parameters: ([0-9]+).*/\1/p' "$log" | head -1)
  awk -v m="$model" -v b="$b" -v t="$t" -v k="$accum" -v l="$l" -v h="$h" -v p="$peak" -v w="$warmup" -v np="${nparams:-0}" '
    { ms[NR] = $2; mfu[NR] = $3 }
    END {
      n = NR
      if (n == 0) { print "llmc_reference: no timed step lines in the log" > "/dev/stderr"; exit 1 }
      med = (n % 2) ? ms[(n + 1) / 2] : (ms[n / 2] + ms[n / 2 + 1]) / 2
      # llm.c MFU, median on its own (sorted separately)
      for (i = 1; i <= n; i++) u[i] = mfu[i]
      for (i = 2; i <= n; i++) { x = u[i]; j = i - 1; while (j > 0 && u[j] > x) { u[j + 1] = u[j]; j-- } u[j + 1] = x }
      own = (n % 2) ? u[(n + 1) / 2] : (u[n / 2] + u[n / 2 + 1]) / 2
      V = 50304
      # model/flops.h, as the engine and pytorch_reference.py (full attention square):
      f = 72 * b * k * t * l * h * h * (1 + t / (6 * h) + V / (12 * l * h))
      tf = f / (med / 1000) / 1e12
      conv = (np > 0 && p > 0) ? sprintf("%.1f%%", 100 * (6 * np + 6 * l * h * t) * b * t * k / (med / 1000) / 1e12 / p) : "nan"
      printf "RESULT impl=llm.c model=%s B=%d T=%d grad_accum=%d step_ms=%.2f tok_s=%.0f tflops=%.2f mfu=%s llmc_mfu=%s llmc_count_mfu=%s timed_steps=%d warmup_steps=%d min_ms=%.2f max_ms=%.2f\n",
        m, b, t, k, med, b * t * k / (med / 1000), tf, (p > 0) ? sprintf("%.4f", tf / p) : "nan",
        (own < 0) ? "nan" : sprintf("%.1f%%", own), conv, n, w, ms[1], ms[n]
    }' "$log.steps"
}

# ---- run -------------------------------------------------------------------------------
run() {
  local model="" mb="" accum=1 t=1024 steps=20 warmup=1 peak=0
  while [ $# -gt 0 ]; do
    case $1 in
      --model) model=$2 ;;
      --micro-batch) mb=$2 ;;
      --grad-accum) accum=$2 ;;
      --seq-len) t=$2 ;;
      --steps) steps=$2 ;;
      --warmup-steps) warmup=$2 ;;
      --peak-tflops) peak=$2 ;;
      *) die "unknown argument $1" ;;
    esac
    shift 2
  done
  if [ -z "$model" ] || [ -z "$mb" ]; then die "run needs --model and --micro-batch"; fi
  local shape desc; shape=$(model_shape "$model") || die "unknown model $model"
  desc=${shape##* }
  if [ -z "${LLMC_DIR:-}" ] || [ ! -f "$LLMC_DIR/train_gpt2.cu" ]; then die "LLMC_DIR='${LLMC_DIR:-}' has no train_gpt2.cu"; fi
  wait_for_build || exit 1
  # Shards: 4 micro-batches of training tokens (the loader wraps around), one of validation.
  local data=$LLMC_BUILD_DIR/data/$((mb * t))
  local ntok=$(( mb * t * 4 + 1 ))
  [ -f "$data/synthetic_val_000000.bin" ] || shards "$data" "$ntok" || die "could not write the shards"
  # A working folder without gpt2_tokenizer.bin (it only prints a warning:
  # sampling would print token ids, and -s 0 turns sampling off) or HellaSwag.
  local work; work=$(mktemp -d -t llmc-run.XXXXXX)
  # -x: warm-up + timed steps. -v: validation only at step 0 and the last,
  # where llm.c always does it (outside the timed steps), one batch (-m 1).
  # -s 0: no sampling. -n 0 and no -o: no checkpoints, no log files.
  # -r 0: no recomputation (the engine's default). -z 0: no ZeRO (one GPU).
  # -l 0: learning rate 0 keeps random weights finite however many steps.
  # -d: B*T*accum tokens, so grad_accum_steps = accum.
  local args=(-i "$data/synthetic_train_*.bin" -j "$data/synthetic_val_*.bin" -e "$desc"
    -b "$mb" -t "$t" -d $((mb * t * accum)) -x $((warmup + steps)) -r 0 -z 0
    -v 1000000 -m 1 -s 0 -n 0 -h 0 -l 0)
  echo "==== (cd $work && $BIN ${args[*]})"
  local rc
  (cd "$work" && "$BIN" "${args[@]}") 2>&1 | tee "$work/train.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || { echo "llmc_reference: train_gpt2cu exited $rc"; rm -rf "$work"; exit 1; }
  parse "$work/train.log" "$model" "$mb" "$t" "$accum" "$warmup" "$peak"
  rc=$?
  rm -rf "$work"
  return $rc
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  build) build_tracked ;;
  run) run "$@" ;;
  parse) parse "$@" ;;
  shards) shards "$@" ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed '$d'; [ "$cmd" = -h ] || [ "$cmd" = --help ]; exit $? ;;
esac
