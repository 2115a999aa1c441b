#!/usr/bin/env bash
# The figures of docs/security.md: one local fleet per attack (`flotilla demo`, real worker
# processes over TLS), one attacker among the workers, then a Markdown table of what got in.
#   scripts/attack-figures.sh [FLOTILLA] [demo options...]
# Defaults: 4 workers of which 1 attacks, the default job cut to 12,000 training samples and
# 5 epochs, no preemptions. Extra options are passed to every run (e.g. --epochs 10).
set -euo pipefail
flotilla="${1:-build/release/app/flotilla}"
shift || true
attacks=(none scale:50 sign-flip noise:0.1 stale-replay free-rider nan)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

printf '| attack | test accuracy | attacker results assimilated / rejected | attacker quarantined | honest results rejected | wall time |\n'
printf '|---|---|---|---|---|---|\n'
for attack in "${attacks[@]}"; do
    args=(demo --workers 4 --train-limit 12000 --epochs 5 --chaos-mean 0 --run-dir "$out/$attack" "$@")
    [ "$attack" = none ] || args+=(--attack "$attack" --attackers 1)
    "$flotilla" "${args[@]}" >"$out/$attack.txt" 2>&1 || {
        echo "flotilla demo --attack $attack failed:" >&2
        tail -20 "$out/$attack.txt" >&2
        exit 1
    }
    s="$out/$attack.txt"
    accuracy=$(sed -n 's/^ *test accuracy *\([0-9.]*%\).*/\1/p' "$s")
    wall=$(sed -n 's/^ *wall time *//p' "$s")
    if [ "$attack" = none ]; then
        printf '| none | %s | – | – | %s | %s |\n' "$accuracy" \
            "$(sed -n 's/^ *honest results *[0-9]* assimilated, \([0-9]*\) rejected.*/\1/p' "$s")" "$wall"
        continue
    fi
    read -r a_in a_out a_q < <(sed -n 's/^ *attackers. results *\([0-9]*\) assimilated, \([0-9]*\) rejected; \([0-9]*\) attacker.*/\1 \2 \3/p' "$s")
    h_out=$(sed -n 's/^ *honest results *[0-9]* assimilated, \([0-9]*\) rejected.*/\1/p' "$s")
    printf '| %s | %s | %s / %s | %s | %s | %s |\n' "$attack" "$accuracy" "$a_in" "$a_out" \
        "$([ "${a_q:-0}" -gt 0 ] && echo yes || echo no)" "$h_out" "$wall"
done
