#!/usr/bin/env bash
# Checks that two softverbs builds simulate every sample scenario identically: for each
# sim/scenarios/*.toml, `softverbs sim SCENARIO -q --trace T --pcap P` with each build, and the
# trace and capture files compared byte for byte, and what it prints (without --stats the
# summary holds no wall-clock figure). A change meant to make the simulator faster,
# not different, must pass this against main's binary.
#
# Usage: scripts/sim-same.sh BASE_BINARY NEW_BINARY [SCENARIO...]
#   e.g. scripts/sim-same.sh /tmp/softverbs-main target/release/softverbs
# Prints one line per scenario (same / DIFFERENT: which file) and exits 1 if any differs.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "$0" >&2
    exit 2
fi
BASE=$1
NEW=$2
shift 2
cd "$(dirname "$0")/.."
if [[ $# -gt 0 ]]; then SCENARIOS=("$@"); else SCENARIOS=(sim/scenarios/*.toml); fi
OUT=$(mktemp -d "${TMPDIR:-/tmp}/softverbs-sim-same.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

status=0
for scenario in "${SCENARIOS[@]}"; do
    name=$(basename "$scenario" .toml)
    for side in base new; do
        bin=$BASE
        [[ $side == new ]] && bin=$NEW
        # A scenario whose [expect] fails exits non-zero with either build: the files still
        # compare. Only a difference in what was written counts.
        timeout 600 "$bin" sim "$scenario" -q --trace "$OUT/$name.$side.trace" \
            --pcap "$OUT/$name.$side.pcap" >"$OUT/$name.$side.out" 2>&1 || echo "exit $?" >>"$OUT/$name.$side.out"
    done
    differ=()
    for kind in trace pcap out; do
        cmp -s "$OUT/$name.base.$kind" "$OUT/$name.new.$kind" || differ+=("$kind")
    done
    if [[ ${#differ[@]} -eq 0 ]]; then
        echo "same      $name ($(wc -l <"$OUT/$name.base.trace") trace lines, $(stat -c %s "$OUT/$name.base.pcap") pcap bytes)"
    else
        echo "DIFFERENT $name: ${differ[*]}"
        status=1
    fi
    rm -f "$OUT/$name".*
done
exit $status
