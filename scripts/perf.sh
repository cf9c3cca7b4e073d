#!/usr/bin/env bash
# Runs the whole softverbs performance comparison in one go and prints a markdown table:
# the raw shared-memory floor, 8-byte RC SEND latency, 1 MiB RDMA WRITE bandwidth, system
# calls per iteration, idle CPU, the spin-window sweep, and libfabric's fi_pingpong (shm) and
# UCX's ucx_perftest (posix,cma,self) measured in the same run on the same machine.
#
# Usage: scripts/perf.sh [--quick]     (needs perf or strace, libfabric-bin and ucx-utils for every row;
#                                       missing tools leave their rows out)
# Environment: ITERS (latency iterations per run, default 100000), RUNS (default 5),
# CARGO_TARGET_DIR (where cargo builds, as for cargo itself; default target/).
set -euo pipefail

# A relative CARGO_TARGET_DIR names a directory relative to where the script was started.
if [[ -n ${CARGO_TARGET_DIR:-} ]]; then
    CARGO_TARGET_DIR=$(realpath -m -- "$CARGO_TARGET_DIR")
    export CARGO_TARGET_DIR
fi
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-target}
ITERS=${ITERS:-100000}
RUNS=${RUNS:-5}
IDLE_S=5
SPIN_ITERS=50000
if [[ ${1:-} == --quick ]]; then
    ITERS=20000 RUNS=2 IDLE_S=2 SPIN_ITERS=10000
fi

cargo build --release -q -p softverbs-sim --bins --examples
# `softverbs perf` once the CLI has it; the example runs the same code until then.
if "$TARGET/release/softverbs" perf --help >/dev/null 2>&1; then
    PERF=("$TARGET/release/softverbs" perf)
else
    PERF=("$TARGET/release/examples/perf_run")
fi
LOG=$(mktemp -d "${TMPDIR:-/tmp}/softverbs-perf.XXXXXX")
trap 'rm -rf "$LOG"' EXIT

# result NAME KEY FILE: the value of KEY in the last "RESULT NAME ..." line of FILE.
result() {
    grep "^RESULT $1 " "$3" | tail -1 | tr ' ' '\n' | sed -n "s/^$2=//p"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }'; }

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), Linux $(uname -r)"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"

echo "== floor"
"${PERF[@]}" floor -r "$RUNS" | tee "$LOG/floor"
# Latency: softverbs and libfabric's shm provider alternate, one run each per round, so
# both see the same host load; each is summarised by the median over rounds.
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'; }
echo "== lat, alternating with fi_pingpong -p shm -e rdm when it is installed ($RUNS rounds)"
LATS=() MEANS=() P99S=() FIS=()
for i in $(seq "$RUNS"); do
    "${PERF[@]}" lat -s 8 -n "$ITERS" -r 1 >"$LOG/lat.$i"
    LATS+=("$(result lat median_us "$LOG/lat.$i")")
    MEANS+=("$(result lat mean_us "$LOG/lat.$i")")
    P99S+=("$(result lat p99_us "$LOG/lat.$i")")
    line="  round $i: softverbs median ${LATS[-1]} us, mean ${MEANS[-1]} us"
    if command -v fi_pingpong >/dev/null; then
        timeout 60 fi_pingpong -p shm -e rdm -I "$ITERS" -S 8 >"$LOG/fis" 2>&1 &
        srv=$!
        sleep 0.5
        # Columns: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec; usec/xfer is
        # elapsed / iterations / 2, i.e. the mean half round trip.
        v=$(timeout 60 fi_pingpong -p shm -e rdm -I "$ITERS" -S 8 localhost 2>&1 | awk '$1 == 8 { print $7 }')
        wait "$srv" || true
        [[ -n $v ]] && FIS+=("$v")
        line+=", fi_pingpong ${v:-failed} us"
    fi
    echo "$line"
