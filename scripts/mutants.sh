#!/usr/bin/env bash
# One shard of the mutation run of issue 15 (MUTANTS.md): `scripts/mutants.sh GROUP K/N`.
#
#   GROUP  owner (owner.rs, owner/, strategy.rs) | store (store/) | log (log/, replication/)
#   K/N    shard K of N, K counted from 0 (cargo-mutants' `--shard`, slice sharding: shard K
#          holds consecutive mutants of the group's list, so a shard stays within a file or two)
#
# The oracle and the scope are in .cargo/mutants.toml. Mutants are applied in place (this
# worktree's target/ is reused, so a mutant rebuilds only the workspace's crates), hence:
# impl/src must be clean before, and is checked clean after. Every cargo process runs under
# `nice -n 19` with CARGO_BUILD_JOBS (default 1): the machine is shared.
#
# Environment:
#   MUTANTS_BASELINE=skip  skip the unmutated baseline (about 2 min): fine for a further shard
#                          of a commit whose baseline another shard already ran
#   MUTANTS_TIMEOUT=S      the test timeout in seconds (default 420: the whole oracle takes
#                          about 2.5 min on a quiet machine, and a hang of `consume` fails its
#                          test in 2 min; cargo-mutants' baseline times the mutated package's
#                          tests only, not conformance's, so its auto-set timeout is too short)
#   CARGO_BUILD_JOBS=J     build jobs (default 1)
#
# Results: target/mutants/GROUP/KofN/mutants.out (cargo-mutants' output with every log, not
# committed) and mutants/GROUP/KofN/ (caught, missed, timeout and unviable lists, times.tsv:
# each mutant's outcome, build and test seconds, and a summary: commit, dates, counts;
# committed). Exit status 0 when the shard ran to its end, whatever it
# found (missed mutants are results, not failures); non-zero when it could not run.
set -euo pipefail

usage() {
    echo "usage: scripts/mutants.sh owner|store|log K/N   (K from 0; see MUTANTS.md)" >&2
    exit 2
}
[[ $# -eq 2 ]] || usage
group=$1
shard=$2
[[ $shard =~ ^([0-9]+)/([1-9][0-9]*)$ ]] || usage
k=${BASH_REMATCH[1]}
n=${BASH_REMATCH[2]}
((k < n)) || usage

# Each group is the whole scope minus the other groups' files (the config's globs and these
# are appended, so only exclusions can narrow it).
owner_globs=(-e 'impl/src/owner.rs' -e 'impl/src/owner/**' -e 'impl/src/strategy.rs')
store_globs=(-e 'impl/src/store/**')
log_globs=(-e 'impl/src/log/**')
case $group in
owner) excludes=("${store_globs[@]}" "${log_globs[@]}") ;;
store) excludes=("${owner_globs[@]}" "${log_globs[@]}") ;;
log) excludes=("${owner_globs[@]}" "${store_globs[@]}") ;;
*) usage ;;
esac

root=$(git rev-parse --show-toplevel)
cd "$root"
if ! git diff --quiet HEAD -- impl/src; then
    echo "impl/src has uncommitted changes: mutants are applied in place, commit or stash first" >&2
    exit 2
fi

export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}
baseline=${MUTANTS_BASELINE:-run}
timeout=${MUTANTS_TIMEOUT:-420}
args=(--in-place --no-shuffle --shard "$k/$n" "${excludes[@]}" --baseline "$baseline" --timeout "$timeout")

name="${k}of${n}"
out="target/mutants/$group/$name"
record="mutants/$group/$name"
mkdir -p "$out" "$record"
listed=$(nice -n 19 cargo mutants --list "${excludes[@]}" | wc -l)
started=$(date -u +%FT%TZ)
commit=$(git rev-parse HEAD)
echo "$group shard $k/$n of $listed mutants, $(cargo mutants --version), commit ${commit:0:7}"

status=0
nice -n 19 cargo mutants "${args[@]}" -o "$out" 2>&1 | tee "$out/console.txt" || status=$?
# cargo-mutants: 0 all caught, 2 some missed, 3 some timed out; anything else is a failure
# to run (4: the baseline failed, 1: bad usage or an interruption).
finished=$(date -u +%FT%TZ)

if ! git diff --quiet HEAD -- impl/src; then
    echo "impl/src is left mutated (an interrupted run): restoring it from HEAD" >&2
    git checkout HEAD -- impl/src
fi

results="$out/mutants.out"
for list in caught missed timeout unviable; do
    if [[ -f $results/$list.txt ]]; then
        sort "$results/$list.txt" >"$record/$list.txt"
    else
        : >"$record/$list.txt"
    fi
done
# Per mutant: its outcome and build and test seconds, for the estimates of MUTANTS.md.
if [[ -f $results/outcomes.json ]]; then
    python3 -c '
import json, sys
for o in json.load(open(sys.argv[1]))["outcomes"]:
    s = o["scenario"]
    name = s["Mutant"]["name"] if isinstance(s, dict) else s
    t = {p["phase"]: p["duration"] for p in o["phase_results"]}
    print("%s\t%.1f\t%.1f\t%s" % (o["summary"], t.get("Build", 0), t.get("Test", 0), name))
' "$results/outcomes.json" >"$record/times.tsv"
fi
{
    echo "group: $group"
    echo "shard: $k/$n of $listed mutants in the group"
    echo "commit: $commit"
    echo "tool: $(cargo mutants --version)"
    echo "started: $started"
    echo "finished: $finished"
    echo "test timeout: $timeout s"
    echo "exit: $status"
    for list in caught missed timeout unviable; do
        echo "$list: $(wc -l <"$record/$list.txt")"
    done
    grep -h -E '(Unmutated baseline|Auto-set test timeout|mutants tested in)' "$out/console.txt" || true
} >"$record/summary.txt"
cat "$record/summary.txt"
case $status in
0 | 2 | 3) exit 0 ;;
*) exit "$status" ;;
esac
