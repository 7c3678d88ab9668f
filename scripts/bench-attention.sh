#!/usr/bin/env bash
# The attention cores: speed (bench_attention, both cores on the same inputs in one run) and
# memory — one training step of a 1-layer model at each sequence length with each core,
# reading the run's peak activation and workspace bytes (the local core keeps the T×T
# probabilities and a 2·T×T scratch; flash one log-sum-exp per row).
#
#   scripts/bench-attention.sh [BUILD_DIR] [--seqs "1024 4096 16384"]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
seqs="1024 4096 16384"
while [ $# -gt 0 ]; do
  case "$1" in
    --seqs) seqs="$2"; shift 2 ;;
    -*) echo "bench-attention: unknown option '$1'" >&2; exit 2 ;;
    *) build="$1"; shift ;;
  esac
done
for bin in bench_attention pretrain_gpt; do
  [ -x "$build/bin/$bin" ] || { echo "bench-attention: no $build/bin/$bin (build first)" >&2; exit 1; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-attention.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

printf 'host: %s, %s usable cores\n\n' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" "$(nproc)"
"$build/bin/bench_attention"

# peak bytes of one category in rank 0's first metrics line
peak() { grep -m1 -o "\"$2\":[0-9]*" "$1/metrics.rank-00000.jsonl" | cut -d: -f2; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

printf '\none training step, 1 layer, hidden 64, 2 heads, micro batch 1: peak MiB\n'
printf '%8s %22s %22s %10s\n' "seq" "local act + workspace" "flash act + workspace" "local/flash"
for T in $seqs; do
  row=()
  for core in local flash; do
    dir="$tmp/$core-$T"
    "$build/bin/pretrain_gpt" --num-layers 1 --hidden-size 64 --num-attention-heads 2 --seq-length "$T" \
      --vocab-size 256 --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --attention-backend "$core" \
      --run-dir "$dir" >"$dir.log" 2>&1 || { echo "bench-attention: $core at seq $T failed:" >&2; cat "$dir.log" >&2; exit 1; }
    act=$(peak "$dir" activations) ws=$(peak "$dir" workspace)
    row+=("$(mib "$act") + $(mib "$ws")" $((act + ws)))
  done
  printf '%8s %22s %22s %9sx\n' "$T" "${row[0]}" "${row[2]}" "$(awk -v a="${row[1]}" -v b="${row[3]}" 'BEGIN { printf "%.1f", a / b }')"
done
