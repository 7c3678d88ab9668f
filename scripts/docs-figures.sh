#!/usr/bin/env bash
# The figures of the docs, each with the command that produced it. A figure (a table or a number
# measured by running something) in README.md or docs/*.md sits in a block:
#
#   <!-- figure NAME: COMMAND -->
#   ...the figure...
#   <!-- end figure NAME: host HOST, commit COMMIT, date YYYY-MM-DD -->
#
# (the markers may be indented, inside a list item: the content is then indented as they are;
# inside a ``` fence they are text, not a block).
# COMMAND is one shell line, run from the repository root, whose stdout is the block's content:
# a stdout that is a Markdown table (its first line starts with '|') goes in as it is; any other
# is put between ``` fences, so that it reads as it printed. The end line says where and when the
# content was made: lscpu's model name and CPU count, `git rev-parse --short=12 HEAD` (with
# "+dirty" when tracked files differ from it), the date. None of the three may be "unknown": a
# figure whose provenance is not known is rerun, or removed.
#
#   scripts/docs-figures.sh                 rerun every block's command and rewrite its content and
#                                           end line; a failing command (or one that prints nothing)
#                                           leaves its block as it was, and the script exits 1 naming it
#   scripts/docs-figures.sh --only NAME     rerun that block alone (repeatable: those blocks, one run,
#                                           so they share one provenance)
#   scripts/docs-figures.sh --list          NAME, file and COMMAND of each block (tab-separated)
#   scripts/docs-figures.sh --check         run nothing: exit 1 naming each block without a command,
#                                           with an end line missing host, commit or date (or
#                                           saying "unknown" for one of them), with
#                                           mismatched NAMEs, unclosed or nested, or a NAME used twice
#   --file PATH (repeatable)                only these files (default: README.md and docs/*.md);
#                                           the commands still run from the repository root
#
# Each file is rewritten whole and atomically (a temporary file beside it, then mv). Before
# rerunning anything the blocks are checked as --check does; a broken block stops the script.
# Some commands take minutes (benchmarks, runbooks): run them on a quiet machine; `--list`
# shows what each one runs. Exit status: 0 success, 1 a command failed or a block is malformed,
# 2 a usage error.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

