#!/usr/bin/env bash
# One lent-GPU call for the NCCL test double (issue 34), run THERE: the
# multi-rank device paths through NcclCommunicator's stream-and-event protocol
# with every rank on the one GPU (parallel/nccl_host_double.h; none of it has
# run on a GPU yet). In order of value, each step bounded in time:
#
#   1. build      session.sh --stage build with only the targets below
#                 (skipped with NCCL_DOUBLE_BUILD=0: a warm machine's build)
#   2. suite_np4  the communicator suite over the double (test_parallel_mpi,
#                 '*ncclDouble*': every collective, point-to-point batches,
#                 overlapped handles, empty tensors; tp 2 x pp 2 and world)
#   3. suite_np8  the same at tp 2 x dp 2 x pp 2
#   4. parity     the training parity suites on CUDA tensors over the double
#                 (ENGINE_TEST_DEVICE=cuda ENGINE_TEST_COMM=nccl-double):
#                 test_parity, test_zero, test_parity_zero_bubble,
#                 test_onebit_adam; a failure here that the same suite does not
#                 show over MPI (examples/gpu/checks.sh section 5) is a missing
#                 stream dependency in the engine, or a fault of the double
#   5. no_delays  the first failing suite again without random delays
#                 (ENGINE_NCCL_DOUBLE_DELAY_US=0), which tells an ordering bug
#                 (passes without delays) from a transport bug (fails anyway)
#
#   run  carry: [".gpu-deps"]  timeout_s: 400
#        command: ENGINE_COMMIT=<hash> bash examples/gpu/nccl_double_check.sh
#
#   NCCL_DOUBLE_BUDGET_S   seconds in all (default 380)
#   NCCL_DOUBLE_BUILD=0    use ENGINE_BUILD_DIR (default build-gpu) as it is
#   ENGINE_NCCL_DOUBLE_DELAY_US, ENGINE_NCCL_DOUBLE_SEED: the double's delays
#
# $OUT: summary.txt and logs.tgz (every log). Expected 4-6 minutes (a
# build of these targets ~2-3 min; not measured).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUDGET=${NCCL_DOUBLE_BUDGET_S:-380}
# shellcheck source=examples/gpu/budget.sh
source "$ROOT/examples/gpu/budget.sh"
FINAL=${OUT:-$(mktemp -d -t nccl-double.XXXXXX)}
LOGS=$FINAL/logs
mkdir -p "$LOGS"
BUILD=${ENGINE_BUILD_DIR:-$ROOT/build-gpu}
SUMMARY=$FINAL/summary.txt
: >"$SUMMARY"
trap 'tar -czf "$FINAL/logs.tgz" -C "$FINAL" logs && rm -rf "$LOGS"' EXIT
failures=0

step() {
  local name=$1 limit=$2 t0=$(date +%s) rc
  shift 2
  if [ "$(left)" -lt 15 ]; then
    note "---- $name: skipped, out of time (NCCL_DOUBLE_BUDGET_S=$BUDGET)"
    failures=$((failures + 1))
    return 1
  fi
  timeout "$(cap "$limit")" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  note "---- $name: rc $rc, $(( $(date +%s) - t0 )) s"
  [ $rc -ne 0 ] && failures=$((failures + 1))
  return $rc
}
# gtest lines worth reading: verdicts, failures with their next lines.
verdicts() { grep -aE -A2 '^\[ *(FAILED|PASSED|SKIPPED) *\]|Failure|tests passed|tests failed|error' "$1" |
  grep -av '^\[ *OK\|^\[ RUN' | head -${2:-30} | tee -a "$SUMMARY"; }

note "==== nccl_double_check.sh $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit ${ENGINE_COMMIT:-unknown}, budget $BUDGET s"
command -v nvidia-smi >/dev/null &&
  note "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"

if [ "${NCCL_DOUBLE_BUILD:-1}" = 1 ]; then
  mkdir -p "$LOGS/build"
  OUT=$LOGS/build ENGINE_BUILD_TARGETS="test_parallel_mpi test_host_collective_worker test_parity test_zero \
test_parity_zero_bubble test_onebit_adam" SESSION_BUDGET_S=$(cap 240) \
    bash "$ROOT/examples/gpu/session.sh" --stage build
  note "build: rc $?"
fi
# shellcheck source=examples/gpu/carried_env.sh
source "$ROOT/examples/gpu/carried_env.sh"
carried_env || true

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ENGINE_TEST_COMM=nccl-double OMP_NUM_THREADS=1
MPIRUN=(mpirun --oversubscribe -x ENGINE_TEST_COMM -x OMP_NUM_THREADS -x LD_LIBRARY_PATH -x GTEST_COLOR=no)
[ -n "${ENGINE_NCCL_DOUBLE_DELAY_US:-}" ] && MPIRUN+=(-x ENGINE_NCCL_DOUBLE_DELAY_US)
[ -n "${ENGINE_NCCL_DOUBLE_SEED:-}" ] && MPIRUN+=(-x ENGINE_NCCL_DOUBLE_SEED)

step worker 60 "${MPIRUN[@]}" -np 4 "$BUILD/tests/parallel/test_host_collective_worker"
verdicts "$LOGS/worker.log" 10
for np in 4 8; do
  step suite_np$np 90 "${MPIRUN[@]}" -np $np "$BUILD/tests/parallel/test_parallel_mpi" --gtest_filter='*ncclDouble*'
  note "    $(grep -ac '^\[       OK \] .*ncclDouble' "$LOGS/suite_np$np.log") cases passed over the double"
  verdicts "$LOGS/suite_np$np.log" 30
done

first_failed=""
for suite in test_parity test_zero test_parity_zero_bubble test_onebit_adam; do
  np=8
  [ "$suite" = test_onebit_adam ] && np=4
  step "$suite" 150 env ENGINE_TEST_DEVICE=cuda "${MPIRUN[@]}" -x ENGINE_TEST_DEVICE -np $np \
    "$BUILD/tests/launch/run/$suite" || { [ -z "$first_failed" ] && first_failed=$suite:$np; }
  verdicts "$LOGS/$suite.log" 20
done

if [ -n "$first_failed" ]; then
  suite=${first_failed%%:*} np=${first_failed##*:}
  step no_delays 150 env ENGINE_TEST_DEVICE=cuda ENGINE_NCCL_DOUBLE_DELAY_US=0 "${MPIRUN[@]}" -x ENGINE_TEST_DEVICE \
    -x ENGINE_NCCL_DOUBLE_DELAY_US -np $np "$BUILD/tests/launch/run/$suite"
  verdicts "$LOGS/no_delays.log" 20
fi
note "==== nccl_double_check.sh: $failures failed step(s), $(( $(date +%s) - START )) s"
exit $(( failures > 0 ? 1 : 0 ))
