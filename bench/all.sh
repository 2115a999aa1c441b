#!/usr/bin/env bash
# Every measurement of docs/benchmarks.md's summary table, one after another in one
# invocation, so that the table comes from one state of one machine:
#   bench/all.sh OUT_DIR [FLOTILLA] [SECTION...]
# Sections, in the order they run (default: all):
#   micro        bench trainer, aggregation, transfer
#   accuracy     bench accuracy: Flotilla, DDP and the loop, each tuned over the grid, best vs best
#   links        bench accuracy behind 50mbit/40ms and 10mbit/80ms, int8 results and weights
#   preemption   bench accuracy to 90% with a worker SIGKILLed every 30 s
#   compression  the default job and an 11.6M-parameter MLP with --compression none|fp16|int8
#   scale        bench scale: 1,000 simulated workers over TLS
#   fleet        simulate 100,000 workers: as is, with the goodput policies, with --buffer auto
# Each command's output goes to OUT_DIR/NN-name.txt; OUT_DIR/index.txt lists the commands
# with their start time, wall seconds and exit status. Run it on an otherwise idle machine:
# anything else running shows in every figure. About 105 minutes on 2 cores without the
# scale and fleet sections, which add about 25.
set -uo pipefail
out="${1:?usage: bench/all.sh OUT_DIR [FLOTILLA] [SECTION...]}"
flotilla="${2:-build/release/app/flotilla}"
shift $(($# < 2 ? $# : 2))
sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(micro accuracy links preemption compression scale fleet)
flotilla="$(realpath "$flotilla")"
mkdir -p "$out"
out="$(realpath "$out")"
index="$out/index.txt"
step=0

# run NAME ARGS...: flotilla ARGS, output to OUT/NN-NAME.txt, one line in the index.
run() {
    local name="$1"
    shift
    step=$((step + 1))
    local file
    file="$(printf '%s/%02d-%s.txt' "$out" "$step" "$name")"
    local start
    start=$(date +%s)
    echo "[$(date -u +%H:%M:%S)] flotilla $*" >&2
    (cd "$out" && "$flotilla" "$@") >"$file" 2>&1
    local rc=$?
    printf '%s  %5ss  exit %s  %s  flotilla %s\n' "$(date -u -d "@$start" +%FT%TZ)" $(($(date +%s) - start)) \
        "$rc" "$(basename "$file")" "$*" >>"$index"
}

{
    echo "# bench/all.sh on $(hostname), $(nproc) CPUs, $(date -u +%F)"
    echo "# $("$flotilla" --version 2>/dev/null | head -1)"
    echo "# $(git -C "$(dirname "$0")" log -1 --format='%h %s' 2>/dev/null)"
} >"$index"

for section in "${sections[@]}"; do
    case "$section" in
    micro)
        run trainer bench trainer --samples 6000 --threads 1 --repeats 7
        run aggregation bench aggregation --repeats 7
        run transfer bench transfer --megabytes 45 --repeats 7
        ;;
    accuracy)
        run accuracy bench accuracy --repeats 3 --epochs 10 --max-seconds 150
        ;;
    links)
        for link in 50mbit/40ms 10mbit/80ms; do
            run "link-${link%%/*}" bench accuracy --repeats 1 --epochs 10 --max-seconds 240 --lr-grid 0.05 \
                --batch-grid 64 --link "$link" --compression int8
        done
        ;;
    preemption)
        run preemption bench accuracy --target 0.90 --repeats 2 --preemption-every 30 --epochs 15 \
            --max-seconds 300 --lr-grid 0.02 --batch-grid 32,64
        ;;
    compression)
        for form in none fp16 int8; do
            run "demo-$form" demo --run-dir "demo-$form" --compression "$form"
        done
        echo '{"model":{"kind":"mlp","hidden":[4096,2048]}}' >"$out/big.json"
        for form in none fp16 int8; do
            run "big-$form" demo --job big.json --run-dir "big-$form" --train-limit 12000 --epochs 3 --shards 12 \
                --workers 2 --chaos-mean 0 --compression "$form"
        done
        ;;
    scale)
        run scale bench scale --workers 1000 --seconds 120
        ;;
    fleet)
        run simulate simulate --workers 100000 --epochs 3
        run simulate-policies simulate --workers 100000 --epochs 3 --threads 2 --epochs-ahead 2 --share-tail \
            --speculate --dismiss-idle
        run simulate-buffer simulate --workers 100000 --epochs 3 --threads 2 --epochs-ahead 2 --share-tail \
            --speculate --buffer auto --rules vc-asgd,staleness-aware,async-delta
        ;;
    *)
        echo "bench/all.sh: unknown section '$section'" >&2
        exit 2
        ;;
    esac
done
# Demo run directories hold checkpoints of up to 45 MB each. The bytes per assimilation are
# in each coordinator's own output, kept beside the demo's; the rest goes.
for d in "$out"/demo-* "$out"/big-*; do
    [ -f "$d/coordinator.out" ] && cp "$d/coordinator.out" "$d.coordinator.txt"
    [ -d "$d" ] && rm -rf "$d"
done
cat "$index"
