#!/usr/bin/env bash
# Runs the whole side-by-side performance table in one go and prints it in markdown:
# softverbs (`softverbs perf`, perftest's tests) against UCX (`ucx_perftest`, UCX_TLS=posix,cma,self)
# and libfabric (`fi_pingpong -p shm`) on this machine, in alternating rounds (one run of each
# per round, so all see the same host load), each figure the median over rounds and each ratio
# softverbs' median over the peer's; then the shm floor, system calls, idle CPU and the spin
# window.
#
# Usage: scripts/perf.sh [--quick]     (--quick: few iterations and 2 rounds, a smoke run)
# Environment: RUNS (rounds, default 5), ITERS (latency iterations per run, default 100000),
# BW_ITERS (1 MiB WRITEs per bandwidth run, 2000), RATE_ITERS (8 B WRITEs per rate run, 1000000),
# CARGO_TARGET_DIR (where cargo builds, as for cargo itself; the binary is the one cargo
# reports building), UCX_PERFTEST and FI_PINGPONG (the peers' programs, default ucx_perftest
# and fi_pingpong on PATH; from the Debian/Ubuntu packages ucx-utils and libfabric-bin),
# BASELINE (another softverbs binary, e.g. an earlier build: its 8 B SEND half round trip is
# measured in the same rounds, alternating, and compared with this build's).
set -euo pipefail

# A relative CARGO_TARGET_DIR names a directory relative to where the script was started.
if [[ -n ${CARGO_TARGET_DIR:-} ]]; then
    CARGO_TARGET_DIR=$(realpath -m -- "$CARGO_TARGET_DIR")
    export CARGO_TARGET_DIR
fi
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
ITERS=${ITERS:-100000}
BW_ITERS=${BW_ITERS:-2000}
RATE_ITERS=${RATE_ITERS:-1000000}
IDLE_S=5 SPIN_ITERS=50000
if [[ ${1:-} == --quick ]]; then
    RUNS=2 ITERS=2000 BW_ITERS=100 RATE_ITERS=20000 IDLE_S=1 SPIN_ITERS=2000
elif [[ -n ${1:-} ]]; then
    echo "usage: scripts/perf.sh [--quick]" >&2
    exit 2
fi
UCX_PERFTEST=${UCX_PERFTEST:-ucx_perftest}
FI_PINGPONG=${FI_PINGPONG:-fi_pingpong}

# The binary cargo built: its own report of the artifact, so CARGO_TARGET_DIR and a
# target-dir in cargo's config both count; else the target directory cargo metadata names.
SV=$(cargo build --release -q -p softverbs --bin softverbs --message-format=json |
    sed -n 's/.*"executable":"\([^"]*\/softverbs\)".*/\1/p' | tail -1)
if [[ -z $SV ]]; then
    dir=$(cargo metadata --format-version 1 --no-deps 2>/dev/null |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
    SV=${dir:-${CARGO_TARGET_DIR:-target}}/release/softverbs
fi
if [[ ! -x $SV ]]; then
    echo "perf.sh: no softverbs binary at $SV after cargo build" >&2
    exit 1
fi
LOG=$(mktemp -d "${TMPDIR:-/tmp}/softverbs-perf.XXXXXX")
trap 'rm -rf "$LOG"' EXIT

HAVE_UCX=1 HAVE_FI=1
if ! command -v "$UCX_PERFTEST" >/dev/null; then
    HAVE_UCX=0
    echo "perf.sh: $UCX_PERFTEST not found: the UCX rows are left out (install: apt-get install ucx-utils)"
fi
if ! command -v "$FI_PINGPONG" >/dev/null; then
    HAVE_FI=0
    echo "perf.sh: $FI_PINGPONG not found: the libfabric row is left out (install: apt-get install libfabric-bin)"
fi

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), Linux $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
echo "binary: $SV"

