#!/usr/bin/env bash
# One lent-GPU call for the Llama family (issue 32), run THERE: the CUDA ops
# the family added (RMSNorm, SwiGLU, RoPE, grouped-query attention; none has
# run on a GPU yet), the whole model on CUDA against the CPU, then
# qwen2.5-1.5b at T 1024 with 0.5M-token steps in the engine and in PyTorch,
# side by side. In order of value, each step bounded in time:
#
#   1. build       session.sh --stage build with only test_cuda_ops and
#                  train_step_bench (inventory.txt, build.log)
#   2. ops_llama   test_cuda_ops '*RmsNorm*:*Swiglu*:*Rope*:*GroupedQuery*'
#                  (attention: cuDNN where it takes the shape, as a run does)
#   3. ops_flash   ENGINE_ATTENTION=flash test_cuda_ops '*Attention*': the
#                  built-in FlashAttention-2 kernels, grouped-query and not
#   4. model       train_step_bench on llama-micro (GQA, q/k/v bias, untied
#                  head; fp32 only: its head size 8 has no bf16 kernel) and
#                  llama-demo: cpu fp32, cuda fp32, cuda bf16, the same init
#                  and tokens, 1 + 3 steps; the last step's loss side by side
#                  (cuda fp32 within 1e-4 of the CPU, bf16 within 2e-2)
#   5. ops_rest    the rest of test_cuda_ops (GPT-2's ops), if it can finish
#                  and leave the benchmarks their time
#   6. engine      train_step_bench qwen2.5-1.5b, T 1024, B 8 x 64 = 524,288
#                  tokens a step, bf16, causal attention FLOPs, 1 warm-up +
#                  LLAMA_STEPS timed steps (median), SM clock and power sampled
#   7. pytorch     examples/benchmarks/pytorch_llama_reference.py at the same
#                  shape: transformers' Qwen2ForCausalLM (the image has
#                  transformers; else its own PyTorch model), bf16 autocast
#                  over fp32 master weights, SDPA, torch.compile, fused AdamW;
#                  then the costliest CUDA kernels of one micro-batch. Out of
#                  memory: again at B 4 x 128; any other failure: again with
#                  --impl native (if the time allows)
#   8. engine_ops  train_step_bench qwen2.5-1.5b B 8 x 1 with the op timeline
#                  and the per-op breakdown, if time is left
#
#   run  carry: [".gpu-deps"]  timeout_s: 590
#        command: ENGINE_COMMIT=<hash> bash examples/gpu/llama_check.sh
#
# (.gpu-deps from examples/gpu/fetch_deps.sh, here, first.) The device tool
# returns at most 8 files from $OUT: every log goes to $OUT/logs, packed into
# $OUT/logs.tgz at the end; summary.txt, engine.log and pytorch.log also travel
# apart. On an H200 the call should take about 6-8 minutes (build ~1.5 min,
# op tests ~1-2, each 0.5M-token step ~10-12 s, torch.compile of the model
# ~1-2 min); expected, not measured.
#
#   LLAMA_BUDGET_S     seconds the whole script may take (default 540)
#   LLAMA_MODEL        the benchmark's preset (default qwen2.5-1.5b)
#   LLAMA_MICRO_BATCH  sequences per micro-batch (default 8)
#   LLAMA_BATCH_TOKENS tokens per optimizer step (default 524288 = 512 x 1024)
#   LLAMA_SEQ_LEN      T (default 1024)
#   LLAMA_STEPS        timed steps of each program (default 3; one untimed first)
#   LLAMA_PYTORCH_ARGS extra flags for pytorch_llama_reference.py (e.g. --impl native, --no-compile)
#   ENGINE_BUILD_DIR   build folder (default build-gpu, as session.sh; a warm
#                      machine's build is reused, the build step then takes seconds)
#   LLAMA_BUILD=0      skip step 1 and use the build folder as it is
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUDGET=${LLAMA_BUDGET_S:-540}
START=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
FINAL=${OUT:-$(mktemp -d -t llama-check.XXXXXX)}
export OUT=$FINAL/logs
mkdir -p "$OUT"
BUILD=${ENGINE_BUILD_DIR:-$ROOT/build-gpu}
MODEL=${LLAMA_MODEL:-qwen2.5-1.5b}
MB=${LLAMA_MICRO_BATCH:-8}
SEQ=${LLAMA_SEQ_LEN:-1024}
BATCH_TOKENS=${LLAMA_BATCH_TOKENS:-524288}
STEPS=${LLAMA_STEPS:-3}
PYTORCH_ARGS=${LLAMA_PYTORCH_ARGS:-}
PYTHON=${PYTHON:-python3}
SUMMARY=$OUT/llama_summary.txt
OPS=$BUILD/tests/engine/cuda/test_cuda_ops
BENCH=$BUILD/examples/train_step_bench
REFERENCE=$ROOT/examples/benchmarks/pytorch_llama_reference.py
LLAMA_FILTER='*RmsNorm*:*Swiglu*:*Rope*:*GroupedQuery*'
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} PYTHONUNBUFFERED=1
failures=0
: >"$SUMMARY"

