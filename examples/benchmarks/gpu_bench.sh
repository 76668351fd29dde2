#!/usr/bin/env bash
# The engine against PyTorch and llm.c on one GPU, in one run: train_step_bench
# (CUDA, bf16), then examples/benchmarks/pytorch_reference.py (bf16 autocast,
# flash attention, torch.compile, fused AdamW), then llm.c's train_gpt2cu
# (examples/benchmarks/llmc_reference.sh; bf16, cuDNN attention) at the same
# shapes, one process after the other so each has the whole GPU, then a
# side-by-side summary with the GPU name, date and commit, ready to copy into
# RESULTS.md. nvidia-smi samples the SM clock, power and throttle reasons
# during every timed run (gpu_samples.sh): one "clocks" line per run.
#
#   examples/benchmarks/gpu_bench.sh
#   MB_124M=32 STEPS=30 examples/benchmarks/gpu_bench.sh
#
# Environment (all optional):
#   ENGINE_BUILD_DIR  engine build folder (default: ./build at the repo root);
#                     built here (target train_step_bench) if the binary is missing
#   STEPS             timed steps of each run (default 20)
#   WARMUP_STEPS      PyTorch's untimed steps, compilation included (default 3;
#                     the engine always does one)
#   SEQ_LEN           tokens per sequence (default 1024, the presets' maximum)
#   MB_124M, MB_1558M micro-batches (defaults 16 and 4, reasoning below)
#   ACCUM_124M, ACCUM_1558M  micro-batches per optimizer step (gradient
#                     accumulation; default 1). Real runs step on ~0.5M tokens:
#                     MB_1558M=8 ACCUM_1558M=64 STEPS=5 (a step of ~11 s on an H100)
#   PEAK_TFLOPS       peak dense bf16 TFLOP/s for MFU (default: by GPU name,
#                     H100/H200 989, as engine/device.cpp)
#   PYTHON            interpreter that has torch (default python3)
#   PYTORCH_ARGS      extra flags for pytorch_reference.py (e.g. --no-compile)
#   ENGINE_PROFILE    true/false: the engine's per-op breakdown of one extra,
#                     untimed step (default true)
#   RUN_ENGINE, RUN_PYTORCH, RUN_LLMC  set to 0 to skip one side
#   LLMC_DIR          llm.c's folder (e.g. $PWD/.peers/llm.c, never part of the
#                     project); unset or missing: the llm.c side is skipped
#   LLMC_WARMUP_STEPS llm.c's untimed first steps (default 1, as the engine's one)
#   LLMC_MODELS       the cases llm.c runs (default "gpt2-124m gpt2-1558m"): llm.c
#                     draws random weights on one CPU core, ~30-90 s for gpt2-1558m
#   GPU_BENCH_DEADLINE  epoch seconds when the caller stops this script
#                     (session.sh sets it): an llm.c case is skipped when less than
#                     LLMC_MIN_LEFT_S (default 120) is left
#   LLMC_BUILD_DIR    where llm.c is built (default $ENGINE_BUILD_DIR/llmc);
#                     session.sh starts that build at its build stage, and this
#                     script starts it (in the background) if it did not
#   RUN_OP_BENCH      1 (default): after the engine's steps, op_bench times each op
#                     of gpt2-1558m's block at MB_1558M against its bandwidth or
#                     FLOP floor (examples/benchmarks/op_bench.cpp); 0 skips it
#   LOG_DIR           where the full outputs go (default: a new temporary folder)
#   ENGINE_COMMIT     the commit to print where .git is absent (a lent GPU machine)
#   ENGINE_GEMM_SEARCH N: the engine times the cuBLASLt heuristic's first N
#                     algorithms for each GEMM shape and keeps the fastest
#                     (engine/cuda/gemm_search.h; default: the heuristic's first)
#
# Micro-batches, chosen to fit an 80 GB H100 in both implementations with room
# to spare (PyTorch's caching allocator and torch.compile's workspaces are the
# least predictable part), at T = 1024, without activation recomputation:
#  - gpt2-124m, B=16: parameters, gradients and AdamW state are ~2 GB. Stored
#    activations are ~32-34 bytes x C per token per layer in bf16 (the engine
#    keeps 16 values of width C, transformer_block.cpp; Korthikanti et al. 2022
#    give 34 for PyTorch, less the s^2 term with flash attention): ~5 GB for
#    16K tokens. The logits dominate the rest: 16K x 50304 in bf16 is 1.6 GB,
#    and PyTorch also holds fp32 copies for the loss and its gradient (~7 GB).
#    Total ~15 GB; B=16 is the batch llm.c uses for this model.
#  - gpt2-1558m, B=4: 1.56 B parameters make fp32 master weights, gradients and
#    AdamW m, v ~25 GB, plus a bf16 working copy (~3 GB). Activations at
#    ~34 x 1600 bytes x 48 layers = 2.6 MB per token are ~11 GB for 4K tokens;
#    logits ~2 GB. Total ~40-45 GB, well under 80 GB. B=8 (~55 GB) probably fits
#    too; try MB_1558M=8 once B=4 has run.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export ENGINE_BUILD_DIR=${ENGINE_BUILD_DIR:-$ROOT/build}
BENCH=$ENGINE_BUILD_DIR/examples/train_step_bench
REFERENCE=$ROOT/examples/benchmarks/pytorch_reference.py
STEPS=${STEPS:-20}
WARMUP_STEPS=${WARMUP_STEPS:-3}
SEQ_LEN=${SEQ_LEN:-1024}
MB_124M=${MB_124M:-16}
MB_1558M=${MB_1558M:-4}
PEAK_TFLOPS=${PEAK_TFLOPS:-}
PYTHON=${PYTHON:-python3}
PYTORCH_ARGS=${PYTORCH_ARGS:-}
ENGINE_PROFILE=${ENGINE_PROFILE:-true}
RUN_ENGINE=${RUN_ENGINE:-1}
RUN_PYTORCH=${RUN_PYTORCH:-1}
RUN_OP_BENCH=${RUN_OP_BENCH:-1}
RUN_LLMC=${RUN_LLMC:-1}
LLMC_DIR=${LLMC_DIR:-}
LLMC_WARMUP_STEPS=${LLMC_WARMUP_STEPS:-1}
LLMC_MODELS=${LLMC_MODELS:-gpt2-124m gpt2-1558m}
LLMC=$ROOT/examples/benchmarks/llmc_reference.sh
LOG_DIR=${LOG_DIR:-}
ACCUM_124M=${ACCUM_124M:-1}
ACCUM_1558M=${ACCUM_1558M:-1}
CASES=("gpt2-124m $MB_124M $ACCUM_124M" "gpt2-1558m $MB_1558M $ACCUM_1558M")

