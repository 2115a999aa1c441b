#!/usr/bin/env bash
# Runs the control center under Xvfb on a short Fashion-MNIST job (with simulated
# preemptions and a worker that joins over TLS) and saves screenshots of the dashboard, the
# workers, subtasks and events views, the job wizard, the worker-only window and its
# settings into docs/screenshots/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=docs/screenshots
mkdir -p "$out"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
XDG_DATA_HOME="$scratch/data" XDG_CONFIG_HOME="$scratch/config" \
    xvfb-run -a -s "-screen 0 1600x1000x24" build/release/app/flotilla gui --screenshots "$scratch/shots"
cp "$scratch"/shots/*.png "$out"/
ls -l "$out"
