#!/usr/bin/env bash
# The source index's speed on this project: a full index, a re-index with nothing changed and
# a re-index after one engine file changed (only the units that include it are parsed); then
# on a CUDA codebase of nccl-tests' size (16 .cu units, nvcc commands as bear writes them for
# make; built from tests/trace/fixtures/cudamake, since nccl-tests itself is not available
# offline; skipped without a CUDA toolkit with NCCL's device headers).
#
#   scripts/bench-index.sh [BUILD_DIR] [-j N]      (default build/; its bin/tracebook and
#                                                   compile_commands.json)
#
# The reference, measured in the same run: `tracebook index --parse-only`, libclang's
# clang_parseTranslationUnit2 of the same units with the same arguments, flags and -j, and
# nothing else (no AST visit, no second parse for OpenMP directives, no hashing, no SQLite).
# The table's last columns are the index's wall and CPU time (user + sys, all threads) over
# that reference's: the indexer's own overhead. CPU time is the figure a loaded machine
# stretches least. Full indexes and references are the best of two runs (by wall time). The
# machine's load (the 1-minute average of /proc/loadavg) is printed with each figure, taken
# as its run starts: on a contended machine both columns stretch.
#
# The sources are copied to a temporary directory (without .git and build directories) and the
# compilation database is rewritten to point at the copy, so the change (a comment appended to
# engine/transformer/mlp.c) never touches the working tree. Prints the summary line of each run
# (TUs parsed / reused, files and lines parsed, wall time, files/s, lines/s) and a table.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
jobs=()
while [ $# -gt 0 ]; do
  case "$1" in
    -j) jobs=(-j "$2"); shift 2 ;;
    -j*) jobs=(-j "${1#-j}"); shift ;;
    *) build="$1"; shift ;;
  esac
