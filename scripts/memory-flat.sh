#!/bin/bash
# Memory over a long job: trains a small job for many epochs and prints the coordinator's
# resident memory (VmRSS of the train process) when epochs 20, 50, 100, 150 and 200 are done.
#   bash scripts/memory-flat.sh build/release/app/flotilla [epochs]
set -euo pipefail
flotilla=${1:?usage: memory-flat.sh FLOTILLA [EPOCHS]}
epochs=${2:-200}
run=$(mktemp -d /tmp/flotilla-memory.XXXXXX)
trap 'kill $pid 2>/dev/null || true; rm -rf "$run"' EXIT
QT_QPA_PLATFORM=offscreen "$flotilla" train --model mlp --train-limit 1200 --test-limit 500 --shards 12 \
    --epochs "$epochs" --workers 2 --preempt-mean 0 --run-dir "$run" >"$run.out" 2>&1 &
pid=$!
next=(20 50 100 150 200)
echo "epoch rss_mib assimilations"
while kill -0 $pid 2>/dev/null; do
    done=$(sqlite3 "file:$run/flotilla.db?mode=ro" "select count(*) from events where kind='epoch-completed'" 2>/dev/null || echo 0)
    if [ ${#next[@]} -gt 0 ] && [ "${done:-0}" -ge "${next[0]}" ]; then
        rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
        n=$(sqlite3 "file:$run/flotilla.db?mode=ro" "select count(*) from assimilations" 2>/dev/null || echo ?)
        printf '%s %.1f %s\n' "${next[0]}" "$(echo "$rss / 1024" | bc -l)" "$n"
        next=("${next[@]:1}")
    fi
    sleep 0.5
done
wait $pid || { tail -5 "$run.out"; exit 1; }
rm -f "$run.out"
