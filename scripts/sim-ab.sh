#!/usr/bin/env bash
# Compares the simulator's speed of two or more builds of the sim_speed example in alternated
# rounds: each round runs `sim_speed --quick --runs 1 --only WORKLOAD` of every binary in turn,
# so all of them see the same host load, and reads the 4N row's M packets per wall second and
# per CPU second. Prints, per binary, the median of each over the rounds, then each binary's
# ratio to the first within a round (median over rounds): the paired figure that the host's
# slow and fast spells move least. On a shared host trust CPU seconds and the paired ratios
# more than wall-time medians.
#
# Usage: scripts/sim-ab.sh ROUNDS WORKLOAD BINARY...
#   e.g. scripts/sim-ab.sh 9 incast /tmp/sim_speed.base target/release/examples/sim_speed
set -euo pipefail

if [[ $# -lt 3 ]]; then
    awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "$0" >&2
    exit 2
fi
ROUNDS=$1
WORKLOAD=$2
shift 2
LOG=$(mktemp "${TMPDIR:-/tmp}/softverbs-sim-ab.XXXXXX")
trap 'rm -f "$LOG"' EXIT

for round in $(seq "$ROUNDS"); do
    for bin in "$@"; do
        # The 4N row: | name | 4N = … | packets | wall | M packets/s | ns | vs. N | CPU s | M/CPU-s | …
        row=$(timeout 600 "$bin" --quick --runs 1 --only "$WORKLOAD" 2>/dev/null | grep '| 4N = ' | head -1 || true)
        if [[ -n $row ]]; then
            awk -F'|' -v r="$round" -v b="$bin" '{ gsub(/ /, "", $6); gsub(/ /, "", $10); print r, b, $6, $10 }' <<<"$row" >>"$LOG"
        fi
    done
done

echo "$ROUNDS rounds of sim_speed --quick --runs 1 --only $WORKLOAD, 4N row; $(uptime | sed 's/.*load/load/')"
python3 - "$LOG" "$@" <<'EOF'
import statistics, sys
log, bins = sys.argv[1], sys.argv[2:]
rows = [line.split() for line in open(log)]
by = {(r, b): (float(w), float(c)) for r, b, w, c in rows}
rounds = sorted({r for r, _, _, _ in rows}, key=int)
print(f"{'binary':<50} {'M pkt/wall-s':>12} {'M pkt/CPU-s':>12} {'wall ratio':>10} {'CPU ratio':>10}")
for b in bins:
    w = [by[(r, b)][0] for r in rounds if (r, b) in by]
    c = [by[(r, b)][1] for r in rounds if (r, b) in by]
    pairs = [(by[(r, b)], by[(r, bins[0])]) for r in rounds if (r, b) in by and (r, bins[0]) in by]
    wr = statistics.median(x[0] / y[0] for x, y in pairs) if pairs else float("nan")
    cr = statistics.median(x[1] / y[1] for x, y in pairs) if pairs else float("nan")
    print(f"{b:<50} {statistics.median(w):>12.2f} {statistics.median(c):>12.2f} {wr:>10.3f} {cr:>10.3f}   (n={len(w)})")
EOF
