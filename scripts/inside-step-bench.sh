#!/usr/bin/env bash
# The cost of kill points inside steps: the atomic-fenced corpus traces replayed through the
# Python example (`python3 examples/python/atomic_fenced.py`, as README runs it) with the kill
# points on (the default) and off (`--inside-step off`), alternately, ROUNDS times each
# (default 3), in a release build. Prints each run's wall seconds, traces/s and kill points/s,
# then the medians and the ratio on / off. Not part of CI: a benchmark, to be read on a quiet
# machine (the ratio, measured in one run, is the result).
set -euo pipefail
rounds=${1:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "usage: scripts/inside-step-bench.sh [ROUNDS >= 1]" >&2; exit 2; }
cd "$(git rev-parse --show-toplevel)"
cargo build --release --locked -p conformance >/dev/null 2>&1 || { echo "cargo build --release -p conformance failed" >&2; exit 1; }
exe=target/release/conformance
worker='python3 examples/python/atomic_fenced.py'
declare -A wall
points=0
for ((round = 1; round <= rounds; round++)); do
    for switch in on off; do
        log=$(mktemp)
        start=$(date +%s.%N)
        "$exe" replay --inside-step "$switch" --worker "$worker" --strategy atomic-fenced tests/traces >"$log"
        end=$(date +%s.%N)
        seconds=$(echo "$end - $start" | bc)
        traces=$(grep -oE '^[0-9]+ passed, 0 failed' "$log" | grep -oE '^[0-9]+')
        found=$(grep -oE '[0-9]+ kill points inside' "$log" | grep -oE '^[0-9]+' || echo 0)
        rm -f "$log"
        wall[$switch]+="$seconds "
        [[ $switch == on ]] && points=$found
        printf 'round %d, kill points %s: wall %.2f s, %.2f traces/s, %.1f kill points/s (%d found)\n' \
            "$round" "$switch" "$seconds" "$(echo "$traces / $seconds" | bc -l)" "$(echo "$found / $seconds" | bc -l)" "$found"
    done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
on=$(echo "${wall[on]}" | median)
off=$(echo "${wall[off]}" | median)
printf 'median wall: on %.2f s, off %.2f s, on/off %.2fx; %d kill points per run, %.1f kill points/s\n' \
    "$on" "$off" "$(echo "$on / $off" | bc -l)" "$points" "$(echo "$points / $on" | bc -l)"
