#!/usr/bin/env bash
# The whole test suite: set up (packages, configure, build with warnings as errors), run
# ctest; then the same suite again under AddressSanitizer + UndefinedBehaviorSanitizer.
# The two builds are the two configurations users get: Release with the CUDA toolkit (the
# CUDA backend and NCCL compiled, nvcc warnings as errors; their tests skip without a GPU),
# the sanitized one without it (-DTB_CUDA=OFF: the stubs that say "not built", and the
# warnings the CUDA headers would hide — they switch some off).
set -euo pipefail
cd "$(dirname "$0")/.."
# Two tests at a time: many wait (for a timeout, a drill, a child process) more than they
# compute, and waiting OpenMP threads sleep (OMP_WAIT_POLICY=PASSIVE, set for every test in
# CMakeLists.txt, in place of the engine's choice at start) — spinning thread pools once
# slowed each other 4 s → 190 s under ASan.
jobs=2
# The GPU machine's build, proven here (issue 30): the engine's GPU targets built and started
# in a Debian root holding only what the lent machine's image has, the CUDA toolkit and the
# packages that travel to it (scripts/gpu-check.sh --dry-build). Needs the toolkit (CI has it).
# The root (debootstrap: 75 s on a fresh 2-core machine, 85 s of CPU: unpacking more than
# downloading) is made beside the Release build, whose configure and link steps leave a core
# idle, after the packages (both use apt), as root or where sudo needs no password (a prompt
# cannot reach a background job: there --dry-build makes it, in the foreground). It runs in a
# session of its own (setsid -w: this script has no job control, so setsid does not fork and
# the job's pid is its process group), killed with its children if this script stops first.
# The first test runs once it is made; a failure is shown and --dry-build tries again below.
./scripts/install-deps.sh
have_cuda=0
[ -x "${CUDA_PATH:-${CUDA_HOME:-/usr/local/cuda}}/bin/nvcc" ] && have_cuda=1  # where gpu-check.sh looks
image_pid=""
if [ "$have_cuda" = 1 ] && { [ "$(id -u)" -eq 0 ] || sudo -n true 2>/dev/null; }; then
  mkdir -p .gpu-deps
  setsid -w ./scripts/gpu-check.sh --dry-image >.gpu-deps/dry-image.log 2>&1 </dev/null &
  image_pid=$!
  trap '[ -z "$image_pid" ] || kill -- "-$image_pid" 2>/dev/null || true' EXIT
fi
./scripts/build.sh -DTB_WERROR=ON
if [ -n "$image_pid" ]; then
  image_rc=0
  wait "$image_pid" || image_rc=$?
  image_pid=""
  cat .gpu-deps/dry-image.log
  [ "$image_rc" = 0 ] || echo "test.sh: gpu-check.sh --dry-image failed (status $image_rc); --dry-build tries again" >&2
fi
# The bitwise tests run twice in it: on the host's OpenBLAS kernel, and as <test>.haswell on the
# AVX2 one the AMD hosts run (CMakeLists.txt, label "bitwise"), so that an equality that holds
# for one kernel only fails on any host.
ctest --test-dir build --output-on-failure -j "$jobs"
# The GPU machine's build in the root made above.
if [ "$have_cuda" = 1 ]; then
  ./scripts/gpu-check.sh --dry-build
else
  echo "test.sh: no CUDA toolkit: gpu-check.sh --dry-build not run"
fi
# (a sanitized Debug build is compiled at -O1: CMakeLists.txt)
TB_BUILD_DIR=build-asan ./scripts/build.sh -DTB_WERROR=ON -DTB_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug \
    -DTB_CUDA=OFF
# TB_HANG_REPEATS=1: each hang drill (test_comm_records, test_mpi_failures) once. Their repeats
# measure how reliably the stalled rank is named, which the Release run above checks (6 and 2
# times); here each drill's code paths run under the sanitizers once (30 runs fewer, ~1 minute
# of the suite's 25).
TB_HANG_REPEATS=1 ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$jobs"