done
LAT=$(printf '%s\n' "${LATS[@]}" | median)
LATMEAN=$(printf '%s\n' "${MEANS[@]}" | median)
LATP99=$(printf '%s\n' "${P99S[@]}" | median)
FI=""
((${#FIS[@]})) && FI=$(printf '%s\n' "${FIS[@]}" | median)
echo "== bw"
"${PERF[@]}" bw -s 1048576 -n 2000 -r "$RUNS" | tee "$LOG/bw"
echo "== idle"
"${PERF[@]}" idle --seconds "$IDLE_S" | tee "$LOG/idle"
if command -v perf >/dev/null || command -v strace >/dev/null; then
    echo "== syscalls"
    "${PERF[@]}" syscalls -n 100000 --base 10000 --out-dir "$LOG" | tee "$LOG/sys"
fi
echo "== spin"
"${PERF[@]}" spin --values 0,10,50,200 -n "$SPIN_ITERS" -r 3 --seconds "$IDLE_S" | tee "$LOG/spin"

UCX=""
if command -v ucx_perftest >/dev/null; then
    echo "== ucx_perftest tag_lat UCX_TLS=posix,cma,self"
    port=$((20000 + RANDOM % 20000))
    UCX_TLS=posix,cma,self timeout 60 ucx_perftest -t tag_lat -s 8 -n "$ITERS" -p "$port" >"$LOG/ucxs" 2>&1 &
    srv=$!
    sleep 1
    # "Final: iterations p50 average overall ..." in microseconds, half round trip.
    UCX=$(UCX_TLS=posix,cma,self timeout 60 ucx_perftest localhost -t tag_lat -s 8 -n "$ITERS" -p "$port" 2>&1 |
        awk '$1 == "Final:" { print $3 }')
    wait "$srv" || true
    echo "  p50: ${UCX:-failed} us"
fi

FLOOR=$(result floor median_us "$LOG/floor")
BW=$(result bw median_gbps "$LOG/bw")
IDLE=$(result lat idle_cpu_pct "$LOG/idle")
PIDLE=$(result lat peer_idle_cpu_pct "$LOG/idle")
SYS=$( [[ -f $LOG/sys ]] && result syscalls per_iter "$LOG/sys" || echo "-")

echo
echo "| measurement | command | median | vs. floor | vs. fi_pingpong |"
echo "|---|---|---|---|---|"
echo "| shm floor, half RTT | \`softverbs perf floor\` | ${FLOOR} us | 1.00 | $(ratio "$FLOOR" "$FI") |"
echo "| softverbs 8 B RC SEND, half RTT, median (p99 ${LATP99} us) | \`softverbs perf lat -s 8 -n $ITERS\` | ${LAT} us | $(ratio "$LAT" "$FLOOR") | $(ratio "$LAT" "$FI") |"
echo "| softverbs 8 B RC SEND, half RTT, mean (elapsed / 2n, as fi_pingpong) | same runs | ${LATMEAN} us | $(ratio "$LATMEAN" "$FLOOR") | $(ratio "$LATMEAN" "$FI") |"
[[ -n $FI ]] && echo "| libfabric shm 8 B, half RTT, mean (usec/xfer) | \`fi_pingpong -p shm -e rdm -I $ITERS -S 8\` | ${FI} us | $(ratio "$FI" "$FLOOR") | 1.00 |"
[[ -n $UCX ]] && echo "| UCX posix,cma,self 8 B tag, half RTT | \`ucx_perftest -t tag_lat -s 8 -n $ITERS\` | ${UCX} us | $(ratio "$UCX" "$FLOOR") | $(ratio "$UCX" "$FI") |"
echo "| softverbs 1 MiB RDMA WRITE, window 16 | \`softverbs perf bw -s 1048576 -n 2000\` | ${BW} GB/s | - | - |"
echo "| system calls per busy iteration | \`softverbs perf syscalls\` | ${SYS} | - | - |"
echo "| idle CPU, % of a core (initiator / peer) | \`softverbs perf idle --seconds $IDLE_S\` | ${IDLE} / ${PIDLE} | - | - |"
echo
echo "spin window (SOFTVERBS_SPIN_US):"
grep '^|' "$LOG/spin"
