#!/bin/sh
# Check that two builds of `softverbs` simulate the same thing: every sample scenario in
# sim/scenarios/*.toml must give byte-identical `--trace` and `--pcap` files (drops too), the
# same report (the text summary with the results tables, and `--json`) and the same exit status.
#   scripts/sim-identity.sh OLD_BINARY NEW_BINARY [SCENARIO.toml ...]
# Prints one line per scenario and exits 1 if any differs.
set -u
[ $# -ge 2 ] || { echo "usage: $0 OLD_BINARY NEW_BINARY [SCENARIO.toml ...]" >&2; exit 2; }
old=$1 new=$2
shift 2
[ $# -gt 0 ] || set -- "$(dirname "$0")"/../sim/scenarios/*.toml
dir=$(mktemp -d "${TMPDIR:-/tmp}/sim-identity.XXXXXX")
trap 'rm -rf "$dir"' EXIT
bad=0
for sc in "$@"; do
    for b in old new; do
        eval bin=\$$b
        "$bin" sim "$sc" -q --results --pcap "$dir/$b.pcap" --pcap-drops --trace "$dir/$b.trace" \
            --json "$dir/$b.json" >"$dir/$b.out" 2>"$dir/$b.err"
        echo $? >"$dir/$b.rc"
    done
    diffs=
    for f in pcap trace json out err rc; do
        cmp -s "$dir/old.$f" "$dir/new.$f" || diffs="$diffs $f"
    done
    if [ -n "$diffs" ]; then
        echo "DIFFER $sc:$diffs"
        bad=1
    else
        echo "same   $sc ($(wc -c <"$dir/new.pcap") pcap bytes, $(wc -l <"$dir/new.trace") trace lines)"
    fi
done
exit $bad
