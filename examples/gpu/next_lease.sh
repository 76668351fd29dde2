#!/usr/bin/env bash
# The next lent GPU's one call, run THERE: what examples/gpu/README.md lists
# as left, in its order, with one build for all of it (a fresh machine pays a
# start and a build per call, and a lease is 15 minutes of device time):
#
#   1. build   session.sh --stage build with the targets of both rounds
#   2. double  the NCCL test double's first signal (issue 34, first in the
#              guide's order): the worker test and the communicator suite over
#              NCCL's stream protocol with four ranks on the GPU
#              (test_parallel_mpi '*ncclDouble*', 60 s at most; the parity
#              suites over it are nccl_double_check.sh's)
#   3. FP8     fp8_check.sh (issue 35): test_cuda_fp8 (casts, GEMM, the FP8
#              linear ops), fp8_gemm_bench, then --precision fp8 as a training
#              path (tokens/s against bf16, parity, losses, gradient cosines)
#   4. Llama   llama_check.sh with LLAMA_BUILD=0 (issue 32): the family's CUDA
#              ops, the model on CUDA against the CPU, qwen2.5-1.5b against
#              PyTorch, in the time left
#
#   run  carry: [".gpu-deps"]  timeout_s: 595
#        command: ENGINE_COMMIT=<hash> bash examples/gpu/next_lease.sh
#
# (.gpu-deps from examples/gpu/fetch_deps.sh, here, first.) $OUT gets six
# files, under the tool's eight: summary.txt (every verdict line),
# build.tgz (inventory and build log), fp8_check.txt and fp8_logs.tgz,
# double.txt, and llama.tgz (llama_check's output, its summary and its
# packed logs).
#
#   NEXT_BUDGET_S   seconds in all (default 580)
#   NEXT_FP8_S      seconds for step 3 (default 280; the GEMM-search variant of
#                   its benchmark is left out here)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUDGET=${NEXT_BUDGET_S:-580}
# shellcheck source=examples/gpu/budget.sh
source "$ROOT/examples/gpu/budget.sh"
FINAL=${OUT:-$(mktemp -d -t next-lease.XXXXXX)}
mkdir -p "$FINAL"
SUMMARY=$FINAL/summary.txt

note "==== next_lease.sh $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit ${ENGINE_COMMIT:-unknown}, budget $BUDGET s"

# 1. One build for both rounds, its logs packed apart.
t0=$(date +%s)
mkdir -p "$FINAL/build"
OUT=$FINAL/build ENGINE_BUILD_TARGETS="test_fp8_e4m3 test_cuda_fp8 fp8_gemm_bench train_step_bench fp8_gradient_check \
train prepare test_parity_fp8 test_cuda_ops test_parallel_mpi test_host_collective_worker" SESSION_BUDGET_S=$(( $(left) < 300 ? $(left) : 300 )) \
  bash "$ROOT/examples/gpu/session.sh" --stage build
note "build: rc $?, $(( $(date +%s) - t0 )) s"
tar -czf "$FINAL/build.tgz" -C "$FINAL" build && rm -rf "$FINAL/build"

# 2. The NCCL test double, briefly (issue 34 comes first; a minute at most):
# its worker, then the communicator suite over it at np 4.
t0=$(date +%s)
if [ "$(left)" -gt 300 ]; then
  (
    # shellcheck source=examples/gpu/carried_env.sh
    source "$ROOT/examples/gpu/carried_env.sh"
    carried_env || true
    B=${ENGINE_BUILD_DIR:-$ROOT/build-gpu}
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ENGINE_TEST_COMM=nccl-double OMP_NUM_THREADS=1
    run=(mpirun --oversubscribe -np 4 -x ENGINE_TEST_COMM -x OMP_NUM_THREADS -x LD_LIBRARY_PATH -x GTEST_COLOR=no)
    timeout 20 "${run[@]}" "$B/tests/parallel/test_host_collective_worker" >"$FINAL/double.txt" 2>&1
    echo "---- worker: rc $?" >>"$FINAL/double.txt"
    timeout 40 "${run[@]}" "$B/tests/parallel/test_parallel_mpi" --gtest_filter='*ncclDouble*' >>"$FINAL/double.txt" 2>&1
    echo "---- suite: rc $?" >>"$FINAL/double.txt"
  )
  note "double: $(( $(date +%s) - t0 )) s, $(grep -ac '^\[       OK \] .*ncclDouble' "$FINAL/double.txt") suite cases passed"
  grep -aE '^---- |^\[  FAILED  \]|Failure|error' "$FINAL/double.txt" | head -20 >>"$SUMMARY"
else
  note "double: skipped, out of time ($(left) s left)"
fi

# 3. FP8, bounded, its verdict lines kept.
t0=$(date +%s)
fp8_budget=${NEXT_FP8_S:-280}
[ "$(left)" -lt "$fp8_budget" ] && fp8_budget=$(( $(left) - 10 ))
if [ "$fp8_budget" -gt 30 ]; then
  OUT=$FINAL FP8_BUDGET_S=$fp8_budget FP8_SEARCH_BENCH=0 timeout $(( fp8_budget + 20 )) bash "$ROOT/examples/gpu/fp8_check.sh" \
    2>&1 | tee "$FINAL/fp8_check.txt"
  note "fp8_check: rc ${PIPESTATUS[0]}, $(( $(date +%s) - t0 )) s"
  grep -E '^(----|====|demo |loss:|!!!!)|tok/s|MFU|worst error|FAILED' "$FINAL/fp8_check.txt" | head -60 >>"$SUMMARY"
else
  note "fp8_check: skipped, out of time"
fi

# 4. Llama in the time left, on the same build.
t0=$(date +%s)
llama_budget=$(( $(left) - 10 ))
if [ "$llama_budget" -gt 60 ]; then
  mkdir -p "$FINAL/llama"
  OUT=$FINAL/llama LLAMA_BUILD=0 LLAMA_BUDGET_S=$llama_budget timeout $(( llama_budget + 20 )) \
    bash "$ROOT/examples/gpu/llama_check.sh" >"$FINAL/llama_check.txt" 2>&1
  note "llama_check: rc $?, $(( $(date +%s) - t0 )) s"
  tail -40 "$FINAL/llama_check.txt" >>"$SUMMARY"
  tar -czf "$FINAL/llama.tgz" -C "$FINAL" llama llama_check.txt && rm -rf "$FINAL/llama" "$FINAL/llama_check.txt"
else
  note "llama_check: skipped, out of time ($(left) s left)"
fi
note "==== next_lease.sh: $(( $(date +%s) - START )) s"
