#!/usr/bin/env bash
# The whole test suite: set up (packages, configure, build with warnings as errors), run
# ctest; then the same suite again under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
# One test at a time: each test runs 2 OpenMP threads, and two spinning thread pools on
# 2 cores slow each other down many times over (seen: 4 s → 190 s under ASan).
./scripts/build.sh -DTB_WERROR=ON
ctest --test-dir build --output-on-failure
TB_BUILD_DIR=build-asan ./scripts/build.sh -DTB_WERROR=ON -DTB_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure
