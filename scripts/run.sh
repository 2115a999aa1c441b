#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: the default Fashion-MNIST job,
# trained headless on this machine (a small CNN, four local workers, simulated preemptions).
# Extra arguments go to `flotilla train` (see build/release/app/flotilla train --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
run_dir="runs/default-$(date +%Y%m%d-%H%M%S)"
exec build/release/app/flotilla train --run-dir "$run_dir" "$@"
