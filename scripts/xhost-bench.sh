#!/bin/bash
# Issue 31's targets: softverbs over the UDP wire against UCX over TCP (and libfabric's tcp
# provider), across one veth pair joined between two network namespaces, alternating the
# programs in one run, several rounds; prints each sample, then medians and ratios.
#
#   sudo scripts/xhost-bench.sh                 # softverbs of this tree's target/release
#   SV_BASE=/path/to/other/softverbs sudo scripts/xhost-bench.sh   # and another build beside it
#   ROUNDS=5 MTU=1500 ...                       # rounds (default 5), the veth's MTU (1500)
#
# Needs root (namespaces), perftest, ucx-utils (ucx_perftest), libfabric-bin (fi_pingpong);
# build first: cargo build --release -p softverbs -p softverbs-ibverbs -p softverbs-rdmacm.
# The namespaces and fabric directories are removed on exit, even on failure.
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
SV=${SV:-$HERE/target/release/softverbs}
SV_BASE=${SV_BASE:-}
ROUNDS=${ROUNDS:-5}
MTU=${MTU:-1500}
WRITE_ITERS=${WRITE_ITERS:-500}
LAT_ITERS=${LAT_ITERS:-10000}
A=svbA$$; B=svbB$$
OUT=$(mktemp -d)
F1=$(mktemp -d); F2=$(mktemp -d); chmod 700 "$F1" "$F2"
cleanup() {
  ip netns pids $A 2>/dev/null | xargs -r kill 2>/dev/null
  ip netns pids $B 2>/dev/null | xargs -r kill 2>/dev/null
  ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null
  rm -rf "$F1" "$F2" "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
[ -x "$SV" ] || { echo "no $SV: build it first (cargo build --release ...)" >&2; exit 1; }
ip netns add $A && ip netns add $B || exit 1
ip link add vA netns $A type veth peer name vB netns $B
ip -n $A link set vA mtu "$MTU"; ip -n $B link set vB mtu "$MTU"
ip -n $A addr add 10.201.0.1/24 dev vA; ip -n $B addr add 10.201.0.2/24 dev vB
ip -n $A link set vA up; ip -n $B link set vB up; ip -n $A link set lo up; ip -n $B link set lo up
sleep 2  # UCX finds no device whose link is not up yet

# server-cmd client-cmd: the server in A, the client in B (bounded), the client's output out.
run_pair() {
  ip netns exec $A env SOFTVERBS_FABRIC="$F1" timeout 150 bash -c "$1" > "$OUT/server.txt" 2>&1 &
  local sp=$!; sleep 0.6
  ip netns exec $B env SOFTVERBS_FABRIC="$F2" timeout 120 bash -c "$2" > "$OUT/client.txt" 2>&1
  wait $sp
  cat "$OUT/client.txt"
}
ucx() { echo "UCX_TLS=tcp UCX_NET_DEVICES=$1 ucx_perftest"; }
sample() { # name value
  if [ -n "$2" ]; then echo "$1 $2" | tee -a "$OUT/samples"; return; fi
  echo "$1 (no result; the server's and the client's last lines follow)"
  tail -n 5 "$OUT/server.txt" "$OUT/client.txt" | sed 's/^/    /'
}
sv_write() {
  run_pair "$1 run --netdev vA -- ib_write_bw -x 1 -s 1048576 -n $WRITE_ITERS" \
    "$1 run --netdev vB -- ib_write_bw -x 1 -s 1048576 -n $WRITE_ITERS 10.201.0.1" |
    awk '/^ *1048576/{print $4}'
}
sv_lat() {
  run_pair "$1 run --netdev vA -- ib_send_lat -x 1 -s 8 -n $LAT_ITERS" \
    "$1 run --netdev vB -- ib_send_lat -x 1 -s 8 -n $LAT_ITERS 10.201.0.1" |
    awk '/^ *8 /{print $5}'
}
for r in $(seq "$ROUNDS"); do
  echo "== round $r ($(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"
  sample write_MBps.softverbs "$(sv_write "$SV")"
  [ -n "$SV_BASE" ] && sample write_MBps.base "$(sv_write "$SV_BASE")"
  # ucx_perftest's Final line: iterations, latency p50, average, overall (µs), bandwidth
  # average, overall (MB/s), message rate average, overall: the overall bandwidth.
  sample write_MBps.ucx_tcp "$(run_pair "$(ucx vA) -t ucp_put_bw -s 1048576 -n $WRITE_ITERS" \
    "$(ucx vB) 10.201.0.1 -t ucp_put_bw -s 1048576 -n $WRITE_ITERS" |
    awk '/Final:/{print $7}')"
  sample lat_us.softverbs "$(sv_lat "$SV")"
  [ -n "$SV_BASE" ] && sample lat_us.base "$(sv_lat "$SV_BASE")"
  # tag_lat's Final line: the latency's median (p50, µs, half a round trip).
  sample lat_us.ucx_tcp "$(run_pair "$(ucx vA) -t tag_lat -s 8 -n $LAT_ITERS" \
    "$(ucx vB) 10.201.0.1 -t tag_lat -s 8 -n $LAT_ITERS" | awk '/Final:/{print $3}')"
  # fi_pingpong: usec/xfer, its 7th field (a mean, not a median).
  sample lat_us.fi_tcp_pingpong "$(run_pair "fi_pingpong -p tcp -e msg -S 8 -I $LAT_ITERS" \
    "fi_pingpong -p tcp -e msg -S 8 -I $LAT_ITERS 10.201.0.1" | awk '/^8 /{print $7}')"
done
# A datagram a full socket buffer dropped (RcvbufErrors) costs the transport a retransmission.
for ns in $A $B; do
  ip netns exec $ns awk '/^Udp:/{if (h) {for (i=2;i<=NF;i++) printf "%s=%s ", n[i], $i; print ""} else {for (i=2;i<=NF;i++) n[i]=$i; h=1}}' /proc/net/snmp |
    sed "s/^/UDP counters of ${ns%%[0-9]*}: /"
done
echo "== medians over $ROUNDS rounds (MTU $MTU, $(nproc) CPUs, $(uname -r))"
awk '{v[$1]=v[$1] " " $2} END {for (k in v) print k, v[k]}' "$OUT/samples" | sort |
  while read -r name vals; do
    med=$(echo "$vals" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
    echo "$name median $med of [$vals ]"
    echo "$name $med" >> "$OUT/medians"
  done
m() { awk -v k="$1" '$1==k{print $2}' "$OUT/medians"; }
ratio() { [ -n "$(m "$1")" ] && [ -n "$(m "$2")" ] && awk -v a="$(m "$1")" -v b="$(m "$2")" -v l="$3" 'BEGIN{printf "%s: %.2fx\n", l, a/b}'; }
ratio write_MBps.softverbs write_MBps.ucx_tcp "1 MiB WRITE, softverbs / UCX tcp put_bw (target >= 1.0)"
ratio lat_us.softverbs lat_us.ucx_tcp "8 B SEND half round trip, softverbs / UCX tcp tag_lat (target <= 1.2)"
[ -n "$SV_BASE" ] && ratio write_MBps.softverbs write_MBps.base "1 MiB WRITE, this build / base"
[ -n "$SV_BASE" ] && ratio lat_us.softverbs lat_us.base "8 B SEND latency, this build / base"
exit 0
