#!/usr/bin/env bash
# The docs' figures and claims of absence (README.md and docs/*.md).
#
#   tests/repo/test_docs_figures.sh TRACEBOOK PRETRAIN_GPT    (CMakeLists.txt passes both binaries)
#
# 1. scripts/docs-figures.sh --check passes: every figure block has a command, an end line with
#    host, commit and date, and matching NAMEs; and --check refuses each kind of broken block.
# 2. --only NAME --file COPY reruns one cheap block (README.md's plan-70b, a `tracebook plan`) on a
#    copy of README.md in a temporary directory: its content becomes the command's output and its
#    end line today's host, commit and date; the rest of the copy and the real README are unchanged.
#    A block whose command fails is left as it was, and the script exits 1 naming it.
# 3. No claim of absence the binaries contradict: a paragraph that says a tracebook subcommand or
#    a flag (in backticks) is missing — "Not here: `tracebook X`", "no `tracebook X`", "no
#    `--flag`", or "`tracebook X`"/"`--flag`" followed within its clause by "not built", "not here",
#    "does not exist yet" or "not supported yet" — fails when `tracebook --help` lists X, or, for a
#    flag, when `pretrain_gpt --help` or the paragraph's named subcommand's --help has it. A flag
#    said "not supported yet" is the engine's convention for a flag parsed and refused, so it fails
#    only when its help line does not mark it "(not supported yet)" either. Checked first on a
#    fixture with two stale claims and two true ones.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
tracebook=${1:-build/bin/tracebook}
pretrain=${2:-build/bin/pretrain_gpt}
script=scripts/docs-figures.sh
fail() { echo "FAIL: $*"; exit 1; }
[ -x "$tracebook" ] && [ -x "$pretrain" ] || fail "no binaries ($tracebook, $pretrain): build first"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_docs_figures.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# --- 1. the blocks' structure ---------------------------------------------------------------
out=$("$script" --check 2>&1) || fail "docs-figures.sh --check: $out"
echo "ok: $out"

check_refuses() {  # NAME WANT: the fixture $tmp/bad.md must make --check exit 1 naming WANT
  local out rc
  out=$("$script" --check --file "$tmp/bad.md" 2>&1); rc=$?
  [ "$rc" -eq 1 ] && grep -qF -- "$2" <<<"$out" || fail "$1: --check exit $rc, expected 1 naming '$2'; output: $out"
  echo "ok: --check refuses $1"
}
printf '<!-- figure a: -->\nx\n<!-- end figure a: host h, commit c, date 2026-01-01 -->\n' >"$tmp/bad.md"
check_refuses "a block without a command" 'a block without a command'
printf '<!-- figure a: echo 1 -->\nx\n<!-- end figure a: host h, date 2026-01-01 -->\n' >"$tmp/bad.md"
check_refuses "an end line without its commit" 'the end line lacks "host HOST, commit COMMIT, date YYYY-MM-DD"'
printf '<!-- figure a: echo 1 -->\nx\n<!-- end figure a: host h, commit c, date yesterday -->\n' >"$tmp/bad.md"
check_refuses "an end line with a date not YYYY-MM-DD" 'the end line lacks'
printf '<!-- figure a: echo 1 -->\nx\n<!-- end figure b: host h, commit c, date 2026-01-01 -->\n' >"$tmp/bad.md"
check_refuses "mismatched NAMEs" 'the end line names "b", the block (line 1) "a"'
printf '<!-- figure a: echo 1 -->\nx\n' >"$tmp/bad.md"
check_refuses "a block never closed" 'block "a" (line 1) is not closed'
printf '<!-- figure a: echo 1 -->\nx\n<!-- end figure a: host h, commit unknown, date 2026-01-01 -->\n' >"$tmp/bad.md"
check_refuses "an unknown commit" 'the end line lacks'
printf '<!-- figure a: echo 1 -->\nx\n<!-- end figure a: host h, commit c, date unknown -->\n' >"$tmp/bad.md"
check_refuses "an unknown date" 'the end line lacks'
printf '<!-- figure a: echo 1 -->\n<!-- end figure a: host h, commit c, date 2026-01-01 -->\n<!-- figure a: echo 2 -->\n<!-- end figure a: host h, commit c, date 2026-01-01 -->\n' >"$tmp/bad.md"
check_refuses "a NAME used twice" 'the NAME "a" is used twice'

