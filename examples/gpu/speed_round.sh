#!/usr/bin/env bash
# One lent-GPU call for the speed and FP8 issues (34, 35), run THERE: what a
# 15-minute lease can afford after its machine's start, in order of value.
#
#   1. session.sh --stage build,cuda,bench: the build (llm.c's in the
#      background), every CUDA op test (matmul_forward_add, the GEMM search,
#      the FP8 casts and GEMM among them), then gpu_bench.sh: the engine at
#      gpt2-124m B 16 and gpt2-1558m B 16 x 32 (0.5M-token steps) with the
#      asynchronous op timeline of one extra step, op_bench at B 16, and
#      llm.c at the same shapes, with SM clock and power samples of each run.
#   2. fp8_gemm_bench at gpt2-1558m B 16: FP8 against the engine's bf16 GEMMs.
#   3. The engine at gpt2-1558m B 16 x 4 three ways, one after the other:
#      as it is, with ENGINE_GEMM_SEARCH=16, with ENGINE_LT_WORKSPACE_MIB=256.
#
#   run  carry: [".gpu-deps", ".peers"]  timeout_s: 590
#        command: ENGINE_COMMIT=<hash> bash examples/gpu/speed_round.sh
#
# The device tool returns at most 8 files from $OUT: every log goes to
# $OUT/logs and is packed into $OUT/logs.tgz at the end (summary.txt and
# bench.log also travel apart). ROUND_BUDGET_S (default 560) bounds it all.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUDGET=${ROUND_BUDGET_S:-560}
START=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
FINAL=${OUT:?OUT is unset: run this on the lent GPU machine, where the device tool sets it}
export OUT=$FINAL/logs
mkdir -p "$OUT"
BUILD=${ENGINE_BUILD_DIR:-$ROOT/build-gpu}

pack() {
  for f in summary.txt bench.log; do [ -f "$OUT/$f" ] && cp "$OUT/$f" "$FINAL/"; done
  tar -czf "$FINAL/logs.tgz" -C "$FINAL" logs && rm -rf "$FINAL/logs"
}
trap pack EXIT

echo "==== speed_round.sh $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit ${ENGINE_COMMIT:-unknown}, budget $BUDGET s"

# 1. Build, CUDA op tests, benchmark. The last two steps keep ~100 s.
SESSION_BUDGET_S=$(( BUDGET - 100 )) CUDA_STAGE_S=150 RUN_PYTORCH=0 MB_124M=16 MB_1558M=16 ACCUM_1558M=32 \
  STEPS=3 WARMUP_STEPS=1 ENGINE_PROFILE=false LLMC_DIR=${LLMC_DIR:-$ROOT/.peers/llm.c} \
  bash "$ROOT/examples/gpu/session.sh" --stage build,cuda,bench

# 2. FP8 GEMMs against bf16 at gpt2-1558m's block shapes.
if [ "$(left)" -gt 60 ] && [ -x "$BUILD/examples/fp8_gemm_bench" ]; then
  echo "==== fp8_gemm_bench gpt2-1558m B 16 ($(left) s left)"
  timeout 60 "$BUILD/examples/fp8_gemm_bench" --model gpt2-1558m --micro-batch 16 --seq-len 1024 \
    >"$OUT/fp8_bench.log" 2>&1
  echo "rc $?"
  grep -E '^(block|total|summary)|block scaling|speed-up' "$OUT/fp8_bench.log" | head -20
fi

# 3. GEMM algorithm search and a larger cuBLASLt workspace against the
# default, at 65,536-token steps (the 0.5M-token step's micro-batches, fewer of them).
bench=$BUILD/examples/train_step_bench
for variant in default ENGINE_GEMM_SEARCH=16 ENGINE_LT_WORKSPACE_MIB=256; do
  [ "$(left)" -gt 25 ] || { echo "==== variant $variant: skipped ($(left) s left)"; continue; }
  echo "==== variant $variant"
  envs=()
  [ "$variant" != default ] && envs=("$variant")
  timeout $(( $(left) - 10 )) env ${envs[@]+"${envs[@]}"} "$bench" --device cuda --model gpt2-1558m --seq-len 1024 \
    --micro-batch 16 --grad-accum 4 --steps 3 --profile false --timeline false 2>&1 | tee -a "$OUT/variants.log" |
    grep -E 'GFLOP/s|error'
done
echo "==== speed_round.sh done in $(( $(date +%s) - START )) s"
