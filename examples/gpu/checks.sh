#!/usr/bin/env bash
# Run THERE, through `session.sh --stage checks` (after a build): the GPU
# bring-up checks of issue 9 beyond the op tests, the smoke runs and the
# benchmark, each bounded in time, all output on stdout (session.sh writes it
# to $OUT/checks.log):
#
#   1. gpt2-124m trains on the demo corpus in bf16: the loss falls, a sample is printed
#   2. recomputation overhead at gpt2-350m, T 1024, B 8: none, selective, full
#   3. memory per rank under ZeRO 0-3: gpt2-124m, dp 2 sharing the GPU (MPI communicator)
#   4. bad input: no visible GPU; two NCCL ranks on one GPU; a model that does not fit
#   5. the multi-rank parity suites on CUDA tensors (ENGINE_TEST_DEVICE=cuda, fp32)
#   6. `plan --calibrate` on this GPU at each model's own matmul shapes, and the
#      planner's step and memory from that file against the engine's measured ones
#   7. the scaling sweep on this GPU (examples/scaling/sweep.sh, unchanged): 12
#      one-rank layouts of gpt2-124m, ranked by the planner from section 6's
#      gpt2-124m calibration (else clusters/h100_single.json)
#
#   ENGINE_BUILD_DIR=build-gpu CHECKS_BUDGET_S=300 bash examples/gpu/checks.sh
#   CHECKS_SECTIONS=3,5 ...      only those sections (default: all)
#   CHECKS_PARITY_FILTER=...     ctest -R for section 5 (default: every parity suite)
#   CHECKS_PLAN_MODELS="gpt2-1558m 8"  section 6's "model micro-batch" pairs, ';'-separated
#                                (default: gpt2-124m 16; gpt2-350m 8; gpt2-1558m 8)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${ENGINE_BUILD_DIR:-$ROOT/build-gpu}
BUDGET=${CHECKS_BUDGET_S:-300}
START=$(date +%s)
TRAIN=$BUILD/launch/train
FORTUNES=${FORTUNES_DIR:-/usr/share/games/fortunes}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
cap() { local l=$(( $(left) - 5 )); [ "$1" -lt "$l" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
section() { echo; echo "==== $* ($(( $(date +%s) - START )) s)"; }
failures=0
fail() { echo "!!!! $*"; failures=$((failures + 1)); }
want() { [[ ",${CHECKS_SECTIONS:-1,2,3,4,5,6,7}," == *",$1,"* ]]; }

w=$(mktemp -d -t engine-checks.XXXXXX)
trap 'rm -rf "$w"' EXIT
find -L "$FORTUNES" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -exec cat {} + >"$w/text.txt"
"$BUILD/launch/prepare" --input "$w/text.txt" --output-dir "$w/data" --name fortunes --val-fraction 0.05 >/dev/null ||
  { echo "checks: prepare failed"; exit 1; }
DATA=(--train-data "$w/data/fortunes_train_*.bin")
QUIET=(--checkpoint-interval 0 --sample-tokens 0 --overwrite)

# stats LOG: median step time after the first three steps, and the last peak memory.
stats() {
  python3 - "$1" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [r for r in rows if "step_time_s" in r]
t = sorted(r["step_time_s"] for r in steps[3:]) or [float("nan")]
peak = max((r.get("peak_memory_bytes") or 0) for r in steps) if steps else 0
print(f"{1000 * t[len(t) // 2]:.1f} {peak / 2**30:.2f} {steps[0]['loss'] if steps else 'nan'} {steps[-1]['loss'] if steps else 'nan'}")
EOF
}

# ---- 1 --------------------------------------------------------------------------
if want 1; then
section "1. gpt2-124m on the fortunes corpus, bf16, 300 steps of 16 x 128 tokens, then a sample"
timeout "$(cap 120)" "$TRAIN" --config "$ROOT/examples/configs/demo.json" --model gpt2-124m --device cuda \
  --precision bf16 --steps 300 --warmup-steps 30 --lr 6e-4 --val-data "$w/data/fortunes_val_*.bin" \
  --val-interval 100 --log-interval 50 --checkpoint-interval 0 --sample-tokens 150 --run-dir "$w/g124" \
  --overwrite "${DATA[@]}" 2>&1 | tail -25 || fail "gpt2-124m run failed"
read -r ms peak first last <<<"$(stats "$w/g124/metrics.jsonl" 2>/dev/null || echo nan nan nan nan)"
echo "gpt2-124m: loss $first -> $last, median step $ms ms"
python3 -c "import sys; sys.exit(0 if float('$last') < float('$first') - 1.0 else 1)" 2>/dev/null ||
  fail "gpt2-124m: the loss did not fall by more than 1 ($first -> $last)"
fi

# ---- 2 --------------------------------------------------------------------------
if want 2; then
section "2. recomputation at gpt2-350m, T 1024, B 8, bf16, 15 steps each"
echo "| recompute | median step | vs none | peak memory |"
echo "|---|---|---|---|"
base=""
for r in none selective full; do
  timeout "$(cap 90)" "$TRAIN" --model gpt2-350m --device cuda --precision bf16 --micro-batch 8 --seq-len 1024 \
    --batch-tokens 8192 --steps 15 --recompute "$r" --log-file "$w/rc_$r.jsonl" --run-dir "$w/rc_$r" \
    "${QUIET[@]}" "${DATA[@]}" >"$w/rc_$r.out" 2>&1 || { fail "recompute $r failed: $(tail -1 "$w/rc_$r.out")"; continue; }
  read -r ms peak _ _ <<<"$(stats "$w/rc_$r.jsonl")"
  [ "$r" = none ] && base=$ms
  echo "| $r | $ms ms | $(python3 -c "b = '$base'; print(f'{$ms / float(b) - 1:+.1%}' if b else 'n/a (none failed)')") | $peak GiB |"
done
fi

# ---- 3 --------------------------------------------------------------------------
if want 3; then
section "3. ZeRO 0-3, gpt2-124m, dp 2 on one GPU (--comm mpi), B 4 x T 1024 per rank, 8 steps"
echo "| ZeRO | start-up memory plan (rank 0) | measured peak | median step | final loss |"
echo "|---|---|---|---|---|"
for z in 0 1 2 3; do
  timeout "$(cap 90)" mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$TRAIN" --model gpt2-124m --device cuda \
    --precision bf16 --comm mpi --dp 2 --zero "$z" --micro-batch 4 --seq-len 1024 --batch-tokens 8192 --steps 8 \
    --log-file "$w/z$z.jsonl" --run-dir "$w/z$z" "${QUIET[@]}" "${DATA[@]}" >"$w/z$z.out" 2>&1 ||
    { fail "zero $z failed: $(grep -a -m1 '^error' "$w/z$z.out" || tail -3 "$w/z$z.out" | paste -sd' ')"; continue; }
  read -r ms peak _ last <<<"$(stats "$w/z$z.jsonl")"
  echo "| $z | $(grep -a -m1 '^memory ' "$w/z$z.out" | cut -c8-) | $peak GiB | $ms ms | $last |"
done
fi

# ---- 4 --------------------------------------------------------------------------
if want 4; then
section "4. bad input: each must exit non-zero with a one-line error, in time"
expect_refusal() {  # expect_refusal NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  local t0=$(date +%s) rc
  timeout "$(cap "$secs")" "$@" >"$w/bad.out" 2>&1
  rc=$?
  echo "-- $name: exit $rc after $(( $(date +%s) - t0 )) s"
  grep -a -m3 -iE 'error' "$w/bad.out" | cut -c1-300
  # A refusal: the engine's exit codes (launch/resilience/exit_codes.h: 1, or 64-78 for bad
  # input), never a signal (>= 124: a timeout, a crash) or success, and its
  # "error: " line.
  if [ $rc -eq 0 ] || [ $rc -ge 124 ] || ! grep -aq '^error: ' "$w/bad.out"; then
    fail "$name: exit $rc (expected a refusal with an 'error: ' line)"
  fi
}
expect_refusal "--device cuda with no visible GPU" 60 env CUDA_VISIBLE_DEVICES= "$TRAIN" --model gpt-demo \
  --device cuda --micro-batch 8 --seq-len 128 --batch-tokens 1024 --steps 2 --run-dir "$w/bad1" "${QUIET[@]}" \
  "${DATA[@]}"
expect_refusal "two ranks on one GPU under NCCL" 90 mpirun --oversubscribe -np 2 "$TRAIN" --model gpt-demo \
  --device cuda --comm nccl --dp 2 --micro-batch 8 --seq-len 128 --batch-tokens 2048 --steps 2 \
  --run-dir "$w/bad2" "${QUIET[@]}" "${DATA[@]}"
expect_refusal "gpt2-1558m at B 256 x T 1024 (does not fit in 80 GB)" 60 "$TRAIN" --model gpt2-1558m \
  --device cuda --micro-batch 256 --seq-len 1024 --batch-tokens 262144 --steps 2 --run-dir "$w/bad3" \
  "${QUIET[@]}" "${DATA[@]}"
fi

# ---- 5 --------------------------------------------------------------------------
if want 5; then
section "5. parity suites on CUDA tensors (ENGINE_TEST_DEVICE=cuda: fp32, ranks sharing the GPU over MPI)"
if [ "$(left)" -gt 30 ]; then
  ENGINE_TEST_DEVICE=cuda timeout "$(cap 400)" ctest --test-dir "$BUILD" -L mpi --timeout 240 \
    -R "${CHECKS_PARITY_FILTER:-^(test_parity|test_parity_recompute|test_parity_interleaved|test_parity_zero_bubble|test_parity_zero_bubble_v|test_zero|test_onebit_adam|test_validation_layouts)_np}" \
    --output-on-failure >"$w/parity.log" 2>&1
  rc=$?
  # A failure's own lines too (gtest prints an exception's text on the line after "Failure").
  grep -aE -A2 'Test +#|tests passed|tests failed|Failure|Expected|Which is|error:|\[  FAILED' "$w/parity.log" |
    grep -av '^\[ *OK\|^\[ RUN' | head -80
  [ -n "${OUT:-}" ] && tail -c 4000000 "$w/parity.log" >"$OUT/parity.log"
  [ $rc -eq 0 ] || fail "parity suites on CUDA: ctest exit $rc"
else
  fail "parity suites on CUDA: no time left"
fi
fi

# ---- 6 --------------------------------------------------------------------------
if want 6; then
section "6. plan --calibrate at each model's shapes; the planner against the engine (bf16, T 1024, no recompute, 10 steps)"
PLAN=$BUILD/launch/plan
echo "| model, micro-batch | calibrated GEMM rate | copy bandwidth | predicted step: calibrated / h100_single.json | measured step | measured / calibrated | predicted memory | measured peak |"
echo "|---|---|---|---|---|---|---|---|"
IFS=';' read -r -a PLAN_SPECS <<<"${CHECKS_PLAN_MODELS:-gpt2-124m 16;gpt2-350m 8;gpt2-1558m 8}"
for spec in "${PLAN_SPECS[@]}"; do
  read -r model mb <<<"$spec"
  cal=$w/cal_$model.json
  timeout "$(cap 60)" mpirun --oversubscribe -np 1 "$PLAN" --calibrate --model "$model" --micro-batch "$mb" \
    --seq-len 1024 --calibrate-seconds 0.5 --out "$cal" >"$w/cal_$model.out" 2>&1 ||
    { fail "plan --calibrate for $model failed: $(tail -2 "$w/cal_$model.out" | paste -sd' ')"; continue; }
  grep -a '^calibrate' "$w/cal_$model.out" | cut -c1-400
  timeout "$(cap 120)" "$TRAIN" --model "$model" --device cuda --precision bf16 --micro-batch "$mb" --seq-len 1024 \
    --batch-tokens $((mb * 1024)) --steps 10 --log-file "$w/pl_$model.jsonl" --run-dir "$w/pl_$model" \
    "${QUIET[@]}" "${DATA[@]}" >"$w/pl_$model.out" 2>&1 || { fail "train $model failed: $(tail -1 "$w/pl_$model.out")"; continue; }
  read -r ms peak _ _ <<<"$(stats "$w/pl_$model.jsonl")"
  predict() {  # predict CLUSTER_FILE: "step_seconds memory_bytes" of the one layout
    "$PLAN" --model "$model" --seq-len 1024 --global-batch "$mb" --devices 1 --micro-batch "$mb" --zero 0 \
      --recompute none --cluster "$1" --json | python3 -c "import json,sys; p=json.load(sys.stdin)[0]; print(p['step_seconds'], p['memory_bytes_per_device'])"
  }
  read -r cal_s cal_mem <<<"$(predict "$cal")"
  read -r sheet_s _ <<<"$(predict "$ROOT/examples/scaling/clusters/h100_single.json")"
  python3 - "$cal" "$model" "$mb" "$cal_s" "$sheet_s" "$ms" "$cal_mem" "$peak" <<'PY'
import json, sys
cal, model, mb, cal_s, sheet_s, ms, mem, peak = sys.argv[1:]
c = json.load(open(cal))
rate = c["peak_tflops"] * c["gemm_efficiency"]
print(f"| {model}, {mb} | {rate:.0f} TFLOP/s ({c['gemm_efficiency']:.3f}) | {c['memory_bandwidth_gb_per_s']:.0f} GB/s "
      f"| {1e3 * float(cal_s):.1f} / {1e3 * float(sheet_s):.1f} ms | {ms} ms | {float(ms) / (1e3 * float(cal_s)):.2f} "
      f"| {int(mem) / 2**30:.2f} GiB | {peak} GiB |")
PY
done
fi

# ---- 7 --------------------------------------------------------------------------
if want 7; then
section "7. the scaling sweep on this GPU: 12 one-rank layouts of gpt2-124m (micro-batch 2-16 x recomputation), T 1024, 16 x 1024 tokens, 10 steps"
cluster=$w/cal_gpt2-124m.json
[ -f "$cluster" ] || cluster=$ROOT/examples/scaling/clusters/h100_single.json
echo "cluster file: $cluster"
# The GPU machine may lack matplotlib: then the tables only (sweep.sh refuses to start without it otherwise).
plots=()
python3 "$ROOT/examples/plot_python.py" >/dev/null 2>&1 || plots=(--no-plots)
timeout "$(cap 240)" bash "$ROOT/examples/scaling/sweep.sh" "${plots[@]}" --layouts "$ROOT/examples/scaling/layouts_gpu_np1.txt" \
  --np 1 --out "$w/sweep" --build "$BUILD" --model gpt2-124m --seq-len 1024 --batch-tokens 16384 --steps 10 \
  --data "$w/data/fortunes_train_*.bin" --cluster "$cluster" -- --device cuda --precision bf16 \
  --checkpoint-interval 0 --sample-tokens 0 >"$w/sweep.out" 2>&1 ||
  fail "sweep failed: $(tail -3 "$w/sweep.out" | paste -sd' ')"
grep -a '^sweep: .*runs in\|^report\|^fastest\|^  ' "$w/sweep.out" | cut -c1-300
# sweep.sh exits 0 whenever its report was written; a failed layout is a failed check here.
n_failed=$(grep -a -o '^sweep: [0-9]* runs in [0-9]* s, [0-9]* failed' "$w/sweep.out" | awk '{print $(NF-1)}')
[ "${n_failed:-x}" = 0 ] || fail "sweep: ${n_failed:-?} layout(s) failed: $(grep -a -m1 -A3 'FAILED' "$w/sweep.out" | paste -sd' ' | cut -c1-300)"
[ -f "$w/sweep/results.md" ] && cat "$w/sweep/results.md"
fi

section "checks done: $failures failure(s)"
[ $failures -eq 0 ]