# --- 2. one block rerun on a copy -----------------------------------------------------------
name=plan-70b
cmd=$("$script" --list --file README.md | awk -F'\t' -v n="$name" '$1 == n { print $3 }')
[ -n "$cmd" ] || fail "README.md has no block $name (--list: $("$script" --list --file README.md))"
[ -x build/bin/tracebook ] || fail "the block's command needs build/bin/tracebook: $cmd"
cp README.md "$tmp/README.md"
# make the copy's block stale: other content, an old end line
awk -v n="$name" '
  $0 ~ "^<!-- figure " n ": " { print; print "stale content"; skip = 1; next }
  skip && $0 ~ "^<!-- end figure " n ": " { print "<!-- end figure " n ": host nowhere, commit 000000000000, date 2000-01-01 -->"; skip = 0; next }
  skip { next }
  { print }' README.md >"$tmp/README.md"
grep -qx 'stale content' "$tmp/README.md" || fail "could not make the copy's block stale"
before_readme=$(sha256sum README.md)
out=$("$script" --only "$name" --file "$tmp/README.md" 2>&1) || fail "--only $name --file copy: $out"
[ "$(sha256sum README.md)" = "$before_readme" ] || fail "--file COPY rewrote the real README.md"
want=$(printf '```\n%s\n```' "$(bash -c "$cmd")")
got=$(awk -v n="$name" '$0 ~ "^<!-- figure " n ": " { on = 1; next } $0 ~ "^<!-- end figure " n ": " { on = 0 } on' "$tmp/README.md")
[ "$got" = "$want" ] || fail "the rerun block's content is not the command's output:
--- got
$got
--- want
$want"
end=$(grep "^<!-- end figure $name: " "$tmp/README.md")
commit=$(git rev-parse --short=12 HEAD)
[[ "$end" =~ ^'<!-- end figure '"$name"': host '.+' ('[0-9?]+' cores), commit '"$commit"(\+dirty)?', date '"$(date +%F)"' -->'$ ]] ||
  fail "the end line is not today's provenance (commit $commit, $(date +%F)): $end"
# everything outside the block as it was
diff <(awk -v n="$name" '$0 ~ "^<!-- figure " n ": " { print; skip = 1; next } $0 ~ "^<!-- end figure " n ": " { skip = 0; next } !skip' README.md) \
     <(awk -v n="$name" '$0 ~ "^<!-- figure " n ": " { print; skip = 1; next } $0 ~ "^<!-- end figure " n ": " { skip = 0; next } !skip' "$tmp/README.md") >/dev/null ||
  fail "--only $name changed the copy outside its block"
echo "ok: --only $name --file COPY replaced the block's content with its command's output and its end line with: ${end#*: }"

printf 'a\n<!-- figure broken: echo partial; exit 3 -->\nkept\n<!-- end figure broken: host h, commit c, date 2026-01-01 -->\nb\n' >"$tmp/fails.md"
cp "$tmp/fails.md" "$tmp/fails.orig"
out=$("$script" --file "$tmp/fails.md" 2>&1); rc=$?
[ "$rc" -eq 1 ] && grep -qF 'FAILED broken' <<<"$out" && cmp -s "$tmp/fails.md" "$tmp/fails.orig" ||
  fail "a failing command: exit $rc, the block must stay as it was and be named; output: $out"
echo "ok: a failing command leaves its block as it was, exit 1 naming it"

