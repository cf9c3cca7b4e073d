#!/usr/bin/env bash
# Compares the 8-byte RC SEND half round trip of several softverbs builds (and libfabric's shm
# provider, when fi_pingpong is installed) in alternated rounds: each round runs one
# `perf lat -s 8 -n 100000 -r 1` of every binary, then one fi_pingpong, so all of them see
# the same host load. The host is noisy (single-run medians fall in groups about 0.1 us apart,
# by where it runs the vCPUs), so compare the quantiles over many rounds, not single runs.
#
# Usage: scripts/ab.sh ROUNDS BINARY...     e.g. scripts/ab.sh 100 /tmp/softverbs-before target/release/softverbs
# Prints, per program: the minimum, first quartile and median over the rounds of each run's
# median and of each run's mean (elapsed / 2n, which is what fi_pingpong reports), then each
# program's ratio to the first one within a round (median over rounds), the paired figure
# that the host's slow and fast spells do not move.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    # The comment above, up to the first line that is not one, is the usage.
    awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "$0" >&2
    exit 2
fi
ROUNDS=$1
shift
LOG=$(mktemp "${TMPDIR:-/tmp}/softverbs-ab.XXXXXX")
trap 'rm -f "$LOG"' EXIT

for round in $(seq "$ROUNDS"); do
    for bin in "$@"; do
        line=$(timeout 120 "$bin" perf lat -s 8 -n 100000 -r 1 2>/dev/null | grep '^RESULT lat ' || true)
        median=$(sed -n 's/.* median_us=\([0-9.]*\).*/\1/p' <<<"$line")
        mean=$(sed -n 's/.* mean_us=\([0-9.]*\).*/\1/p' <<<"$line")
        [[ -n $median && -n $mean ]] && echo "$round $bin $median $mean" >>"$LOG"
    done
    if command -v fi_pingpong >/dev/null; then
        timeout 60 fi_pingpong -p shm -e rdm -I 100000 -S 8 >/dev/null 2>&1 &
        sleep 0.3
        v=$(timeout 60 fi_pingpong -p shm -e rdm -I 100000 -S 8 localhost 2>&1 | awk '$1 == 8 { print $7 }' || true)
        wait || true
        [[ -n $v ]] && echo "$round fi_pingpong $v $v" >>"$LOG"
    fi
done

# Quantiles of the per-run medians and means, per program, in the order they ran.
awk '
    !($2 in seen) { seen[$2] = 1; order[++n] = $2 }
    { k = ++count[$2]; med[$2, k] = $3; mean[$2, k] = $4; rmean[$1, $2] = $4; rmed[$1, $2] = $3; rounds[$1] = 1 }
    function q(arr, name, c, f,    i, j, t, v) {
        for (i = 1; i <= c; i++) v[i] = arr[name, i]
        for (i = 2; i <= c; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
        return v[int(f * (c - 1)) + 1]
    }
    END {
        printf "%-44s %6s | %-26s | %-26s\n", "program", "runs", "run medians: min  q1  median", "run means: min  q1  median"
        for (i = 1; i <= n; i++) {
            p = order[i]; c = count[p]
            printf "%-44s %6d | %.3f  %.3f  %.3f  us        | %.3f  %.3f  %.3f  us\n", p, c,
                q(med, p, c, 0), q(med, p, c, 0.25), q(med, p, c, 0.5),
                q(mean, p, c, 0), q(mean, p, c, 0.25), q(mean, p, c, 0.5)
        }
        # Paired: each program against the first one in the same round, which cancels the
        # slow and fast spells of the host (they last longer than a round).
        base = order[1]
        printf "\nper-round ratios to %s (median over rounds; share of rounds faster):\n", base
        for (i = 2; i <= n; i++) {
            p = order[i]; c = 0; wins = 0
            for (r in rounds) {
                if ((r, p) in rmean && (r, base) in rmean && rmean[r, base] > 0 && rmed[r, base] > 0) {
                    c++
                    ratio_mean[p, c] = rmean[r, p] / rmean[r, base]
                    ratio_med[p, c] = rmed[r, p] / rmed[r, base]
                    wins += rmean[r, p] < rmean[r, base]
                }
            }
            if (c > 0)
                printf "%-44s mean %.3f  median %.3f  (%d of %d rounds with a lower mean)\n", p,
                    q(ratio_mean, p, c, 0.5), q(ratio_med, p, c, 0.5), wins, c
        }
    }' "$LOG"
