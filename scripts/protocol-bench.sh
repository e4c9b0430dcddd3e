#!/usr/bin/env bash
# The open protocol's cost: the whole corpus replayed against this consumer as
# worker processes (the internal line protocol) and over the open JSON protocol (`--mode
# protocol`: this consumer's `serve`, plus the store-role process), alternately, ROUNDS times
# each (default 5), in a release build. Prints each run's wall and CPU seconds (children
# included) and the median ratios protocol / process. Not part of CI: a benchmark, to be read
# on a quiet machine (the ratio, not the seconds, is the result).
set -euo pipefail
rounds=${1:-5}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "usage: scripts/protocol-bench.sh [ROUNDS >= 1]" >&2; exit 2; }
cd "$(git rev-parse --show-toplevel)"
cargo build --release --locked -p conformance >/dev/null 2>&1 || { echo "cargo build --release -p conformance failed" >&2; exit 1; }
exe=target/release/conformance
declare -A wall cpu
for ((round = 1; round <= rounds; round++)); do
    for mode in process protocol; do
        out=$( { /usr/bin/time -f "%e %U %S" "$exe" replay --mode "$mode" tests/traces >/dev/null; } 2>&1 | tail -n 1)
        read -r w u s <<<"$out"
        c=$(echo "$u + $s" | bc)
        wall[$mode]+="$w "
        cpu[$mode]+="$c "
        echo "round $round $mode: wall $w s, cpu $c s"
    done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
for kind in wall cpu; do
    declare -n times=$kind
    p=$(echo "${times[process]}" | median)
    j=$(echo "${times[protocol]}" | median)
    echo "median $kind: process $p s, protocol $j s, protocol/process $(echo "scale=2; $j / $p" | bc)"
done
