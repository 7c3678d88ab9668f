#!/usr/bin/env bash
# How often each claim proves: runs each runbook N times, each time into fresh artifacts,
# proves every claim of the run, and prints per claim how many of the N were PROVEN and the
# reasons of the others (the first reason's kind and text, counted), with the host, its load
# before and after, the build's commit and the command. Measure with nothing else running:
# anything else on the host is what the contention gate refuses.
#
#   scripts/check-proof-rate.sh RUNBOOK... [-n N] [--build DIR] [--set key=value ...]
#     (default N = 5; the runbooks' own --set values go to every run, so each runbook must
#     read each of them: tracebook run fails a run with a --set it never reads)
set -euo pipefail
cd "$(dirname "$0")/.."
n=5
build=build
runbooks=()
sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    -*) echo "check-proof-rate: unknown option '$1'" >&2; exit 2 ;;
    *) runbooks+=("$1"); shift ;;
  esac
done
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "check-proof-rate: -n must be a positive count (got '$n')" >&2; exit 2; }
[ ${#runbooks[@]} -gt 0 ] || { echo "usage: scripts/check-proof-rate.sh RUNBOOK... [-n N]" >&2; exit 2; }
for rb in "${runbooks[@]}"; do
  [ -f "$rb" ] || { echo "check-proof-rate: no runbook '$rb'" >&2; exit 2; }
done
tracebook="$build/bin/tracebook"
[ -x "$tracebook" ] || { echo "check-proof-rate: no $tracebook (build first)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-proof-rate.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git diff --quiet HEAD 2>/dev/null && echo clean || echo dirty)
: >"$tmp/verdicts"
total_reruns=0
for rb in "${runbooks[@]}"; do
  for ((i = 1; i <= n; i++)); do
    art="$tmp/artifacts-$i"
    rm -rf "$art"
    start=$(date +%s)
    if ! "$tracebook" run "$rb" "${sets[@]}" --artifacts "$art" >"$tmp/run.log" 2>&1; then
      echo "check-proof-rate: $rb, round $i: tracebook run failed:" >&2
      tail -20 "$tmp/run.log" >&2
      exit 1
    fi
    "$tracebook" prove --all --quiet --artifacts "$art" >"$tmp/prove.log" 2>/dev/null || true
    # "PROVEN  id ..." / "NOT PROVEN  id (reason)": one verdict a claim
    # (a verdict without a headline, such as a file altered, has its reason on the next line)
    awk -v rb="$rb" '/^PROVEN  / { print rb "\t" $2 "\tPROVEN\t" }
                     /^NOT PROVEN  / { id = $3; r = $0; sub(/^NOT PROVEN  [^ ]+ ?/, "", r);
                                       if (r == "" && (getline next_line) > 0) { r = next_line; sub(/^ +/, "", r) }
                                       sub(/^\(/, "", r); sub(/\)$/, "", r); print rb "\t" id "\tNOT\t" r }' \
      "$tmp/prove.log" >>"$tmp/verdicts"
    # repetitions measured again because the host's contention disturbed them (rerun_contended_)
    reruns=$(grep -c '^  re-run: ' "$tmp/run.log" || true)
    total_reruns=$((total_reruns + reruns))
    printf '  %s round %d of %d: %s s, %s PROVEN, %s NOT PROVEN, %s re-run%s of contended repetitions\n' "$rb" "$i" \
      "$n" "$(($(date +%s) - start))" "$(grep -c '^PROVEN  ' "$tmp/prove.log" || true)" \
      "$(grep -c '^NOT PROVEN  ' "$tmp/prove.log" || true)" "$reruns" "$([ "$reruns" = 1 ] || echo s)" >&2
    rm -rf "$art"
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

printf '\nhost: %s, %s usable cores; load %s before, %s after; commit %s (%s)\n' \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" "$(nproc)" "$load_before" "$load_after" \
  "$commit" "$dirty"
printf 'command: scripts/check-proof-rate.sh %s -n %s%s\n' "${runbooks[*]}" "$n" \
  "$([ ${#sets[@]} -gt 0 ] && printf ' %s' "${sets[@]}")"
printf 'repetitions measured again for contention: %d in all\n\n' "$total_reruns"
printf '%-44s %-9s %s\n' "claim" "proven" "the others' first reasons (count)"
# per claim: PROVEN count of N, then the distinct reasons with their counts (numbers masked
# so that the same reason with other figures counts once)
awk -F'\t' -v n="$n" '
  { key = $2; if (!(key in seen)) { seen[key] = 1; order[++k] = key }
    if ($3 == "PROVEN") proven[key]++
    else { r = $4; gsub(/[0-9]+T[0-9]+-[0-9a-f]+/, "RUN", r); gsub(/[0-9][0-9.e+-]*/, "#", r); reasons[key, r]++; if (!((key, r) in first)) { first[key, r] = $4; list[key] = list[key] SUBSEP r } } }
  END {
    total = 0; full = 0
    for (i = 1; i <= k; i++) {
      key = order[i]; p = proven[key] + 0; total++; if (p == n) full++
      line = ""
      m = split(substr(list[key], 2), rs, SUBSEP)
      for (j = 1; j <= m; j++) line = line (j > 1 ? "; " : "") reasons[key, rs[j]] "x " first[key, rs[j]]
      printf "%-44s %3d of %-3d %s\n", key, p, n, line
    }
    printf "\n%d of %d claims PROVEN in all %d rounds\n", full, total, n
  }' "$tmp/verdicts"
