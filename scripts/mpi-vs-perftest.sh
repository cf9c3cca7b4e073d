#!/usr/bin/env bash
# Open MPI's ping-pong over UCX's rc_verbs against perftest's ib_send_lat, both through
# `softverbs run` on this machine, in alternated rounds so both see the same host load (issue
# 30's target: the MPI half round trip within 2x of ib_send_lat's). 8-byte messages by default;
# each round prints both medians (t_typical, microseconds), and the end the median of each
# over the rounds and their ratio. Needs perftest, openmpi-bin and libopenmpi-dev (mpicc) and
# a build of softverbs with its libraries; a release build is what to measure:
#   cargo build --release -p softverbs -p softverbs-ibverbs -p softverbs-rdmacm
# Usage: scripts/mpi-vs-perftest.sh [ROUNDS [SIZE [ITERS]]]
#   PROFILE=debug uses target/debug (to check the script works, not to measure);
#   CARGO_TARGET_DIR is honoured; MPI_TLS is UCX_TLS for the ranks (default rc,self: UCX's
#   rc_verbs carries the data, with ud_verbs for the wire-up rc_verbs alone cannot do).
set -u
cd "$(dirname "$0")/.."
rounds=${1:-5}
size=${2:-8}
iters=${3:-20000}
S="${CARGO_TARGET_DIR:-target}/${PROFILE:-release}/softverbs"
die() { echo "mpi-vs-perftest: $*" >&2; exit 2; }
[ -x "$S" ] || die "$S not found; build it first (see the header)"
for t in ib_send_lat mpirun mpicc; do command -v "$t" >/dev/null || die "$t is not installed"; done
work=$(mktemp -d)
SOFTVERBS_FABRIC="$work/fabric"
export SOFTVERBS_FABRIC
mkdir -m 700 "$SOFTVERBS_FABRIC"
trap 'rm -rf "$work"' EXIT
mpicc -O2 -Wall -o "$work/mpi_lat" scripts/mpi_lat.c || die "mpicc failed"
# One perftest pair: the server in the background, the client against localhost; t_typical.
perftest() {
  timeout 120 "$S" run -- ib_send_lat -s "$size" -n "$iters" -x 1 >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  timeout 120 "$S" run -- ib_send_lat -s "$size" -n "$iters" -x 1 localhost 2>&1 |
    awk -v s="$size" '$1==s{print $5}'
  wait "$server"
}
# Two ranks of mpi_lat over pml ucx on the first soft device; its t_typical.
mpi() {
  timeout 300 "$S" run -- mpirun --allow-run-as-root --oversubscribe -np 2 \
    --mca pml ucx --mca btl self -x UCX_TLS="${MPI_TLS:-rc,self}" \
    -x UCX_NET_DEVICES=softverbs0:1 "$work/mpi_lat" "$size" "$iters" 2>&1 |
    awk -v s="$size" '$1==s{print $4}'
}
median() { sort -g | awk '{v[NR]=$1} END{if (NR) print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
: >"$work/a"
: >"$work/b"
for r in $(seq "$rounds"); do
  a=$(perftest)
  b=$(mpi)
  echo "round $r: ib_send_lat t_typical ${a:-failed} us | MPI (UCX ${MPI_TLS:-rc,self}) t_typical ${b:-failed} us"
  [ -n "$a" ] && echo "$a" >>"$work/a"
  [ -n "$b" ] && echo "$b" >>"$work/b"
done
ma=$(median <"$work/a")
mb=$(median <"$work/b")
[ -n "$ma" ] && [ -n "$mb" ] || die "no result from one of the two (run a round by hand to see why)"
echo "median over $rounds rounds, $size B: ib_send_lat $ma us, MPI $mb us, ratio MPI/ib_send_lat $(awk -v a="$ma" -v b="$mb" 'BEGIN{printf "%.2f", b/a}')"
