#!/usr/bin/env bash
# Runs the control center under Xvfb on a short Fashion-MNIST job (with simulated
# preemptions and a worker that joins over TLS) and saves screenshots of the dashboard, the
# workers, subtasks and events views, the job wizard, the worker-only window and its
# settings, then of the Runs tab, a run's window and a comparison of three short runs, and of a
# control center attached to a `flotilla serve` elsewhere, into docs/screenshots/.
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
# A control center attached, as an operator, to a coordinator with two workers.
flotilla=build/release/app/flotilla
"$flotilla" serve --quiet --run-dir "$scratch/served" --identity-dir "$scratch/identity" --listen 127.0.0.1 \
    --host 127.0.0.1 --port 0 --token-file "$scratch/worker-token" --token-uses 2 --train-limit 12000 \
    --test-limit 2000 --epochs 8 --shards 12 --preempt-mean 0 >"$scratch/serve.out" 2>&1 &
serve=$!
for _ in $(seq 120); do [ -s "$scratch/worker-token" ] && break; sleep 1; done
for name in lab-desktop-3 lab-desktop-7; do
    "$flotilla" worker --join "$(cat "$scratch/worker-token")" --state-dir "$scratch/$name" --name "$name" \
        --instance-type local --price-class volunteer >"$scratch/$name.out" 2>&1 &
done
operator_token=$("$flotilla" token --operator --identity-dir "$scratch/identity")
XDG_DATA_HOME="$scratch/data" XDG_CONFIG_HOME="$scratch/config" \
    xvfb-run -a -s "-screen 0 1600x1000x24" "$flotilla" gui --connect "$operator_token" \
    --connect-screenshot "$scratch/shots/remote-coordinator.png"
kill "$serve" $(jobs -p) 2>/dev/null || true
wait 2>/dev/null || true
cp "$scratch"/shots/*.png "$out"/
ls -l "$out"