# json KEY FILE: a number from softverbs' --json line.
json() { sed -n "s/.*\"$1\":\([0-9.eE+-]*\).*/\1/p" "$2" | tail -1; }
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.3f", a / b }'; }
# ucx TEST SIZE ITERS COLUMN: one ucx_perftest run (server and client on a fresh port), the
# given column of its "Final:" line: 3 = latency p50 (us), 6 = bandwidth (MB/s, 2^20 bytes),
# 9 = message rate (messages/s).
ucx() {
    local port=$((20000 + RANDOM % 20000)) srv v
    UCX_TLS=posix,cma,self timeout 120 "$UCX_PERFTEST" -p "$port" >"$LOG/ucx-server" 2>&1 &
    srv=$!
    sleep 0.5
    v=$(UCX_TLS=posix,cma,self timeout 120 "$UCX_PERFTEST" localhost -p "$port" -t "$1" -s "$2" -n "$3" 2>&1 |
        awk -v c="$4" '$1 == "Final:" { print $c }')
    wait "$srv" || true
    echo "$v"
}
# fi SIZE ITERS: fi_pingpong's usec/xfer (elapsed / iterations / 2: the mean half round trip).
fi_pp() {
    local port=$((20000 + RANDOM % 20000)) srv v
    timeout 120 "$FI_PINGPONG" -p shm -e rdm -B "$port" -I "$2" -S "$1" >"$LOG/fi-server" 2>&1 &
    srv=$!
    sleep 0.5
    v=$(timeout 120 "$FI_PINGPONG" -p shm -e rdm -P "$port" -I "$2" -S "$1" localhost 2>&1 |
        awk -v s="$1" '$1 == s { print $7 }')
    wait "$srv" || true
    echo "$v"
}

declare -A R LAST
# add KEY VALUE: one round's figure (nothing if the run gave none).
add() {
    LAST[$1]=$2
    R[$1]+="${2:+$2 }"
}
echo "== $RUNS alternating rounds"
for i in $(seq "$RUNS"); do
    LAST=()
    "$SV" perf write_bw -s 1048576 -n "$BW_ITERS" --json >"$LOG/wbw" 2>&1 || true
    add sv_bw "$(json bw_average_mib_per_sec "$LOG/wbw")"
    "$SV" perf write_bw -s 8 -n "$RATE_ITERS" --json >"$LOG/wrate" 2>&1 || true
    add sv_rate "$(json msg_rate_mpps "$LOG/wrate" | awk '{ printf "%.0f", $1 * 1e6 }')"
    "$SV" perf write_lat -s 8 -n "$ITERS" --json >"$LOG/wlat" 2>&1 || true
    add sv_wlat "$(json t_typical_usec "$LOG/wlat")"
    "$SV" perf send_lat -s 8 -n "$ITERS" --json >"$LOG/slat" 2>&1 || true
    add sv_slat "$(json t_typical_usec "$LOG/slat")"
    add sv_slat_mean "$(json t_avg_usec "$LOG/slat")"
    "$SV" perf read_lat -s 8 -n "$ITERS" --json >"$LOG/rlat" 2>&1 || true
    add sv_rlat "$(json t_typical_usec "$LOG/rlat")"
    "$SV" perf atomic_lat -n "$ITERS" --json >"$LOG/alat" 2>&1 || true
    add sv_alat "$(json t_typical_usec "$LOG/alat")"
    if [[ -n ${BASELINE:-} ]]; then
        "$BASELINE" perf send_lat -s 8 -n "$ITERS" --json >"$LOG/bslat" 2>&1 || true
        add base_slat "$(json t_typical_usec "$LOG/bslat")"
    fi
    if ((HAVE_UCX)); then
        add ucx_bw "$(ucx ucp_put_bw 1048576 "$BW_ITERS" 6)"
        add ucx_rate "$(ucx ucp_put_bw 8 "$RATE_ITERS" 9)"
        add ucx_wlat "$(ucx ucp_put_lat 8 "$ITERS" 3)"
        add ucx_tlat "$(ucx tag_lat 8 "$ITERS" 3)"
    fi
    if ((HAVE_FI)); then
        add fi_lat "$(fi_pp 8 "$ITERS")"
    fi
    line="  round $i:"
    for k in sv_bw ucx_bw sv_rate ucx_rate sv_wlat ucx_wlat sv_slat sv_slat_mean ucx_tlat fi_lat \
        sv_rlat sv_alat base_slat; do
        [[ -n ${LAST[$k]:-} ]] && line+=" $k=${LAST[$k]}"
    done
    echo "$line"
done
# med KEY: the median over rounds of one figure ("" if no round produced it).
med() { printf '%s\n' ${R[$1]:-} | median; }

echo "== floor, system calls, idle CPU"
"$SV" perf floor -r "$RUNS" >"$LOG/floor"
FLOOR=$(grep '^RESULT floor ' "$LOG/floor" | tail -1 | tr ' ' '\n' | sed -n 's/^median_us=//p')
SYS=-
if command -v perf >/dev/null || command -v strace >/dev/null; then
    "$SV" perf syscalls -n 100000 --base 10000 --out-dir "$LOG" >"$LOG/sys" || true
    SYS=$(grep '^RESULT syscalls ' "$LOG/sys" | tail -1 | tr ' ' '\n' | sed -n 's/^per_iter=//p')
