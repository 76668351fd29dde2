#!/usr/bin/env bash
# Run THERE, after a build (issue 35, step 1: FP8 casts and GEMM, never run
# before): the CPU reference's test, the CUDA FP8 op test, and the FP8 against
# bf16 benchmark at gpt2-1558m, heuristic's first and searched. Each step is
# bounded in time; logs go to $OUT, verdicts and the key lines to stdout.
#
# One call on a fresh machine (builds only these targets, ~2-4 min on 16 cores):
#   export ENGINE_COMMIT=<hash>
#   ENGINE_BUILD_TARGETS="test_fp8_e4m3 test_cuda_fp8 fp8_gemm_bench" SESSION_BUDGET_S=300 \
#     bash examples/gpu/session.sh --stage build
#   FP8_BUDGET_S=200 bash examples/gpu/fp8_check.sh
#
#   ENGINE_BUILD_DIR   build folder (default build-gpu, as session.sh)
#   FP8_BUDGET_S       seconds this script may take (default 200)
#   FP8_MICRO_BATCH    the benchmark's micro-batch (default 16)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${ENGINE_BUILD_DIR:-$ROOT/build-gpu}
OUT=${OUT:-$(mktemp -d -t fp8-check.XXXXXX)}
mkdir -p "$OUT"
BUDGET=${FP8_BUDGET_S:-200}
MB=${FP8_MICRO_BATCH:-16}
START=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
cap() { local l=$(( $(left) - 5 )); [ "$1" -lt "$l" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
failures=0

# step NAME SECONDS COMMAND...: runs it under a time limit into $OUT/NAME.log.
step() {
  local name=$1 limit=$2 t0=$(date +%s) rc
  shift 2
  if [ "$(left)" -lt 15 ]; then
    echo "---- $name: skipped, out of time (FP8_BUDGET_S=$BUDGET)"
    failures=$((failures + 1))
    return 1
  fi
  timeout "$(cap "$limit")" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "---- $name: rc $rc, $(( $(date +%s) - t0 )) s ($OUT/$name.log)"
  [ $rc -ne 0 ] && failures=$((failures + 1))
  return $rc
}

echo "==== fp8_check.sh $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit ${ENGINE_COMMIT:-unknown}, build $BUILD"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader

step test_fp8_e4m3 30 "$BUILD/tests/engine/cpu/test_fp8_e4m3"
tail -1 "$OUT/test_fp8_e4m3.log"

step test_cuda_fp8 120 "$BUILD/tests/engine/cuda/test_cuda_fp8"
grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED) *\]|worst error|Failure|error:|block scaling|offered|fp8 forward' \
  "$OUT/test_cuda_fp8.log" | head -60

step bench_b${MB} 90 "$BUILD/examples/fp8_gemm_bench" --model gpt2-1558m --micro-batch "$MB" --seq-len 1024
cat "$OUT/bench_b${MB}.log"

step bench_b${MB}_search8 120 env ENGINE_GEMM_SEARCH=8 "$BUILD/examples/fp8_gemm_bench" --model gpt2-1558m \
  --micro-batch "$MB" --seq-len 1024
grep -E '^(layer|block|summary|  block)|GEMM|fastest' "$OUT/bench_b${MB}_search8.log"

echo "==== fp8_check.sh: $failures step(s) failed, $(( $(date +%s) - START )) s"
[ $failures -eq 0 ]
