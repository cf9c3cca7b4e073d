#!/usr/bin/env bash
# perftest through softverbs' libibverbs.so.1 against the same measurement by `softverbs perf`,
# in alternated rounds so both see the same host load (docs/performance.md, "C programs through
# libibverbs.so.1"). Needs perftest installed and a release build:
#   cargo build --release -p softverbs -p softverbs-ibverbs
# Usage: scripts/c-vs-rust.sh [ROUNDS]   (CARGO_TARGET_DIR is honoured)
set -u
cd "$(dirname "$0")/.."
rounds=${1:-5}
S="${CARGO_TARGET_DIR:-target}/release/softverbs"
[ -x "$S" ] || { echo "c-vs-rust: $S not found; build it first (see the header)" >&2; exit 2; }
command -v ib_send_lat >/dev/null || { echo "c-vs-rust: perftest is not installed" >&2; exit 2; }
SOFTVERBS_FABRIC=$(mktemp -d)
export SOFTVERBS_FABRIC
chmod 700 "$SOFTVERBS_FABRIC"
trap 'rm -rf "$SOFTVERBS_FABRIC"' EXIT
# One perftest pair: the server in the background, the client against localhost.
pair() {
  timeout 120 "$S" run -- "$@" >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  timeout 120 "$S" run -- "$@" localhost 2>&1
  wait "$server"
}
for r in $(seq "$rounds"); do
  a=$(pair ib_send_lat -s 8 -n 20000 -x 1 | awk '$1=="8"{print $5}')
  b=$(timeout 120 "$S" perf send_lat -s 8 -n 20000 2>&1 | awk '$1=="8"{print $5}')
  c=$(pair ib_write_bw -s 1048576 -n 2000 -x 1 | awk '$1=="1048576"{print $4}')
  d=$(timeout 120 "$S" perf write_bw -s 1048576 -n 2000 2>&1 | awk '$1=="1048576"{print $4}')
  echo "round $r: ib_send_lat t_typical $a us | perf send_lat t_typical $b us | ib_write_bw avg $c MiB/s | perf write_bw avg $d MiB/s"
done
