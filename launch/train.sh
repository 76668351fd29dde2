#!/usr/bin/env bash
# The main job on its built-in default: installs what is missing, builds,
# learns a byte-level BPE of BPE_TOKENS (default 1024) tokens from the English
# text of Debian's `fortunes` packages and turns the text into token shards
# with it (prepare --train-tokenizer; BPE_TOKENS=0 for bytes, as before), and
# trains a small GPT on it (the GPU if there is one, else the CPU), printing
# one line per step, then a sample of generated text. The BPE reads better
# than bytes at the same steps and model (examples/benchmarks/RESULTS.md,
# "Learned BPE against bytes in the demo"); prepare is deterministic, so the
# same corpus gives the same tokenizer and shards.
#
#   launch/train.sh                          # the demo, one process
#   launch/train.sh --steps 2000 --lr 1e-3   # any `train` flag overrides the demo's
#   launch/train.sh 4                        # the demo under `mpirun -np 4` on the CPU (dp = 4)
#   launch/train.sh 4 --tp 2 --pp 2          # ... on a tensor x pipeline grid
#
# Whatever the ranks, the demo keeps its global batch (2048 tokens a step):
# each data-parallel rank takes 16/dp sequences of each step. The run folder
# is runs/demo (RUN_DIR=... for another); running the script again continues
# the run there (--resume auto) under any layout, --overwrite starts it afresh.
set -euo pipefail
source "$(dirname "$0")/setup_env.sh"

RANKS=1
if [[ ${1:-} =~ ^[0-9]+$ ]]; then
  RANKS=$1
  shift
fi

engine_install_dependencies
# Every program the README names: train and prepare for the demo, plan for the planning examples.
engine_build train prepare plan

BPE_TOKENS=${BPE_TOKENS:-1024}
tokenizer=()
if [ "$BPE_TOKENS" -gt 0 ]; then
  DATA_DIR=${DATA_DIR:-$ENGINE_ROOT/data/fortunes_bpe$BPE_TOKENS}
  learn=(--train-tokenizer "$BPE_TOKENS")
  tokenizer=(--tokenizer "$DATA_DIR/fortunes_tokenizer.json")
else
  DATA_DIR=${DATA_DIR:-$ENGINE_ROOT/data/fortunes}
  learn=()
fi
if ! ls "$DATA_DIR"/fortunes_train_*.bin >/dev/null 2>&1 || { [ "$BPE_TOKENS" -gt 0 ] && [ ! -f "${tokenizer[1]}" ]; }; then
  corpus=$(mktemp -d)
  trap 'rm -rf "$corpus"' EXIT
  # The fortune files themselves; *.dat are indexes and *.u8 are symlinks.
  find -L /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -exec cp {} "$corpus"/ \;
  "$ENGINE_BUILD_DIR/launch/prepare" --input "$corpus" --output-dir "$DATA_DIR" --name fortunes --val-fraction 0.05 \
    --overwrite "${learn[@]}"
fi

RUN_DIR=${RUN_DIR:-$ENGINE_ROOT/runs/demo}

# The data-parallel size the flags ask for, to split the demo's 16 sequences
# a step over the replicas (a --micro-batch given here still wins).
tp=1 pp=1 dp=0 start=(--resume auto)
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --tp|--pp|--dp) declare "${args[i]#--}=${args[i + 1]:-}" ;;
    --tp=*|--pp=*|--dp=*) flag=${args[i]%%=*}; declare "${flag#--}=${args[i]#*=}" ;;
    --overwrite|--resume|--resume=*|--eval-only) start=() ;;
  esac
done
[ "$dp" -gt 0 ] 2>/dev/null || dp=$(( RANKS / (tp * pp) > 0 ? RANKS / (tp * pp) : 1 ))
if (( 16 % dp != 0 )); then
  echo "launch/train.sh: the demo's 16 sequences a step do not split over dp $dp; give --micro-batch and --batch-tokens" >&2
  exit 64
fi

launcher=()
if [ "$RANKS" -gt 1 ]; then
  # mpirun refuses root unless told; each rank gets its share of the cores.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / RANKS > 0 ? $(nproc) / RANKS : 1 ))}
  launcher=(mpirun --oversubscribe -np "$RANKS")
fi
exec "${launcher[@]}" "$ENGINE_BUILD_DIR/launch/train" \
  --config "$ENGINE_ROOT/examples/configs/demo.json" \
  --train-data "$DATA_DIR/fortunes_train_*.bin" \
  --val-data "$DATA_DIR/fortunes_val_*.bin" \
  --micro-batch $(( 16 / dp )) \
  --run-dir "$RUN_DIR" \
  "${tokenizer[@]}" \
  "${start[@]}" \
  "$@"
