#!/usr/bin/env bash
# How long a checkpoint save blocks the step loop: synchronous saves against
# asynchronous ones (--async-checkpoint, launch/checkpoint/checkpoint_saver.h), one
# process on the CPU, a save every INTERVAL steps.
#
#   examples/benchmarks/checkpoint_save.sh [MODEL] [STEPS] [INTERVAL]   (default gpt2-124m, 23, 6)
#
# Per mode: the state size, the mean time a save blocked the step loop (the
# copy into host memory, the collective begin and commit, and any wait for
# the write), the mean time the write itself took (on a background thread
# when asynchronous), and the mean step time (an asynchronous write competes
# with training for the cores and the disk). The periodic saves after the
# first (which also pays for touching its host buffers) are averaged; the
# last step's save, which the run waits for by design, is not, and the
# defaults leave the last periodic write time to finish before it. An
# interval shorter than a write makes each asynchronous save wait for the
# previous write, and then it blocks nearly as long as a synchronous one. OpenMP uses every
# core, so the background write has none to itself. Files go to a scratch
# directory on the disk holding $TMPDIR (default /tmp).
set -euo pipefail
source "$(dirname "$0")/../../launch/setup_env.sh"
MODEL=${1:-gpt2-124m}
STEPS=${2:-23}
INTERVAL=${3:-6}
engine_bench_begin
export OMP_NUM_THREADS=$(nproc)
work=$ENGINE_BENCH_WORK
echo "| mode | state per save | blocked per save | write per save | step time |"
echo "|---|---|---|---|---|"
for async in false true; do
  log="$work/save_$async.jsonl"
  rm -rf "$work/ckpt"
  "$ENGINE_BUILD_DIR/launch/train" --model "$MODEL" --micro-batch 1 --seq-len 64 --batch-tokens 64 \
    --steps "$STEPS" --device cpu --peak-tflops 1 --shuffle false --sample-tokens 0 \
    --train-data "$work/bench_train_*.bin" --log-file "$log" --checkpoint-dir "$work/ckpt" \
    --checkpoint-interval "$INTERVAL" --keep-checkpoints 2 --async-checkpoint "$async" >/dev/null
  bytes=$(du -sb "$work/ckpt/$(cat "$work/ckpt/latest")" | cut -f1)
  awk -v mode="$([ "$async" = true ] && echo asynchronous || echo synchronous)" -v bytes="$bytes" '
    /"event":"checkpoint"/ {
      match($0, /"seconds":[0-9.e+-]+/);       b = substr($0, RSTART + 10, RLENGTH - 10)
      match($0, /"write_seconds":[0-9.e+-]+/); w = substr($0, RSTART + 16, RLENGTH - 16)
      saves++; bs[saves] = b; ws[saves] = w }
    /"step_time_s"/ { match($0, /"step_time_s":[0-9.e+-]+/); step += substr($0, RSTART + 14, RLENGTH - 14); steps++ }
    END { for (i = 2; i < saves; i++) { blocked += bs[i]; wrote += ws[i]; n++ }
          printf "| %s | %.2f GiB | %.3f s | %.2f s | %.2f s |\n", mode, bytes / 2^30, blocked / n, wrote / n, step / steps }' "$log"
done
