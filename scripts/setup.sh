#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages only) and builds Flotilla (release preset).
# Used by scripts/run.sh and scripts/test.sh; safe to run again: it installs and rebuilds
# only what is missing or changed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
    cmake ninja-build g++ clang pkg-config  # the presets compile with clang (README: "Building by hand")
    qt6-base-dev qt6-charts-dev libqt6opengl6-dev libxkbcommon-dev
    libtorch-dev libssl-dev libsqlite3-dev zlib1g-dev
    libopenblas0-openmp          # fast BLAS for LibTorch's linear layers (else netlib's reference BLAS)
    dataset-fashion-mnist        # the default data set
    python3-torch python3-numpy  # TorchScript interop tests, the Python peers of the benchmarks
    python3-torchvision          # bench parity's ResNet-18
    xvfb xauth                   # screenshots of the windows (scripts/screenshots.sh)
    openssl                      # flotilla bench transfer compares with openssl speed
    rpm file                     # building and checking the .rpm (cpack -G RPM, rpm -qpl)
    python3-yaml systemd appstream desktop-file-utils  # checking manifests, unit, metadata
    libclang-rt-14-dev           # libFuzzer targets (tests/fuzz), run by the test suite
)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "Installing: ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

cmake --preset release
cmake --build --preset release
