#!/usr/bin/env bash
# The main job: set up (packages, configure, build), then train a small GPT for a few
# dozen steps on this repository's own text, byte-level (vocabulary 256), single rank on
# the CPU. Prints a per-step table and where the run's artifacts are.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
mkdir -p artifacts/quickstart
find README.md engine -name '*.[ch]' -o -name '*.md' | sort | xargs cat > artifacts/quickstart/corpus.txt
build/bin/preprocess_data --input artifacts/quickstart/corpus.txt --output artifacts/quickstart/corpus.bin
exec build/bin/pretrain_gpt \
  --data-path artifacts/quickstart/corpus.bin --vocab-size 256 \
  --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 \
  --micro-batch-size 8 --global-batch-size 16 --train-iters 150 \
  --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 10 --log-interval 10 "$@"
