#!/usr/bin/env bash
# Tests scripts/mutants.sh's bookkeeping with scripts/fake-cargo/cargo in place of cargo-mutants
# (a second, nothing is built): the two stages of the store and log groups, the merged lists and
# times, the anchored selectors, the one-stage runs and the refusals. Run by .ci/run. It works in
# a temporary clone of this repository, whose committed state it needs (the script refuses a
# dirty impl/src), so commit before running it.
set -euo pipefail
root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$root" "$work/repo"
cp "$root/scripts/mutants.sh" "$root/scripts/fake-cargo/cargo" "$work/"
export PATH="$work/fake:$PATH" FAKE_CARGO_LOG="$work/calls" FAKE_CARGO_SELECTORS="$work/selectors"
mkdir "$work/fake" && mv "$work/cargo" "$work/fake/cargo"
cd "$work/repo"
failures=0

# check WHAT ACTUAL EXPECTED: one assertion.
check() {
    if [[ $2 != "$3" ]]; then
        echo "FAIL: $1: got [$2], expected [$3]" >&2
        failures=$((failures + 1))
    fi
}

# run GROUP K/N [VAR=VALUE...]: the script under test, its exit status echoed.
run() {
    local group=$1 shard=$2
    shift 2
    : >"$FAKE_CARGO_LOG"
    rm -f "$FAKE_CARGO_SELECTORS"
    local status=0
    env "$@" bash "$work/mutants.sh" "$group" "$shard" >"$work/stdout" 2>"$work/stderr" || status=$?
    echo "$status"
}

lists() {
    local d=$1
    echo "caught=$(paste -sd, "$d/caught.txt") missed=$(paste -sd, "$d/missed.txt") timeout=$(paste -sd, "$d/timeout.txt") unviable=$(paste -sd, "$d/unviable.txt")"
}

# The store in two stages: B and C meet the whole oracle, B is caught there, C times out again.
check "staged: exit" "$(run store 0/25)" 0
d=mutants/store/0of25
check "staged: lists" "$(lists $d)" "caught=a.rs:1:1: A,b.rs:2:2: B (x*) [y] {1}+?|^$. missed= timeout=c.rs:3:3: C unviable=d.rs:4:4: D"
check "staged: times add both stages" "$(cut -f1-3 $d/times.tsv | paste -sd' ')" "CaughtMutant	10.0	5.0 CaughtMutant	21.0	260.0 Timeout	21.0	840.0 Unviable	2.0	0.0"
check "staged: selectors" "$(paste -sd' ' "$FAKE_CARGO_SELECTORS")" '^b\.rs:2:2: B \(x\*\) \[y\] \{1\}\+\?\|\^\$\.$ ^c\.rs:3:3: C$'
check "staged: stage 1 is the consumer's tests" "$(sed -n 1p "$FAKE_CARGO_LOG" | grep -c -- '--shard 0/25 .*--test-package consumer')" 1
check "staged: stage 2 is the whole oracle" "$(sed -n 2p "$FAKE_CARGO_LOG" | grep -c -- '--test-package\|--shard')" 0
check "staged: summary" "$(grep '^oracle:' $d/summary.txt)" "oracle: staged (stage 1 the consumer's tests, exit 3; stage 2 the whole oracle for 2 mutants, exit 3)"
check "staged: summary of stage 2" "$(grep '^stage 2:' $d/summary.txt)" "stage 2: 2 mutants tested in 2m: 1 caught, 1 timeouts"

# A stage 2 that does not test every mutant it was given is a failure to run, not a result.
check "lost mutant: exit" "$(run log 1/48 FAKE_STAGE2_LOSES=yes)" 1
check "lost mutant: message" "$(cat "$work/stderr")" "stage 2 tested 1 mutants, not the 2 stage 1 left"
check "lost mutant: summary" "$(grep '^stage 2:' mutants/log/1of48/summary.txt)" "stage 2: 1 mutant tested in 1m: 1 caught"

# One stage: the shard's lists are cargo-mutants' own.
check "one stage: exit" "$(run log 2/48 MUTANTS_STAGED=no)" 0
check "one stage: lists" "$(lists mutants/log/2of48)" "caught=a.rs:1:1: A missed=b.rs:2:2: B (x*) [y] {1}+?|^$. timeout=c.rs:3:3: C unviable=d.rs:4:4: D"
check "one stage: one run, whole oracle" "$(wc -l <"$FAKE_CARGO_LOG") $(grep -c -- '--test-package' "$FAKE_CARGO_LOG" || true)" "1 0"
check "owner: one stage" "$(run owner 3/20) $(grep '^oracle:' mutants/owner/3of20/summary.txt)" "0 oracle: whole"

# Refusals: a bad MUTANTS_STAGED, a bad shard, a dirty impl/src; nothing runs.
check "bad MUTANTS_STAGED" "$(run store 4/25 MUTANTS_STAGED=maybe) $(cat "$work/stderr") $(wc -l <"$FAKE_CARGO_LOG")" "2 MUTANTS_STAGED must be yes or no, not 'maybe' 0"
check "bad shard" "$(run store 25/25) $(wc -l <"$FAKE_CARGO_LOG")" "2 0"
echo "// a local edit" >>impl/src/lib.rs
check "dirty impl/src" "$(run store 5/25) $(wc -l <"$FAKE_CARGO_LOG")" "2 0"

if ((failures > 0)); then
    echo "scripts/mutants-selftest.sh: $failures failures (rerun: bash scripts/mutants-selftest.sh)" >&2
    exit 1
fi
echo "scripts/mutants-selftest.sh: every check passed"
