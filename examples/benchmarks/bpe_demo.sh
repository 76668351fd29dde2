#!/usr/bin/env bash
# The demo (launch/train.sh, examples/configs/demo.json) with bytes against
# learned byte-level BPEs (prepare --train-tokenizer N): the same model, steps
# and tokens per step, only the tokenizer (and so the vocabulary) differs.
# Scores each run by validation bits per byte on one validation text and by how
# many words of its samples occur in the training text (bpe_demo.py).
#
#   examples/benchmarks/bpe_demo.sh [STEPS] [BPE SIZES...]     # default: 600 512 1024
#
# Outputs under $OUT (default runs/bpe_demo): data/, one run folder per
# tokenizer, samples/, and the table bpe_demo.py prints.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${ENGINE_BUILD_DIR:-$ROOT/build}
OUT=${OUT:-$ROOT/runs/bpe_demo}
STEPS=${1:-600}
shift || true
SIZES=("${@:-512 1024}")
read -r -a SIZES <<<"${SIZES[*]}"
SEEDS=(1 2 3)
SAMPLE_BYTES=1000
PY=${PYTHON:-/usr/bin/python3}

mkdir -p "$OUT/data" "$OUT/samples"
corpus="$OUT/corpus"
if [ ! -d "$corpus" ]; then  # the demo's corpus, as launch/train.sh builds it
  mkdir -p "$corpus"
  find -L /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -exec cp {} "$corpus"/ \;
fi

prepare() { "$BUILD/launch/prepare" --input "$corpus" --val-fraction 0.05 --overwrite "$@"; }
prepare --output-dir "$OUT/data/bytes" --name fortunes
for n in "${SIZES[@]}"; do
  /usr/bin/time -f "prepare --train-tokenizer $n: %e s wall" \
    "$BUILD/launch/prepare" --input "$corpus" --val-fraction 0.05 --overwrite \
    --output-dir "$OUT/data/bpe$n" --name fortunes --train-tokenizer "$n"
done
# One validation text for every run: the BPE split's (line-aligned, the same for
# every BPE size, inside the bytes split's validation text), as bytes for the
# byte-level model.
first=${SIZES[0]}
"$PY" "$ROOT/examples/benchmarks/bpe_demo.py" decode --tokenizer "$OUT/data/bpe$first/fortunes_tokenizer.json" \
  --shards "$OUT/data/bpe$first/fortunes_val_*.bin" --out "$OUT/data/val.txt"
"$BUILD/launch/prepare" --input "$OUT/data/val.txt" --output-dir "$OUT/data/bytes_val" --name val \
  --val-fraction 0 --overwrite

run() {  # NAME TRAIN_GLOB VAL_GLOB SAMPLE_TOKENS [train flags...]
  local name=$1 train=$2 val=$3 tokens=$4
  shift 4
  /usr/bin/time -f "train $name: %e s wall" \
    "$BUILD/launch/train" --config "$ROOT/examples/configs/demo.json" --steps "$STEPS" \
    --train-data "$train" --val-data "$val" --val-interval 0 --val-tokens 100000000 \
    --checkpoint-interval 0 --run-dir "$OUT/$name" --overwrite --save-model "$OUT/$name/model.bin" \
    --sample-tokens 0 "$@" > "$OUT/$name.log"
  grep -E "^val|val " "$OUT/$name.log" | tail -1
  # Samples from the trained model, one seed each: `train` samples after its last step, so one step at a
  # learning rate of 1e-30 (lr must be > 0), which moves no fp32 weight.
  for seed in "${SEEDS[@]}"; do
    "$BUILD/launch/train" --config "$ROOT/examples/configs/demo.json" --init-from "$OUT/$name/model.bin" \
      --steps 1 --lr 1e-30 --warmup-steps 0 --train-data "$train" --checkpoint-interval 0 --seed "$seed" \
      --sample-tokens "$tokens" "$@" > "$OUT/samples/$name.seed$seed.log"
  done
}
run bytes "$OUT/data/bytes/fortunes_train_*.bin" "$OUT/data/bytes_val/val_train_*.bin" $SAMPLE_BYTES
for n in "${SIZES[@]}"; do
  run "bpe$n" "$OUT/data/bpe$n/fortunes_train_*.bin" "$OUT/data/bpe$n/fortunes_val_*.bin" $SAMPLE_BYTES \
    --tokenizer "$OUT/data/bpe$n/fortunes_tokenizer.json"
done

"$PY" "$ROOT/examples/benchmarks/bpe_demo.py" report --out "$OUT" --sample-bytes $SAMPLE_BYTES \
  --words-from "$OUT/data/bytes/fortunes_train_*.bin" --runs bytes "${SIZES[@]/#/bpe}"
