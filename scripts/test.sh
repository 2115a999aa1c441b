#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (two at a time).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --preset release