# Both programs use the first visible device (cuda_set_device(0), "cuda:0");
# pinning CUDA_VISIBLE_DEVICES makes that the same physical GPU for both.
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
gpu_index=${CUDA_VISIBLE_DEVICES%%,*}

# ---- checks, before anything long runs ---------------------------------------
command -v nvidia-smi >/dev/null || { echo "gpu_bench: nvidia-smi not found: is this a GPU machine?" >&2; exit 1; }
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "$gpu_index")
gpu_info=$(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader -i "$gpu_index")

if [ "$RUN_PYTORCH" != 0 ]; then
  if ! torch_info=$("$PYTHON" -c 'import torch
assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) on {torch.cuda.get_device_name(0)}")' 2>&1); then
    echo "gpu_bench: '$PYTHON' cannot import torch with a usable GPU, so the PyTorch reference cannot run:" >&2
    echo "  ${torch_info##*$'\n'}" >&2
    echo "  (set PYTHON to an interpreter that has torch, or RUN_PYTORCH=0 to time only the engine)" >&2
    exit 1
  fi
fi

if [ "$RUN_ENGINE" != 0 ]; then
  if [ ! -x "$BENCH" ]; then
    echo "gpu_bench: $BENCH not found; building it (CUDA is used when nvcc is found)"
    # shellcheck disable=SC1091  # sourced at run time from the repo root
    source "$ROOT/launch/setup_env.sh"
    engine_build train_step_bench op_bench || {
      echo "gpu_bench: the engine did not build in $ENGINE_BUILD_DIR (it needs CMake, Ninja, nvcc, CLI11," \
           "nlohmann-json and OpenBLAS: launch/setup_env.sh lists the packages)" >&2
      exit 1
    }
  fi
  # A build configured where nvcc was not found runs on the CPU only; say so
  # now rather than after the PyTorch runs.
  # (ldd's output is captured first: under pipefail, grep -q closing the pipe
  # early could fail the pipeline with SIGPIPE.)
  libs=$(ldd "$BENCH" 2>/dev/null || true)
  if [ -n "$libs" ] && ! grep -qE "libcudart|libcublas" <<<"$libs"; then
    echo "gpu_bench: $BENCH is not linked with CUDA (configured without nvcc?); reconfigure" \
         "$ENGINE_BUILD_DIR on a machine with nvcc (rm -rf it, or set ENGINE_BUILD_DIR to a new folder)" >&2
    exit 1
  fi
