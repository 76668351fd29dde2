#!/usr/bin/env bash
# Memory per rank and step time for every ZeRO stage (0-3) and recomputation
# mode (none, selective, full) on one layout: dp ranks of the CPU backend,
# MPI communicator, gpt-demo. Prints one markdown table row per run.
#
#   examples/benchmarks/zero_recompute.sh [RANKS] [STEPS]
#
# Columns: the start-up memory plan (largest over ranks; the ZeRO-2/3
# gather/reduce buffers as the bound the trainer prints), the measured peak
# of the last step, the mean step time and data-parallel bytes (all ranks'
# sends) of the steps after the first three, and the final loss (the same
# for every run up to float rounding: the stages and modes change memory and
# traffic, not the math).
set -euo pipefail
source "$(dirname "$0")/../../launch/setup_env.sh"
RANKS=${1:-4}
STEPS=${2:-8}
engine_bench_begin
work=$ENGINE_BENCH_WORK
echo "| ZeRO | recompute | parameters | gradients | optimizer state | activations | ZeRO-2/3 buffers (bound) | measured peak | step | dp bytes/step | final loss |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for zero in 0 1 2 3; do
  for recompute in none selective full; do
    log="$work/z${zero}_${recompute}.jsonl"
    out=$(mpirun --oversubscribe -np "$RANKS" "$ENGINE_BUILD_DIR/launch/train" --model gpt-demo --micro-batch 8 \
      --seq-len 128 --batch-tokens $((8 * 128 * RANKS)) --steps "$STEPS" --dp "$RANKS" --zero "$zero" \
      --recompute "$recompute" --device cpu --peak-tflops 1 --shuffle false \
      --train-data "$work/bench_train_*.bin" --log-file "$log")
    memory=$(grep -a '^memory ' <<<"$out")
    field() { sed -E "s/.*$1 ([0-9.]+ [KMG]?i?B).*/\1/" <<<"$memory"; }
    staging=$(grep -q 'buffers <=' <<<"$memory" && sed -E 's/.*buffers <= ([0-9.]+ [KMG]?i?B).*/\1/' <<<"$memory" || echo "-")
    awk -v z="$zero" -v r="$recompute" -v p="$(field parameters)" -v g="$(field gradients)" \
        -v o="$(field 'optimizer state')" -v a="$(field activations)" -v s="$staging" '
      /"step_time_s"/ { match($0, /"step_time_s":[0-9.e+-]+/); t = substr($0, RSTART + 14, RLENGTH - 14)
        match($0, /"dp":[0-9.e+-]+/);          d = substr($0, RSTART + 5, RLENGTH - 5)
        match($0, /"peak_memory_bytes":[0-9]+/); peak = substr($0, RSTART + 20, RLENGTH - 20)
        match($0, /"loss":[0-9.e+-]+/);        loss = substr($0, RSTART + 7, RLENGTH - 7)
        if (NR > 3) { step += t; dp += d; n++ } }
      END { printf "| %s | %s | %s | %s | %s | %s | %s | %.2f MiB | %.0f ms | %.2f MiB | %.4f |\n",
                   z, r, p, g, o, a, s, peak / 1048576, 1000 * step / n, dp / n / 1048576, loss }' "$log"
  done
done
