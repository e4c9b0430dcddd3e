#!/usr/bin/env bash
# The speed of `conformance kafka app` (docs/benchmarks.md, "Your Kafka consumer"): the correct
# Python example (examples/kafka/atomic_fenced.py) with 3 instances,
#   (3 partitions, one per instance)
#   1. without faults, through the proxy and without it (the hidden --without-proxy), one run
#      after the other: records/s from the first instance's start until every record is in its
#      database (each run itself is then "not established": nothing was tried), and their ratio;
#   2. 1,000 records with 40 faults of every kind (10 kills, 10 rebalances, 10 protocol faults,
#      10 zombies): the whole run's seconds (the target: under 180 s on 2 cores). The correct
#      example commits no offsets to Kafka, so its protocol faults are not tried: the same run
#      of process_then_commit.py (an anomaly expected) shows them struck.
# A benchmark, not a test: it prints the figures and each run's last lines, and fails only when a
# run fails to run (exit 2) or the correct example's verdict is an anomaly.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p conformance --features kafka
bin=target/release/conformance
spec=examples/kafka/app.observe.toml
app=(python3 examples/kafka/atomic_fenced.py)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

run() { # NAME ARGS...: one run of ${app[@]}, its closing lines, its exit code in $code
    local name=$1
    shift
    local started=$SECONDS
    set +e
    "$bin" kafka app --observe "$spec" --dir "$dir/$name" "$@" -- "${app[@]}" >"$dir/$name.log" 2>&1
    code=$?
    set -e
    echo "== $name: exit $code in $((SECONDS - started)) s"
    grep -E '^(tried|timing|  a |  an |NO ANOMALY|ANOMALY|NOT ESTABLISHED)' "$dir/$name.log" || tail -3 "$dir/$name.log"
    if [ "$code" = 2 ] || { [ "$code" = 1 ] && [ "${expect_anomaly:-0}" = 0 ]; }; then
        cat "$dir/$name.log" >&2
        exit 1
    fi
}

rate() { # NAME: the records/s of a run's timing line
    sed -n 's/.*(\([0-9]*\) records\/s.*/\1/p' "$dir/$1.log"
}

none=(--records 1000 --partitions 3 --instances 3 --kills 0 --churn 0 --protocol-faults 0 --zombies 0)
run through-proxy "${none[@]}"
run without-proxy "${none[@]}" --without-proxy
echo "the proxy's cost: $(rate through-proxy) records/s through it, $(rate without-proxy) without it (one run each, one after the other)"
every=(--records 1000 --partitions 3 --instances 3 --kills 10 --churn 10 --protocol-faults 10 --zombies 10)
run every-fault "${every[@]}"
app=(python3 examples/kafka/process_then_commit.py)
expect_anomaly=1 run every-fault-committing "${every[@]}"
