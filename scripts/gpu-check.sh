#!/usr/bin/env bash
# Builds Flotilla against a CUDA-enabled LibTorch and checks the GPU path on a real GPU:
# a one-epoch job of the default CNN on cuda, then the TorchScript model zoo on cuda.
#
# Where it runs: a machine with an NVIDIA driver (nvidia-smi), Qt 6 (Debian's qt6-base-dev,
# qt6-charts-dev) and a CUDA build of PyTorch whose LibTorch CMake package this script finds
# through `torch.utils.cmake_prefix_path` (pip or conda PyTorch 2.x, or a LibTorch folder
# given as TORCH_PREFIX). It exits 77 ("skipped") where there is no usable GPU, so that it
# can never pass by not running.
#
#   bash scripts/gpu-check.sh [--device cuda:N]
set -euo pipefail
cd "$(dirname "$0")/.."

device="cuda"
if [ "${1:-}" = "--device" ] && [ -n "${2:-}" ]; then
    device="$2"
fi
python="${PYTHON:-python3}"
build="build/cuda"

say() { printf '\n== %s\n' "$*"; }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: no NVIDIA GPU or driver here (nvidia-smi is missing or lists none): NOT RUN" >&2
    exit 77
fi
say "GPUs"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader

prefix="${TORCH_PREFIX:-}"
if [ -z "$prefix" ]; then
    prefix="$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)"
fi
if [ -z "$prefix" ]; then
    echo "gpu-check: no LibTorch found: install a CUDA PyTorch for $python or set TORCH_PREFIX: NOT RUN" >&2
    exit 77
fi
cuda_ok="$("$python" -c 'import torch; print(int(torch.cuda.is_available()), torch.__version__, torch.version.cuda)' 2>/dev/null || echo "0 ? ?")"
say "PyTorch: $cuda_ok (cuda available, version, CUDA version); CMake prefix: $prefix"
if [ "${cuda_ok%% *}" != "1" ]; then
    echo "gpu-check: this PyTorch cannot use the GPU (CPU build, or driver too old): NOT RUN" >&2
    exit 77
fi

say "Configure and build against the CUDA LibTorch ($build)"
# PyTorch's wheels may be built with the old C++ ABI; LibTorch's CMake package sets the
# matching _GLIBCXX_USE_CXX11_ABI on its targets. A mismatch with the system's Qt shows as
# undefined references to std::__cxx11 symbols at link time.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix" \
    -DFLOTILLA_BUILD_TESTS=ON
cmake --build "$build" --target flotilla tst_modelzoo

flotilla="$build/app/flotilla"
run_dir="$(mktemp -d)/gpu-check"
say "One epoch of the default job on $device"
start=$(date +%s)
"$flotilla" train --run-dir "$run_dir" --device "$device" --epochs 1 --preempt-mean 0 --workers 2
echo "wall: $(( $(date +%s) - start )) s"
grep -E "cuda" "$run_dir/flotilla.log" | head -5 || true
if ! grep -q "cuda" "$run_dir/flotilla.log"; then
    echo "gpu-check: the job's log never mentions a CUDA device: FAILED" >&2
    exit 1
fi
if grep -q "evaluation-failed" "$run_dir/flotilla.log"; then
    echo "gpu-check: an evaluation failed on $device (see $run_dir/flotilla.log): FAILED" >&2
    exit 1
fi

say "The TorchScript model zoo on $device"
FLOTILLA_TEST_DEVICE="$device" "$build/tests/tst_modelzoo"

say "gpu-check: PASSED on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
