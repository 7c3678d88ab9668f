#!/usr/bin/env bash
# The MPI backend's speed: all-reduce across 2 and 4 processes from 8 B to 64 MiB, the
# engine's default path (--mpi-collectives native: MPI's own collective on the group), the
# exact path (--mpi-collectives exact) and MPI_Allreduce itself, taking turns on the same
# buffers (bench_comm, nccl-tests' busbw convention); then what one training step costs under
# mpirun -np 2 against the same layout (tp 2) on two rank threads of one process, on each path.
#
#   scripts/bench-comm.sh [BUILD_DIR]        (ITERS=20 HIDDEN=256: the training step's run)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
iters=${ITERS:-20}
hidden=${HIDDEN:-256}
for bin in bench_comm pretrain_gpt; do
  [ -x "$build/bin/$bin" ] || { echo "bench-comm: no $build/bin/$bin (build first)" >&2; exit 1; }
done
command -v mpirun >/dev/null || { echo "bench-comm: no mpirun on PATH (install openmpi-bin)" >&2; exit 1; }
# as root Open MPI wants to be told; more processes than cores and no pinning on a small host;
# shared memory between the processes of this one host
mpirun=(mpirun --oversubscribe --bind-to none --mca btl self,vader)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-comm.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

printf 'host: %s, %s usable cores; load average at start: %s\n' \
  "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s\n\n' "$(mpirun --version 2>&1 | head -1)"
for np in 2 4; do
  "${mpirun[@]}" -np "$np" "$build/bin/bench_comm"
  echo
done

# the median step time (ms, steps after the first) of rank 0 in a run directory
median_ms() {
  grep -o '"step_ms":[0-9.e+-]*' "$1/metrics.rank-00000.jsonl" | cut -d: -f2 | tail -n +2 | sort -g |
    awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
model=(--num-layers 4 --hidden-size "$hidden" --num-attention-heads 4 --seq-length 128 --vocab-size 1024
       --micro-batch-size 2 --global-batch-size 4 --train-iters "$iters" --tensor-model-parallel-size 2
       --log-interval 1000)
"$build/bin/pretrain_gpt" "${model[@]}" --run-dir "$tmp/threads" >"$tmp/threads.log" 2>&1 ||
  { cat "$tmp/threads.log" >&2; exit 1; }
for alg in native exact; do
  "${mpirun[@]}" -np 2 "$build/bin/pretrain_gpt" "${model[@]}" --mpi-collectives "$alg" --run-dir "$tmp/procs-$alg" \
    >"$tmp/procs-$alg.log" 2>&1 || { cat "$tmp/procs-$alg.log" >&2; exit 1; }
done
t=$(median_ms "$tmp/threads") n=$(median_ms "$tmp/procs-native") e=$(median_ms "$tmp/procs-exact")
printf 'one training step, tp 2 (4 layers, hidden %s, seq 128, micro batch 2 x 2 microbatches), median of steps 2..%s:\n' "$hidden" "$iters"
printf '  %-52s %10.2f ms\n' "2 rank threads of one process" "$t" \
  "mpirun -np 2, --mpi-collectives native (the default)" "$n" "mpirun -np 2, --mpi-collectives exact" "$e"
awk -v t="$t" -v n="$n" -v e="$e" 'BEGIN { printf "  processes / threads: native %.3fx, exact %.3fx\n", n / t, e / t }'
