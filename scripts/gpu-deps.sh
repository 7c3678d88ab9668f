#!/usr/bin/env bash
# The engine's build dependencies as Debian packages that travel to a GPU machine whose image
# has no development packages and no package registry (the device tool's 'cuda' image: nvcc,
# CMake, ninja, gcc, Python with PyTorch and its NCCL wheel; docs/ARCHITECTURE.md, "The GPU
# check"). Only what the engine alone needs (cmake -DTB_ENGINE_ONLY=ON): OpenBLAS with OpenMP
# (and the Fortran runtime it links), jansson, OpenSSL's libcrypto, and pkgconf to read their
# .pc files. No libclang, SQLite, libgit2 or Lua: the indexer and the CLI are not built there.
#
#   scripts/gpu-deps.sh fetch            # here, on Debian 12: apt-get download into .gpu-deps/debs
#   scripts/gpu-deps.sh unpack [PREFIX]  # there (or here): dpkg-deb -x each into PREFIX
#                                        # (default .gpu-deps/prefix), outside /, so nothing
#                                        # of the image is replaced; prints PREFIX
#
# .gpu-deps/ is git-ignored; the device tool carries .gpu-deps/debs (~17 MB). CMake is pointed at
# the prefix with -DTB_DEPS_PREFIX, the programs at its libraries with LD_LIBRARY_PATH
# (`scripts/gpu-deps.sh libpath PREFIX` prints it).
set -euo pipefail
cd "$(dirname "$0")/.."
debs=.gpu-deps/debs
packages=(
  libopenblas0-openmp libopenblas-openmp-dev libopenblas-dev libgfortran5 libquadmath0
  libjansson4 libjansson-dev
  libssl3 libssl-dev
  pkgconf pkgconf-bin libpkgconf3
)
arch_dir=x86_64-linux-gnu

fetch() {
  command -v apt-get >/dev/null || { echo "gpu-deps: fetch needs apt-get (a Debian 12 machine)" >&2; exit 1; }
  local tmp sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  mkdir -p .gpu-deps
  tmp="$(pwd)/$(mktemp -d .gpu-deps/fetch.XXXXXX)"
  # apt-get download writes into the current directory; as root it warns that _apt cannot
  # write there (the download is then done as root): expected, not an error.
  # without package lists (a machine whose packages were all installed before) update them once
  if ! (cd "$tmp" && apt-get download -qq "${packages[@]}" 2>"$tmp/log") &&
     ! { $sudo apt-get update -qq && (cd "$tmp" && apt-get download -qq "${packages[@]}" 2>"$tmp/log"); }; then
    grep -v 'unsandboxed as root' "$tmp/log" >&2 || true
    echo "gpu-deps: apt-get download failed (run apt-get update first?)" >&2
    rm -rf "$tmp"
    exit 1
  fi
  rm -f "$tmp/log"
  rm -rf "$debs"
  mv "$tmp" "$debs"
  echo "gpu-deps: $(ls "$debs" | wc -l) packages in $debs ($(du -sh "$debs" | cut -f1)):"
  ls "$debs" | sed 's/^/  /'
}

unpack() {
  local prefix=${1:-.gpu-deps/prefix} n=0
  ls "$debs"/*.deb >/dev/null 2>&1 || { echo "gpu-deps: no packages in $debs (scripts/gpu-deps.sh fetch)" >&2; exit 1; }
  command -v dpkg-deb >/dev/null || { echo "gpu-deps: unpack needs dpkg-deb" >&2; exit 1; }
  mkdir -p "$prefix"
  for d in "$debs"/*.deb; do
    dpkg-deb -x "$d" "$prefix" || { echo "gpu-deps: could not unpack $d into $prefix" >&2; exit 1; }
    n=$((n + 1))
  done
  [ -f "$prefix/usr/include/$arch_dir/openblas-openmp/cblas.h" ] ||
    { echo "gpu-deps: $prefix has no OpenBLAS (openblas-openmp/cblas.h) after unpacking $n packages" >&2; exit 1; }
  echo "$(cd "$prefix" && pwd)"
}

libpath() {
  local p
  p=$(cd "${1:?libpath PREFIX}" && pwd)
  echo "$p/usr/lib/$arch_dir:$p/usr/lib/$arch_dir/openblas-openmp"
}

case "${1:-}" in
  fetch) fetch ;;
  unpack) shift; unpack "$@" ;;
  libpath) shift; libpath "$@" ;;
  *) echo "usage: scripts/gpu-deps.sh fetch | unpack [PREFIX] | libpath PREFIX" >&2; exit 2 ;;
esac