fi

# Peak as engine/device.cpp's table (first substring match wins).
if [ -z "$PEAK_TFLOPS" ]; then
  case "$gpu_name" in
    *H200* | *H100*) PEAK_TFLOPS=989 ;;  # GH200 too
    *A100*) PEAK_TFLOPS=312 ;;
    *A10G*) PEAK_TFLOPS=125 ;;
    *L40S*) PEAK_TFLOPS=362 ;;
    *L4*) PEAK_TFLOPS=121 ;;
    *B200*) PEAK_TFLOPS=2250 ;;
    *) PEAK_TFLOPS=0 ;;
  esac
fi
peak_args=()
[ "$PEAK_TFLOPS" != 0 ] && peak_args=(--peak-tflops "$PEAK_TFLOPS")

LOG_DIR=${LOG_DIR:-$(mktemp -d -t gpu_bench.XXXXXX)}
mkdir -p "$LOG_DIR"
# shellcheck source=examples/benchmarks/gpu_samples.sh
source "$ROOT/examples/benchmarks/gpu_samples.sh"
clocks=()

# llm.c: its build (one nvcc compile, 1-3 min) goes on in the background
# while the engine and PyTorch run, unless session.sh already started it
# (llmc_reference.sh run waits for it; "up to date" when it is).
llmc_note=""
if [ "$RUN_LLMC" != 0 ]; then
  if [ -z "$LLMC_DIR" ] || [ ! -f "$LLMC_DIR/train_gpt2.cu" ]; then
    llmc_note="llm.c: skipped (LLMC_DIR='$LLMC_DIR' is unset or has no train_gpt2.cu)"
    RUN_LLMC=0
  else
    llmc_build_dir=${LLMC_BUILD_DIR:-$ENGINE_BUILD_DIR/llmc}
    llmc_pid=$(cat "$llmc_build_dir/build.pid" 2>/dev/null || true)
    if [ -z "$llmc_pid" ] || [ -f "$llmc_build_dir/build.rc" ] || ! kill -0 "$llmc_pid" 2>/dev/null; then
      LLMC_DIR=$LLMC_DIR bash "$LLMC" build >"$LOG_DIR/llmc_build.log" 2>&1 &
    fi
  fi
fi

