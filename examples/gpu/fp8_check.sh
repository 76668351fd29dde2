#!/usr/bin/env bash
# Run THERE, after a build (issue 35: FP8 casts, GEMM and training, never run
# before): the CPU reference's test, the CUDA FP8 op tests (casts, GEMM, the
# four linear-layer ops against the CPU's quantise-dequantise reference), the
# FP8 against bf16 GEMM benchmark at gpt2-1558m; then --precision fp8 as a
# training path, in order of value: train_step_bench's tokens/s, bf16 then
# fp8, at gpt2-1558m (T 1024) and gpt2-124m, and fp8 at gpt2-1558m with block
# scaling and without the GEMM epilogues (ENGINE_FP8_EPILOGUES=0); the FP8
# parity suite on the GPU (block scaling's layouts too);
# gpt-demo trained on the fortunes corpus in bf16 and fp8 side by side
# (losses); fp8_gradient_check's per-tensor gradient cosines at gpt2-124m; the
# fp8 op profile. Each step is bounded in time; logs go to $OUT/fp8_logs
# (packed at the end), verdicts and the key lines to stdout.
#
# One call on a fresh machine (builds only these targets, ~3-5 min on 16 cores):
#   export ENGINE_COMMIT=<hash>
#   ENGINE_BUILD_TARGETS="test_fp8_e4m3 test_cuda_fp8 fp8_gemm_bench train_step_bench fp8_gradient_check train prepare test_parity_fp8" \
#     SESSION_BUDGET_S=330 bash examples/gpu/session.sh --stage build
#   FP8_BUDGET_S=300 bash examples/gpu/fp8_check.sh
#
#   ENGINE_BUILD_DIR   build folder (default build-gpu, as session.sh)
#   FP8_BUDGET_S       seconds this script may take (default 200)
#   FP8_MICRO_BATCH    the benchmark's micro-batch (default 16)
#   FP8_TRAIN_STEPS    steps of the gpt-demo bf16/fp8 training pair (default 300; 0 skips it)
#   FP8_SECTIONS       which parts to run (default "ops,gemm,train")
#   FP8_SEARCH_BENCH   0 skips the GEMM-search variant of the benchmark (default 1)
#   FORTUNES_DIR       the corpus of the loss checks (default: the carried one, else /usr's)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${ENGINE_BUILD_DIR:-$ROOT/build-gpu}
# Every log goes to $OUT/fp8_logs, packed into $OUT/fp8_logs.tgz at the end
# (the device tool returns at most 8 files from $OUT); the key lines to stdout.
FINAL=${OUT:-$(mktemp -d -t fp8-check.XXXXXX)}
OUT=$FINAL/fp8_logs
mkdir -p "$OUT"
pack() { tar -czf "$FINAL/fp8_logs.tgz" -C "$FINAL" fp8_logs && rm -rf "$OUT"; }
trap pack EXIT
trap 'exit 124' TERM INT
BUDGET=${FP8_BUDGET_S:-200}
MB=${FP8_MICRO_BATCH:-16}
# shellcheck source=examples/gpu/budget.sh
source "$ROOT/examples/gpu/budget.sh"
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

# The dependencies session.sh unpacked (mpirun, libraries, the fortunes corpus), as its stages see them.
# shellcheck source=examples/gpu/carried_env.sh
source "$ROOT/examples/gpu/carried_env.sh"
carried_env || P=/usr
FORTUNES=${FORTUNES_DIR:-$P/share/games/fortunes}

SECTIONS=${FP8_SECTIONS:-ops,gemm,train}
want() { [[ ",$SECTIONS," == *",$1,"* ]]; }

if want ops; then
step test_fp8_e4m3 30 "$BUILD/tests/engine/cpu/test_fp8_e4m3"
tail -1 "$OUT/test_fp8_e4m3.log"

step test_cuda_fp8 120 "$BUILD/tests/engine/cuda/test_cuda_fp8"
grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED) *\]|worst error|Failure|error:|block scaling|offered|fp8 forward' \
  "$OUT/test_cuda_fp8.log" | head -60

fi

if want gemm; then
step bench_b${MB} 90 "$BUILD/examples/fp8_gemm_bench" --model gpt2-1558m --micro-batch "$MB" --seq-len 1024
cat "$OUT/bench_b${MB}.log"

if [ "${FP8_SEARCH_BENCH:-1}" = 1 ]; then
  step bench_b${MB}_search8 120 env ENGINE_GEMM_SEARCH=8 "$BUILD/examples/fp8_gemm_bench" --model gpt2-1558m \
    --micro-batch "$MB" --seq-len 1024
  grep -E '^(layer|block|summary|  block)|GEMM|fastest' "$OUT/bench_b${MB}_search8.log"
fi
fi

if want train; then
# In order of value, as the budget may cut the end: speed, parity, losses,
# gradients, the op profile.
# 1. Tokens/s of whole training steps, bf16 then fp8, the same harness as
# RESULTS.md's MFU figures (causal attention counted as half; MFU against the
# bf16 peak). Two micro-batches a step keep it short.
BENCH=("$BUILD/examples/train_step_bench" --device cuda --steps 3 --profile 0 --timeline 0 --attention-flops causal)
for model in gpt2-1558m gpt2-124m; do
  for precision in bf16 fp8; do
    step "step_${model}_${precision}" 90 "${BENCH[@]}" --model "$model" --micro-batch "$MB" --seq-len 1024 \
      --grad-accum 2 --precision "$precision"
    grep -E 'tok/s|MFU|error' "$OUT/step_${model}_${precision}.log" | head -4
  done
