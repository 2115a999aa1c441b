#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: with a display, the control center
# (the default Fashion-MNIST job ready to start); without one, that job trained headless on
# this machine (a small CNN, four local workers, simulated preemptions). Extra arguments go
# to `flotilla train` in the headless case (see build/release/app/flotilla train --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && [ $# -eq 0 ]; then
    exec build/release/app/flotilla
fi
run_dir="runs/default-$(date +%Y%m%d-%H%M%S)"
exec build/release/app/flotilla train --run-dir "$run_dir" "$@"
