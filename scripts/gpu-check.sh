#!/bin/bash
# The CUDA path, checked on a real GPU: builds Flotilla against the CUDA LibTorch that the
# machine's PyTorch ships (CMake finds it at torch.utils.cmake_prefix_path), runs the engine's
# tests, a one-epoch default job, the TorchScript zoo and a bf16 job on cuda:0, and checks the
# accuracies, not only that a GPU was named. Its summary goes to stdout and OUT/gpu-check.txt.
#
# Two steps, because a GPU machine may have PyTorch, CMake and a compiler but no Qt:
#   scripts/gpu-check.sh --prepare    on a Debian 12 machine with apt: downloads Debian's Qt,
#                                     SQLite, OpenSSL and zlib development packages and the
#                                     Fashion-MNIST data into .gpu-deps/ (kept out of git)
#   scripts/gpu-check.sh [OUT]        on the GPU machine, from the repository root with
#                                     .gpu-deps/ beside it: unpacks them under /tmp, builds,
#                                     runs, and writes the log and summary to OUT (default
#                                     build/gpu-check)
# It exits 77 ("skipped") where no GPU can be used, so that it never passes by not running.
# TORCH_PREFIX names another LibTorch (a folder with share/cmake/Torch) than PyTorch's.
set -euo pipefail
cd "$(dirname "$0")/.."
deps=.gpu-deps

