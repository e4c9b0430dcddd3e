#!/usr/bin/env bash
# Re-runs the witnesses behind MUTANTS.md's killed survivors: for every `killed`
# row of mutants/GROUP/verdicts.tsv, applies its patch (the mutant, as a diff against this
# tree) to impl/src, builds the named tests, runs them (they must fail), and restores impl/src.
#
#   scripts/mutants-verify.sh GROUP [TEXT]    only the rows whose mutant contains TEXT
#
# A survivor counts as killed only while this passes: a patch that no longer applies, a mutant
# that no longer builds, tests that pass or run past VERIFY_TIMEOUT_S (default 600: every wait
# of the consumer's tests is bounded at 120 s, so a hang is a failure, not a cut) each make
# the script exit 1 naming the row. Output: one line per row, then `verified: K of N killed`.
# Logs: target/mutants-verify/GROUP/. Not part of CI (minutes per row).
set -euo pipefail

[[ $# -ge 1 && $# -le 2 ]] || {
    echo "usage: scripts/mutants-verify.sh owner|store|log [TEXT]" >&2
    exit 2
}
group=$1
only=${2:-}
root=$(git rev-parse --show-toplevel)
cd "$root"
verdicts="mutants/$group/verdicts.tsv"
[[ -f $verdicts ]] || {
    echo "no verdicts for $group: $verdicts is missing" >&2
    exit 2
}
if ! git diff --quiet HEAD -- impl/src; then
    echo "impl/src has uncommitted changes: the patches are applied in place, commit or stash first" >&2
    exit 2
fi
trap 'git checkout -q HEAD -- impl/src' EXIT
logs="target/mutants-verify/$group"
mkdir -p "$logs"
timeout_s=${VERIFY_TIMEOUT_S:-600}

rows=0
killed=0
while IFS=$'\t' read -r mutant verdict evidence patch; do
    [[ $mutant == \#* || $verdict != killed ]] && continue
    [[ -z $only || $mutant == *"$only"* ]] || continue
    rows=$((rows + 1))
    log="$logs/$(basename "$patch" .diff).log"
    read -r -a args <<<"$evidence"
    if ! git apply -C1 "$patch" 2>"$log"; then
        echo "DOES NOT APPLY  $mutant ($patch)"
        continue
    fi
    if ! nice -n 19 cargo test "${args[@]}" --no-run >>"$log" 2>&1; then
        echo "DOES NOT BUILD  $mutant (cargo test ${args[*]}; $log)"
    else
        started=$SECONDS
        status=0
        timeout "$timeout_s" nice -n 19 cargo test "${args[@]}" >>"$log" 2>&1 || status=$?
        took=$((SECONDS - started))
        case $status in
        0) echo "NOT KILLED      $mutant (cargo test ${args[*]} passes; $log)" ;;
        124) echo "TIMEOUT         $mutant (cargo test ${args[*]} ran past ${timeout_s}s; $log)" ;;
        *)
            killed=$((killed + 1))
            failing=$(grep -m1 -E '^test .* FAILED$' "$log" || echo "exit $status")
            echo "killed in ${took}s  $mutant: $failing"
            ;;
        esac
    fi
    git checkout -q HEAD -- impl/src
done <"$verdicts"

echo "verified: $killed of $rows killed"
[[ $rows -gt 0 ]] || {
    echo "no killed row of $group${only:+ contains '$only'}" >&2
    exit 2
}
[[ $killed -eq $rows ]]
