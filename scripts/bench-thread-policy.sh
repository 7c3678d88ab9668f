#!/usr/bin/env bash
# The thread policy under contention: one rank (2 OpenMP/BLAS threads on a 2-core host)
# trains the same few steps alone and beside a competing busy process, with libgomp's
# default wait policy (waiting threads spin ~300000 rounds, what the engine ran with before)
# and with the engine's default (OMP_WAIT_POLICY=PASSIVE: waiting threads sleep), and a
# thread per rank (tp 2) for comparison. Prints the median, minimum and maximum step time of
# the timed steps (the first left out) and the slow-down beside the busy process.
#
#   scripts/bench-thread-policy.sh [BUILD_DIR] [--iters N]      (default build/, 12 steps)
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
iters=12
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) iters="$2"; shift 2 ;;
    -*) echo "bench-thread-policy: unknown option '$1'" >&2; exit 2 ;;
    *) build="$1"; shift ;;
  esac
done
engine="$build/bin/pretrain_gpt"
[ -x "$engine" ] || { echo "bench-thread-policy: no $engine (build first)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-thread-policy.XXXXXX")
busy=""
trap '[ -n "$busy" ] && kill "$busy" 2>/dev/null; rm -rf "$tmp"' EXIT

model=(--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 128 --vocab-size 256
       --micro-batch-size 4 --global-batch-size 8 --train-iters "$iters" --seed 7 --log-interval 1000)

# "median min max" of the timed steps' step_ms in a run directory (rank 0's metrics lines)
step_ms() {
  grep -o '"step_ms":[0-9.eE+-]*' "$1/metrics.rank-00000.jsonl" | tail -n +2 | cut -d: -f2 | sort -g |
    awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
                              printf "%.1f %.1f %.1f", m, v[1], v[NR] }'
}

# run NAME ENV... -- ARGS...: one training run; prints its step figures
run() {
  local name="$1"; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local dir="$tmp/$name"
  env "${envs[@]}" "$engine" "${model[@]}" "$@" --run-dir "$dir" >"$dir.log" 2>&1 ||
    { echo "bench-thread-policy: $name failed:" >&2; cat "$dir.log" >&2; exit 1; }
  step_ms "$dir"
}

printf 'host: %s, %s usable cores; %s steps per run\n\n' \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" "$(nproc)" "$iters"
declare -A quiet loaded
policies=("libgomp default (spin)" "engine default (passive)" "tp 2, 1 thread per rank")
settings=("GOMP_SPINCOUNT=300000 --" "OMP_WAIT_POLICY=PASSIVE --"
          "OMP_WAIT_POLICY=PASSIVE -- --world-size 2 --tensor-model-parallel-size 2")
for i in "${!policies[@]}"; do
  read -ra s <<<"${settings[$i]}"
  quiet[$i]=$(run "quiet$i" "${s[@]}")
done
bash -c 'while :; do :; done' &
busy=$!
sleep 0.5
for i in "${!policies[@]}"; do
  read -ra s <<<"${settings[$i]}"
  loaded[$i]=$(run "busy$i" "${s[@]}")
done
kill "$busy"
busy=""

printf '%-28s %-30s %-30s %s\n' "policy" "alone: median (min-max) ms" "beside a busy process" "slow-down"
for i in "${!policies[@]}"; do
  read -r qm qlo qhi <<<"${quiet[$i]}"
  read -r bm blo bhi <<<"${loaded[$i]}"
  printf '%-28s %-30s %-30s %sx\n' "${policies[$i]}" "$qm ($qlo-$qhi)" "$bm ($blo-$bhi)" \
    "$(awk -v b="$bm" -v q="$qm" 'BEGIN { printf "%.2f", b / q }')"
done