done
# Block scaling (--fp8-scaling block: 1 x 128 tiles, 128 x 128 weight blocks)
# at gpt2-1558m, beside per-tensor scaling's step above.
step step_gpt2-1558m_fp8_block 90 "${BENCH[@]}" --model gpt2-1558m --micro-batch "$MB" --seq-len 1024 \
  --grad-accum 2 --precision fp8 --fp8-scaling block
grep -E 'tok/s|MFU|error' "$OUT/step_gpt2-1558m_fp8_block.log" | head -4
# What the FP8 GEMMs' bias/GELU/residual epilogues save: the same fp8 step
# with an elementwise pass after each GEMM instead (fp8_gemm.h).
step step_gpt2-1558m_fp8_no_epilogues 90 env ENGINE_FP8_EPILOGUES=0 "${BENCH[@]}" --model gpt2-1558m \
  --micro-batch "$MB" --seq-len 1024 --grad-accum 2 --precision fp8
grep -E 'tok/s|MFU|error' "$OUT/step_gpt2-1558m_fp8_no_epilogues.log" | head -4

# 2. The FP8 parity suite on the GPU: four ranks sharing it over MPI (the
# suite widens its models to head size 32 there: the bf16 attention kernels
# take no head size 8).
step parity_fp8 150 env ENGINE_TEST_DEVICE=cuda OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  mpirun --oversubscribe -np 4 -x ENGINE_TEST_DEVICE -x OMP_NUM_THREADS=1 -x LD_LIBRARY_PATH -x GTEST_COLOR=no \
  "$BUILD/tests/launch/run/test_parity_fp8"
grep -E '^\[ *(OK|FAILED|PASSED|SKIPPED) *\]|Failure' "$OUT/parity_fp8.log" | sort | uniq -c | head -20

# 3. Losses: gpt-demo on the fortunes corpus, bf16 and fp8, the same seed and
# tokens; 4. per-tensor gradient cosines at gpt2-124m on the same corpus.
STEPS=${FP8_TRAIN_STEPS:-300}
if [ ! -d "$FORTUNES" ]; then
  echo "!!!! no fortunes corpus at $FORTUNES (FORTUNES_DIR): the loss and gradient checks did not run"
  failures=$((failures + 1))
elif [ "$STEPS" -gt 0 ]; then
  w=$(mktemp -d -t fp8-train.XXXXXX)
  find -L "$FORTUNES" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -exec cat {} + >"$w/text.txt"
  "$BUILD/launch/prepare" --input "$w/text.txt" --output-dir "$w/data" --name fortunes --val-fraction 0.05 >/dev/null
  for precision in bf16 fp8; do
    step "train_demo_${precision}" 120 "$BUILD/launch/train" --config "$ROOT/examples/configs/demo.json" \
      --train-data "$w/data/fortunes_train_*.bin" --val-data "$w/data/fortunes_val_*.bin" --steps "$STEPS" \
      --val-interval "$STEPS" --sample-tokens 0 --checkpoint-interval 0 --log-interval 50 --device cuda \
      --precision "$precision" --run-dir "$w/$precision" --overwrite
    cp "$w/$precision/metrics.jsonl" "$OUT/train_demo_${precision}.jsonl" 2>/dev/null
  done
  python3 - "$OUT/train_demo_bf16.jsonl" "$OUT/train_demo_fp8.jsonl" <<'PY'
import json, sys
runs = []
for path in sys.argv[1:]:
    try:
        rows = [json.loads(l) for l in open(path) if l.strip()]
    except OSError:
        rows = []
    runs.append(rows)
for name, rows in zip(["bf16", "fp8"], runs):
    steps = [r for r in rows if "loss" in r and "step" in r]
    vals = [r for r in rows if "val_loss" in r]
    t = sorted(r["step_time_s"] for r in steps[3:] if "step_time_s" in r) or [float("nan")]
    print(f"demo {name}: loss step 1 {steps[0]['loss'] if steps else 'nan'}, last {steps[-1]['loss'] if steps else 'nan'}, "
          f"val {vals[-1]['val_loss'] if vals else 'nan'}, median step {1000 * t[len(t) // 2]:.1f} ms")
PY
  step grad_check_gpt2-124m 90 "$BUILD/examples/fp8_gradient_check" --device cuda --model gpt2-124m \
    --data "$w/data/fortunes_train_*.bin" --micro-batch 8 --seq-len 1024 --warmup-steps 100 --lr 6e-4 --batches 2
  grep -E '^(loss|  h\.|  wte|  lm_head|  ln_f)|error' "$OUT/grad_check_gpt2-124m.log" | head -20
  rm -rf "$w"
fi

# 5. Where an fp8 micro-batch's time goes: casts, FP8 GEMMs, the bias/residual pass.
step profile_gpt2-1558m_fp8 90 "$BUILD/examples/train_step_bench" --device cuda --steps 1 --profile 1 --timeline 0 \
  --model gpt2-1558m --micro-batch "$MB" --seq-len 1024 --precision fp8
grep -E 'matmul|fp8|total' "$OUT/profile_gpt2-1558m_fp8.log" | head -20
fi

echo "==== fp8_check.sh: $failures step(s) failed, $(( $(date +%s) - START )) s"
[ $failures -eq 0 ]
