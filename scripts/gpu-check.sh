#!/usr/bin/env bash
# gpu-check.sh — what a machine with a GPU runs in one go (docs/ARCHITECTURE.md, "The GPU
# check"). Builds the engine with CUDA (cmake -DTB_ENGINE_ONLY=ON: no indexer, no CLI) against
# what travels with the tree where the machine lacks it (scripts/gpu-deps.sh: Debian packages
# unpacked into a prefix outside /; NCCL from PyTorch's nvidia-nccl wheel when the toolkit has
# none); runs the kernel tests (each kernel against the CPU's); benchmarks GPT-2 124M --bf16 on
# --device cuda beside a same-run PyTorch reference of the same model and shapes; runs the
# kernel tests under compute-sanitizer memcheck; times every kernel of one step with Nsight
# Compute (summed by name); then the training tests (--device cuda
# against --device cpu: fp32, bf16, fp16, an OOM under a cap, checkpoints, and with two GPUs
# TP, SP, DP, the distributed optimizer, PP, CP, DDP overlap, MoE and mpirun over NCCL) — a
# skip is a failure here, but for the parts that need two GPUs on a one-GPU machine.
#
# Every stage has its own timeout; a failed stage is reported and the next one runs. The
# summary (every stage, its figures, the GPU, driver and clocks, the benchmark's loss and phase
# times, the reference and the ratio) goes to stdout and to DIR/gpu-check.txt; the stages' logs
# and the benchmark's metrics to DIR/gpu-check-logs.tar.gz: two files. Exit status: 0 when every
# stage passed, 1 otherwise.
#
#   scripts/gpu-check.sh [DIR]        # on the GPU machine; DIR default $OUT, else artifacts/;
#                                     # total under TB_GPU_CHECK_BUDGET s (570) on one H200
#   scripts/gpu-check.sh --dry-build  # here, on a CPU machine with the CUDA toolkit: the build
#                                     # above (and its programs loading) in a Debian root that
#                                     # holds only what the GPU image is documented to have
#                                     # (gcc, g++, CMake, ninja, Python, dpkg), the toolkit and
#                                     # the carried packages; NCCL laid out as the wheel lays it
#   scripts/gpu-check.sh --dry-image  # only that Debian root (made once; what --dry-build makes
#                                     # first when it is missing): test.sh makes it beside its
#                                     # Release build
#   scripts/gpu-check.sh --build-only # the build and the load check alone (what --dry-build
#                                     # runs inside that root)
#
#   On the device tool: run with carry [".gpu-deps/debs"] after `scripts/gpu-deps.sh fetch`.
#   TB_GPU_BUILD_DIR (default build-gpu), TB_GPU_ARCH (CMAKE_CUDA_ARCHITECTURES; default native
#   with a GPU, 90 without), TB_NCCL_ROOT (NCCL's include/ and lib/; default: the Python wheel's
#   when the toolkit has no nccl.h), TB_PEAK_TFLOPS (the bf16 peak MFU is measured against,
#   when the GPU is not an A100/H100/H200).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
mode=check
case "${1:-}" in
  --dry-build) mode=dry; shift ;;
  --dry-image) mode=dry_image; shift ;;
  --build-only) mode=build_only; shift ;;
  -*) echo "gpu-check: unknown option '$1' (--dry-build, --dry-image, --build-only, or a results directory)" >&2
      exit 2 ;;
esac
build=${TB_GPU_BUILD_DIR:-build-gpu}
jobs=$(nproc)
cuda=${CUDA_PATH:-${CUDA_HOME:-/usr/local/cuda}}
export PATH="$cuda/bin:$PATH"

