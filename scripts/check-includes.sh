#!/usr/bin/env bash
# The include graph's rule (docs/ARCHITECTURE.md, "Dependencies"): no two modules include
# each other, directly or through others. A module is a source file and its header together
# (foo.c, foo.cu and foo.h: the module foo), with its private header foo_internal.h (what
# foo's own files share, as parsers_*.c share parsers_internal.h); an edge A → B is an
# #include "..." in one of A's files that resolves to one of B's (relative to the including
# file, then to the include roots engine/, experiments/, trace/ and the top). Every strongly
# connected set of more than one module is a circle: printed with the includes that close it,
# file and line, exit 1.
#
# And no arrow back up: the layers file (scripts/include-layers.txt, or --layers FILE; none
# when neither exists) lists the folders lowest layer first, one layer per line. A file
# belongs to the longest listed folder its path starts with (transformer/moe/ is a part of
# transformer/ unless listed itself); an include from one folder into another must go to a
# lower layer: one into the same layer or a higher one is printed with its file and line,
# exit 1, as is a checked file in no listed folder.
#
#   scripts/check-includes.sh [--root DIR] [--layers FILE] [DIR...]
#                                                  (default: core engine experiments trace)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dirs=()
layers=
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root=$(cd "$2" && pwd); shift 2 ;;
    --layers) layers=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
    -*) echo "check-includes: unknown option '$1'" >&2; exit 2 ;;
    *) dirs+=("$1"); shift ;;
  esac
done
[ ${#dirs[@]} -gt 0 ] || dirs=(core engine experiments trace)
cd "$root"
for d in "${dirs[@]}"; do
  [ -d "$d" ] || { echo "check-includes: no directory '$d' under $root" >&2; exit 2; }
done

[ -n "$layers" ] || { [ -f scripts/include-layers.txt ] && layers=$root/scripts/include-layers.txt; } || true
[ -z "$layers" ] || [ -f "$layers" ] || { echo "check-includes: --layers '$layers': no such file" >&2; exit 2; }

# the layers as L<TAB>LAYER<TAB>FOLDER (comments and blank lines skipped), every file of the
# checked directories, then every quoted include as I<TAB>FILE<TAB>LINE<TAB>TARGET
files=$(find "${dirs[@]}" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) | sort)
[ -n "$files" ] || { echo "check-includes: no .c, .h or .cu file under ${dirs[*]}" >&2; exit 2; }
{
  [ -z "$layers" ] || sed -e 's/#.*//' "$layers" | awk 'NF { n++; for (i = 1; i <= NF; i++) print "L\t" n "\t" $i }'
  printf '%s\n' "$files" | sed 's/^/F\t/'
  printf '%s\n' "$files" | xargs grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' |
    sed -E 's/^([^:]+):([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/I\t\1\t\2\t\3/'
} | awk -F'\t' '
function unit(p) { sub(/\.(c|h|cu)$/, "", p); sub(/_internal$/, "", p); return p }
function norm(p,    n, parts, out, i, k) {
    n = split(p, parts, "/"); k = 0
    for (i = 1; i <= n; i++) {
        if (parts[i] == "" || parts[i] == ".") continue
        if (parts[i] == ".." && k > 0 && out[k] != "..") { k--; continue }
        out[++k] = parts[i]
    }
    p = ""
    for (i = 1; i <= k; i++) p = p (i > 1 ? "/" : "") out[i]
    return p
}
function dir(p) { return p ~ /\// ? substr(p, 1, match(p, /\/[^\/]*$/) - 1) : "" }
function resolve(from, h,    c, r) {
    c = norm((dir(from) != "" ? dir(from) "/" : "") h); if (c in file) return c
    split("engine experiments trace .", roots, " ")
    for (r = 1; r <= 4; r++) { c = norm(roots[r] "/" h); if (c in file) return c }
    return ""
}
# Tarjan: strongly connected components over units
function visit(v,    i, w) {
    index_[v] = low[v] = ++counter; stack[++sp] = v; on[v] = 1
    for (i = 1; i <= nout[v]; i++) {
        w = out_[v, i]
        if (!(w in index_)) { visit(w); if (low[w] < low[v]) low[v] = low[w] }
        else if (on[w] && index_[w] < low[v]) low[v] = index_[w]
    }
    if (low[v] == index_[v]) {
        ncomp++; size = 0
        do { w = stack[sp--]; on[w] = 0; comp[w] = ncomp; size++ } while (w != v)
        compsize[ncomp] = size
    }
}
# the longest listed folder p lies in ("" when none)
function folder(p,    d, best) {
    best = ""
    for (d in layer) if ((p == d || index(p, d "/") == 1) && length(d) > length(best)) best = d
    return best
}
$1 == "L" { layer[$3] = $2 + 0; nlayers = $2 + 0; next }
$1 == "F" {
    file[$2] = 1; units[unit($2)] = 1
    if (nlayers && folder(dir($2)) == "") unlayered[++nunlayered] = $2
    next
}
$1 == "I" {
    t = resolve($2, $4); if (t == "") next
    if (nlayers) {
        fa = folder(dir($2)); fb = folder(dir(t))
        if (fa != "" && fb != "" && fa != fb && layer[fb] >= layer[fa])
            up[++nup] = sprintf("  %s:%s: #include \"%s\" (%s, layer %d, is not below %s, layer %d)", $2, $3, $4, fb,
                                layer[fb], fa, layer[fa])
    }
    a = unit($2); b = unit(t); if (a == b) next
    where[a, b] = (where[a, b] != "" ? where[a, b] "\n" : "") "    " $2 ":" $3 ": #include \"" $4 "\""
    if (!((a, b) in seen)) { seen[a, b] = 1; out_[a, ++nout[a]] = b; src[++nedges] = a; dst[nedges] = b }
}
END {
    n = 0
    for (u in units) order[++n] = u
    # a fixed visiting order, so that the report reads the same on every run
    for (i = 2; i <= n; i++) { x = order[i]; for (j = i - 1; j >= 1 && order[j] > x; j--) order[j + 1] = order[j]; order[j + 1] = x }
    for (i = 1; i <= n; i++) if (!(order[i] in index_)) visit(order[i])
    bad = 0
    for (c = 1; c <= ncomp; c++) {
        if (compsize[c] < 2) continue
        bad++
        members = ""
        for (i = 1; i <= n; i++) if (comp[order[i]] == c) members = members " " order[i]
        printf "include circle %d: %d modules:%s\n", bad, compsize[c], members
        for (e = 1; e <= nedges; e++)
            if (comp[src[e]] == c && comp[dst[e]] == c) printf "  %s -> %s\n%s\n", src[e], dst[e], where[src[e], dst[e]]
    }
    if (nup) {
        printf "arrows back up: %d include(s) into a folder of the same or a higher layer:\n", nup
        for (i = 1; i <= nup; i++) print up[i]
    }
    if (nunlayered) {
        printf "files in no layer: %d (list their folder in the layers file):\n", nunlayered
        for (i = 1; i <= nunlayered; i++) print "  " unlayered[i]
    }
    if (bad) printf "check-includes: %d include circle(s) among %d modules\n", bad, n
    if (nup || nunlayered) printf "check-includes: %d arrow(s) back up, %d file(s) in no layer\n", nup, nunlayered
    if (bad || nup || nunlayered) exit 1
    printf "check-includes: %d modules, %d include edges, no circle", n, nedges
    if (nlayers) printf "; %d layers, no arrow back up", nlayers
    printf "\n"
}'
