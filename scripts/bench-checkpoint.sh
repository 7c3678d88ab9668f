#!/usr/bin/env bash
# Checkpoint throughput next to the file system's in the same run: one sync save of a model
# (8 layers, hidden 512: ~25M parameters, ~300 MB with the Adam moments) on 2 data-parallel
# ranks with the distributed optimizer, its write + fsync bytes/s from checkpoint.json, then
# `dd` writing the same bytes with an fsync; the load of that checkpoint (the engine's
# "loaded checkpoint" line) next to `cat` reading the same shard files.
#
#   scripts/bench-checkpoint.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
engine="$build/bin/pretrain_gpt"
[ -x "$engine" ] || { echo "bench-checkpoint: no $engine (build first)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-checkpoint.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

model=(--num-layers 8 --hidden-size 512 --num-attention-heads 8 --seq-length 64 --vocab-size 256
       --micro-batch-size 2 --global-batch-size 4 --world-size 2 --use-distributed-optimizer --log-interval 1000)
printf 'host: %s, %s usable cores; %s\n\n' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" \
  "$(nproc)" "$(df -h "$tmp" | awk 'NR == 2 { print $1 " (" $6 ")" }')"

save=$("$engine" "${model[@]}" --train-iters 2 --exit-interval 1 --save "$tmp/ckpt" --run-dir "$tmp/save" |
  grep 'saved checkpoint')
# "...; 302.1 MB written in 850 ms, 355 MB/s)": the bytes of every rank's shard file
bytes=$(sed -n 's/.*; \([0-9.]*\) MB written.*/\1/p' <<<"$save" | awk '{ printf "%.0f", $1 * 1e6 }')
start=$(date +%s.%N)
dd if=/dev/zero of="$tmp/plain" bs=1M count=$(( (bytes + 1048575) / 1048576 )) conv=fsync status=none
dd_s=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')

load=$("$engine" "${model[@]}" --train-iters 2 --load "$tmp/ckpt" --run-dir "$tmp/load" | grep 'loaded checkpoint')
start=$(date +%s.%N)
cat "$tmp"/ckpt/iter_0000001/rank-*.safetensors > /dev/null
cat_s=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')

echo "$save"
awk -v b="$bytes" -v dd="$dd_s" -v cat="$cat_s" -v load="$load" 'BEGIN {
  printf "%-44s %10.1f MB in %7.0f ms  %7.0f MB/s\n", "dd: the same bytes, one file, fsync", b / 1e6, dd * 1e3, b / 1e6 / dd
  printf "%s\n", load
  printf "%-44s %10.1f MB in %7.0f ms  %7.0f MB/s\n", "cat: the shard files (page cache warm)", b / 1e6, cat * 1e3, b / 1e6 / cat
}'
