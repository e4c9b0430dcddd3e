#!/usr/bin/env bash
# One shard of the mutation run (MUTANTS.md): `scripts/mutants.sh GROUP K/N`.
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
#   MUTANTS_STAGED=no      run the store or log group in one stage (see below)
#
# Stages. `cargo test` runs conformance's binaries first (its corpus, 30-60 s, and its walks,
# 2-4 min), and a mutant of the store or the log is mostly caught by the consumer's own tests,
# which run after them: such a mutant cost 3-6 min to be caught. So the store and log groups run
# in two stages: stage 1 tests every mutant with the consumer's tests only (`--test-package
# consumer`, the same `cargo test` arguments); stage 2 tests each mutant stage 1 did not catch
# (missed or timed out) with the whole oracle of .cargo/mutants.toml, selected by name with
# `-F '^NAME$'`. A test that fails in stage 1 is part of the whole oracle, and every other
# mutant meets the whole oracle in stage 2; only a mutant that hangs a conformance binary and
# fails a consumer test differs (caught, not a timeout: MUTANTS.md). The owner group
# runs in one stage (conformance's corpus, which runs first, catches most of its mutants).
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

staged=no
case $group in
owner) ;;
store | log) staged=${MUTANTS_STAGED:-yes} ;;
esac
if [[ $staged != yes && $staged != no ]]; then
    echo "MUTANTS_STAGED must be yes or no, not '$staged'" >&2
    exit 2
fi

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

# One cargo-mutants run into $1 (its -o directory) with the further arguments; its exit status
# (0 all caught, 2 some missed, 3 some timed out; anything else is a failure to run: 4 the
# baseline failed, 1 bad usage or an interruption) is left in $status.
run_mutants() {
    local dir=$1
    shift
    mkdir -p "$dir"
    status=0
    nice -n 19 cargo mutants "$@" -o "$dir" 2>&1 | tee "$dir/console.txt" || status=$?
    if ! git diff --quiet HEAD -- impl/src; then
        echo "impl/src is left mutated (an interrupted run): restoring it from HEAD" >&2
        git checkout HEAD -- impl/src
    fi
}

# The lines of cargo-mutants' list $2 in results directory $1 (none when it wrote no list).
outcome_list() {
    if [[ -f $1/$2.txt ]]; then cat "$1/$2.txt"; fi
}

# Per mutant of results directory $1: its outcome and build and test seconds.
outcome_times() {
    [[ -f $1/outcomes.json ]] || return 0
    python3 -c '
import json, sys
for o in json.load(open(sys.argv[1]))["outcomes"]:
    s = o["scenario"]
    name = s["Mutant"]["name"] if isinstance(s, dict) else s
    t = {p["phase"]: p["duration"] for p in o["phase_results"]}
    print("%s\t%.1f\t%.1f\t%s" % (o["summary"], t.get("Build", 0), t.get("Test", 0), name))
' "$1/outcomes.json"
}

stage1=$out
stage2=$out/whole-oracle
rm -rf "$stage2"
if [[ $staged == yes ]]; then
    run_mutants "$stage1" "${args[@]}" --test-package consumer
else
    run_mutants "$stage1" "${args[@]}"
fi
stage1_status=$status
stage1_results=$stage1/mutants.out
rerun=$( (outcome_list "$stage1_results" missed && outcome_list "$stage1_results" timeout) | sort)
rerun_count=$(grep -c . <<<"$rerun" || true)
stage2_status=none
if [[ $staged == yes && -n $rerun && ($stage1_status -eq 0 || $stage1_status -eq 2 || $stage1_status -eq 3) ]]; then
    # Each name as an anchored regex: the names hold regex metacharacters (`(`, `*`, `|`, ...).
    selectors=()
    while IFS= read -r name; do
        selectors+=(-F "^$(sed 's/[][\\.+*?(){}|^$]/\\&/g' <<<"$name")\$")
    done <<<"$rerun"
    echo "stage 2: $rerun_count mutants not caught by the consumer's tests, against the whole oracle"
    run_mutants "$stage2" --in-place --no-shuffle "${excludes[@]}" --baseline "$baseline" --timeout "$timeout" "${selectors[@]}"
    stage2_status=$status
    if [[ $status -eq 0 || $status -eq 2 || $status -eq 3 ]]; then
        # Every name must have selected exactly its mutant: a lost one would go unreported.
        tested=$(outcome_times "$stage2/mutants.out" | grep -v -c $'\tBaseline$' || true)
        if [[ $tested -ne $rerun_count ]]; then
            echo "stage 2 tested $tested mutants, not the $rerun_count stage 1 left" >&2
            status=1
        fi
    fi
fi
finished=$(date -u +%FT%TZ)

# The record: stage 1's caught and unviable, plus stage 2's; the missed and timeouts of the
# last stage that judged them (stage 2 when it ran, its directory is gone otherwise).
# times.tsv has each mutant's final outcome, with the seconds of both stages added for a mutant
# tested twice.
judged=$stage1_results
if [[ $stage2_status != none ]]; then judged=$stage2/mutants.out; fi
for list in caught missed timeout unviable; do
    case $list in
    caught | unviable) (outcome_list "$stage1_results" "$list" && outcome_list "$stage2/mutants.out" "$list") ;;
    missed | timeout) outcome_list "$judged" "$list" ;;
    esac | sort >"$record/$list.txt"
done
python3 -c '
import sys
rows = {}
for path in sys.argv[1:]:
    for line in open(path):
        outcome, build, test, name = line.rstrip("\n").split("\t", 3)
        b, t = rows.get(name, ("", 0.0, 0.0))[1:]
        rows[name] = (outcome, b + float(build), t + float(test))
for name, (outcome, build, test) in rows.items():
    print("%s\t%.1f\t%.1f\t%s" % (outcome, build, test, name))
' <(outcome_times "$stage1_results") <(outcome_times "$stage2/mutants.out") >"$record/times.tsv"
{
    echo "group: $group"
    echo "shard: $k/$n of $listed mutants in the group"
    echo "commit: $commit"
    echo "tool: $(cargo mutants --version)"
    echo "started: $started"
    echo "finished: $finished"
    echo "test timeout: $timeout s"
    if [[ $staged == yes ]]; then
        echo "oracle: staged (stage 1 the consumer's tests, exit $stage1_status; stage 2 the whole oracle for $rerun_count mutants, exit $stage2_status)"
    else
        echo "oracle: whole"
    fi
    echo "exit: $status"
    for list in caught missed timeout unviable; do
        echo "$list: $(wc -l <"$record/$list.txt")"
    done
    grep -h -E '(Unmutated baseline|Auto-set test timeout|mutants? tested in)' "$stage1/console.txt" || true
    if [[ -f $stage2/console.txt ]]; then
        grep -h -E 'mutants? tested in' "$stage2/console.txt" | sed 's/^/stage 2: /' || true
    fi
} >"$record/summary.txt"
cat "$record/summary.txt"
case $status in
0 | 2 | 3) exit 0 ;;
*) exit "$status" ;;
esac