mode=rerun
only=()
files=()
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --list) mode=list; shift ;;
    --check) mode=check; shift ;;
    --only) [ $# -ge 2 ] || { echo "docs-figures: --only needs a NAME" >&2; exit 2; }; only+=("$2"); shift 2 ;;
    --file) [ $# -ge 2 ] || { echo "docs-figures: --file needs a PATH" >&2; exit 2; }; files+=("$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "docs-figures: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
if [ ${#files[@]} -eq 0 ]; then
  files=(README.md)
  for f in docs/*.md; do [ -f "$f" ] && files+=("$f"); done
fi
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "docs-figures: no file '$f'" >&2; exit 2; }
done

# Every block of the files, one line each: FILE, start line, end line, NAME, COMMAND (tab-separated);
# each malformed marker as a line "ERROR<TAB>FILE:LINE: why" instead. awk, POSIX only (mawk).
scan() {
  awk '
    function err(msg) { printf "ERROR\t%s:%d: %s\n", FILENAME, FNR, msg; bad = 1 }
    function close_open(at) {
      if (open) err("block \"" name "\" (line " start ") is not closed before " at)
      open = 0
    }
    FNR == 1 { if (NR > 1) close_open("the end of the file " prev); prev = FILENAME; infence = 0 }
    /^ *```/ { infence = !infence; next }  # a marker inside a code fence is an example, not a block
    infence { next }
    /^ *<!-- figure / {
      line = $0; sub(/^ +/, "", line)
      if (open) close_open("another block opens at line " FNR)
      if (line !~ /^<!-- figure [A-Za-z0-9._-]+: .*[^ ] -->$/) {
        err("a block without a command (want \"<!-- figure NAME: COMMAND -->\"): " line); next
      }
      rest = substr(line, 13); i = index(rest, ": ")
      name = substr(rest, 1, i - 1); cmd = substr(rest, i + 2); cmd = substr(cmd, 1, length(cmd) - 4)
      if (cmd ~ /^[ \t]*$/) { err("block \"" name "\" has no command"); next }
      if (name in seen) err("the NAME \"" name "\" is used twice (also " seen[name] ")")
      seen[name] = FILENAME ":" FNR
      open = 1; start = FNR; next
    }
    /^ *<!-- end figure / {
      line = $0; sub(/^ +/, "", line)
      if (!open) { err("an end line with no block open: " line); next }
      open = 0
      rest = substr(line, 17); i = index(rest, ": ")
      ename = i ? substr(rest, 1, i - 1) : rest
      if (ename != name) { err("the end line names \"" ename "\", the block (line " start ") \"" name "\""); next }
      if (line !~ /: host [^ ].*, commit [^ ,]+, date [0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] -->$/ ||
          line ~ /: host unknown|, commit unknown,/) {
        err("block \"" name "\": the end line lacks \"host HOST, commit COMMIT, date YYYY-MM-DD\" (none of them " \
            "unknown): " line); next
      }
      printf "%s\t%d\t%d\t%s\t%s\n", FILENAME, start, FNR, name, cmd
      next
    }
    END { if (NR > 0) close_open("the end of the file " prev) }
  ' "$@"
}

blocks=$(scan "${files[@]}")
errors=$(grep '^ERROR' <<<"$blocks" | cut -f2-)
blocks=$(grep -v '^ERROR' <<<"$blocks" | grep -v '^$')

case "$mode" in
  check)
    if [ -n "$errors" ]; then
      while IFS= read -r e; do echo "docs-figures: $e" >&2; done <<<"$errors"
      echo "docs-figures: $(grep -c . <<<"$errors") problem(s)" >&2
      exit 1
    fi
    echo "docs-figures: $(grep -c . <<<"$blocks") blocks in ${#files[@]} files, every one with a command and its provenance"
    exit 0 ;;
  list)
    [ -z "$errors" ] || { while IFS= read -r e; do echo "docs-figures: $e" >&2; done <<<"$errors"; exit 1; }
    [ -z "$blocks" ] || awk -F'\t' '{ printf "%s\t%s\t%s\n", $4, $1, $5 }' <<<"$blocks"
    exit 0 ;;
esac

if [ -n "$errors" ]; then
  while IFS= read -r e; do echo "docs-figures: $e" >&2; done <<<"$errors"
  echo "docs-figures: fix the blocks first (--check); nothing was run" >&2
  exit 1
fi
for n in ${only[@]+"${only[@]}"}; do
  if ! awk -F'\t' -v n="$n" '$4 == n { f = 1 } END { exit !f }' <<<"$blocks"; then
    echo "docs-figures: no block named '$n' in ${files[*]}" >&2
    exit 2
  fi
done
chosen() {  # NAME: is it one of --only's (or is there no --only)?
  [ ${#only[@]} -eq 0 ] && return 0
  local n; for n in "${only[@]}"; do [ "$n" = "$1" ] && return 0; done
  return 1
}

# The provenance of whatever this run writes, taken once, before any file changes.
model=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
cpus=$(lscpu 2>/dev/null | sed -n 's/^CPU(s): *//p' | head -1)
host="${model:-unknown} (${cpus:-?} cores)"
host=${host//,/}  # the end line's fields are comma-separated
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || commit="$commit+dirty"
today=$(date +%F)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/docs-figures.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0
ran=0
# Run each chosen block's command; its new content goes to $tmp/<k>.
k=0
while IFS=$'\t' read -r file start end name cmd; do
  [ -n "$file" ] || continue
  k=$((k + 1))
  chosen "$name" || continue
  echo "docs-figures: $name ($file:$start): $cmd" >&2
  out="$tmp/$k.out"
  (cd "$root" && bash -c "$cmd") >"$out" </dev/null
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "docs-figures: FAILED $name ($file:$start): exit $rc from: $cmd (its block is left as it was)" >&2
    status=1; continue
  fi
  if ! grep -q '[^[:space:]]' "$out"; then
    echo "docs-figures: FAILED $name ($file:$start): the command printed nothing: $cmd (its block is left as it was)" >&2
    status=1; continue
  fi
  # a trailing newline, and the fence unless it is a Markdown table
  [ -z "$(tail -c1 "$out")" ] || echo >>"$out"
  if [ "$(grep -m1 '[^[:space:]]' "$out" | cut -c1)" != "|" ]; then
    { echo '```'; cat "$out"; echo '```'; } >"$out.f" && mv "$out.f" "$out"
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$file" "$start" "$end" "$name" "$k" >>"$tmp/done"
  ran=$((ran + 1))
done <<<"$blocks"

# Rewrite each file that has new content: the lines outside the blocks as they were, each rerun
# block's start line, its new content and a new end line.
if [ -f "$tmp/done" ]; then
  while IFS= read -r file; do
    new=$(mktemp "$(dirname "$file")/.$(basename "$file").XXXXXX") || { status=1; continue; }
    awk -F'\t' -v file="$file" -v dir="$tmp" -v host="$host" -v commit="$commit" -v today="$today" '
      FNR == NR { if ($1 == file) { endl[$2] = $3; nm[$2] = $4; src[$2] = dir "/" $5 ".out" } next }
      skip { if (FNR == skip) { printf "%s<!-- end figure %s: host %s, commit %s, date %s -->\n", ind, cur, host, commit, today; skip = 0 } next }
      {
        print
        if (FNR in endl) {
          cur = nm[FNR]; skip = endl[FNR]
          ind = $0; sub(/<.*/, "", ind)  # an indented block (inside a list item): its content too
          while ((getline l < src[FNR]) > 0) print (l == "" ? "" : ind l)
          close(src[FNR])
        }
      }
    ' "$tmp/done" "$file" >"$new" && chmod --reference="$file" "$new" && mv "$new" "$file" ||
      { rm -f "$new"; echo "docs-figures: could not rewrite $file" >&2; status=1; }
  done < <(cut -f1 "$tmp/done" | sort -u)
fi
echo "docs-figures: $ran block(s) rewritten$([ $status -eq 0 ] || echo ', some failed (above)')" >&2
exit $status
