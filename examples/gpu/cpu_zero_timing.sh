#!/usr/bin/env bash
# Issue 33's last CPU measurement, run on a machine with the cores for it (the
# lent GPU machines have 16; this project's VM has 2, where four or eight
# ranks share them and only the bytes could be checked): the engine's ZeRO-0,
# -2 and -3 runs at dp 2, 4 and 8, one core per rank, timed, against the
# planner's prediction from a calibration taken at the same rank count on
# the same machine. Nothing here uses the GPU (CUDA_VISIBLE_DEVICES is
# emptied), so it suits the end of a lease or any multi-core Linux box.
#
#   1. build      session.sh --stage build with train, prepare and plan only
#                 (CPU_ZERO_BUILD=0 skips it: a warm machine's build, or a
#                 CPU build named by ENGINE_BUILD_DIR)
#   2. data       the fortunes corpus tokenised once (FORTUNES_DIR; the
#                 carried one on a lent machine)
#   3. for np in CPU_ZERO_NP (default "2 4 8"):
#        calibrate  mpirun -np $np plan --calibrate at gpt-demo's width
#        sweep      examples/scaling/sweep.sh with layouts_cpu_zero_np$np.txt
#                   (dp = np; ZeRO 0/2/3 at 1 and 4 micro-batches), 6 steps,
#                   --n-layer 16, the plan from that calibration
#      summary: per layout the measured step and exposed comm beside the
#      predicted step; results.md and plan.json (predicted exposed comm) in the logs
#
#   run  carry: [".gpu-deps"]  timeout_s: 480
#        command: ENGINE_COMMIT=<hash> bash examples/gpu/cpu_zero_timing.sh
#
# $OUT: summary.txt and logs.tgz (every sweep's report, logs and cluster
# file). Expected 5-7 min on 16 cores (build ~2-3 min; not measured).
#
#   CPU_ZERO_BUDGET_S  seconds in all (default 460)
#   CPU_ZERO_NP        rank counts (default "2 4 8")
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUDGET=${CPU_ZERO_BUDGET_S:-460}
# shellcheck source=examples/gpu/budget.sh
source "$ROOT/examples/gpu/budget.sh"
FINAL=${OUT:-$(mktemp -d -t cpu-zero.XXXXXX)}
LOGS=$FINAL/logs
mkdir -p "$LOGS"
BUILD=${ENGINE_BUILD_DIR:-$ROOT/build-gpu}
SUMMARY=$FINAL/summary.txt
: >"$SUMMARY"
trap 'tar -czf "$FINAL/logs.tgz" -C "$FINAL" logs && rm -rf "$LOGS"' EXIT
export CUDA_VISIBLE_DEVICES=""

note "==== cpu_zero_timing.sh $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit ${ENGINE_COMMIT:-unknown}, $(nproc) cores, budget $BUDGET s"
if [ "${CPU_ZERO_BUILD:-1}" = 1 ]; then
  mkdir -p "$LOGS/build"
  OUT=$LOGS/build ENGINE_BUILD_TARGETS="train prepare plan" SESSION_BUDGET_S=$(( $(left) < 240 ? $(left) : 240 )) \
    bash "$ROOT/examples/gpu/session.sh" --stage build >/dev/null 2>&1
  note "build: rc $?, $(( $(date +%s) - START )) s"
fi
# shellcheck source=examples/gpu/carried_env.sh
source "$ROOT/examples/gpu/carried_env.sh"
carried_env || P=/usr
FORTUNES=${FORTUNES_DIR:-$P/share/games/fortunes}
for tool in train prepare plan; do
  [ -x "$BUILD/launch/$tool" ] || { note "!!!! $BUILD/launch/$tool is missing: nothing measured"; exit 1; }
done
[ -d "$FORTUNES" ] || { note "!!!! no fortunes corpus at $FORTUNES (FORTUNES_DIR): nothing measured"; exit 1; }

# The same corpus as sweep.sh makes for itself (its first eight fortune files).
mkdir -p "$LOGS/data"
find -L "$FORTUNES" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort | head -8 | xargs cat >"$LOGS/data/text.txt"
"$BUILD/launch/prepare" --input "$LOGS/data/text.txt" --output-dir "$LOGS/data" --name sweep >/dev/null ||
  { note "!!!! prepare failed"; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export MPIRUN="mpirun --bind-to core -x OMP_NUM_THREADS -x CUDA_VISIBLE_DEVICES -x LD_LIBRARY_PATH"
failures=0
for np in ${CPU_ZERO_NP:-2 4 8}; do
  if [ "$(left)" -lt 60 ]; then
    note "---- np $np: skipped, out of time"
    failures=$((failures + 1))
    continue
  fi
  t0=$(date +%s)
  timeout 90 $MPIRUN -np "$np" "$BUILD/launch/plan" --calibrate --out "$LOGS/cluster_np$np.json" --model gpt-demo \
    --micro-batch 16 --seq-len 128 >"$LOGS/calibrate_np$np.log" 2>&1 ||
    { note "---- np $np: calibration failed (calibrate_np$np.log)"; failures=$((failures + 1)); continue; }
  sweep_limit=$(( $(left) - 10 ))
  if [ "$sweep_limit" -lt 30 ]; then
    note "---- np $np: sweep skipped, out of time"
    failures=$((failures + 1))
    continue
  fi
  timeout "$sweep_limit" bash "$ROOT/examples/scaling/sweep.sh" --build "$BUILD" \
    --layouts "$ROOT/examples/scaling/layouts_cpu_zero_np$np.txt" --np "$np" --out "$LOGS/sweep_np$np" --steps 6 \
    --data "$LOGS/data/sweep_train_*.bin" --cluster "$LOGS/cluster_np$np.json" --no-plots -- --n-layer 16 --device cpu \
    >"$LOGS/sweep_np$np.log" 2>&1
  rc=$?
  note "---- np $np: rc $rc, $(( $(date +%s) - t0 )) s"
  [ $rc -ne 0 ] && failures=$((failures + 1))
  # Per layout: measured step and exposed comm, predicted step (the report's
  # table, results.md); then the ranking's agreement.
  awk -F'|' '$2 ~ /dp[0-9]+_z/ { printf "    %-12s step %10s  exposed comm %9s  predicted step %10s\n", $2, $9, $13, $20 }' \
    "$LOGS/sweep_np$np/results.md" 2>/dev/null | tee -a "$SUMMARY"
  grep -aE "Spearman|Planner's pick" "$LOGS/sweep_np$np.log" | sed 's/^/    /' | tee -a "$SUMMARY"
done
note "==== cpu_zero_timing.sh: $failures failed part(s), $(( $(date +%s) - START )) s"
exit $(( failures > 0 ? 1 : 0 ))