if [ "${1:-}" = "--prepare" ]; then
    grep -qx '/.gpu-deps/' .git/info/exclude 2>/dev/null || echo '/.gpu-deps/' >> .git/info/exclude
    mkdir -p "$deps"
    # What the build needs beyond LibTorch, CMake and a compiler: the development packages
    # and the libraries they link that a non-Debian system may lack.
    packages="qt6-base-dev qt6-base-dev-tools libqt6core6 libqt6gui6 libqt6widgets6 libqt6network6
        libqt6concurrent6 libqt6sql6 libqt6test6 libqt6opengl6 libqt6openglwidgets6 libqt6opengl6-dev
        qt6-charts-dev libqt6charts6 libqt6dbus6 libqt6printsupport6 libqt6xml6 libicu72 libdouble-conversion3
        libb2-1 libpcre2-16-0 libmd4c0 libxkbcommon0 libxkbcommon-dev libgl-dev libegl-dev libglx-dev
        libopengl-dev libgl1 libglx0 libopengl0 libegl1 libglvnd0 libvulkan-dev libsqlite3-dev libssl-dev zlib1g-dev
        libts0 libinput10 libmtdev1 libevdev2 libwacom9 libgudev-1.0-0 libxcb-cursor0"
    (cd "$deps" && apt-get download $packages)
    cp /usr/share/datasets/fashion-mnist/*.gz "$deps/"
    du -sh "$deps"
    exit 0
fi

out=${1:-build/gpu-check}
mkdir -p "$out"
log="$out/gpu-check.log"
summary="$out/gpu-check.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
exec > >(tee "$log") 2>&1

python=${PYTHON:-$(command -v python3)}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: no NVIDIA GPU or driver here (nvidia-smi is missing or lists none): NOT RUN"; exit 77
fi
if [ "$("$python" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null)" != 1 ]; then
    echo "gpu-check: $python's PyTorch cannot use the GPU (a CPU build, or the driver is too old): NOT RUN"; exit 77
fi
[ -d "$deps" ] || { echo "no $deps/: run scripts/gpu-check.sh --prepare on a Debian 12 machine first"; exit 2; }
root=/tmp/gpu-sysroot
rm -rf "$root" && mkdir -p "$root"
for f in "$deps"/*.deb; do dpkg-deb -x "$f" "$root"; done
arch=x86_64-linux-gnu
export LD_LIBRARY_PATH="$root/usr/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export QT_PLUGIN_PATH="$root/usr/lib/$arch/qt6/plugins" QT_QPA_PLATFORM=offscreen
mkdir -p "$root/data/fashion-mnist" && cp "$deps"/*.gz "$root/data/fashion-mnist/"

torch_prefix=${TORCH_PREFIX:-$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')}
say "date        $(date -u +%Y-%m-%dT%H:%MZ)"
say "gpu         $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
say "torch       $("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)')"

start=$(date +%s)
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$root/usr;$root/usr/lib/$arch/cmake" \
    -DQT_HOST_PATH="$root/usr" -DQT_HOST_PATH_CMAKE_DIR="$root/usr/lib/$arch/cmake" \
    -DFLOTILLA_PYTHON="$python" >/dev/null
cmake --build build/gpu -j"$(nproc)"
say "build       $(( $(date +%s) - start )) s"

bin=build/gpu/app/flotilla
# The engine's tests (the network's and the windows' do not touch the GPU).
(cd build/gpu && ctest -j4 --output-on-failure -R '^(trainer|optimizers|models|torchscript|compression|aggregation|wireformat|tensorboard|npyreader)$') \
    && say "tests       engine tests passed" || say "tests       ENGINE TESTS FAILED"

job() { # name, then flags; prints the final test accuracy and the samples/s
    local name=$1; shift
    local dir=$out/runs/$name
    rm -rf "$dir"
    local t0; t0=$(date +%s.%N)
    "$bin" train --run-dir "$dir" --data "$root/data/fashion-mnist" "$@" > "$out/$name.txt" 2>&1 || true
    local secs; secs=$(echo "$(date +%s.%N) - $t0" | bc)
    local accuracy; accuracy=$(tail -1 "$dir/metrics.csv" 2>/dev/null | awk -F, '{print $12}')
    say "$(printf '%-11s %s s, test accuracy %s, device %s' "$name" "$secs" "${accuracy:-none}" \
        "$(grep -o 'cuda:0 ([^)]*)' "$dir/flotilla.log" 2>/dev/null | head -1)")"
    echo "$accuracy"
}
check() { # name accuracy minimum
    if [ -z "$2" ] || [ "$(echo "$2 < $3" | bc)" = 1 ]; then say "FAIL        $1: accuracy ${2:-none} is below $3"; fails=$((fails + 1)); fi
}
fails=0
common=(--epochs 1 --workers 2 --preempt-mean 0)
a=$(job cpu-1epoch "${common[@]}" --device cpu | tail -1)
b=$(job cuda-1epoch "${common[@]}" --device cuda:0 | tail -1); check cuda-1epoch "$b" 0.80
c=$(job cuda-bf16 "${common[@]}" --device cuda:0 --precision bf16 | tail -1); check cuda-bf16 "$c" 0.78
d=$(job cuda-fp16 "${common[@]}" --device cuda:0 --precision fp16 | tail -1); check cuda-fp16 "$d" 0.78
e=$(job cuda-adamw "${common[@]}" --device cuda:0 --optimizer adamw --lr 0.001 --weight-decay 0.01 | tail -1)
check cuda-adamw "$e" 0.80
f=$(job cuda-2workers "${common[@]}" --devices cuda:0,cuda:0 | tail -1); check cuda-2workers "$f" 0.80
say "cpu         accuracy $a (the same job on the CPU, for comparison)"
# The TorchScript zoo on the GPU: the test trains each model briefly and checks it learns.
(cd build/gpu && FLOTILLA_TEST_DEVICE=cuda:0 ctest --output-on-failure -R '^modelzoo$') \
    && say "zoo         TorchScript zoo passed on cuda:0" || { say "zoo         TORCHSCRIPT ZOO FAILED"; fails=$((fails + 1)); }
if [ -d "$out/runs/cuda-1epoch/tensorboard" ]; then
    "$python" - "$out/runs/cuda-1epoch/tensorboard" <<'EOF' | tee -a "$summary"
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1]); acc.Reload()
tags = acc.Tags()["scalars"]
print("tensorboard", len(tags), "scalar tags read by TensorBoard itself; test/accuracy:",
      [round(e.value, 4) for e in acc.Scalars("test/accuracy")] if "test/accuracy" in tags else "missing")
EOF
fi
say "result      $([ "$fails" = 0 ] && echo PASS || echo "$fails FAILED")"
exit "$fails"