echo "==== gpu_bench: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "GPU:     $gpu_info (CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES)"
# A GPU machine gets the working tree without .git: ENGINE_COMMIT names the commit there.
commit=${ENGINE_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
# (Only without ENGINE_COMMIT: there the copy's .git, if any, is not this
# checkout's, and on 2026-11-23 it made a clean commit look modified.)
if [ -z "${ENGINE_COMMIT:-}" ] && git -C "$ROOT" rev-parse HEAD >/dev/null 2>&1 &&
   ! git -C "$ROOT" diff --quiet HEAD 2>/dev/null; then
  commit="$commit (+ uncommitted changes)"
fi
echo "commit:  $commit"
if [ -n "${ENGINE_GEMM_SEARCH:-}" ] && [ "$ENGINE_GEMM_SEARCH" != 1 ]; then
  echo "engine GEMM algorithms: the fastest of the cuBLASLt heuristic's first $ENGINE_GEMM_SEARCH (ENGINE_GEMM_SEARCH)"
else
  echo "engine GEMM algorithms: the cuBLASLt heuristic's first"
fi
echo "engine:  $BENCH"
[ "$RUN_PYTORCH" != 0 ] && echo "pytorch: $torch_info"
[ "$RUN_LLMC" != 0 ] && echo "llm.c:   $LLMC_DIR (train_gpt2cu, bf16, cuDNN attention, -r 0 -z 0; first $LLMC_WARMUP_STEPS step(s) untimed)"
[ -n "$llmc_note" ] && echo "$llmc_note"
if [ "$RUN_LLMC" != 0 ] && [ ! -f "$llmc_build_dir/build.rc" ]; then
  echo "llm.c:   its build runs in the background (one nvcc on one CPU core) while the first runs go on"
fi
echo "shapes:  T=$SEQ_LEN; gpt2-124m B=$MB_124M x$ACCUM_124M, gpt2-1558m B=$MB_1558M x$ACCUM_1558M micro-batches a step; $STEPS timed steps; peak $PEAK_TFLOPS TFLOP/s; logs in $LOG_DIR"
echo "MFU:     model FLOPs/step = 72*B*s*l*h^2*(1 + s/(6h) + Vp/(12lh)) (model/flops.h) / (median step time x peak)"

failed=0
summary=()
declare -A tok_s_of=()  # "impl model" -> tok/s, for the ratios

print_summary() {
  # Ratios: engine tok/s over each peer's, per model.
  for c in "${CASES[@]}"; do
    read -r model _ <<<"$c"
    for peer in pytorch llm.c; do
      e=${tok_s_of["engine $model"]:-} p=${tok_s_of["$peer $model"]:-}
      if [ -n "$e" ] && [ -n "$p" ]; then
        summary+=("$(awk -v m="$model" -v peer="$peer" -v e="$e" -v p="$p" \
          'BEGIN { printf "ratio    %-10s engine / %-7s %5.2fx tok/s", m, peer, (p > 0) ? e / p : 0 }')")
      fi
    done
  done
  echo
  echo "==== summary: $gpu_name, $(date -u '+%Y-%m-%d'), commit $commit, T=$SEQ_LEN, median of $STEPS steps"
  if [ ${#summary[@]} -gt 0 ]; then printf '%s\n' "${summary[@]}"; fi
  if [ ${#clocks[@]} -gt 0 ]; then printf '%s\n' "${clocks[@]}"; fi
  if [ -n "$llmc_note" ]; then echo "$llmc_note"; fi
}
# Cut short by a time limit (session.sh's `timeout` sends SIGTERM to the whole
# process group): still print what was measured.
trap 'gpu_samples_stop; summary+=("gpu_bench: stopped by SIGTERM (time limit?): the runs above are all there is"); print_summary; exit 124' TERM

# ---- engine --------------------------------------------------------------------
if [ "$RUN_ENGINE" != 0 ]; then
  for c in "${CASES[@]}"; do
    read -r model mb accum <<<"$c"
    log=$LOG_DIR/engine_$model.log
    echo
    echo "---- engine $model B=$mb x$accum T=$SEQ_LEN"
    gpu_samples_start "engine_$model"
    if "$BENCH" --device cuda --model "$model" --seq-len "$SEQ_LEN" --micro-batch "$mb" --grad-accum "$accum" \
      --steps "$STEPS" --profile "$ENGINE_PROFILE" 2>&1 | tee "$log"; then
      gpu_samples_stop
      # The result line: "... | step   12.3 ms (median of 20) | 123456 tok/s | 123456.78 GFLOP/s | ..."
      line=$(grep -E 'GFLOP/s' "$log" | head -1 || true)
      ms=$(sed -nE 's/.*\| step +([0-9.]+) ms.*/\1/p' <<<"$line")
      toks=$(sed -nE 's/.*\| +([0-9.]+) tok\/s.*/\1/p' <<<"$line")
      gflops=$(sed -nE 's/.*\| +([0-9.]+) GFLOP\/s.*/\1/p' <<<"$line")
      peak=$(sed -nE 's/.*\| peak memory ([0-9.]+ [KMGT]?i?B).*/\1/p' <<<"$line")
      if [ -n "$ms" ] && [ -n "$gflops" ]; then
        tok_s_of["engine $model"]=$toks
        summary+=("$(awk -v m="$model" -v b="${mb}x$accum" -v ms="$ms" -v t="$toks" -v g="$gflops" -v p="$PEAK_TFLOPS" \
          -v mem="${peak:-?}" \
          'BEGIN { printf "engine   %-10s B=%-6s %9.1f ms %10.0f tok/s %7.1f TFLOP/s  MFU %s  (peak memory %s)", m, b, ms, t,
                   g / 1000, (p > 0) ? sprintf("%5.1f%%", 100 * g / 1000 / p) : "  n/a", mem }')")
      else
        summary+=("engine   $model B=$mb: no result line found in $log")
      fi
    else
      gpu_samples_stop
      failed=1
      summary+=("engine   $model B=$mb: FAILED (see $log)")
    fi
    clocks+=("$(gpu_samples_summary "engine_$model")")
  done
fi

# ---- the engine's ops against their floors --------------------------------------
OP_BENCH=$ENGINE_BUILD_DIR/examples/op_bench
if [ "$RUN_ENGINE" != 0 ] && [ "$RUN_OP_BENCH" != 0 ]; then
  echo
  echo "---- op_bench gpt2-1558m B=$MB_1558M T=$SEQ_LEN"
  if [ -x "$OP_BENCH" ]; then
    "$OP_BENCH" --model gpt2-1558m --micro-batch "$MB_1558M" --seq-len "$SEQ_LEN" \
      ${peak_args[@]+"${peak_args[@]}"} 2>&1 | tee "$LOG_DIR/op_bench.log" || summary+=("op_bench: FAILED (see $LOG_DIR/op_bench.log)")
  else
    summary+=("op_bench: $OP_BENCH not built (cmake --build $ENGINE_BUILD_DIR --target op_bench)")
  fi
fi

# ---- PyTorch reference --------------------------------------------------------
if [ "$RUN_PYTORCH" != 0 ]; then
  for c in "${CASES[@]}"; do
    read -r model mb accum <<<"$c"
    log=$LOG_DIR/pytorch_$model.log
    echo
    echo "---- pytorch $model B=$mb x$accum T=$SEQ_LEN"
    gpu_samples_start "pytorch_$model"
    # shellcheck disable=SC2086  # PYTORCH_ARGS is a list of flags
    if "$PYTHON" "$REFERENCE" --model "$model" --micro-batch "$mb" --grad-accum "$accum" --seq-len "$SEQ_LEN" --steps "$STEPS" \
      --warmup-steps "$WARMUP_STEPS" ${peak_args[@]+"${peak_args[@]}"} $PYTORCH_ARGS 2>&1 | tee "$log"; then
      gpu_samples_stop
      line=$(grep -E '^RESULT ' "$log" | tail -1 || true)
      field() { sed -nE "s/.* $1=([^ ]+).*/\1/p" <<<"$line"; }
      if [ -n "$line" ]; then
        tok_s_of["pytorch $model"]=$(field tok_s)
        summary+=("$(awk -v m="$model" -v b="${mb}x$accum" -v ms="$(field step_ms)" -v t="$(field tok_s)" \
          -v tf="$(field tflops)" -v u="$(field mfu)" -v mem="$(field max_alloc_gib)" \
          'BEGIN { printf "pytorch  %-10s B=%-6s %9.1f ms %10.0f tok/s %7.1f TFLOP/s  MFU %s  (max allocated %s GiB)",
                   m, b, ms, t, tf, (u == "nan") ? "  n/a" : sprintf("%5.1f%%", 100 * u), mem }')")
      else
        summary+=("pytorch  $model B=$mb: no RESULT line found in $log")
      fi
    else
      gpu_samples_stop
      failed=1
      summary+=("pytorch  $model B=$mb: FAILED (see $log)")
    fi
    clocks+=("$(gpu_samples_summary "pytorch_$model")")
  done
fi

# ---- llm.c ------------------------------------------------------------------------
# The same shapes: -b B -t T -d B*T*accum (so accum micro-batches a step), from
# random weights (-e d12 / d48), no recomputation (-r 0), ZeRO 0. Its first
# LLMC_WARMUP_STEPS steps are dropped; the median of the next STEPS is taken.
# Its FLOP/s and MFU here use the engine's formula; llm.c's own MFU (6N + 6LCT
# per token, its own peak table) is printed beside it, labelled as its own.
if [ "$RUN_LLMC" != 0 ]; then
  for c in "${CASES[@]}"; do
    read -r model mb accum <<<"$c"
    case " $LLMC_MODELS " in *" $model "*) ;; *) continue ;; esac
    # session.sh says when its stage ends (GPU_BENCH_DEADLINE, epoch seconds):
    # a case that cannot finish is skipped, not cut off mid-run.
    left=$(( ${GPU_BENCH_DEADLINE:-0} - $(date +%s) ))
    if [ "${GPU_BENCH_DEADLINE:-0}" -gt 0 ] && [ "$left" -lt "${LLMC_MIN_LEFT_S:-120}" ]; then
      summary+=("llm.c    $model B=$mb: skipped, $left s left of the stage (< LLMC_MIN_LEFT_S=${LLMC_MIN_LEFT_S:-120})")
      continue
    fi
    log=$LOG_DIR/llmc_$model.log
    echo
    echo "---- llm.c $model B=$mb x$accum T=$SEQ_LEN"
    gpu_samples_start "llmc_$model"
    if LLMC_DIR=$LLMC_DIR bash "$LLMC" run --model "$model" --micro-batch "$mb" --grad-accum "$accum" --seq-len "$SEQ_LEN" \
      --steps "$STEPS" --warmup-steps "$LLMC_WARMUP_STEPS" --peak-tflops "$PEAK_TFLOPS" 2>&1 | tee "$log"; then
      gpu_samples_stop
      line=$(grep -E '^RESULT ' "$log" | tail -1 || true)
      field() { sed -nE "s/.* $1=([^ ]+).*/\1/p" <<<"$line"; }
      if [ -n "$line" ]; then
        tok_s_of["llm.c $model"]=$(field tok_s)
        summary+=("$(awk -v m="$model" -v b="${mb}x$accum" -v ms="$(field step_ms)" -v t="$(field tok_s)" \
          -v tf="$(field tflops)" -v u="$(field mfu)" -v own="$(field llmc_mfu)" -v cnt="$(field llmc_count_mfu)" \
          'BEGIN { printf "llm.c    %-10s B=%-6s %9.1f ms %10.0f tok/s %7.1f TFLOP/s  MFU %s  (llm.c'"'"'s own MFU: %s; its 6N+6LCT count over our peak: %s)",
                   m, b, ms, t, tf, (u == "nan") ? "  n/a" : sprintf("%5.1f%%", 100 * u),
                   (own == "nan") ? "n/a, GPU not in its table" : own, (cnt == "nan") ? "n/a" : cnt }')")
        if grep -q 'Fell back to cudaMallocManaged' "$log"; then
          summary+=("llm.c    $model: WARNING: it fell back to managed memory (out of device memory): slow")
        fi
      else
        summary+=("llm.c    $model B=$mb: no RESULT line found in $log")
      fi
    else
      gpu_samples_stop
      failed=1
      summary+=("llm.c    $model B=$mb: FAILED (see $log)")
    fi
    clocks+=("$(gpu_samples_summary "llmc_$model")")
  done
fi

trap - TERM
print_summary
exit "$failed"
