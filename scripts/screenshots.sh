#!/usr/bin/env bash
# Runs the control center under Xvfb on a short Fashion-MNIST job (with simulated
# preemptions and a worker that joins over TLS) and saves screenshots of the dashboard, the
# workers, subtasks and events views, the job wizard, the worker-only window and its
# settings, then of the Runs tab, a run's window and a comparison of three short runs, into
# docs/screenshots/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=docs/screenshots
mkdir -p "$out"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
XDG_DATA_HOME="$scratch/data" XDG_CONFIG_HOME="$scratch/config" \
    xvfb-run -a -s "-screen 0 1600x1000x24" build/release/app/flotilla gui --screenshots "$scratch/shots"
# The Runs tab, a run's window and a comparison: three short runs that differ in their rule.
for rule in vc-asgd staleness-aware async-delta; do
    XDG_DATA_HOME="$scratch/data" build/release/app/flotilla train --quiet --train-limit 6000 --test-limit 1000 \
        --epochs 6 --shards 12 --rule "$rule" --run-dir "$scratch/runs/$rule-6-epochs"
done
XDG_DATA_HOME="$scratch/data" XDG_CONFIG_HOME="$scratch/config" \
    xvfb-run -a -s "-screen 0 1600x1000x24" build/release/app/flotilla gui --runs "$scratch/runs" \
    --runs-screenshots "$scratch/shots"
cp "$scratch"/shots/*.png "$out"/
ls -l "$out"
