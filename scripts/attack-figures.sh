#!/usr/bin/env bash
# The figures of docs/security.md: one local fleet per attack (`flotilla demo`, real worker
# processes over TLS), one attacker among the workers, then a Markdown table of what got in.
#   scripts/attack-figures.sh [FLOTILLA] [demo options...]
# Defaults: 4 workers of which 1 attacks, the default job cut to 12,000 training samples and
# 5 epochs, no preemptions. Extra options are passed to every run (e.g. --redundancy 0.25).
# A run that has not finished after 20 minutes is stopped and reported as such.
set -euo pipefail
flotilla="${1:-build/release/app/flotilla}"
shift || true
attacks=(none scale:50 sign-flip noise:0.1 stale-replay free-rider nan)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

field() { sed -n "s/^ *$1 *//p" "$2"; }

printf '| attack | test accuracy | attacker results assimilated / rejected | attacker quarantined | honest results rejected | honest workers quarantined | wasted compute | wall time |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for attack in "${attacks[@]}"; do
    args=(demo --workers 4 --train-limit 12000 --epochs 5 --chaos-mean 0 --run-dir "$out/$attack" "$@")
    [ "$attack" = none ] || args+=(--attack "$attack" --attackers 1)
    s="$out/$attack.txt"
    if ! timeout --signal=INT --kill-after=60 1200 "$flotilla" "${args[@]}" >"$s" 2>&1; then
        echo "flotilla demo --attack $attack failed or did not finish in 20 minutes:" >&2
        tail -20 "$s" >&2
        sqlite3 "$out/$attack/coordinator/flotilla.db" \
            "SELECT kind, detail FROM events WHERE kind IN ('worker-quarantined', 'result-rejected') ORDER BY id DESC LIMIT 10" >&2 || true
        printf '| %s | did not finish | | | | | | |\n' "$attack"
        continue
    fi
    accuracy=$(sed -n 's/^ *test accuracy *\([0-9.]*%\).*/\1/p' "$s")
    wasted=$(field 'wasted compute' "$s" | sed -n 's/.*(\([0-9.]*%\))/\1/p')
    read -r h_out h_q < <(sed -n 's/^ *honest results *[0-9]* assimilated, \([0-9]*\) rejected; \([0-9]*\) honest.*/\1 \2/p' "$s")
    if [ "$attack" = none ]; then
        printf '| none | %s | – | – | %s | %s | %s | %s |\n' "$accuracy" "$h_out" "$h_q" "$wasted" "$(field 'wall time' "$s")"
        continue
    fi
    read -r a_in a_out a_q < <(sed -n 's/^ *attackers. results *\([0-9]*\) assimilated, \([0-9]*\) rejected; \([0-9]*\) attacker.*/\1 \2 \3/p' "$s")
    printf '| %s | %s | %s / %s | %s | %s | %s | %s | %s |\n' "$attack" "$accuracy" "$a_in" "$a_out" \
        "$([ "${a_q:-0}" -gt 0 ] && echo yes || echo no)" "$h_out" "$h_q" "$wasted" "$(field 'wall time' "$s")"
done