done
build=$(cd "$build" && pwd)
src=$(pwd)
tracebook="$build/bin/tracebook"
[ -x "$tracebook" ] || { echo "bench-index: no $tracebook (build first)" >&2; exit 1; }
[ -f "$build/compile_commands.json" ] || { echo "bench-index: no $build/compile_commands.json" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-index.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src" "$tmp/db"
# The working tree without .git and build directories (any directory holding a CMakeCache.txt).
excludes=(--exclude=./.git)
while IFS= read -r cache; do excludes+=("--exclude=./$(dirname "${cache#"$src"/}")"); done \
  < <(find "$src" -maxdepth 3 -name CMakeCache.txt -not -path "$src/.git/*")
tar -C "$src" "${excludes[@]}" -cf - . | tar -C "$tmp/src" -xf -
# Source paths → the copy; paths into the build directory (generated headers) stay.
sed -e "s#$build#@@BUILD@@#g" -e "s#$src/#$tmp/src/#g" -e "s#@@BUILD@@#$build#g" \
  "$build/compile_commands.json" > "$tmp/db/compile_commands.json"

out="$tmp/index.sqlite"
ref=""
timed() {  # command...: runs it, stdout to $tmp/o; $cpu = its user+sys CPU seconds (children included)
  local TIMEFORMAT='%U %S'
  { time "$@" > "$tmp/o" 2>/dev/null; } 2> "$tmp/t" || true
  cpu=$(awk '{ printf "%.2f", $1 + $2 }' "$tmp/t")
}
less() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
load() { cut -d' ' -f1 /proc/loadavg; }
reference() {  # compdb dir: libclang's parses alone of the same units (best of 2 by wall), for the next row
  local line t best="" bestcpu=""
  for _ in 1 2; do
    timed "$tracebook" index --parse-only --compdb "$1" "${jobs[@]}"
    line=$(grep -- '--parse-only:' "$tmp/o" || true)
    t=$(sed -nE 's/.* in ([0-9.]+) s .*/\1/p' <<<"$line")
    if [ -n "$t" ] && { [ -z "$best" ] || less "$t" "$best"; }; then best=$t; bestcpu=$cpu; fi
  done
  ref="${best:--}|${bestcpu:--}"
  echo "reference (best of 2): ${line%% in *} in ${best:-?} s wall, ${bestcpu:-?} s CPU (load $(load))"
}
run() {  # label, compdb dir, extra args: prints the figures line, remembers it with the reference
  local line label="$1" compdb="$2" l
  shift 2
  l=$(load)
  timed "$tracebook" index --compdb "$compdb" --out "$out" --build-dir "$build" "${jobs[@]}" "$@"
  line=$(grep 'TUs parsed' "$tmp/o")
  echo "$label:$line; CPU $cpu s (load $l)"
  rows+=("$label|${ref:--|-}|$cpu|$l|$line")
  ref=""
}
run_full() {  # label, compdb dir: a full index, best of 2 by wall (as the reference is)
  local keep="$ref" first
  run "$@" --full
  first=${rows[-1]}
  unset 'rows[-1]'
  ref="$keep"
  run "$@" --full
  local w1 w2
  w1=$(sed -E 's/.*wall ([0-9.]+) s.*/\1/' <<<"$first")
  w2=$(sed -E 's/.*wall ([0-9.]+) s.*/\1/' <<<"${rows[-1]}")
  if less "$w1" "$w2"; then rows[-1]=$first; fi
}
rows=()
echo "load average (1 min) before: $(load); $(nproc) CPUs"
reference "$tmp/db"
run_full "full index" "$tmp/db"
run "re-index, nothing changed" "$tmp/db"
printf '\n// bench-index.sh\n' >> "$tmp/src/engine/transformer/mlp.c"
sleep 0.1
# the one unit the change makes the index parse, alone, as the reference
mkdir -p "$tmp/one"
python3 - "$tmp/db/compile_commands.json" "$tmp/one/compile_commands.json" "$tmp/src/engine/transformer/mlp.c" <<'PY'
import json, sys
db = json.load(open(sys.argv[1]))
json.dump([e for e in db if e["file"] == sys.argv[3]], open(sys.argv[2], "w"))
PY
reference "$tmp/one"
run "re-index, engine/transformer/mlp.c changed" "$tmp/db"

# A CUDA codebase of nccl-tests' size: common.cu (main) and 15 test files, each a copy of the
# fixture's all_reduce.cu or all_gather.cu (every one defines ncclTestEngine, as nccl-tests'
# do), compiled with nvcc commands; no CMake, so the link units are inferred.
cuda=${CUDA_PATH:-${CUDA_HOME:-/usr/local/cuda}}
if [ -f "$cuda/include/cuda_runtime.h" ] && [ -f "$cuda/include/nccl_device.h" ]; then
  fx="$src/tests/trace/fixtures/cudamake"
  mkdir -p "$tmp/cuda"
  cp "$fx/common.h" "$fx/common.cu" "$tmp/cuda/"
  names=(all_reduce all_gather broadcast reduce reduce_scatter alltoall scatter gather sendrecv hypercube
         all_reduce_nb all_gather_nb broadcast_nb reduce_nb reduce_scatter_nb)
  entries=()
  for f in common "${names[@]}"; do
    [ "$f" = common ] || cp "$fx/$([ $(( ${#entries[@]} % 2 )) = 1 ] && echo all_reduce || echo all_gather).cu" "$tmp/cuda/$f.cu"
    entries+=("{\"directory\": \"$tmp/cuda\", \"command\": \"$cuda/bin/nvcc -O3 -gencode=arch=compute_90,code=sm_90 -std=c++17 -Xcompiler -fPIC,-Wall -I$cuda/include -c $f.cu -o $f.o\", \"file\": \"$f.cu\"}")
  done
  (IFS=,; echo "[${entries[*]}]") > "$tmp/cuda/compile_commands.json"
  out="$tmp/cuda.sqlite"
  reference "$tmp/cuda"
  run_full "CUDA, 16 .cu units (nccl-tests' size), full index" "$tmp/cuda"
else
  echo "(no CUDA toolkit with NCCL's device headers in $cuda: the CUDA rows are skipped)"
fi
echo "load average (1 min) after: $(load)"

echo
echo "| run | TUs parsed / reused | files, lines parsed | wall | CPU | load (1 min) | files/s | lines/s | reference (parse only): wall, CPU | wall / reference | CPU / reference |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == "-" || b <= 0) print "-"; else printf "%.2f\n", a / b }'; }
for r in "${rows[@]}"; do
  IFS='|' read -r label refwall refcpu cpu l line <<<"$r"
  parsed=$(sed -E 's/.*TUs parsed ([0-9]+), reused ([0-9]+);.*/\1 \/ \2/' <<<"$line")
  fl=$(sed -E 's/.*files ([0-9]+), lines ([0-9]+) .*/\1, \2/' <<<"$line")
  secs=$(sed -E 's/.*wall ([0-9.]+) s.*/\1/' <<<"$line")
  fps=$(sed -E 's/.* ([0-9]+) files\/s.*/\1/' <<<"$line")
  lps=$(sed -E 's/.* ([0-9]+) lines\/s.*/\1/' <<<"$line")
  if [ "$refwall" = - ]; then refcol=-; else refcol="$refwall s, $refcpu s"; fi
  echo "| $label | $parsed | $fl | $secs s | $cpu s | $l | $fps | $lps | $refcol | $(ratio "$secs" "$refwall") | $(ratio "$cpu" "$refcpu") |"
done