# --- 3. claims of absence against the binaries ----------------------------------------------
# Prints one line per claim: KIND<TAB>NAME<TAB>SUBCOMMAND<TAB>FILE<TAB>EXCERPT, KIND "sub" (a
# tracebook subcommand said missing), "flag" (a flag said missing) or "refused" (a flag said
# "not supported yet"); SUBCOMMAND the paragraph's first `tracebook X`, or "-".
claims() {
  awk '
    function clause(s,   i) { s = substr(s, 1, 80); i = index(s, "`"); if (i) s = substr(s, 1, i - 1)
                              i = index(s, ". "); if (i) s = substr(s, 1, i - 1); return tolower(s) }
    function phrase(s) { return s ~ /not supported yet|not built|not here|does not exist yet|do not exist yet/ }
    function attached(s) { return s ~ /^[ :(]*((is|are) )?(not supported yet|not built|not here|does not exist yet|do not exist yet)/ }
    function nothere(before,   i, last, t) {  # inside a clause that starts "Not here:"
      last = 0; t = before
      while ((i = index(t, "Not here:")) > 0) { last += i; t = substr(t, i + 1) }
      if (!last) return 0
      t = substr(before, last); return index(t, ". ") == 0 && index(t, "; ") == 0
    }
    function scan(p, f,   rest, before, after, tok, name, sub_, off, ex) {
      if (p == "") return
      sub_ = "-"
      if (match(p, /`tracebook [a-z]+[` ]/)) sub_ = substr(p, RSTART + 11, RLENGTH - 12)
      rest = p; off = 0
      while (match(rest, /`(tracebook [a-z]+|--[a-z0-9][a-z0-9-]*)[^`]*`/)) {
        tok = substr(rest, RSTART + 1, RLENGTH - 2)
        before = substr(p, 1, off + RSTART - 1); after = substr(rest, RSTART + RLENGTH)
        ex = substr(rest, RSTART, 120)
        if (tok ~ /^tracebook /) {
          name = tok; sub(/^tracebook /, "", name); sub(/ .*/, "", name)
          if (nothere(before) || before ~ /(^|[^A-Za-z])[Nn]o $/ || phrase(clause(after)))
            printf "sub\t%s\t%s\t%s\t%s\n", name, "-", f, ex
        } else {
          name = tok; sub(/[ =].*/, "", name)
          if (nothere(before) || before ~ /(^|[^A-Za-z])[Nn]o $/ || (attached(clause(after)) && clause(after) !~ /not supported yet/))
            printf "flag\t%s\t%s\t%s\t%s\n", name, sub_, f, ex
          else if (attached(clause(after)))
            printf "refused\t%s\t%s\t%s\t%s\n", name, sub_, f, ex
        }
        off += RSTART + RLENGTH - 1; rest = after
      }
    }
    function flush() { scan(para, fname); para = "" }
    FNR == 1 { flush(); fname = FILENAME; infence = 0 }
    /^ *```/ { flush(); infence = !infence; next }
    infence { next }
    /^[ \t]*$/ || /^#/ || /^ *<!--/ { flush(); next }
    /^[ \t]*([-*]|[0-9]+\.) / { flush() }
    { para = para " " $0 }
    END { flush() }
  ' "$@"
}
subcommands=$("$tracebook" --help | awk '/^  [a-z]+  / { print $1 }')
[ -n "$subcommands" ] || fail "no subcommands in $tracebook --help"
"$pretrain" --help >"$tmp/pretrain.help" 2>&1
help_of() {  # the --help text the flag is looked up in: pretrain_gpt's, and the named subcommand's
  cat "$tmp/pretrain.help"
  if [ "$1" != - ] && grep -qx "$1" <<<"$subcommands"; then "$tracebook" "$1" --help 2>&1; fi
}
contradictions() {  # FILE...: one line per claim the binaries contradict
  claims "$@" | while IFS=$'\t' read -r kind name sub_ file ex; do
    case "$kind" in
      sub) grep -qx "$name" <<<"$subcommands" && echo "$file: says \`tracebook $name\` is missing, but tracebook --help lists it: $ex" ;;
      flag) line=$(help_of "$sub_" | grep -E -- "^ +$name([ ={]|$)" | head -1)
            [ -n "$line" ] && echo "$file: says \`$name\` is missing, but --help has it: ${line# *}" ;;
      refused) line=$(help_of "$sub_" | grep -E -- "^ +$name([ ={]|$)" | head -1)
               [ -n "$line" ] && ! grep -q 'not supported yet' <<<"$line" &&
                 echo "$file: says \`$name\` is not supported yet, but its --help line does not say so: ${line# *}" ;;
    esac
  done
}
cat >"$tmp/absence.md" <<'EOF'
# A fixture

Not here: `tracebook plan` (built on another branch).

There is no `--tensor-model-parallel-size` in this engine.

`--frobnicate-the-ranks` (not supported yet) and `tracebook frobnicate` does not exist yet.
EOF
found=$(contradictions "$tmp/absence.md")
[ "$(grep -c . <<<"$found")" -eq 2 ] && grep -qF '`tracebook plan` is missing' <<<"$found" &&
  grep -qF '`--tensor-model-parallel-size` is missing' <<<"$found" ||
  fail "the fixture's two stale claims of absence (and only those) must be found; found:
$found"
echo "ok: a fixture's stale claims of absence are found, its true ones pass"

docs=(README.md docs/*.md)
n=$(claims "${docs[@]}" | grep -c .)
found=$(contradictions "${docs[@]}")
[ -z "$found" ] || fail "claims of absence the binaries contradict:
$found"
echo "ok: $n claims of absence in ${#docs[@]} docs, none contradicted by tracebook --help, pretrain_gpt --help or a subcommand's --help"
