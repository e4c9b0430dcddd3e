#!/usr/bin/env bash
# The speed of `conformance kafka app` (docs/benchmarks.md, "Your Kafka consumer"): the correct
# Python example (examples/kafka/atomic_fenced.py) with 3 instances,
#   (3 partitions, one per instance)
#   1. without faults: records/s from the first instance's start until every record is in
#      its database (the run itself is then "not established": nothing was tried);
#   2. 1,000 records with 20 kills: the whole run's seconds (the target: under 120 s on 2 cores).
# A benchmark, not a test: it prints the figures and each run's last lines, and fails only when a
# run fails to run (exit 2) or its verdict is an anomaly.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p conformance --features kafka
bin=target/release/conformance
spec=examples/kafka/app.observe.toml
app=(python3 examples/kafka/atomic_fenced.py)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

run() { # NAME ARGS...: one run, its closing lines, its exit code in $code
    local name=$1
    shift
    local started=$SECONDS
    set +e
    "$bin" kafka app --observe "$spec" --dir "$dir/$name" "$@" -- "${app[@]}" >"$dir/$name.log" 2>&1
    code=$?
    set -e
    echo "== $name: exit $code in $((SECONDS - started)) s"
    grep -E '^(tried|timing|NO ANOMALY|ANOMALY|NOT ESTABLISHED)' "$dir/$name.log" || tail -3 "$dir/$name.log"
    if [ "$code" = 1 ] || [ "$code" = 2 ]; then
        cat "$dir/$name.log" >&2
        exit 1
    fi
}

run no-faults --records 1000 --partitions 3 --instances 3 --kills 0 --churn 0
run kills --records 1000 --partitions 3 --instances 3 --kills 20 --churn 0
