#!/usr/bin/env bash
# scripts/check-includes.sh finds what it names: a circle of three modules in a fixture is
# refused (exit 1) with each include that closes it, file and line; a fixture whose modules
# form a diamond, one with a private header that includes its own public one
# (foo_internal.h, part of foo), passes. With a layers file: the diamond's folders in their
# order pass; upside down, or both in one layer, each include into the other folder is
# refused as an arrow back up, file and line; a file in no listed folder is refused by name.
set -uo pipefail
cd "$(dirname "$0")/../.."
check=scripts/check-includes.sh
fixtures=tests/repo/fixtures/include_graph
fail() { echo "FAIL: $*"; exit 1; }

out=$("$check" --root "$fixtures/circle" src 2>&1); rc=$?
[ "$rc" -eq 1 ] || fail "a circle of three modules: exit $rc, expected 1; output: $out"
for want in 'include circle 1: 3 modules: src/ring_a src/ring_b src/ring_c' \
            'src/ring_a.c:1: #include "ring_b.h"' 'src/ring_b.c:1: #include "ring_c.h"' \
            'src/ring_c.c:1: #include "ring_a.h"'; do
  grep -qF -- "$want" <<<"$out" || fail "the circle's report lacks '$want'; output: $out"
done
echo "ok: a circle of three modules is refused, naming each include that closes it"

out=$("$check" --root "$fixtures/layered" src 2>&1); rc=$?
[ "$rc" -eq 0 ] || fail "a diamond with a private header: exit $rc, expected 0; output: $out"
grep -qF 'check-includes: 4 modules, 4 include edges, no circle' <<<"$out" || fail "unexpected summary: $out"
echo "ok: a diamond, with a module's private header including its public one, passes"

layers=$fixtures/layers
out=$("$check" --root "$fixtures/layered" --layers "$layers/right.txt" src 2>&1); rc=$?
[ "$rc" -eq 0 ] || fail "src/sub below src: exit $rc, expected 0; output: $out"
grep -qF '2 layers, no arrow back up' <<<"$out" || fail "unexpected summary: $out"
echo "ok: folders in their layers' order pass"

for wrong in upside_down same_layer; do
  out=$("$check" --root "$fixtures/layered" --layers "$layers/$wrong.txt" src 2>&1); rc=$?
  [ "$rc" -eq 1 ] || fail "$wrong: exit $rc, expected 1; output: $out"
  for want in 'src/mid.c:2: #include "sub/low.h" (src/sub, layer' 'src/top.c:2: #include "src/sub/low.h" (src/sub, layer' \
              'check-includes: 2 arrow(s) back up, 0 file(s) in no layer'; do
    grep -qF -- "$want" <<<"$out" || fail "$wrong: the report lacks '$want'; output: $out"
  done
done
echo "ok: an include into a folder of the same or a higher layer is refused, file and line"

out=$("$check" --root "$fixtures/layered" --layers "$layers/partial.txt" src 2>&1); rc=$?
[ "$rc" -eq 1 ] && grep -qxF '  src/mid.c' <<<"$out" && grep -qF '0 arrow(s) back up, 6 file(s) in no layer' <<<"$out" ||
  fail "files in no layer: exit $rc, output: $out"
echo "ok: a file in no listed folder is refused by name"

out=$("$check" --root "$fixtures/layered" --layers "$layers/nosuch.txt" src 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -qF "no such file" <<<"$out" || fail "a missing layers file: exit $rc, output: $out"
echo "ok: a layers file that does not exist is refused by name"

out=$("$check" --root "$fixtures/layered" nosuchdir 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -qF "no directory 'nosuchdir'" <<<"$out" || fail "a missing directory: exit $rc, output: $out"
echo "ok: a directory that does not exist is refused by name"