# --- the build's inputs: the carried packages and NCCL ------------------------------------------
# deps_setup: unpacks .gpu-deps/debs (when carried) into .gpu-deps/prefix and points the loader
# at it; sets $deps_prefix (empty: the system's own packages) and $nccl_root (empty: the
# toolkit's NCCL).
deps_setup() {
  deps_prefix=""
  if ls .gpu-deps/debs/*.deb >/dev/null 2>&1; then
    rm -rf .gpu-deps/prefix
    deps_prefix=$(scripts/gpu-deps.sh unpack .gpu-deps/prefix) || return 1
    export LD_LIBRARY_PATH="$(scripts/gpu-deps.sh libpath "$deps_prefix")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  nccl_root=${TB_NCCL_ROOT:-}
  if [ -z "$nccl_root" ] && command -v python3 >/dev/null; then
    # PyTorch's NCCL wheel (nvidia-nccl-cu13: site-packages/nvidia/nccl/{include,lib}), the one
    # PyTorch runs on this driver, before the toolkit's (the GPU image's toolkit may have none)
    # nvidia/nccl/ in the cu12 wheels; the CUDA 13 wheels may use nvidia/cu13/: any nvidia/*/
    # folder with include/nccl.h and lib/libnccl.so.2
    nccl_root=$(python3 -c 'import glob, nvidia, os
for p in nvidia.__path__:
    for h in sorted(glob.glob(os.path.join(p, "*", "include", "nccl.h"))):
        r = os.path.dirname(os.path.dirname(h))
        if glob.glob(os.path.join(r, "lib", "libnccl.so*")):
            print(r)
            raise SystemExit' 2>/dev/null || true)
    [ -f "$nccl_root/include/nccl.h" ] || nccl_root=""
  fi
  if [ -n "$nccl_root" ]; then
    export LD_LIBRARY_PATH="$nccl_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  # the toolkit's runtime (cudart, cuBLASLt): nvcc links it from a directory CMake treats as
  # implicit, so the programs carry no run path to it, and the image may not list it for ld.so
  [ -d "$cuda/lib64" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH${LD_LIBRARY_PATH:+:}$cuda/lib64"
  echo "dependencies: ${deps_prefix:-the system's packages}; NCCL: ${nccl_root:-the CUDA toolkit's ($cuda)}"
}

build_step() {
  local gpu_targets=(pretrain_gpt bench_gpt bench_cuda test_cuda_kernels test_cuda_device test_cuda_training test_nccl)
  local gen=() arch=${TB_GPU_ARCH:-}
  command -v ninja >/dev/null && gen=(-G Ninja)
  if [ -z "$arch" ]; then
    if nvidia-smi -L >/dev/null 2>&1; then arch=native; else arch=90; fi
  fi
  mkdir -p "$build/.cmake/api/v1/query" && touch "$build/.cmake/api/v1/query/codemodel-v2"
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTB_ENGINE_ONLY=ON -DTB_CUDA=ON -DTB_WERROR=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" ${deps_prefix:+-DTB_DEPS_PREFIX="$deps_prefix"} \
    ${nccl_root:+-DTB_NCCL_ROOT="$nccl_root"} &&
    cmake --build "$build" -j"$jobs" --target "${gpu_targets[@]}"
}

# load_check: the programs start with the libraries the build linked (the carried ones through
# LD_LIBRARY_PATH): each GPU test names why it skips (exit 77) or passes where no GPU is
# visible, test_cuda_device passes, and pretrain_gpt refuses --device cuda naming the cause.
load_check() {
  local t rc out
  for t in test_cuda_kernels test_cuda_training test_nccl; do
    out=$("$build/tests/$t" 2>&1) && rc=0 || rc=$?
    echo "$t: exit $rc: $(printf '%s\n' "$out" | tail -n 1)"
    [ $rc -eq 77 ] || [ $rc -eq 0 ] || return 1
  done
  "$build/tests/test_cuda_device" >/dev/null 2>&1 || { echo "test_cuda_device failed"; "$build/tests/test_cuda_device" 2>&1 | tail -n 5; return 1; }
  echo "test_cuda_device: passed"
  rm -rf "$build/load-check"  # (pretrain_gpt takes a new or empty --run-dir)
  out=$("$build/bin/pretrain_gpt" --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 8 \
    --micro-batch-size 1 --vocab-size 64 --train-iters 1 --device cuda --run-dir "$build/load-check" 2>&1) && rc=0 || rc=$?
  echo "pretrain_gpt --device cuda: exit $rc: $(printf '%s\n' "$out" | grep -m1 -E 'error|GPU|cuda' || true)"
  [ $rc -eq 0 ] || [ $rc -eq 2 ]
}

if [ "$mode" = build_only ]; then
  deps_setup
  build_step
  load_check
  echo "gpu-check --build-only: built the GPU targets in $build; every program loaded"
  exit 0
fi

if [ "$mode" = dry ] || [ "$mode" = dry_image ]; then
  # A Debian 12 root with what the GPU image is documented to have (the device tool's KINDS.md:
  # gcc/g++ as nvcc's host compiler, CMake, ninja, Python; dpkg to unpack), and no development
  # package: no pkg-config, OpenBLAS, jansson, OpenSSL headers, make. Built once with
  # debootstrap into .gpu-deps/image-root (git-ignored); the toolkit and this tree are bound
  # into it at their own paths, NCCL is put where the wheel puts it, and the build runs there.
  image_packages="gcc,g++,cmake,ninja-build,python3"
  me="gpu-check --dry-build"
  [ "$mode" = dry ] || me="gpu-check --dry-image"
  [ -x "$cuda/bin/nvcc" ] || { echo "$me: no CUDA toolkit at $cuda (nvcc)" >&2; exit 1; }
  [ -f "$cuda/include/nccl.h" ] || { echo "$me: no nccl.h in $cuda/include to lay out as the wheel" >&2; exit 1; }
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "$me: needs root (or sudo) for debootstrap, mounts and chroot" >&2; exit 1; }
    sudo=sudo
  fi
  command -v debootstrap >/dev/null || { echo "$me: needs debootstrap (scripts/install-deps.sh)" >&2; exit 1; }
  $sudo unshare --mount --propagation private true 2>/dev/null ||
    { echo "$me: needs a private mount namespace (unshare --mount: root with CAP_SYS_ADMIN)" >&2; exit 1; }
  ls .gpu-deps/debs/*.deb >/dev/null 2>&1 || scripts/gpu-deps.sh fetch
  image=.gpu-deps/image-root
  if [ "$(cat "$image.packages" 2>/dev/null)" != "$image_packages" ] || [ ! -x "$image/usr/bin/cmake" ]; then
    mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
    mirror=${mirror:-http://deb.debian.org/debian}
    echo "$me: a Debian 12 root ($image_packages) from $mirror into $image"
    $sudo rm -rf "$image" "$image.packages" "$image.tmp"
    t0=$SECONDS
    $sudo debootstrap --variant=minbase --include="$image_packages" bookworm "$image.tmp" "$mirror" >.gpu-deps/debootstrap.log 2>&1 ||
      { tail -n 20 .gpu-deps/debootstrap.log >&2; echo "$me: debootstrap failed" >&2; exit 1; }
    $sudo mv "$image.tmp" "$image"
    echo "$image_packages" >"$image.packages"
    echo "$me: root made in $((SECONDS - t0)) s"
  fi
  for absent in pkg-config pkgconf make; do
    [ ! -e "$image/usr/bin/$absent" ] || { echo "$me: $image has $absent, which the GPU image lacks" >&2; exit 1; }
  done
  if [ "$mode" = dry_image ]; then
    echo "gpu-check --dry-image: $image holds $image_packages and none of pkg-config, pkgconf, make"
    exit 0
  fi
  # NCCL as nvidia-nccl-cu13 lays it out (site-packages/nvidia/nccl/{include,lib}, libnccl.so.2
  # and no unversioned link), from the toolkit's own files; the build is pointed at it by
  # gpu-check's own lookup (TB_NCCL_ROOT from python3), not by hand.
  pyver=$($sudo chroot "$image" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  wheel="$image/usr/local/lib/python$pyver/dist-packages/nvidia/nccl"
  $sudo rm -rf "$image/usr/local/lib/python$pyver/dist-packages/nvidia"
  $sudo mkdir -p "$wheel/include" "$wheel/lib"
  $sudo touch "$wheel/__init__.py"
  $sudo cp "$cuda/include/nccl.h" "$wheel/include/"
  $sudo cp -L "$(ls "$cuda"/lib64/libnccl.so.2 "$cuda"/lib/libnccl.so.2 2>/dev/null | head -n 1)" "$wheel/lib/libnccl.so.2"
  cuda_real=$(readlink -f "$cuda")
  $sudo env TB_DRY_IMAGE="$image" TB_DRY_ROOT="$root" TB_DRY_CUDA="$cuda_real" TB_DRY_BUILD="${TB_GPU_BUILD_DIR:-build-gpu-dry}" \
    unshare --mount --propagation private bash -euo pipefail -c '
      R=$(readlink -f "$TB_DRY_IMAGE")
      mkdir -p "$R/proc" "$R/dev" "$R/tmp"
      mount --rbind /dev "$R/dev"
      mount -t proc proc "$R/proc"
      mount -t tmpfs tmpfs "$R/tmp"
      # after the tmpfs: a checkout or toolkit under /tmp gets its mount point on it, not under it
      mkdir -p "$R$TB_DRY_CUDA" "$R$TB_DRY_ROOT"
      mount --bind -o ro "$TB_DRY_CUDA" "$R$TB_DRY_CUDA"
      mount --bind "$TB_DRY_ROOT" "$R$TB_DRY_ROOT"
      # nvcc under /usr/local/cuda, as on the image, whatever the toolkit folder is called
      [ "$TB_DRY_CUDA" = /usr/local/cuda ] || ln -sfn "$TB_DRY_CUDA" "$R/usr/local/cuda"
      exec chroot "$R" env -i PATH=/usr/local/cuda/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 \
        TB_GPU_BUILD_DIR="$TB_DRY_BUILD" bash -c "cd \"$TB_DRY_ROOT\" && scripts/gpu-check.sh --build-only"'
  echo "gpu-check --dry-build: passed (the GPU targets built and loaded in a root with the toolkit, the carried packages and the wheel's NCCL)"
  exit 0
fi

# --- the check on a GPU machine -------------------------------------------------------------------
dir=${1:-${OUT:-$root/artifacts}}
mkdir -p "$dir"
res=$dir/gpu-check.txt
logs=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-logs.XXXXXX")
budget=${TB_GPU_CHECK_BUDGET:-570}
export logs build jobs cuda
# From here each stage's failure is caught and reported (stage returns its status), so that
# the next stage still runs: errexit is off for the stages, pipefail and nounset stay.
set +e
: >"$res"
failures=0

say() { printf '%s\n' "$*" | tee -a "$res"; }
indent() { sed 's/^/    /' | tee -a "$res"; }
# stage NAME TIMEOUT_S FUNCTION [ARGS...]: runs the function (exported, in a bash of its own, so
# that timeout can end it and all it started) with a timeout, its output in $logs/NAME.log.
# The whole script keeps under TB_GPU_CHECK_BUDGET seconds (default 570): a stage gets at most
# what is left, and one with under 20 s left is not started (reported as failed).
stage() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - SECONDS))
  if [ $left -lt 20 ]; then
    say "FAIL $name: not started, the ${budget}s budget is spent"
    failures=$((failures + 1))
    return 1
  fi
  [ "$limit" -gt $left ] && limit=$left
  local t0=$SECONDS
  export -f "$1"
  timeout --kill-after=10 "$limit" bash -o pipefail -c '"$@"' stage "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  local took=$((SECONDS - t0))
  if [ $rc -eq 0 ]; then
    say "PASS $name (${took}s)"
  else
    [ $rc -eq 124 ] && say "FAIL $name: timed out after ${limit}s" || say "FAIL $name: exit $rc (${took}s)"
    failures=$((failures + 1))
    tail -n 15 "$logs/$name.log" | indent
  fi
  return $rc
}
finish() {
  say "gpu-check: $failures stage(s) failed; $(basename "$res") and gpu-check-logs.tar.gz in $dir"
  tar -C "$logs" -czf "$dir/gpu-check-logs.tar.gz" . && rm -rf "$logs"
  [ $failures -eq 0 ]
  exit
}

# The device tool copies the working tree but not always its current git metadata: the caller
# may state the commit the tree holds (TB_TREE_REV), printed beside what git says here.
say "gpu-check $(date -u +%FT%TZ) at $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)')$(git diff --quiet 2>/dev/null || echo ' (dirty or no git)')${TB_TREE_REV:+; the caller states the tree is commit $TB_TREE_REV}"
say "host: $(nproc) cores, $(uname -r); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
say "GPU: $(nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit \
  --format=csv,noheader 2>/dev/null | tr '\n' ';' || echo 'nvidia-smi: not found')"
say "nvcc: $(nvcc --version 2>/dev/null | grep -m1 -o 'release [^,]*, V[0-9.]*' || echo 'not found'); cmake: $(cmake --version | head -n 1)"
say "python3: $(python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -n 1)"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
export ngpu

# --- 1. build: the carried packages unpacked (here, so that every stage's programs find them),
# then the GPU targets (load_check is --build-only's: with a GPU its programs would run whole,
# and the stages below run them)
deps_setup >"$logs/deps.log" 2>&1 || { say "FAIL deps"; indent <"$logs/deps.log"; failures=$((failures + 1)); finish; }
indent <"$logs/deps.log"
export deps_prefix nccl_root LD_LIBRARY_PATH
stage build 240 build_step
built=$?
[ $built -eq 0 ] || { say "FAIL everything else: not run, the build failed"; failures=$((failures + 1)); finish; }

# --- 2. the GPU tests through ctest: each must run, none may skip (ctest counts a skip as a
# pass; here a test skipped whole, exit 77, or in part, a SKIP line, fails the stage). Allowed:
# test_cuda_device's no-GPU refusal (it skips where a GPU is visible) and, on one GPU, the
# parts that need two.
gpu_tests() {
  local out rc allowed="a GPU is visible \(test_cuda_training runs on it\)"
  [ "${ngpu:-0}" -lt 2 ] && allowed="$allowed|GPU\(s\) visible, needs 2"
  out=$(ctest --test-dir "$build" -R "^engine[.]test_($1)\$" -V 2>&1)
  rc=$?
  printf '%s\n' "$out"
  if grep -E "Skipped|SKIP" <<<"$out" | grep -qvE "$allowed"; then
    echo "gpu_tests: something was skipped on a machine that should run it all"
    return 1
  fi
  return $rc
}
results() {
  grep -E "Skipped|SKIP|: (ok|FAIL) |passed, |10 x gelu|device 0 of|tests passed|\((cpu|cuda) / cuda|resumed on|tensors bitwise" \
    "$logs/$1.log" | indent
}
stage gpu_kernels 90 gpu_tests 'cuda_kernels|cuda_device' && results gpu_kernels

# --- 3. GPT-2 124M on the GPU, --bf16, B 16, T 1024: the engine, then PyTorch on the same
# shapes in the same run. The engine's figures are the median over steps 2..10 of its metrics
# (step 1 warms up); MFU against the bf16 dense peak: H100/H200 SXM 989.4 TFLOP/s, A100 312.
case "$gpu_name" in
*H200* | *H100*) peak=989.4 ;;
*A100*) peak=312 ;;
*) peak=0 ;;
esac
peak=${TB_PEAK_TFLOPS:-$peak}
export peak
export gpt2="--num-layers 12 --hidden-size 768 --num-attention-heads 12 --vocab-size 50257 --seq-length 1024 --micro-batch-size 16"
# metrics_summary RUN_DIR: the median of steps 2.. of rank 0's metrics (tok/s, step, phases, MFU) and the last loss
metrics_summary() {
  python3 - "$1/metrics.rank-00000.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
timed = [r for r in rows if r["step"] > 1] or rows
med = lambda f: statistics.median(f(r) for r in timed)
p = lambda k: med(lambda r: r.get("pipeline", {}).get(k, float("nan")))
mfu = [r["mfu"] for r in timed if r.get("mfu") is not None]
mfu_text = f"{statistics.median(mfu) * 100:.1f}%" if mfu else "- (no peak for this GPU: TB_PEAK_TFLOPS)"
print(f"engine: {med(lambda r: r['tokens_per_s']):.0f} tok/s, median step {med(lambda r: r['step_ms']):.2f} ms over "
      f"{len(timed)} steps (forward {p('forward_ms'):.2f}, backward {p('backward_ms'):.2f}, optimizer "
      f"{p('optimizer_ms'):.2f} ms), MFU {mfu_text}", end="")
print(f"; loss {rows[0]['loss']:.4f} at step 1, {rows[-1]['loss']:.4f} at step {rows[-1]['step']}; "
      f"memory peak {rows[-1]['mem_total_peak_bytes'] / 2**30:.2f} GiB")
PY
}
bench() {
  local run="$logs/run-gpt2${1:+-$(echo "$*" | tr -c 'a-z0-9' '_' | cut -c1-40)}"
  rm -rf "$run"
  "$build/bin/pretrain_gpt" $gpt2 --train-iters 10 --device cuda --bf16 --attention-backend flash \
    --peak-tflops "$peak" --run-dir "$run" "$@" && metrics_summary "$run"
}
export -f bench metrics_summary
# the backend's pieces alone on those shapes (GEMMs bf16/fp32, attention): an upper bound
bench_pieces() { "$build/bin/bench_cuda" --batch 16 --seq 1024 --peak-tflops "$peak"; }
stage bench_cuda 60 bench_pieces && tail -n 12 "$logs/bench_cuda.log" | indent
say "  GPT-2 124M, B 16, T 1024, bf16: pretrain_gpt $gpt2 --train-iters 10 --device cuda --bf16 --attention-backend flash --peak-tflops $peak"
stage bench_gpt2_124m 90 bench && grep -E "^engine:" "$logs/bench_gpt2_124m.log" | indent
torch_ref() { python3 scripts/gpt2_torch_reference.py --batch 16 --seq 1024 --steps 10 --warmup 3; }
stage torch_reference 150 torch_ref && grep -E "^torch reference:" "$logs/torch_reference.log" | indent
engine_tps=$(sed -nE 's/^engine: ([0-9]+) tok\/s.*/\1/p' "$logs/bench_gpt2_124m.log")
torch_tps=$(sed -nE 's/^torch reference: ([0-9]+) tok\/s.*/\1/p' "$logs/torch_reference.log")
if [ -n "$engine_tps" ] && [ -n "$torch_tps" ]; then
  say "  engine / torch reference: $(awk -v a="$engine_tps" -v b="$torch_tps" 'BEGIN { printf "%.3f", a / b }') ($engine_tps vs $torch_tps tok/s, same run)"
fi
if [ "${ngpu:-0}" -ge 2 ]; then
  stage bench_tp2 60 bench --world-size 2 --tensor-model-parallel-size 2 && grep -E "^engine:" "$logs/bench_tp2.log" | indent
  stage bench_dp2 60 bench --world-size 2 && grep -E "^engine:" "$logs/bench_dp2.log" | indent
else
  say "SKIP tp/dp scaling point: one GPU"
fi

# --- 4. compute-sanitizer memcheck over the kernel tests (its own timeout; slower by 10-100x)
memcheck() {
  command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer: not on PATH"; return 1; }
  compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 "$build/tests/test_cuda_kernels"
}
stage memcheck_kernels 120 memcheck && grep -E "ERROR SUMMARY" "$logs/memcheck_kernels.log" | tail -n 1 | indent

# --- 5. where the step's time goes: Nsight Compute times every kernel of one GPT-2 124M step
# (gpu__time_duration, clocks left alone; kernels serialised, so the sum is the GPU's busy time
# without overlap) and the kernels are summed by name: the table names what to make faster.
kernel_profile() {
  local ncu
  ncu=$(command -v ncu || ls "$cuda"/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  [ -n "$ncu" ] || { echo "ncu: not found"; return 1; }
  rm -rf "$logs/run-profile"
  "$ncu" --clock-control none --metrics gpu__time_duration.sum -f -o "$logs/step" \
    "$build/bin/pretrain_gpt" $gpt2 --train-iters 1 --device cuda --bf16 --attention-backend flash \
    --run-dir "$logs/run-profile" >"$logs/ncu-run.log" 2>&1 || { tail -n 20 "$logs/ncu-run.log"; return 1; }
  "$ncu" --import "$logs/step.ncu-rep" --csv --page raw --print-units base >"$logs/step.csv" || return 1
  python3 - "$logs/step.csv" <<'PY'
import collections, csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head, unit = rows[0], rows[1]
name, dur = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
scale = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}[unit[dur]]
by = collections.defaultdict(lambda: [0, 0.0])
for r in rows[2:]:
    k = r[name].removeprefix("void ").split("(")[0]  # the name with its template arguments
    by[k][0] += 1
    by[k][1] += float(r[dur].replace(",", "")) * scale
total = sum(v[1] for v in by.values())
print(f"kernel profile: one step, {sum(v[0] for v in by.values())} kernels, {total:.2f} ms of GPU time")
for k, (n, ms) in sorted(by.items(), key=lambda kv: -kv[1][1])[:22]:
    print(f"  {ms:9.3f} ms {100 * ms / total:5.1f}% {n:5d}x  {k[:90]}")
PY
}
stage kernel_profile 100 kernel_profile && sed -n '/^kernel profile:/,$p' "$logs/kernel_profile.log" | indent

# --- 6. training on the GPU against the CPU (test_cuda_training: one GPU, then the two-GPU
# layouts over NCCL — some 60 short pretrain_gpt runs) and test_nccl.
stage gpu_training 300 gpu_tests 'cuda_training|nccl' && results gpu_training

finish