fi
"$SV" perf idle --seconds "$IDLE_S" >"$LOG/idle"
IDLE=$(grep '^RESULT ' "$LOG/idle" | tail -1 | tr ' ' '\n' | sed -n 's/^idle_cpu_pct=//p')
PIDLE=$(grep '^RESULT ' "$LOG/idle" | tail -1 | tr ' ' '\n' | sed -n 's/^peer_idle_cpu_pct=//p')
"$SV" perf spin --values 0,10,50,200 -n "$SPIN_ITERS" -r 3 --seconds "$IDLE_S" >"$LOG/spin"

row() { # measurement, softverbs command, softverbs figure, peer command, peer figure, unit, ratio
    echo "| $1 | \`$2\` | ${3:--} $6 | ${4:+\`$4\`} | ${5:--}${5:+ $6} | $7 |"
}
echo
echo "Medians of $RUNS alternating rounds; ratio = softverbs / peer (above 1 is better for rates, below 1 for latencies)."
echo
echo "| measurement | softverbs | median | peer | median | ratio |"
echo "|---|---|---|---|---|---|"
u() { ((HAVE_UCX)) && echo "UCX_TLS=posix,cma,self ucx_perftest $1" || true; }
row "1 MiB RDMA WRITE bandwidth" "softverbs perf write_bw -s 1048576 -n $BW_ITERS" "$(med sv_bw)" \
    "$(u "-t ucp_put_bw -s 1048576 -n $BW_ITERS")" "$(med ucx_bw)" "MiB/s" "$(ratio "$(med sv_bw)" "$(med ucx_bw)")"
row "8 B RDMA WRITE message rate" "softverbs perf write_bw -s 8 -n $RATE_ITERS" "$(med sv_rate)" \
    "$(u "-t ucp_put_bw -s 8 -n $RATE_ITERS")" "$(med ucx_rate)" "msg/s" "$(ratio "$(med sv_rate)" "$(med ucx_rate)")"
row "8 B RDMA WRITE latency, half round trip, median" "softverbs perf write_lat -s 8 -n $ITERS" "$(med sv_wlat)" \
    "$(u "-t ucp_put_lat -s 8 -n $ITERS")" "$(med ucx_wlat)" "us" "$(ratio "$(med sv_wlat)" "$(med ucx_wlat)")"
row "8 B SEND half round trip, median" "softverbs perf send_lat -s 8 -n $ITERS" "$(med sv_slat)" \
    "$(u "-t tag_lat -s 8 -n $ITERS")" "$(med ucx_tlat)" "us" "$(ratio "$(med sv_slat)" "$(med ucx_tlat)")"
F=""
((HAVE_FI)) && F="fi_pingpong -p shm -e rdm -I $ITERS -S 8"
row "8 B SEND half round trip, mean" "softverbs perf send_lat -s 8 -n $ITERS" "$(med sv_slat_mean)" \
    "$F" "$(med fi_lat)" "us" "$(ratio "$(med sv_slat_mean)" "$(med fi_lat)")"
row "8 B RDMA READ latency, median, against softverbs' own 8 B SEND half round trip" \
    "softverbs perf read_lat -s 8 -n $ITERS" "$(med sv_rlat)" \
    "softverbs perf send_lat -s 8 -n $ITERS" "$(med sv_slat)" "us" "$(ratio "$(med sv_rlat)" "$(med sv_slat)")"
row "8 B atomic latency, median, against softverbs' own 8 B SEND half round trip" \
    "softverbs perf atomic_lat -n $ITERS" "$(med sv_alat)" \
    "softverbs perf send_lat -s 8 -n $ITERS" "$(med sv_slat)" "us" "$(ratio "$(med sv_alat)" "$(med sv_slat)")"
if [[ -n ${BASELINE:-} ]]; then
    row "8 B SEND half round trip, median, against BASELINE" "softverbs perf send_lat -s 8 -n $ITERS" \
        "$(med sv_slat)" "$BASELINE perf send_lat -s 8 -n $ITERS" "$(med base_slat)" "us" \
        "$(ratio "$(med sv_slat)" "$(med base_slat)")"
fi
echo
echo "| measurement | command | figure |"
echo "|---|---|---|"
echo "| shm floor, half round trip | \`softverbs perf floor\` | ${FLOOR:--} us |"
echo "| system calls per busy iteration | \`softverbs perf syscalls\` | ${SYS:--} |"
echo "| idle CPU, % of a core (initiator / peer) | \`softverbs perf idle --seconds $IDLE_S\` | ${IDLE:--} / ${PIDLE:--} |"
echo
echo "spin window (SOFTVERBS_SPIN_US):"
grep '^|' "$LOG/spin" || true
