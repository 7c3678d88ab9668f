#!/usr/bin/env bash
# The thread policy (engine/backend/cpu/kernels.h): one rank (an OpenMP/BLAS thread per core)
# trains the quickstart model and GPT-2 124M shapes alone and beside a competing busy process,
# with the engine's default (chosen at start from the host: waiting threads spin a bounded
# time on a quiet host, sleep beside a busy task) against the two fixed policies:
# OMP_WAIT_POLICY=ACTIVE (spin) and OMP_WAIT_POLICY=PASSIVE (sleep). Prints each run's median,
# minimum and maximum step time (the first step left out as warm-up), the policy the default
# chose, and each policy's step time against ACTIVE's alone and PASSIVE's beside the busy
# process (the references the default must meet: within 5% of ACTIVE quiet, no worse than
# PASSIVE contended). Measure with nothing else running.
#
#   scripts/bench-thread-policy.sh [BUILD_DIR] [--iters N] [--iters-124m N] [--rounds N]
#     (defaults: build/, 12 quickstart steps, 4 GPT-2 124M steps, 1 round; ~4 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
iters=12
iters_big=4
rounds=1
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) iters="$2"; shift 2 ;;
    --iters-124m) iters_big="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    -*) echo "bench-thread-policy: unknown option '$1'" >&2; exit 2 ;;
    *) build="$1"; shift ;;
  esac
done
for n in "$iters" "$iters_big" "$rounds"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "bench-thread-policy: '$n' is not a positive count" >&2; exit 2; }
done
[ "$iters" -ge 3 ] && [ "$iters_big" -ge 3 ] ||
  { echo "bench-thread-policy: --iters and --iters-124m must be at least 3 (one warm-up, two timed)" >&2; exit 2; }
engine="$build/bin/pretrain_gpt"
[ -x "$engine" ] || { echo "bench-thread-policy: no $engine (build first)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-thread-policy.XXXXXX")
busy=""
trap '[ -n "$busy" ] && kill "$busy" 2>/dev/null; rm -rf "$tmp"' EXIT

quickstart=(--num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --vocab-size 256
            --micro-batch-size 4 --global-batch-size 8 --train-iters "$iters" --lr 1e-3 --seed 7)
gpt2_124m=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 64 --vocab-size 50257
           --micro-batch-size 4 --global-batch-size 4 --train-iters "$iters_big" --seed 7)

# "median min max" of the timed steps' step_ms in a run directory (rank 0's, the first left out)
step_ms() {
  grep -o '"step_ms":[0-9.eE+-]*' "$1/metrics.rank-00000.jsonl" | tail -n +2 | cut -d: -f2 | sort -g |
    awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
                              printf "%.1f %.1f %.1f", m, v[1], v[NR] }'
}
# the policy a run's libgomp read, from its conditions.json
policy_of() {
  grep -o '"openmp_wait_policy": *"[^"]*"' "$1/conditions.json" | sed 's/.*: *"\(.*\)"/\1/'
}

# run NAME MODEL POLICY: one training run; the environment chooses the policy (default: none)
run() {
  local name="$1" model="$2" policy="$3" dir="$tmp/$1" args
  local -n ref="$model"
  args=("${ref[@]}")
  local envs=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT)
  [ "$policy" != default ] && envs+=("OMP_WAIT_POLICY=$policy")
  "${envs[@]}" "$engine" "${args[@]}" --log-interval 1000 --run-dir "$dir" >"$dir.log" 2>&1 ||
    { echo "bench-thread-policy: $name failed:" >&2; cat "$dir.log" >&2; exit 1; }
  echo "$(step_ms "$dir") $(policy_of "$dir")"
  rm -rf "$dir"
}

policies=(default ACTIVE PASSIVE)
models=(quickstart gpt2_124m)
declare -A result
measure() {  # measure CONDITION: every model and policy, interleaved over the rounds
  local r m p
  for ((r = 1; r <= rounds; r++)); do
    for m in "${models[@]}"; do
      for p in "${policies[@]}"; do
        result[$1,$m,$p,$r]=$(run "$1-$m-$p-$r" "$m" "$p")
      done
    done
  done
}

printf 'host: %s, %s usable cores, load %s; %s quickstart / %s GPT-2 124M steps per run, %s round(s)\n' \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" "$(nproc)" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" "$iters" "$iters_big" "$rounds"
printf 'command: scripts/bench-thread-policy.sh --iters %s --iters-124m %s --rounds %s\n\n' "$iters" "$iters_big" "$rounds"
measure quiet
bash -c 'while :; do :; done' &
busy=$!
sleep 0.5
measure busy
kill "$busy"
busy=""

# over the rounds: the median of the runs' medians, the least minimum, the greatest maximum
median_of() {
  local r; for ((r = 1; r <= rounds; r++)); do echo "${result[$1,$2,$3,$r]}" | cut -d' ' -f1; done | sort -g |
    awk '{ v[NR] = $1 } END { printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
range_of() {
  local r; for ((r = 1; r <= rounds; r++)); do echo "${result[$1,$2,$3,$r]}"; done |
    awk 'NR == 1 { lo = $2; hi = $3 } { if ($2 < lo) lo = $2; if ($3 > hi) hi = $3 } END { printf "%.1f-%.1f", lo, hi }'
}
# the policies the default chose over the rounds, each once
chosen_of() {
  local r; for ((r = 1; r <= rounds; r++)); do echo "${result[$1,$2,$3,$r]}" | cut -d' ' -f4; done | sort -u |
    paste -sd/ -
}
printf '%-12s %-8s %-44s %-44s %s\n' "model" "policy" "alone: median (min-max) ms [policy run]" \
  "beside a busy process [policy run]" "vs ACTIVE alone / vs PASSIVE busy"
for m in "${models[@]}"; do
  qa=$(median_of quiet "$m" ACTIVE)
  bp=$(median_of busy "$m" PASSIVE)
  for p in "${policies[@]}"; do
    q=$(median_of quiet "$m" "$p")
    b=$(median_of busy "$m" "$p")
    printf '%-12s %-8s %-44s %-44s %s / %s\n' "$m" "$p" "$q ($(range_of quiet "$m" "$p")) [$(chosen_of quiet "$m" "$p")]" \
      "$b ($(range_of busy "$m" "$p")) [$(chosen_of busy "$m" "$p")]" \
      "$(awk -v a="$q" -v r="$qa" 'BEGIN { printf "%+.1f%%", 100 * (a / r - 1) }')" \
      "$(awk -v a="$b" -v r="$bp" 'BEGIN { printf "%+.1f%%", 100 * (a / r - 1) }')"
  done
done
if [ "$rounds" -gt 1 ]; then
  echo
  echo "(each figure: the median over the $rounds rounds of each run's median step time; min-max over every run)"
fi
