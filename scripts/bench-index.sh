#!/usr/bin/env bash
# The source index's speed on this project: a full index, a re-index with nothing changed and
# a re-index after one engine file changed (only the units that include it are parsed).
#
#   scripts/bench-index.sh [BUILD_DIR] [-j N]      (default build/; its bin/tracebook and
#                                                   compile_commands.json)
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
run() {  # label, extra args: prints the figures line, remembers it
  local line label="$1"
  shift
  line=$("$tracebook" index --compdb "$tmp/db" --out "$out" --build-dir "$build" "${jobs[@]}" "$@" 2>/dev/null |
         grep 'TUs parsed')
  echo "$label:$line"
  rows+=("$label|$line")
}
rows=()
run "full index" --full
run "re-index, nothing changed"
printf '\n// bench-index.sh\n' >> "$tmp/src/engine/transformer/mlp.c"
sleep 0.1
run "re-index, engine/transformer/mlp.c changed"

echo
echo "| run | TUs parsed / reused | files, lines parsed | wall | files/s | lines/s |"
echo "|---|---|---|---|---|---|"
for r in "${rows[@]}"; do
  label=${r%%|*}
  line=${r#*|}
  parsed=$(sed -E 's/.*TUs parsed ([0-9]+), reused ([0-9]+);.*/\1 \/ \2/' <<<"$line")
  fl=$(sed -E 's/.*files ([0-9]+), lines ([0-9]+) .*/\1, \2/' <<<"$line")
  wall=$(sed -E 's/.*wall ([0-9.]+) s.*/\1 s/' <<<"$line")
  fps=$(sed -E 's/.* ([0-9]+) files\/s.*/\1/' <<<"$line")
  lps=$(sed -E 's/.* ([0-9]+) lines\/s.*/\1/' <<<"$line")
  echo "| $label | $parsed | $fl | $wall | $fps | $lps |"
done