if [ $(( BATCH_TOKENS % (MB * SEQ) )) -ne 0 ]; then
  echo "llama_check: LLAMA_BATCH_TOKENS=$BATCH_TOKENS is not a multiple of B*T = $((MB * SEQ))" >&2
  exit 64
fi
ACCUM=$(( BATCH_TOKENS / (MB * SEQ) ))

pack() {
  for f in llama_summary.txt engine.log pytorch.log pytorch_half.log pytorch_native.log; do
    [ -f "$OUT/$f" ] && cp "$OUT/$f" "$FINAL/"
  done
  [ -f "$FINAL/llama_summary.txt" ] && mv "$FINAL/llama_summary.txt" "$FINAL/summary.txt"
  tar -czf "$FINAL/logs.tgz" -C "$FINAL" logs && rm -rf "$FINAL/logs"
}
trap pack EXIT

note() { echo "$*" | tee -a "$SUMMARY"; }
# cap WANTED: a step's time limit, cut to what the budget has left (keeping 10 s).
cap() { local l=$(( $(left) - 10 )); [ "$1" -lt "$l" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
# step NAME SECONDS COMMAND...: runs it under a time limit into $OUT/NAME.log;
# skipped when under 15 s are left.
step() {
  local name=$1 limit=$2 t0 rc
  t0=$(date +%s)
  shift 2
  if [ "$(left)" -lt 15 ]; then
    note "---- $name: skipped, out of time (LLAMA_BUDGET_S=$BUDGET)"
    failures=$((failures + 1))
    return 1
  fi
  timeout "$(cap "$limit")" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "---- $name: rc $rc, $(( $(date +%s) - t0 )) s ($name.log)"
  [ $rc -ne 0 ] && failures=$((failures + 1))
  return $rc
}
# gtest_verdict NAME: one summary line from a googletest log: cases passed,
# failed, skipped (a skip on a GPU machine is a failure: the engine saw no
# GPU), the failed ones, and every shape cuDNN declined.
gtest_verdict() {
  local log=$OUT/$1.log ok failed skipped
  # Each case's own result line ends with its time, "(12 ms)"; the list at the end does not.
  ok=$(grep -cE '^\[       OK \] .*\([0-9]+ ms\)$' "$log")
  failed=$(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$log")
  skipped=$(grep -c '^\[  SKIPPED \]' "$log")
  [ "$skipped" -gt 0 ] && failures=$((failures + 1))
  note "$(printf '%-10s %3d passed, %d failed, %d skipped%s%s' "$1" "$ok" "$failed" "$skipped" \
    "$([ "$skipped" -gt 0 ] && echo ' (a skip means the tests saw no GPU)')" \
    "$(grep -q 'PASSED' "$log" || echo ' (no PASSED line: cut short or crashed?)')")"
  grep -E '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$log" | head -10 | sed 's/^/    /' | tee -a "$SUMMARY"
  grep -E 'Failure|out of tolerance|worst' "$log" | head -12 | sed 's/^/    /'
  grep -o 'cuDNN declined [^;]*' "$log" | sort -u | head -8 | sed 's/^/    /' | tee -a "$SUMMARY"
}
# Clock and power samples of the timed runs (LOG_DIR, gpu_index for gpu_samples.sh).
LOG_DIR=$OUT gpu_index=${CUDA_VISIBLE_DEVICES%%,*}
# shellcheck source=examples/benchmarks/gpu_samples.sh
source "$ROOT/examples/benchmarks/gpu_samples.sh"

note "==== llama_check.sh $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit ${ENGINE_COMMIT:-unknown}, budget $BUDGET s"
command -v nvidia-smi >/dev/null &&
  note "$(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
note "$("$PYTHON" -c 'import torch, sys
try:
    import transformers; t = "transformers " + transformers.__version__
except Exception as e:
    t = "no transformers (" + type(e).__name__ + "): the native model will run"
print("torch", torch.__version__, "|", t)' 2>&1 | tail -1)"

# 1. Build: only the two targets (session.sh: carried dependencies, CUDA, sm_90).
t0=$(date +%s)
if [ "${LLAMA_BUILD:-1}" != 0 ]; then
  ENGINE_BUILD_TARGETS="test_cuda_ops train_step_bench" SESSION_BUDGET_S=$(cap 300) \
    bash "$ROOT/examples/gpu/session.sh" --stage build
  note "build: rc $?, $(( $(date +%s) - t0 )) s"
fi
if [ ! -x "$OPS" ] || [ ! -x "$BENCH" ]; then
  note "!!!! no $OPS or $BENCH: build.log, then stop"
  exit 1
fi

# 2-3. The Llama family's op tests, then every attention test on the built-in kernels.
step ops_llama 120 "$OPS" --gtest_filter="$LLAMA_FILTER"
gtest_verdict ops_llama
step ops_flash 120 env ENGINE_ATTENTION=flash "$OPS" --gtest_filter='*Attention*'
gtest_verdict ops_flash

# 4. The whole model: the engine on the CPU and on CUDA from the same weights
# and tokens (train_step_bench initialises with seed 1 and reuses one batch).
model_run() {  # model_run NAME MODEL DEVICE PRECISION
  step "model_$1" 90 env OMP_NUM_THREADS=$(( $(nproc) < 8 ? $(nproc) : 8 )) "$BENCH" --model "$2" --device "$3" \
    --precision "$4" --micro-batch 4 --seq-len 64 --steps 3 --profile false --timeline false
  grep -E 'GFLOP/s|error' "$OUT/model_$1.log" | head -3
}
loss_of() { sed -nE 's/.*\| loss ([-0-9.naif]+).*/\1/p' "$OUT/model_$1.log" | tail -1; }
for m in llama-micro llama-demo; do
  model_run "${m}_cpu" "$m" cpu fp32
  model_run "${m}_cuda_fp32" "$m" cuda fp32
  [ "$m" = llama-demo ] && model_run "${m}_cuda_bf16" "$m" cuda bf16
  ref=$(loss_of "${m}_cpu")
  for run in cuda_fp32 cuda_bf16; do
    [ -f "$OUT/model_${m}_$run.log" ] || continue
    got=$(loss_of "${m}_$run")
    limit=$([ $run = cuda_bf16 ] && echo 2e-2 || echo 1e-4)
    verdict=$(awk -v r="$ref" -v g="$got" -v lim="$limit" 'BEGIN {
      if (r == "" || g == "") { print "FAILED (no loss)"; exit }
      d = (g - r) / r; if (d < 0) d = -d
      printf "%s rel %.2e (limit %s)", (d <= lim && g == g) ? "ok" : "FAILED", d, lim }')
    note "$(printf 'model      %-12s %-9s loss %s against the cpu %s: %s' "$m" "$run" "${got:-?}" "${ref:-?}" "$verdict")"
    case $verdict in FAILED*) failures=$((failures + 1)) ;; esac
  done
done

# 5. The rest of test_cuda_ops (the attention tests with the default choice,
# cuDNN, among them), unless the benchmarks would lose their time (they need
# about 280 s).
rest=$(( $(left) - 290 ))
if [ "$rest" -ge 30 ]; then
  step ops_rest "$rest" "$OPS" --gtest_filter="-$LLAMA_FILTER"
  gtest_verdict ops_rest
else
  note "ops_rest   skipped: $(left) s left, the benchmarks need ~280"
fi

# 6. The engine at the benchmark's shape.
echo "==== engine $MODEL B=$MB x$ACCUM T=$SEQ ($(left) s left)"
gpu_samples_start engine
step engine "$(( $(left) > 200 ? 150 : $(left) - 60 ))" "$BENCH" --device cuda --model "$MODEL" --seq-len "$SEQ" \
  --micro-batch "$MB" --grad-accum "$ACCUM" --steps "$STEPS" --attention-flops causal --profile false --timeline false
gpu_samples_stop
grep -vE '^\s*$' "$OUT/engine.log" | head -12
engine_line=$(grep -E 'GFLOP/s' "$OUT/engine.log" | tail -1)
e_ms=$(sed -nE 's/.*\| step +([0-9.]+) ms.*/\1/p' <<<"$engine_line")
e_tok=$(sed -nE 's/.*\| +([0-9.]+) tok\/s.*/\1/p' <<<"$engine_line")
e_gf=$(sed -nE 's/.*\| +([0-9.]+) GFLOP\/s.*/\1/p' <<<"$engine_line")
e_mfu=$(sed -nE 's/.*\| MFU ([0-9.]+%).*/\1/p' <<<"$engine_line")
e_mem=$(sed -nE 's/.*\| peak memory ([0-9.]+ [KMGT]?i?B).*/\1/p' <<<"$engine_line")
e_loss=$(sed -nE 's/.*\| loss ([-0-9.naif]+).*/\1/p' <<<"$engine_line")

# 7. PyTorch at the same shape; out of memory: half the micro-batch; any other
# failure: this file's own model.
pytorch_run() {  # pytorch_run NAME B [extra flags]
  local name=$1 b=$2
  shift 2
  gpu_samples_start "$name"
  # shellcheck disable=SC2086  # PYTORCH_ARGS is a list of flags
  step "$name" "$(( $(left) - 30 ))" "$PYTHON" "$REFERENCE" --model "$MODEL" --seq-len "$SEQ" --micro-batch "$b" \
    --batch-tokens "$BATCH_TOKENS" --steps "$STEPS" --warmup-steps 1 --kernels 12 $PYTORCH_ARGS "$@"
  gpu_samples_stop
  grep -E '^(device|impl|model|setup|warning|note|warm-up|step|kernels|attention kernels)|^    |Error|error' \
    "$OUT/$name.log" | tail -30
}
echo "==== pytorch $MODEL B=$MB x$ACCUM T=$SEQ ($(left) s left)"
pytorch_run pytorch "$MB"
p_name=pytorch
if ! grep -q '^RESULT ' "$OUT/pytorch.log"; then
  if grep -qiE 'out of memory|OutOfMemoryError' "$OUT/pytorch.log" && [ $((MB / 2)) -ge 1 ] && [ "$(left)" -gt 120 ]; then
    note "pytorch    out of memory at B $MB: again at B $((MB / 2))"
    p_name=pytorch_half
    pytorch_run "$p_name" "$((MB / 2))"
  elif [ "$(left)" -gt 120 ] && ! grep -q '^impl: native' "$OUT/pytorch.log"; then
    note "pytorch    failed ($(grep -E 'Error|error' "$OUT/pytorch.log" | tail -1 | cut -c1-160)): again with --impl native"
    p_name=pytorch_native
    pytorch_run "$p_name" "$MB" --impl native
  fi
fi
p_line=$(grep -E '^RESULT ' "$OUT/$p_name.log" 2>/dev/null | tail -1)
field() { sed -nE "s/.* $1=([^ ]+).*/\1/p" <<<"$p_line"; }

# 8. Where the engine's micro-batch goes, op by op (one micro-batch a step).
if [ "$(left)" -gt 45 ]; then
  step engine_ops 40 "$BENCH" --device cuda --model "$MODEL" --seq-len "$SEQ" --micro-batch "$MB" --grad-accum 1 \
    --steps 3 --attention-flops causal --profile true --timeline true
fi

# ---- summary ----------------------------------------------------------------
note ""
note "==== $MODEL T=$SEQ, $BATCH_TOKENS tokens a step, median of $STEPS steps; MFU = model FLOPs (model/flops.cpp's Llama"
note "     count, causal attention: 6*B*s*(l*(h*(H+2KV)d + h^2 + 3hF + s*h) + h*Vp)) / step time / peak"
if [ -n "$e_ms" ]; then
  note "$(printf 'engine     B=%-6s %9s ms %9s tok/s %8.1f TFLOP/s  MFU %s  peak memory %s  loss %s' "${MB}x$ACCUM" \
    "$e_ms" "$e_tok" "$(awk -v g="$e_gf" 'BEGIN { print g / 1000 }')" "${e_mfu:-n/a}" "${e_mem:-?}" "${e_loss:-?}")"
else
  note "engine     no result line (engine.log)"
  failures=$((failures + 1))
fi
if [ -n "$p_line" ]; then
  note "$(printf 'pytorch    B=%-6s %9s ms %9s tok/s %8s TFLOP/s  MFU %s  max allocated %s GiB  loss %s  (impl %s, compile %s)' \
    "$(field B)x$(field grad_accum)" "$(field step_ms)" "$(field tok_s)" "$(field tflops)" \
    "$(awk -v u="$(field mfu)" 'BEGIN { printf (u == "nan") ? "n/a" : "%.1f%%", 100 * u }')" "$(field max_alloc_gib)" \
    "$(field loss)" "$(field impl)" "$(field compile)")"
  grep -E '^attention kernels' "$OUT/$p_name.log" | tail -1 | sed 's/^/           pytorch /' | tee -a "$SUMMARY"
else
  note "pytorch    no RESULT line ($p_name.log)"
  failures=$((failures + 1))
fi
if [ -n "$e_tok" ] && [ -n "$p_line" ]; then
  note "$(awk -v e="$e_tok" -v p="$(field tok_s)" 'BEGIN { printf "ratio      engine / pytorch %.2fx tok/s", (p > 0) ? e / p : 0 }')"
fi
for run in engine "$p_name"; do
  [ -f "$OUT/${run}_gpu_samples.csv" ] && note "$(gpu_samples_summary "$run")"
done
grep -h -o 'cuDNN declined [^;]*' "$OUT/engine.log" 2>/dev/null | sort -u | sed 's/^/engine     /' | tee -a "$SUMMARY"
note "==== llama_check.sh: $failures step(s) failed, $(( $(date +%s) - START )) s"
[ $failures -eq 0 ]
