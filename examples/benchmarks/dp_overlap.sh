#!/usr/bin/env bash
# How much of a data-parallel step is communication that is NOT hidden behind
# compute, with and without the overlapped (bucketed, started during the last
# micro-batch's backward) gradient reduction. CPU backend, MPI communicator.
#
#   examples/benchmarks/dp_overlap.sh [RANKS] [STEPS]
#
# Prints, per mode, the mean time rank 0 waits for the reductions after
# backward ("exposed") and its share of the step, from the JSONL step log
# (exposed_comm_s, step_time_s), skipping the first two steps (warm-up).
set -euo pipefail
source "$(dirname "$0")/../../launch/setup_env.sh"
RANKS=${1:-2}
STEPS=${2:-12}
engine_bench_begin
work=$ENGINE_BENCH_WORK
# 8 layers of width 512: 25M parameters, ~100 MB of fp32 gradients per step.
model=(--model gpt-micro --n-layer 8 --n-embd 512 --n-head 8 --micro-batch 2 --seq-len 64)
for overlap in true false; do
  log="$work/overlap_$overlap.jsonl"
  mpirun --oversubscribe -np "$RANKS" "$ENGINE_BUILD_DIR/launch/train" "${model[@]}" --dp "$RANKS" \
    --steps "$STEPS" --device cpu --peak-tflops 1 --train-data "$work/bench_train_*.bin" \
    --overlap-grad-reduce "$overlap" --bucket-mb 4 --log-file "$log" >/dev/null
  awk -v mode="$overlap" '
    /"step_time_s"/ { match($0, /"exposed_comm_s":[0-9.e+-]+/); e = substr($0, RSTART + 17, RLENGTH - 17)
      match($0, /"step_time_s":[0-9.e+-]+/);    t = substr($0, RSTART + 14, RLENGTH - 14)
      if (NR > 2) { exposed += e; step += t; n++ } }
    END { printf "overlap %-5s  exposed communication %6.1f ms of a %6.1f ms step (%4.1f%%), %d steps\n",
                 mode, 1000 * exposed / n, 1000 * step / n, 100 * exposed / step, n }' "$log"
done
